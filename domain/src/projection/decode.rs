//! [`Change::decode`]: an event's change read straight from the log's text, decoding only the
//! fields the views need (a rebuild's fast path). It agrees with [`Change::from`].

use std::collections::BTreeMap;

use overture_events::deployment::SchemaError;
use overture_events::{CloudAccount, DeploymentEvent, DeploymentId, ErrorClass};
use serde::Deserialize;

use super::change::services_of;
use super::{Change, ProjectLabel, ProjectionError};
use crate::tenancy::tenant_of;

impl Change {
    /// Reads the change of an event from its type and its data as the log stores it (JSON
    /// text), decoding only the fields the views need: the fast path of a rebuild. It agrees
    /// with decoding the whole [`DeploymentEvent`] and converting it.
    pub fn decode(event_type: &str, data: &str) -> Result<Change, ProjectionError> {
        let record = Record { event_type, data };
        let change = match event_type {
            "DeploymentRequested" => record.read::<RequestedFields>()?.into(),
            "StepScheduled" => Change::StepScheduled {
                step: record.step()?,
            },
            "StepRetryScheduled" => Change::StepRetryScheduled {
                step: record.step()?,
            },
            "StepAwaitingServices" => Change::StepAwaitingServices {
                step: record.step()?,
            },
            "StepRerunRequested" => Change::StepRerun {
                step: record.step()?,
            },
            "StepStarted" => record.read::<StartedFields>()?.into(),
            "StepSucceeded" => record.read::<SucceededFields>()?.into(),
            "StepAttemptFailed" => record.read::<AttemptFailedFields>()?.into(),
            "StepFailed" => Change::StepFailed {
                step: record.step()?,
            },
            "StepAbandoned" => Change::StepAbandoned {
                step: record.step()?,
            },
            "DeploymentSucceeded" => Change::Succeeded,
            "DeploymentFailed" => Change::Failed {
                reason: record.reason()?,
            },
            "DeploymentCancelled" => Change::Cancelled {
                reason: record.reason()?,
            },
            "DestroyRequested" => Change::DestroyRequested,
            "StepDestroyFailed" => record.read::<DestroyFailedFields>()?.into(),
            "DeploymentDestroyed" => Change::Destroyed,
            "DeploymentRedriven" => Change::Redriven {
                steps: record.read::<StepsField>()?.steps,
            },
            "CredentialsSealed" => record.read::<SealedFields>()?.into(),
            "BastionAccessGranted" => record.read::<GrantedFields>()?.into(),
            "BastionAccessRevoked" => Change::BastionAccessRevoked {
                kept_for: record.read::<RevokedFields>()?.kept_for,
            },
            "SecretsPurged" => Change::SecretsPurged,
            "ServiceRegistered" => record.read::<RegisteredFields>()?.into(),
            "ServiceDeregistered" => record.read::<DeregisteredFields>()?.into(),
            "StepJobDeadLettered"
            | "HostKeysPinned"
            | "StepNetworkPolicyApplied"
            | "StepDestroyed"
            | "FailureGracePeriodStarted"
            | "CancellationRequested"
            | "ServicesResolved" => Change::Nothing,
            // Not a type this build knows: the whole decoding says why.
            _ => {
                let data = record.read::<serde_json::Value>()?;
                DeploymentEvent::from_parts(event_type, data)?.into()
            }
        };
        Ok(change)
    }
}

/// A record as the log stores it: its type and its data's JSON text.
struct Record<'a> {
    event_type: &'a str,
    data: &'a str,
}

impl<'a> Record<'a> {
    /// The fields `T` names, or why the data does not hold them.
    fn read<T: Deserialize<'a>>(&self) -> Result<T, SchemaError> {
        serde_json::from_str(self.data).map_err(|source| SchemaError {
            event_type: self.event_type.to_owned(),
            source,
        })
    }

    /// The step the event is about.
    fn step(&self) -> Result<String, SchemaError> {
        Ok(self.read::<StepField>()?.step)
    }

    /// Why the deployment ended.
    fn reason(&self) -> Result<String, SchemaError> {
        Ok(self.read::<ReasonField>()?.reason)
    }
}

