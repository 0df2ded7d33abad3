//! `overture logs`: an attempt's output.

use std::path::Path;

use crate::Failure;

/// Prints an attempt's output.
pub async fn show(
    _data_dir: &Path,
    _id: &str,
    _step: &str,
    _attempt: Option<u32>,
    _follow: bool,
) -> Result<(), Failure> {
    Err(Failure::BadInput("logs is not built yet".into()))
}
