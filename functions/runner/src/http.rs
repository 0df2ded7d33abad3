//! The `http` step kind: one REST call, made by `curl` inside the sandbox.
//!
//! - [`prepare`] renders the call (URL, method, headers, body; secrets included) into files under
//!   `/work`: the curl config [`CONFIG_FILE`] and the body [`BODY_FILE`]. The command line names
//!   only those files, so no value of the call shows in `/proc/*/cmdline` or in the environment.
//!   curl leaves the answer's headers and body in [`HEADERS_FILE`] and [`ANSWER_FILE`], which the
//!   runner collects; the command also prints the status line and the start of the answer to
//!   the attempt's log.
//! - [`conclude`] reads them back and classifies the attempt ([`judge`]): unreachable backends
//!   are retried by the `backend-unreachable` rule, an expected status succeeds with outputs
//!   picked from the JSON answer, anything else fails the step.
//! - [`config_quote`] keeps any value inside its one line of the curl config.

use std::collections::BTreeMap;

use overture_domain::kinds;
use overture_events::ErrorClass;
use serde_json::Value;

use crate::step::{collected, Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The kind's name in blueprints.
pub const KIND: &str = "http";

/// The curl config that holds the whole call, under `/work`.
pub const CONFIG_FILE: &str = "request.curl";
/// The request body, under `/work`.
pub const BODY_FILE: &str = "request.body";
/// Where curl writes the answer's status line and headers.
pub const HEADERS_FILE: &str = "response.headers";
/// Where curl writes the answer's body.
pub const ANSWER_FILE: &str = "response.body";

/// What a gateway in front of a cloud API says when the API behind it is down.
pub const UNREACHABLE_TEXT: &str = "The backend server is unreachable";

/// How long curl may take to connect (TCP and TLS) before giving up with exit code 28.
const CONNECT_TIMEOUT_SECS: u32 = 10;
/// curl's exit code when it could not connect (refused, no route).
const CURL_COULD_NOT_CONNECT: i32 = 7;
/// curl's exit code when a time limit passed.
const CURL_TIMED_OUT: i32 = 28;

/// Runs curl, then prints the status line and the start of the answer for the log. Bodies are
/// shown up to 2 KiB: enough to read an API's error, not a whole download.
const COMMAND: &str = r#"/usr/bin/curl --disable --config request.curl
code=$?
if [ -f response.headers ]; then grep '^HTTP/' response.headers | tail -n 1 | tr -d '\r'; fi
if [ -s response.body ]; then
  head -c 2048 response.body; echo
  size=$(wc -c < response.body)
  [ "$size" -le 2048 ] || echo "... ($size bytes in all)"
fi
exit $code"#;

/// Builds the sandbox command of an attempt: the call rendered into files, curl to make it.
pub fn prepare(input: &StepInput) -> Result<Prepared, String> {
    let call = Call::render(input)?;
    let mut files = vec![(CONFIG_FILE.into(), call.config().into_bytes())];
    if let Some(body) = call.body {
        files.push((BODY_FILE.into(), body.into_bytes()));
    }
    Ok(Prepared {
        command: COMMAND.to_owned(),
        files,
        network: true,
        collect: vec![HEADERS_FILE.into(), ANSWER_FILE.into()],
        ..Prepared::default()
    })
}

/// Judges the call by curl's exit code and the answer it left.
pub fn conclude(input: &StepInput, code: i32, result: &SandboxResult) -> Verdict {
    let expect = match Expectation::of(input) {
        Ok(expect) => expect,
        Err(problem) => return Verdict::failed(problem),
    };
    let headers = collected(&result.collected, HEADERS_FILE).unwrap_or_default();
    let answer = if input.text_setting("method") == Some("HEAD") {
        // With `head`, curl writes the headers where the body would go: there is no body.
        &[]
    } else {
        collected(&result.collected, ANSWER_FILE).unwrap_or_default()
    };
    judge(&expect, code, &String::from_utf8_lossy(headers), answer)
}

/// One call, rendered: what the curl config and the body file hold. It holds secrets, so it
/// has no `Debug`.
struct Call {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
}

impl Call {
    fn render(input: &StepInput) -> Result<Self, String> {
        let url = input.render(
            input
                .text_setting("url")
                .ok_or("the step has no `with.url` text")?,
        )?;
        let method = match input.setting("method") {
            None => "GET",
            Some(value) => value
                .as_str()
                .filter(|method| kinds::HTTP_METHODS.contains(method))
                .ok_or_else(|| {
                    format!(
                        "`with.method` must be one of {}",
                        kinds::HTTP_METHODS.join(", ")
                    )
                })?,
        };
        let mut headers = Vec::new();
        if let Some(value) = input.setting("headers") {
            let map = value
                .as_object()
                .ok_or("`with.headers` must be a map of header names to text")?;
            for (name, value) in map {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("header `{name}` must be text"))?;
                headers.push(header(name, &input.render(value)?)?);
            }
        }
        let body = match input.setting("body") {
            None => None,
            Some(value) => Some(input.render(value.as_str().ok_or("`with.body` must be text")?)?),
        };
        Ok(Self {
            method: method.to_owned(),
            url,
            headers,
            body,
        })
    }

    /// The curl config: one option a line, every value quoted by [`config_quote`].
    fn config(&self) -> String {
        let mut lines = vec![
            "silent".to_owned(),
            "show-error".to_owned(),
            // `[` and `{` in a URL are the URL's, not curl's patterns for many requests.
            "globoff".to_owned(),
            // A REST call: never `file://` and the like, on a first request or a redirect.
            format!("proto = {}", config_quote("=http,https")),
            format!(
                "connect-timeout = {}",
                config_quote(&CONNECT_TIMEOUT_SECS.to_string())
            ),
            format!("output = {}", config_quote(ANSWER_FILE)),
            format!("dump-header = {}", config_quote(HEADERS_FILE)),
            format!("url = {}", config_quote(&self.url)),
        ];
        if self.method == "HEAD" {
            // `request = "HEAD"` would have curl wait for a body that never comes.
            lines.push("head".to_owned());
        } else {
            lines.push(format!("request = {}", config_quote(&self.method)));
        }
        for (name, value) in &self.headers {
            // `Name:` with nothing after it would remove the header; `Name;` sends it empty.
            let line = if value.is_empty() {
                format!("{name};")
            } else {
                format!("{name}: {value}")
            };
            lines.push(format!("header = {}", config_quote(&line)));
        }
        if self.body.is_some() {
            let has_type = self
                .headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
            if !has_type {
                // curl would say form data; a REST API expects JSON unless told otherwise.
                lines.push(format!(
                    "header = {}",
                    config_quote("Content-Type: application/json")
                ));
            }
            lines.push(format!(
                "data-binary = {}",
                config_quote(&format!("@{BODY_FILE}"))
            ));
        }
        let mut config = lines.join("\n");
        config.push('\n');
        config
    }
}

