//! The step kinds: the `with` settings each takes, the checks on them, and the files from the
//! blueprint's folder each needs.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::duration::{read_duration, DurationError};
use crate::template::Template;

/// One `with` setting of a kind.
struct Setting {
    name: &'static str,
    required: bool,
}

const fn required(name: &'static str) -> Setting {
    Setting {
        name,
        required: true,
    }
}

const fn optional(name: &'static str) -> Setting {
    Setting {
        name,
        required: false,
    }
}

/// The step kinds this engine can run, with the `with` settings each takes.
const KINDS: &[(&str, &[Setting])] = &[
    ("script", &[required("command")]),
    ("noop", &[]),
    ("terraform", &[required("dir"), optional("vars")]),
    (
        "ansible",
        &[
            required("playbook"),
            required("hosts"),
            optional("user"),
            optional("vars"),
        ],
    ),
    (
        "http",
        &[
            required("url"),
            optional("method"),
            optional("headers"),
            optional("body"),
            optional("expect_status"),
            optional("outputs"),
            optional("via"),
        ],
    ),
    ("wait-ssh", &[required("hosts"), optional("timeout")]),
    (
        "servers",
        &[
            required("servers"),
            optional("security_groups"),
            optional("timeout"),
        ],
    ),
];

/// What an `http` step's `via` names: the blueprint's bastion, to reach hosts behind it.
pub const VIA_BASTION: &str = "bastion";

/// Whether a step reaches its hosts through the blueprint's bastion (when it has one): every
/// step that logs in to servers, and `http` steps that say `via: bastion`.
pub fn uses_bastion(kind: &str, with: &BTreeMap<String, Value>) -> bool {
    match kind {
        "ansible" | "wait-ssh" => true,
        "http" => with.get("via").and_then(Value::as_str) == Some(VIA_BASTION),
        _ => false,
    }
}

/// The HTTP methods an `http` step may use.
pub const HTTP_METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

/// How long a `wait-ssh` step waits, unless it says.
pub const DEFAULT_SSH_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The names of every kind, for messages.
pub fn names() -> Vec<&'static str> {
    KINDS.iter().map(|(name, _)| *name).collect()
}

/// Whether this engine knows the kind.
pub fn is_known(kind: &str) -> bool {
    KINDS.iter().any(|(name, _)| *name == kind)
}

