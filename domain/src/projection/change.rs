//! What each event changes in the read models: the projection's subscription, one match from
//! event to [`Change`].

use std::collections::BTreeMap;

use overture_events::{DeploymentEvent, DeploymentId, ErrorClass};

use super::ProjectLabel;
use crate::tenancy::tenant_of;

/// An event decoded only as far as the read models need: what [`project`] and
/// [`ReadModels`] fold.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// `DeploymentRequested`: the view starts, its steps pending.
    Requested {
        /// The tenant: the project's id when the record has a cloud account
        /// ([`crate::tenancy::tenant_of`]).
        tenant: String,
        /// The project, for people.
        project: Option<ProjectLabel>,
        /// The blueprint's name.
        blueprint: String,
        /// The blueprint's steps, in order.
        steps: Vec<String>,
        /// The services its steps require or watch: whether some step watches each.
        services: BTreeMap<String, bool>,
        /// The name the user gave it, if any.
        name: Option<String>,
    },
    /// `StepScheduled`.
    StepScheduled {
        /// The step.
        step: String,
    },
    /// `StepRetryScheduled`.
    StepRetryScheduled {
        /// The step.
        step: String,
    },
    /// `StepAwaitingServices`.
    StepAwaitingServices {
        /// The step.
        step: String,
    },
    /// `StepRerunRequested`: a watched service changed, the step runs again.
    StepRerun {
        /// The step.
        step: String,
    },
    /// `StepStarted`.
    StepStarted {
        /// The step.
        step: String,
        /// The attempt.
        attempt: u32,
    },
    /// `StepSucceeded`.
    StepSucceeded {
        /// The step.
        step: String,
        /// Its outputs (masked).
        outputs: BTreeMap<String, String>,
    },
    /// `StepAttemptFailed`.
    StepAttemptFailed {
        /// The step.
        step: String,
        /// Why the attempt failed.
        error_class: ErrorClass,
    },
    /// `StepFailed`.
    StepFailed {
        /// The step.
        step: String,
    },
    /// `StepAbandoned`.
    StepAbandoned {
        /// The step.
        step: String,
    },
    /// `DeploymentSucceeded`.
    Succeeded,
    /// `DeploymentFailed`.
    Failed {
        /// Why.
        reason: String,
    },
    /// `DeploymentCancelled`.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// `DestroyRequested`.
    DestroyRequested,
    /// `StepDestroyFailed`.
    StepDestroyFailed {
        /// The step.
        step: String,
        /// The exit code, if the command exited.
        exit_code: Option<i32>,
    },
    /// `DeploymentDestroyed`.
    Destroyed,
    /// `DeploymentRedriven`.
    Redriven {
        /// The steps run again.
        steps: Vec<String>,
    },
    /// `CredentialsSealed`.
    CredentialsSealed {
        /// Where the sealed values are kept.
        seal: String,
        /// The deployment's SSH public key, if it has one.
        ssh_public_key: Option<String>,
        /// Whether the user's token is sealed too.
        token: bool,
    },
    /// `BastionAccessGranted`.
    BastionAccessGranted {
        /// The rule's id.
        rule: String,
        /// The bastion's security group.
        security_group: String,
        /// The bastion's address.
        bastion: String,
        /// The address admitted.
        source: String,
        /// The port admitted.
        port: u16,
    },
    /// `BastionAccessRevoked`.
    BastionAccessRevoked {
        /// The deployments the rule was kept for.
        kept_for: Vec<DeploymentId>,
    },
    /// `SecretsPurged`.
    SecretsPurged,
    /// `ServiceRegistered`: an instance joins the tenant's registry.
    ServiceRegistered {
        /// The service.
        service: String,
        /// The step that configured the host.
        step: String,
        /// The server.
        host: String,
        /// Where the service answers.
        address: String,
        /// Its port.
        port: u16,
    },
    /// `ServiceDeregistered`: an instance leaves it.
    ServiceDeregistered {
        /// The service.
        service: String,
        /// Where it answered.
        address: String,
        /// Its port.
        port: u16,
    },
    /// An event that changes no view.
    Nothing,
}

