//! Secret values, and masking them out of anything a step prints or outputs.
//!
//! A secret value is a [`SecretString`]: it implements neither `Serialize` nor a revealing
//! `Debug`, so it cannot slip into an event, a read model or a log line. The one place it is
//! exposed is where a step's environment is built.

use std::collections::BTreeMap;

use secrecy::ExposeSecret;
pub use secrecy::SecretString;

/// The secrets of one deployment, by name.
pub type SecretValues = BTreeMap<String, SecretString>;

/// The name the deployment's SSH private key is sealed under, beside the user's secrets. User
/// secret names are identifiers, so no secret of theirs can take it.
pub const SSH_KEY_SECRET: &str = "overture.ssh-key";

/// The name the user's cloud token is sealed under, beside the user's secrets.
pub const TOKEN_SECRET: &str = "overture.token";

/// What replaces a secret value in output.
pub const MASK: &str = "***";

/// The shortest secret value accepted, in bytes: a shorter one (`ab`) could not be masked
/// without turning ordinary text everywhere in the logs into `***`.
pub const MIN_SECRET: usize = 4;

/// The shortest line of a multi-line secret that is masked on its own: shorter ones (a lone `}`)
/// would mask ordinary text everywhere.
const MIN_LINE: usize = MIN_SECRET;

/// Replaces every secret value of a deployment with `***`, as CI systems do.
///
/// Besides each value as it is, it masks the forms in which a tool is likely to print it: each
/// line of a multi-line value (a private key, since logs are masked line by line) and the value
/// escaped as inside a JSON string (ansible prints variables as JSON).
#[derive(Clone, Default)]
pub struct Masker {
    // Longest first, so a secret that contains another is masked whole.
    values: Vec<SecretString>,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Masker({} values)", self.values.len())
    }
}

impl Masker {
    /// A masker for these secrets; empty values are ignored.
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a SecretString>) -> Self {
        let mut values: Vec<SecretString> = Vec::new();
        for secret in secrets {
            let value = secret.expose_secret();
            if value.is_empty() {
                continue;
            }
            values.push(secret.clone());
            let escaped = serde_json::to_string(value).unwrap_or_default();
            let escaped = escaped.trim_matches('"');
            if escaped != value {
                values.push(SecretString::from(escaped.to_owned()));
            }
            if value.contains('\n') {
                values.extend(
                    value
                        .lines()
                        .map(str::trim)
                        .filter(|line| line.len() >= MIN_LINE)
                        .map(|line| SecretString::from(line.to_owned())),
                );
            }
        }
        values.sort_by_key(|s| std::cmp::Reverse(s.expose_secret().len()));
        values.dedup_by(|a, b| a.expose_secret() == b.expose_secret());
        Self { values }
    }

    /// The text with every secret value replaced by `***`.
    pub fn mask(&self, text: &str) -> String {
        self.values.iter().fold(text.to_owned(), |text, secret| {
            text.replace(secret.expose_secret(), MASK)
        })
    }

    /// Masks raw bytes, decoding them as UTF-8 (invalid sequences become U+FFFD).
    pub fn mask_bytes(&self, bytes: &[u8]) -> String {
        self.mask(&String::from_utf8_lossy(bytes))
    }

    /// How many bytes of output that goes on are held back at a boundary, so that no secret can
    /// be split by it: the longest value's length minus one.
    pub fn hold_back(&self) -> usize {
        self.values
            .first()
            .map_or(0, |longest| longest.expose_secret().len().saturating_sub(1))
    }

    /// How many of the first bytes of `pending`, output that goes on, may be masked and let go
    /// now.
    ///
    /// All but the last [`hold_back`](Self::hold_back) bytes, for any of those may begin a secret
    /// whose end has not arrived; the cut then moves on past every secret it would split (a
    /// secret complete in `pending` is masked whole) and to the start of a UTF-8 character, so
    /// that neither piece is mangled when it is decoded.
    pub fn releasable(&self, pending: &[u8]) -> usize {
        let mut cut = pending.len().saturating_sub(self.hold_back());
        loop {
            while pending.get(cut).is_some_and(|&b| b & 0xC0 == 0x80) {
                cut += 1;
            }
            let split = self
                .values
                .iter()
                .filter_map(|value| {
                    let value = value.expose_secret().as_bytes();
                    (cut.saturating_sub(value.len() - 1)..cut)
                        .filter(|&start| pending[start..].starts_with(value))
                        .map(|start| start + value.len())
                        .max()
                })
                .max();
            match split {
                Some(end) if end > cut => cut = end,
                _ => return cut,
            }
        }
    }

    /// The last bytes of an output whose beginning was cut away, masked: without their first
    /// [`hold_back`](Self::hold_back) bytes, which may be the end of a secret whose start was cut.
    pub fn mask_tail(&self, tail: &[u8]) -> String {
        let mut start = self.hold_back().min(tail.len());
        while tail.get(start).is_some_and(|&b| b & 0xC0 == 0x80) {
            start += 1;
        }
        self.mask_bytes(&tail[start..])
    }
}

/// The names of the secrets shorter than [`MIN_SECRET`] bytes (an empty one has nothing to
/// mask): they cannot be given to a deployment.
pub fn too_short(secrets: &SecretValues) -> impl Iterator<Item = &str> {
    secrets
        .iter()
        .filter(|(_, value)| (1..MIN_SECRET).contains(&value.expose_secret().len()))
        .map(|(name, _)| name.as_str())
}