/// Every problem with a step's `with` settings, as (field below `with`, problem).
pub fn check_with(
    kind: &str,
    with: &BTreeMap<String, Value>,
    hosts: &BTreeMap<String, Vec<String>>,
) -> Vec<(String, String)> {
    let Some((_, settings)) = KINDS.iter().find(|(name, _)| *name == kind) else {
        return vec![];
    };
    let mut problems = Vec::new();
    for setting in settings.iter().filter(|s| s.required) {
        if !with.contains_key(setting.name) {
            problems.push((
                String::new(),
                format!("a `{kind}` step needs `with.{}`", setting.name),
            ));
        }
    }
    for key in with.keys() {
        if !settings.iter().any(|s| s.name == key) {
            let known: Vec<&str> = settings.iter().map(|s| s.name).collect();
            let hint = if known.is_empty() {
                "it takes none".to_owned()
            } else {
                format!("it takes: {}", known.join(", "))
            };
            problems.push((
                format!(".{key}"),
                format!("unknown setting for a `{kind}` step; {hint}"),
            ));
        }
    }
    let mut problem = |key: &str, text: String| problems.push((format!(".{key}"), text));
    for (key, value) in with {
        let found = match (kind, key.as_str()) {
            ("script", "command") => text(value).err(),
            ("terraform", "dir") => relative_path(value).err(),
            ("ansible", "playbook") => relative_path(value).err().or_else(|| {
                let path = value.as_str().unwrap_or_default();
                (!(path.ends_with(".yml") || path.ends_with(".yaml")))
                    .then(|| format!("`{path}` must be a playbook file ending in .yml or .yaml"))
            }),
            ("terraform" | "ansible", "vars") => value
                .as_object()
                .is_none()
                .then(|| "must be a map of variable names to values".to_owned()),
            ("ansible", "user") => text(value).err(),
            ("ansible" | "wait-ssh", "hosts") => host_list(value, hosts).err(),
            ("wait-ssh", "timeout") => match value.as_str().map(read_duration) {
                Some(Ok(wait)) if !wait.is_zero() => None,
                Some(Err(long @ DurationError::TooLong(_))) => Some(long.to_string()),
                _ => Some(format!(
                    "`{}` is not a duration; write it like 30s or 2m",
                    plain(value)
                )),
            },
            ("http", "url") => text(value)
                .err()
                .or_else(|| literal_url_problem(value.as_str().unwrap_or_default())),
            ("http", "body") => text(value).err(),
            ("http", "via") => (value.as_str() != Some(VIA_BASTION)).then(|| {
                format!(
                    "`{}` is not a way through; the only one is `{VIA_BASTION}`",
                    plain(value)
                )
            }),
            ("http", "method") => match value.as_str() {
                Some(method) if HTTP_METHODS.contains(&method) => None,
                _ => Some(format!(
                    "`{}` is not a method; use one of {}",
                    plain(value),
                    HTTP_METHODS.join(", ")
                )),
            },
            ("http", "headers") => match value.as_object() {
                Some(map) if map.values().all(Value::is_string) => None,
                _ => Some("must be a map of header names to text".to_owned()),
            },
            ("http", "expect_status") => expected_statuses(value).err(),
            ("http", "outputs") => match value.as_object() {
                Some(map) if map.values().all(|v| v.as_str().is_some_and(is_pointer)) => None,
                _ => Some(
                    "must map output names to JSON pointers into the answer, like `/server/id`"
                        .to_owned(),
                ),
            },
            _ => None,
        };
        if let Some(text) = found {
            problem(key, text);
        }
    }
    if kind == "script" {
        if let Some(command) = with.get("command").and_then(Value::as_str) {
            problems.extend(
                script_quoting(command)
                    .into_iter()
                    .map(|p| (".command".to_owned(), p)),
            );
        }
    }
    if kind == "servers" {
        // Its settings refer to each other (a server to its groups, a rule to a group), so they
        // are read as a whole.
        problems.extend(crate::servers::read(with).err().unwrap_or_default());
    }
    problems
}

/// What is wrong with where a `script` command's references stand in its shell quoting (see
/// [`crate::shell`]). A command that is not a template is the reference checks' to report.
fn script_quoting(command: &str) -> Vec<String> {
    let Ok(template) = Template::parse(command) else {
        return vec![];
    };
    match crate::shell::script_command(&template, |n| format!("OVERTURE_REF_{n}")) {
        Ok(_) => vec![],
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

/// The URL schemes an `http` step may call.
pub const HTTP_SCHEMES: [&str; 2] = ["http", "https"];

/// What is wrong with a rendered `http` URL: anything but `http://` or `https://` at its start
/// (curl would read `file://` and others, or guess a scheme for a URL without one). Checked
/// when the attempt starts, because a templated URL is known only then; the message quotes
/// the scheme alone, not the URL, which may hold a secret.
pub fn url_problem(url: &str) -> Option<String> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return None;
    }
    // A scheme is short; a long "scheme" may be the start of a secret the URL was rendered
    // from, which the runner's masking would not catch in part.
    Some(match scheme_of(url).filter(|scheme| scheme.len() <= 10) {
        Some(scheme) => format!(
            "the URL's scheme is `{}`; an `http` step calls only http:// and https:// URLs",
            crate::text::escaped(scheme)
        ),
        None => "the URL does not start with http:// or https://; an `http` step calls only those"
            .to_owned(),
    })
}

/// What is wrong with the scheme of a URL as written in a blueprint, as far as the text before
/// its first template tells; a URL that starts with a template is checked when it is rendered
/// ([`url_problem`]).
fn literal_url_problem(url: &str) -> Option<String> {
    let templated = url.find("{{");
    let prefix = &url[..templated.unwrap_or(url.len())];
    let could_grow_into_a_scheme =
        templated.is_some() && !prefix.contains(':') && prefix.chars().all(is_scheme_char);
    if could_grow_into_a_scheme {
        return None;
    }
    match scheme_of(prefix) {
        Some(scheme) if HTTP_SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme)) => None,
        Some(scheme) => Some(format!(
            "`{url}` has the scheme `{scheme}`; an `http` step calls only http:// and https:// URLs"
        )),
        None => Some(format!(
            "`{url}` does not start with http:// or https://; write the scheme, like `https://api.example.com/`"
        )),
    }
}

