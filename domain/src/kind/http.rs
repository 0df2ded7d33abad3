//! The `http` kind: one HTTP request through curl, judged by its status, whose answer's fields
//! may become outputs.
//!
//! - Settings ([`HttpSettings`]): `url`, required; `method` (GET unless given), `headers`,
//!   `body`, `expect_status` (any 2xx unless given), `outputs` (output names to JSON pointers
//!   into the answer), `via` (`bastion`: through the blueprint's bastion), all optional. The
//!   URL, the headers' values and the body may be templates.
//! - Checks: the URL is `http://` or `https://`, as far as the blueprint writes it here and
//!   again once the attempt renders it ([`url_problem`]); the method is one of
//!   [`HTTP_METHODS`]; headers are texts; statuses are HTTP statuses; outputs are JSON pointers.
//! - Other half: `functions/runner/src/kind/http.rs` renders the call into a curl config, makes
//!   it (through a tunnel behind the bastion), and judges the answer.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{optional, plain, required, text, Problems, Reading, Setting};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "http";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 7] = [
    required("url"),
    optional("method"),
    optional("headers"),
    optional("body"),
    optional("expect_status"),
    optional("outputs"),
    optional("via"),
];

/// What an `http` step's `via` names: the blueprint's bastion, to reach hosts behind it.
pub const VIA_BASTION: &str = "bastion";

/// The HTTP methods an `http` step may use.
pub const HTTP_METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

/// The URL schemes an `http` step may call.
pub const HTTP_SCHEMES: [&str; 2] = ["http", "https"];

/// An `http` step's settings, read. Its texts are as written: the runner renders the URL, the
/// headers' values and the body when the attempt starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    /// The URL, as written.
    pub url: String,
    /// The method, one of [`HTTP_METHODS`].
    pub method: &'static str,
    /// The headers, names to values as written, in the map's order.
    pub headers: Vec<(String, String)>,
    /// The body, as written.
    pub body: Option<String>,
    /// The statuses that succeed; `None`: any 2xx.
    pub expect_status: Option<Vec<u16>>,
    /// Output names to JSON pointers into the answer, in the map's order.
    pub outputs: Vec<(String, String)>,
    /// Whether the call goes through the blueprint's bastion (`via: bastion`).
    pub via_bastion: bool,
}

/// Whether the step says `via: bastion` (read on its own, before the other settings are
/// checked).
pub(crate) fn goes_via_bastion(with: &BTreeMap<String, Value>) -> bool {
    with.get("via").and_then(Value::as_str) == Some(VIA_BASTION)
}

/// Reads an `http` step's `with`, or says every problem as (field below `with`, problem).
pub fn read(with: &BTreeMap<String, Value>) -> Result<HttpSettings, Problems> {
    let mut reading = Reading::start(NAME, &SETTINGS, with);
    let mut url = None;
    let mut settings = HttpSettings {
        url: String::new(),
        method: "GET",
        headers: vec![],
        body: None,
        expect_status: None,
        outputs: vec![],
        via_bastion: false,
    };
    for (key, value) in with {
        let (key, read) = (key.as_str(), &mut settings);
        match key {
            "url" => url = reading.value(key, read_url(value)),
            "body" => read.body = reading.value(key, text(value).map(str::to_owned)),
            "via" => read.via_bastion = reading.value(key, read_via(value)).is_some(),
            "method" => read.method = reading.value(key, read_method(value)).unwrap_or("GET"),
            "headers" => read.headers = reading.value(key, read_headers(value)).unwrap_or_default(),
            "expect_status" => read.expect_status = reading.value(key, expected_statuses(value)),
            "outputs" => read.outputs = reading.value(key, read_outputs(value)).unwrap_or_default(),
            _ => {}
        }
    }
    reading.finish(url.map(|url| HttpSettings { url, ..settings }))
}

/// The URL as written, its scheme checked as far as the text tells.
fn read_url(value: &Value) -> Result<String, String> {
    let url = text(value)?;
    literal_url_problem(url).map_or(Ok(url.to_owned()), Err)
}

/// `via`: only the bastion.
fn read_via(value: &Value) -> Result<(), String> {
    (value.as_str() == Some(VIA_BASTION))
        .then_some(())
        .ok_or_else(|| {
            format!(
                "`{}` is not a way through; the only one is `{VIA_BASTION}`",
                plain(value)
            )
        })
}

/// The method, one of [`HTTP_METHODS`].
fn read_method(value: &Value) -> Result<&'static str, String> {
    value
        .as_str()
        .and_then(|method| HTTP_METHODS.into_iter().find(|known| *known == method))
        .ok_or_else(|| {
            format!(
                "`{}` is not a method; use one of {}",
                plain(value),
                HTTP_METHODS.join(", ")
            )
        })
}

/// Header names to texts.
fn read_headers(value: &Value) -> Result<Vec<(String, String)>, String> {
    named_texts(value, |_| true).ok_or_else(|| "must be a map of header names to text".to_owned())
}

/// Output names to JSON pointers.
fn read_outputs(value: &Value) -> Result<Vec<(String, String)>, String> {
    named_texts(value, is_pointer).ok_or_else(|| {
        "must map output names to JSON pointers into the answer, like `/server/id`".to_owned()
    })
}

/// A map of names to texts that each pass `good`, in the map's order.
fn named_texts(value: &Value, good: fn(&str) -> bool) -> Option<Vec<(String, String)>> {
    value
        .as_object()?
        .iter()
        .map(|(name, value)| {
            let text = value.as_str().filter(|text| good(text))?;
            Some((name.clone(), text.to_owned()))
        })
        .collect()
}

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

/// Whether `text` is a JSON pointer (RFC 6901) that picks something inside a document.
fn is_pointer(text: &str) -> bool {
    text.starts_with('/')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).expect("a map")
    }

    #[test]
    fn an_http_url_must_be_http_or_https_as_far_as_it_is_written() {
        let problem = |url: &str| {
            super::super::Kind::Http
                .check_with(&with(json!({ "url": url })), &BTreeMap::new())
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
}
