//! The runner's half of the `wait-ssh` kind: wait until every host answers with an SSH banner.
//! Its settings ([`WaitSshSettings`]: `hosts`, `timeout`) and their checks are the kind's other
//! half, `domain/src/kind/wait_ssh.rs`.
//!
//! - [`prepare`] writes the hosts ([`HOSTS_FILE`], one `address<TAB>host<TAB>port` a line) and
//!   the poll ([`POLL`] and [`PROBE`], bash scripts) under `/work`. The poll tries every silent
//!   host in rounds, each try bounded by `timeout`, until all have sent a line starting `SSH-` or the
//!   deadline passes; it records each answer in [`ANSWERS_FILE`] and exits
//!   [`DEADLINE_PASSED`] when hosts are still silent at the deadline.
//! - Behind a bastion ([`StepInput::bastion`]) the poll first waits, the same way, for the
//!   bastion's own banner ([`BASTION_FILE`], [`BASTION_ANSWER_FILE`]), then tries each host
//!   through it ([`JUMP_PROBE_FILE`]: `ssh -W` to the bastion, which connects onwards), logging
//!   in with the deployment's key. The deadline covers both.
//! - Before the first contact with servers whose host keys are not pinned yet, when the
//!   deployment has a cloud token, the command first runs `overture host-keys`
//!   ([`CONSOLE_HOSTS_FILE`]), which reads their keys from the cloud's consoles for the engine to
//!   pin ([`crate::host_keys`]).
//! - [`conclude`] turns that code into a `bootstrap-timeout` (which fails the deployment at
//!   once) naming the silent hosts, or the silent bastion, and a success into outputs: each
//!   host's banner and the wait. Behind a bastion, ssh checks the bastion's host key against
//!   the pinned ones ([`crate::host_keys`]); a refused key stops the poll at once
//!   ([`HOST_KEY_REFUSED`]), a `host-key-mismatch`.

use std::collections::BTreeMap;
use std::time::Duration;

use overture_domain::duration::format_duration;
use overture_domain::kind::WaitSshSettings;
use overture_events::ErrorClass;
use serde_json::Value;

use overture_domain::host_keys::known_host;
use overture_domain::secret::TOKEN_SECRET;

use crate::servers::{AUTH_URL_ENV, TOKEN_ENV};
use crate::step::{collected, Jump, Prepared, SshAddress, StepInput, Verdict};
use crate::SandboxResult;

/// The hosts to wait for, under `/work`.
pub const HOSTS_FILE: &str = "hosts.tsv";
/// The poll, under `/work`.
pub const SCRIPT_FILE: &str = "wait-ssh.sh";
/// One try at one host, under `/work`.
pub const PROBE_FILE: &str = "probe.sh";
/// What the poll heard: `address<TAB>milliseconds waited<TAB>banner` a line.
pub const ANSWERS_FILE: &str = "answers.tsv";
/// The bastion, behind one, as a line of [`HOSTS_FILE`].
pub const BASTION_FILE: &str = "bastion.tsv";
/// What the poll heard from the bastion, as a line of [`ANSWERS_FILE`].
pub const BASTION_ANSWER_FILE: &str = "bastion-answer.tsv";
/// One try at one host through the bastion, under `/work`.
pub const JUMP_PROBE_FILE: &str = "jump.sh";
/// The poll's exit code when the deadline passed with hosts still silent (`EX_TEMPFAIL`).
pub const DEADLINE_PASSED: i32 = 75;
/// The poll's exit code when ssh refused the bastion's host key (`EX_PROTOCOL`).
pub const HOST_KEY_REFUSED: i32 = 76;
/// The hosts (the bastion among them) with no pinned key whose keys `overture host-keys` asks
/// the cloud for, under `/work`: `host<TAB>port` a line.
pub const CONSOLE_HOSTS_FILE: &str = "console-hosts.tsv";
/// Where `overture host-keys` writes why it failed, under `/work`.
pub const HOST_KEYS_ERROR_FILE: &str = "host-keys.error";
/// The hidden subcommand of the `overture` program that reads them.
pub const HOST_KEYS_SUBCOMMAND: &str = "host-keys";
/// How long, in all, consoles that do not show the keys yet are waited for before the poll:
/// servers a step contacts first may still be booting.
const FIRST_CONTACT_CONSOLE_WAIT: Duration = Duration::from_secs(20);

