//! `overture destroy`: tearing a finished deployment down.

use std::path::Path;

use crate::Failure;

/// Destroys what the deployment's Terraform steps made.
pub async fn destroy(
    _data_dir: &Path,
    _id: &str,
    _secrets: &[String],
    _json: bool,
) -> Result<(), Failure> {
    Err(Failure::BadInput("destroy is not built yet".into()))
}
