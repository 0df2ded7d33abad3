//! The CloudEvents HTTP protocol binding (1.0): which content mode a request uses, and the
//! event of a binary-mode request (its `ce-*` headers and body) or of a batch, as the JSON
//! event format writes it. Pure: headers and bytes in, JSON out.
//!
//! The mode follows the binding's rule, with one addition kept from before the binding was
//! whole: a request with `Content-Type: application/json` and no `ce-*` header is one event in
//! JSON (a CloudEvent or an EventBridge event), as the trigger file has always read it.

use axum::http::{header, HeaderMap};
use base64::Engine as _;
use serde_json::{Map, Value};

/// The most events one batch may hold: a request's work stays bounded however small its events.
pub const MAX_BATCH: usize = 100;

/// The attributes a binary-mode request must carry, as headers.
const REQUIRED: [&str; 4] = ["specversion", "id", "source", "type"];

/// How a request carries its event(s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `application/cloudevents+json`: the body is the event in the JSON format.
    Structured,
    /// `application/cloudevents-batch+json`: the body is a JSON array of events.
    Batched,
    /// `ce-*` headers carry the attributes, the body is the data.
    Binary,
    /// `application/json` without `ce-*` headers: the body is one event (CloudEvent or
    /// EventBridge).
    PlainJson,
}

/// Why a request is not an event in any of the binding's modes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The Content-Type names no mode this route reads.
    #[error(
        "a body of this Content-Type (or none) is not an event here: send a CloudEvent in binary mode \
         (the ce-specversion, ce-id, ce-source and ce-type headers, the data as the body), in \
         structured mode (Content-Type: application/cloudevents+json), in batched mode \
         (Content-Type: application/cloudevents-batch+json), or one event as application/json"
    )]
    MediaType,
    /// A CloudEvents format other than JSON.
    #[error(
        "this CloudEvents event format is not read here, only JSON: send \
         application/cloudevents+json, application/cloudevents-batch+json, or the event in \
         binary mode"
    )]
    Format,
    /// A required attribute's header is missing or empty.
    #[error(
        "the header `ce-{0}` is missing or empty: an event in binary mode carries \
         ce-specversion, ce-id, ce-source and ce-type"
    )]
    MissingHeader(&'static str),
    /// `ce-specversion` is not `1.0`.
    #[error("the header `ce-specversion` is not `1.0`: only CloudEvents 1.0 is read; send `1.0`")]
    SpecVersion,
    /// The same attribute's header was given more than once.
    #[error("the header `{0}` is given more than once: give each attribute once")]
    Repeated(String),
    /// A header's name is not an attribute name.
    #[error(
        "the header `{0}` does not name a CloudEvents attribute: after `ce-`, an attribute's \
         name is lower-case letters and digits only"
    )]
    AttributeName(String),
    /// A header the binding does not allow in binary mode.
    #[error(
        "the header `{0}` is not allowed in binary mode: the body is the event's data, and its \
         Content-Type is the data's type (datacontenttype)"
    )]
    Reserved(String),
    /// A header's value is not a percent-encoded UTF-8 string.
    #[error(
        "the header `{header}` is not readable: {why} (the binding percent-encodes every \
         character outside printable ASCII, a space, `\"` and `%` as UTF-8 bytes, e.g. `%20`)"
    )]
    HeaderValue {
        /// The header.
        header: String,
        /// What is wrong with its value.
        why: &'static str,
    },
    /// The data is declared JSON (or has no Content-Type, which means JSON) and is not.
    #[error(
        "the body is the event's data, read as JSON {because}, and it is not JSON (line \
         {line}, column {column}): send JSON, or give the data's own Content-Type \
         (text/plain, application/octet-stream, ...)"
    )]
    DataNotJson {
        /// Why it was read as JSON.
        because: &'static str,
        /// Where it stopped being JSON.
        line: usize,
        /// Where it stopped being JSON.
        column: usize,
    },
    /// A batch's body is not a JSON array.
    #[error(
        "a batch (application/cloudevents-batch+json) is a JSON array of events in the JSON \
         format, and this body is not one"
    )]
    NotABatch,
    /// A batch holds more events than [`MAX_BATCH`].
    #[error("a batch holds at most {MAX_BATCH} events and this one holds {0}: send it in parts")]
    BatchTooLarge(usize),
}

impl BindingError {
    /// Whether the request's Content-Type is the problem (answered 415) rather than its content
    /// (400).
    pub const fn is_media_type(&self) -> bool {
        matches!(self, BindingError::MediaType | BindingError::Format)
    }
}

/// The media type of a Content-Type value: without parameters, trimmed, lower case.
fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The request's Content-Type, as text (`None` when absent or not text).
fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
}

