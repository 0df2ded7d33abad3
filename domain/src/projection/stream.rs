//! Folding one deployment's stream: a record is applied only when its revision is the view's
//! next one, and the first one (`DeploymentRequested`) starts the view.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Timestamp};

use super::fold::fold;
use super::{Change, DeploymentStatus, DeploymentView, ProjectionError, StepView, TenantDelta};
use crate::deployment::StepStatus;
use crate::registry::Registry;

/// One deployment's view after folding records of its stream in ([`project`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Projected {
    /// The view; `None` while no `DeploymentRequested` has been folded in.
    pub view: Option<DeploymentView>,
    /// What the folded records change in the tenant's summary.
    pub delta: TenantDelta,
    /// How many records were folded in.
    pub applied: usize,
    /// The revision the view needs next.
    pub next: u64,
    /// Whether a record was held back because one before it is missing.
    pub gap: bool,
    /// The steps whose views the folded records changed (every step of a view they started):
    /// with the header, all a store has to write.
    pub steps: BTreeSet<String>,
    /// What the folded records set in the tenant's service registry.
    pub registry: Registry,
}

/// Folds records of one deployment's stream into its view: only a record whose revision is
/// exactly the view's revision + 1 (0 for a deployment without a view) is applied. Records
/// already folded in change nothing; a record after a missing one, and every record after it,
/// waits (`gap`), so nothing is ever skipped. `records` must be in revision order.
pub fn project(
    view: Option<DeploymentView>,
    records: &[Envelope],
) -> Result<Projected, ProjectionError> {
    let mut projected = Projected::from_view(view);
    fold_records(&mut projected, records)?;
    Ok(projected)
}

impl Projected {
    pub(super) fn from_view(view: Option<DeploymentView>) -> Self {
        Self {
            next: view.as_ref().map_or(0, |v| v.revision.saturating_add(1)),
            view,
            delta: TenantDelta::default(),
            applied: 0,
            gap: false,
            steps: BTreeSet::new(),
            registry: Registry::default(),
        }
    }
}

/// Folds `records` in as [`project`] says; on an error, what was folded before it stays.
pub(super) fn fold_records(
    projected: &mut Projected,
    records: &[Envelope],
) -> Result<(), ProjectionError> {
    for record in records {
        let id = DeploymentId::from_stream(&record.stream)?;
        let at = record.metadata.recorded_at;
        let change = || {
            let event = DeploymentEvent::from_parts(&record.event_type, record.data.clone())?;
            Ok(Change::from(event))
        };
        if !fold_record(projected, id, record.revision, at, change)? {
            break;
        }
    }
    Ok(())
}

/// Folds one record if it is the one the view needs next (`change` decodes it only then);
/// false when the records after it must wait: it is after a missing one, or it cannot start a
/// view (an event before a deployment's `DeploymentRequested`, which no stream holds).
pub(super) fn fold_record(
    projected: &mut Projected,
    id: DeploymentId,
    revision: u64,
    at: Timestamp,
    change: impl FnOnce() -> Result<Change, ProjectionError>,
) -> Result<bool, ProjectionError> {
    if revision < projected.next {
        return Ok(true);
    }
    if revision > projected.next {
        projected.gap = true;
        return Ok(false);
    }
    if let Some(view) = projected.view.as_ref().filter(|v| v.id != id) {
        return Err(ProjectionError::OtherStream {
            view: view.id,
            found: id.stream(),
        });
    }
    let change = change()?;
    let Some(view) = projected.view.as_mut() else {
        return Ok(start(projected, id, revision, at, change));
    };
    view.revision = revision;
    let before = view.status;
    projected.registry.fold(&view.tenant, id, &change, at);
    fold(view, change, at, Some(&mut projected.steps));
    if view.status != before {
        *projected.delta.counter(before) -= 1;
        *projected.delta.counter(view.status) += 1;
    }
    projected.applied += 1;
    projected.next = revision.saturating_add(1);
    Ok(true)
}

/// Starts the view with `change`, the stream's first record; false when it is not a
/// `DeploymentRequested`, which alone can start one.
fn start(
    projected: &mut Projected,
    id: DeploymentId,
    revision: u64,
    at: Timestamp,
    change: Change,
) -> bool {
    let Change::Requested {
        tenant,
        project,
        blueprint,
        steps,
        services,
        name,
    } = change
    else {
        return false;
    };
    for (service, watched) in &services {
        projected.registry.interest(&tenant, id, service, *watched);
    }
    let steps: IndexMap<String, StepView> = steps
        .into_iter()
        .map(|name| {
            let view = StepView {
                status: StepStatus::Pending,
                attempts: 0,
                started_at: None,
                finished_at: None,
                error_class: None,
                outputs: BTreeMap::new(),
            };
            (name, view)
        })
        .collect();
    projected.steps.extend(steps.keys().cloned());
    projected.view = Some(DeploymentView {
        id,
        tenant,
        name,
        project,
        blueprint,
        status: DeploymentStatus::Running,
        steps,
        started_at: at,
        finished_at: None,
        reason: None,
        destroy: None,
        grants: Vec::new(),
        revision,
    });
    projected.delta.total += 1;
    projected.delta.running += 1;
    projected.delta.requested_at = Some(at);
    projected.applied += 1;
    projected.next = revision.saturating_add(1);
    true
}

/// The steps whose views `records` may change, by name: what a projector loads beside the
/// header. Read from the records' data without decoding them (a record that does not read is
/// reported when it is folded).
pub fn steps_of(records: &[Envelope]) -> BTreeSet<String> {
    let mut steps = BTreeSet::new();
    for record in records {
        if record.event_type == "DeploymentRedriven" {
            let named = record.data.get("steps").and_then(|s| s.as_array());
            steps.extend(
                named
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_owned)),
            );
        } else if let Some(step) = record.data.get("step").and_then(|s| s.as_str()) {
            steps.insert(step.to_owned());
        }
    }
    steps
}
