//! The orchestrator's subscription: what each event it sees recorded decides for it to carry
//! out, one match from event to reaction. Every record also has the deployment advanced, whose
//! state calls for the rest (closing the bastion, purging the secrets: `actions`); the event
//! card (`overture_domain::deployment::card`) shows both, and its test here holds the card to
//! this match.

use overture_domain::deployment::card;
use overture_events::{DeploymentEvent, Timestamp};

/// What an event decides for the orchestrator to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reaction {
    /// Queue this attempt, which waits to start.
    QueueAttempt {
        /// The step.
        step: String,
        /// The attempt.
        attempt: u32,
    },
    /// Set a durable timer to move the deployment on at this deadline.
    WakeAt(Timestamp),
    /// Wake the tenant's other deployments that wait for or watch this service: its members
    /// changed.
    WakeInterested {
        /// The service.
        service: String,
    },
}

impl Reaction {
    /// The card's name for it.
    pub const fn card(&self) -> card::Reaction {
        match self {
            Reaction::QueueAttempt { .. } => card::Reaction::QueueAttempt,
            Reaction::WakeAt(_) => card::Reaction::WakeAtDeadline,
            Reaction::WakeInterested { .. } => card::Reaction::WakeInterested,
        }
    }

    /// Whether it is news to the orchestrator even when it recorded the event itself: it
    /// carried out what its own events decided when it appended them, but a registration is
    /// news to the tenant's other deployments whoever recorded it.
    pub const fn for_any_recorder(&self) -> bool {
        matches!(self, Reaction::WakeInterested { .. })
    }
}

/// The reaction the event decides, if any. No event is left to a wildcard: a new event is
/// placed here on purpose.
pub fn subscription(event: &DeploymentEvent) -> Option<Reaction> {
    use DeploymentEvent as E;
    match event {
        E::StepScheduled { step, attempt, .. }
        | E::StepRetryScheduled {
            step,
            next_attempt: attempt,
            ..
        } => Some(Reaction::QueueAttempt {
            step: step.clone(),
            attempt: *attempt,
        }),
        E::FailureGracePeriodStarted { deadline, .. }
        | E::StepAwaitingServices { deadline, .. } => Some(Reaction::WakeAt(*deadline)),
        E::ServiceRegistered { service, .. } | E::ServiceDeregistered { service, .. } => {
            Some(Reaction::WakeInterested {
                service: service.clone(),
            })
        }
        E::DeploymentRequested { .. }
        | E::CredentialsSealed { .. }
        | E::StepStarted { .. }
        | E::StepSucceeded { .. }
        | E::StepAttemptFailed { .. }
        | E::StepJobDeadLettered { .. }
        | E::StepFailed { .. }
        | E::StepAbandoned { .. }
        | E::BastionAccessGranted { .. }
        | E::BastionAccessRevoked { .. }
        | E::SecretsPurged {}
        | E::DeploymentSucceeded {}
        | E::DeploymentFailed { .. }
        | E::CancellationRequested { .. }
        | E::DeploymentCancelled { .. }
        | E::DestroyRequested { .. }
        | E::StepDestroyed { .. }
        | E::StepDestroyFailed { .. }
        | E::DeploymentDestroyed {}
        | E::DeploymentRedriven { .. }
        | E::HostKeysPinned { .. }
        | E::StepNetworkPolicyApplied { .. }
        | E::ServicesResolved { .. }
        | E::StepRerunRequested { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use overture_domain::deployment::card::{reactions_of, Reactor};
    use overture_domain::testing::events::samples;

    use super::subscription;

    #[test]
    fn the_event_card_names_what_the_orchestrator_does_for_each_event() {
        for sample in samples() {
            let code: Vec<_> = subscription(&sample).iter().map(|r| r.card()).collect();
            assert_eq!(
                code,
                reactions_of(sample.event_type(), Reactor::Orchestrator),
                "the card and the orchestrator's subscription disagree on {}",
                sample.event_type()
            );
        }
    }
}
