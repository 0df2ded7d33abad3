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

/// What replaces a secret value in output.
pub const MASK: &str = "***";

/// Replaces every secret value of a deployment with `***`, as CI systems do.
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
        let mut values: Vec<SecretString> = secrets
            .into_iter()
            .filter(|s| !s.expose_secret().is_empty())
            .cloned()
            .collect();
        values.sort_by_key(|s| std::cmp::Reverse(s.expose_secret().len()));
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
    fn a_secret_does_not_show_in_debug_output() {
        let secret = SecretString::from("hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
        assert!(!format!("{:?}", Masker::new([&secret])).contains("hunter2"));
    }
}