/// The scheme of a URL (RFC 3986: a letter, then letters, digits, `+`, `-` or `.`, before `:`).
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    (chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(is_scheme_char))
        .then_some(scheme)
}

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

/// The statuses an `http` step accepts: `expect_status` as a number or a list, or any 2xx.
pub fn expected_statuses(value: &Value) -> Result<Vec<u16>, String> {
    let status = |v: &Value| {
        v.as_u64()
            .filter(|code| (100..=599).contains(code))
            .and_then(|code| u16::try_from(code).ok())
    };
    let found = match value {
        Value::Array(items) => items.iter().map(status).collect::<Option<Vec<_>>>(),
        single => status(single).map(|code| vec![code]),
    };
    match found {
        Some(codes) if !codes.is_empty() => Ok(codes),
        _ => Err(format!(
            "`{}` is not an HTTP status; give one like 200, or a list like [200, 201]",
            plain(value)
        )),
    }
}

/// The addresses a `hosts` setting names: a host group of the blueprint, or a list.
pub fn host_list<'a>(
    value: &'a Value,
    groups: &'a BTreeMap<String, Vec<String>>,
) -> Result<Vec<&'a str>, String> {
    match value {
        Value::String(group) => groups
            .get(group)
            .map(|addresses| addresses.iter().map(String::as_str).collect())
            .ok_or_else(|| {
                let known: Vec<&str> = groups.keys().map(String::as_str).collect();
                format!(
                    "`{group}` is not a host group of the blueprint; {}",
                    if known.is_empty() {
                        "declare it under `hosts`, or give a list of address:port".to_owned()
                    } else {
                        format!("the groups are: {}", known.join(", "))
                    }
                )
            }),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| {
                let address = item
                    .as_str()
                    .ok_or_else(|| "each host must be text: address or address:port".to_owned())?;
                address_problem(address).map_or(Ok(address), Err)
            })
            .collect(),
        _ => Err("give a host group's name or a list of address:port".to_owned()),
    }
}

/// What is wrong with a host's address as written: a control or text-direction character,
/// which no address has and which would reach terminals in every message naming the host.
pub fn address_problem(address: &str) -> Option<String> {
    address.chars().any(crate::text::is_unprintable).then(|| {
        format!(
            "`{}` holds a control character; write an address, address:port or [ipv6]:port",
            crate::text::escaped(address)
        )
    })
}

/// The folder (relative to the blueprint's) whose files a step takes into its sandbox.
pub fn bundle_dir(kind: &str, with: &BTreeMap<String, Value>) -> Option<String> {
    let path = match kind {
        "terraform" => with.get("dir")?.as_str()?,
        "ansible" => {
            let playbook = with.get("playbook")?.as_str()?;
            return Some(
                playbook
                    .rsplit_once('/')
                    .map_or(String::new(), |(dir, _)| dir.to_owned()),
            );
        }
        _ => return None,
    };
    Some(path.trim_end_matches('/').to_owned())
}

/// Whether `text` is a JSON pointer (RFC 6901) that picks something inside a document.
fn is_pointer(text: &str) -> bool {
    text.starts_with('/')
}

fn text(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| "must be text".to_owned())
}

/// A plain path inside the blueprint's folder, without templates ([`crate::inputs::path_problem`];
/// a folder may end in one '/').
fn relative_path(value: &Value) -> Result<&str, String> {
    let path = text(value)?;
    let templated = Template::parse(path).map_or(true, |t| t.references().next().is_some());
    let plain = path.strip_suffix('/').unwrap_or(path);
    if templated || crate::inputs::path_problem(plain).is_some() {
        return Err(format!(
            "`{}` must be a plain path inside the blueprint's folder, like `infra` or `site.yml` \
             (relative, without `..`, `.` or empty parts)",
            crate::text::escaped(path)
        ));
    }
    Ok(path)
}

