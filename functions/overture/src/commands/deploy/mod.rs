//! `overture deploy FILE...`: blueprints read and checked, then recorded and followed to their
//! end through the backend chosen; [`several`] drives more than one at once.

pub mod several;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use overture_domain::blueprint::ParsedBlueprint;
use overture_domain::secret::SecretValues;

use crate::backend::Backend;
use crate::input::{check_name_flag, parse_pairs, read_blueprint, read_secrets};
use crate::{token, Failure};

/// `overture deploy`.
#[derive(clap::Args)]
pub struct DeployArgs {
    /// The blueprint file (YAML); several deploy each, driven by this one process.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The tenant deploying; with a cloud token, the token's project id is the tenant.
    #[arg(long, env = "OVERTURE_TENANT")]
    tenant: Option<String>,
    #[command(flatten)]
    pub token: token::TokenArgs,
    /// A parameter value, as NAME=VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// A secret, as NAME=ENV_VAR: its value is read from that environment variable.
    #[arg(long = "secret", value_name = "NAME=ENV_VAR")]
    secrets: Vec<String>,
    /// How many steps of a deployment may run at once.
    #[arg(long, default_value_t = 8)]
    parallelism: usize,
    /// With several blueprints: how many deployments may run at once.
    #[arg(long, default_value_t = 16)]
    at_once: usize,
    /// A name for the deployment, unique among the tenant's deployments that are not
    /// destroyed; commands then take it in place of the id (lowercase letters, digits and
    /// '-', at most 63 characters). With one blueprint only.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Print the final status as JSON on stdout (an array of them with several blueprints).
    #[arg(long)]
    json: bool,
}

/// What a backend is given to deploy: every blueprint read and checked, with what goes with it.
pub struct Deploy<'a> {
    /// Each blueprint file, with its text and what was parsed from it; at least one.
    pub blueprints: Vec<(&'a Path, (String, ParsedBlueprint))>,
    /// `--tenant`.
    pub tenant: Option<String>,
    /// The user's token flags.
    pub token: &'a token::TokenArgs,
    /// `--param NAME=VALUE`.
    pub params: BTreeMap<String, String>,
    /// The secrets' values.
    pub secrets: SecretValues,
    /// How many deployments, and steps of each, may run at once.
    pub pace: several::Pace,
    /// Print the final status as JSON.
    pub json: bool,
    /// `--name`: checked, and given with one blueprint only.
    pub name: Option<String>,
}

impl DeployArgs {
    /// Reads and checks every blueprint before anything is recorded, then deploys them.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        check_name_flag(self.name.as_deref())?;
        if self.name.is_some() && self.files.len() > 1 {
            return Err(Failure::BadInput(
                "--name names one deployment; give one blueprint with it".into(),
            ));
        }
        let mut blueprints = Vec::with_capacity(self.files.len());
        for file in &self.files {
            blueprints.push((file.as_path(), read_blueprint(file)?));
        }
        let params = parse_pairs(&self.params, "--param", "NAME=VALUE")?;
        let secrets = read_secrets(&self.secrets)?;
        backend
            .deploy(Deploy {
                blueprints,
                tenant: self.tenant,
                token: &self.token,
                params,
                secrets,
                pace: several::Pace {
                    at_once: self.at_once,
                    parallelism: self.parallelism,
                },
                json: self.json,
                name: self.name,
            })
            .await
    }
}
