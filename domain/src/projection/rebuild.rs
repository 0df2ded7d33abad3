//! Many deployments' and tenants' views folded in memory: a rebuild's batches and
//! `replay --check`.

use std::collections::{BTreeMap, BTreeSet};

use overture_events::{DeploymentId, Envelope, Timestamp};

use super::fold::fold;
use super::stream::{fold_record, fold_records};
use super::{Change, DeploymentView, Projected, ProjectionError, TenantDelta, TenantView};
use crate::registry::Registry;

/// One record of the log as a rebuild folds it: whose, which revision, when, and its change.
#[derive(Clone, Debug, PartialEq)]
pub struct Folding {
    /// The deployment whose stream holds it.
    pub deployment: DeploymentId,
    /// Its revision in that stream.
    pub revision: u64,
    /// When the log recorded it.
    pub at: Timestamp,
    /// What it changes.
    pub change: Change,
}

/// The steps of one deployment's view that a rebuild's folds changed: what a store writes
/// beside the header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangedSteps {
    /// The folds started the view, so every step of it is new; `named` is then left empty, as
    /// a rebuild starts hundreds of thousands of steps.
    pub all: bool,
    /// The steps changed, when not `all`.
    pub named: BTreeSet<String>,
}

impl ChangedSteps {
    /// Whether the step named `name` changed.
    pub fn contains(&self, name: &str) -> bool {
        self.all || self.named.contains(name)
    }
}

/// The steps whose views a rebuild's folds changed, by deployment.
pub type Touched = BTreeMap<DeploymentId, ChangedSteps>;

/// Many deployments' and tenants' views, folded in memory: what a rebuild folds the whole log
/// into, batch by batch, and what `replay --check` compares the stored views with. It folds
/// with [`project`], as the projector does stream by stream, so both agree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadModels {
    /// Deployment views by id.
    pub deployments: BTreeMap<DeploymentId, DeploymentView>,
    /// Tenant views by tenant.
    pub tenants: BTreeMap<String, TenantView>,
    /// The service registry rows the folds set (in a rebuild's batch: what it writes; folded
    /// from the whole log: the whole registry).
    pub registry: Registry,
}

impl ReadModels {
    /// Folds one envelope in. Envelopes a view has already seen, and those after a missing one
    /// or before a deployment's `DeploymentRequested`, change nothing.
    pub fn apply(&mut self, envelope: &Envelope) -> Result<(), ProjectionError> {
        let id = DeploymentId::from_stream(&envelope.stream)?;
        self.fold_one(id, |projected| {
            fold_records(projected, std::slice::from_ref(envelope))
        })
        .map(|_| ())
    }

    /// Folds one record decoded as far as the views need, as [`Self::apply`] folds its
    /// envelope, and adds the steps it changed to `touched`. The view is changed where it is
    /// kept: a rebuild folds millions of records.
    pub fn apply_change(&mut self, folding: Folding, touched: &mut Touched) {
        let Folding {
            deployment,
            revision,
            at,
            change,
        } = folding;
        let Some(view) = self.deployments.get_mut(&deployment) else {
            // Only a deployment's first record starts its view.
            if revision == 0 {
                let _ = self.fold_one(deployment, |projected| {
                    fold_record(projected, deployment, revision, at, || Ok(change)).map(|_| ())
                });
                if self.deployments.contains_key(&deployment) {
                    touched.entry(deployment).or_default().all = true;
                }
            }
            return;
        };
        // Records already folded and records after a missing one change nothing.
        if Some(revision) != view.revision.checked_add(1) {
            return;
        }
        view.revision = revision;
        let before = view.status;
        self.registry.fold(&view.tenant, deployment, &change, at);
        let changed = touched.entry(deployment).or_default();
        let named = (!changed.all).then_some(&mut changed.named);
        fold(view, change, at, named);
        if view.status != before {
            let mut delta = TenantDelta::default();
            *delta.counter(before) -= 1;
            *delta.counter(view.status) += 1;
            match self.tenants.get_mut(&view.tenant) {
                Some(summary) => delta.apply_in_place(summary),
                None => {
                    let summary = delta.apply_to(None, &view.tenant);
                    self.tenants.insert(view.tenant.clone(), summary);
                }
            }
        }
    }

    fn fold_one(
        &mut self,
        id: DeploymentId,
        fold: impl FnOnce(&mut Projected) -> Result<(), ProjectionError>,
    ) -> Result<BTreeSet<String>, ProjectionError> {
        // Taken out and put back rather than cloned: a rebuild folds millions of records.
        let mut projected = Projected::from_view(self.deployments.remove(&id));
        let folded = fold(&mut projected);
        if let Some(view) = projected.view {
            if !projected.delta.is_empty() {
                let summary = self.tenants.remove(&view.tenant);
                let summary = projected.delta.apply_to(summary, &view.tenant);
                self.tenants.insert(view.tenant.clone(), summary);
            }
            self.deployments.insert(id, view);
        }
        self.registry.merge(projected.registry);
        folded.map(|()| projected.steps)
    }
}
