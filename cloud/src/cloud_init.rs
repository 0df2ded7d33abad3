//! The cloud-init this cloud understands: a server's `user_data` is a base64 cloud-config, of
//! which only `ssh_authorized_keys` (root's keys) and `hostname` are honoured.

use base64::Engine as _;
use serde::Deserialize;

/// What a server takes from its `user_data`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserData {
    /// Lines of root's `authorized_keys`.
    pub authorized_keys: Vec<String>,
    /// The hostname asked for, already checked.
    pub hostname: Option<String>,
}

/// Why a `user_data` was refused; each message says what is expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// Not standard base64.
    #[error("user_data is not base64; send the base64 of a cloud-config")]
    NotBase64,
    /// Not a cloud-config document.
    #[error("user_data must be a cloud-config: the line `#cloud-config`, then YAML")]
    NotCloudConfig,
    /// The YAML does not have the expected shape.
    #[error("user_data is not a valid cloud-config: {0}")]
    Yaml(String),
    /// An authorized key spans several lines.
    #[error("user_data: each entry of ssh_authorized_keys must be one line (one key)")]
    MultilineKey,
    /// The hostname cannot be set.
    #[error("user_data: hostname `{0}` is not a valid hostname (letters, digits, '-' and '.', at most 64 characters)")]
    BadHostname(String),
}

#[derive(Debug, Default, Deserialize)]
struct Document {
    #[serde(default)]
    ssh_authorized_keys: Vec<String>,
    #[serde(default)]
    hostname: Option<String>,
}

/// Reads a server's `user_data` (base64 of `#cloud-config` then YAML).
pub fn parse(user_data: &str) -> Result<UserData, UserDataError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(user_data.trim())
        .map_err(|_| UserDataError::NotBase64)?;
    let text = String::from_utf8(bytes).map_err(|_| UserDataError::NotCloudConfig)?;
    let first_line = text.lines().next().unwrap_or_default().trim_end();
    if first_line != "#cloud-config" {
        return Err(UserDataError::NotCloudConfig);
    }
    // An empty document (only the header) is YAML null: nothing to do.
    let document: Option<Document> =
        serde_yaml_ng::from_str(&text).map_err(|e| UserDataError::Yaml(e.to_string()))?;
    let document = document.unwrap_or_default();
    let authorized_keys = document
        .ssh_authorized_keys
        .into_iter()
        .map(|key| key.trim().to_owned())
        .filter(|key| !key.is_empty())
        .collect::<Vec<_>>();
    if authorized_keys.iter().any(|key| key.contains(['\n', '\r'])) {
        return Err(UserDataError::MultilineKey);
    }
    let hostname = match document.hostname {
        Some(name) if valid_hostname(&name) => Some(name),
        Some(name) => return Err(UserDataError::BadHostname(name)),
        None => None,
    };
    Ok(UserData {
        authorized_keys,
        hostname,
    })
}

/// Whether the kernel and people accept `name` as a hostname.
fn valid_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The hostname of a server whose `user_data` names none: its name, made valid, as cloud-init does.
pub fn hostname_from_server_name(server_name: &str) -> String {
    let mapped: String = server_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() {
        "server".to_owned()
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn keys_and_hostname_are_honoured_and_the_rest_ignored() {
        let text = "#cloud-config\nhostname: web-1\nssh_authorized_keys:\n  - ssh-ed25519 AAAA one\n  - ' ssh-ed25519 BBBB two '\npackages: [nginx]\n";
        assert_eq!(
            parse(&encode(text)),
            Ok(UserData {
                authorized_keys: vec!["ssh-ed25519 AAAA one".into(), "ssh-ed25519 BBBB two".into()],
                hostname: Some("web-1".into()),
            })
        );
        assert_eq!(parse(&encode("#cloud-config\n")), Ok(UserData::default()));
    }

    #[test]
    fn what_is_not_a_cloud_config_is_refused() {
        assert_eq!(parse("not base64!"), Err(UserDataError::NotBase64));
        assert_eq!(
            parse(&encode("#!/bin/sh\necho hi\n")),
            Err(UserDataError::NotCloudConfig)
        );
        assert!(matches!(
            parse(&encode("#cloud-config\nssh_authorized_keys: 3\n")),
            Err(UserDataError::Yaml(_))
        ));
        assert_eq!(
            parse(&encode(
                "#cloud-config\nssh_authorized_keys: [\"a\\nssh-rsa evil\"]\n"
            )),
            Err(UserDataError::MultilineKey)
        );
        assert_eq!(
            parse(&encode("#cloud-config\nhostname: 'bad host'\n")),
            Err(UserDataError::BadHostname("bad host".into()))
        );
    }

    #[test]
    fn server_names_become_hostnames() {
        assert_eq!(hostname_from_server_name("d1a2-Web_1"), "d1a2-web-1");
        assert_eq!(hostname_from_server_name("--"), "server");
        assert_eq!(hostname_from_server_name(&"x".repeat(100)).len(), 63);
    }
}
