//! Pinned SSH host keys: what every step that logs in over SSH is given, what it leaves
//! learned, and what a refused key means.
//!
//! - Every such step (`wait-ssh` through a bastion, `ansible`, `http` with `via: bastion`) gets
//!   [`KNOWN_HOSTS_FILE`] holding exactly the keys pinned so far ([`known_hosts_file`]), and ssh
//!   reads only that file, with `StrictHostKeyChecking=accept-new` ([`SSH_OPTIONS`]): a host
//!   whose keys are pinned must offer one of them, or ssh refuses it exactly as with `yes`; a
//!   host with none pinned yet is learned on first contact (trust on first use) and ssh adds it
//!   to the file.
//! - The `servers` step leaves [`HOST_KEYS_FILE`]: the keys of each server it made, read from
//!   its console output through the cloud's API ([`ConsoleKeys`]). So does `wait-ssh` for the
//!   servers it contacts first that the engine did not make, when the deployment has a token
//!   (see [`crate::wait_ssh`]).
//! - Once the command has ended, [`learned`] reads both files back into pins the runner records
//!   as `HostKeysPinned`: from the console, or first-use for lines ssh added.
//! - [`mismatch`] turns ssh's refusal of a changed key into a `host-key-mismatch` failure that
//!   names the server and the expected and offered fingerprints.

use std::path::PathBuf;

use overture_domain::deployment::PinnedHost;
use overture_domain::host_keys::{known_hosts_lines, mismatch_in, read_known_hosts};
use overture_domain::DeploymentState;
use overture_events::{ErrorClass, HostKeySource, PinnedHostKey};
use serde::{Deserialize, Serialize};

use crate::step::{collected, Verdict};

/// The `known_hosts` file ssh reads and writes, under `/work`.
pub const KNOWN_HOSTS_FILE: &str = "ssh/known_hosts";
/// What the `servers` step learned from its servers' consoles, under `/work`: JSON, a list of
/// [`ConsoleKeys`].
pub const HOST_KEYS_FILE: &str = "host-keys.json";

/// The ssh options of every connection a step makes: only the pinned keys count, a host not
/// pinned yet is learned, and ssh keeps the file as the engine wrote it otherwise (no hashed
/// names, no keys the server volunteers after the login).
pub const SSH_OPTIONS: [&str; 4] = [
    "StrictHostKeyChecking=accept-new",
    "UserKnownHostsFile=/work/ssh/known_hosts",
    "HashKnownHosts=no",
    "UpdateHostKeys=no",
];

/// One server's keys as its console showed them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleKeys {
    /// The server's name in the step.
    pub server: String,
    /// Its address, as `known_hosts` names it.
    pub host: String,
    /// Its keys.
    pub keys: Vec<PinnedHostKey>,
}

/// [`KNOWN_HOSTS_FILE`] with every key pinned so far, as a file of `Prepared::files`.
pub fn known_hosts_file(state: &DeploymentState) -> (PathBuf, Vec<u8>) {
    let text: String = state
        .host_keys
        .values()
        .map(|pinned| known_hosts_lines(&pinned.host, &pinned.keys))
        .collect();
    (PathBuf::from(KNOWN_HOSTS_FILE), text.into_bytes())
}

/// The hosts a finished command learned and the deployment has not pinned yet: the servers'
/// consoles first, then what ssh added to [`KNOWN_HOSTS_FILE`] on first contact.
pub fn learned(state: &DeploymentState, files: &[(PathBuf, Vec<u8>)]) -> Vec<PinnedHost> {
    let mut pins: Vec<PinnedHost> = Vec::new();
    let consoles: Vec<ConsoleKeys> = collected(files, HOST_KEYS_FILE)
        .and_then(|json| serde_json::from_slice(json).ok())
        .unwrap_or_default();
    for console in consoles {
        pins.push(PinnedHost {
            server: console.server,
            host: console.host,
            learned: HostKeySource::Console,
            keys: console.keys,
        });
    }
    let known = collected(files, KNOWN_HOSTS_FILE)
        .map(|text| read_known_hosts(&String::from_utf8_lossy(text)))
        .unwrap_or_default();
    for (host, key) in known {
        if state.host_keys.contains_key(&host) {
            continue;
        }
        match pins.iter_mut().find(|pin| pin.host == host) {
            Some(pin) if pin.learned == HostKeySource::FirstUse => {
                if !pin.keys.iter().any(|k| k.key_type == key.key_type) {
                    pin.keys.push(key);
                }
            }
            Some(_) => {}
            None => pins.push(PinnedHost {
                server: server_named(state, &host),
                host,
                learned: HostKeySource::FirstUse,
                keys: vec![key],
            }),
        }
    }
    pins.retain(|pin| !state.host_keys.contains_key(&pin.host) && !pin.keys.is_empty());
    pins
}

/// The name of the server at `host` if a step's outputs name it (a `servers` step's outputs map
/// names to addresses), else the host itself.
fn server_named(state: &DeploymentState, host: &str) -> String {
    let address = host
        .strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .map_or(host, |(address, _)| address);
    state
        .steps
        .values()
        .flat_map(|step| step.outputs.iter())
        .find(|(_, value)| value.as_str() == address)
        .map_or_else(|| host.to_owned(), |(name, _)| name.clone())
}

