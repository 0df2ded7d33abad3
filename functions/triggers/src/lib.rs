//! The triggers function: events in, deployments out, every decision recorded.
//!
//! The rules are the domain's ([`overture_domain::trigger`]); this crate acts on them.
//! [`dispatch`] evaluates every trigger of a trigger file for one event. A match claims
//! (source, event id, trigger) in the [`TriggerLedger`] before it submits the deployment, under
//! an id derived from the claim ([`deployment_for`]), so an event delivered again starts nothing
//! new however many receivers get it at once: recording under the id is idempotent. A claim whose
//! deployment could not be started for a reason that may pass is released; one whose delivery
//! died before recording anything is found by the next delivery, which sees nothing recorded
//! under the id and deploys. Every decision is recorded: deployed, duplicate, not matched,
//! refused.
//!
//! - [`bundle`]: a trigger file with the blueprints it deploys, as one document: what
//!   `overture --backend aws triggers publish` stores for the function to read.
//! - [`queue`]: the function's trigger on AWS, a batch of SQS messages, one event each.
//! - [`ends`]: a deployment's end published as an event (on AWS, read from the events table's
//!   stream), so that triggers chain.
//! - [`contract`] (feature `contract`): the suite every [`TriggerLedger`] adapter passes.
//!
//! The embedded engine (`overture trigger send`, `overture serve --triggers`) calls [`dispatch`]
//! with the same ports over its data directory.

pub mod bundle;
#[cfg(any(test, feature = "contract"))]
pub mod contract;
pub mod ends;
pub mod queue;

use std::collections::BTreeMap;

use async_trait::async_trait;
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::text::escaped;
use overture_domain::trigger::{Decision, IncomingEvent, Trigger, TriggerFile};
use overture_events::{DeploymentId, TriggeredBy};
use overture_kit::Clock;
use overture_submit::{submit_as, Submission, SubmitError, SubmitPorts, Submitted};
use serde::{Deserialize, Serialize};

/// The reason recorded with a duplicate delivery.
pub const DUPLICATE_REASON: &str = "this event was already handled by this trigger";

/// What a trigger decided about an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It started a deployment.
    Deployed,
    /// The event was handled by this trigger before.
    Duplicate,
    /// The event is not for this trigger.
    NotMatched,
    /// The event is for this trigger, but it must not deploy.
    Refused,
}

impl Verdict {
    /// The verdict as recorded and shown: `deployed`, `duplicate`, `not-matched`, `refused`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Verdict::Deployed => "deployed",
            Verdict::Duplicate => "duplicate",
            Verdict::NotMatched => "not-matched",
            Verdict::Refused => "refused",
        }
    }

    /// Reads a recorded verdict back.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Verdict::Deployed,
            Verdict::Duplicate,
            Verdict::NotMatched,
            Verdict::Refused,
        ]
        .into_iter()
        .find(|verdict| verdict.as_str() == text)
    }
}

/// One decision a trigger took about an event, as `overture triggers log` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerDecision {
    /// When, RFC 3339 with milliseconds.
    pub at: String,
    /// The event's source.
    pub source: String,
    /// The event's id.
    pub event_id: String,
    /// The trigger's name.
    pub trigger: String,
    /// What it decided.
    pub decision: Verdict,
    /// The deployment it started, when it started one.
    pub deployment: Option<String>,
    /// Why: the condition that failed, the refusal, or what was deployed.
    pub reason: String,
}

/// An event's claim by one trigger: the key that makes a delivery count once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The event's source.
    pub source: &'a str,
    /// The event's id.
    pub event_id: &'a str,
    /// The trigger's name.
    pub trigger: &'a str,
}

