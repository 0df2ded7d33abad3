//! The check of a service a step provides: after the step succeeded, every host must answer on
//! the service's port before the service is registered there. A registered service is one that
//! runs, not one that will.
//!
//! [`prepare`] writes the hosts ([`HOSTS_FILE`], `address<TAB>host<TAB>port` a line, the port
//! being the service's) and the poll ([`POLL`]) under `/work`. The poll tries every host not yet
//! answered in rounds until all have answered or [`CHECK_WITHIN`] has passed (a service the
//! step started may take a moment to listen), and records each answer in [`ANSWERS_FILE`]:
//! - `tcp`: the port accepts a connection;
//! - `http`: a `GET` of the path answers with a 2xx status.
//!
//! Behind a bastion each try goes through it, as every connection to the hosts does: `ssh -W`
//! to the bastion, which connects onwards. ssh says at its `DEBUG2` level whether the bastion
//! could open the connection (`open confirm`) or not (`open failed`), which is what a TCP check
//! reads; an HTTP check sends its request through the same channel and reads the status line.
//! [`conclude`] turns the answers into the instances to register, or says which hosts did not
//! answer and why.

use std::time::Duration;

use overture_domain::egress::Destination;
use overture_domain::host_keys::known_host;
use overture_domain::secret::Masker;
use overture_domain::services::ServiceInstance;
use overture_events::{ErrorClass, ServiceCheck, ServiceProvision};

use crate::attempt::{shown_output, with_tail};
use crate::record::Outcome;
use crate::step::{collected, Jump, Prepared, SshAddress, StepInput};
use crate::{logs, network, RunError, RunnerError, RunnerPorts, SandboxExit};

/// The hosts to check, under `/work`.
pub const HOSTS_FILE: &str = "service-hosts.tsv";
/// The poll, under `/work`.
pub const SCRIPT_FILE: &str = "service-check.sh";
/// One try at one host (`service-try.sh HOST PORT`), under `/work`.
pub const TRY_FILE: &str = "service-try.sh";
/// What the poll heard: `address<TAB>what answered` a line, one per host that answered.
pub const ANSWERS_FILE: &str = "service-answers.tsv";
/// How long the hosts have, in all, to answer.
pub const CHECK_WITHIN: Duration = Duration::from_secs(30);
/// The longest one try may take: through a bastion, a login and a connection onwards.
const TRY_WITHIN: Duration = Duration::from_secs(10);

/// The poll. Each try runs [`TRY_FILE`] (`try_host HOST PORT` for the kind of check and the way
/// to the hosts), which prints what answered or fails with a reason on its last line of errors,
/// under `timeout`, since neither a connect nor ssh's wait onwards has a limit of its own.
const POLL: &str = r#"set -u
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( 10#$t / 1000 )); }
seconds() { printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); }
deadline=$(( $(now_ms) + WITHIN_MS ))
mapfile -t pending < service-hosts.tsv
: > service-answers.tsv
declare -A why=()
echo "checking service $SERVICE ($CHECK) on:$(for e in "${pending[@]}"; do printf ' %s' "${e%%$'\t'*}"; done)"
while :; do
  silent=()
  for entry in "${pending[@]}"; do
    IFS=$'\t' read -r address host port <<< "$entry"
    if answer=$(timeout "$(seconds "$TRY_MS")" bash service-try.sh "$host" "$port" 2>try.err); then
      printf '%s\t%s\n' "$host" "$answer" >> service-answers.tsv
      echo "$host:$port answered: $answer"
    else
      silent+=("$entry")
      reason=$(tr -d '\r' < try.err | grep -v -e '^Warning: Permanently added' -e '^stdio forwarding failed' -e '^debug' | tail -n 1)
      [[ -n $reason ]] && why[$host]=$reason
    fi
  done
  pending=("${silent[@]}")
  (( ${#pending[@]} == 0 )) && exit 0
  if (( $(now_ms) >= deadline )); then
    for entry in "${pending[@]}"; do
      IFS=$'\t' read -r address host port <<< "$entry"
      echo "$host:$port did not answer: ${why[$host]:-no answer}"
    done
    exit 1
  fi
  sleep 1
done
"#;

/// A TCP check straight to the host.
const TCP_DIRECT: &str = r#"try_host() {
  if ! (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then
    echo "connection refused or unreachable" >&2
    return 1
  fi
  echo "accepted a connection"
}
"#;

/// An HTTP check straight to the host: curl, its status line read.
const HTTP_DIRECT: &str = r#"try_host() {
  local host=$1 code
  [[ $host == *:* ]] && host="[$host]"
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "http://$host:$2$CHECK_PATH") || return 1
  if [[ $code == 2?? ]]; then echo "HTTP $code"; else echo "answered HTTP $code, not 2xx" >&2; return 1; fi
}
"#;

/// A TCP check through the bastion (after `jump` is defined): whether the bastion could open
/// the connection onwards, as ssh says at `DEBUG2`. ssh's input is held open, so the service
/// hears nothing, not even an end of input, before ssh is stopped.
const TCP_JUMP: &str = r#"try_host() {
  local line
  coproc JUMP { jump -o LogLevel=DEBUG2 -W "[$1]:$2" 2>&1 >/dev/null; }
  local pid=$JUMP_PID
  exec 3<&"${JUMP[0]}"
  while IFS= read -r line <&3; do
    line=${line%$'\r'}
    case $line in
      *"channel 0: open confirm"*) kill "$pid" 2>/dev/null; echo "accepted a connection"; return 0 ;;
      *"open failed"*) echo "${line#*open failed: }" >&2; kill "$pid" 2>/dev/null; return 1 ;;
      debug*) ;;
      *) echo "$line" >&2 ;;
    esac
  done
  return 1
}
"#;

