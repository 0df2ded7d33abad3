//! The triggers function's own tests, on in-memory fakes of its ports: given a trigger file and
//! what the ledger holds, when an event arrives, then these decisions and deployments.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::testing::t;
use overture_domain::trigger::{parse, IncomingEvent, TriggerFile};
use overture_events::{DeploymentEvent, DeploymentId};
use overture_kit::memory::{FixedClock, MemoryLog};
use overture_kit::payload::MemoryPayloads;
use overture_kit::{DeploymentLog, ReadStream};
use overture_submit::{SealError, SealSecrets, SubmitPorts};
use secrecy::ExposeSecret;

use super::*;
use crate::bundle::{BundleError, LoadBundle, TriggerBundle};
use crate::contract::ledger_keeps_its_contract;
use crate::ends::{end_of, PublishError, PublishEvents};
use crate::queue::{on_event_messages, QueuePorts, TENANT_ATTRIBUTE};

/// Claims and decisions in memory.
#[derive(Default)]
struct MemoryLedger {
    claims: Mutex<HashSet<(String, String, String)>>,
    decisions: Mutex<Vec<TriggerDecision>>,
    /// When set, every call fails as an unavailable store would.
    down: bool,
    /// When set, a claim cannot be given back: as when the process dies holding it.
    keeps_claims: bool,
}

fn key(claim: Claim<'_>) -> (String, String, String) {
    (
        claim.source.into(),
        claim.event_id.into(),
        claim.trigger.into(),
    )
}

impl MemoryLedger {
    fn check(&self) -> Result<(), LedgerError> {
        if self.down {
            return Err(LedgerError::Unavailable("the ledger is down".into()));
        }
        Ok(())
    }
}

#[async_trait]
impl TriggerLedger for MemoryLedger {
    async fn claim(&self, claim: Claim<'_>, _: &str) -> Result<bool, LedgerError> {
        self.check()?;
        let won = self
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key(claim));
        Ok(won)
    }

    async fn release(&self, claim: Claim<'_>) -> Result<(), LedgerError> {
        self.check()?;
        if self.keeps_claims {
            return Err(LedgerError::Unavailable("the process died".into()));
        }
        self.claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key(claim));
        Ok(())
    }

    async fn record(&self, decision: &TriggerDecision) -> Result<(), LedgerError> {
        self.check()?;
        self.decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(decision.clone());
        Ok(())
    }

    async fn decisions(&self) -> Result<Vec<TriggerDecision>, LedgerError> {
        self.check()?;
        Ok(self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }
}

/// Seals in memory, keeping what it was given so tests can look.
#[derive(Default)]
struct KeptSeals {
    sealed: Mutex<Vec<SecretValues>>,
    unavailable: bool,
}

#[async_trait]
impl SealSecrets for KeptSeals {
    async fn seal(
        &self,
        deployment: DeploymentId,
        _: &str,
        secrets: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        if self.unavailable {
            return Err(SealError::Unavailable("the key service is down".into()));
        }
        self.sealed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(secrets.clone());
        Ok(format!("seal-{deployment}"))
    }
}

struct Variables(HashMap<&'static str, &'static str>);

impl SecretVariables for Variables {
    fn value(&self, variable: &str) -> Option<SecretString> {
        self.0.get(variable).map(|value| SecretString::from(*value))
    }
}

const TRIGGERS: &str = r#"triggers:
  - name: on-release
    on: { source: artifacts, type: release.published }
    where: { "data.channel": stable }
    deploy: app.yaml
    tenant: acme
    params: { version: "{{ event.data.version }}" }
    secrets: { api_token: APP_TOKEN }
  - name: smoke-after-app
    on: { source: overture, type: deployment.succeeded }
    where: { "data.blueprint": app }
    deploy: smoke.yaml
    tenant: acme
"#;

const APP: &str = "name: app
params: { version: { default: none } }
secrets: [api_token]
steps:
  publish: { run: noop }
";

const SMOKE: &str = "name: smoke\nsteps:\n  check: { run: noop }\n";

fn bundle() -> TriggerBundle {
    let blueprint = |source: &str, text: &str| BlueprintSource {
        source: source.into(),
        text: text.into(),
        files: BTreeMap::new(),
    };
    TriggerBundle {
        triggers: TRIGGERS.into(),
        blueprints: BTreeMap::from([
            ("app.yaml".into(), blueprint("app.yaml", APP)),
            ("smoke.yaml".into(), blueprint("smoke.yaml", SMOKE)),
        ]),
    }
}