/// The id of the deployment a claim starts: the same for every delivery of the event, so that
/// recording it is idempotent and a delivery finds what an earlier one recorded.
///
/// A name-based UUID (version 8, the SHA-256 of the tenant, source, event id and trigger, each
/// length-prefixed so that no two tuples share a name), as RFC 9562 describes it.
pub fn deployment_for(tenant: &str, claim: Claim<'_>) -> DeploymentId {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"overture trigger deployment\0");
    for part in [tenant, claim.source, claim.event_id, claim.trigger] {
        hash.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut bytes = [0; 16];
    bytes.copy_from_slice(&digest[..16]);
    DeploymentId::from_uuid(uuid::Builder::from_custom_bytes(bytes).into_uuid())
}

/// The ledger of claims and decisions.
#[async_trait]
pub trait TriggerLedger: Send + Sync {
    /// Claims the (event, trigger) pair at `at`: `true` for the one caller that gets it, `false`
    /// for every other. It records no decision: the caller decides whether a later delivery is a
    /// duplicate, by what is recorded under the claim's deployment id ([`deployment_for`]).
    async fn claim(&self, claim: Claim<'_>, at: &str) -> Result<bool, LedgerError>;
    /// Gives a claim up, so that the event's next delivery can claim it again.
    async fn release(&self, claim: Claim<'_>) -> Result<(), LedgerError>;
    /// Records a decision.
    async fn record(&self, decision: &TriggerDecision) -> Result<(), LedgerError>;
    /// Every decision, oldest first.
    async fn decisions(&self) -> Result<Vec<TriggerDecision>, LedgerError>;
}

/// The ledger failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The store could not be reached or failed on its side: trying again later may help.
    #[error("the trigger ledger failed, for now: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store refused the call or holds something unreadable: trying again will not help.
    #[error("the trigger ledger failed: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LedgerError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, LedgerError::Unavailable(_))
    }
}

/// A blueprint a trigger deploys, read and ready to submit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlueprintSource {
    /// Where it came from, for people (a file name).
    pub source: String,
    /// Its YAML text.
    pub text: String,
    /// The files its steps take, by path relative to its folder.
    pub files: BTreeMap<String, String>,
}

/// A trigger's blueprint cannot be had: the trigger is refused, with this as the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BlueprintUnavailable(pub String);

/// Finds the blueprint a trigger's `deploy` names.
#[async_trait]
pub trait FindBlueprints: Send + Sync {
    /// The blueprint `deploy` names, as written in the trigger file.
    async fn blueprint(&self, deploy: &str) -> Result<BlueprintSource, BlueprintUnavailable>;
}

/// Where a trigger's secrets are read: a trigger names, for each secret, a variable of the
/// receiving process's environment.
pub trait SecretVariables: Send + Sync {
    /// The value of the variable, if it is set.
    fn value(&self, variable: &str) -> Option<SecretString>;
}

/// The receiving process's own environment.
pub struct ProcessEnvironment;

impl SecretVariables for ProcessEnvironment {
    fn value(&self, variable: &str) -> Option<SecretString> {
        std::env::var(variable).ok().map(SecretString::from)
    }
}

/// The ports [`dispatch`] uses.
pub struct TriggerPorts<'a> {
    /// Claims and decisions.
    pub ledger: &'a dyn TriggerLedger,
    /// The blueprints the triggers deploy.
    pub blueprints: &'a dyn FindBlueprints,
    /// The values of the triggers' secrets.
    pub secrets: &'a dyn SecretVariables,
    /// Where a started deployment is sealed and recorded.
    pub submit: SubmitPorts<'a>,
    /// Stamps the decisions.
    pub clock: &'a dyn Clock,
}

/// A deployment a trigger started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// Its id.
    pub id: DeploymentId,
    /// The trigger that started it.
    pub trigger: String,
    /// The depth of the event that started it.
    pub depth: u32,
}

/// What [`dispatch`] did with one event.
#[derive(Debug, Default)]
pub struct Dispatched {
    /// The deployments it started.
    pub started: Vec<Started>,
    /// Every decision it took, as recorded.
    pub decisions: Vec<TriggerDecision>,
}

/// Why an event was not wholly dispatched. The decisions taken before it are recorded, and a
/// claim whose deployment was not started is released, so handling the event again is safe.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A matching trigger's deployment could not be recorded.
    #[error("trigger {trigger}: could not start its deployment: {error}")]
    Start {
        /// The trigger.
        trigger: String,
        /// What failed.
        #[source]
        error: SubmitError,
    },
}