/// Which mode the request uses: the binding's rule (the Content-Type names the structured and
/// batched modes; otherwise `ce-*` headers make it binary), then plain JSON.
pub fn mode_of(headers: &HeaderMap) -> Result<Mode, BindingError> {
    let media = content_type(headers).map(media_type);
    let media = media.as_deref().unwrap_or_default();
    if media.starts_with("application/cloudevents-batch") {
        return match media {
            "application/cloudevents-batch+json" => Ok(Mode::Batched),
            _ => Err(BindingError::Format),
        };
    }
    if media.starts_with("application/cloudevents") {
        return match media {
            "application/cloudevents+json" => Ok(Mode::Structured),
            _ => Err(BindingError::Format),
        };
    }
    if headers.keys().any(|name| name.as_str().starts_with("ce-")) {
        return Ok(Mode::Binary);
    }
    match media {
        "application/json" => Ok(Mode::PlainJson),
        _ => Err(BindingError::MediaType),
    }
}

/// Whether a media type declares JSON data: `*/json` or `*/*+json`, as the JSON format says.
fn is_json(media: &str) -> bool {
    media
        .split_once('/')
        .is_some_and(|(_, subtype)| subtype == "json" || subtype.ends_with("+json"))
}

/// The event of a binary-mode request, in the JSON format: each `ce-*` header an attribute
/// (its value unquoted and percent-decoded), the Content-Type its `datacontenttype`, and the
/// body its data — a JSON value when the Content-Type is JSON or absent (the format's default),
/// a string when the body is UTF-8 text of another type, `data_base64` otherwise.
pub fn binary_event(headers: &HeaderMap, body: &[u8]) -> Result<Value, BindingError> {
    let mut event = Map::new();
    for name in headers.keys() {
        let Some(attribute) = name.as_str().strip_prefix("ce-") else {
            continue;
        };
        if attribute.is_empty()
            || !attribute
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(BindingError::AttributeName(name.to_string()));
        }
        if matches!(attribute, "data" | "datacontenttype") {
            return Err(BindingError::Reserved(name.to_string()));
        }
        let mut values = headers.get_all(name).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(BindingError::Repeated(name.to_string()));
        };
        let value = header_value(value.as_bytes()).map_err(|why| BindingError::HeaderValue {
            header: name.to_string(),
            why,
        })?;
        event.insert(attribute.to_owned(), Value::String(value));
    }
    for attribute in REQUIRED {
        match event.get(attribute) {
            Some(Value::String(value)) if !value.is_empty() => {}
            _ => return Err(BindingError::MissingHeader(attribute)),
        }
    }
    if event.get("specversion").and_then(Value::as_str) != Some("1.0") {
        return Err(BindingError::SpecVersion);
    }
    let declared = match headers.get(header::CONTENT_TYPE) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| BindingError::HeaderValue {
            header: "content-type".into(),
            why: "it is not printable ASCII",
        })?),
    };
    if let Some(declared) = declared {
        event.insert("datacontenttype".into(), declared.into());
    }
    if let Some((member, data)) = data_of(declared, body)? {
        event.insert(member.into(), data);
    }
    Ok(Value::Object(event))
}

/// The body as the event's data, and the member of the JSON format that holds it; `None` for
/// an empty body (an event without data).
fn data_of(
    declared: Option<&str>,
    body: &[u8],
) -> Result<Option<(&'static str, Value)>, BindingError> {
    if body.is_empty() {
        return Ok(None);
    }
    let media = declared.map(media_type);
    let because = match media.as_deref() {
        None => Some("(it has no Content-Type, and CloudEvents' default is application/json)"),
        Some(media) if is_json(media) => Some("(its Content-Type says so)"),
        Some(_) => None,
    };
    if let Some(because) = because {
        let data = serde_json::from_slice(body).map_err(|error| BindingError::DataNotJson {
            because,
            line: error.line(),
            column: error.column(),
        })?;
        return Ok(Some(("data", data)));
    }
    Ok(Some(match std::str::from_utf8(body) {
        Ok(text) => ("data", Value::String(text.to_owned())),
        Err(_) => (
            "data_base64",
            Value::String(base64::engine::general_purpose::STANDARD.encode(body)),
        ),
    }))
}

/// A header's value as the binding decodes it: a double-quoted string unquoted first (older
/// senders quote), then one round of percent-decoding, whose bytes must be UTF-8.
fn header_value(raw: &[u8]) -> Result<String, &'static str> {
    if !raw.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err("it holds bytes outside printable ASCII; percent-encode them");
    }
    let unquoted = match raw {
        [b'"', inner @ .., b'"'] => unquote(inner)?,
        _ => raw.to_vec(),
    };
    let mut bytes = Vec::with_capacity(unquoted.len());
    let mut rest = unquoted.as_slice();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let [high, low, after @ ..] = tail else {
                return Err("a `%` is not followed by two hexadecimal digits");
            };
            let digit = |b: u8| char::from(b).to_digit(16);
            let (Some(high), Some(low)) = (digit(*high), digit(*low)) else {
                return Err("a `%` is not followed by two hexadecimal digits");
            };
            bytes.push(u8::try_from(high * 16 + low).unwrap_or_default());
            rest = after;
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| "its percent-encoded bytes are not UTF-8")
}