/// The name of a secret whose value, in any form [`Masker`] hides, occurs in `text`: the text
/// cannot be masked without being changed.
pub fn secret_within<'a>(secrets: &'a SecretValues, text: &str) -> Option<&'a str> {
    secrets
        .iter()
        .find(|(_, value)| Masker::new([*value]).mask(text) != text)
        .map(|(name, _)| name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_every_occurrence_and_the_longest_secret_first() {
        let secrets = [
            SecretString::from("abc"),
            SecretString::from("abcdef"),
            SecretString::from(""),
        ];
        let masker = Masker::new(&secrets);
        assert_eq!(masker.mask("x abcdef y abc z"), "x *** y *** z");
        assert_eq!(masker.mask("nothing here"), "nothing here");
    }

    #[test]
    fn the_lines_and_the_json_form_of_a_multi_line_secret_are_masked_too() {
        let key = SecretString::from(
            "-----BEGIN KEY-----\nb3BlbnNzaC1rZXk\n\"q\"\n}\n-----END KEY-----\n",
        );
        let masker = Masker::new([&key]);
        assert_eq!(masker.mask("line: b3BlbnNzaC1rZXk"), "line: ***");
        assert_eq!(
            masker.mask(
                r#"{"msg": "-----BEGIN KEY-----\nb3BlbnNzaC1rZXk\n\"q\"\n}\n-----END KEY-----\n"}"#
            ),
            r#"{"msg": "***"}"#
        );
        assert_eq!(
            masker.mask("a } stays"),
            "a } stays",
            "short lines are left alone"
        );
    }

    #[test]
    fn the_secret_within_a_text_is_named() {
        let secrets: SecretValues = [
            ("api_key".to_owned(), SecretString::from("k-123")),
            (
                SSH_KEY_SECRET.to_owned(),
                SecretString::from("-----BEGIN-----\nb3BlbnNzaC1rZXk\n-----END-----"),
            ),
        ]
        .into();
        assert_eq!(secret_within(&secrets, "k-123-suffix"), Some("api_key"));
        assert_eq!(
            secret_within(&secrets, "x b3BlbnNzaC1rZXk y"),
            Some(SSH_KEY_SECRET),
            "a line of a multi-line secret counts"
        );
        assert_eq!(secret_within(&secrets, "k-12 and 3"), None);
    }

    /// Output that goes on: what `releasable` lets go at each boundary, then the rest at the end.
    fn released_in_pieces(masker: &Masker, text: &[u8], piece: usize) -> String {
        let mut out = String::new();
        let mut pending = Vec::new();
        for chunk in text.chunks(piece) {
            pending.extend_from_slice(chunk);
            let cut = masker.releasable(&pending);
            out.push_str(&masker.mask_bytes(&pending[..cut]));
            pending.drain(..cut);
        }
        out + &masker.mask_bytes(&pending)
    }

    #[test]
    fn a_secret_is_masked_wherever_a_boundary_falls() {
        let secret = SecretString::from("s3cr3t-value");
        let masker = Masker::new([&secret]);
        assert_eq!(masker.hold_back(), "s3cr3t-value".len() - 1);
        for offset in 0..40 {
            let text = format!(
                "{}s3cr3t-value{}",
                "x".repeat(offset),
                "y".repeat(40 - offset)
            );
            for piece in 1..20 {
                let out = released_in_pieces(&masker, text.as_bytes(), piece);
                assert!(
                    !out.contains("s3cr3t"),
                    "offset {offset}, pieces of {piece}: {out}"
                );
                assert_eq!(out.len(), text.len() - "s3cr3t-value".len() + MASK.len());
            }
        }
    }

    #[test]
    fn a_cut_falls_between_characters_and_after_a_whole_secret() {
        let masker = Masker::new([&SecretString::from("abcdef")]);
        assert_eq!(
            masker.releasable(b"xxxxxxxxxx"),
            5,
            "the last 5 bytes are held"
        );
        assert_eq!(
            masker.releasable(b"xxxxxabcdef"),
            11,
            "a whole secret goes with its piece"
        );
        assert_eq!(masker.releasable("xxxé".as_bytes()), 0);
        assert_eq!(
            released_in_pieces(&masker, "ééé abcdef ééé".as_bytes(), 3),
            "ééé *** ééé"
        );
    }

    #[test]
    fn a_tail_cut_inside_a_secret_shows_none_of_it() {
        let masker = Masker::new([&SecretString::from("s3cr3t-value")]);
        assert_eq!(masker.mask_tail(b"3t-value and then"), "d then");
        assert_eq!(masker.mask_tail(b"ab"), "");
        assert_eq!(Masker::default().mask_tail(b"all of it"), "all of it");
    }

    #[test]
    fn secrets_shorter_than_four_bytes_are_named() {
        let mut secrets: SecretValues = [
            ("long".to_owned(), SecretString::from("long enough")),
            ("unset".to_owned(), SecretString::from("")),
        ]
        .into();
        assert_eq!(too_short(&secrets).count(), 0);
        secrets.insert("pin".to_owned(), SecretString::from("123"));
        assert_eq!(too_short(&secrets).collect::<Vec<_>>(), ["pin"]);
    }

    #[test]
    fn a_secret_does_not_show_in_debug_output() {
        let secret = SecretString::from("hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!format!("{:?}", Masker::new([&secret])).contains("hunter2"));
    }
}
