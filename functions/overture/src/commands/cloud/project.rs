//! `overture cloud token` and `delete-project`: a project, named within its Keystone domain.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::Context as _;
use serde_json::json;

use super::client::{connect, message_of};
use crate::Failure;

/// The domain projects are in unless `--domain` says otherwise, as in Keystone.
pub(super) const DEFAULT_DOMAIN: &str = "Default";

/// A project as people name it: by name, within a domain.
pub(super) struct Named<'a> {
    /// The project's (and its user's) name.
    pub(super) name: &'a str,
    /// The project's Keystone domain.
    pub(super) domain: &'a str,
}

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.domain {
            DEFAULT_DOMAIN => f.write_str(self.name),
            domain => write!(f, "{} in domain {domain}", self.name),
        }
    }
}

/// Prints a token for `project` (created if missing), or writes it to `out`.
pub(super) async fn token(
    dir: &Path,
    project: &Named<'_>,
    expires_in: Option<i64>,
    out: Option<&Path>,
) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let (code, created) = client
        .admin(
            reqwest::Method::POST,
            "/admin/projects",
            Some(json!({ "name": project.name, "domain": project.domain })),
        )
        .await?;
    if code != 200 {
        return Err(Failure::BadInput(format!(
            "--project {} --domain {}: {}",
            project.name,
            project.domain,
            message_of(&created)
        )));
    }
    let token = match expires_in {
        Some(seconds) => {
            let (code, issued) = client
                .admin(
                    reqwest::Method::POST,
                    &format!("/admin/projects/{}/tokens", project.name),
                    Some(json!({ "expires_in_seconds": seconds, "domain": project.domain })),
                )
                .await?;
            if code != 201 {
                return Err(Failure::BadInput(format!(
                    "--expires-in {seconds}: {}",
                    message_of(&issued)
                )));
            }
            issued["token"].as_str().unwrap_or_default().to_owned()
        }
        None => {
            let password = created["user"]["password"].as_str().unwrap_or_default();
            client.password_auth(project, password).await?
        }
    };
    match out {
        Some(path) => {
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| Failure::BadInput(format!("--out {}: {e}", path.display())))?;
            writeln!(file, "{token}")
                .map_err(|e| Failure::BadInput(format!("--out {}: {e}", path.display())))?;
            let lifetime = match expires_in {
                Some(seconds) if seconds <= 0 => format!("expired {} s ago", -seconds),
                Some(seconds) => format!("valid {seconds} s"),
                None => "valid 1 hour".into(),
            };
            eprintln!(
                "the token for {project} is in {} ({lifetime})",
                path.display()
            );
        }
        None => outln!("{token}"),
    }
    Ok(())
}

/// Deletes `project`, with its user and tokens.
pub(super) async fn delete_project(dir: &Path, project: &Named<'_>) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let mut url =
        reqwest::Url::parse("http://127.0.0.1/admin/projects/").context("the admin API's path")?;
    url.path_segments_mut()
        .map_err(|()| Failure::Engine(anyhow::anyhow!("the admin API's path")))?
        .pop_if_empty()
        .push(project.name);
    url.query_pairs_mut().append_pair("domain", project.domain);
    // Percent-encoded by `Url`: a name the cloud refuses must not reach another path.
    let path = format!("{}?{}", url.path(), url.query().unwrap_or_default());
    let (code, answer) = client.admin(reqwest::Method::DELETE, &path, None).await?;
    match code {
        204 => {
            outln!("project {project} is deleted, with its user and tokens");
            Ok(())
        }
        _ => Err(Failure::BadInput(format!(
            "--project {} --domain {}: {}",
            project.name,
            project.domain,
            message_of(&answer)
        ))),
    }
}
