//! The SSH host keys of the servers a `servers` step made, read from their console output
//! (Nova's `os-getConsoleOutput`), where cloud-init prints them at the end of the first boot:
//! the keys the cloud says it made, which the engine then pins ([`host_keys`]).
//!
//! A cloud that serves no console output, or a console that never shows the keys within
//! [`CONSOLE_WAIT`], pins nothing here: the engine then learns those keys on its first
//! connection (trust on first use), and the event says so.

use std::future::Future;
use std::time::Duration;

use overture_domain::host_keys::{from_console, known_host, ConsoleKeysError};
use overture_runner::host_keys::ConsoleKeys;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::{Cloud, CloudError, Server};

/// How long the consoles get, all together, to show the keys once the servers are `ACTIVE`:
/// cloud-init prints them at the end of the boot, which may come after `ACTIVE`.
pub const CONSOLE_WAIT: Duration = Duration::from_secs(60);
/// The first pause between two looks at a console; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between two looks.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Reads a server's console output: the port [`host_keys`] uses, so that it can be tested
/// without a cloud.
pub trait ReadConsole {
    /// The server's console output; `None` when the cloud serves none for it.
    fn console_output(
        &self,
        server_id: &str,
    ) -> impl Future<Output = Result<Option<String>, CloudError>> + Send;
}

#[derive(Deserialize)]
struct ConsoleOutput {
    #[serde(default)]
    output: Option<String>,
}

impl ReadConsole for Cloud {
    async fn console_output(&self, server_id: &str) -> Result<Option<String>, CloudError> {
        let url = format!("{}/servers/{server_id}/action", self.endpoints.compute);
        let body = json!({"os-getConsoleOutput": {"length": null}});
        let what = format!("reading the console output of server {server_id}");
        match self
            .call_json::<ConsoleOutput>(Method::POST, &url, Some(&body), &what)
            .await
        {
            Ok(answer) => Ok(answer.output),
            Err(error @ (CloudError::Backend(_) | CloudError::Unauthorized(_))) => Err(error),
            // Not served for this server or by this cloud (Nova answers 409 or 501, say).
            Err(_) => Ok(None),
        }
    }
}

impl Cloud {
    /// Every server of the project, in full.
    pub async fn all_servers(&self) -> Result<Vec<Server>, CloudError> {
        let url = format!("{}/servers/detail", self.endpoints.compute);
        self.list(url, "servers", "listing the project's servers")
            .await
    }
}

/// The keys of the project's servers at these hosts (`host`, port), as their consoles show
/// them: for servers the engine reaches but did not make with a `servers` step (a Terraform
/// output, a parameter, a long-lived bastion). A host no server of the project has is left out,
/// and said so through `progress`: its keys are learned on first use.
pub async fn host_keys_at(
    cloud: &Cloud,
    hosts: &[(String, u16)],
    wait: Duration,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<ConsoleKeys>, CloudError> {
    let servers = cloud.all_servers().await?;
    let mut made = Vec::new();
    for (host, port) in hosts {
        match servers.iter().find(|s| s.address() == Some(host.as_str())) {
            Some(server) => made.push(MadeServer {
                name: server.name.clone(),
                id: server.id.clone(),
                address: host.clone(),
                port: *port,
            }),
            None => progress(&format!(
                "{host}: no server of the project has this address; its SSH host keys will be learned on first use"
            )),
        }
    }
    host_keys(cloud, &made, wait, progress).await
}

/// One server to read the keys of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MadeServer {
    /// Its name in the step.
    pub name: String,
    /// Its id in the cloud.
    pub id: String,
    /// Its address.
    pub address: String,
    /// The port its sshd listens on.
    pub port: u16,
}

