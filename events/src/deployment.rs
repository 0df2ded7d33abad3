//! The events of a deployment.
//!
//! Each variant's name is its stable type string in the log (`StepSucceeded`, ...) and its fields
//! are the envelope's `data`. Step events name the `step` and the 1-based `attempt`.
//! A variant is never edited once released: a changed shape is a new type string. The one
//! change allowed in place is a new optional field whose absence means what every event
//! recorded before it meant (`cloud`, `triggered_by`): old records then read unchanged, and an
//! upcaster would be the identity.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{BlueprintSnapshot, ErrorClass, Timestamp};

/// Declares [`DeploymentEvent`] and derives its type strings from the variants' names, so that
/// each name is written once: a new variant is in [`DeploymentEvent::TYPES`] and
/// [`DeploymentEvent::event_type`] by being declared, and serde's tag is the same name.
macro_rules! deployment_events {
    (
        $(#[$enum_meta:meta])*
        pub enum DeploymentEvent {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident { $($fields:tt)* }
            ),* $(,)?
        }
    ) => {
        $(#[$enum_meta])*
        pub enum DeploymentEvent {
            $( $(#[$variant_meta])* $variant { $($fields)* }, )*
        }

        impl DeploymentEvent {
            /// Every type string, in the order the variants are declared: what
            /// `overture events --type` accepts.
            pub const TYPES: [&'static str; [$(stringify!($variant)),*].len()] =
                [$(stringify!($variant)),*];

            /// The stable type string of this event.
            pub const fn event_type(&self) -> &'static str {
                match self {
                    $( Self::$variant { .. } => stringify!($variant), )*
                }
            }
        }
    };
}

deployment_events! {
    /// Everything that can happen to a deployment.
    // `DeploymentRequested` carries the whole blueprint; it is recorded once per deployment, so
    // boxing it to shrink the other variants would buy nothing but noisier matches.
    #[allow(clippy::large_enum_variant)]
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type", content = "data")]
    pub enum DeploymentEvent {
        /// A user asked for a deployment of a blueprint.
        DeploymentRequested {
            /// The tenant that owns it.
            tenant: String,
            /// The user who asked.
            requested_by: String,
            /// What asked: `cli`, `http`, `redeploy`, or an event that triggered it.
            trigger: String,
            /// Where the blueprint was read from, for people; a redeploy's is the deployment it
            /// came from, as `deployment:ID`.
            source: String,
            /// The blueprint as validated when it was requested.
            blueprint: BlueprintSnapshot,
            /// SHA-256 of the blueprint's text, hex.
            blueprint_hash: String,
            /// Every parameter's value, defaults filled in.
            params: BTreeMap<String, String>,
            /// The cloud account whose token the deployment acts with, when it was given one.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            cloud: Option<CloudAccount>,
            /// The trigger and the event that started it, when a trigger did.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            triggered_by: Option<TriggeredBy>,
            /// The name the user gave it (`--name`), unique among its tenant's deployments
            /// that are not destroyed; none when it was given none.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            name: Option<String>,
        },
        /// The deployment's secrets were sealed; this carries references, never values.
        CredentialsSealed {
            /// Where the sealed values are kept.
            seal: String,
            /// The names of the sealed secrets.
            secrets: Vec<String>,
            /// The public half of the deployment's own SSH key, in OpenSSH format, when it has one
            /// (its private half is sealed with the secrets).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            ssh_public_key: Option<String>,
            /// Whether the user's cloud token is sealed too (it then also locks the seal).
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            token: bool,
        },
        /// An attempt of a step may start once `not_before` has passed.
        StepScheduled {
            step: String,
            attempt: u32,
            not_before: Timestamp,
        },
        /// An attempt of a step started in a sandbox.
        StepStarted {
            step: String,
            attempt: u32,
            sandbox: String,
            /// Until when the attempt may run without being heard from: its timeout and a margin.
            /// Before then, a second delivery of its job finds it running, not interrupted.
            /// Events recorded before leases existed have none.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            lease_until: Option<Timestamp>,
            /// What the attempt runs with: a digest of each of its inputs (settings, files,
            /// parameters, upstream outputs, service members, kind, limits), never a secret's
            /// value. Events recorded before fingerprints have none: their inputs are unknown.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            fingerprint: Option<crate::InputFingerprint>,
        },
        /// An attempt succeeded; the step is done.
        StepSucceeded {
            step: String,
            attempt: u32,
            /// Masked: no secret value is ever stored here.
            outputs: BTreeMap<String, String>,
            duration_ms: u64,
        },
        /// An attempt failed; the retry policy decides what follows.
        StepAttemptFailed {
            step: String,
            attempt: u32,
            error_class: ErrorClass,
            /// The process's exit code, when it exited on its own.
            exit_code: Option<i32>,
            /// What went wrong and the last lines of output, masked.
            message: String,
            duration_ms: u64,
        },
        /// The queue gave up on an attempt's job: it was delivered `receives` times (as SQS counts,
        /// approximately) without the attempt's outcome being recorded, and was moved to the
        /// dead-letter queue. The attempt's failure (class `interrupted`) follows.
        StepJobDeadLettered {
            step: String,
            attempt: u32,
            receives: u32,
        },
        /// Another attempt will be made after a wait.
        StepRetryScheduled {
            step: String,
            /// The attempt that failed.
            attempt: u32,
            next_attempt: u32,
            delay_ms: u64,
            not_before: Timestamp,
        },
        /// The step failed for good; the deployment will fail.
        StepFailed {
            step: String,
            attempts: u32,
            error_class: ErrorClass,
        },
        /// Steps still running may finish until `deadline`, then they are abandoned.
        FailureGracePeriodStarted {
            failed_step: String,
            deadline: Timestamp,
        },
        /// A step was given up on because the deployment is failing.
        StepAbandoned {
            step: String,
            /// The attempt that was running or waiting, if any.
            attempt: u32,
            reason: String,
        },
        /// The engine added a rule to the bastion's security group admitting its own address.
        BastionAccessGranted {
            /// The rule's id in the cloud.
            rule: String,
            /// The bastion's security group.
            security_group: String,
            /// The bastion's address.
            bastion: String,
            /// The address admitted: the engine's own, as the bastion sees it.
            source: String,
            /// The port admitted.
            port: u16,
        },
        /// The deployment's lease on the engine's rule on the bastion closed: the rule was deleted,
        /// or, when other deployments still hold it, kept for them.
        BastionAccessRevoked {
            /// The rule's id in the cloud.
            rule: String,
            /// The deployments still holding the rule, for which it was kept; empty (and absent
            /// from records made before leases) when the rule was deleted.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            kept_for: Vec<crate::DeploymentId>,
        },
        /// The deployment's sealed secrets were deleted.
        SecretsPurged {},
        /// Every step succeeded.
        DeploymentSucceeded {},
        /// A step failed for good.
        DeploymentFailed { reason: String },
        /// A user asked to cancel the deployment: no step starts any more, and every running or
        /// waiting attempt is abandoned at once (no grace period).
        CancellationRequested {
            /// Who asked.
            requested_by: String,
            /// Why, in their words.
            reason: String,
        },
        /// A user cancelled the deployment; its bastion was closed and its secrets purged first.
        DeploymentCancelled {
            reason: String,
            /// Who asked.
            #[serde(default, skip_serializing_if = "String::is_empty")]
            requested_by: String,
        },
        /// A user asked to tear the deployment down: these steps' resources are destroyed, in order.
        DestroyRequested { steps: Vec<String> },
        /// A step's resources were destroyed.
        StepDestroyed { step: String, duration_ms: u64 },
        /// Destroying a step's resources failed; asking again carries on from this step.
        StepDestroyFailed {
            step: String,
            exit_code: Option<i32>,
            /// What went wrong and the last lines of output, masked.
            message: String,
            duration_ms: u64,
        },
        /// Every resource the deployment made has been destroyed.
        DeploymentDestroyed {},
        /// A user carried a failed deployment on: these steps (failed, abandoned, or never run
        /// because of them) run again, their attempts numbered on from the last; steps that
        /// succeeded keep their outputs. The deployment runs again, and ends as every run does.
        DeploymentRedriven {
            /// Who asked.
            requested_by: String,
            /// The steps to run again, in blueprint order.
            steps: Vec<String>,
        },
        /// The engine learned a server's SSH host keys; every later SSH connection to that server
        /// (the bastion's included) accepts exactly these keys and no other.
        HostKeysPinned {
            /// The server: its name in the step that made it, or its address when no step named it.
            server: String,
            /// The host as ssh's known_hosts names it: `host`, or `[host]:port` off port 22.
            host: String,
            /// How the keys were learned.
            learned: HostKeySource,
            /// The keys, one per key type.
            keys: Vec<PinnedHostKey>,
        },
        /// A networked step attempt's sandbox got a network of its own that reaches only these
        /// destinations; everything else (the host's loopback, 169.254.0.0/16) is refused.
        StepNetworkPolicyApplied {
            step: String,
            attempt: u32,
            /// `ADDRESS:PORT` (TCP), `ADDRESS` or `ADDRESS/PREFIX`, sorted.
            allowed: Vec<String>,
        },
        /// A step's needs succeeded, but a service it requires has too few registered instances:
        /// it waits for them, durably, and fails as `service-timeout` if `deadline` passes first.
        StepAwaitingServices {
            step: String,
            /// Each required service still short of its count.
            waiting_for: Vec<ServiceShortfall>,
            deadline: Timestamp,
        },
        /// The members of each service a step requires or watches, as its next attempt sees them
        /// (`{{ services.NAME.addresses }}`): `ADDRESS:PORT`, sorted.
        ServicesResolved {
            step: String,
            services: BTreeMap<String, Vec<String>>,
        },
        /// A host of a step that provides a service answered the service's check: the instance is
        /// registered for the tenant, and runs (it is not one that only will).
        ServiceRegistered {
            service: String,
            /// The step that configured it.
            step: String,
            /// The server: its name in the step that made it, or its address.
            host: String,
            address: String,
            port: u16,
        },
        /// An instance left the tenant's registry (its deployment is being destroyed).
        ServiceDeregistered {
            service: String,
            step: String,
            host: String,
            address: String,
            port: u16,
            reason: String,
        },
        /// A service the step watches changed its members since the step last ran: it runs again,
        /// as a new attempt.
        StepRerunRequested {
            step: String,
            service: String,
            /// The members the step last ran with, `ADDRESS:PORT`, sorted.
            from: Vec<String>,
            /// The members now.
            to: Vec<String>,
        },
    }
}

/// A required service short of its count when a step began to wait for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceShortfall {
    /// The service.
    pub service: String,
    /// How many instances the step needs.
    pub count: u32,
    /// How many were registered.
    pub registered: u32,
}

/// How the engine learned a server's host keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKeySource {
    /// From the server's console output, as the cloud serves it (cloud-init prints them at
    /// boot): what the cloud says it made.
    Console,
    /// From the server itself on the engine's first connection (trust on first use): the cloud
    /// gave no console output, or the server is not one the engine made.
    FirstUse,
}

impl HostKeySource {
    /// The name events use.
    pub const fn as_str(&self) -> &'static str {
        match self {
            HostKeySource::Console => "console",
            HostKeySource::FirstUse => "first-use",
        }
    }
}