/// The `host-key-mismatch` failure ssh's output shows, if it shows one.
pub fn mismatch(state: &DeploymentState, output: &str) -> Option<Verdict> {
    let found = mismatch_in(output)?;
    let pinned = found
        .host
        .as_deref()
        .and_then(|host| state.host_keys.get(host));
    let server = match (&found.host, pinned) {
        (Some(host), Some(pinned)) if pinned.server != *host => {
            format!("server `{}` ({host})", pinned.server)
        }
        (Some(host), _) => format!("server {host}"),
        (None, _) => "a server".to_owned(),
    };
    let expected = match pinned {
        Some(pinned) => format!(
            "pinned {} from {}",
            pinned
                .keys
                .iter()
                .map(|key| format!("{} {}", key.key_type, key.fingerprint))
                .collect::<Vec<_>>()
                .join(", "),
            match pinned.learned {
                HostKeySource::Console => "its console output",
                HostKeySource::FirstUse => "the first connection",
            }
        ),
        None => "its pinned key".to_owned(),
    };
    let offered = match &found.offered {
        Some((kind, fingerprint)) => format!("it offered {kind} {fingerprint}"),
        None => "it offered another key".to_owned(),
    };
    Some(Verdict::Failure {
        class: ErrorClass::HostKeyMismatch,
        headline: format!(
            "the SSH host key of {server} is not the one pinned ({expected}; {offered}), so the \
             engine refused to connect: the server may have been replaced or rebuilt, or someone \
             may be intercepting the connection. Check the server through the cloud's console \
             before trusting it; a rebuilt server needs a new deployment"
        ),
    })
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::Deployment;
    use overture_events::DeploymentEvent;

    use super::*;
    use crate::testing::{requested, succeeded};

    const KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAfBWyWT1kqcBW4flZkhx+YZ0qby94sbtGBA2zMPVSew";
    const FINGERPRINT: &str = "SHA256:GpulLj0N5uMRxkGkIwsvYxaagsDoerjfcTR0ZcWIKVo";
    const OTHER: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    fn key(blob: &str) -> PinnedHostKey {
        overture_domain::host_keys::key("ssh-ed25519", blob).expect("a key")
    }

    /// A deployment whose `servers` step made web-1 at 10.0.0.5, pinned from its console.
    fn pinned() -> DeploymentState {
        let blueprint =
            parse("name: x\nsteps:\n  servers: { run: script, with: { command: 'true' } }\n")
                .expect("valid")
                .snapshot;
        let state = Deployment::apply(
            requested(&blueprint, &[]),
            succeeded("servers", &[("web-1", "10.0.0.5")]),
        );
        Deployment::apply(
            state,
            DeploymentEvent::HostKeysPinned {
                server: "web-1".into(),
                host: "10.0.0.5".into(),
                learned: HostKeySource::Console,
                keys: vec![key(KEY)],
            },
        )
    }

    #[test]
    fn the_known_hosts_file_holds_exactly_the_pinned_keys() {
        let (path, text) = known_hosts_file(&pinned());
        assert_eq!(path, PathBuf::from(KNOWN_HOSTS_FILE));
        assert_eq!(
            String::from_utf8_lossy(&text),
            format!("10.0.0.5 ssh-ed25519 {KEY}\n")
        );
        assert_eq!(known_hosts_file(&DeploymentState::default()).1, b"");
    }

    #[test]
    fn consoles_and_first_contacts_become_pins_and_pinned_hosts_stay_as_they_are() {
        let consoles = serde_json::to_vec(&[ConsoleKeys {
            server: "bastion".into(),
            host: "10.0.0.4".into(),
            keys: vec![key(KEY)],
        }])
        .expect("json");
        // ssh added a line for a host with no pin, and the pinned one is left alone, even if a
        // step wrote another key for it.
        let known = format!(
            "10.0.0.5 ssh-ed25519 {KEY}\n10.0.0.5 ssh-ed25519 {OTHER}\n[127.0.0.1]:2222 ssh-ed25519 {OTHER}\n"
        );
        let pins = learned(
            &pinned(),
            &[
                (PathBuf::from(HOST_KEYS_FILE), consoles),
                (PathBuf::from(KNOWN_HOSTS_FILE), known.into_bytes()),
            ],
        );
        assert_eq!(
            pins,
            vec![
                PinnedHost {
                    server: "bastion".into(),
                    host: "10.0.0.4".into(),
                    learned: HostKeySource::Console,
                    keys: vec![key(KEY)],
                },
                PinnedHost {
                    server: "[127.0.0.1]:2222".into(),
                    host: "[127.0.0.1]:2222".into(),
                    learned: HostKeySource::FirstUse,
                    keys: vec![key(OTHER)],
                },
            ]
        );
        assert_eq!(learned(&pinned(), &[]), vec![]);
    }

    #[test]
    fn a_changed_key_is_a_host_key_mismatch_naming_the_server_and_both_fingerprints() {
        let ssh = "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
The fingerprint for the ED25519 key sent by the remote host is\n\
SHA256:wLXqmnVJ+hqOzcoyXH+5QQdBBiuOZSu8Tk1z0WcmaZ4.\n\
Host key for 10.0.0.5 has changed and you have requested strict checking.\n\
Host key verification failed.\n";
        let Some(Verdict::Failure { class, headline }) = mismatch(&pinned(), ssh) else {
            panic!("a failure");
        };
        assert_eq!(class, ErrorClass::HostKeyMismatch);
        assert!(
            headline.starts_with(&format!(
                "the SSH host key of server `web-1` (10.0.0.5) is not the one pinned (pinned ssh-ed25519 {FINGERPRINT} from its console output; it offered ED25519 SHA256:wLXqmnVJ+hqOzcoyXH+5QQdBBiuOZSu8Tk1z0WcmaZ4)"
            )),
            "{headline}"
        );
        assert!(headline.contains("replaced or rebuilt"), "{headline}");
        assert!(headline.contains("intercepting"), "{headline}");
        assert_eq!(mismatch(&pinned(), "Connection refused"), None);
    }
}
