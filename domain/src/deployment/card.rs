//! The event card: for every event of a deployment, the commands whose decision may record it,
//! what it sets off in the reactors, and what the projection changes in the read models for it.
//! One look answers "where is this event decided, handled and projected?"; the tests in
//! `domain/tests/deployment/card.rs` and the reactors' own (`overture-orchestrator`,
//! `overture-triggers`) fail when the card and the code disagree, and `ARCHITECTURE.md` shows
//! it as the table [`markdown`] renders.
//!
//! Every record also sets off the orchestrator's advance of its deployment, whose state calls
//! for the rest (closing the bastion, purging the secrets); [`Reaction`] names only what the
//! event itself decides.

/// What an event sets off in a reactor, beyond the advance every record sets off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reaction {
    /// The orchestrator queues the attempt the event says waits to start.
    QueueAttempt,
    /// The orchestrator sets a durable timer for the event's deadline.
    WakeAtDeadline,
    /// The orchestrator wakes the tenant's other deployments that wait for or watch the service.
    WakeInterested,
    /// The triggers' end publisher publishes the deployment's end (`deployment.succeeded`,
    /// `deployment.failed` or `deployment.cancelled` from `overture`).
    PublishEnd,
}

/// The function that reacts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reactor {
    /// `overture-orchestrator` (`Decided::note`'s subscription, `subscription`).
    Orchestrator,
    /// `overture-triggers`' end publisher (`ends::subscription`).
    EndPublisher,
}

impl Reaction {
    /// The reactor that carries it out.
    pub const fn reactor(&self) -> Reactor {
        match self {
            Reaction::QueueAttempt | Reaction::WakeAtDeadline | Reaction::WakeInterested => {
                Reactor::Orchestrator
            }
            Reaction::PublishEnd => Reactor::EndPublisher,
        }
    }

    /// The reaction in words, for the table.
    pub const fn words(&self) -> &'static str {
        match self {
            Reaction::QueueAttempt => "orchestrator queues the attempt",
            Reaction::WakeAtDeadline => "orchestrator sets a timer for the deadline",
            Reaction::WakeInterested => "orchestrator wakes the deployments that need the service",
            Reaction::PublishEnd => "end publisher publishes the deployment's end",
        }
    }
}

/// One event's card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventCard {
    /// The event's type string.
    pub event: &'static str,
    /// The commands ([`super::DeploymentCommand::name`]) whose decision may record it.
    pub commands: &'static [&'static str],
    /// What it sets off, beyond the advance.
    pub reactions: &'static [Reaction],
    /// What the projection changes in the read models for it; `None` when it changes nothing.
    pub read_model: Option<&'static str>,
}

/// The commands after which an attempt's failure may be decided, and what follows it.
const FAILING: &[&str] = &[
    "ObserveServices",
    "InterruptAttempt",
    "RecordDeadLetter",
    "RecordFailure",
];

