//! SSH host keys: reading them from a server's console output (as cloud-init prints them),
//! writing and reading `known_hosts`, and reading ssh's words when a key does not match.
//!
//! cloud-init's `keys_to_console` module prints, at the end of a server's first boot, the
//! fingerprints of its host keys and then the keys themselves:
//!
//! ```text
//! <14>Nov 23 21:30:09 cloud-init: #############################################################
//! <14>Nov 23 21:30:09 cloud-init: -----BEGIN SSH HOST KEY FINGERPRINTS-----
//! <14>Nov 23 21:30:09 cloud-init: 256 SHA256:Xk9...M root@web-1 (ED25519)
//! <14>Nov 23 21:30:09 cloud-init: -----END SSH HOST KEY FINGERPRINTS-----
//! <14>Nov 23 21:30:09 cloud-init: #############################################################
//! -----BEGIN SSH HOST KEY KEYS-----
//! ssh-ed25519 AAAAC3Nza... root@web-1
//! -----END SSH HOST KEY KEYS-----
//! ```
//!
//! The keys are what `known_hosts` needs; when the fingerprints are printed too, every key must
//! be among them, so a console that contradicts itself pins nothing.

use base64::Engine as _;
use overture_events::PinnedHostKey;
use sha2::{Digest as _, Sha256};

/// The lines around the keys in a console.
pub const KEYS_BEGIN: &str = "-----BEGIN SSH HOST KEY KEYS-----";
/// The line after the keys.
pub const KEYS_END: &str = "-----END SSH HOST KEY KEYS-----";
/// The line before the fingerprints.
pub const FINGERPRINTS_BEGIN: &str = "-----BEGIN SSH HOST KEY FINGERPRINTS-----";
/// The line after the fingerprints.
pub const FINGERPRINTS_END: &str = "-----END SSH HOST KEY FINGERPRINTS-----";

/// Why a console output gives no keys to pin.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleKeysError {
    /// No complete block of keys (the server has not finished booting, or its image does not
    /// print them).
    #[error("the console output shows no SSH host keys (no `{KEYS_BEGIN}` block)")]
    NoKeys,
    /// A line of the block is not a public key.
    #[error("the console's SSH host key block has a line that is not a public key: `{0}`")]
    BadKey(String),
    /// A key's fingerprint is not among the fingerprints printed beside it.
    #[error("the console's SSH host key {key_type} ({fingerprint}) is not among the fingerprints it printed")]
    Contradiction {
        /// The key's type.
        key_type: String,
        /// Its fingerprint.
        fingerprint: String,
    },
}

/// The host keys a console output shows (the last block, if the server booted more than once).
pub fn from_console(console: &str) -> Result<Vec<PinnedHostKey>, ConsoleKeysError> {
    let keys_block = last_block(console, KEYS_BEGIN, KEYS_END).ok_or(ConsoleKeysError::NoKeys)?;
    let mut keys: Vec<PinnedHostKey> = Vec::new();
    for line in keys_block {
        let Some(key) = key_on_line(line) else {
            return Err(ConsoleKeysError::BadKey(line.trim().to_owned()));
        };
        if !keys.iter().any(|k| k.key_type == key.key_type) {
            keys.push(key);
        }
    }
    if keys.is_empty() {
        return Err(ConsoleKeysError::NoKeys);
    }
    if let Some(printed) = last_block(console, FINGERPRINTS_BEGIN, FINGERPRINTS_END) {
        let printed: Vec<&str> = printed
            .iter()
            .flat_map(|line| line.split_whitespace())
            .filter(|word| word.starts_with("SHA256:"))
            .collect();
        if let Some(key) = keys
            .iter()
            .find(|key| !printed.contains(&key.fingerprint.as_str()))
        {
            return Err(ConsoleKeysError::Contradiction {
                key_type: key.key_type.clone(),
                fingerprint: key.fingerprint.clone(),
            });
        }
    }
    Ok(keys)
}

/// The lines between the last `begin` and the `end` after it.
fn last_block<'a>(text: &'a str, begin: &str, end: &str) -> Option<Vec<&'a str>> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().rposition(|line| line.contains(begin))?;
    let length = lines[start + 1..]
        .iter()
        .position(|line| line.contains(end))?;
    Some(lines[start + 1..start + 1 + length].to_vec())
}

/// The public key on a line (`TYPE BASE64 [COMMENT]`, maybe after a log prefix).
fn key_on_line(line: &str) -> Option<PinnedHostKey> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|word| is_key_type(word))?;
    let blob = words.get(at + 1)?;
    key(words[at], blob)
}

