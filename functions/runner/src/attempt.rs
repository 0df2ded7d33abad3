//! One attempt in its sandbox, from its material to its outcome: the secrets, the kept state and
//! the files it takes; the bastion and the kind's command; the egress it may use; the run,
//! watched; what it left; and the judgement of its exit.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use overture_domain::egress::Destination;
use overture_domain::kind::Kind;
use overture_domain::secret::{Masker, SecretValues};
use overture_domain::{DeploymentCommand, DeploymentState};
use overture_events::{DeploymentId, ErrorClass, StepSpec};
use overture_kit::payload::StorePayloads;
use overture_kit::{execute, Cause};

use crate::record::Outcome;
use crate::step::{self, StepInput, Verdict};
use crate::{
    bastion, files, host_keys, kind, lease, logs, network, service_check, KeepAlive, RunError,
    RunnerError, RunnerPorts, SandboxExit, SandboxResult, ACTOR, OUTPUT_LIMIT,
};

/// How many of the last output lines a failure's message carries.
const MESSAGE_LINES: usize = 20;

/// Runs an attempt of a sandboxed kind: prepare, run with a masked log, conclude.
pub(crate) async fn run_in_sandbox(
    state: &DeploymentState,
    spec: &StepSpec,
    deployment: DeploymentId,
    attempt: u32,
    sandbox_id: String,
    ports: &RunnerPorts<'_>,
    lease: &dyn KeepAlive,
) -> Result<Outcome, RunnerError> {
    let secrets = open_secrets(state, deployment, ports).await?;
    let masker = Masker::new(secrets.values());
    let kept_file = Kind::of(spec).and_then(kind::kept_file);
    let kept = match kept_file {
        Some(_) => {
            ports
                .kept
                .load(deployment, &state.tenant, &spec.name)
                .await?
        }
        None => None,
    };
    let files = match fetch_files(state, spec, ports.payloads).await? {
        Ok(files) => files,
        Err(problem) => return Ok(Outcome::not_run(masker.mask(&problem))),
    };
    let input = StepInput {
        state,
        spec,
        secrets: &secrets,
        deployment,
        attempt,
        kept,
        files: &files,
    };
    let bastion_access = match bastion::open(&input, ports, &masker).await? {
        Ok(access) => access,
        Err(failure) => return Ok(failure),
    };
    let prepared = match kind::prepare(&input) {
        Ok(prepared) => prepared,
        Err(problem) => return Ok(Outcome::not_run(masker.mask(&problem))),
    };
    let name = logs::LogName::Attempt(attempt);
    let mut log = ports.logs.create(deployment, &spec.name, name)?;
    let network_policy = match prepared.network {
        true => Some(network::policy(&input, ports.loopback).await),
        false => None,
    };
    if let Some(allowed) = &network_policy {
        if let Some(refused) = apply_egress(&input, allowed, &mut log, ports, &masker).await? {
            return Ok(refused);
        }
    }
    let mut job = step::sandbox_job(sandbox_id, prepared, &input, name, log, &masker);
    job.network_policy = network_policy.clone();

    let lost_job = AtomicBool::new(false);
    let attempt_lease = state.steps.get(&spec.name).and_then(|s| s.lease_until);
    let watch = lease::watch_for_abandonment(
        ports.log,
        lease,
        attempt_lease,
        deployment,
        &spec.name,
        attempt,
        &lost_job,
    );
    let result = match ports.sandbox.run(job, Box::pin(watch)).await {
        Ok(result) => result,
        // Nothing ran, and running it again would be refused again: a failed attempt, which
        // the retry policy sees as any other.
        Err(RunError::Unrunnable(refused)) => {
            return Ok(Outcome::not_run(masker.mask(&refused.to_string())))
        }
        Err(RunError::Failed(error)) => return Err(error.into()),
    };
    keep_what_it_left(&input, kept_file, &result, ports).await?;

    let outcome = judge(&input, &result, lost_job.load(Ordering::Relaxed), &masker);
    let outcome = match (outcome, &spec.provides) {
        (success @ Outcome::Success { .. }, Some(provision)) => {
            service_check::check_service(success, &input, provision, network_policy, ports, &masker)
                .await?
        }
        (outcome, _) => outcome,
    };
    Ok(match bastion_access {
        Some(access) => bastion::blame_a_lost_one(outcome, state, deployment, &access, ports).await,
        None => outcome,
    })
}

/// The deployment's secret values, opened from its seal (none without one).
async fn open_secrets(
    state: &DeploymentState,
    deployment: DeploymentId,
    ports: &RunnerPorts<'_>,
) -> Result<SecretValues, RunnerError> {
    Ok(match &state.seal {
        Some(seal) => ports.seals.open(deployment, &state.tenant, seal).await?,
        None => SecretValues::new(),
    })
}

