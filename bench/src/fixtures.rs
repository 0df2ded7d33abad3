//! Realistic data to measure with: events shaped and stamped as the engine's functions record
//! them, and generated blueprints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{TimeDelta, Utc};
use overture_domain::blueprint::{self, ParsedBlueprint};
use overture_events::{DeploymentEvent, DeploymentId, Metadata, Timestamp};
use overture_infra::sqlite::NewEvent;
use uuid::Uuid;

/// The tenants deployments are spread over.
pub const TENANTS: [&str; 4] = ["acme", "globex", "initech", "umbrella"];

/// The user who requests every deployment.
const REQUESTED_BY: &str = "bench";
/// The actors of the engine's functions (`overture_orchestrator::ACTOR`, `overture_runner::ACTOR`).
const ORCHESTRATOR: &str = "orchestrator";
const RUNNER: &str = "runner";

/// Steps of the replay blueprint. With the request, the sealed credentials, the purge and the
/// ending, a deployment of it is `3 * 32 + 4 = 100` events.
pub const REPLAY_STEPS: usize = 32;

/// What each step of a generated wide blueprint runs.
#[derive(Clone, Copy, Debug)]
pub enum StepKind {
    /// `run: noop`: the engine's own bookkeeping and nothing else.
    Noop,
    /// `run: script` with the command `true`, in a bubblewrap sandbox.
    ScriptTrue,
}

/// A blueprint of `steps` steps (at least 3) in a wide DAG: one root, `steps - 2` steps that
/// need it and can all run at once, and one final step that needs all of those.
pub fn wide_blueprint(name: &str, steps: usize, kind: StepKind) -> String {
    let run = match kind {
        StepKind::Noop => "    run: noop\n",
        StepKind::ScriptTrue => "    run: script\n    with: { command: \"true\" }\n",
    };
    let middle: Vec<String> = (1..steps.saturating_sub(1))
        .map(|i| format!("s{i:04}"))
        .collect();
    let mut text = format!("name: {name}\nsteps:\n  root:\n{run}");
    for step in &middle {
        let _ = write!(text, "  {step}:\n{run}    needs: [root]\n");
    }
    let _ = write!(text, "  final:\n{run}    needs: [{}]\n", middle.join(", "));
    text
}

/// A blueprint of `steps` noop steps in a chain: each needs the one before it.
pub fn chain_blueprint(name: &str, steps: usize) -> String {
    let mut text = format!("name: {name}\nsteps:\n  s00000:\n    run: noop\n");
    for i in 1..steps {
        let _ = write!(
            text,
            "  s{i:05}:\n    run: noop\n    needs: [s{:05}]\n",
            i - 1
        );
    }
    text
}

/// The blueprint every replayed deployment runs: [`REPLAY_STEPS`] script steps in a chain, with
/// a parameter and a secret as real blueprints have.
pub fn replay_blueprint() -> anyhow::Result<ParsedBlueprint> {
    let mut text = String::from(
        "name: shop-api\n\
         description: Builds, tests and rolls out the shop API.\n\
         params:\n  region: { default: eu-west-1 }\n\
         secrets: [deploy_token]\n\
         on_failure: { grace: 1m }\n\
         steps:\n",
    );
    for i in 1..=REPLAY_STEPS {
        let _ = writeln!(text, "  step-{i:02}:\n    run: script");
        let _ = writeln!(text, "    with: {{ command: \"./ci/stage.sh {i} --region {{{{ params.region }}}} --token {{{{ secrets.deploy_token }}}}\" }}");
        if i > 1 {
            let _ = writeln!(text, "    needs: [step-{:02}]", i - 1);
        }
        let _ = writeln!(text, "    timeout: 5m");
    }
    blueprint::parse(&text)
        .map_err(|problems| anyhow::anyhow!("the replay blueprint is invalid: {problems}"))
}

/// Stamps events with the metadata the engine gives them: the deployment's id as correlation,
/// the previous event as cause, and a clock that moves on a few milliseconds per event.
pub struct Recorder {
    deployment: DeploymentId,
    tenant: String,
    cause: Uuid,
    at: Timestamp,
}

impl Recorder {
    /// Starts a deployment's chain now.
    pub fn new(deployment: DeploymentId, tenant: &str) -> Self {
        Self {
            deployment,
            tenant: tenant.to_owned(),
            cause: deployment.uuid(),
            at: Utc::now(),
        }
    }

    /// The event as `actor` would append it, next in the chain.
    pub fn record(&mut self, actor: &str, event: &DeploymentEvent) -> NewEvent {
        let id = Uuid::now_v7();
        let metadata = Metadata {
            tenant: self.tenant.clone(),
            actor: actor.to_owned(),
            correlation_id: self.deployment.uuid(),
            causation_id: self.cause,
            recorded_at: self.at,
            previous: None,
            hash: None,
        };
        self.cause = id;
        self.at += TimeDelta::milliseconds(7);
        NewEvent {
            id,
            event_type: event.event_type().to_owned(),
            data: event.data(),
            metadata,
        }
    }