/// The fields of `DeploymentRequested` the views need.
#[derive(Deserialize)]
struct RequestedFields {
    tenant: String,
    #[serde(default)]
    cloud: Option<CloudAccount>,
    blueprint: BlueprintFields,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct BlueprintFields {
    name: String,
    steps: Vec<StepName>,
}

#[derive(Deserialize)]
struct StepName {
    name: String,
    #[serde(default)]
    requires: Vec<ServiceField>,
    #[serde(default)]
    watch: Vec<String>,
}

#[derive(Deserialize)]
struct ServiceField {
    service: String,
}

impl From<RequestedFields> for Change {
    fn from(fields: RequestedFields) -> Self {
        let steps = &fields.blueprint.steps;
        Change::Requested {
            name: fields.name,
            tenant: tenant_of(&fields.tenant, fields.cloud.as_ref()).to_owned(),
            project: ProjectLabel::of(fields.cloud.as_ref()),
            services: services_of(steps.iter().map(|s| {
                (
                    s.requires.iter().map(|need| need.service.as_str()),
                    s.watch.iter().map(String::as_str),
                )
            })),
            blueprint: fields.blueprint.name,
            steps: fields.blueprint.steps.into_iter().map(|s| s.name).collect(),
        }
    }
}

#[derive(Deserialize)]
struct StepField {
    step: String,
}

#[derive(Deserialize)]
struct ReasonField {
    reason: String,
}

#[derive(Deserialize)]
struct StepsField {
    steps: Vec<String>,
}

#[derive(Deserialize)]
struct StartedFields {
    step: String,
    attempt: u32,
}

impl From<StartedFields> for Change {
    fn from(StartedFields { step, attempt }: StartedFields) -> Self {
        Change::StepStarted { step, attempt }
    }
}

#[derive(Deserialize)]
struct SucceededFields {
    step: String,
    outputs: BTreeMap<String, String>,
}

impl From<SucceededFields> for Change {
    fn from(SucceededFields { step, outputs }: SucceededFields) -> Self {
        Change::StepSucceeded { step, outputs }
    }
}

#[derive(Deserialize)]
struct AttemptFailedFields {
    step: String,
    error_class: ErrorClass,
}

impl From<AttemptFailedFields> for Change {
    fn from(AttemptFailedFields { step, error_class }: AttemptFailedFields) -> Self {
        Change::StepAttemptFailed { step, error_class }
    }
}

#[derive(Deserialize)]
struct DestroyFailedFields {
    step: String,
    exit_code: Option<i32>,
}

impl From<DestroyFailedFields> for Change {
    fn from(DestroyFailedFields { step, exit_code }: DestroyFailedFields) -> Self {
        Change::StepDestroyFailed { step, exit_code }
    }
}

#[derive(Deserialize)]
struct SealedFields {
    seal: String,
    #[serde(default)]
    ssh_public_key: Option<String>,
    #[serde(default)]
    token: bool,
}

impl From<SealedFields> for Change {
    fn from(fields: SealedFields) -> Self {
        Change::CredentialsSealed {
            seal: fields.seal,
            ssh_public_key: fields.ssh_public_key,
            token: fields.token,
        }
    }
}

#[derive(Deserialize)]
struct GrantedFields {
    rule: String,
    security_group: String,
    bastion: String,
    source: String,
    port: u16,
}

impl From<GrantedFields> for Change {
    fn from(fields: GrantedFields) -> Self {
        Change::BastionAccessGranted {
            rule: fields.rule,
            security_group: fields.security_group,
            bastion: fields.bastion,
            source: fields.source,
            port: fields.port,
        }
    }
}

#[derive(Deserialize)]
struct RevokedFields {
    #[serde(default)]
    kept_for: Vec<DeploymentId>,
}

#[derive(Deserialize)]
struct RegisteredFields {
    service: String,
    step: String,
    host: String,
    address: String,
    port: u16,
}

impl From<RegisteredFields> for Change {
    fn from(fields: RegisteredFields) -> Self {
        Change::ServiceRegistered {
            service: fields.service,
            step: fields.step,
            host: fields.host,
            address: fields.address,
            port: fields.port,
        }
    }
}

#[derive(Deserialize)]
struct DeregisteredFields {
    service: String,
    address: String,
    port: u16,
}

impl From<DeregisteredFields> for Change {
    fn from(fields: DeregisteredFields) -> Self {
        Change::ServiceDeregistered {
            service: fields.service,
            address: fields.address,
            port: fields.port,
        }
    }
}