/// Records the attempt's network policy, and refuses the attempt (as `egress-refused`, said in
/// its log too) when its target is outside it. Checked before the sandbox runs: the firewall
/// would refuse the connection, and the step would read that as an unreachable backend and be
/// retried.
async fn apply_egress(
    input: &StepInput<'_>,
    allowed: &[Destination],
    log: &mut impl Write,
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<Option<Outcome>, RunnerError> {
    record_network_policy(input, allowed, ports, masker).await?;
    let Some(refused) = network::refused_target(input, allowed, ports.loopback).await else {
        return Ok(None);
    };
    let message = masker.mask(&format!("egress refused: {refused}"));
    // The attempt's log says why too; a log that cannot be written loses only that.
    let _ = writeln!(log, "{message}");
    Ok(Some(Outcome::Failure {
        class: ErrorClass::EgressRefused,
        exit_code: None,
        message,
        duration: Duration::ZERO,
    }))
}

/// Keeps what the sandbox left for later: the kind's kept file (a Terraform state) and the host
/// keys it learned, recorded before the outcome so the steps that follow connect with them.
async fn keep_what_it_left(
    input: &StepInput<'_>,
    kept_file: Option<&str>,
    result: &SandboxResult,
    ports: &RunnerPorts<'_>,
) -> Result<(), RunnerError> {
    let (state, deployment) = (input.state, input.deployment);
    if let Some(kept) = kept_file.and_then(|file| step::collected(&result.collected, file)) {
        ports
            .kept
            .save(deployment, &state.tenant, &input.spec.name, kept)
            .await?;
    }
    let learned = host_keys::learned(state, &result.collected);
    if !learned.is_empty() {
        let cause = Cause::new(ACTOR, deployment, uuid::Uuid::now_v7());
        let command = DeploymentCommand::PinHostKeys(learned);
        // Refused only when the deployment ended meanwhile: nothing will connect any more.
        let _ = execute(ports.log, deployment, "", &cause, |_| command.clone()).await?;
    }
    Ok(())
}

/// What the sandbox's end makes of the attempt: the kind judges an exit code; a signal, the
/// timeout or a limit fail it; a cancellation is an abandonment, or a lost job.
fn judge(
    input: &StepInput<'_>,
    result: &SandboxResult,
    lost_job: bool,
    masker: &Masker,
) -> Outcome {
    let output = shown_output(masker, &result.output);
    let failure = |class, exit_code, headline: String| Outcome::Failure {
        class,
        exit_code,
        message: with_tail(masker.mask(&headline), &output),
        duration: result.duration,
    };
    match result.exit {
        SandboxExit::Code(code) => match kind::conclude(input, code, result) {
            Verdict::Success(outputs) => match step::recordable(outputs, input, masker) {
                Ok(outputs) => Outcome::Success {
                    outputs,
                    duration: result.duration,
                    registrations: Vec::new(),
                },
                Err(headline) => failure(ErrorClass::StepFailed, Some(code), headline),
            },
            Verdict::Failure { class, headline } => match refused_host_key(input.state, result) {
                Some(Verdict::Failure { class, headline }) => failure(class, Some(code), headline),
                _ => failure(class, Some(code), headline),
            },
        },
        SandboxExit::Signal(signal) => failure(
            ErrorClass::StepFailed,
            None,
            format!("killed by signal {signal}"),
        ),
        SandboxExit::TimedOut => failure(
            ErrorClass::StepFailed,
            None,
            format!(
                "timed out after {}",
                overture_domain::duration::format_duration(Duration::from_millis(
                    input.spec.timeout_ms
                ))
            ),
        ),
        SandboxExit::Cancelled if lost_job => Outcome::LostJob,
        SandboxExit::Cancelled => Outcome::Abandoned,
        SandboxExit::LimitReached(limit) => {
            failure(ErrorClass::StepFailed, None, limit.to_string())
        }
    }
}

/// The files the step takes; `Ok(Err(problem))` when one cannot be had as recorded (asking
/// again will not change that), `Err` when the store was unavailable.
pub(crate) async fn fetch_files(
    state: &DeploymentState,
    spec: &StepSpec,
    payloads: &dyn StorePayloads,
) -> Result<Result<BTreeMap<String, String>, String>, RunnerError> {
    let Some(blueprint) = &state.blueprint else {
        return Ok(Ok(Default::default()));
    };
    match files::step_files(blueprint, spec, payloads).await {
        Ok(files) => Ok(Ok(files)),
        Err(error) if error.is_retryable() => Err(error.into()),
        Err(error) => Ok(Err(error.to_string())),
    }
}

/// The `host-key-mismatch` failure a failed attempt's output or collected logs show, if any:
/// whatever the kind made of the exit, a refused host key is what the user must hear about.
fn refused_host_key(state: &DeploymentState, result: &SandboxResult) -> Option<Verdict> {
    let mut text = String::from_utf8_lossy(&result.output).into_owned();
    for (_, content) in &result.collected {
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(content));
    }
    host_keys::mismatch(state, &text)
}

/// Records the attempt's network policy in the deployment's history before its sandbox starts
/// (`StepNetworkPolicyApplied`). An attempt no longer running records nothing; its sandbox is
/// cancelled as soon as it starts.
async fn record_network_policy(
    input: &StepInput<'_>,
    allowed: &[Destination],
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<(), RunnerError> {
    let cause = Cause::new(ACTOR, input.deployment, uuid::Uuid::now_v7());
    let command = DeploymentCommand::RecordNetworkPolicy {
        step: input.spec.name.clone(),
        attempt: input.attempt,
        // A host may come from a secret; it is then recorded as `***`.
        allowed: allowed
            .iter()
            .map(|destination| masker.mask(&destination.to_string()))
            .collect(),
    };
    // Refused only when the attempt is over, which the sandbox's watch then sees.
    let _ = execute(ports.log, input.deployment, "", &cause, |_| command.clone()).await?;
    Ok(())
}

/// A sandbox's output tail as a message may show it: masked, and, when its start may have been
/// cut away, without the first bytes, which could be the end of a secret whose start was cut.
pub(crate) fn shown_output(masker: &Masker, output: &[u8]) -> String {
    if output.len() >= OUTPUT_LIMIT {
        masker.mask_tail(output)
    } else {
        masker.mask_bytes(output)
    }
}

/// A failure's headline with the last lines of the output.
pub(crate) fn with_tail(headline: String, output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let tail = &lines[lines.len().saturating_sub(MESSAGE_LINES)..];
    if tail.is_empty() {
        headline
    } else {
        format!("{headline}; last output:\n{}", tail.join("\n"))
    }
}
