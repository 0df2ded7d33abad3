//! The deployment view: the `status --json` object, its steps, and the header stores keep
//! apart from the steps.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use overture_events::{DeploymentId, ErrorClass, Timestamp};
use serde::{Deserialize, Serialize};

use super::{GrantView, ProjectLabel};
use crate::deployment::StepStatus;

/// A deployment's overall status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DeploymentStatus {
    /// Steps are still being run.
    Running,
    /// Every step succeeded.
    Succeeded,
    /// A step failed for good.
    Failed,
    /// A user cancelled it.
    Cancelled,
}

impl DeploymentStatus {
    /// The name used in output and filters.
    pub const fn as_str(&self) -> &'static str {
        match self {
            DeploymentStatus::Running => "running",
            DeploymentStatus::Succeeded => "succeeded",
            DeploymentStatus::Failed => "failed",
            DeploymentStatus::Cancelled => "cancelled",
        }
    }
}

/// One step within a deployment's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepView {
    /// Where it stands.
    pub status: StepStatus,
    /// How many attempts have started.
    pub attempts: u32,
    /// When its first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub started_at: Option<Timestamp>,
    /// When it succeeded, failed for good or was abandoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub finished_at: Option<Timestamp>,
    /// The class of its last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    /// What its successful attempt produced (masked).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
}

/// The status of one deployment: the `status --json` object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeploymentView {
    /// The deployment id.
    pub id: DeploymentId,
    /// Its tenant: the cloud project's id ([`crate::tenancy`]), or the name a deployment made
    /// without a token was given.
    pub tenant: String,
    /// The name the user gave it (`deploy --name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The project the tenant id stands for, for people; none without a cloud account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectLabel>,
    /// The blueprint's name.
    pub blueprint: String,
    /// Overall status.
    pub status: DeploymentStatus,
    /// Every step, in blueprint order.
    pub steps: IndexMap<String, StepView>,
    /// When it was requested.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub started_at: Timestamp,
    /// When it ended.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub finished_at: Option<Timestamp>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where tearing it down stands, once a user asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destroy: Option<DestroyView>,
    /// Every temporary grant of access the deployment held, open or closed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<GrantView>,
    /// The last revision of its stream folded in.
    pub revision: u64,
}

/// A deployment view's header as stores keep it: everything but the steps, which are kept one
/// by one ([`DeploymentView::header`], [`Header::with_steps`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = DeploymentSummary))]
pub struct Header {
    /// The deployment id.
    pub id: DeploymentId,
    /// Its tenant: the cloud project's id ([`crate::tenancy`]), or the name a deployment made
    /// without a token was given.
    pub tenant: String,
    /// The name the user gave it (`deploy --name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The project the tenant id stands for, for people; none without a cloud account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectLabel>,
    /// The blueprint's name.
    pub blueprint: String,
    /// Overall status.
    pub status: DeploymentStatus,
    /// When it was requested.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub started_at: Timestamp,
    /// When it ended.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub finished_at: Option<Timestamp>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where tearing it down stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destroy: Option<DestroyView>,
    /// Its temporary grants of access.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<GrantView>,
    /// The last revision of its stream folded in.
    pub revision: u64,
}

impl Header {
    /// The view of this header with these steps.
    pub fn with_steps(self, steps: IndexMap<String, StepView>) -> DeploymentView {
        DeploymentView {
            id: self.id,
            tenant: self.tenant,
            name: self.name,
            project: self.project,
            blueprint: self.blueprint,
            status: self.status,
            steps,
            started_at: self.started_at,
            finished_at: self.finished_at,
            reason: self.reason,
            destroy: self.destroy,
            grants: self.grants,
            revision: self.revision,
        }
    }
}

impl DeploymentView {
    /// Whether `overture destroy` has torn it down to the end (which frees its name).
    pub fn is_destroyed(&self) -> bool {
        self.destroy
            .as_ref()
            .is_some_and(|destroy| destroy.status == DestroyStatus::Destroyed)
    }

    /// Its header: everything but the steps (small, whatever the deployment's size).
    pub fn header(&self) -> Header {
        Header {
            id: self.id,
            tenant: self.tenant.clone(),
            name: self.name.clone(),
            project: self.project.clone(),
            blueprint: self.blueprint.clone(),
            status: self.status,
            started_at: self.started_at,
            finished_at: self.finished_at,
            reason: self.reason.clone(),
            destroy: self.destroy.clone(),
            grants: self.grants.clone(),
            revision: self.revision,
        }
    }
}

/// Where tearing a deployment down stands: the `destroy` object of `status --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DestroyView {
    /// `destroying`, `destroyed` or `failed` (asking again carries on).
    pub status: DestroyStatus,
    /// When this status was reached.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// Why the last try failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where tearing a deployment down stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DestroyStatus {
    /// Resources are being destroyed.
    Destroying,
    /// Every resource is gone.
    Destroyed,
    /// Destroying a step's resources failed.
    Failed,
}

impl DestroyStatus {
    /// The name used in output.
    pub const fn as_str(&self) -> &'static str {
        match self {
            DestroyStatus::Destroying => "destroying",
            DestroyStatus::Destroyed => "destroyed",
            DestroyStatus::Failed => "failed",
        }
    }
}