/// The event card, in the order [`overture_events::DeploymentEvent::TYPES`] lists the events.
pub const CARD: &[EventCard] = &[
    EventCard {
        event: "DeploymentRequested",
        commands: &["Request"],
        reactions: &[],
        read_model: Some("starts the view, with its name, every step pending; counts it in the tenant's summary; registers the services its steps take an interest in"),
    },
    EventCard {
        event: "CredentialsSealed",
        commands: &["Request", "Redrive"],
        reactions: &[],
        read_model: Some("opens the grants of the sealed SSH key and token in the view's ledger"),
    },
    EventCard {
        event: "StepScheduled",
        commands: &["Advance", "ObserveServices"],
        reactions: &[Reaction::QueueAttempt],
        read_model: Some("step scheduled"),
    },
    EventCard {
        event: "StepStarted",
        commands: &["StartAttempt"],
        reactions: &[],
        read_model: Some("step running, its attempts counted, its start time"),
    },
    EventCard {
        event: "StepSucceeded",
        commands: &["RecordSuccess"],
        reactions: &[],
        read_model: Some("step succeeded, with its outputs and end time"),
    },
    EventCard {
        event: "StepAttemptFailed",
        commands: &["InterruptAttempt", "RecordDeadLetter", "RecordFailure"],
        reactions: &[],
        read_model: Some("step's error class"),
    },
    EventCard {
        event: "StepJobDeadLettered",
        commands: &["RecordDeadLetter"],
        reactions: &[],
        read_model: None,
    },
    EventCard {
        event: "StepRetryScheduled",
        commands: &["InterruptAttempt", "RecordDeadLetter", "RecordFailure"],
        reactions: &[Reaction::QueueAttempt],
        read_model: Some("step retrying"),
    },
    EventCard {
        event: "StepFailed",
        commands: FAILING,
        reactions: &[],
        read_model: Some("step failed, with its end time"),
    },
    EventCard {
        event: "FailureGracePeriodStarted",
        commands: FAILING,
        reactions: &[Reaction::WakeAtDeadline],
        read_model: None,
    },
    EventCard {
        event: "StepAbandoned",
        commands: &[
            "Advance",
            "ObserveServices",
            "Cancel",
            "InterruptAttempt",
            "RecordDeadLetter",
            "RecordFailure",
        ],
        reactions: &[],
        read_model: Some("step abandoned, with its end time"),
    },
    EventCard {
        event: "BastionAccessGranted",
        commands: &["RecordAccessGranted"],
        reactions: &[],
        read_model: Some("opens the bastion's grant in the view's ledger"),
    },
    EventCard {
        event: "BastionAccessRevoked",
        commands: &["RecordAccessRevoked"],
        reactions: &[],
        read_model: Some("closes the bastion's grant (or notes for whom it was kept)"),
    },
    EventCard {
        event: "SecretsPurged",
        commands: &["Advance", "RecordSecretsPurged"],
        reactions: &[],
        read_model: Some("closes the seal's grants"),
    },
    EventCard {
        event: "DeploymentSucceeded",
        commands: &["Advance"],
        reactions: &[Reaction::PublishEnd],
        read_model: Some("deployment succeeded, with its end time; counted in the tenant's summary"),
    },
    EventCard {
        event: "DeploymentFailed",
        commands: &["Advance"],
        reactions: &[Reaction::PublishEnd],
        read_model: Some("deployment failed, with its reason and end time; counted in the tenant's summary"),
    },
    EventCard {
        event: "CancellationRequested",
        commands: &["Cancel"],
        reactions: &[],
        read_model: None,
    },
    EventCard {
        event: "DeploymentCancelled",
        commands: &["Advance"],
        reactions: &[Reaction::PublishEnd],
        read_model: Some("deployment cancelled, with its reason and end time; counted in the tenant's summary"),
    },
    EventCard {
        event: "DestroyRequested",
        commands: &["RequestDestroy"],
        reactions: &[],
        read_model: Some("destroy: destroying"),
    },
    EventCard {
        event: "StepDestroyed",
        commands: &["RecordStepDestroyed"],
        reactions: &[],
        read_model: None,
    },
    EventCard {
        event: "StepDestroyFailed",
        commands: &["RecordDestroyFailure"],
        reactions: &[],
        read_model: Some("destroy: failed, with the step and exit code"),
    },
    EventCard {
        event: "DeploymentDestroyed",
        commands: &["RequestDestroy", "RecordStepDestroyed"],
        reactions: &[],
        read_model: Some("destroy: destroyed"),
    },
    EventCard {
        event: "DeploymentRedriven",
        commands: &["Redrive"],
        reactions: &[],
        read_model: Some("its steps pending again, outputs cleared; deployment running again"),
    },
    EventCard {
        event: "HostKeysPinned",
        commands: &["PinHostKeys"],
        reactions: &[],
        read_model: None,
    },
    EventCard {
        event: "StepNetworkPolicyApplied",
        commands: &["RecordNetworkPolicy"],
        reactions: &[],
        read_model: None,
    },
    EventCard {
        event: "StepAwaitingServices",
        commands: &["ObserveServices"],
        reactions: &[Reaction::WakeAtDeadline],
        read_model: Some("step awaiting"),
    },
    EventCard {
        event: "ServicesResolved",
        commands: &["ObserveServices"],
        reactions: &[],
        read_model: None,
    },
    EventCard {
        event: "ServiceRegistered",
        commands: &["RegisterServices"],
        reactions: &[Reaction::WakeInterested],
        read_model: Some("registers the instance in the tenant's service registry"),
    },
    EventCard {
        event: "ServiceDeregistered",
        commands: &["RequestDestroy"],
        reactions: &[Reaction::WakeInterested],
        read_model: Some("removes the instance from the tenant's service registry"),
    },
    EventCard {
        event: "StepRerunRequested",
        commands: &["ObserveServices"],
        reactions: &[],
        read_model: Some("step pending again; deployment running again"),
    },
];

/// The card of an event type, if it has one.
pub fn card_of(event_type: &str) -> Option<&'static EventCard> {
    CARD.iter().find(|card| card.event == event_type)
}

/// The reactions of one reactor the card names for an event type.
pub fn reactions_of(event_type: &str, reactor: Reactor) -> Vec<Reaction> {
    card_of(event_type)
        .into_iter()
        .flat_map(|card| card.reactions.iter().copied())
        .filter(|reaction| reaction.reactor() == reactor)
        .collect()
}

/// The card as a Markdown table, one row per event, for `ARCHITECTURE.md`.
pub fn markdown() -> String {
    let mut table = String::from(
        "| Event | Recorded by the commands | Sets off | Read models |\n|---|---|---|---|\n",
    );
    for card in CARD {
        let commands = card
            .commands
            .iter()
            .map(|command| format!("`{command}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let reactions = match card.reactions {
            [] => "—".to_owned(),
            reactions => reactions
                .iter()
                .map(Reaction::words)
                .collect::<Vec<_>>()
                .join("; "),
        };
        table.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            card.event,
            commands,
            reactions,
            card.read_model.unwrap_or("—"),
        ));
    }
    table
}
