//! `overture engine`: this data directory served to every `overture deploy` on it (see
//! [`crate::handover`]).

pub use crate::handover::host::{run, EngineArgs};