impl DispatchError {
    /// Whether handling the event again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            DispatchError::Ledger(error) => error.is_retryable(),
            DispatchError::Start { error, .. } => submit_retryable(error),
        }
    }
}

/// Whether submitting again later may succeed.
fn submit_retryable(error: &SubmitError) -> bool {
    match error {
        SubmitError::Seal(error) => error.is_retryable(),
        SubmitError::Payload(error) => error.is_retryable(),
        SubmitError::Log(error) => error.is_retryable(),
        SubmitError::Invalid(_) | SubmitError::Refused(_) | SubmitError::Key(_) => false,
    }
}

/// Evaluates every trigger of `file` for the event and starts each deployment they decide on,
/// recording each decision. With `caller`, the tenant the event was delivered for, a trigger
/// that would deploy into another tenant is refused.
#[tracing::instrument(name = "triggers", level = "info", skip_all, fields(event = %event.id, source = %event.source, event_type = %event.event_type, depth = event.depth))]
pub async fn dispatch(
    file: &TriggerFile,
    event: &IncomingEvent,
    caller: Option<&str>,
    ports: &TriggerPorts<'_>,
) -> Result<Dispatched, DispatchError> {
    let mut done = Dispatched::default();
    for trigger in &file.triggers {
        let at = ports
            .clock
            .now()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let decided =
            |decision: Verdict, deployment: Option<String>, reason: String| TriggerDecision {
                at: at.clone(),
                source: event.source.clone(),
                event_id: event.id.clone(),
                trigger: trigger.name.clone(),
                decision,
                deployment,
                reason,
            };
        let params = match trigger.evaluate(event) {
            Decision::NotMatched(why) => {
                keep(&mut done, decided(Verdict::NotMatched, None, why), ports).await?;
                continue;
            }
            Decision::Refused(why) => {
                keep(&mut done, decided(Verdict::Refused, None, why), ports).await?;
                continue;
            }
            Decision::Deploy { params } => params,
        };
        if let Some(caller) = caller.filter(|caller| *caller != trigger.tenant) {
            let why = format!(
                "tenant `{}` is not the caller's tenant `{caller}`; a trigger deploys only into \
                 its caller's tenant",
                trigger.tenant
            );
            keep(&mut done, decided(Verdict::Refused, None, why), ports).await?;
            continue;
        }
        let claim = Claim {
            source: &event.source,
            event_id: &event.id,
            trigger: &trigger.name,
        };
        let id = deployment_for(&trigger.tenant, claim);
        let first = ports.ledger.claim(claim, &at).await?;
        if !first && recorded(id, &trigger.name, ports).await? {
            let duplicate = decided(
                Verdict::Duplicate,
                Some(id.to_string()),
                DUPLICATE_REASON.into(),
            );
            keep(&mut done, duplicate, ports).await?;
            continue;
        }
        // Claimed before and nothing recorded under the id: the delivery that claimed it died
        // before recording, or is recording now. Recording under the derived id is idempotent,
        // so deploying here deploys once either way.
        match start(trigger, params, event, id, ports).await {
            Ok((Submitted::Recorded, source)) => {
                let mut why = format!("{source} for tenant {}", trigger.tenant);
                if !first {
                    why.push_str(TAKEN_OVER);
                }
                let deployed = decided(Verdict::Deployed, Some(id.to_string()), why);
                keep(&mut done, deployed, ports).await?;
                done.started.push(Started {
                    id,
                    trigger: trigger.name.clone(),
                    depth: event.depth,
                });
            }
            Ok((Submitted::AlreadyRecorded, _)) => {
                let duplicate = decided(
                    Verdict::Duplicate,
                    Some(id.to_string()),
                    DUPLICATE_REASON.into(),
                );
                keep(&mut done, duplicate, ports).await?;
            }
            Err(Unstarted::Refused(why)) => {
                keep(&mut done, decided(Verdict::Refused, None, why), ports).await?;
            }
            Err(Unstarted::Failed(error)) => {
                // Nothing was recorded for the deployment: the event's next delivery may start it.
                ports.ledger.release(claim).await?;
                return Err(DispatchError::Start {
                    trigger: trigger.name.clone(),
                    error,
                });
            }
        }
    }
    Ok(done)
}

