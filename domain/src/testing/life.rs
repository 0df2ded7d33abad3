//! A deployment's life, decided command by command as the handlers decide it: each command is
//! handled in the state the events before it left, at its own instant.

use std::collections::BTreeMap;

use overture_events::{
    BlueprintSnapshot, DeploymentEvent, DeploymentId, Envelope, ErrorClass, Timestamp,
};

use super::{events, t};
use crate::deployment::{Deployment, DeploymentCommand, DeploymentState};

/// A deployment's stream as it is being decided.
#[derive(Clone, Debug, Default)]
pub struct Life {
    /// The state the events so far leave.
    pub state: DeploymentState,
    /// Each event, with the instant it was recorded at.
    pub events: Vec<(DeploymentEvent, Timestamp)>,
}

impl Life {
    /// A deployment of the blueprint requested at `t(0)`, as [`events::request`] asks, with
    /// nothing sealed.
    pub fn requested(blueprint: BlueprintSnapshot) -> Self {
        let mut life = Self::default();
        life.handle(0, events::request(blueprint, None));
        life
    }

    /// Handles the command at `t(at)` and records what it decides; fails the test if refused.
    #[track_caller]
    pub fn handle(&mut self, at: i64, command: DeploymentCommand) -> &mut Self {
        let decided = match Deployment::handle(&self.state, command) {
            Ok(decided) => decided,
            Err(error) => panic!("the command is refused: {error}"),
        };
        for event in decided {
            self.state = Deployment::apply(std::mem::take(&mut self.state), event.clone());
            self.events.push((event, t(at)));
        }
        self
    }

    /// Moves the deployment on at `t(at)`.
    #[track_caller]
    pub fn advance(&mut self, at: i64) -> &mut Self {
        self.handle(at, events::advance(at))
    }

    /// Starts the attempt at `t(at)`, in sandbox `STEP-ATTEMPT`.
    #[track_caller]
    pub fn start(&mut self, at: i64, step: &str, attempt: u32) -> &mut Self {
        self.handle(at, events::start(step, attempt, at))
    }

    /// Records the attempt's success (no outputs, 10 ms) at `t(at)`.
    #[track_caller]
    pub fn succeed(&mut self, at: i64, step: &str, attempt: u32) -> &mut Self {
        self.handle(
            at,
            DeploymentCommand::RecordSuccess {
                step: step.into(),
                attempt,
                outputs: BTreeMap::new(),
                duration_ms: 10,
            },
        )
    }

    /// Records the attempt's failure as `step-failed` (exit 3, `boom`, 10 ms) at `t(at)`.
    #[track_caller]
    pub fn fail(&mut self, at: i64, step: &str, attempt: u32) -> &mut Self {
        self.handle(
            at,
            DeploymentCommand::RecordFailure {
                step: step.into(),
                attempt,
                error_class: ErrorClass::StepFailed,
                exit_code: Some(3),
                message: "boom".into(),
                duration_ms: 10,
                now: t(at),
            },
        )
    }

    /// The events alone.
    pub fn history(&self) -> Vec<DeploymentEvent> {
        self.events.iter().map(|(event, _)| event.clone()).collect()
    }

    /// The stream as the log holds it: revisions from 0, recorded by `test` for tenant `acme`.
    pub fn envelopes(&self, id: DeploymentId) -> Vec<Envelope> {
        events::envelopes(id, &self.events)
    }
}
