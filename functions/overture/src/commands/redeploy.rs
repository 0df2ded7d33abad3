//! `overture redeploy ID`: a new deployment of a recorded deployment's request (see
//! [`super::redrive`]).

use super::redrive::AgainArgs;

/// `overture redeploy`.
#[derive(clap::Args)]
pub struct RedeployArgs {
    /// The recorded deployment: its id, its name, or TENANT/NAME.
    pub id: String,
    /// A name for the new deployment (as `deploy --name`); it never takes the old one's,
    /// which that one keeps until it is destroyed.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub again: AgainArgs,
}