fn file() -> TriggerFile {
    parse(TRIGGERS).expect("a valid trigger file")
}

fn release(id: &str, channel: &str) -> IncomingEvent {
    IncomingEvent::from_json(serde_json::json!({
        "specversion": "1.0",
        "id": id,
        "source": "artifacts",
        "type": "release.published",
        "data": { "channel": channel, "version": "1.4.2" },
    }))
    .expect("a CloudEvent")
}

/// The ports of one test, each a fake in memory.
struct World {
    ledger: MemoryLedger,
    log: MemoryLog,
    seals: KeptSeals,
    payloads: MemoryPayloads,
    bundle: TriggerBundle,
    variables: Variables,
    clock: FixedClock,
}

impl World {
    fn new() -> Self {
        let now = t(0);
        Self {
            ledger: MemoryLedger::default(),
            log: MemoryLog::new(now),
            seals: KeptSeals::default(),
            payloads: MemoryPayloads::default(),
            bundle: bundle(),
            variables: Variables(HashMap::from([("APP_TOKEN", "s3cr3t-token")])),
            clock: FixedClock(now),
        }
    }

    /// The submit's ports, on this world's log, seals, payloads and clock.
    fn submit_ports(&self) -> SubmitPorts<'_> {
        SubmitPorts {
            log: &self.log,
            seals: &self.seals,
            payloads: &self.payloads,
            clock: &self.clock,
        }
    }

    fn ports(&self) -> TriggerPorts<'_> {
        TriggerPorts {
            ledger: &self.ledger,
            blueprints: &self.bundle,
            secrets: &self.variables,
            submit: self.submit_ports(),
            clock: &self.clock,
        }
    }

    async fn send(&self, event: &IncomingEvent, caller: Option<&str>) -> Dispatched {
        dispatch(&file(), event, caller, &self.ports())
            .await
            .expect("dispatched")
    }

    fn verdicts(&self) -> Vec<(String, Verdict)> {
        self.ledger
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|d| (d.trigger.clone(), d.decision))
            .collect()
    }

    /// The orchestrator records the deployment's end.
    async fn end(&self, id: DeploymentId, end: DeploymentEvent) {
        let cause = overture_kit::Cause::new("orchestrator", id, id.uuid());
        let loaded = self.log.load(id).await.expect("loaded");
        self.log
            .append(id, "acme", loaded.revision, vec![end], &cause)
            .await
            .expect("appended");
    }

    fn requested(&self, id: DeploymentId) -> DeploymentEvent {
        self.log
            .events(id)
            .into_iter()
            .next()
            .expect("the deployment is recorded")
    }
}

#[tokio::test]
async fn a_matching_event_deploys_once_with_its_params_secrets_and_the_event_recorded() {
    let world = World::new();
    let dispatched = world.send(&release("r-1", "stable"), None).await;

    assert_eq!(dispatched.started.len(), 1);
    let started = &dispatched.started[0];
    assert_eq!((started.trigger.as_str(), started.depth), ("on-release", 0));
    let DeploymentEvent::DeploymentRequested {
        tenant,
        params,
        triggered_by,
        trigger,
        ..
    } = world.requested(started.id)
    else {
        panic!("the first event is the request");
    };
    assert_eq!(tenant, "acme");
    assert_eq!(trigger, "trigger:on-release");
    assert_eq!(params["version"], "1.4.2");
    assert_eq!(
        triggered_by,
        Some(TriggeredBy {
            trigger: "on-release".into(),
            source: "artifacts".into(),
            event_id: "r-1".into(),
            depth: 0,
        })
    );
    let sealed = world.seals.sealed.lock().expect("sealed").clone();
    assert_eq!(sealed[0]["api_token"].expose_secret(), "s3cr3t-token");
    assert_eq!(
        world.verdicts(),
        [
            ("on-release".to_owned(), Verdict::Deployed),
            ("smoke-after-app".to_owned(), Verdict::NotMatched),
        ]
    );
    let decisions = world.ledger.decisions().await.expect("decisions");
    assert_eq!(decisions[0].deployment, Some(started.id.to_string()));
    assert_eq!(decisions[0].at, "2027-01-15T08:00:00.000Z");
    assert!(
        decisions.iter().all(|d| !d.reason.contains("s3cr3t-token")),
        "{decisions:?}"
    );
}