/// One pinned SSH host key. A public host key is no secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedHostKey {
    /// Its algorithm, as OpenSSH names it (`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`).
    pub key_type: String,
    /// `SHA256:` and the unpadded base64 of the SHA-256 of the key, as `ssh-keygen -l` shows it.
    pub fingerprint: String,
    /// The key's base64 blob, as in an `authorized_keys` or `known_hosts` line.
    pub public_key: String,
}

/// The cloud account a deployment acts for: who the user's token says they are. Never the
/// token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudAccount {
    /// The identity endpoint the token was checked against (`OS_AUTH_URL`).
    pub auth_url: String,
    /// The project's id in the cloud: the deployment's tenant (ids are never reused; names are
    /// unique only within a domain, and a project deleted and made again keeps its name).
    pub project_id: String,
    /// The project's name, for people.
    pub project: String,
    /// The name of the project's Keystone domain, for people. Empty in accounts recorded before
    /// it was kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// The user the token was issued to.
    pub user: String,
    /// The `host:port` of each public endpoint in the token's service catalog (Nova, Neutron,
    /// Keystone and the rest), the ones a step acting with the token may reach. Empty in
    /// accounts recorded before it was kept: then only the identity URL's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
}

/// The trigger that started a deployment, and the event it started it for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggeredBy {
    /// The trigger's name in its trigger file.
    pub trigger: String,
    /// The event's `source`.
    pub source: String,
    /// The event's `id`, unique within its source.
    pub event_id: String,
    /// How many deployments deep in a chain of triggers the event was (0 from outside): the
    /// deployment's own end is published one deeper.
    pub depth: u32,
}