/// Said of a deployment recorded by a delivery that found the event claimed.
const TAKEN_OVER: &str =
    " (an earlier delivery claimed the event and recorded nothing: deployed on this one)";

/// Whether a deployment is recorded under `id`.
async fn recorded(
    id: DeploymentId,
    trigger: &str,
    ports: &TriggerPorts<'_>,
) -> Result<bool, DispatchError> {
    let loaded = ports
        .submit
        .log
        .load(id)
        .await
        .map_err(|error| DispatchError::Start {
            trigger: trigger.to_owned(),
            error: SubmitError::Log(error),
        })?;
    Ok(loaded.state.blueprint.is_some())
}

async fn keep(
    done: &mut Dispatched,
    decision: TriggerDecision,
    ports: &TriggerPorts<'_>,
) -> Result<(), LedgerError> {
    ports.ledger.record(&decision).await?;
    done.decisions.push(decision);
    Ok(())
}

/// Why a matched trigger's deployment was not started.
enum Unstarted {
    /// The trigger cannot deploy (its blueprint, parameters or secrets are wrong): recorded.
    Refused(String),
    /// Recording the deployment failed.
    Failed(SubmitError),
}

/// Submits the trigger's deployment as `overture deploy` would, under the id derived from the
/// claim; returns whether it recorded it and the blueprint's source.
async fn start(
    trigger: &Trigger,
    params: BTreeMap<String, String>,
    event: &IncomingEvent,
    id: DeploymentId,
    ports: &TriggerPorts<'_>,
) -> Result<(Submitted, String), Unstarted> {
    let blueprint = ports
        .blueprints
        .blueprint(&trigger.deploy)
        .await
        .map_err(|unavailable| Unstarted::Refused(unavailable.0))?;
    let secrets = trigger_secrets(trigger, ports.secrets).map_err(Unstarted::Refused)?;
    let source = escaped(&blueprint.source).into_owned();
    let submission = Submission {
        source: blueprint.source,
        text: blueprint.text,
        tenant: trigger.tenant.clone(),
        // The event is what asked; `triggered_by` names it exactly.
        requested_by: format!("event:{}/{}", event.source, event.id),
        trigger: format!("trigger:{}", trigger.name),
        params,
        secrets,
        files: blueprint.files,
        cloud: None,
        triggered_by: Some(TriggeredBy {
            trigger: trigger.name.clone(),
            source: event.source.clone(),
            event_id: event.id.clone(),
            depth: event.depth,
        }),
        name: None,
    };
    match submit_as(id, submission, &ports.submit).await {
        Ok(submitted) => Ok((submitted, source)),
        Err(SubmitError::Invalid(problems)) => Err(Unstarted::Refused(
            problems
                .0
                .iter()
                .map(|problem| format!("{source}: {problem}"))
                .collect::<Vec<_>>()
                .join("\n"),
        )),
        Err(error) if submit_retryable(&error) => Err(Unstarted::Failed(error)),
        Err(error) => Err(Unstarted::Refused(error.to_string())),
    }
}

/// The trigger's secrets, read from the variables it names.
fn trigger_secrets(
    trigger: &Trigger,
    variables: &dyn SecretVariables,
) -> Result<SecretValues, String> {
    let mut values = SecretValues::new();
    for (name, variable) in &trigger.secrets {
        let value = variables.value(variable).ok_or_else(|| {
            format!(
                "secrets.{name}: the environment variable {variable} is not set where the \
                 event is received; set it there"
            )
        })?;
        values.insert(name.clone(), value);
    }
    Ok(values)
}

#[cfg(test)]
mod tests;