/// A setting's value as a user wrote it, for messages.
pub(crate) fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).expect("a map")
    }

    #[test]
    fn every_kind_checks_its_settings() {
        let groups = BTreeMap::from([("web".to_owned(), vec!["10.0.0.1:22".to_owned()])]);
        let cases = [
            ("terraform", json!({"dir": "../infra"}), ".dir"),
            ("terraform", json!({"dir": "infra", "vars": [1]}), ".vars"),
            (
                "ansible",
                json!({"playbook": "site.txt", "hosts": "web"}),
                ".playbook",
            ),
            (
                "ansible",
                json!({"playbook": "site.yml", "hosts": "db"}),
                ".hosts",
            ),
            (
                "http",
                json!({"url": "http://x", "method": "FETCH"}),
                ".method",
            ),
            (
                "http",
                json!({"url": "http://x", "expect_status": 42}),
                ".expect_status",
            ),
            (
                "http",
                json!({"url": "http://x", "outputs": {"id": "id"}}),
                ".outputs",
            ),
            (
                "wait-ssh",
                json!({"hosts": ["a:22"], "timeout": "soon"}),
                ".timeout",
            ),
            ("wait-ssh", json!({}), ""),
            (
                "script",
                json!({"command": "cat <<{{ params.x }}\nx\n"}),
                ".command",
            ),
        ];
        for (kind, settings, field) in cases {
            let problems = check_with(kind, &with(settings.clone()), &groups);
            assert!(
                problems.iter().any(|(f, _)| f == field),
                "{kind} {settings}: {problems:?}"
            );
        }
        let good = [
            ("terraform", json!({"dir": "infra", "vars": {"a": 1}})),
            (
                "ansible",
                json!({"playbook": "play/site.yml", "hosts": "web", "user": "root"}),
            ),
            (
                "ansible",
                json!({"playbook": "site.yaml", "hosts": ["127.0.0.1:2222"]}),
            ),
            (
                "http",
                json!({"url": "http://x", "method": "POST", "expect_status": [200, 201],
                            "headers": {"a": "b"}, "outputs": {"id": "/id"}}),
            ),
            ("wait-ssh", json!({"hosts": "web", "timeout": "2m"})),
        ];
        for (kind, settings) in good {
            assert_eq!(
                check_with(kind, &with(settings.clone()), &groups),
                vec![],
                "{kind} {settings}"
            );
        }
    }

    #[test]
    fn an_http_url_must_be_http_or_https_as_far_as_it_is_written() {
        let problem = |url: &str| {
            check_with("http", &with(json!({ "url": url })), &BTreeMap::new())
                .into_iter()
                .map(|(_, text)| text)
                .next()
        };
        for good in [
            "http://x/",
            "HTTPS://x",
            "{{ params.api }}/servers",
            "http{{ params.s }}://x",
            "https://{{ params.host }}/",
        ] {
            assert_eq!(problem(good), None, "{good}");
        }
        for (bad, words) in [
            ("file:///etc/passwd", "scheme `file`"),
            ("ftp://{{ params.host }}/", "scheme `ftp`"),
            ("gopher:{{ params.rest }}", "scheme `gopher`"),
            ("example.com/x", "does not start with http:// or https://"),
            (
                "/{{ params.path }}",
                "does not start with http:// or https://",
            ),
        ] {
            let found = problem(bad).unwrap_or_default();
            assert!(found.contains(words), "{bad}: {found}");
        }
    }

    #[test]
    fn a_rendered_url_is_checked_without_quoting_it() {
        assert_eq!(url_problem("https://api/x"), None);
        assert_eq!(url_problem("Http://api"), None);
        let found = url_problem("file:///etc/secret-token").unwrap_or_default();
        assert!(found.contains("scheme is `file`"), "{found}");
        assert!(!found.contains("secret-token"), "{found}");
        assert!(url_problem("api.example.com/x")
            .is_some_and(|p| p.contains("does not start with http://")));
        assert!(url_problem("x\u{1b}:y").is_some_and(|p| !p.contains('\u{1b}')));
        assert!(url_problem("averylongsecretvalue:x").is_some_and(|p| !p.contains("avery")));
    }

    #[test]
    fn steps_take_the_folder_of_their_files() {
        assert_eq!(
            bundle_dir("terraform", &with(json!({"dir": "infra/"}))),
            Some("infra".into())
        );
        assert_eq!(
            bundle_dir("ansible", &with(json!({"playbook": "play/site.yml"}))),
            Some("play".into())
        );
        assert_eq!(
            bundle_dir("ansible", &with(json!({"playbook": "site.yml"}))),
            Some(String::new())
        );
        assert_eq!(
            bundle_dir("script", &with(json!({"command": "true"}))),
            None
        );
    }
}