impl From<DeploymentEvent> for Change {
    fn from(event: DeploymentEvent) -> Self {
        use DeploymentEvent as E;
        match event {
            E::DeploymentRequested {
                tenant,
                blueprint,
                cloud,
                name,
                ..
            } => Change::Requested {
                name,
                tenant: tenant_of(&tenant, cloud.as_ref()).to_owned(),
                project: ProjectLabel::of(cloud.as_ref()),
                services: services_of(blueprint.steps.iter().map(|s| {
                    (
                        s.requires.iter().map(|need| need.service.as_str()),
                        s.watch.iter().map(String::as_str),
                    )
                })),
                steps: blueprint.steps.into_iter().map(|s| s.name).collect(),
                blueprint: blueprint.name,
            },
            E::StepScheduled { step, .. } => Change::StepScheduled { step },
            E::StepRetryScheduled { step, .. } => Change::StepRetryScheduled { step },
            E::StepAwaitingServices { step, .. } => Change::StepAwaitingServices { step },
            E::StepRerunRequested { step, .. } => Change::StepRerun { step },
            E::StepStarted { step, attempt, .. } => Change::StepStarted { step, attempt },
            E::StepSucceeded { step, outputs, .. } => Change::StepSucceeded { step, outputs },
            E::StepAttemptFailed {
                step, error_class, ..
            } => Change::StepAttemptFailed { step, error_class },
            E::StepFailed { step, .. } => Change::StepFailed { step },
            E::StepAbandoned { step, .. } => Change::StepAbandoned { step },
            E::DeploymentSucceeded {} => Change::Succeeded,
            E::DeploymentFailed { reason } => Change::Failed { reason },
            E::DeploymentCancelled { reason, .. } => Change::Cancelled { reason },
            E::DestroyRequested { .. } => Change::DestroyRequested,
            E::StepDestroyFailed {
                step, exit_code, ..
            } => Change::StepDestroyFailed { step, exit_code },
            E::DeploymentDestroyed {} => Change::Destroyed,
            E::DeploymentRedriven { steps, .. } => Change::Redriven { steps },
            E::CredentialsSealed {
                seal,
                ssh_public_key,
                token,
                ..
            } => Change::CredentialsSealed {
                seal,
                ssh_public_key,
                token,
            },
            E::BastionAccessGranted {
                rule,
                security_group,
                bastion,
                source,
                port,
            } => Change::BastionAccessGranted {
                rule,
                security_group,
                bastion,
                source,
                port,
            },
            E::BastionAccessRevoked { kept_for, .. } => Change::BastionAccessRevoked { kept_for },
            E::SecretsPurged {} => Change::SecretsPurged,
            E::ServiceRegistered {
                service,
                step,
                host,
                address,
                port,
            } => Change::ServiceRegistered {
                service,
                step,
                host,
                address,
                port,
            },
            E::ServiceDeregistered {
                service,
                address,
                port,
                ..
            } => Change::ServiceDeregistered {
                service,
                address,
                port,
            },
            // The attempt's failure, which follows, is what the view shows.
            E::StepJobDeadLettered { .. }
            | E::HostKeysPinned { .. }
            | E::StepNetworkPolicyApplied { .. }
            | E::StepDestroyed { .. }
            | E::FailureGracePeriodStarted { .. }
            | E::CancellationRequested { .. }
            // The members a step's attempt saw: the registry's own records say what changed.
            | E::ServicesResolved { .. } => Change::Nothing,
        }
    }
}

impl Change {
    /// The steps whose views it may change, by name.
    pub fn steps(&self) -> &[String] {
        match self {
            Change::StepScheduled { step }
            | Change::StepRetryScheduled { step }
            | Change::StepAwaitingServices { step }
            | Change::StepRerun { step }
            | Change::StepStarted { step, .. }
            | Change::StepSucceeded { step, .. }
            | Change::StepAttemptFailed { step, .. }
            | Change::StepFailed { step }
            | Change::StepAbandoned { step } => std::slice::from_ref(step),
            Change::Redriven { steps } => steps,
            _ => &[],
        }
    }
}

/// The services steps require or watch (each step's required and watched names): whether
/// some step watches each.
pub(super) fn services_of<'a, R, W>(steps: impl Iterator<Item = (R, W)>) -> BTreeMap<String, bool>
where
    R: Iterator<Item = &'a str>,
    W: Iterator<Item = &'a str>,
{
    let mut services = BTreeMap::new();
    for (requires, watch) in steps {
        for service in requires {
            services.entry(service.to_owned()).or_insert(false);
        }
        for service in watch {
            services.insert(service.to_owned(), true);
        }
    }
    services
}