/// A header, checked: a name of token characters, a value without line breaks (which would
/// start another header).
fn header(name: &str, value: &str) -> Result<(String, String), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!(
            "`{name}` is not a header name: use letters, digits and '-', like X-Request-Id"
        ));
    }
    if value.contains(['\r', '\n', '\0']) {
        return Err(format!(
            "header `{name}`: its value holds a line break, which would start another header"
        ));
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Quotes a value for a curl config file, where it stays one value on one line whatever it
/// holds: inside double quotes curl reads `\\`, `\"`, `\n`, `\r`, `\t` and `\v`.
pub fn config_quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        match c {
            '\\' => quoted.push_str(r"\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str(r"\n"),
            '\r' => quoted.push_str(r"\r"),
            '\t' => quoted.push_str(r"\t"),
            '\u{0b}' => quoted.push_str(r"\v"),
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

/// What the step accepts: its statuses, the outputs to pick, and how to name the call.
#[derive(Debug)]
struct Expectation {
    /// `None`: any 2xx.
    statuses: Option<Vec<u16>>,
    /// Output name → JSON pointer into the answer.
    outputs: Vec<(String, String)>,
    /// `METHOD url`, for messages (the runner masks secrets in them).
    call: String,
}

impl Expectation {
    fn of(input: &StepInput) -> Result<Self, String> {
        let statuses = input
            .setting("expect_status")
            .map(kinds::expected_statuses)
            .transpose()?;
        let mut outputs = Vec::new();
        if let Some(value) = input.setting("outputs") {
            let map = value
                .as_object()
                .ok_or("`with.outputs` must map output names to JSON pointers")?;
            for (name, pointer) in map {
                let pointer = pointer
                    .as_str()
                    .ok_or_else(|| format!("output `{name}`: its JSON pointer must be text"))?;
                outputs.push((name.clone(), pointer.to_owned()));
            }
        }
        let url = input.text_setting("url").unwrap_or_default();
        let url = input.render(url).unwrap_or_else(|_| url.to_owned());
        let method = input.text_setting("method").unwrap_or("GET");
        Ok(Self {
            statuses,
            outputs,
            call: format!("{method} {url}"),
        })
    }

    fn accepts(&self, status: u16) -> bool {
        match &self.statuses {
            Some(statuses) => statuses.contains(&status),
            None => (200..300).contains(&status),
        }
    }

    fn describe(&self) -> String {
        match self.statuses.as_deref() {
            None | Some([]) => "a 2xx status".to_owned(),
            Some([one]) => one.to_string(),
            Some([rest @ .., last]) => {
                let rest: Vec<String> = rest.iter().map(u16::to_string).collect();
                format!("{} or {last}", rest.join(", "))
            }
        }
    }
}

/// Classifies one call from curl's exit code, the headers file and the answer's body.
fn judge(expect: &Expectation, code: i32, headers: &str, answer: &[u8]) -> Verdict {
    let unreachable = |headline: String| Verdict::Failure {
        class: ErrorClass::BackendUnreachable,
        headline,
    };
    match code {
        0 => {}
        CURL_COULD_NOT_CONNECT => {
            return unreachable(format!("could not connect for {}", expect.call));
        }
        // We give curl a connect timeout and no limit on the whole call (the step's `timeout`
        // bounds that, and kills it as step-failed), so a timeout here means the connection
        // was never made: the request never reached the server, which is as unreachable as a
        // refused connection and safe to send again, even a POST.
        CURL_TIMED_OUT => {
            return unreachable(format!(
                "no connection within {CONNECT_TIMEOUT_SECS}s for {}",
                expect.call
            ));
        }
        other => {
            return Verdict::failed(format!(
                "curl failed with exit code {other} for {}",
                expect.call
            ));
        }
    }
    let Some(status) = StatusLine::last_in(headers) else {
        return Verdict::failed(format!("{} gave no HTTP status line", expect.call));
    };
    let text = String::from_utf8_lossy(answer);
    if matches!(status.code, 502 | 503) {
        return unreachable(format!("answered {status}: the backend is unreachable"));
    }
    if text.contains(UNREACHABLE_TEXT) {
        return unreachable(format!("answered {status}: \"{UNREACHABLE_TEXT}\""));
    }
    if !expect.accepts(status.code) {
        return Verdict::failed(format!("answered {status}; expected {}", expect.describe()));
    }
    match pick_outputs(&expect.outputs, answer) {
        Ok(mut outputs) => {
            outputs
                .entry("status".to_owned())
                .or_insert_with(|| status.code.to_string());
            Verdict::Success(outputs)
        }
        Err(problem) => Verdict::failed(format!("answered {status}, but {problem}")),
    }
}

/// Picks each output from the JSON answer: a string as it is, anything else as compact JSON.
fn pick_outputs(
    wanted: &[(String, String)],
    answer: &[u8],
) -> Result<BTreeMap<String, String>, String> {
    if wanted.is_empty() {
        return Ok(BTreeMap::new());
    }
    let document: Value = serde_json::from_slice(answer).map_err(|error| {
        let (name, pointer) = &wanted[0];
        format!(
            "the answer is not JSON ({error}), so output `{name}` cannot be picked at `{pointer}`"
        )
    })?;
    wanted
        .iter()
        .map(|(name, pointer)| match document.pointer(pointer) {
            Some(Value::String(text)) => Ok((name.clone(), text.clone())),
            Some(other) => Ok((name.clone(), other.to_string())),
            None => Err(format!(
                "the answer has nothing at `{pointer}` for output `{name}`"
            )),
        })
        .collect()
}

/// The status of an answer: `HTTP/1.1 404 Not Found`.
#[derive(Debug, PartialEq, Eq)]
struct StatusLine {
    code: u16,
    reason: String,
}

impl StatusLine {
    /// The final answer's status line: curl's headers file also holds interim answers
    /// (`100 Continue`) and a proxy's, before it.
    fn last_in(headers: &str) -> Option<Self> {
        let line = headers
            .lines()
            .rev()
            .find(|line| line.starts_with("HTTP/"))?;
        let mut parts = line.trim_end().splitn(3, ' ');
        let _version = parts.next()?;
        let code: u16 = parts
            .next()?
            .parse()
            .ok()
            .filter(|c| (100..=599).contains(c))?;
        let reason = match parts.next().map(str::trim) {
            Some(reason) if !reason.is_empty() => reason.to_owned(),
            // HTTP/2 sends no reason phrase.
            _ => standard_reason(code).to_owned(),
        };
        Some(Self { code, reason })
    }
}

impl std::fmt::Display for StatusLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.reason.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{} {}", self.code, self.reason)
        }
    }
}