/// Whether `word` names an SSH public key algorithm.
fn is_key_type(word: &str) -> bool {
    (word.starts_with("ssh-") || word.starts_with("ecdsa-sha2-") || word.starts_with("sk-"))
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '@' | '.'))
}

/// A key from its type and base64 blob, if the blob is base64 and names the same type.
pub fn key(key_type: &str, blob: &str) -> Option<PinnedHostKey> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .ok()?;
    // The blob starts with its own type, as an SSH string: a length (4 bytes) and the name.
    let named_length = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    if bytes.get(4..4 + named_length)? != key_type.as_bytes() {
        return None;
    }
    Some(PinnedHostKey {
        key_type: key_type.to_owned(),
        fingerprint: fingerprint(&bytes),
        public_key: blob.to_owned(),
    })
}

/// `SHA256:` and the unpadded base64 of the key's SHA-256, as `ssh-keygen -l` prints it.
pub fn fingerprint(blob: &[u8]) -> String {
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(Sha256::digest(blob))
    )
}

/// How `known_hosts` names a host reached at `port`: `host`, or `[host]:port` off port 22.
pub fn known_host(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_owned()
    } else {
        format!("[{host}]:{port}")
    }
}

/// The `known_hosts` lines of one host's keys.
pub fn known_hosts_lines(host: &str, keys: &[PinnedHostKey]) -> String {
    keys.iter()
        .map(|key| format!("{host} {} {}\n", key.key_type, key.public_key))
        .collect()
}

/// The hosts and keys of a `known_hosts` file, in its order (hashed names and markers, which
/// the engine never writes, are skipped).
pub fn read_known_hosts(text: &str) -> Vec<(String, PinnedHostKey)> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let hosts = words.next()?;
            if hosts.starts_with('#') || hosts.starts_with('@') || hosts.starts_with('|') {
                return None;
            }
            let key = key(words.next()?, words.next()?)?;
            Some(
                hosts
                    .split(',')
                    .map(|host| (host.to_owned(), key.clone()))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

/// What ssh said when a host offered a key other than the one known for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The host as ssh named it (`10.0.0.5`, `[10.0.0.5]:2222`), if it said.
    pub host: Option<String>,
    /// The offered key's type and fingerprint, if ssh said.
    pub offered: Option<(String, String)>,
}