#[tokio::test]
async fn the_same_event_delivered_again_starts_nothing_and_is_recorded_as_a_duplicate() {
    let world = World::new();
    world.send(&release("r-1", "stable"), None).await;
    let again = world.send(&release("r-1", "stable"), None).await;

    assert!(again.started.is_empty());
    assert_eq!(again.decisions[0].decision, Verdict::Duplicate);
    assert_eq!(again.decisions[0].reason, DUPLICATE_REASON);
    let deployed = world
        .verdicts()
        .iter()
        .filter(|(_, verdict)| *verdict == Verdict::Deployed)
        .count();
    assert_eq!(deployed, 1);
}

#[tokio::test]
async fn a_condition_that_fails_is_named_and_nothing_is_claimed() {
    let world = World::new();
    let dispatched = world.send(&release("r-1", "beta"), None).await;

    assert!(dispatched.started.is_empty());
    assert_eq!(dispatched.decisions[0].decision, Verdict::NotMatched);
    assert_eq!(
        dispatched.decisions[0].reason,
        "where data.channel: is `beta`, not `stable`"
    );
    // Not claimed: the same event, corrected upstream, is still taken.
    assert!(world.ledger.claims.lock().expect("claims").is_empty());
}

#[tokio::test]
async fn a_trigger_of_another_tenant_than_the_callers_is_refused() {
    let world = World::new();
    let dispatched = world.send(&release("r-1", "stable"), Some("globex")).await;

    assert!(dispatched.started.is_empty());
    assert_eq!(dispatched.decisions[0].decision, Verdict::Refused);
    assert!(
        dispatched.decisions[0]
            .reason
            .contains("is not the caller's tenant `globex`"),
        "{:?}",
        dispatched.decisions[0]
    );
}

#[tokio::test]
async fn a_missing_secret_variable_or_blueprint_is_a_refusal_naming_the_fix() {
    let mut world = World::new();
    world.variables = Variables(HashMap::new());
    let dispatched = world.send(&release("r-1", "stable"), None).await;
    assert_eq!(dispatched.decisions[0].decision, Verdict::Refused);
    assert!(
        dispatched.decisions[0]
            .reason
            .contains("secrets.api_token: the environment variable APP_TOKEN is not set"),
        "{:?}",
        dispatched.decisions[0]
    );

    let mut world = World::new();
    world.bundle.blueprints.remove("app.yaml");
    let dispatched = world.send(&release("r-2", "stable"), None).await;
    assert_eq!(dispatched.decisions[0].decision, Verdict::Refused);
    assert!(dispatched.decisions[0]
        .reason
        .contains("publish the trigger file again"));
}

#[tokio::test]
async fn a_deployment_that_could_not_be_recorded_releases_its_claim_for_the_next_delivery() {
    let mut world = World::new();
    world.seals.unavailable = true;
    let error = dispatch(&file(), &release("r-1", "stable"), None, &world.ports())
        .await
        .expect_err("the key service is down");
    assert!(error.is_retryable(), "{error}");

    world.seals.unavailable = false;
    let dispatched = world.send(&release("r-1", "stable"), None).await;
    assert_eq!(dispatched.started.len(), 1, "{:?}", dispatched.decisions);
}

#[tokio::test]
async fn a_delivery_that_died_between_claim_and_record_is_deployed_by_the_next_delivery() {
    let mut world = World::new();
    // The first delivery claims the event and dies before its deployment is recorded: the key
    // service fails, and its claim is never given back.
    world.seals.unavailable = true;
    world.ledger.keeps_claims = true;
    dispatch(&file(), &release("r-1", "stable"), None, &world.ports())
        .await
        .expect_err("the first delivery dies");
    assert!(world.log.events(derived()).is_empty());

    world.seals.unavailable = false;
    let again = world.send(&release("r-1", "stable"), None).await;
    assert_eq!(again.started.len(), 1, "{:?}", again.decisions);
    let id = again.started[0].id;
    assert_eq!(id, derived(), "the id is derived from the claim");
    assert!(matches!(
        world.requested(id),
        DeploymentEvent::DeploymentRequested { .. }
    ));
    let third = world.send(&release("r-1", "stable"), None).await;
    assert!(third.started.is_empty());

    // The decision log says what happened: deployed on the second delivery, then a duplicate.
    let decisions: Vec<_> = world
        .ledger
        .decisions()
        .await
        .expect("decisions")
        .into_iter()
        .filter(|d| d.trigger == "on-release")
        .collect();
    assert_eq!(
        decisions.iter().map(|d| d.decision).collect::<Vec<_>>(),
        [Verdict::Deployed, Verdict::Duplicate],
        "{decisions:#?}"
    );
    assert!(
        decisions[0].reason.contains("an earlier delivery claimed"),
        "{:?}",
        decisions[0]
    );
    assert_eq!(decisions[1].deployment, Some(id.to_string()));
}