/// The inside of an HTTP quoted string, its backslash escapes undone.
fn unquote(inner: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'\\' => out.push(*bytes.next().ok_or("a quoted value ends in a backslash")?),
            b'"' => return Err("a quoted value holds an unescaped `\"`"),
            other => out.push(other),
        }
    }
    Ok(out)
}

/// The events of a batch, each as it was sent (its own JSON), in order.
pub fn batch_events(body: &[u8]) -> Result<Vec<Value>, BindingError> {
    let Ok(Value::Array(events)) = serde_json::from_slice::<Value>(body) else {
        return Err(BindingError::NotABatch);
    };
    if events.len() > MAX_BATCH {
        return Err(BindingError::BatchTooLarge(events.len()));
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).expect("a name"),
                HeaderValue::from_str(value).expect("a value"),
            );
        }
        map
    }

    const REQUIRED_HEADERS: [(&str, &str); 4] = [
        ("ce-specversion", "1.0"),
        ("ce-id", "e-1"),
        ("ce-source", "artifacts"),
        ("ce-type", "release.published"),
    ];

    fn with(extra: &[(&str, &str)]) -> HeaderMap {
        let mut pairs = REQUIRED_HEADERS.to_vec();
        pairs.extend_from_slice(extra);
        headers(&pairs)
    }

    #[test]
    fn the_content_type_names_the_mode_and_ce_headers_make_it_binary() {
        let cases = [
            (
                vec![("content-type", "application/cloudevents+json")],
                Mode::Structured,
            ),
            (
                vec![(
                    "content-type",
                    "Application/CloudEvents+JSON; charset=UTF-8",
                )],
                Mode::Structured,
            ),
            (
                vec![("content-type", "application/cloudevents-batch+json")],
                Mode::Batched,
            ),
            (vec![("content-type", "application/json")], Mode::PlainJson),
            (
                vec![("content-type", "application/json"), ("ce-id", "x")],
                Mode::Binary,
            ),
            (vec![("ce-specversion", "1.0")], Mode::Binary),
            (
                vec![("content-type", "text/plain"), ("ce-type", "t")],
                Mode::Binary,
            ),
        ];
        for (pairs, mode) in cases {
            assert_eq!(mode_of(&headers(&pairs)), Ok(mode), "{pairs:?}");
        }
    }

    #[test]
    fn a_body_in_no_mode_is_refused_as_a_media_type_naming_the_modes() {
        for (pairs, refused) in [
            (
                vec![("content-type", "text/plain")],
                BindingError::MediaType,
            ),
            (vec![], BindingError::MediaType),
            (
                vec![("content-type", "application/cloudevents+avro")],
                BindingError::Format,
            ),
            (
                vec![("content-type", "application/cloudevents-batch+protobuf")],
                BindingError::Format,
            ),
        ] {
            let error = mode_of(&headers(&pairs)).expect_err("refused");
            assert_eq!(error, refused);
            assert!(error.is_media_type());
        }
        let message = BindingError::MediaType.to_string();
        assert!(message.contains("ce-specversion") && message.contains("cloudevents+json"));
    }

    #[test]
    fn a_binary_event_is_its_headers_decoded_and_its_json_body_as_data() {
        let event = binary_event(
            &with(&[
                ("ce-subject", "release%202.0%20%E2%82%AC"),
                ("ce-time", "2024-05-01T10:00:00Z"),
                ("ce-dataschema", "https://example.com/schema"),
                ("ce-channelname", "\"stable \\\"lts\\\"\""),
                ("content-type", "application/json; charset=utf-8"),
            ]),
            br#"{"channel": "stable"}"#,
        )
        .expect("an event");
        assert_eq!(
            event,
            json!({
                "specversion": "1.0", "id": "e-1", "source": "artifacts",
                "type": "release.published", "subject": "release 2.0 €",
                "time": "2024-05-01T10:00:00Z", "dataschema": "https://example.com/schema",
                "channelname": "stable \"lts\"",
                "datacontenttype": "application/json; charset=utf-8",
                "data": {"channel": "stable"}
            })
        );
    }

    #[test]
    fn data_without_a_content_type_is_json_and_other_types_are_text_or_base64() {
        let event = binary_event(&with(&[]), b"[1, 2]").expect("an event");
        assert_eq!(event["data"], json!([1, 2]));
        assert!(event.get("datacontenttype").is_none());

        let event = binary_event(&with(&[("content-type", "application/vnd.x+json")]), b"7")
            .expect("an event");
        assert_eq!(event["data"], json!(7));

        let event =
            binary_event(&with(&[("content-type", "text/plain")]), b"hello").expect("an event");
        assert_eq!(event["data"], json!("hello"));
        assert_eq!(event["datacontenttype"], "text/plain");

        let event = binary_event(
            &with(&[("content-type", "application/octet-stream")]),
            &[0xff, 0x00],
        )
        .expect("an event");
        assert_eq!(event["data_base64"], json!("/wA="));
        assert!(event.get("data").is_none());

        let event =
            binary_event(&with(&[("content-type", "application/json")]), b"").expect("an event");
        assert!(event.get("data").is_none(), "no body, no data");
    }

    #[test]
    fn each_missing_required_header_is_named() {
        for missing in REQUIRED {
            let pairs: Vec<_> = REQUIRED_HEADERS
                .iter()
                .copied()
                .filter(|(name, _)| *name != format!("ce-{missing}"))
                .collect();
            let error = binary_event(&headers(&pairs), b"").expect_err("refused");
            assert_eq!(error, BindingError::MissingHeader(missing));
            assert!(error.to_string().contains(&format!("`ce-{missing}`")));
            assert!(!error.is_media_type());
        }
        let empty = binary_event(&with(&[]).tap_set("ce-id", ""), b"").expect_err("refused");
        assert_eq!(empty, BindingError::MissingHeader("id"));
    }

    #[test]
    fn malformed_headers_and_data_are_refused_naming_the_header_or_the_fix() {
        let refused = |extra: &[(&str, &str)], body: &[u8]| {
            binary_event(&with(extra), body).expect_err("refused")
        };
        assert_eq!(
            binary_event(&with(&[]).tap_set("ce-specversion", "0.3"), b""),
            Err(BindingError::SpecVersion)
        );
        assert_eq!(
            refused(&[("ce-id", "again")], b""),
            BindingError::Repeated("ce-id".into())
        );
        assert_eq!(
            refused(&[("ce-my-ext", "x")], b""),
            BindingError::AttributeName("ce-my-ext".into())
        );
        assert_eq!(
            refused(&[("ce-datacontenttype", "text/plain")], b""),
            BindingError::Reserved("ce-datacontenttype".into())
        );
        for (value, why) in [
            ("50%", "a `%` is not followed by two hexadecimal digits"),
            ("%zz", "a `%` is not followed by two hexadecimal digits"),
            ("%C0%A0", "its percent-encoded bytes are not UTF-8"),
            ("%FF", "its percent-encoded bytes are not UTF-8"),
        ] {
            assert_eq!(
                refused(&[("ce-subject", value)], b""),
                BindingError::HeaderValue {
                    header: "ce-subject".into(),
                    why
                },
                "{value}"
            );
        }
        let raw = binary_event(&with(&[]).tap_bytes("ce-subject", "café".as_bytes()), b"");
        assert!(
            matches!(raw, Err(BindingError::HeaderValue { ref header, .. }) if header == "ce-subject"),
            "{raw:?}"
        );
        assert!(matches!(
            refused(&[("content-type", "application/json")], b"{not json"),
            BindingError::DataNotJson {
                line: 1,
                column: 2,
                ..
            }
        ));
        assert!(matches!(
            refused(&[], b"plain words"),
            BindingError::DataNotJson { because, .. } if because.contains("no Content-Type")
        ));
    }

    #[test]
    fn a_batch_is_an_array_of_at_most_the_limit() {
        assert_eq!(batch_events(b"[]"), Ok(vec![]));
        assert_eq!(
            batch_events(br#"[{"id": "a"}, 3]"#),
            Ok(vec![json!({"id": "a"}), json!(3)])
        );
        assert_eq!(
            batch_events(br#"{"id": "a"}"#),
            Err(BindingError::NotABatch)
        );
        assert_eq!(batch_events(b"[1,"), Err(BindingError::NotABatch));
        let many = format!("[{}]", vec!["{}"; MAX_BATCH + 1].join(","));
        assert_eq!(
            batch_events(many.as_bytes()),
            Err(BindingError::BatchTooLarge(MAX_BATCH + 1))
        );
    }

    /// Replacing one header's value, for the refusals of a required one.
    trait Tap {
        fn tap_set(self, name: &'static str, value: &str) -> Self;
        fn tap_bytes(self, name: &'static str, value: &[u8]) -> Self;
    }

    impl Tap for HeaderMap {
        fn tap_set(mut self, name: &'static str, value: &str) -> Self {
            self.insert(name, HeaderValue::from_str(value).expect("a value"));
            self
        }

        fn tap_bytes(mut self, name: &'static str, value: &[u8]) -> Self {
            self.insert(name, HeaderValue::from_bytes(value).expect("a value"));
            self
        }
    }
}
