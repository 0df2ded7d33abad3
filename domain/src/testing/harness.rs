//! Given/when/then over the Deployment aggregate: given the events recorded so far, when a
//! command is handled, then these events are decided (or this refusal).
//!
//! ```text
//! given([requested()]).when(advance(0)).then([scheduled("build", 1, 0)]);
//! given([]).when(advance(0)).then_error(DeploymentError::NotRequested);
//! ```

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
    /// Handles the command in this state (which is kept for further commands): the events it
    /// decides, or why it is refused. [`Then`] asserts on it.
    pub fn when(&self, command: DeploymentCommand) -> Decided {
        Deployment::handle(&self.0, command)
    }

    /// The state the events leave.
    pub fn state(&self) -> &DeploymentState {
        &self.0
    }
}

/// What a command decided.
pub type Decided = Result<Vec<DeploymentEvent>, DeploymentError>;

/// The assertions of a given/when/then test on what a command decided.
pub trait Then {
    /// Asserts the command decided exactly these events, in this order.
    fn then(self, expected: impl IntoIterator<Item = DeploymentEvent>);
    /// Asserts the command was accepted and decided nothing.
    fn then_nothing(self);
    /// Asserts the command was refused, for this reason.
    fn then_error(self, expected: DeploymentError);
}

impl Then for Decided {
    #[track_caller]
    fn then(self, expected: impl IntoIterator<Item = DeploymentEvent>) {
        assert_eq!(self, Ok(expected.into_iter().collect()));
    }

    #[track_caller]
    fn then_nothing(self) {
        assert_eq!(self, Ok(vec![]));
    }

    #[track_caller]
    fn then_error(self, expected: DeploymentError) {
        assert_eq!(self, Err(expected));
    }
}
