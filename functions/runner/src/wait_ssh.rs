//! The `wait-ssh` step kind: wait until every host answers with an SSH banner.
//!
//! - [`prepare`] writes the hosts ([`HOSTS_FILE`], one `address<TAB>host<TAB>port` a line) and
//!   the poll ([`POLL`] and [`PROBE`], bash scripts) under `/work`. The poll tries every silent
//!   host in rounds, each try bounded by `timeout`, until all have sent a line starting `SSH-` or the
//!   deadline passes; it records each answer in [`ANSWERS_FILE`] and exits
//!   [`DEADLINE_PASSED`] when hosts are still silent at the deadline.
//! - [`conclude`] turns that code into a `bootstrap-timeout` (which fails the deployment at
//!   once) naming the silent hosts, and a success into outputs: each host's banner and the wait.

use std::collections::BTreeMap;
use std::time::Duration;

use overture_domain::duration::{format_duration, parse_duration};
use overture_domain::kinds::DEFAULT_SSH_WAIT;
use overture_events::ErrorClass;
use serde_json::Value;

use crate::step::{collected, Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The kind's name in blueprints.
pub const KIND: &str = "wait-ssh";

/// The hosts to wait for, under `/work`.
pub const HOSTS_FILE: &str = "hosts.tsv";
/// The poll, under `/work`.
pub const SCRIPT_FILE: &str = "wait-ssh.sh";
/// One try at one host, under `/work`.
pub const PROBE_FILE: &str = "probe.sh";
/// What the poll heard: `address<TAB>milliseconds waited<TAB>banner` a line.
pub const ANSWERS_FILE: &str = "answers.tsv";
/// The poll's exit code when the deadline passed with hosts still silent (`EX_TEMPFAIL`).
pub const DEADLINE_PASSED: i32 = 75;

/// The longest one try at one host may take, to connect and read its banner: a host that
/// drops packets would otherwise hold a connect for minutes.
const TRY_WITHIN: Duration = Duration::from_secs(5);
/// The pause between rounds of tries.
const PAUSE: Duration = Duration::from_secs(1);

/// The poll: rounds of [`PROBE`] at every silent host until all answered or the deadline passed.
/// Each try runs under `timeout`, since a connect to `/dev/tcp` has no time limit of its own.
const POLL: &str = r#"set -u
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( 10#$t / 1000 )); }
seconds() { printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); }
start=$(now_ms)
deadline=$(( start + WAIT_MS ))
mapfile -t pending < hosts.tsv
: > answers.tsv
addresses() { local entry; for entry in "$@"; do printf ' %s' "${entry%%$'\t'*}"; done; }
echo "waiting up to $WAIT_TEXT for an SSH banner from:$(addresses "${pending[@]}")"
said=$start
while :; do
  silent=()
  for entry in "${pending[@]}"; do
    IFS=$'\t' read -r address host port <<< "$entry"
    left=$(( deadline - $(now_ms) ))
    try=$(( left < TRY_MS ? left : TRY_MS ))
    (( try < 200 )) && try=200
    if banner=$(timeout "$(seconds "$try")" bash probe.sh "$host" "$port" 2>/dev/null); then
      waited=$(( $(now_ms) - start ))
      printf '%s\t%s\t%s\n' "$address" "$waited" "$banner" >> answers.tsv
      echo "$address answered after $(seconds "$waited")s: $banner"
    else
      silent+=("$entry")
    fi
  done
  pending=("${silent[@]}")
  if (( ${#pending[@]} == 0 )); then
    echo "every host answered"
    exit 0
  fi
  now=$(now_ms)
  if (( now >= deadline )); then
    echo "no SSH banner within $WAIT_TEXT from:$(addresses "${pending[@]}")"
    exit $DEADLINE_CODE
  fi
  if (( now - said >= 10000 )); then
    echo "still waiting for:$(addresses "${pending[@]}") ($(seconds $(( deadline - now )))s left)"
    said=$now
  fi
  pause=$(( deadline - now < PAUSE_MS ? deadline - now : PAUSE_MS ))
  sleep "$(seconds "$pause")"
done
"#;

/// One try at one host (`probe.sh HOST PORT`): prints its banner, the first line starting
/// `SSH-` (a server may send other lines before it: RFC 4253, 4.2).
const PROBE: &str = r#"exec 3<>"/dev/tcp/$1/$2" || exit 1
while IFS= read -r line <&3; do
  line=${line%$'\r'}
  if [[ $line == SSH-* ]]; then printf '%s\n' "$line"; exit 0; fi
done
exit 1
"#;

/// Builds the sandbox command of an attempt: the hosts and the poll, with network access.
pub fn prepare(input: &StepInput) -> Result<Prepared, String> {
    let hosts = input.ssh_addresses()?;
    // Validation made sure the wait ends before the step's own timeout.
    let wait = wait(input)?;
    let lines: String = hosts
        .iter()
        .map(|t| format!("{}\t{}\t{}\n", t.address, t.host, t.port))
        .collect();
    Ok(Prepared {
        command: format!("exec /usr/bin/bash {SCRIPT_FILE}"),
        env: vec![
            ("WAIT_MS".into(), wait.as_millis().to_string()),
            ("WAIT_TEXT".into(), format_duration(wait)),
            ("TRY_MS".into(), TRY_WITHIN.as_millis().to_string()),
            ("PAUSE_MS".into(), PAUSE.as_millis().to_string()),
            ("DEADLINE_CODE".into(), DEADLINE_PASSED.to_string()),
        ],
        files: vec![
            (HOSTS_FILE.into(), lines.into_bytes()),
            (SCRIPT_FILE.into(), POLL.as_bytes().to_vec()),
            (PROBE_FILE.into(), PROBE.as_bytes().to_vec()),
        ],
        network: true,
        collect: vec![ANSWERS_FILE.into()],
        ..Prepared::default()
    })
}

/// Judges the poll's exit: every host answered, the deadline passed, or the poll broke.
pub fn conclude(input: &StepInput, code: i32, result: &SandboxResult) -> Verdict {
    let answers = parse_answers(collected(&result.collected, ANSWERS_FILE).unwrap_or_default());
    let hosts: Vec<String> = match input.ssh_addresses() {
        Ok(hosts) => hosts.into_iter().map(|t| t.address).collect(),
        Err(problem) => return Verdict::failed(problem),
    };
    let wait = wait(input).unwrap_or(DEFAULT_SSH_WAIT);
    judge(&hosts, wait, code, &answers)
}

fn wait(input: &StepInput) -> Result<Duration, String> {
    match input.setting("timeout") {
        None => Ok(DEFAULT_SSH_WAIT),
        Some(value) => value
            .as_str()
            .and_then(parse_duration)
            .filter(|wait| !wait.is_zero())
            .ok_or_else(|| "`with.timeout` must be a duration, like 30s or 2m".to_owned()),
    }
}

/// One host's answer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    waited_ms: u64,
    banner: String,
}

fn parse_answers(file: &[u8]) -> BTreeMap<String, Answer> {
    String::from_utf8_lossy(file)
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, '\t');
            let address = parts.next()?;
            let waited_ms = parts.next()?.parse().ok()?;
            let banner = parts.next()?;
            Some((
                address.to_owned(),
                Answer {
                    waited_ms,
                    banner: banner.to_owned(),
                },
            ))
        })
        .collect()
}