/// An HTTP check through the bastion (after `jump` is defined): a `GET` sent down the channel
/// the bastion opens, the status line read from what comes back.
const HTTP_JUMP: &str = r#"try_host() {
  local status host=$1
  [[ $host == *:* ]] && host="[$host]"
  status=$(printf 'GET %s HTTP/1.0\r\nHost: %s:%s\r\nConnection: close\r\n\r\n' "$CHECK_PATH" "$host" "$2" \
    | jump -W "[$1]:$2" 2>try-jump.err | head -n 1 | tr -d '\r')
  if [[ $status =~ ^HTTP/[0-9.]+\ 2[0-9][0-9] ]]; then echo "$status"; return 0; fi
  if [[ -n $status ]]; then echo "answered ${status#HTTP/* }, not 2xx" >&2; else tail -n 1 try-jump.err >&2; fi
  return 1
}
"#;

/// The check's sandbox command for the step's hosts, through the bastion when the step goes
/// through one.
pub fn prepare(input: &StepInput, provision: &ServiceProvision) -> Result<Prepared, String> {
    let hosts = input.ssh_addresses()?;
    let lines: String = hosts
        .iter()
        .map(|address| {
            format!(
                "{}\t{}\t{}\n",
                address.address, address.host, provision.port
            )
        })
        .collect();
    let bastion = input.bastion()?;
    let (check, path) = match &provision.check {
        ServiceCheck::Tcp => ("tcp".to_owned(), String::new()),
        ServiceCheck::Http { path } => (format!("http {path}"), path.clone()),
    };
    let try_host = match (&provision.check, &bastion) {
        (ServiceCheck::Tcp, None) => TCP_DIRECT.to_owned(),
        (ServiceCheck::Http { .. }, None) => HTTP_DIRECT.to_owned(),
        (ServiceCheck::Tcp, Some(jump)) => format!("{}{TCP_JUMP}", jump_function(jump)),
        (ServiceCheck::Http { .. }, Some(jump)) => format!("{}{HTTP_JUMP}", jump_function(jump)),
    };
    let mut prepared = Prepared {
        command: format!("exec /usr/bin/bash {SCRIPT_FILE}"),
        env: vec![
            ("SERVICE".into(), provision.service.clone()),
            ("CHECK".into(), check),
            ("CHECK_PATH".into(), path),
            ("WITHIN_MS".into(), CHECK_WITHIN.as_millis().to_string()),
            ("TRY_MS".into(), TRY_WITHIN.as_millis().to_string()),
        ],
        files: vec![
            (HOSTS_FILE.into(), lines.into_bytes()),
            (SCRIPT_FILE.into(), POLL.as_bytes().to_vec()),
            (
                TRY_FILE.into(),
                format!("{try_host}try_host \"$@\"\n").into_bytes(),
            ),
        ],
        network: true,
        collect: vec![ANSWERS_FILE.into()],
        ..Prepared::default()
    };
    if bastion.is_some() {
        prepared.files.extend([
            input.ssh_key_file()?,
            crate::host_keys::known_hosts_file(input.state),
        ]);
    }
    Ok(prepared)
}

