//! The user's cloud token: read from `--token-file` or `OS_TOKEN`, and checked against the
//! cloud's identity service before anything is recorded.

use std::path::{Path, PathBuf};

use clap::Args;
use overture_openstack::{self as openstack, CloudError, TokenInfo};
use secrecy::{ExposeSecret, SecretString};

use crate::Failure;

/// The longest token accepted: Keystone's Fernet tokens are under 300 characters, PKI tokens of
/// old clouds were a few kilobytes.
const MAX_TOKEN: usize = 16 * 1024;

/// How a command is given the user's cloud token.
#[derive(Args, Clone, Debug, Default)]
pub struct TokenArgs {
    /// A file holding the user's cloud token (otherwise the OS_TOKEN variable). Repeatable for
    /// `resume`, one per tenant.
    #[arg(long = "token-file", value_name = "FILE")]
    pub token_files: Vec<PathBuf>,
    /// The cloud's identity (Keystone v3) URL; `overture cloud up` prints the local cloud's.
    #[arg(long, env = "OS_AUTH_URL", value_name = "URL")]
    pub auth_url: Option<String>,
}

/// A token the cloud accepted, and whom it was issued to.
#[derive(Debug)]
pub struct CheckedToken {
    /// What Keystone says of it.
    pub info: TokenInfo,
    /// The token.
    pub token: SecretString,
}

impl TokenArgs {
    /// The tokens given, checked against the cloud; none when none was given.
    pub async fn check(&self) -> Result<Vec<CheckedToken>, Failure> {
        let tokens = self.read()?;
        if tokens.is_empty() {
            return Ok(vec![]);
        }
        let auth_url = self.auth_url.as_deref().ok_or_else(|| {
            Failure::BadInput(
                "--auth-url: a cloud token was given but not the cloud's identity URL; pass \
                 --auth-url URL or set OS_AUTH_URL (`overture cloud up` prints it)"
                    .into(),
            )
        })?;
        let mut checked = Vec::new();
        for (origin, token) in tokens {
            let info = openstack::validate_token(auth_url, &token)
                .await
                .map_err(|error| refused(&origin, auth_url, &error))?;
            checked.push(CheckedToken { info, token });
        }
        Ok(checked)
    }

    /// The tokens given, unchecked: the aws backend's submit function checks them itself.
    pub fn given(&self) -> Result<Vec<SecretString>, Failure> {
        Ok(self.read()?.into_iter().map(|(_, token)| token).collect())
    }

    /// The tokens given, each with where it came from.
    fn read(&self) -> Result<Vec<(String, SecretString)>, Failure> {
        if !self.token_files.is_empty() {
            return self
                .token_files
                .iter()
                .map(|file| Ok((file.display().to_string(), read_token_file(file)?)))
                .collect();
        }
        match std::env::var("OS_TOKEN") {
            Ok(text) => Ok(vec![(
                "OS_TOKEN".to_owned(),
                well_formed("the OS_TOKEN variable", text)?,
            )]),
            Err(_) => Ok(vec![]),
        }
    }
}

fn read_token_file(file: &Path) -> Result<SecretString, Failure> {
    let text = std::fs::read_to_string(file).map_err(|error| {
        Failure::BadInput(format!(
            "--token-file {}: cannot read it: {error}; write your cloud token there (for example \
             `overture cloud token --project NAME --out FILE`)",
            file.display()
        ))
    })?;
    well_formed(&format!("--token-file {}", file.display()), text)
}

/// The token without its surrounding whitespace, if it looks like one. Never echoes it.
fn well_formed(origin: &str, text: String) -> Result<SecretString, Failure> {
    let text = SecretString::from(text);
    let token = text.expose_secret().trim();
    let problem = if token.is_empty() {
        Some("it is empty")
    } else if token.len() > MAX_TOKEN {
        Some("it is too long to be a token")
    } else if !token.chars().all(|c| c.is_ascii_graphic()) {
        Some("a token is one line of printable characters, without spaces")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Failure::BadInput(format!(
            "{origin}: malformed cloud token: {problem}; put exactly the token there"
        ))),
        None => Ok(SecretString::from(token.to_owned())),
    }
}

fn refused(origin: &str, auth_url: &str, error: &CloudError) -> Failure {
    match error {
        CloudError::Unauthorized(_) => Failure::BadInput(format!(
            "{origin}: the cloud at {auth_url} refused the token (it is expired, revoked or \
             unknown); get a new one and try again"
        )),
        other => Failure::BadInput(format!(
            "--auth-url {auth_url}: could not check the token: {other}"
        )),
    }
}