/// The reason phrases of the statuses REST APIs commonly answer; empty for the rest.
fn standard_reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        410 => "Gone",
        412 => "Precondition Failed",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::path::PathBuf;
    use std::process::Command;

    use overture_domain::blueprint::parse;
    use overture_domain::secret::{SecretString, SecretValues};

    use super::*;
    use crate::testing::{input, requested};

    fn expect(statuses: Option<Vec<u16>>, outputs: &[(&str, &str)]) -> Expectation {
        Expectation {
            statuses,
            outputs: outputs
                .iter()
                .map(|(name, pointer)| ((*name).to_owned(), (*pointer).to_owned()))
                .collect(),
            call: "GET http://api/x".to_owned(),
        }
    }

    fn class(verdict: &Verdict) -> Option<ErrorClass> {
        match verdict {
            Verdict::Success(_) => None,
            Verdict::Failure { class, .. } => Some(*class),
        }
    }

    fn headline(verdict: &Verdict) -> &str {
        match verdict {
            Verdict::Success(_) => "",
            Verdict::Failure { headline, .. } => headline,
        }
    }

    const OK: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n";

    #[test]
    fn an_unreachable_backend_is_backend_unreachable() {
        let any = expect(None, &[]);
        let cases: [(i32, &str, &[u8]); 5] = [
            (CURL_COULD_NOT_CONNECT, "", b""),
            (CURL_TIMED_OUT, "", b""),
            (0, "HTTP/1.1 502 Bad Gateway\r\n\r\n", b""),
            (0, "HTTP/2 503\r\n\r\n", b"busy"),
            (
                0,
                "HTTP/1.1 500 Internal Server Error\r\n\r\n",
                UNREACHABLE_TEXT.as_bytes(),
            ),
        ];
        for (code, headers, answer) in cases {
            let verdict = judge(&any, code, headers, answer);
            assert_eq!(
                class(&verdict),
                Some(ErrorClass::BackendUnreachable),
                "{code} {headers:?}: {verdict:?}"
            );
        }
        assert_eq!(
            headline(&judge(&any, 0, "HTTP/2 503\r\n\r\n", b"")),
            "answered 503 Service Unavailable: the backend is unreachable"
        );
    }

    #[test]
    fn an_unexpected_status_fails_the_step_and_says_what_was_expected() {
        let cases = [
            (
                None,
                "HTTP/1.1 404 Not Found\r\n",
                "answered 404 Not Found; expected a 2xx status",
            ),
            (
                Some(vec![200]),
                "HTTP/1.1 201 Created\r\n",
                "answered 201 Created; expected 200",
            ),
            (
                Some(vec![200, 201, 204]),
                "HTTP/2 409\r\n",
                "answered 409 Conflict; expected 200, 201 or 204",
            ),
            (
                Some(vec![200]),
                "HTTP/1.1 418 I'm a teapot\r\n",
                "answered 418 I'm a teapot; expected 200",
            ),
        ];
        for (statuses, headers, wanted) in cases {
            let verdict = judge(&expect(statuses, &[]), 0, headers, b"{}");
            assert_eq!(class(&verdict), Some(ErrorClass::StepFailed));
            assert_eq!(headline(&verdict), wanted);
        }
        let curl_failed = judge(&expect(None, &[]), 6, "", b"");
        assert_eq!(class(&curl_failed), Some(ErrorClass::StepFailed));
        assert_eq!(
            headline(&curl_failed),
            "curl failed with exit code 6 for GET http://api/x"
        );
        let no_status = judge(&expect(None, &[]), 0, "", b"");
        assert_eq!(class(&no_status), Some(ErrorClass::StepFailed));
    }

    #[test]
    fn an_expected_status_succeeds_with_the_status_and_the_picked_outputs() {
        let wanted = expect(
            Some(vec![200, 201]),
            &[
                ("id", "/server/id"),
                ("name", "/server/name"),
                ("ips", "/server/ips"),
            ],
        );
        let answer = br#"{"server": {"id": 42, "name": "web-1", "ips": ["10.0.0.5", "::1"]}}"#;
        // The last status line counts: curl also writes interim answers to the headers file.
        let headers =
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 60\r\n\r\n";
        assert_eq!(
            judge(&wanted, 0, headers, answer),
            Verdict::Success(
                [
                    ("status", "201"),
                    ("id", "42"),
                    ("name", "web-1"),
                    ("ips", r#"["10.0.0.5","::1"]"#),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
            )
        );
        assert_eq!(
            judge(&expect(None, &[]), 0, OK, b"not json"),
            Verdict::Success([("status".to_owned(), "200".to_owned())].into()),
            "without outputs the answer need not be JSON"
        );
    }

    #[test]
    fn a_missing_pointer_or_an_answer_that_is_not_json_fails_naming_the_pointer() {
        let wanted = expect(None, &[("id", "/server/id")]);
        let missing = judge(&wanted, 0, OK, br#"{"server": {}}"#);
        assert_eq!(class(&missing), Some(ErrorClass::StepFailed));
        assert_eq!(
            headline(&missing),
            "answered 200 OK, but the answer has nothing at `/server/id` for output `id`"
        );
        let not_json = judge(&wanted, 0, OK, b"<html>hello</html>");
        assert_eq!(class(&not_json), Some(ErrorClass::StepFailed));
        assert!(
            headline(&not_json).contains("is not JSON")
                && headline(&not_json).contains("`/server/id`"),
            "{not_json:?}"
        );
    }

    #[test]
    fn the_default_rule_retries_backend_unreachable_5_times_10_seconds_apart() {
        // The whole table is pinned in overture_domain::retry's tests; this is the rule the
        // classification above relies on.
        assert_eq!(
            overture_domain::retry::default_rule(ErrorClass::BackendUnreachable),
            overture_events::RetryRule {
                times: 5,
                wait_ms: 10_000
            }
        );
    }

    #[test]
    fn a_quoted_value_stays_one_value_on_one_line() {
        assert_eq!(config_quote("plain"), r#""plain""#);
        assert_eq!(
            config_quote("a \"q\" b\\c\nd\re\tf"),
            r#""a \"q\" b\\c\nd\re\tf""#
        );
        // Whatever a value holds, the config keeps one option a line, each value a closed
        // quoted string: nothing can end the value early and start an option of its own.
        let nasty = "x\"\nurl = \"http://evil/\"\n\\\"\\";
        let call = Call {
            method: "POST".into(),
            url: format!("http://api/{nasty}"),
            headers: vec![("X-Nasty".into(), nasty.replace('\n', " "))],
            body: Some(nasty.into()),
        };
        let config = call.config();
        for line in config.lines() {
            let Some((_, value)) = line.split_once(" = ") else {
                assert!(!line.contains('"'), "{line}");
                continue;
            };
            assert!(
                value.starts_with('"') && value.ends_with('"') && value.len() >= 2,
                "{line}"
            );
            let inner = &value[1..value.len() - 1];
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                assert_ne!(c, '"', "an unescaped quote in {line}");
                if c == '\\' {
                    assert!(
                        chars.next().is_some_and(|e| "\\\"nrtv".contains(e)),
                        "{line}"
                    );
                }
            }
        }
        assert_eq!(config.lines().filter(|l| l.starts_with("url")).count(), 1);
        assert!(!config.contains("http://evil/\"\n"));
    }

    #[test]
    fn curl_reads_back_exactly_the_values_written() {
        // The real curl, against a listener on loopback: the header arrives as written, and
        // nothing of it became an option or a header of its own.
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("address").port();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("curl connects");
            let mut reader = BufReader::new(stream);
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("a request line");
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push(line.trim_end().to_owned());
            }
            let length = head
                .iter()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; length];
            reader.read_exact(&mut body).expect("the body");
            let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
            reader
                .get_mut()
                .write_all(answer.as_bytes())
                .expect("answer");
            (head, body)
        });

        let tricky = r#"say "hi" \ back\\slash \" header = "X-Evil: 1""#;
        let call = Call {
            method: "PUT".into(),
            url: format!("http://127.0.0.1:{port}/a?q=\"x\"&b=\\"),
            headers: vec![("X-Tricky".into(), tricky.into())],
            body: Some("line 1\nline \"2\"\n".into()),
        };
        let dir = std::env::temp_dir().join(format!("overture-http-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join(CONFIG_FILE), call.config()).expect("config");
        std::fs::write(
            dir.join(BODY_FILE),
            call.body.as_deref().unwrap_or_default(),
        )
        .expect("body");
        let ran = Command::new("/usr/bin/curl")
            .args(["--disable", "--config", CONFIG_FILE])
            .current_dir(&dir)
            .output()
            .expect("run /usr/bin/curl");
        let answer = std::fs::read(dir.join(ANSWER_FILE)).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let (head, body) = server.join().expect("the server");

        assert_eq!(head[0], "PUT /a?q=\"x\"&b=\\ HTTP/1.1");
        assert!(head.contains(&format!("X-Tricky: {tricky}")), "{head:?}");
        assert!(!head.iter().any(|l| l.starts_with("X-Evil")), "{head:?}");
        assert!(
            head.contains(&"Content-Type: application/json".to_owned()),
            "{head:?}"
        );
        assert_eq!(body, b"line 1\nline \"2\"\n");
        assert_eq!(answer, b"{}");
    }

    #[test]
    fn secrets_go_only_into_the_files_never_the_command() {
        let blueprint = parse(
            "name: x\nparams: { id: {} }\nsecrets: [token]\nsteps:\n  call:\n    run: http\n    with:\n      url: 'http://api/servers/{{ params.id }}'\n      method: PATCH\n      headers: { Authorization: 'Bearer {{ secrets.token }}', X-Empty: '' }\n      body: '{\"token\": \"{{ secrets.token }}\"}'\n",
        )
        .expect("valid")
        .snapshot;
        let state = requested(&blueprint, &[("id", "7")]);
        let secrets: SecretValues =
            [("token".to_owned(), SecretString::from("s3cr3t-value"))].into();
        let prepared = prepare(&input(&state, "call", &secrets)).expect("prepares");
        assert!(prepared.network);
        assert!(!prepared.command.contains("s3cr3t-value"));
        assert!(prepared.env.is_empty() && prepared.secret_env.is_empty());
        let file = |name: &str| {
            let (_, content) = prepared
                .files
                .iter()
                .find(|(path, _)| path.as_os_str() == name)
                .expect(name);
            String::from_utf8_lossy(content).into_owned()
        };
        let config = file(CONFIG_FILE);
        assert!(
            config.contains(r#"url = "http://api/servers/7""#),
            "{config}"
        );
        assert!(config.contains(r#"request = "PATCH""#), "{config}");
        assert!(
            config.contains(r#"header = "Authorization: Bearer s3cr3t-value""#),
            "{config}"
        );
        assert!(config.contains(r#"header = "X-Empty;""#), "{config}");
        assert_eq!(file(BODY_FILE), r#"{"token": "s3cr3t-value"}"#);
        assert_eq!(
            prepared.collect,
            vec![PathBuf::from(HEADERS_FILE), PathBuf::from(ANSWER_FILE)]
        );
    }

    #[test]
    fn a_header_value_with_a_line_break_is_refused() {
        assert!(header("X-A", "one\r\nX-B: two").is_err());
        assert!(header("X A", "v").is_err());
        assert!(header("", "v").is_err());
        assert_eq!(header("X-A", "ok"), Ok(("X-A".into(), "ok".into())));
    }
}
