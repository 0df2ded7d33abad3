//! `POST /v1/events` on `overture serve --triggers FILE`: the trigger file's dispatcher.
//!
//! The event is evaluated at once and each decision answered; the deployments it starts, and
//! the chains their ends start, are driven in a task of their own. A server started again
//! carries on the chains of the triggered deployments it resumed ([`carry_on_chains`]).

use std::sync::Arc;

use async_trait::async_trait;
use overture_api::events::{Decided, Delivered, Verdict};
use overture_api::{DeliverError, DeliverEvents};
use overture_triggers::{DispatchError, TriggerDecision};

use overture_domain::deployment::Phase;
use overture_events::DeploymentId;
use overture_triggers::ends::{end_of, status_of};

use crate::triggers::{read_event, Dispatcher};
use overture_embedded::Engine;

/// How long a resumed chain waits before looking at its deployment again when nothing in this
/// process appended.
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_millis(500);

/// The trigger file given with `--triggers`.
pub struct TriggerFile(pub Arc<Dispatcher>);

#[async_trait]
impl DeliverEvents for TriggerFile {
    async fn deliver(&self, event: &str, tenant: &str) -> Result<Delivered, DeliverError> {
        let event = read_event(event, "the event").map_err(DeliverError::NotAnEvent)?;
        let tenant = tenant.to_owned();
        let dispatched = self
            .0
            .dispatch(&event, Some(&tenant))
            .await
            .map_err(|failure| {
                let retryable = matches!(&failure, crate::Failure::Engine(error)
                    if error.downcast_ref::<DispatchError>().is_some_and(DispatchError::is_retryable));
                if retryable {
                    DeliverError::Unavailable(Box::new(failure))
                } else {
                    DeliverError::Failed(Box::new(failure))
                }
            })?;
        let started: Vec<String> = dispatched
            .started
            .iter()
            .map(|s| s.by.id.to_string())
            .collect();
        // The deployments outlive the request, as those of `POST /v1/deployments` do.
        let dispatcher = Arc::clone(&self.0);
        tokio::spawn(async move {
            if let Err(error) = dispatcher
                .follow(dispatched.started, Some(&tenant), false)
                .await
            {
                tracing::error!(%error, "driving deployments started by a trigger failed");
            }
        });
        Ok(Delivered {
            source: event.source,
            id: event.id,
            deployments: started,
            decisions: dispatched.decisions.into_iter().map(decided).collect(),
            queued: None,
        })
    }
}

/// A recorded decision as the API answers it.
fn decided(decision: TriggerDecision) -> Decided {
    use overture_triggers::Verdict as Recorded;
    Decided {
        at: decision.at,
        source: decision.source,
        event_id: decision.event_id,
        trigger: decision.trigger,
        decision: match decision.decision {
            Recorded::Deployed => Verdict::Deployed,
            Recorded::Duplicate => Verdict::Duplicate,
            Recorded::NotMatched => Verdict::NotMatched,
            Recorded::Refused => Verdict::Refused,
        },
        deployment: decision.deployment,
        reason: decision.reason,
    }
}

/// For each resumed deployment a trigger started, waits for its end and delivers that end to
/// the trigger file, as the server that started it would have, so a chain goes on across a
/// restart. An end delivered twice starts nothing twice: its event id is the deployment's.
pub fn carry_on_chains(
    dispatcher: &Arc<Dispatcher>,
    engine: &Arc<Engine>,
    resumed: &[DeploymentId],
) {
    for &id in resumed {
        let (dispatcher, engine) = (Arc::clone(dispatcher), Arc::clone(engine));
        tokio::spawn(async move {
            if let Err(error) = carry_on_chain(&dispatcher, &engine, id).await {
                tracing::error!(%id, %error, "could not carry the trigger chain on");
            }
        });
    }
}

async fn carry_on_chain(
    dispatcher: &Dispatcher,
    engine: &Engine,
    id: DeploymentId,
) -> Result<(), crate::Failure> {
    let outcome = loop {
        let appended = engine.log.appended();
        let notified = appended.notified();
        let state = engine.state(id).await?;
        if state.triggered_by.is_none() {
            return Ok(());
        }
        if let Phase::Finished(outcome) = state.phase {
            break (state, outcome);
        }
        // Another process may append too; look again after a while either way.
        let _ = tokio::time::timeout(LOOK_AGAIN, notified).await;
    };
    let (state, outcome) = outcome;
    // The tenant its triggers deploy into is the project id, also for a record made before.
    let tenant = state.tenant_id().to_owned();
    let ended = end_of(id, &state, status_of(outcome));
    let started = dispatcher.dispatch(&ended, Some(&tenant)).await?.started;
    dispatcher.follow(started, Some(&tenant), false).await?;
    Ok(())
}
