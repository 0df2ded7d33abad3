//! `overture redeploy ID`: a new deployment of a recorded deployment's request (see
//! [`super::redrive`]).

use super::redrive::AgainArgs;

/// `overture redeploy`.
#[derive(clap::Args)]
pub struct RedeployArgs {
    /// The recorded deployment's id.
    pub id: String,
    #[command(flatten)]
    pub again: AgainArgs,
}