/// The deployment the trigger `on-release` starts for the event `r-1`.
fn derived() -> DeploymentId {
    deployment_for(
        "acme",
        Claim {
            source: "artifacts",
            event_id: "r-1",
            trigger: "on-release",
        },
    )
}

#[tokio::test]
async fn a_deployments_end_starts_the_chained_trigger_one_step_deeper() {
    let world = World::new();
    let first = world.send(&release("r-1", "stable"), None).await.started[0].id;
    let state = world.log.load(first).await.expect("loaded").state;

    let end = end_of(first, &state, "succeeded");
    assert_eq!(
        (end.source.as_str(), end.event_type.as_str(), end.depth),
        ("overture", "deployment.succeeded", 1)
    );
    let chained = world.send(&end, None).await;
    assert_eq!(chained.started.len(), 1, "{:?}", chained.decisions);
    assert_eq!(chained.started[0].trigger, "smoke-after-app");
    let smoke = world.log.load(chained.started[0].id).await.expect("loaded");
    assert_eq!(smoke.state.triggered_by.expect("triggered").depth, 1);
}

fn message(id: &str, body: &str, tenant: Option<&str>) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(id.into());
    message.body = Some(body.into());
    if let Some(tenant) = tenant {
        let mut attribute = SqsMessageAttribute::default();
        attribute.string_value = Some(tenant.into());
        attribute.data_type = Some("String".into());
        message
            .message_attributes
            .insert(TENANT_ATTRIBUTE.into(), attribute);
    }
    message
}

fn batch(messages: Vec<SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages;
    event
}

struct Published(Option<TriggerBundle>);

#[async_trait]
impl LoadBundle for Published {
    async fn load(&self) -> Result<Option<TriggerBundle>, BundleError> {
        Ok(self.0.clone())
    }
}

impl World {
    fn queue_ports<'a>(&'a self, bundle: &'a Published) -> QueuePorts<'a> {
        QueuePorts {
            bundle,
            ledger: &self.ledger,
            secrets: &self.variables,
            submit: self.submit_ports(),
            clock: &self.clock,
        }
    }
}

const RELEASE: &str = r#"{"specversion": "1.0", "id": "r-9", "source": "artifacts",
    "type": "release.published", "data": {"channel": "stable", "version": "2.0"}}"#;

#[tokio::test]
async fn messages_of_a_batch_are_dispatched_and_one_that_is_no_event_is_given_back() {
    let world = World::new();
    let published = Published(Some(world.bundle.clone()));
    let answer = on_event_messages(
        &batch(vec![
            message("m-1", RELEASE, None),
            message("m-2", "{not json", None),
            message("m-3", RELEASE, None),
        ]),
        &world.queue_ports(&published),
    )
    .await
    .expect("a partial answer");

    let failed: Vec<_> = answer
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(failed, ["m-2"]);
    let verdicts: Vec<_> = world.verdicts().into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Deployed,
            Verdict::NotMatched,
            Verdict::Duplicate,
            Verdict::NotMatched
        ]
    );
}

#[tokio::test]
async fn a_message_delivered_for_a_tenant_deploys_only_into_that_tenant() {
    let world = World::new();
    let published = Published(Some(world.bundle.clone()));
    on_event_messages(
        &batch(vec![message("m-1", RELEASE, Some("globex"))]),
        &world.queue_ports(&published),
    )
    .await
    .expect("answered");
    assert_eq!(world.verdicts()[0].1, Verdict::Refused);
}

#[tokio::test]
async fn a_batch_whose_every_event_failed_fails_the_invocation_as_retryable() {
    let world = World {
        ledger: MemoryLedger {
            down: true,
            ..MemoryLedger::default()
        },
        ..World::new()
    };
    let published = Published(Some(world.bundle.clone()));
    let failed = on_event_messages(
        &batch(vec![message("m-1", RELEASE, None)]),
        &world.queue_ports(&published),
    )
    .await
    .expect_err("the ledger is down");
    assert_eq!(failed.error_type(), "Retryable");
}

#[tokio::test]
async fn events_before_any_trigger_file_is_published_start_nothing_and_are_not_retried() {
    let world = World::new();
    let answer = on_event_messages(
        &batch(vec![message("m-1", RELEASE, None)]),
        &world.queue_ports(&Published(None)),
    )
    .await
    .expect("answered");
    assert!(answer.batch_item_failures.is_empty());
    assert!(world.verdicts().is_empty());
}

