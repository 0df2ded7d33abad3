//! Builders of a deployment's events and commands, with the values tests take for granted
//! (tenant `acme`, requested by `ada` from the CLI, an attempt's failure `boom` with exit 1),
//! and one sample event of every type.

use std::collections::BTreeMap;

use overture_events::{
    BlueprintSnapshot, DeploymentEvent as E, DeploymentId, Envelope, ErrorClass, HostKeySource,
    Metadata, PinnedHostKey, ServiceShortfall, Timestamp,
};

use super::t;
use crate::deployment::{DeploymentCommand as C, SealedCredentials};
use crate::services::ServiceInstance;

/// The blueprint the YAML declares; fails the test if it is not valid.
#[track_caller]
pub fn blueprint(yaml: &str) -> BlueprintSnapshot {
    match crate::blueprint::parse(yaml) {
        Ok(parsed) => parsed.snapshot,
        Err(error) => panic!("the test's blueprint is not valid: {error}"),
    }
}

/// A deployment of the blueprint, requested by `ada` of tenant `acme` from the CLI, read from
/// `source`; no parameters, cloud or trigger.
pub fn requested(source: &str, blueprint: BlueprintSnapshot) -> E {
    E::DeploymentRequested {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: source.into(),
        blueprint,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

/// The command [`requested`] records (its source `b.yaml`), with what was sealed.
pub fn request(blueprint: BlueprintSnapshot, sealed: Option<SealedCredentials>) -> C {
    request_from("b.yaml", blueprint, sealed)
}

/// The command [`requested`] records, read from `source`, with what was sealed.
pub fn request_from(
    source: &str,
    blueprint: BlueprintSnapshot,
    sealed: Option<SealedCredentials>,
) -> C {
    C::Request {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: source.into(),
        blueprint,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        sealed,
        name: None,
    }
}

/// The first attempt (or the run's first) of a step may start at `t(at)`.
pub fn scheduled(step: &str, attempt: u32, at: i64) -> E {
    E::StepScheduled {
        step: step.into(),
        attempt,
        not_before: t(at),
    }
}

/// The attempt started in sandbox `STEP-ATTEMPT`, recorded with no lease.
pub fn started(step: &str, attempt: u32) -> E {
    E::StepStarted {
        step: step.into(),
        attempt,
        sandbox: format!("{step}-{attempt}"),
        lease_until: None,
        fingerprint: None,
    }
}

/// The attempt started in sandbox `STEP-ATTEMPT`, its lease lasting until `lease_until`.
pub fn started_until(step: &str, attempt: u32, lease_until: Timestamp) -> E {
    E::StepStarted {
        step: step.into(),
        attempt,
        sandbox: format!("{step}-{attempt}"),
        lease_until: Some(lease_until),
        fingerprint: None,
    }
}

/// The attempt succeeded with no outputs, in 1 ms.
pub fn succeeded(step: &str, attempt: u32) -> E {
    succeeded_with(step, attempt, &[])
}

/// The attempt succeeded with these outputs, in 1 ms.
pub fn succeeded_with(step: &str, attempt: u32, outputs: &[(&str, &str)]) -> E {
    E::StepSucceeded {
        step: step.into(),
        attempt,
        outputs: outputs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        duration_ms: 1,
    }
}

/// The attempt was scheduled at `t(at)`, started and succeeded.
pub fn ran(step: &str, attempt: u32, at: i64) -> [E; 3] {
    [
        scheduled(step, attempt, at),
        started(step, attempt),
        succeeded(step, attempt),
    ]
}

/// The attempt failed with this class: exit 1, `boom`, 1 ms.
pub fn attempt_failed(step: &str, attempt: u32, class: ErrorClass) -> E {
    E::StepAttemptFailed {
        step: step.into(),
        attempt,
        error_class: class,
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
    }
}

/// The step failed for good as `step-failed`.
pub fn failed(step: &str, attempts: u32) -> E {
    E::StepFailed {
        step: step.into(),
        attempts,
        error_class: ErrorClass::StepFailed,
    }
}

/// The step was given up on.
pub fn abandoned(step: &str, attempt: u32, reason: &str) -> E {
    E::StepAbandoned {
        step: step.into(),
        attempt,
        reason: reason.into(),
    }
}

/// The members of each service the step's next attempt sees, `ADDRESS:PORT`.
pub fn resolved(step: &str, services: &[(&str, &[&str])]) -> E {
    E::ServicesResolved {
        step: step.into(),
        services: services
            .iter()
            .map(|(service, members)| {
                (
                    (*service).to_owned(),
                    members.iter().map(|m| (*m).to_owned()).collect(),
                )
            })
            .collect(),
    }
}

/// The instance was registered for the tenant.
pub fn registered(instance: &ServiceInstance) -> E {
    E::ServiceRegistered {
        service: instance.service.clone(),
        step: instance.step.clone(),
        host: instance.host.clone(),
        address: instance.address.clone(),
        port: instance.port,
    }
}

/// The instance left the registry because its deployment is being destroyed.
pub fn deregistered(instance: &ServiceInstance) -> E {
    E::ServiceDeregistered {
        service: instance.service.clone(),
        step: instance.step.clone(),
        host: instance.host.clone(),
        address: instance.address.clone(),
        port: instance.port,
        reason: "its deployment is being destroyed".into(),
    }
}

/// An instance of `service` that `step` registered on `address` (its host named by it).
pub fn instance(service: &str, step: &str, address: &str, port: u16) -> ServiceInstance {
    ServiceInstance {
        service: service.into(),
        step: step.into(),
        host: address.into(),
        address: address.into(),
        port,
    }
}

/// Move on at `t(at)`.
pub fn advance(at: i64) -> C {
    C::Advance { now: t(at) }
}

/// Start the attempt at `t(now)`, in sandbox `STEP-ATTEMPT`.
pub fn start(step: &str, attempt: u32, now: i64) -> C {
    C::StartAttempt {
        step: step.into(),
        attempt,
        sandbox: format!("{step}-{attempt}"),
        now: t(now),
    }
}

/// Record the attempt's success, no outputs, in 1 ms.
pub fn success(step: &str, attempt: u32) -> C {
    C::RecordSuccess {
        step: step.into(),
        attempt,
        outputs: BTreeMap::new(),
        duration_ms: 1,
    }
}

/// Record the attempt's failure at `t(now)`, as [`attempt_failed`] has it.
pub fn failure(step: &str, attempt: u32, class: ErrorClass, now: i64) -> C {
    C::RecordFailure {
        step: step.into(),
        attempt,
        error_class: class,
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
        now: t(now),
    }
}

/// The stream as the log holds it: each event at its revision (from 0) and instant, recorded
/// by `test` for tenant `acme`, with ids derived from the deployment's and the revision.
pub fn envelopes(id: DeploymentId, events: &[(E, Timestamp)]) -> Vec<Envelope> {
    events
        .iter()
        .enumerate()
        .map(|(revision, (event, at))| Envelope {
            stream: id.stream(),
            revision: revision as u64,
            id: uuid::Uuid::from_u128(id.uuid().as_u128() ^ (revision as u128 + 1)),
            event_type: event.event_type().into(),
            data: event.data(),
            metadata: Metadata {
                tenant: "acme".into(),
                actor: "test".into(),
                correlation_id: id.uuid(),
                causation_id: id.uuid(),
                recorded_at: *at,
                previous: None,
                hash: None,
            },
        })
        .collect()
}

/// An ed25519 public key made by `ssh-keygen`, base64.
pub const SSH_KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAfBWyWT1kqcBW4flZkhx+YZ0qby94sbtGBA2zMPVSew";

/// One event of every type, in the order [`E::TYPES`] lists them: a deployment of one step
/// `build` (the blueprint `b`), its first attempt, at `t(0)` and later. Read in order, as one
/// stream, each changes what the ones before it left (the seal's grants are closed by the
/// purge, the deployment that succeeded fails, ...), though no aggregate would decide them so.
pub fn samples() -> Vec<E> {
    let db = instance("db", "build", "10.0.0.5", 5432);
    vec![
        requested(
            "b.yaml",
            blueprint("name: b\nsteps:\n  build: { run: noop }\n"),
        ),
        E::CredentialsSealed {
            seal: "seal-1".into(),
            secrets: vec!["api_key".into()],
            ssh_public_key: Some(format!("ssh-ed25519 {SSH_KEY} overture")),
            token: true,
        },
        scheduled("build", 1, 0),
        started_until("build", 1, t(660)),
        succeeded("build", 1),
        attempt_failed("build", 1, ErrorClass::StepFailed),
        E::StepJobDeadLettered {
            step: "build".into(),
            attempt: 1,
            receives: 3,
        },
        E::StepRetryScheduled {
            step: "build".into(),
            attempt: 1,
            next_attempt: 2,
            delay_ms: 5_000,
            not_before: t(5),
        },
        failed("build", 1),
        E::FailureGracePeriodStarted {
            failed_step: "build".into(),
            deadline: t(60),
        },
        abandoned("build", 1, "cancelled by ada"),
        E::BastionAccessGranted {
            rule: "r1".into(),
            security_group: "sg-bastion".into(),
            bastion: "203.0.113.7".into(),
            source: "198.51.100.1/32".into(),
            port: 22,
        },
        E::BastionAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        },
        E::SecretsPurged {},
        E::DeploymentSucceeded {},
        E::DeploymentFailed {
            reason: "step `build` failed after 1 attempt(s) (step-failed)".into(),
        },
        E::CancellationRequested {
            requested_by: "ada".into(),
            reason: "wrong branch".into(),
        },
        E::DeploymentCancelled {
            reason: "wrong branch".into(),
            requested_by: "ada".into(),
        },
        E::DestroyRequested {
            steps: vec!["build".into()],
        },
        E::StepDestroyed {
            step: "build".into(),
            duration_ms: 1,
        },
        E::StepDestroyFailed {
            step: "build".into(),
            exit_code: Some(1),
            message: "boom".into(),
            duration_ms: 1,
        },
        E::DeploymentDestroyed {},
        E::DeploymentRedriven {
            requested_by: "ada".into(),
            steps: vec!["build".into()],
        },
        E::HostKeysPinned {
            server: "web-1".into(),
            host: "10.0.0.5".into(),
            learned: HostKeySource::Console,
            keys: vec![PinnedHostKey {
                key_type: "ssh-ed25519".into(),
                fingerprint: "SHA256:x".into(),
                public_key: "AAAA".into(),
            }],
        },
        E::StepNetworkPolicyApplied {
            step: "build".into(),
            attempt: 1,
            allowed: vec!["10.0.0.5:22".into()],
        },
        E::StepAwaitingServices {
            step: "build".into(),
            waiting_for: vec![ServiceShortfall {
                service: "db".into(),
                count: 1,
                registered: 0,
            }],
            deadline: t(60),
        },
        E::ServicesResolved {
            step: "build".into(),
            services: BTreeMap::from([("db".into(), vec!["10.0.0.5:5432".into()])]),
        },
        registered(&db),
        deregistered(&db),
        E::StepRerunRequested {
            step: "build".into(),
            service: "db".into(),
            from: vec![],
            to: vec!["10.0.0.5:5432".into()],
        },
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_samples_are_one_of_every_type_in_order() {
        let types: Vec<&str> = super::samples().iter().map(|e| e.event_type()).collect();
        assert_eq!(types, overture_events::DeploymentEvent::TYPES);
    }
}
