//! Read models as pure folds over the log: each deployment's status and each tenant's summary.
//!
//! [`project`] folds records of one deployment's stream into its view and returns, with the
//! view, the change to its tenant's summary ([`TenantDelta`]). It applies a record only when its
//! revision is the view's revision + 1, so a replayed record changes nothing and a record after a
//! missing one waits. [`ReadModels`] folds many streams in memory with it (a rebuild, a check).
//!
//! Views are stored incrementally: a header (everything but the steps) and one entry per step.
//! [`Projected::steps`] names the steps the folded records changed, so a store writes the header
//! and those steps only, and [`steps_of`] names the steps records may change, so a projector
//! loads only those. [`Change`] is an event decoded only as far as the views need
//! ([`Change::decode`] reads it straight from the log's text), which a rebuild folds with
//! [`ReadModels::apply_change`].
//!
//! The tenants' service registry ([`crate::registry`]) is folded in the same pass: what the
//! records register, deregister and take an interest in comes out as [`Projected::registry`]
//! (and [`ReadModels::registry`]), under the same revision rule, so a store writes it with the
//! view, once.
//!
//! Where things are: `view` holds the deployment view `status --json` shows and `grants` its
//! ledger of temporary grants; `tenant` the tenant's summary and its deltas; `change` what
//! each event changes in them (the projection's subscription, one match from event to change)
//! and `decode` the same read straight from the log's text; `fold` applies a change to a
//! view; `stream` folds one deployment's records under the revision rule; `rebuild` folds
//! many streams in memory.

use overture_events::DeploymentId;

pub use crate::tenancy::ProjectLabel;
pub use change::Change;
pub use grants::{GrantKind, GrantView};
pub use rebuild::{ChangedSteps, Folding, ReadModels, Touched};
pub use stream::{project, steps_of, Projected};
pub use tenant::{TenantDelta, TenantView};
pub use view::{DeploymentStatus, DeploymentView, DestroyStatus, DestroyView, Header, StepView};

mod change;
mod decode;
mod fold;
mod grants;
mod rebuild;
mod stream;
mod tenant;
mod view;

/// An envelope the projection cannot fold.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// The data does not match the event schema.
    #[error(transparent)]
    Schema(#[from] overture_events::deployment::SchemaError),
    /// The stream is not a deployment stream.
    #[error(transparent)]
    Stream(#[from] overture_events::ParseIdError),
    /// A record of another deployment's stream was given with this deployment's view.
    #[error("a record of stream `{found}` cannot be folded into the view of deployment {view}")]
    OtherStream {
        /// The view's deployment.
        view: DeploymentId,
        /// The record's stream.
        found: String,
    },
}
