//! `overture engine`: one engine serving a data directory to every `overture deploy` on it.
//!
//! SQLite lets one process commit at a time, and each commit syncs the disk on its own, so
//! `deploy` processes that each drive their own deployment wait in line for every sync. With an
//! engine serving the directory, each `deploy` hands its deployment over through `engine.sock`
//! and follows it from there: the engine records and drives them all in one drive, where
//! concurrent deployments share every commit.
//!
//! - `mod.rs`: the conversation on the socket, one JSON object per line.
//! - [`host`]: the engine's side, `overture engine`.
//! - [`guest`]: the `deploy` side, which falls back to driving the deployment itself when no
//!   engine serves the directory.
//!
//! The socket is the user's own (mode 0600, in their data directory); it carries the cloud token
//! and secret values as `deploy` would hold them in memory, and they never reach a log.

pub mod guest;
pub mod host;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use overture_domain::secret::SecretString;
use overture_events::{CloudAccount, DeploymentId};
use overture_submit::{CloudSession, Submission};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

/// The socket's name in the data directory.
pub const SOCKET: &str = "engine.sock";

/// Where the engine serving `data_dir` listens.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET)
}

/// What a `deploy` process says: first the deployment, then perhaps a cancel.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ask {
    /// Record and drive this deployment, and answer with its progress and its end.
    Deploy(Box<Handed>),
    /// Cancel the deployment handed over (Ctrl-C on `deploy`).
    Cancel {
        /// Why, recorded in `CancellationRequested`.
        reason: String,
    },
}

/// A deployment handed over: a [`Submission`] as `deploy` made it, and how to print its end.
/// No `Debug`: it holds the token and the secret values.
#[derive(Serialize, Deserialize)]
pub struct Handed {
    source: String,
    text: String,
    tenant: String,
    requested_by: String,
    params: BTreeMap<String, String>,
    secrets: BTreeMap<String, String>,
    files: BTreeMap<String, String>,
    cloud: Option<HandedCloud>,
    /// The deployment's name, when given.
    #[serde(default)]
    name: Option<String>,
    /// Print the final status as JSON.
    pub json: bool,
}

#[derive(Serialize, Deserialize)]
struct HandedCloud {
    account: CloudAccount,
    token: String,
}

impl Handed {
    /// What `deploy` would have submitted itself, and how it prints the end.
    pub fn new(submission: &Submission, json: bool) -> Self {
        Self {
            source: submission.source.clone(),
            text: submission.text.clone(),
            tenant: submission.tenant.clone(),
            requested_by: submission.requested_by.clone(),
            params: submission.params.clone(),
            secrets: submission
                .secrets
                .iter()
                .map(|(name, value)| (name.clone(), value.expose_secret().to_owned()))
                .collect(),
            files: submission.files.clone(),
            cloud: submission.cloud.as_ref().map(|cloud| HandedCloud {
                account: cloud.account.clone(),
                token: cloud.token.expose_secret().to_owned(),
            }),
            name: submission.name.clone(),
            json,
        }
    }

    /// The submission `deploy` made.
    pub fn into_submission(self) -> Submission {
        Submission {
            source: self.source,
            text: self.text,
            tenant: self.tenant,
            requested_by: self.requested_by,
            trigger: "cli".into(),
            params: self.params,
            secrets: self
                .secrets
                .into_iter()
                .map(|(name, value)| (name, SecretString::from(value)))
                .collect(),
            files: self.files,
            cloud: self.cloud.map(|cloud| CloudSession {
                account: cloud.account,
                token: SecretString::from(cloud.token),
            }),
            triggered_by: None,
            name: self.name,
        }
    }
}

/// What the engine answers, in this order: `Recorded` (or `Refused`/`Failed`), `Progress`
/// lines, then `Ended`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The deployment is recorded under this id and driven.
    Recorded {
        /// Its id.
        id: DeploymentId,
    },
    /// The blueprint's problems: nothing was recorded.
    Refused {
        /// Each problem, naming its field.
        problems: Vec<String>,
    },
    /// The engine could not record it.
    Failed {
        /// Why.
        error: String,
    },
    /// A progress line, newline included, as `deploy` prints it.
    Progress {
        /// The line.
        line: String,
    },
    /// The deployment ended.
    Ended {
        /// Its final status, as `status` (or `status --json`) prints it.
        status: String,
        /// Whether it succeeded.
        succeeded: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission() -> Submission {
        Submission {
            source: "app.yaml".into(),
            text: "name: app\nsteps: {}\n".into(),
            tenant: "acme".into(),
            requested_by: "ana".into(),
            trigger: "cli".into(),
            params: BTreeMap::from([("region".into(), "north".into())]),
            secrets: BTreeMap::from([("db_password".into(), SecretString::from("hunter2"))]),
            files: BTreeMap::from([("playbook.yml".into(), "- hosts: all\n".into())]),
            cloud: Some(CloudSession {
                account: CloudAccount {
                    auth_url: "http://127.0.0.1:5000/v3".into(),
                    project_id: "p1".into(),
                    project: "acme".into(),
                    domain: "Default".into(),
                    user: "ana".into(),
                    endpoints: Vec::new(),
                },
                token: SecretString::from("gAAAA-token"),
            }),
            triggered_by: None,
            name: None,
        }
    }

    #[test]
    fn a_handed_deployment_arrives_as_the_submission_deploy_made() {
        let line = serde_json::to_string(&Ask::Deploy(Box::new(Handed::new(&submission(), true))))
            .expect("an ask is JSON");
        let Ok(Ask::Deploy(handed)) = serde_json::from_str::<Ask>(&line) else {
            panic!("a deploy ask comes back as one");
        };
        assert!(handed.json);
        let arrived = handed.into_submission();
        let sent = submission();
        assert_eq!(arrived.source, sent.source);
        assert_eq!(arrived.text, sent.text);
        assert_eq!(arrived.tenant, sent.tenant);
        assert_eq!(arrived.requested_by, sent.requested_by);
        assert_eq!(arrived.params, sent.params);
        assert_eq!(arrived.files, sent.files);
        assert_eq!(
            arrived.secrets["db_password"].expose_secret(),
            "hunter2",
            "the secret arrives to be sealed"
        );
        let cloud = arrived.cloud.expect("the cloud session arrives");
        assert_eq!(cloud.token.expose_secret(), "gAAAA-token");
        assert_eq!(cloud.account.project, "acme");
    }

    #[test]
    fn answers_read_back_as_written() {
        let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let line = serde_json::to_string(&Answer::Recorded { id }).expect("an answer is JSON");
        assert!(
            matches!(serde_json::from_str(&line), Ok(Answer::Recorded { id: back }) if back == id)
        );
    }
}
