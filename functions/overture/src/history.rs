//! `status --at` and `graph`: a deployment as it stood at a revision or an instant, folded
//! from its log alone.
//!
//! The stream comes through the query port ([`QueryDeployments::events`]), so both backends
//! answer alike; the prefix is folded through the read models' own projection (status) or the
//! aggregate (graph), never read from a stored view, which only knows the present.

use chrono::SecondsFormat;
use overture_domain::deployment::{Deployment, DeploymentState};
use overture_domain::graph::{self, GraphFormat};
use overture_domain::history::{self, HistoryError, Moment};
use overture_domain::projection::{project, DeploymentView};
use overture_events::{DeploymentId, Envelope, Timestamp};
use overture_kit::query::QueryDeployments;

use crate::backend::Backend;
use crate::input::parse_id;
use crate::output::print_view;
use crate::Failure;

/// `overture status ID --at MOMENT`: the status view of the stream's prefix.
pub async fn status(
    backend: &dyn Backend,
    id: &str,
    moment: Moment,
    json: bool,
) -> Result<(), Failure> {
    let id = parse_id(id)?;
    let records = stream(backend.queries().await?.as_ref(), backend, id).await?;
    let then = at(&records, id, moment)?;
    let view = view_of(then)?;
    if !json {
        eprintln!("{}", as_it_stood(then));
    }
    print_view(&view, json);
    Ok(())
}

/// `overture graph ID [--at MOMENT]`: the blueprint's steps with their states then (now,
/// without a moment), from the aggregate folded over the stream.
pub async fn graph(
    backend: &dyn Backend,
    target: &str,
    moment: Option<Moment>,
    format: GraphFormat,
) -> Result<(), Failure> {
    let id = parse_id(target).map_err(|_| {
        Failure::BadInput(format!(
            "`{target}` is neither a blueprint file nor a deployment id"
        ))
    })?;
    let records = stream(backend.queries().await?.as_ref(), backend, id).await?;
    let then = match moment {
        Some(moment) => {
            let then = at(&records, id, moment)?;
            eprintln!("{}", as_it_stood(then));
            then
        }
        None => &records,
    };
    let state = state_of(then)?;
    let Some(blueprint) = state.blueprint.as_ref() else {
        return Err(backend.missing(id));
    };
    out!(
        "{}",
        graph::render(&blueprint.steps, format, |step| state
            .steps
            .get(step)
            .map(|s| s.status.as_str().to_owned()))
    );
    Ok(())
}

/// Every record of the deployment's stream, or no such deployment.
async fn stream(
    queries: &dyn QueryDeployments,
    backend: &dyn Backend,
    id: DeploymentId,
) -> Result<Vec<Envelope>, Failure> {
    let records = queries.events(id).await?;
    if records.is_empty() {
        return Err(backend.missing(id));
    }
    Ok(records)
}

/// The stream's records up to `moment`, or why there are none, said in terms of `--at`.
fn at(records: &[Envelope], id: DeploymentId, moment: Moment) -> Result<&[Envelope], Failure> {
    history::prefix(records, moment).map_err(|error| {
        let (Some(first), Some(last)) = (records.first(), records.last()) else {
            return Failure::BadInput(format!("deployment {id} has no events"));
        };
        let first_time = time(first.metadata.recorded_at);
        let (first, last) = (first.revision, last.revision);
        Failure::BadInput(match error {
            HistoryError::Empty => format!("deployment {id} has no events"),
            HistoryError::PastTheEnd { asked, .. } => format!(
                "--at {asked}: deployment {id} has revisions {first} to {last} only; give one of \
                 those (--at {last} is the latest), or a time from {first_time} on"
            ),
            HistoryError::BeforeTheStart { asked, .. } => format!(
                "--at {}: deployment {id} did not exist yet; its first event was recorded at \
                 {first_time}; give that time or a later one, or a revision from {first} to {last}",
                time(asked)
            ),
        })
    })
}

/// The status view the read models would have held after `records`.
fn view_of(records: &[Envelope]) -> Result<DeploymentView, Failure> {
    let projected = project(None, records).map_err(anyhow::Error::from)?;
    projected.view.ok_or_else(|| {
        Failure::Engine(anyhow::anyhow!(
            "the stream does not start with the deployment's request"
        ))
    })
}

/// The aggregate's state after `records`.
fn state_of(records: &[Envelope]) -> Result<DeploymentState, Failure> {
    let events = history::events_of(records).map_err(anyhow::Error::from)?;
    Ok(Deployment::replay(events))
}

/// Which moment of the stream the output shows, for people.
fn as_it_stood(records: &[Envelope]) -> String {
    match records.last() {
        Some(last) => format!(
            "as it stood at revision {} (recorded at {})",
            last.revision,
            time(last.metadata.recorded_at)
        ),
        None => "as it stood before its first event".into(),
    }
}

/// An instant as `--at` takes it back: RFC 3339, to the recorded precision.
fn time(at: Timestamp) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}