/// ssh's refusal of a changed host key, if `output` holds one. ssh's words may come through
/// ansible, which prints them inside a JSON string (`\r\n` written out).
pub fn mismatch_in(output: &str) -> Option<Mismatch> {
    const CHANGED: &str = "REMOTE HOST IDENTIFICATION HAS CHANGED";
    const STRICT: &str = "has changed and you have requested strict checking";
    if !output.contains(CHANGED) && !output.contains(STRICT) {
        return None;
    }
    let text = output
        .replace("\\r\\n", "\n")
        .replace("\\n", "\n")
        .replace('\r', "");
    let host = text.lines().find_map(|line| {
        let rest = line.split("Host key for ").nth(1)?;
        let (host, _) = rest.split_once(" has changed")?;
        Some(host.trim().to_owned())
    });
    let lines: Vec<&str> = text.lines().collect();
    let offered = lines.iter().enumerate().find_map(|(at, line)| {
        let rest = line.split("The fingerprint for the ").nth(1)?;
        let (kind, _) = rest.split_once(" key sent by the remote host is")?;
        let fingerprint = lines
            .get(at + 1)?
            .split_whitespace()
            .find(|w| w.starts_with("SHA256:"))?
            .trim_end_matches('.');
        Some((kind.to_owned(), fingerprint.to_owned()))
    });
    Some(Mismatch { host, offered })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host key made by `ssh-keygen -t ed25519`.
    const ED25519: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAfBWyWT1kqcBW4flZkhx+YZ0qby94sbtGBA2zMPVSew";

    /// Its fingerprint, as `ssh-keygen -lf` printed it.
    fn ed25519_fingerprint() -> String {
        "SHA256:GpulLj0N5uMRxkGkIwsvYxaagsDoerjfcTR0ZcWIKVo".to_owned()
    }

    /// The console of a server as cloud-init leaves it (Ubuntu 24.04's format).
    fn console(fingerprint: &str) -> String {
        format!(
            "[    2.031337] cloud-init[612]: Cloud-init v. 24.1 running 'modules:final'\n\
<14>Nov 23 21:30:09 cloud-init: #############################################################\n\
<14>Nov 23 21:30:09 cloud-init: {FINGERPRINTS_BEGIN}\n\
<14>Nov 23 21:30:09 cloud-init: 256 {fingerprint} root@web-1 (ED25519)\n\
<14>Nov 23 21:30:09 cloud-init: {FINGERPRINTS_END}\n\
<14>Nov 23 21:30:09 cloud-init: #############################################################\n\
{KEYS_BEGIN}\n\
ssh-ed25519 {ED25519} root@web-1\n\
{KEYS_END}\n\
[    2.412345] cloud-init[612]: Cloud-init v. 24.1 finished. Datasource DataSourceOpenStack.\n"
        )
    }

    #[test]
    fn the_keys_of_a_cloud_init_console_are_read_with_their_fingerprints() {
        let keys = from_console(&console(&ed25519_fingerprint())).expect("keys");
        assert_eq!(
            keys,
            vec![PinnedHostKey {
                key_type: "ssh-ed25519".into(),
                fingerprint: ed25519_fingerprint(),
                public_key: ED25519.into(),
            }]
        );
    }

    #[test]
    fn a_console_without_keys_or_contradicting_itself_pins_nothing() {
        assert_eq!(from_console(""), Err(ConsoleKeysError::NoKeys));
        // A boot still printing: the block has not ended.
        let partial = format!("{KEYS_BEGIN}\nssh-ed25519 {ED25519} root@x\n");
        assert_eq!(from_console(&partial), Err(ConsoleKeysError::NoKeys));
        assert!(matches!(
            from_console(&console("SHA256:somethingelse")),
            Err(ConsoleKeysError::Contradiction { .. })
        ));
        assert!(matches!(
            from_console(&format!(
                "{KEYS_BEGIN}\nssh-ed25519 not-base64!\n{KEYS_END}\n"
            )),
            Err(ConsoleKeysError::BadKey(_))
        ));
        // A blob of another type than its line says is no key of that type.
        assert!(matches!(
            from_console(&format!("{KEYS_BEGIN}\nssh-rsa {ED25519}\n{KEYS_END}\n")),
            Err(ConsoleKeysError::BadKey(_))
        ));
    }

    #[test]
    fn the_last_boot_s_keys_count() {
        let old = format!("{KEYS_BEGIN}\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA root@x\n{KEYS_END}\n");
        let keys = from_console(&format!("{old}reboot\n{}", console(&ed25519_fingerprint())))
            .expect("keys");
        assert_eq!(keys[0].public_key, ED25519);
    }

    #[test]
    fn known_hosts_are_written_and_read_back() {
        let keys = from_console(&console(&ed25519_fingerprint())).expect("keys");
        assert_eq!(known_host("10.0.0.5", 22), "10.0.0.5");
        assert_eq!(known_host("::1", 2222), "[::1]:2222");
        let text = known_hosts_lines("[127.0.0.1]:2222", &keys);
        assert_eq!(text, format!("[127.0.0.1]:2222 ssh-ed25519 {ED25519}\n"));
        assert_eq!(
            read_known_hosts(&format!(
                "# comment\n{text}|1|hashed ssh-ed25519 {ED25519}\n"
            )),
            vec![("[127.0.0.1]:2222".to_owned(), keys[0].clone())]
        );
    }

    #[test]
    fn ssh_s_refusal_of_a_changed_key_is_recognised_with_what_it_names() {
        let ssh = "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n\
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n\
Someone could be eavesdropping on you right now (man-in-the-middle attack)!\n\
It is also possible that a host key has just been changed.\n\
The fingerprint for the ED25519 key sent by the remote host is\n\
SHA256:wLXqmnVJ+hqOzcoyXH+5QQdBBiuOZSu8Tk1z0WcmaZ4.\n\
Please contact your system administrator.\n\
Add correct host key in /work/ssh/known_hosts to get rid of this message.\n\
Offending ED25519 key in /work/ssh/known_hosts:1\n\
Host key for 10.0.0.5 has changed and you have requested strict checking.\n\
Host key verification failed.\n";
        let expected = Mismatch {
            host: Some("10.0.0.5".into()),
            offered: Some((
                "ED25519".into(),
                "SHA256:wLXqmnVJ+hqOzcoyXH+5QQdBBiuOZSu8Tk1z0WcmaZ4".into(),
            )),
        };
        assert_eq!(mismatch_in(ssh), Some(expected.clone()));
        // As ansible prints it: inside a JSON string.
        let ansible = format!(
            "fatal: [10_0_0_5]: UNREACHABLE! => {{\"changed\": false, \"msg\": \"Failed to connect to the host via ssh: {}\", \"unreachable\": true}}",
            ssh.replace('\n', "\\r\\n")
        );
        assert_eq!(mismatch_in(&ansible), Some(expected));
        assert_eq!(
            mismatch_in("Connection refused\nHost key verification failed.\n"),
            None
        );
    }
}
