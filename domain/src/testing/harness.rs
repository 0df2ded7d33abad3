//! Given/when/then over the Deployment aggregate: given the events recorded so far, when a
//! command is handled, then these events are decided (or this refusal).

use overture_events::DeploymentEvent;

use crate::deployment::{Deployment, DeploymentCommand, DeploymentError, DeploymentState};

/// The deployment as its recorded events leave it.
#[derive(Clone, Debug)]
pub struct Given(DeploymentState);

/// Folds the events into the state a command is handled in.
pub fn given(events: impl IntoIterator<Item = DeploymentEvent>) -> Given {
    Given(Deployment::replay(events))
}

impl Given {
    /// Handles the command in this state; the state is kept for further commands.
    pub fn when(&self, command: DeploymentCommand) -> Then {
        Then(Deployment::handle(&self.0, command))
    }

    /// The state the events leave.
    pub fn state(&self) -> &DeploymentState {
        &self.0
    }
}

/// What a command decided: the events to record, or why it was refused. It compares equal to
/// the `Result` it holds, so `assert_eq!(given(..).when(..), Ok(vec![..]))` reads as well.
#[derive(Clone, Debug, PartialEq)]
pub struct Then(pub Result<Vec<DeploymentEvent>, DeploymentError>);

impl Then {
    /// Asserts the command decided exactly these events, in this order.
    #[track_caller]
    pub fn then(self, expected: impl IntoIterator<Item = DeploymentEvent>) {
        assert_eq!(self.0, Ok(expected.into_iter().collect()));
    }

    /// Asserts the command was accepted and decided nothing.
    #[track_caller]
    pub fn then_nothing(self) {
        assert_eq!(self.0, Ok(vec![]));
    }

    /// Asserts the command was refused, for this reason.
    #[track_caller]
    pub fn then_error(self, expected: DeploymentError) {
        assert_eq!(self.0, Err(expected));
    }

    /// The events decided; fails the test, saying `why`, if the command was refused.
    #[track_caller]
    pub fn expect(self, why: &str) -> Vec<DeploymentEvent> {
        match self.0 {
            Ok(events) => events,
            Err(error) => panic!("{why}: {error}"),
        }
    }

    /// Whether the command was refused.
    pub fn is_err(&self) -> bool {
        self.0.is_err()
    }

    /// What the command decided.
    pub fn result(self) -> Result<Vec<DeploymentEvent>, DeploymentError> {
        self.0
    }
}

impl PartialEq<Result<Vec<DeploymentEvent>, DeploymentError>> for Then {
    fn eq(&self, other: &Result<Vec<DeploymentEvent>, DeploymentError>) -> bool {
        self.0 == *other
    }
}