    /// A runner's `StepSucceeded` for `step`, with the outputs a build step typically leaves.
    pub fn step_succeeded(&mut self, step: &str) -> NewEvent {
        let digest = format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
        let outputs = BTreeMap::from([
            (
                "image".to_owned(),
                format!(
                    "registry.example.com/{}/{step}@sha256:{digest}",
                    self.tenant
                ),
            ),
            (
                "url".to_owned(),
                format!(
                    "https://{step}.{}.example.com/releases/{}",
                    self.tenant, self.deployment
                ),
            ),
        ]);
        let event = DeploymentEvent::StepSucceeded {
            step: step.to_owned(),
            attempt: 1,
            outputs,
            duration_ms: 48_213,
        };
        self.record(RUNNER, &event)
    }

    /// The request that opens a deployment's stream, with sealed credentials when the blueprint
    /// declares secrets, as `overture_submit::submit` records it.
    pub fn requested(&mut self, parsed: &ParsedBlueprint) -> anyhow::Result<Vec<NewEvent>> {
        let params =
            blueprint::resolve_params(&parsed.snapshot, &BTreeMap::new()).map_err(|problems| {
                anyhow::anyhow!("the blueprint's parameters do not resolve: {problems}")
            })?;
        let requested = DeploymentEvent::DeploymentRequested {
            triggered_by: None,
            tenant: self.tenant.clone(),
            requested_by: REQUESTED_BY.to_owned(),
            trigger: "cli".to_owned(),
            source: format!("blueprints/{}.yaml", parsed.snapshot.name),
            blueprint: parsed.snapshot.clone(),
            blueprint_hash: parsed.hash.clone(),
            params,
            cloud: None,
            name: None,
        };
        let mut events = vec![self.record(REQUESTED_BY, &requested)];
        if !parsed.snapshot.secrets.is_empty() {
            let sealed = DeploymentEvent::CredentialsSealed {
                seal: format!("local:{}", self.deployment),
                secrets: parsed.snapshot.secrets.clone(),
                ssh_public_key: None,
                token: false,
            };
            events.push(self.record(REQUESTED_BY, &sealed));
        }
        Ok(events)
    }

    /// A whole successful deployment of `parsed`, one step after the other.
    pub fn whole_deployment(&mut self, parsed: &ParsedBlueprint) -> anyhow::Result<Vec<NewEvent>> {
        let mut events = self.requested(parsed)?;
        for step in &parsed.snapshot.steps {
            let scheduled = DeploymentEvent::StepScheduled {
                step: step.name.clone(),
                attempt: 1,
                not_before: self.at,
            };
            events.push(self.record(ORCHESTRATOR, &scheduled));
            let sandbox = format!(
                "{}-{}-1-{}",
                &self.deployment.uuid().simple().to_string()[..12],
                step.name,
                &Uuid::new_v4().simple().to_string()[..8]
            );
            let started = DeploymentEvent::StepStarted {
                step: step.name.clone(),
                attempt: 1,
                sandbox,
                lease_until: None,
                fingerprint: None,
            };
            events.push(self.record(RUNNER, &started));
            events.push(self.step_succeeded(&step.name));
        }
        events.push(self.record(ORCHESTRATOR, &DeploymentEvent::SecretsPurged {}));
        events.push(self.record(ORCHESTRATOR, &DeploymentEvent::DeploymentSucceeded {}));
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_blueprints_are_valid() {
        let chain = blueprint::parse(&chain_blueprint("c", 3)).expect("a valid chain");
        assert_eq!(chain.snapshot.steps[2].needs, ["s00001"]);
        for kind in [StepKind::Noop, StepKind::ScriptTrue] {
            let parsed = blueprint::parse(&wide_blueprint("wide", 10, kind));
            assert_eq!(parsed.map(|p| p.snapshot.steps.len()), Ok(10));
        }
        let parsed = replay_blueprint().map(|p| p.snapshot.steps.len());
        assert_eq!(parsed.ok(), Some(REPLAY_STEPS));
    }

    #[test]
    fn a_replayed_deployment_is_a_hundred_events_that_fold_to_success() -> anyhow::Result<()> {
        let parsed = replay_blueprint()?;
        let deployment = DeploymentId::from_uuid(Uuid::now_v7());
        let events = Recorder::new(deployment, "acme").whole_deployment(&parsed)?;
        assert_eq!(events.len(), 100);
        let mut models = overture_domain::projection::ReadModels::default();
        for (revision, event) in (0..).zip(events) {
            let envelope = overture_events::Envelope {
                stream: deployment.stream(),
                revision,
                id: event.id,
                event_type: event.event_type,
                data: event.data,
                metadata: event.metadata,
            };
            models.apply(&envelope)?;
        }
        let status = models.deployments.get(&deployment).map(|view| view.status);
        assert_eq!(
            status,
            Some(overture_domain::projection::DeploymentStatus::Succeeded)
        );
        Ok(())
    }
}