/// `jump`: ssh to the bastion with the deployment's key, `"$@"` before the destination.
fn jump_function(bastion: &Jump) -> String {
    format!("jump() {{ {}; }}\n", bastion.ssh_command(r#""$@""#))
}

/// The instances to register when every host answered; otherwise why not.
pub fn conclude(
    input: &StepInput,
    provision: &ServiceProvision,
    code: i32,
    collected_files: &[(std::path::PathBuf, Vec<u8>)],
) -> Result<Vec<ServiceInstance>, String> {
    let hosts = input.ssh_addresses()?;
    let answers =
        String::from_utf8_lossy(collected(collected_files, ANSWERS_FILE).unwrap_or_default())
            .into_owned();
    let answered: Vec<&str> = answers
        .lines()
        .filter_map(|line| line.split('\t').next())
        .collect();
    let silent: Vec<&SshAddress> = hosts
        .iter()
        .filter(|address| !answered.contains(&address.host.as_str()))
        .collect();
    if code != 0 || !silent.is_empty() {
        let names: Vec<String> = silent
            .iter()
            .map(|address| format!("{}:{}", address.host, provision.port))
            .collect();
        let check = match &provision.check {
            ServiceCheck::Tcp => "tcp".to_owned(),
            ServiceCheck::Http { path } => format!("http {path}"),
        };
        return Err(format!(
            "service `{}` did not answer its check ({check}) within {}s on {}; it is not registered",
            provision.service,
            CHECK_WITHIN.as_secs(),
            if names.is_empty() {
                "every host (the check did not finish)".to_owned()
            } else {
                names.join(", ")
            }
        ));
    }
    Ok(hosts
        .iter()
        .map(|address| ServiceInstance {
            service: provision.service.clone(),
            step: input.spec.name.clone(),
            host: server_name(input, address),
            address: address.host.clone(),
            port: provision.port,
        })
        .collect())
}

/// The host's name: the server's name when the engine pinned its keys under one, else its
/// address as the step gave it.
fn server_name(input: &StepInput, address: &SshAddress) -> String {
    input
        .state
        .host_keys
        .get(&known_host(&address.host, address.port))
        .map(|pinned| pinned.server.clone())
        .unwrap_or_else(|| address.address.clone())
}

/// After a providing step succeeded: checks its service answers on every host
/// in a sandbox of its own, with the attempt's network policy. The success
/// then carries the instances to register; a host that did not answer fails the attempt, and
/// nothing is registered.
pub(crate) async fn check_service(
    success: Outcome,
    input: &StepInput<'_>,
    provision: &ServiceProvision,
    network_policy: Option<Vec<Destination>>,
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<Outcome, RunnerError> {
    let Outcome::Success {
        outputs, duration, ..
    } = success
    else {
        return Ok(success);
    };
    let failed = |message: String| Outcome::Failure {
        class: ErrorClass::StepFailed,
        exit_code: None,
        message: masker.mask(&message),
        duration,
    };
    let prepared = match prepare(input, provision) {
        Ok(prepared) => prepared,
        Err(problem) => return Ok(failed(problem)),
    };
    let id = format!(
        "{}-check",
        crate::sandbox_id(
            input.deployment,
            &input.spec.name,
            logs::LogName::Attempt(input.attempt)
        )
    );
    // The attempt's log was written once, by the step; the check's output goes into the
    // failure's message when it fails.
    let mut job = crate::step::sandbox_job(
        id,
        prepared,
        input,
        logs::LogName::Attempt(input.attempt),
        Box::new(std::io::sink()),
        masker,
    );
    job.log = None;
    job.timeout = CHECK_WITHIN + Duration::from_secs(15);
    job.network_policy = Some(match network_policy {
        Some(policy) => policy,
        None => network::policy(input, ports.loopback).await,
    });
    let result = match ports
        .sandbox
        .run(job, Box::pin(std::future::pending()))
        .await
    {
        Ok(result) => result,
        Err(RunError::Unrunnable(refused)) => return Ok(failed(refused.to_string())),
        Err(RunError::Failed(error)) => return Err(error.into()),
    };
    let code = match result.exit {
        SandboxExit::Code(code) => code,
        _ => -1,
    };
    let output = shown_output(masker, &result.output);
    Ok(match conclude(input, provision, code, &result.collected) {
        Ok(registrations) => Outcome::Success {
            outputs,
            duration: duration + result.duration,
            registrations,
        },
        Err(headline) => Outcome::Failure {
            class: ErrorClass::StepFailed,
            exit_code: Some(code),
            message: with_tail(masker.mask(&headline), &output),
            duration: duration + result.duration,
        },
    })
}
