//! The runner's half of the `http` kind: one REST call, made by `curl` inside the sandbox. Its
//! settings ([`HttpSettings`]: `url`, `method`, `headers`, `body`, `expect_status`, `outputs`,
//! `via`) and their checks are the kind's other half, `domain/src/kind/http.rs`; the rendered
//! URL is checked here by the same rules ([`rules::url_problem`]).
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
//! - With `via: bastion` ([`StepInput::bastion`]), the command first opens a tunnel: ssh logs
//!   in to the bastion with the deployment's key and forwards the unix socket [`TUNNEL_SOCKET`]
//!   to the URL's host and port as the bastion reaches them ([`tunnel_command`]); curl then
//!   sends the same call through that socket. ssh's error output is kept in [`TUNNEL_LOG`],
//!   where the bastion says why it could not connect onwards.
//! - [`config_quote`] keeps any value inside its one line of the curl config.

use std::collections::BTreeMap;

use overture_domain::kind::http as rules;
use overture_domain::kind::HttpSettings;
use overture_events::ErrorClass;
use serde_json::Value;

use crate::step::{collected, host_and_port, shell_quote, Jump, Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The curl config that holds the whole call, under `/work`.
pub const CONFIG_FILE: &str = "request.curl";
/// The request body, under `/work`.
pub const BODY_FILE: &str = "request.body";
/// Where curl writes the answer's status line and headers.
pub const HEADERS_FILE: &str = "response.headers";
/// Where curl writes the answer's body.
pub const ANSWER_FILE: &str = "response.body";

/// The unix socket that ssh forwards through the bastion, behind one.
pub const TUNNEL_SOCKET: &str = "/work/tunnel.sock";
/// ssh's error output, behind a bastion, under `/work`.
pub const TUNNEL_LOG: &str = "tunnel.log";
/// The command's exit code when the tunnel through the bastion could not be opened; curl's own
/// codes stop below 100.
pub const TUNNEL_FAILED: i32 = 120;
/// How long ssh may take to open the tunnel: its `ConnectTimeout` (10 s) to reach the bastion,
/// and a few seconds to log in.
const TUNNEL_WITHIN_TENTHS: u32 = 150;

/// What a gateway in front of a cloud API says when the API behind it is down.
pub const UNREACHABLE_TEXT: &str = "The backend server is unreachable";

/// How long curl may take to connect (TCP and TLS) before giving up with exit code 28.
const CONNECT_TIMEOUT_SECS: u32 = 10;
/// curl's exit code when it could not connect (refused, no route).
const CURL_COULD_NOT_CONNECT: i32 = 7;
/// curl's exit code when a time limit passed.
const CURL_TIMED_OUT: i32 = 28;

/// Runs curl, then prints the status line and the start of the answer for the log, leaving
/// curl's exit code in `$code`. Bodies are shown up to 2 KiB: enough to read an API's error,
/// not a whole download.
const CALL: &str = r#"/usr/bin/curl --disable --config request.curl
code=$?
if [ -f response.headers ]; then grep '^HTTP/' response.headers | tail -n 1 | tr -d '\r'; fi
if [ -s response.body ]; then
  head -c 2048 response.body; echo
  size=$(wc -c < response.body)
  [ "$size" -le 2048 ] || echo "... ($size bytes in all)"
fi"#;

/// Builds the sandbox command of an attempt: the call rendered into files, curl to make it,
/// through a tunnel when the step goes through the bastion.
pub fn prepare(input: &StepInput, settings: &HttpSettings) -> Result<Prepared, String> {
    let call = Call::render(input, settings)?;
    let bastion = input.bastion()?;
    let mut prepared = Prepared {
        command: format!("{CALL}\nexit $code"),
        network: true,
        collect: vec![HEADERS_FILE.into(), ANSWER_FILE.into()],
        ..Prepared::default()
    };
    let unix_socket = match &bastion {
        None => None,
        Some(bastion) => {
            let (host, port) = http_endpoint(&call.url).map_err(|problem| {
                format!(
                    "`with.via: bastion`: {problem}; only http:// URLs can go through the bastion"
                )
            })?;
            prepared.command = tunnel_command(bastion, &host, port);
            prepared.files.push(input.ssh_key_file()?);
            prepared
                .files
                .push(crate::host_keys::known_hosts_file(input.state));
            prepared.collect.push(TUNNEL_LOG.into());
            prepared
                .collect
                .push(crate::host_keys::KNOWN_HOSTS_FILE.into());
            Some(TUNNEL_SOCKET)
        }
    };
    prepared
        .files
        .push((CONFIG_FILE.into(), call.config(unix_socket).into_bytes()));
    if let Some(body) = call.body {
        prepared.files.push((BODY_FILE.into(), body.into_bytes()));
    }
    Ok(prepared)
}

/// The host and port of an `http://` URL, to forward the tunnel to.
fn http_endpoint(url: &str) -> Result<(String, u16), String> {
    let rest = url
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &url[7..])
        .ok_or("the URL does not start with http://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    // A user name and password before `@` are the server's business, not the tunnel's.
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = host_and_port(authority, 80)
        .ok_or_else(|| format!("the URL's `{authority}` is not a host or host:port"))?;
    Ok((host.to_owned(), port))
}

/// The command behind a bastion: open the tunnel, wait (a bounded while) for its socket, make
/// the call through it, close it. ssh creates the socket once it has logged in to the bastion,
/// so the socket's appearance is the signal that the tunnel is up; ssh ending first means it
/// could not be opened.
fn tunnel_command(bastion: &Jump, host: &str, port: u16) -> String {
    let forward = shell_quote(&format!("{TUNNEL_SOCKET}:[{host}]:{port}"));
    let ssh = bastion.ssh_command(&format!("-N -o ExitOnForwardFailure=yes -L {forward}"));
    let target = shell_quote(&format!("{host}:{port}"));
    let through = shell_quote(&bastion.address.address);
    format!(
        r#"{ssh} 2>{TUNNEL_LOG} &
tunnel=$!
tries=0
until [ -S {TUNNEL_SOCKET} ]; do
  if ! kill -0 "$tunnel" 2>/dev/null || [ "$tries" -ge {TUNNEL_WITHIN_TENTHS} ]; then
    echo "could not open a tunnel to "{target}" through the bastion "{through}
    grep -v '^Warning: Permanently added' {TUNNEL_LOG}
    kill "$tunnel" 2>/dev/null
    exit {TUNNEL_FAILED}
  fi
  sleep 0.1
  tries=$((tries + 1))
done
{CALL}
kill "$tunnel" 2>/dev/null
# On a failed call, ssh's words: the bastion says there why it could not connect onwards.
[ "$code" -eq 0 ] || grep -v '^Warning: Permanently added' {TUNNEL_LOG}
exit $code"#
    )
}

/// Judges the call by curl's exit code and the answer it left.
pub fn conclude(
    input: &StepInput,
    settings: &HttpSettings,
    code: i32,
    result: &SandboxResult,
) -> Verdict {
    let expect = Expectation::of(input, settings);
    let headers = collected(&result.collected, HEADERS_FILE).unwrap_or_default();
    let answer = if settings.method == "HEAD" {
        // With `head`, curl writes the headers where the body would go: there is no body.
        &[]
    } else {
        collected(&result.collected, ANSWER_FILE).unwrap_or_default()
    };
    if input.bastion().is_ok_and(|bastion| bastion.is_some()) {
        let log =
            String::from_utf8_lossy(collected(&result.collected, TUNNEL_LOG).unwrap_or_default());
        if let Some(verdict) = judge_tunnel(&expect, code, &log) {
            return verdict;
        }
    }
    judge(&expect, code, &String::from_utf8_lossy(headers), answer)
}

/// How a failure looks through the bastion, when the tunnel explains it.
///
/// A tunnel that could not be opened is `step-failed`, not `backend-unreachable`: the call
/// never left, so sending it again would be safe, but what failed is the way to the backend
/// (the bastion refused the deployment's key, or could not be reached), not the backend, and
/// the retries a blueprint gives `backend-unreachable` are for its backend's hiccups. A bastion
/// that refuses the key or cannot be reached while its security group admits the engine is
/// misconfigured more often than slow, and no retry mends that; a blueprint that knows better
/// can give `step-failed` retries.
///
/// Once the tunnel is up, the bastion connects onwards for each call; when that connection
/// fails, ssh closes curl's connection (curl says "Recv failure" or "Empty reply") and logs
/// `channel N: open failed: connect failed: REASON`. The request never reached the backend, as
/// when curl itself cannot connect, so the same reasons get the same class as a direct call:
/// `backend-unreachable`. Other reasons (a name the bastion cannot resolve, forwarding
/// refused by the bastion's sshd) fail the step, naming the reason.
fn judge_tunnel(expect: &Expectation, code: i32, log: &str) -> Option<Verdict> {
    let call = &expect.call;
    match code {
        0 => None,
        TUNNEL_FAILED => Some(Verdict::failed(format!(
            "could not open the tunnel through the bastion for {call}"
        ))),
        _ => match onward_failure(log) {
            Some(reason) => {
                let headline =
                    format!("the bastion could not connect onwards for {call} ({reason})");
                // What curl exits with 7 or 28 for, when it connects by itself.
                const UNREACHABLE: [&str; 4] = [
                    "Connection refused",
                    "No route to host",
                    "Network is unreachable",
                    "Connection timed out",
                ];
                Some(if UNREACHABLE.iter().any(|cause| reason.ends_with(cause)) {
                    Verdict::Failure {
                        class: ErrorClass::BackendUnreachable,
                        headline,
                    }
                } else {
                    Verdict::failed(headline)
                })
            }
            // curl could not connect to the tunnel's own socket: ssh closed the tunnel after it
            // opened. The way failed, not the backend, as above.
            None if matches!(code, CURL_COULD_NOT_CONNECT | CURL_TIMED_OUT) => {
                Some(Verdict::failed(format!(
                    "the tunnel through the bastion closed before {call} (curl exit code {code})"
                )))
            }
            None => None,
        },
    }
}

/// Why the bastion could not open a connection onwards, as ssh logged it
/// (`channel 1: open failed: connect failed: Connection refused`).
fn onward_failure(log: &str) -> Option<&str> {
    log.lines().find_map(|line| {
        line.split_once(": open failed: ")
            .map(|(_, why)| why.trim())
    })
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
    fn render(input: &StepInput, settings: &HttpSettings) -> Result<Self, String> {
        let url = input.render(&settings.url)?;
        // Validation saw only the URL's written start; a template may have rendered any scheme.
        if let Some(problem) = rules::url_problem(&url) {
            return Err(format!("`with.url`: {problem}"));
        }
        let mut headers = Vec::new();
        for (name, value) in &settings.headers {
            headers.push(header(name, &input.render(value)?)?);
        }
        let body = match &settings.body {
            None => None,
            Some(body) => Some(input.render(body)?),
        };
        Ok(Self {
            method: settings.method.to_owned(),
            url,
            headers,
            body,
        })
    }

    /// The curl config: one option a line, every value quoted by [`config_quote`]; with
    /// `unix_socket`, curl connects to that socket instead of the URL's host (the request
    /// stays the same, its `Host` header included).
    fn config(&self, unix_socket: Option<&str>) -> String {
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
        if let Some(socket) = unix_socket {
            lines.push(format!("unix-socket = {}", config_quote(socket)));
        }
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
    fn of(input: &StepInput, settings: &HttpSettings) -> Self {
        let url = &settings.url;
        let url = input.render(url).unwrap_or_else(|_| url.to_owned());
        Self {
            statuses: settings.expect_status.clone(),
            outputs: settings.outputs.clone(),
            call: format!("{} {url}", settings.method),
        }
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
    use crate::kind::{conclude, prepare};
    use crate::step::SSH_KEY_FILE;
    use crate::testing::{input, key_secrets, prepared_file, requested, sandbox_result, BASTION};

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
        let config = call.config(None);
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
        std::fs::write(dir.join(CONFIG_FILE), call.config(None)).expect("config");
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
    fn curl_sends_hostile_values_from_templates_exactly() {
        // Header values may not hold a line break (refused above); a body may hold anything.
        const HEADERS: &[&str] = &[
            "it's \"quoted\"",
            "a\\b\\\\c\\",
            "$(touch pwned) `touch pwned` ${HOME}",
            "{{ 7 * 6 }} {% x %}",
            "\"; url = \"http://evil/\"; header = \"X-Evil: 1",
            "@/etc/passwd",
            "tab\there, vtab\u{b}there",
            "ünï©ødé 😀",
        ];
        let body = "line 1\nit's \"quoted\" \\ \\\\ $(touch pwned) `x` {{ 7 * 6 }}\r\n\ttrailing\\";
        let query = "a\"b\\c'$(x)`y`";
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("address").port();
        let server = std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("curl connects");
            let mut reader = BufReader::new(stream);
            let mut head = Vec::new();
            loop {
                let mut line = Vec::new();
                reader.read_until(b'\n', &mut line).expect("a request line");
                if line == b"\r\n" || line.is_empty() {
                    break;
                }
                head.push(
                    String::from_utf8_lossy(line.strip_suffix(b"\r\n").unwrap_or(&line))
                        .into_owned(),
                );
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

        let headers: String = (0..HEADERS.len())
            .map(|i| format!("X-V{i}: '{{{{ params.h{i} }}}}', "))
            .collect();
        let params: String = (0..HEADERS.len())
            .map(|i| format!("h{i}: {{}}, "))
            .collect();
        let blueprint = parse(&format!(
            "name: x\nparams: {{ {params} q: {{}}, b: {{}} }}\nsteps:\n  call:\n    run: http\n    with:\n      url: 'http://127.0.0.1:{port}/p?q={{{{ params.q }}}}'\n      method: POST\n      headers: {{ {headers} }}\n      body: '{{{{ params.b }}}}'\n"
        ))
        .expect("valid")
        .snapshot;
        let named: Vec<(String, &str)> = HEADERS
            .iter()
            .enumerate()
            .map(|(i, value)| (format!("h{i}"), *value))
            .chain([("q".to_owned(), query), ("b".to_owned(), body)])
            .collect();
        let named: Vec<(&str, &str)> = named.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let state = requested(&blueprint, &named);
        let prepared = prepare(&input(&state, "call", &SecretValues::new())).expect("prepares");

        let dir = std::env::temp_dir().join(format!("overture-http-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for (path, content) in &prepared.files {
            std::fs::write(dir.join(path), content).expect("a prepared file");
        }
        let ran = Command::new("/usr/bin/curl")
            .args(["--disable", "--config", CONFIG_FILE])
            .current_dir(&dir)
            .output()
            .expect("run /usr/bin/curl");
        let pwned = dir.join("pwned").exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        let (head, sent) = server.join().expect("the server");
        assert!(!pwned, "a value ran");
        assert_eq!(head[0], format!("POST /p?q={query} HTTP/1.1"));
        for (i, value) in HEADERS.iter().enumerate() {
            assert!(
                head.contains(&format!("X-V{i}: {value}")),
                "{value:?} not in {head:#?}"
            );
        }
        assert!(!head.iter().any(|l| l.starts_with("X-Evil")), "{head:?}");
        assert_eq!(String::from_utf8_lossy(&sent), body);
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
        let file = |name: &str| prepared_file(&prepared, name);
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

    /// Prepares the step `call` (`with` its settings), behind a bastion whose host renders to
    /// `bastion`.
    fn prepare_behind(with: &str, bastion: &str) -> Result<Prepared, String> {
        let blueprint = parse(&format!(
            "name: x\nparams: {{ bastion: {{}} }}\n{BASTION}steps:\n  call: {{ run: http, with: {with} }}\n"
        ))
        .expect("valid")
        .snapshot;
        let state = requested(&blueprint, &[("bastion", bastion)]);
        prepare(&input(&state, "call", &key_secrets()))
    }

    #[test]
    fn via_the_bastion_curl_calls_through_a_tunnel_that_ssh_opens_first() {
        let prepared = prepare_behind(
            "{ url: 'http://10.0.0.5:8080/health?x=1', via: bastion }",
            "192.0.2.1",
        )
        .expect("prepares");
        let command = &prepared.command;
        assert!(
            command.starts_with(
                "'ssh' '-i' '/work/ssh/id_ed25519' '-p' '22' '-o' 'BatchMode=yes' '-o' 'StrictHostKeyChecking=accept-new' '-o' 'UserKnownHostsFile=/work/ssh/known_hosts' '-o' 'HashKnownHosts=no' '-o' 'UpdateHostKeys=no' '-o' 'IdentitiesOnly=yes' '-o' 'ConnectTimeout=10' -N -o ExitOnForwardFailure=yes -L '/work/tunnel.sock:[10.0.0.5]:8080' 'jumper@192.0.2.1' 2>tunnel.log &\n"
            ),
            "{command}"
        );
        assert!(
            command.contains("until [ -S /work/tunnel.sock ]"),
            "{command}"
        );
        assert!(command.contains("exit 120"), "{command}");
        assert!(command.contains(CALL), "{command}");
        assert!(command.ends_with("exit $code"), "{command}");
        assert!(!command.contains("PRIVATE KEY"));
        let config = prepared_file(&prepared, CONFIG_FILE);
        assert!(
            config.contains(r#"url = "http://10.0.0.5:8080/health?x=1""#),
            "{config}"
        );
        assert!(
            config.contains(r#"unix-socket = "/work/tunnel.sock""#),
            "{config}"
        );
        assert!(prepared_file(&prepared, SSH_KEY_FILE).contains("PRIVATE KEY"));
        assert!(prepared.collect.contains(&PathBuf::from(TUNNEL_LOG)));
    }

    #[test]
    fn without_the_bastion_the_call_is_as_it_was() {
        let blueprint = parse(&format!(
            "name: x\nparams: {{ bastion: {{}} }}\n{BASTION}steps:\n  call: {{ run: http, with: {{ url: 'https://api.example.com/' }} }}\n"
        ))
        .expect("valid")
        .snapshot;
        let state = requested(&blueprint, &[("bastion", "192.0.2.1")]);
        let prepared = prepare(&input(&state, "call", &key_secrets())).expect("prepares");
        assert_eq!(prepared.command, format!("{CALL}\nexit $code"));
        assert!(prepared.command.ends_with("\nexit $code") && !prepared.command.contains("ssh"));
        assert_eq!(prepared.files.len(), 1, "the config alone: no key");
        assert!(!prepared_file(&prepared, CONFIG_FILE).contains("unix-socket"));
    }

    #[test]
    fn a_url_rendered_to_another_scheme_fails_the_attempt_without_calling() {
        let blueprint = parse(
            "name: x\nparams: { api: {} }\nsteps:\n  call: { run: http, with: { url: '{{ params.api }}/x' } }\n",
        )
        .expect("valid: the scheme is known only once rendered")
        .snapshot;
        for (api, wanted) in [
            ("file:///etc", "`with.url`: the URL's scheme is `file`"),
            (
                "dict://10.0.0.5:11211",
                "`with.url`: the URL's scheme is `dict`",
            ),
            (
                "10.0.0.5",
                "`with.url`: the URL does not start with http:// or https://",
            ),
        ] {
            let state = requested(&blueprint, &[("api", api)]);
            let problem = prepare(&input(&state, "call", &SecretValues::new()))
                .err()
                .unwrap_or_else(|| panic!("{api}: prepared"));
            assert!(problem.starts_with(wanted), "{api}: {problem}");
        }
        let state = requested(&blueprint, &[("api", "HTTPS://api.example.com")]);
        assert!(prepare(&input(&state, "call", &SecretValues::new())).is_ok());
    }

    #[test]
    fn only_an_http_url_to_a_host_goes_through_the_bastion() {
        for (url, wanted) in [
            ("https://10.0.0.5/", "the URL does not start with http://"),
            ("http://a b/", "the URL's `a b` is not a host or host:port"),
            (
                "http://10.0.0.5:0/",
                "the URL's `10.0.0.5:0` is not a host or host:port",
            ),
        ] {
            let problem = prepare_behind(&format!("{{ url: '{url}', via: bastion }}"), "192.0.2.1")
                .err()
                .expect(url);
            assert_eq!(
                problem,
                format!(
                    "`with.via: bastion`: {wanted}; only http:// URLs can go through the bastion"
                ),
                "{url}"
            );
        }
        let problem = prepare_behind("{ url: 'http://10.0.0.5/', via: bastion }", "not one")
            .err()
            .expect("refused");
        assert!(
            problem.starts_with(
                "the bastion's host `{{ params.bastion }}`: `not one` is not an address"
            ),
            "{problem}"
        );
        assert_eq!(
            http_endpoint("HTTP://user:pw@[fd00::5]:8080/a@b#c"),
            Ok(("fd00::5".to_owned(), 8080))
        );
        assert_eq!(
            http_endpoint("http://api.internal?q=1"),
            Ok(("api.internal".to_owned(), 80))
        );
    }

    #[test]
    fn through_the_bastion_failures_of_the_way_are_told_from_an_unreachable_backend() {
        let call = expect(None, &[]);
        let warning =
            "Warning: Permanently added '192.0.2.1' (ED25519) to the list of known hosts.\r\n";
        let verdict = |code, log: &str| judge_tunnel(&call, code, &format!("{warning}{log}"));

        let closed = verdict(
            TUNNEL_FAILED,
            "jumper@192.0.2.1: Permission denied (publickey).\r\n",
        )
        .expect("judged");
        assert_eq!(
            closed,
            Verdict::failed("could not open the tunnel through the bastion for GET http://api/x")
        );
        assert_eq!(
            verdict(56, "channel 2: open failed: connect failed: Connection refused\r\n"),
            Some(Verdict::Failure {
                class: ErrorClass::BackendUnreachable,
                headline: "the bastion could not connect onwards for GET http://api/x (connect failed: Connection refused)".into()
            })
        );
        let unresolved = verdict(
            52,
            "channel 2: open failed: connect failed: Name or service not known\r\n",
        )
        .expect("judged");
        assert_eq!(class(&unresolved), Some(ErrorClass::StepFailed));
        assert!(headline(&unresolved).ends_with("(connect failed: Name or service not known)"));
        let prohibited = verdict(
            56,
            "channel 2: open failed: administratively prohibited: open failed\r\n",
        )
        .expect("judged");
        assert_eq!(class(&prohibited), Some(ErrorClass::StepFailed));
        let dropped = verdict(CURL_COULD_NOT_CONNECT, "").expect("judged");
        assert_eq!(class(&dropped), Some(ErrorClass::StepFailed));
        assert!(headline(&dropped).contains("tunnel through the bastion closed"));

        // Anything else is the call's own business.
        assert_eq!(verdict(0, ""), None);
        assert_eq!(verdict(22, ""), None);

        // conclude uses it only behind a bastion.
        let blueprint = parse(&format!(
            "name: x\nparams: {{ bastion: {{}} }}\n{BASTION}steps:\n  call: {{ run: http, with: {{ url: 'http://10.0.0.5/', via: bastion }} }}\n  direct: {{ run: http, with: {{ url: 'http://10.0.0.5/' }} }}\n"
        ))
        .expect("valid")
        .snapshot;
        let state = requested(&blueprint, &[("bastion", "192.0.2.1")]);
        let secrets = key_secrets();
        let ran = sandbox_result(TUNNEL_FAILED, "", &[(TUNNEL_LOG, "Permission denied\n")]);
        let through = conclude(&input(&state, "call", &secrets), TUNNEL_FAILED, &ran);
        assert_eq!(class(&through), Some(ErrorClass::StepFailed));
        assert!(
            headline(&through).starts_with("could not open the tunnel"),
            "{through:?}"
        );
        let direct = conclude(&input(&state, "direct", &secrets), TUNNEL_FAILED, &ran);
        assert_eq!(
            headline(&direct),
            "curl failed with exit code 120 for GET http://10.0.0.5/"
        );
    }
}
