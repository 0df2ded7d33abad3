//! What names users give may hold, and how user text is shown back to them.
//!
//! - [`check_name`]: the one rule for blueprint names, step names, host groups and tenants given
//!   with `--tenant` ([`NAME_RULE`]).
//! - [`check_deployment_name`]: a deployment's name, the same rule, and never an id's shape.
//! - [`check_project_name`]: the looser rule for a tenant that is a cloud project's name, which
//!   the cloud chose and this engine cannot rename.
//! - [`escaped`]: user text made safe to print, so an error quoting it cannot move the cursor,
//!   recolour the terminal or reverse the text around it.

use std::borrow::Cow;

/// The longest name: names label sandboxes, log folders and cloud resources, which have limits.
pub const MAX_NAME: usize = 63;

/// The name rule, as messages say it.
pub const NAME_RULE: &str =
    "lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters";

/// The longest cloud project name taken as a tenant (Keystone allows 64).
pub const MAX_PROJECT_NAME: usize = 255;

/// Why a text is not a name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing at all.
    #[error("must not be empty; use {NAME_RULE}")]
    Empty,
    /// Longer than [`MAX_NAME`] (or [`MAX_PROJECT_NAME`]) characters.
    #[error("is {0} characters long; a name has at most {1} characters")]
    TooLong(usize, usize),
    /// A character outside the rule.
    #[error("`{}` holds {}; use {NAME_RULE}", escaped(.0), describe(*.1))]
    Character(String, char),
    /// Starts with '-'.
    #[error("`{}` starts with '-'; use {NAME_RULE}", escaped(.0))]
    LeadingDash(String),
    /// A cloud project name that cannot label a tenant safely.
    #[error("`{}` {}", escaped(.0), .1)]
    Project(String, &'static str),
    /// A deployment's name shaped like a deployment id, which it would be taken for.
    #[error("`{}` has the shape of a deployment id; a deployment's name must not, or it could be taken for one", escaped(.0))]
    IdShaped(String),
}

/// Checks a name: [`NAME_RULE`].
pub fn check_name(text: &str) -> Result<(), NameError> {
    if text.is_empty() {
        return Err(NameError::Empty);
    }
    if let Some(bad) = text
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(NameError::Character(text.to_owned(), bad));
    }
    if text.starts_with('-') {
        return Err(NameError::LeadingDash(text.to_owned()));
    }
    let length = text.chars().count();
    if length > MAX_NAME {
        return Err(NameError::TooLong(length, MAX_NAME));
    }
    Ok(())
}

/// Checks a deployment's name (`deploy --name`): [`NAME_RULE`], and not the shape of a
/// deployment id, so that a name and an id given where either is taken never collide.
pub fn check_deployment_name(text: &str) -> Result<(), NameError> {
    check_name(text)?;
    if text.parse::<overture_events::DeploymentId>().is_ok() {
        return Err(NameError::IdShaped(text.to_owned()));
    }
    Ok(())
}

/// Checks a cloud project's name before it becomes a tenant. Clouds allow capitals, spaces and
/// `_` in project names and a user cannot change them, so the whole [`NAME_RULE`] would lock
/// such users out; what is refused is what could mislead a reader or a path: nothing, control
/// and direction characters, '/' and `\`, `.` and `..`, and spaces at either end.
pub fn check_project_name(text: &str) -> Result<(), NameError> {
    let refuse = |why| Err(NameError::Project(text.to_owned(), why));
    let length = text.chars().count();
    if text.trim().is_empty() {
        refuse("is empty")
    } else if length > MAX_PROJECT_NAME {
        Err(NameError::TooLong(length, MAX_PROJECT_NAME))
    } else if text.chars().any(is_unprintable) {
        refuse("holds a control or text-direction character")
    } else if text.contains(['/', '\\']) {
        refuse("holds '/' or '\\'")
    } else if text == "." || text == ".." {
        refuse("is `.` or `..`")
    } else if text.trim() != text {
        refuse("starts or ends with a space")
    } else {
        Ok(())
    }
}

/// Whether printing `c` would change the terminal or the text's direction rather than show a
/// character: C0 and C1 controls, DEL, and the Unicode direction marks, embeddings, overrides
/// and isolates ("Trojan Source").
pub fn is_unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every [unprintable](is_unprintable) character written as an escape (`\u{1b}`,
/// `\n`), and everything else as it is (so `→` and `é` stay readable).
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unprintable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unprintable(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A character, named for a message: escaped when unprintable.
fn describe(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        c if is_unprintable(c) => format!("the control character `{}`", c.escape_default()),
        c => format!("`{c}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_one_rule() {
        for good in ["default", "a", "hello-world", "9lives", &"s".repeat(63)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        assert_eq!(check_name(""), Err(NameError::Empty));
        assert_eq!(check_name("-x"), Err(NameError::LeadingDash("-x".into())));
        assert_eq!(check_name(&"s".repeat(64)), Err(NameError::TooLong(64, 63)));
        for (bad, c) in [
            ("../../x", '.'),
            ("Acme", 'A'),
            ("a\u{1b}[31m", '\u{1b}'),
            ("a b", ' '),
        ] {
            assert_eq!(check_name(bad), Err(NameError::Character(bad.into(), c)));
        }
    }

    #[test]
    fn a_refused_name_is_quoted_escaped() {
        let message = check_name("ok\u{1b}[2J\u{7}")
            .expect_err("refused")
            .to_string();
        assert!(!message.chars().any(is_unprintable), "{message:?}");
        assert!(message.contains(r"`ok\u{1b}[2J\u{7}`"), "{message}");
        assert!(
            message.contains("the control character `\\u{1b}`"),
            "{message}"
        );
    }

    #[test]
    fn project_names_are_refused_only_when_unsafe() {
        for good in ["demo", "Team A", "prod_eu-1", "Équipe"] {
            assert_eq!(check_project_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "  ",
            "a/b",
            "..",
            "x\u{1b}]0;t\u{7}",
            "\u{202E}txt",
            " a",
            "a\\b",
        ] {
            assert!(check_project_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn escaping_keeps_printable_text_and_escapes_the_rest() {
        assert_eq!(escaped("a → b"), "a → b");
        assert_eq!(escaped("x\u{1b}[31my\n"), "x\\u{1b}[31my\\n");
        assert_eq!(escaped("\u{202E}cba"), "\\u{202e}cba");
        assert_eq!(escaped("\u{9b}"), "\\u{9b}");
    }
}