fn judge(
    hosts: &[String],
    wait: Duration,
    code: i32,
    answers: &BTreeMap<String, Answer>,
) -> Verdict {
    let silent: Vec<&str> = hosts
        .iter()
        .filter(|host| !answers.contains_key(*host))
        .map(String::as_str)
        .collect();
    match code {
        0 if silent.is_empty() => {
            let banners: serde_json::Map<String, Value> = answers
                .iter()
                .map(|(host, answer)| (host.clone(), Value::String(answer.banner.clone())))
                .collect();
            let waited = answers.values().map(|a| a.waited_ms).max().unwrap_or(0);
            Verdict::Success(
                [
                    ("banners".to_owned(), Value::Object(banners).to_string()),
                    ("waited_ms".to_owned(), waited.to_string()),
                ]
                .into(),
            )
        }
        DEADLINE_PASSED if !silent.is_empty() => Verdict::Failure {
            class: ErrorClass::BootstrapTimeout,
            headline: format!(
                "no SSH banner within {} from {} ({} of {} hosts): a server that sends none may \
                 still be booting, or its boot failed. Log in to it (through the provider's console \
                 if SSH is down) and check cloud-init: `cloud-init status --long` and \
                 /var/log/cloud-init-output.log",
                format_duration(wait),
                silent.join(", "),
                silent.len(),
                hosts.len()
            ),
        },
        other => Verdict::failed(format!(
            "the wait for SSH stopped with exit code {other}; silent hosts: {}",
            if silent.is_empty() {
                "none".to_owned()
            } else {
                silent.join(", ")
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::secret::SecretValues;

    use super::*;
    use crate::testing::{input, requested};

    /// Prepares the step `wait` of a blueprint whose parameter `ip` is 10.0.0.9.
    fn prepare_step(blueprint: &str) -> Result<Prepared, String> {
        let blueprint = parse(blueprint).expect("valid").snapshot;
        let state = requested(&blueprint, &[("ip", "10.0.0.9")]);
        prepare(&input(&state, "wait", &SecretValues::new()))
    }

    #[test]
    fn the_hosts_of_a_group_are_rendered_into_the_hosts_file() {
        let prepared = prepare_step(
            "name: x\nparams: { ip: {} }\nhosts:\n  web: ['{{ params.ip }}', '{{ params.ip }}:2222']\nsteps:\n  wait: { run: wait-ssh, with: { hosts: web, timeout: 30s } }\n",
        )
        .expect("prepares");
        assert!(prepared.network);
        let (_, hosts) = prepared
            .files
            .iter()
            .find(|(path, _)| path.as_os_str() == HOSTS_FILE)
            .expect("the hosts file");
        assert_eq!(
            String::from_utf8_lossy(hosts),
            "10.0.0.9\t10.0.0.9\t22\n10.0.0.9:2222\t10.0.0.9\t2222\n"
        );
        assert!(prepared
            .env
            .contains(&("WAIT_MS".to_owned(), "30000".to_owned())));
    }

    fn hosts(addresses: &[&str]) -> Vec<String> {
        addresses.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn every_host_answering_succeeds_with_their_banners_and_the_wait() {
        let answers = parse_answers(
            b"10.0.0.1:22\t1200\tSSH-2.0-OpenSSH_9.2\n10.0.0.2:22\t3400\tSSH-2.0-dropbear\n",
        );
        let verdict = judge(
            &hosts(&["10.0.0.1:22", "10.0.0.2:22"]),
            DEFAULT_SSH_WAIT,
            0,
            &answers,
        );
        assert_eq!(
            verdict,
            Verdict::Success(
                [
                    (
                        "banners".to_owned(),
                        r#"{"10.0.0.1:22":"SSH-2.0-OpenSSH_9.2","10.0.0.2:22":"SSH-2.0-dropbear"}"#
                            .to_owned()
                    ),
                    ("waited_ms".to_owned(), "3400".to_owned()),
                ]
                .into()
            )
        );
    }

    #[test]
    fn the_deadline_passing_is_a_bootstrap_timeout_naming_the_silent_hosts() {
        let answers = parse_answers(b"10.0.0.1:22\t1200\tSSH-2.0-OpenSSH_9.2\n");
        let verdict = judge(
            &hosts(&["10.0.0.1:22", "10.0.0.2:22"]),
            Duration::from_secs(120),
            DEADLINE_PASSED,
            &answers,
        );
        let Verdict::Failure { class, headline } = verdict else {
            panic!("a failure: {verdict:?}");
        };
        assert_eq!(class, ErrorClass::BootstrapTimeout);
        assert!(
            headline.starts_with("no SSH banner within 2m from 10.0.0.2:22 (1 of 2 hosts)"),
            "{headline}"
        );
        assert!(headline.contains("cloud-init status --long"), "{headline}");
        assert!(
            headline.contains("/var/log/cloud-init-output.log"),
            "{headline}"
        );
    }

    #[test]
    fn any_other_exit_fails_the_step() {
        let none = BTreeMap::new();
        for code in [1, 2, 127] {
            let verdict = judge(&hosts(&["h:22"]), DEFAULT_SSH_WAIT, code, &none);
            assert!(
                matches!(
                    verdict,
                    Verdict::Failure {
                        class: ErrorClass::StepFailed,
                        ..
                    }
                ),
                "{code}: {verdict:?}"
            );
        }
        // Success claimed with a host missing from the answers is not believed.
        let verdict = judge(&hosts(&["h:22"]), DEFAULT_SSH_WAIT, 0, &none);
        assert!(matches!(
            verdict,
            Verdict::Failure {
                class: ErrorClass::StepFailed,
                ..
            }
        ));
    }
}
