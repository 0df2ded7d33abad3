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

/// The shortest line of a multi-line secret that is masked on its own: shorter ones (a lone `}`)
/// would mask ordinary text everywhere.
const MIN_LINE: usize = 4;

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

    #[test]
    fn a_secret_does_not_show_in_debug_output() {
        let secret = SecretString::from("hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!format!("{:?}", Masker::new([&secret])).contains("hunter2"));
    }
}