/// An event whose type string or data does not match the schema.
#[derive(Debug, thiserror::Error)]
#[error("event of type `{event_type}` does not match the schema: {source}")]
pub struct SchemaError {
    /// The type string found in the log.
    pub event_type: String,
    /// What serde said.
    #[source]
    pub source: serde_json::Error,
}

impl DeploymentEvent {
    /// The envelope's `data` for this event.
    pub fn data(&self) -> serde_json::Value {
        // Adjacent tagging puts the fields under "data"; serialising our own types cannot fail.
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut tagged)) => tagged
                .remove("data")
                .unwrap_or(serde_json::Value::Object(Default::default())),
            _ => serde_json::Value::Object(Default::default()),
        }
    }

    /// Reads an event back from its type string and data.
    pub fn from_parts(event_type: &str, data: serde_json::Value) -> Result<Self, SchemaError> {
        let tagged = serde_json::json!({ "type": event_type, "data": data });
        serde_json::from_value(tagged).map_err(|source| SchemaError {
            event_type: event_type.to_owned(),
            source,
        })
    }

    /// Whether this event ends the deployment.
    pub const fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::DeploymentSucceeded {}
                | Self::DeploymentFailed { .. }
                | Self::DeploymentCancelled { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_type_and_data() {
        let event = DeploymentEvent::StepAttemptFailed {
            step: "build".into(),
            attempt: 2,
            error_class: ErrorClass::HostUnreachable,
            exit_code: Some(4),
            message: "unreachable".into(),
            duration_ms: 12,
        };
        let data = event.data();
        assert_eq!(data["error_class"], "host-unreachable");
        assert_eq!(data["attempt"], 2);
        let back = DeploymentEvent::from_parts(event.event_type(), data).expect("round trip");
        assert_eq!(back, event);
    }

    #[test]
    fn unit_like_events_have_empty_object_data() {
        let data = DeploymentEvent::SecretsPurged {}.data();
        assert_eq!(data, serde_json::json!({}));
        assert_eq!(
            DeploymentEvent::from_parts("SecretsPurged", data).expect("round trip"),
            DeploymentEvent::SecretsPurged {}
        );
    }

    /// `DeploymentRequested` as recorded before the payload store: the files' text inline.
    fn requested_before_payloads() -> serde_json::Value {
        serde_json::json!({
            "tenant": "acme",
            "requested_by": "ada",
            "trigger": "cli",
            "source": "b.yaml",
            "blueprint": {
                "name": "b",
                "params": [],
                "secrets": [],
                "grace_ms": 120000,
                "steps": [{
                    "name": "infra",
                    "kind": "terraform",
                    "with": { "dir": "infra" },
                    "needs": [],
                    "timeout_ms": 600000
                }],
                "files": { "infra/main.tf": "resource \"terraform_data\" \"x\" {}\n" }
            },
            "blueprint_hash": "ab",
            "params": {}
        })
    }

    #[test]
    fn a_deployment_requested_before_payloads_reads_back_unchanged() {
        let data = requested_before_payloads();
        let event = DeploymentEvent::from_parts("DeploymentRequested", data.clone())
            .expect("the old shape reads");
        let DeploymentEvent::DeploymentRequested { blueprint, .. } = &event else {
            panic!("{event:?}");
        };
        assert_eq!(
            blueprint.files["infra/main.tf"],
            "resource \"terraform_data\" \"x\" {}\n"
        );
        assert!(blueprint.stored_files.is_empty());
        assert_eq!(
            event.data(),
            data,
            "written back exactly as it was recorded"
        );
    }

    #[test]
    fn a_deployment_requested_now_names_its_files_by_size_and_hash() {
        let mut data = requested_before_payloads();
        let blueprint = data["blueprint"].as_object_mut().expect("object");
        blueprint.remove("files");
        blueprint.insert(
            "stored_files".into(),
            serde_json::json!({ "infra/main.tf": { "size": 35, "sha256": "9f".repeat(32) } }),
        );
        let event = DeploymentEvent::from_parts("DeploymentRequested", data.clone())
            .expect("the new shape reads");
        let DeploymentEvent::DeploymentRequested { blueprint, .. } = &event else {
            panic!("{event:?}");
        };
        assert!(blueprint.files.is_empty());
        assert_eq!(blueprint.stored_files["infra/main.tf"].size, 35);
        assert_eq!(event.data(), data);
        assert!(!event.data().to_string().contains("terraform_data"));
    }

    #[test]
    fn a_cloud_account_recorded_before_its_catalog_endpoints_reads_back_unchanged() {
        let old = serde_json::json!({
            "auth_url": "http://127.0.0.1:5000/identity/v3",
            "project_id": "p1",
            "project": "acme",
            "user": "acme"
        });
        let account: CloudAccount = serde_json::from_value(old.clone()).expect("the old shape");
        assert!(account.endpoints.is_empty());
        assert!(account.domain.is_empty());
        assert_eq!(serde_json::to_value(&account).expect("json"), old);

        let now = CloudAccount {
            endpoints: vec!["127.0.0.1:5000".into(), "nova.example.com:8774".into()],
            ..account
        };
        let data = serde_json::to_value(&now).expect("json");
        assert_eq!(
            data["endpoints"],
            serde_json::json!(["127.0.0.1:5000", "nova.example.com:8774"])
        );
        assert_eq!(
            serde_json::from_value::<CloudAccount>(data).expect("the new shape"),
            now
        );
    }

    #[test]
    fn the_list_of_types_is_every_variant_in_order() {
        // serde names every variant it knows when it meets one it does not: the list is
        // complete exactly when it matches that.
        let error = DeploymentEvent::from_parts("NoSuchEvent", serde_json::json!({}))
            .expect_err("unknown type")
            .source
            .to_string();
        let known: Vec<&str> = error
            .split("expected one of ")
            .nth(1)
            .expect("serde lists the variants")
            .split(", ")
            .map(|name| name.trim_matches('`'))
            .collect();
        assert_eq!(known, DeploymentEvent::TYPES, "{error}");
    }

    #[test]
    fn an_unknown_type_is_a_schema_error_naming_it() {
        let error = DeploymentEvent::from_parts("StepExploded", serde_json::json!({}))
            .expect_err("unknown type");
        assert!(error.to_string().contains("StepExploded"));
    }
}
