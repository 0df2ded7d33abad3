//! The blueprint as a deployment records it: validated, with durations in milliseconds.
//!
//! A deployment carries this snapshot in its `DeploymentRequested` event, so the log alone is
//! enough to audit or replay it even after the blueprint file has changed. The files its steps
//! take are recorded by content hash ([`StoredFile`]), their bytes in the payload store, so the
//! event stays small; deployments requested before that carry them inline
//! ([`BlueprintSnapshot::files`]).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A validated blueprint: what to deploy and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlueprintSnapshot {
    /// Lowercase letters, digits and `-`.
    pub name: String,
    /// Free text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Declared parameters, in the order the blueprint lists them.
    #[serde(default)]
    pub params: Vec<ParamSpec>,
    /// Names of the secrets the deployment is given; never their values.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// How long steps already running may go on after another step failed for good.
    pub grace_ms: u64,
    /// The steps, in the order the blueprint lists them.
    pub steps: Vec<StepSpec>,
    /// Host groups: each a list of `address[:port]`, which may hold `{{ ... }}` templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, Vec<String>>,
    /// The files steps take from the blueprint's folder (Terraform configurations, playbooks),
    /// by path relative to that folder, as they were when the deployment was requested, inline.
    /// Only deployments requested before [`stored_files`](Self::stored_files) carry them here;
    /// they are read as they were recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// The same files as deployments record them now: by path, each one's size and SHA-256,
    /// its text kept in the payload store under that hash (a DynamoDB item holds 400 KB, the
    /// files may come to 1 MiB).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stored_files: BTreeMap<String, StoredFile>,
    /// The server through which the engine reaches the hosts, if they are behind one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bastion: Option<BastionSpec>,
    /// Destinations (`ADDRESS:PORT`, `ADDRESS` or `ADDRESS/PREFIX`) every networked step may
    /// reach besides what the deployment needs; checked when the blueprint is read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
}

/// A file of the blueprint's folder, recorded by content: its text is in the payload store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredFile {
    /// Its length in bytes.
    pub size: u64,
    /// The SHA-256 of its bytes, lowercase hex: its name in the payload store.
    pub sha256: String,
}

/// A tenant's bastion: the one server that admits SSH from outside, through which the engine
/// reaches the others. Its security group admits the engine only while a deployment needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BastionSpec {
    /// Its `address[:port]`; may hold `{{ ... }}` templates (a provisioning step's output).
    pub host: String,
    /// The id of its security group, where the engine adds and removes its temporary rule; may
    /// hold templates.
    pub security_group: String,
    /// Who the engine logs in as on the bastion.
    pub user: String,
}

impl BlueprintSnapshot {
    /// The step with this name.
    pub fn step(&self, name: &str) -> Option<&StepSpec> {
        self.steps.iter().find(|step| step.name == name)
    }
}

/// One declared parameter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamSpec {
    /// Its name, as templates refer to it: `{{ params.<name> }}`.
    pub name: String,
    /// The value used when the deployment does not give one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// One step of a blueprint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSpec {
    /// Unique within the blueprint.
    pub name: String,
    /// The step kind: `script`, `noop`, ...
    pub kind: String,
    /// The kind's settings; values may hold `{{ ... }}` templates.
    #[serde(default)]
    pub with: BTreeMap<String, serde_json::Value>,
    /// Steps that must succeed before this one starts.
    #[serde(default)]
    pub needs: Vec<String>,
    /// How long one attempt may run before it is killed.
    pub timeout_ms: u64,
    /// Per-class overrides of the default retry policy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retry: BTreeMap<ErrorClass, RetryRule>,
    /// What each attempt may use of the machine, defaults filled in; `None` in a blueprint
    /// recorded before limits were, whose attempts get the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<crate::StepLimits>,
    /// The service the step's hosts run once it succeeded, registered when it answers its check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provides: Option<ServiceProvision>,
    /// Services that must have enough registered instances before the step starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<ServiceRequirement>,
    /// Services whose members changing later makes the step run again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch: Vec<String>,
}

/// A service a step's hosts provide (`provides:`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceProvision {
    /// The service's name within the tenant.
    pub service: String,
    /// The TCP port it listens on, on every host of the step.
    pub port: u16,
    /// How the engine tells that it runs.
    pub check: ServiceCheck,
}

/// How the engine checks a service instance answers, through the bastion when there is one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceCheck {
    /// A TCP connection to the port is accepted.
    Tcp,
    /// A GET of this path answers with a 2xx status.
    Http { path: String },
}

/// A service a step waits for (`requires:`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRequirement {
    /// The service's name within the tenant.
    pub service: String,
    /// How many registered instances it needs at least.
    pub count: u32,
    /// How long the step waits for them before it fails as `service-timeout`.
    pub timeout_ms: u64,
}

/// How often a failed attempt of one error class is retried, and how long to wait first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRule {
    /// Retries after the first attempt; 0 fails at once.
    pub times: u32,
    /// The wait before each retry.
    pub wait_ms: u64,
}

/// Why an attempt failed, as the retry policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ErrorClass {
    /// A terraform step exited non-zero.
    Terraform,
    /// The cloud API answered 502/503 or said its backend is unreachable.
    BackendUnreachable,
    /// A server did not answer over SSH in time after its creation.
    BootstrapTimeout,
    /// Ansible could not reach a host (exit code 4).
    HostUnreachable,
    /// The attempt was cut short by the engine's death, a lost runner or an expired lease: not
    /// the step's own doing.
    Interrupted,
    /// Anything else.
    StepFailed,
    /// A server offered an SSH host key other than the one pinned for it: it was replaced or
    /// rebuilt, or someone is intercepting the connection. Never retried by default.
    HostKeyMismatch,
    /// The engine's rule on the bastion was deleted while the deployment still held its lease on
    /// it: someone else closed the bastion, not the servers' fault.
    BastionAccessLost,
    /// A required service did not have enough registered instances within the wait's timeout.
    /// Never retried: the step never ran.
    ServiceTimeout,
    /// A step's own target (its `url`, its hosts) lies outside its network policy: the host's
    /// loopback where the engine's operator or the blueprint does not allow it, or link-local.
    /// Never retried: the step never ran, and it would be refused again.
    EgressRefused,
}

impl ErrorClass {
    /// Every class, in the order the retry table lists them.
    pub const ALL: [ErrorClass; 10] = [
        ErrorClass::Terraform,
        ErrorClass::BackendUnreachable,
        ErrorClass::BootstrapTimeout,
        ErrorClass::HostUnreachable,
        ErrorClass::Interrupted,
        ErrorClass::StepFailed,
        ErrorClass::HostKeyMismatch,
        ErrorClass::BastionAccessLost,
        ErrorClass::ServiceTimeout,
        ErrorClass::EgressRefused,
    ];

    /// The name blueprints and events use.
    pub const fn as_str(&self) -> &'static str {
        match self {
            ErrorClass::Terraform => "terraform",
            ErrorClass::BackendUnreachable => "backend-unreachable",
            ErrorClass::BootstrapTimeout => "bootstrap-timeout",
            ErrorClass::HostUnreachable => "host-unreachable",
            ErrorClass::Interrupted => "interrupted",
            ErrorClass::StepFailed => "step-failed",
            ErrorClass::HostKeyMismatch => "host-key-mismatch",
            ErrorClass::BastionAccessLost => "bastion-access-lost",
            ErrorClass::ServiceTimeout => "service-timeout",
            ErrorClass::EgressRefused => "egress-refused",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ErrorClass {
    type Err = ();

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|class| class.as_str() == text)
            .ok_or(())
    }
}