/// The longest one try at one host may take, to connect and read its banner: a host that
/// drops packets would otherwise hold a connect for minutes.
const TRY_WITHIN: Duration = Duration::from_secs(5);
/// The longest one try through the bastion may take: a login to the bastion (key exchange,
/// authentication) and a connection onwards take a second or so; this leaves room for a slow
/// bastion, and matches the `ConnectTimeout` of its ssh options.
const JUMP_TRY_WITHIN: Duration = Duration::from_secs(10);
/// The pause between rounds of tries.
const PAUSE: Duration = Duration::from_secs(1);

/// The poll: rounds of a probe at every silent host until all answered or the deadline passed,
/// first at the bastion when there is one. Each try runs under `timeout`, since neither a
/// connect to `/dev/tcp` nor ssh's wait for a connection onwards has a time limit of its own;
/// `timeout` stops the try's whole process group, ssh included. A probe that fails says why on
/// its last line of error output, if it knows; the poll names the last reason each host still
/// silent at the deadline gave.
const POLL: &str = r#"set -u
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $(( 10#$t / 1000 )); }
seconds() { printf '%d.%03d' $(( $1 / 1000 )) $(( $1 % 1000 )); }
addresses() { local entry; for entry in "$@"; do printf ' %s' "${entry%%$'\t'*}"; done; }
start=$(now_ms)
deadline=$(( start + WAIT_MS ))

# poll LIST PROBE TRY_MS ANSWERS INTRO: returns once every host of LIST has answered PROBE.
poll() {
  local list=$1 probe=$2 try_ms=$3 answers=$4 intro=$5
  local -a pending silent
  local -A why=()
  local entry address host port left try banner reason waited now pause said
  mapfile -t pending < "$list"
  : > "$answers"
  echo "$intro$(addresses "${pending[@]}")"
  said=$(now_ms)
  while :; do
    silent=()
    for entry in "${pending[@]}"; do
      IFS=$'\t' read -r address host port <<< "$entry"
      left=$(( deadline - $(now_ms) ))
      try=$(( left < try_ms ? left : try_ms ))
      (( try < 200 )) && try=200
      if banner=$(timeout "$(seconds "$try")" bash "$probe" "$host" "$port" 2>probe.err); then
        waited=$(( $(now_ms) - start ))
        printf '%s\t%s\t%s\n' "$address" "$waited" "$banner" >> "$answers"
        echo "$address answered after $(seconds "$waited")s: $banner"
      else
        silent+=("$entry")
        # A host key other than the pinned one is no server still booting: stop at once.
        if grep -qs 'requested strict checking' jump.err; then
          tr -d '\r' < jump.err
          exit $MISMATCH_CODE
        fi
        # A try cut short by the deadline has nothing to say: keep what an earlier one said.
        reason=$(tail -n 1 probe.err)
        [[ -n $reason ]] && why[$address]=$reason
      fi
    done
    pending=("${silent[@]}")
    (( ${#pending[@]} == 0 )) && return 0
    now=$(now_ms)
    if (( now >= deadline )); then
      echo "no SSH banner within $WAIT_TEXT from:$(addresses "${pending[@]}")"
      for entry in "${pending[@]}"; do
        address=${entry%%$'\t'*}
        if [[ -n ${why[$address]:-} ]]; then echo "$address: ${why[$address]}"; fi
      done
      exit $DEADLINE_CODE
    fi
    if (( now - said >= 10000 )); then
      echo "still waiting for:$(addresses "${pending[@]}") ($(seconds $(( deadline - now )))s left)"
      said=$now
    fi
    pause=$(( deadline - now < PAUSE_MS ? deadline - now : PAUSE_MS ))
    sleep "$(seconds "$pause")"
  done
}

if [[ -s bastion.tsv ]]; then
  poll bastion.tsv probe.sh "$TRY_MS" bastion-answer.tsv \
    "waiting up to $WAIT_TEXT for an SSH banner from the bastion:"
  left=$(( deadline - $(now_ms) ))
  (( left < 0 )) && left=0
  poll hosts.tsv jump.sh "$JUMP_TRY_MS" answers.tsv \
    "waiting up to $(seconds "$left")s more for an SSH banner, through the bastion, from:"
else
  poll hosts.tsv probe.sh "$TRY_MS" answers.tsv "waiting up to $WAIT_TEXT for an SSH banner from:"
fi
echo "every host answered"
exit 0
"#;

/// One try at one host (`probe.sh HOST PORT`): prints its banner, the first line starting
/// `SSH-` (a server may send other lines before it: RFC 4253, 4.2). bash's own words for a
/// failed connect name the script and its line, so they are left out.
const PROBE: &str = r#"exec 2>/dev/null
exec 3<>"/dev/tcp/$1/$2" || exit 1
while IFS= read -r line <&3; do
  line=${line%$'\r'}
  if [[ $line == SSH-* ]]; then printf '%s\n' "$line"; exit 0; fi
done
exit 1
"#;

/// One try at one host through the bastion (`jump.sh HOST PORT`), after the line of
/// [`jump_probe`] that defines `jump`. `ssh -W` joins its stdin and stdout to HOST:PORT as the
/// bastion reaches it, so the host's banner arrives on ssh's stdout. As a coprocess, ssh reads
/// a pipe this script holds open and never writes: the host hears nothing from us, not even an
/// end of input, until its banner is read and ssh stopped. Failing, it says why in ssh's words,
/// leaving out the lines every connection or failure prints.
const JUMP_PROBE: &str = r#"coproc JUMP { jump -W "[$1]:$2" 2>jump.err; }
pid=$JUMP_PID
# bash forgets a coprocess's descriptors once it has ended: read a copy.
exec 3<&"${JUMP[0]}"
while IFS= read -r line <&3; do
  line=${line%$'\r'}
  if [[ $line == SSH-* ]]; then printf '%s\n' "$line"; kill "$pid" 2>/dev/null; exit 0; fi
done
grep -v -e '^Warning: Permanently added' -e '^stdio forwarding failed' jump.err | tr -d '\r' | tail -n 1 >&2
exit 1
"#;

/// Builds the sandbox command of an attempt: the hosts and the poll, with network access, and
/// behind a bastion the bastion, the probe through it and the deployment's key.
pub fn prepare(input: &StepInput, settings: &WaitSshSettings) -> Result<Prepared, String> {
    let hosts = input.render_hosts(&settings.hosts)?;
    // Validation made sure the wait ends before the step's own timeout.
    let wait = settings.wait;
    let lines: String = hosts.iter().map(hosts_line).collect();
    let mut prepared = Prepared {
        command: format!("exec /usr/bin/bash {SCRIPT_FILE}"),
        env: vec![
            ("WAIT_MS".into(), wait.as_millis().to_string()),
            ("WAIT_TEXT".into(), format_duration(wait)),
            ("TRY_MS".into(), TRY_WITHIN.as_millis().to_string()),
            ("PAUSE_MS".into(), PAUSE.as_millis().to_string()),
            ("DEADLINE_CODE".into(), DEADLINE_PASSED.to_string()),
            ("MISMATCH_CODE".into(), HOST_KEY_REFUSED.to_string()),
        ],
        files: vec![
            (HOSTS_FILE.into(), lines.into_bytes()),
            (SCRIPT_FILE.into(), POLL.as_bytes().to_vec()),
            (PROBE_FILE.into(), PROBE.as_bytes().to_vec()),
        ],
        network: true,
        collect: vec![ANSWERS_FILE.into()],
        ..Prepared::default()
    };
    if let Some(bastion) = input.bastion()? {
        prepared.files.extend([
            input.ssh_key_file()?,
            crate::host_keys::known_hosts_file(input.state),
            (
                BASTION_FILE.into(),
                hosts_line(&bastion.address).into_bytes(),
            ),
            (JUMP_PROBE_FILE.into(), jump_probe(&bastion).into_bytes()),
        ]);
        prepared.env.push((
            "JUMP_TRY_MS".into(),
            JUMP_TRY_WITHIN.as_millis().to_string(),
        ));
        prepared.collect.push(BASTION_ANSWER_FILE.into());
        prepared
            .collect
            .push(crate::host_keys::KNOWN_HOSTS_FILE.into());
    }
    ask_the_cloud(input, &hosts, &mut prepared)?;
    Ok(prepared)
}

/// Before the first contact with servers whose keys are not pinned yet (made by Terraform, given
/// as parameters, a long-lived bastion), the step asks the tenant's cloud for their keys, from
/// their consoles, when the deployment acts with a token: `overture host-keys` runs first,
/// inside the sandbox, with the token. Without one, those keys are learned on first use.
fn ask_the_cloud(
    input: &StepInput,
    hosts: &[SshAddress],
    prepared: &mut Prepared,
) -> Result<(), String> {
    let (Some(cloud), Some(token)) = (&input.state.cloud, input.secrets.get(TOKEN_SECRET)) else {
        return Ok(());
    };
    let bastion = input.bastion()?;
    let mut unpinned: Vec<(String, u16)> = Vec::new();
    for address in bastion.iter().map(|b| &b.address).chain(hosts) {
        let known = known_host(&address.host, address.port);
        let entry = (address.host.clone(), address.port);
        if !input.state.host_keys.contains_key(&known) && !unpinned.contains(&entry) {
            unpinned.push(entry);
        }
    }
    if unpinned.is_empty() {
        return Ok(());
    }
    let lines: String = unpinned
        .iter()
        .map(|(host, port)| format!("{host}\t{port}\n"))
        .collect();
    prepared.command = format!(
        "{} {HOST_KEYS_SUBCOMMAND} --hosts {CONSOLE_HOSTS_FILE} --wait-ms {} || exit $?\n{}",
        crate::ENGINE_PROGRAM,
        FIRST_CONTACT_CONSOLE_WAIT.as_millis(),
        prepared.command
    );
    prepared.engine_program = true;
    prepared
        .env
        .push((AUTH_URL_ENV.to_owned(), cloud.auth_url.clone()));
    prepared
        .secret_env
        .push((TOKEN_ENV.to_owned(), token.clone()));
    prepared
        .files
        .push((CONSOLE_HOSTS_FILE.into(), lines.into_bytes()));
    prepared.collect.extend([
        crate::host_keys::HOST_KEYS_FILE.into(),
        HOST_KEYS_ERROR_FILE.into(),
    ]);
    Ok(())
}

/// One line of [`HOSTS_FILE`].
fn hosts_line(address: &SshAddress) -> String {
    format!("{}\t{}\t{}\n", address.address, address.host, address.port)
}

/// [`JUMP_PROBE`] with `jump` defined: ssh to the bastion, `"$@"` before its destination. It
/// replaces the shell that calls it (`exec`), so the coprocess's PID is ssh's own.
fn jump_probe(bastion: &Jump) -> String {
    format!(
        "jump() {{ exec {}; }}\n{JUMP_PROBE}",
        bastion.ssh_command(r#""$@""#)
    )
}

/// Judges the poll's exit: every host answered, the deadline passed, or the poll broke.
pub fn conclude(
    input: &StepInput,
    settings: &WaitSshSettings,
    code: i32,
    result: &SandboxResult,
) -> Verdict {
    if let Some(error) = collected(&result.collected, HOST_KEYS_ERROR_FILE) {
        // `overture host-keys` failed before any server was tried.
        let class = if code == crate::servers::BACKEND_UNREACHABLE {
            ErrorClass::BackendUnreachable
        } else {
            ErrorClass::StepFailed
        };
        return Verdict::Failure {
            class,
            headline: format!(
                "could not read the servers' SSH host keys from the cloud: {}",
                String::from_utf8_lossy(error).trim()
            ),
        };
    }
    let answers = parse_answers(collected(&result.collected, ANSWERS_FILE).unwrap_or_default());
    let hosts: Vec<String> = match input.render_hosts(&settings.hosts) {
        Ok(hosts) => hosts.into_iter().map(|t| t.address).collect(),
        Err(problem) => return Verdict::failed(problem),
    };
    let bastion = match input.bastion() {
        Ok(bastion) => bastion.map(|bastion| {
            let heard = collected(&result.collected, BASTION_ANSWER_FILE).unwrap_or_default();
            let answered = parse_answers(heard).contains_key(&bastion.address.address);
            Bastion {
                address: bastion.address.address,
                answered,
            }
        }),
        Err(problem) => return Verdict::failed(problem),
    };
    judge(&hosts, bastion.as_ref(), settings.wait, code, &answers)
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

/// The bastion as the poll left it.
#[derive(Debug)]
struct Bastion {
    address: String,
    answered: bool,
}

/// What a silent server may mean, and where to look.
const SILENT_HINT: &str = "a server that sends none may still be booting, or its boot failed. \
    Log in to it (through the provider's console if SSH is down) and check cloud-init: \
    `cloud-init status --long` and /var/log/cloud-init-output.log";

fn judge(
    hosts: &[String],
    bastion: Option<&Bastion>,
    wait: Duration,
    code: i32,
    answers: &BTreeMap<String, Answer>,
) -> Verdict {
    let silent: Vec<&str> = hosts
        .iter()
        .filter(|host| !answers.contains_key(*host))
        .map(String::as_str)
        .collect();
    let timeout = |headline: String| Verdict::Failure {
        class: ErrorClass::BootstrapTimeout,
        headline,
    };
    match (code, bastion) {
        (0, _) if silent.is_empty() => {
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
        // The runner names the key offered and the one pinned, from ssh's words in the output.
        (HOST_KEY_REFUSED, Some(bastion)) => Verdict::Failure {
            class: ErrorClass::HostKeyMismatch,
            headline: format!(
                "ssh refused the host key of the bastion {}: it is not the one pinned",
                bastion.address
            ),
        },
        (DEADLINE_PASSED, Some(bastion)) if !bastion.answered => timeout(format!(
            "no SSH banner within {} from the bastion {}, so none of the {} hosts behind it \
             could be tried: {SILENT_HINT}",
            format_duration(wait),
            bastion.address,
            hosts.len()
        )),
        (DEADLINE_PASSED, _) if !silent.is_empty() => timeout(format!(
            "no SSH banner within {} from {} ({} of {} hosts{}): {SILENT_HINT}",
            format_duration(wait),
            silent.join(", "),
            silent.len(),
            hosts.len(),
            match bastion {
                // The poll's output ends with ssh's last words for each silent host: a bastion
                // refusing the key or the connection onwards is no booting server.
                Some(bastion) => format!(
                    ", tried through the bastion {}; the output says why each try failed",
                    bastion.address
                ),
                None => String::new(),
            }
        )),
        (other, _) => Verdict::failed(format!(
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

    use std::path::PathBuf;

    use super::*;
    use crate::kind::{conclude, prepare};
    use crate::step::SSH_KEY_FILE;
    use crate::testing::{
        input, key_secrets, prepared_file, requested, sandbox_result, BASTION, SSH_KEY,
    };
    use overture_domain::kind::wait_ssh::DEFAULT_SSH_WAIT;

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
        // Without a bastion, no key and nothing of the way through one.
        let paths: Vec<_> = prepared
            .files
            .iter()
            .map(|(path, _)| path.clone())
            .collect();
        assert_eq!(
            paths,
            [HOSTS_FILE, SCRIPT_FILE, PROBE_FILE].map(PathBuf::from)
        );
        assert!(prepared.env.iter().all(|(name, _)| name != "JUMP_TRY_MS"));
        assert_eq!(prepared.collect, vec![PathBuf::from(ANSWERS_FILE)]);
    }

    /// The blueprint of [`prepare_behind`]: the host group `web` behind [`BASTION`].
    fn behind() -> overture_events::BlueprintSnapshot {
        parse(&format!(
            "name: x\nparams: {{ ip: {{}}, bastion: {{}} }}\nhosts:\n  web: ['{{{{ params.ip }}}}', '[fd00::5]:2200']\n{BASTION}steps:\n  wait: {{ run: wait-ssh, with: {{ hosts: web }} }}\n"
        ))
        .expect("valid")
        .snapshot
    }

    /// Prepares the step `wait` behind a bastion whose host renders to `bastion`.
    fn prepare_behind(bastion: &str, secrets: &SecretValues) -> Result<Prepared, String> {
        let state = requested(&behind(), &[("ip", "10.0.0.9"), ("bastion", bastion)]);
        prepare(&input(&state, "wait", secrets))
    }

    #[test]
    fn behind_a_bastion_the_poll_waits_for_it_then_tries_each_host_through_it() {
        let prepared = prepare_behind("192.0.2.1:2222", &key_secrets()).expect("prepares");
        let file = |name: &str| prepared_file(&prepared, name);
        assert_eq!(file(BASTION_FILE), "192.0.2.1:2222\t192.0.2.1\t2222\n");
        assert_eq!(
            file(HOSTS_FILE),
            "10.0.0.9\t10.0.0.9\t22\n[fd00::5]:2200\tfd00::5\t2200\n"
        );
        let jump = file(JUMP_PROBE_FILE);
        assert!(
            jump.starts_with(
                "jump() { exec 'ssh' '-i' '/work/ssh/id_ed25519' '-p' '2222' '-o' 'BatchMode=yes' '-o' 'StrictHostKeyChecking=accept-new' '-o' 'UserKnownHostsFile=/work/ssh/known_hosts' '-o' 'HashKnownHosts=no' '-o' 'UpdateHostKeys=no' '-o' 'IdentitiesOnly=yes' '-o' 'ConnectTimeout=10' \"$@\" 'jumper@192.0.2.1'; }\n"
            ),
            "{jump}"
        );
        assert!(jump.contains(r#"jump -W "[$1]:$2""#), "{jump}");
        assert_eq!(file(SSH_KEY_FILE), format!("{SSH_KEY}\n"));
        // The key is in its file, and nowhere else.
        for (path, content) in &prepared.files {
            if path.as_os_str() != SSH_KEY_FILE {
                assert!(
                    !String::from_utf8_lossy(content).contains("PRIVATE KEY"),
                    "{path:?}"
                );
            }
        }
        assert_eq!(
            prepared.command,
            format!("exec /usr/bin/bash {SCRIPT_FILE}")
        );
        assert!(prepared
            .env
            .iter()
            .all(|(_, value)| !value.contains("PRIVATE KEY")));
        assert!(prepared
            .env
            .contains(&("JUMP_TRY_MS".to_owned(), "10000".to_owned())));
        assert!(prepared
            .collect
            .contains(&PathBuf::from(BASTION_ANSWER_FILE)));
    }

    #[test]
    fn behind_a_bastion_it_needs_an_address_and_the_key() {
        let problem = prepare_behind("bastion:22:22", &key_secrets())
            .err()
            .expect("refused");
        assert!(
            problem.starts_with(
                "the bastion's host `{{ params.bastion }}`: `bastion:22:22` is not an address"
            ),
            "{problem}"
        );
        let problem = prepare_behind("192.0.2.1", &SecretValues::new())
            .err()
            .expect("refused");
        assert!(problem.contains("no SSH key"), "{problem}");
    }

    #[test]
    fn a_silent_bastion_is_a_bootstrap_timeout_naming_it() {
        let state = requested(&behind(), &[("ip", "10.0.0.9"), ("bastion", "192.0.2.1")]);
        let secrets = key_secrets();
        let input = input(&state, "wait", &secrets);
        let verdict = conclude(
            &input,
            DEADLINE_PASSED,
            &sandbox_result(DEADLINE_PASSED, "", &[]),
        );
        let Verdict::Failure { class, headline } = verdict else {
            panic!("a failure: {verdict:?}");
        };
        assert_eq!(class, ErrorClass::BootstrapTimeout);
        assert!(
            headline.starts_with("no SSH banner within 2m from the bastion 192.0.2.1, so none of the 2 hosts behind it could be tried: "),
            "{headline}"
        );
        assert!(headline.contains("cloud-init status --long"), "{headline}");

        // The bastion answered; one host did not.
        let verdict = conclude(
            &input,
            DEADLINE_PASSED,
            &sandbox_result(
                DEADLINE_PASSED,
                "",
                &[
                    (BASTION_ANSWER_FILE, "192.0.2.1\t300\tSSH-2.0-OpenSSH_9.2\n"),
                    (ANSWERS_FILE, "10.0.0.9\t900\tSSH-2.0-OpenSSH_9.2\n"),
                ],
            ),
        );
        let Verdict::Failure { class, headline } = verdict else {
            panic!("a failure: {verdict:?}");
        };
        assert_eq!(class, ErrorClass::BootstrapTimeout);
        assert!(
            headline.starts_with("no SSH banner within 2m from [fd00::5]:2200 (1 of 2 hosts, tried through the bastion 192.0.2.1; the output says why each try failed): "),
            "{headline}"
        );

        // Every host answered: the bastion's own banner is not an output.
        let verdict = conclude(
            &input,
            0,
            &sandbox_result(
                0,
                "",
                &[
                    (BASTION_ANSWER_FILE, "192.0.2.1\t300\tSSH-2.0-OpenSSH_9.2\n"),
                    (
                        ANSWERS_FILE,
                        "10.0.0.9\t900\tSSH-2.0-a\n[fd00::5]:2200\t950\tSSH-2.0-b\n",
                    ),
                ],
            ),
        );
        assert_eq!(
            verdict,
            Verdict::Success(
                [
                    (
                        "banners".to_owned(),
                        r#"{"10.0.0.9":"SSH-2.0-a","[fd00::5]:2200":"SSH-2.0-b"}"#.to_owned()
                    ),
                    ("waited_ms".to_owned(), "950".to_owned()),
                ]
                .into()
            )
        );
    }

    /// The poll, run for real by bash, with a bastion whose ssh refuses its host key: it stops
    /// at the first try, with ssh's words in its output, instead of waiting out the deadline.
    #[test]
    fn a_refused_bastion_key_stops_the_wait_at_once() {
        let dir = tempfile::tempdir().expect("a folder");
        let refusal = "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n\
Host key for 192.0.2.1 has changed and you have requested strict checking.\r\n\
Host key verification failed.\r\n";
        let jump = format!(
            "printf '%s' '{refusal}' > jump.err\nexit 1\n",
            refusal = refusal.replace("\r\n", "\n")
        );
        for (name, text) in [
            (SCRIPT_FILE, POLL.to_owned()),
            (HOSTS_FILE, "10.0.0.9\t10.0.0.9\t22\n".to_owned()),
            (BASTION_FILE, "192.0.2.1\t192.0.2.1\t22\n".to_owned()),
            // The bastion answers with a banner; the way through it is refused.
            (PROBE_FILE, "echo SSH-2.0-OpenSSH_9.2\n".to_owned()),
            (JUMP_PROBE_FILE, jump),
        ] {
            std::fs::write(dir.path().join(name), text).expect("a file");
        }
        let output = std::process::Command::new("bash")
            .arg(SCRIPT_FILE)
            .current_dir(dir.path())
            .envs([
                ("WAIT_MS", "600000"),
                ("WAIT_TEXT", "10m"),
                ("TRY_MS", "5000"),
                ("JUMP_TRY_MS", "5000"),
                ("PAUSE_MS", "1000"),
                ("DEADLINE_CODE", "75"),
                ("MISMATCH_CODE", "76"),
            ])
            .output()
            .expect("bash runs");
        assert_eq!(output.status.code(), Some(HOST_KEY_REFUSED), "{output:?}");
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(
            printed.contains("Host key for 192.0.2.1 has changed"),
            "{printed}"
        );

        let state = requested(&behind(), &[("ip", "10.0.0.9"), ("bastion", "192.0.2.1")]);
        let secrets = key_secrets();
        let verdict = conclude(
            &input(&state, "wait", &secrets),
            HOST_KEY_REFUSED,
            &sandbox_result(HOST_KEY_REFUSED, &printed, &[]),
        );
        assert!(
            matches!(&verdict, Verdict::Failure { class: ErrorClass::HostKeyMismatch, headline } if headline.contains("the bastion 192.0.2.1")),
            "{verdict:?}"
        );
    }

    /// Behind a bastion, of a deployment acting with a cloud token, with 10.0.0.9 pinned.
    #[test]
    fn servers_first_contacted_have_their_keys_asked_of_the_cloud_with_the_token() {
        use overture_domain::secret::SecretString;
        use overture_domain::Deployment;
        use overture_events::{CloudAccount, DeploymentEvent, HostKeySource};
        use secrecy::ExposeSecret as _;

        let mut event = crate::testing::requested_event(
            &behind(),
            &[("ip", "10.0.0.9"), ("bastion", "192.0.2.1")],
        );
        if let DeploymentEvent::DeploymentRequested { cloud, .. } = &mut event {
            *cloud = Some(CloudAccount {
                auth_url: "http://127.0.0.1:5000/identity/v3".into(),
                project_id: "p".into(),
                project: "acme".into(),
                domain: "Default".into(),
                user: "acme".into(),
                endpoints: vec![],
            });
        }
        let key = overture_domain::host_keys::key(
            "ssh-ed25519",
            "AAAAC3NzaC1lZDI1NTE5AAAAIAfBWyWT1kqcBW4flZkhx+YZ0qby94sbtGBA2zMPVSew",
        )
        .expect("a key");
        let state = Deployment::replay([
            event,
            DeploymentEvent::HostKeysPinned {
                server: "web-1".into(),
                host: "10.0.0.9".into(),
                learned: HostKeySource::Console,
                keys: vec![key],
            },
        ]);
        let mut secrets = key_secrets();
        secrets.insert(TOKEN_SECRET.into(), SecretString::from("tok-123"));
        let prepared = prepare(&input(&state, "wait", &secrets)).expect("prepares");
        assert_eq!(
            prepared_file(&prepared, CONSOLE_HOSTS_FILE),
            "192.0.2.1\t22\nfd00::5\t2200\n",
            "the bastion and the host not pinned yet"
        );
        assert!(
            prepared.command.starts_with(&format!(
                "{} host-keys --hosts console-hosts.tsv --wait-ms 20000 || exit $?\n",
                crate::ENGINE_PROGRAM
            )),
            "{}",
            prepared.command
        );
        assert!(prepared.engine_program);
        assert!(prepared
            .secret_env
            .iter()
            .any(|(name, value)| name == TOKEN_ENV && value.expose_secret() == "tok-123"));
        assert!(prepared
            .env
            .iter()
            .all(|(_, value)| !value.contains("tok-123")));
        assert!(prepared
            .collect
            .contains(&PathBuf::from(crate::host_keys::HOST_KEYS_FILE)));
        // The pinned key is in the known hosts the poll's ssh reads.
        assert!(prepared_file(&prepared, crate::host_keys::KNOWN_HOSTS_FILE)
            .starts_with("10.0.0.9 ssh-ed25519 "));

        // A failure to ask is the step's, as the cloud's answer says.
        let verdict = conclude(
            &input(&state, "wait", &secrets),
            75,
            &sandbox_result(
                75,
                "",
                &[(HOST_KEYS_ERROR_FILE, "the cloud API is unreachable: 503")],
            ),
        );
        assert_eq!(
            verdict,
            Verdict::Failure {
                class: ErrorClass::BackendUnreachable,
                headline: "could not read the servers' SSH host keys from the cloud: the cloud API is unreachable: 503".into(),
            }
        );

        // Without a token nothing is asked: those keys are learned on first use.
        let prepared = prepare(&input(&state, "wait", &key_secrets())).expect("prepares");
        assert!(!prepared.engine_program);
        assert!(prepared.command.starts_with("exec /usr/bin/bash"));
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
            None,
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
            None,
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
            let verdict = judge(&hosts(&["h:22"]), None, DEFAULT_SSH_WAIT, code, &none);
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
        let verdict = judge(&hosts(&["h:22"]), None, DEFAULT_SSH_WAIT, 0, &none);
        assert!(matches!(
            verdict,
            Verdict::Failure {
                class: ErrorClass::StepFailed,
                ..
            }
        ));
    }
}
