//! What the engine needs of every input before it is recorded, whichever door it came through:
//! a file's path is a plain path inside the blueprint's folder ([`path_problem`]), and no text
//! a step is given holds a NUL byte ([`nul_problem`]), which no program's arguments,
//! environment or file names can carry. Durations have their own bound
//! ([`crate::duration::MAX_DURATION`]).
//!
//! Each rule says what is wrong with one value; [`crate::blueprint`] applies them to every field
//! of a blueprint and to the parameters and secrets of a request, naming the field.

/// What a message says of a NUL byte: its escape, as the user would write it.
pub const NUL: &str = "a NUL byte (\\0)";

/// What is wrong with a text a step is given, if it holds a NUL byte.
pub fn nul_problem(text: &str) -> Option<String> {
    text.contains('\0').then(|| {
        format!("holds {NUL}, which no step can be given (programs' arguments, environment and files end text there); remove it")
    })
}

/// What is wrong with the path of a file a step takes, relative to the blueprint's folder: it
/// must name a file inside that folder plainly, so that the engine writes it where the step
/// will look for it, and nowhere else.
pub fn path_problem(path: &str) -> Option<String> {
    let why = if path.is_empty() {
        "is empty"
    } else if path.contains('\0') {
        "holds a NUL byte (\\0)"
    } else if path.starts_with('/') {
        "is absolute"
    } else if path.split('/').any(str::is_empty) {
        "has an empty part (`//`, or a '/' at its end)"
    } else if path.split('/').any(|part| part == "." || part == "..") {
        "has a `.` or `..` part"
    } else {
        return None;
    };
    Some(format!(
        "`{}` {why}; give a path inside the blueprint's folder, like `infra/main.tf`",
        crate::text::escaped(path)
    ))
}

/// Every (field, problem) for the NUL bytes in a JSON value's strings and keys, the field being
/// `field` followed by the keys and indices leading there.
pub fn nul_problems_in(field: &str, value: &serde_json::Value) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    collect_nuls(field.to_owned(), value, &mut problems);
    problems
}

fn collect_nuls(field: String, value: &serde_json::Value, problems: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::String(text) => {
            if let Some(problem) = nul_problem(text) {
                problems.push((field, problem));
            }
        }
        serde_json::Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                collect_nuls(format!("{field}[{index}]"), item, problems);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let inner = format!("{field}.{key}");
                if let Some(problem) = nul_problem(key) {
                    problems.push((inner.clone(), format!("the key {problem}")));
                }
                collect_nuls(inner, item, problems);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_path_is_plain_and_inside_the_folder() {
        for good in [
            "main.tf",
            "infra/main.tf",
            "a/b/c.yml",
            ".terraform.lock.hcl",
            "a..b",
        ] {
            assert_eq!(path_problem(good), None, "{good}");
        }
        for (bad, why) in [
            ("", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("infra//main.tf", "empty part"),
            ("infra/", "empty part"),
            ("../x", "`..` part"),
            ("infra/../../x", "`..` part"),
            ("./x", "`.` or `..` part"),
            ("in\0fra", "NUL"),
        ] {
            let found = path_problem(bad).unwrap_or_default();
            assert!(found.contains(why), "{bad:?}: {found}");
            assert!(!found.contains('\0'), "{found:?}");
        }
    }

    #[test]
    fn a_nul_is_found_in_any_string_or_key_and_named() {
        let value = json!({"a": ["ok", "b\u{0}"], "k\u{0}": 1, "c": {"d": "\u{0}"}});
        let fields: Vec<String> = nul_problems_in("with", &value)
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        assert_eq!(fields, ["with.a[1]", "with.c.d", "with.k\u{0}"]);
        assert_eq!(nul_problems_in("with", &json!({"a": "fine"})), vec![]);
    }
}