/// Published events, kept in memory.
#[derive(Default)]
struct Outbox(Mutex<Vec<IncomingEvent>>);

#[async_trait]
impl PublishEvents for Outbox {
    async fn publish(&self, event: &IncomingEvent) -> Result<(), PublishError> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event.clone());
        Ok(())
    }
}

#[tokio::test]
async fn the_memory_ledger_keeps_the_contract() {
    ledger_keeps_its_contract(&MemoryLedger::default()).await;
}

#[tokio::test]
async fn only_ends_of_deployments_are_published_from_the_stream() {
    use crate::ends::{on_stream_records, EndPorts};
    use aws_lambda_events::event::dynamodb::Event;

    let world = World::new();
    let id = world.send(&release("r-1", "stable"), None).await.started[0].id;
    world
        .end(
            id,
            DeploymentEvent::DeploymentFailed {
                reason: "a step failed".into(),
            },
        )
        .await;
    let records: Vec<serde_json::Value> = ReadStream::read_stream(&world.log, id, 0)
        .await
        .expect("read")
        .iter()
        .map(stream_record)
        .collect();
    let event: Event =
        serde_json::from_value(serde_json::json!({ "Records": records })).expect("a stream batch");

    let outbox = Outbox::default();
    let answer = on_stream_records(
        &event,
        &EndPorts {
            log: &world.log,
            events: &outbox,
        },
    )
    .await
    .expect("answered");
    assert!(answer.batch_item_failures.is_empty());
    let published = outbox.0.lock().expect("published").clone();
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].event_type, "deployment.failed");
    assert_eq!(published[0].id, format!("{id}.failed"));
    assert_eq!(published[0].depth, 1);
}

/// An event as the events table's stream delivers it (its new image).
fn stream_record(envelope: &overture_events::Envelope) -> serde_json::Value {
    let text = |value: &str| serde_json::json!({ "S": value });
    serde_json::json!({
        "eventID": envelope.id.to_string(),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "eu-west-1",
        "eventSourceARN": "arn:aws:dynamodb:eu-west-1:123456789012:table/overture-events/stream/1",
        "dynamodb": {
            "NewImage": {
                "stream": text(&envelope.stream),
                "revision": { "N": envelope.revision.to_string() },
                "id": text(&envelope.id.to_string()),
                "type": text(&envelope.event_type),
                "data": text(&envelope.data.to_string()),
                "metadata": text(&serde_json::to_string(&envelope.metadata).expect("metadata")),
            },
            "SequenceNumber": format!("{:024}", envelope.revision),
            "SizeBytes": 400,
            "StreamViewType": "NEW_IMAGE",
        },
    })
}

#[tokio::test]
async fn a_forged_end_on_the_queue_starts_nothing_and_the_real_end_still_chains() {
    let world = World::new();
    let published = Published(Some(world.bundle.clone()));
    let id = world.send(&release("r-1", "stable"), None).await.started[0].id;
    // Written by hand while the deployment still runs, as anyone who may send to the queue could.
    let forged = serde_json::json!({
        "specversion": "1.0", "id": format!("{id}.succeeded"), "source": "overture",
        "type": "deployment.succeeded", "overturedepth": 0,
        "data": { "id": id.to_string(), "tenant": "acme", "blueprint": "app", "status": "succeeded" },
    })
    .to_string();
    let before = world.verdicts();
    let answer = on_event_messages(
        &batch(vec![
            message("m-forged", &forged, None),
            message("m-caller", &forged, Some("acme")),
        ]),
        &world.queue_ports(&published),
    )
    .await;
    assert!(
        matches!(&answer, Err(failed) if !failed.retryable),
        "{answer:?}"
    );
    assert_eq!(
        world.verdicts(),
        before,
        "nothing recorded for a forged end"
    );

    world.end(id, DeploymentEvent::DeploymentSucceeded {}).await;
    let genuine = end_of(
        id,
        &world.log.load(id).await.expect("loaded").state,
        "succeeded",
    );
    let answer = on_event_messages(
        &batch(vec![message("m-end", &genuine.document.to_string(), None)]),
        &world.queue_ports(&published),
    )
    .await
    .expect("answered");
    assert!(answer.batch_item_failures.is_empty());
    let chained = world.verdicts();
    assert_eq!(
        chained.last(),
        Some(&("smoke-after-app".to_owned(), Verdict::Deployed)),
        "{chained:?}"
    );
}