/// The keys each server's console shows, waiting up to `wait` in all for consoles still
/// booting; servers whose console shows none are left out and said so through `progress`.
pub async fn host_keys(
    cloud: &impl ReadConsole,
    servers: &[MadeServer],
    wait: Duration,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<ConsoleKeys>, CloudError> {
    let deadline = Instant::now() + wait;
    let mut found = Vec::new();
    for server in servers {
        let mut pause = FIRST_PAUSE;
        loop {
            let console = cloud.console_output(&server.id).await?;
            let Some(console) = console.filter(|text| !text.is_empty()) else {
                progress(&format!(
                    "server `{}`: the cloud serves no console output; its SSH host keys will be learned on first use",
                    server.name
                ));
                break;
            };
            match from_console(&console) {
                Ok(keys) => {
                    let shown: Vec<String> = keys
                        .iter()
                        .map(|key| format!("{} {}", key.key_type, key.fingerprint))
                        .collect();
                    progress(&format!(
                        "server `{}`: SSH host keys from its console: {}",
                        server.name,
                        shown.join(", ")
                    ));
                    found.push(ConsoleKeys {
                        server: server.name.clone(),
                        host: known_host(&server.address, server.port),
                        keys,
                    });
                    break;
                }
                Err(ConsoleKeysError::NoKeys) if Instant::now() < deadline => {
                    let now = Instant::now();
                    tokio::time::sleep(pause.min(deadline - now)).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(problem) => {
                    progress(&format!(
                        "server `{}`: {problem}; its SSH host keys will be learned on first use",
                        server.name
                    ));
                    break;
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;

    /// A cloud whose consoles answer, on each look, the next of their texts (the last again
    /// once all were answered); a server it does not know has no console.
    struct Consoles {
        texts: Mutex<HashMap<String, Vec<String>>>,
    }

    impl Consoles {
        fn new(texts: &[(&str, &[&str])]) -> Self {
            Self {
                texts: Mutex::new(
                    texts
                        .iter()
                        .map(|(id, texts)| {
                            (
                                (*id).to_owned(),
                                texts.iter().map(|t| (*t).to_owned()).collect(),
                            )
                        })
                        .collect(),
                ),
            }
        }
    }

    impl ReadConsole for Consoles {
        async fn console_output(&self, server_id: &str) -> Result<Option<String>, CloudError> {
            let mut texts = self.texts.lock().expect("lock");
            Ok(texts.get_mut(server_id).map(|texts| {
                if texts.len() > 1 {
                    texts.remove(0)
                } else {
                    texts[0].clone()
                }
            }))
        }
    }

    const KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAfBWyWT1kqcBW4flZkhx+YZ0qby94sbtGBA2zMPVSew";

    fn booted() -> String {
        format!(
            "-----BEGIN SSH HOST KEY KEYS-----\nssh-ed25519 {KEY} root@web-1\n-----END SSH HOST KEY KEYS-----\n"
        )
    }

    fn server(name: &str, id: &str) -> MadeServer {
        MadeServer {
            name: name.into(),
            id: id.into(),
            address: "10.0.0.5".into(),
            port: 22,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_read_once_the_console_shows_them_and_a_cloud_without_console_pins_nothing() {
        let cloud = Consoles::new(&[("a", &["booting...\n", &booted()]), ("b", &[""])]);
        let mut lines = Vec::new();
        let found = host_keys(
            &cloud,
            &[
                server("web-1", "a"),
                server("web-2", "b"),
                server("web-3", "c"),
            ],
            CONSOLE_WAIT,
            &mut |line| lines.push(line.to_owned()),
        )
        .await
        .expect("read");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].server, "web-1");
        assert_eq!(found[0].host, "10.0.0.5");
        assert_eq!(
            found[0].keys[0].fingerprint,
            "SHA256:GpulLj0N5uMRxkGkIwsvYxaagsDoerjfcTR0ZcWIKVo"
        );
        assert_eq!(
            lines,
            [
                "server `web-1`: SSH host keys from its console: ssh-ed25519 SHA256:GpulLj0N5uMRxkGkIwsvYxaagsDoerjfcTR0ZcWIKVo",
                "server `web-2`: the cloud serves no console output; its SSH host keys will be learned on first use",
                "server `web-3`: the cloud serves no console output; its SSH host keys will be learned on first use",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_console_that_never_shows_keys_is_given_up_on_at_the_deadline() {
        let cloud = Consoles::new(&[("a", &["booting...\n"])]);
        let mut lines = Vec::new();
        let started = Instant::now();
        let found = host_keys(&cloud, &[server("web-1", "a")], CONSOLE_WAIT, &mut |line| {
            lines.push(line.to_owned())
        })
        .await
        .expect("read");
        assert!(found.is_empty());
        assert_eq!(started.elapsed(), CONSOLE_WAIT);
        assert!(lines[0].contains("learned on first use"), "{lines:?}");
    }
}
