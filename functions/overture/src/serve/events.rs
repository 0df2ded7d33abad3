//! `POST /v1/events` on `overture serve --triggers FILE`: the trigger file's dispatcher.
//!
//! The event is evaluated at once and each decision answered; the deployments it starts, and
//! the chains their ends start, are driven in a task of their own.

use std::sync::Arc;

use async_trait::async_trait;
use overture_api::{DeliverError, DeliverEvents};
use overture_triggers::DispatchError;
use serde_json::{json, Value};

use crate::triggers::{read_event, Dispatcher};

/// The trigger file given with `--triggers`.
pub struct TriggerFile(pub Arc<Dispatcher>);

#[async_trait]
impl DeliverEvents for TriggerFile {
    async fn deliver(&self, event: &str, tenant: &str) -> Result<Value, DeliverError> {
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
        Ok(json!({ "deployments": started, "decisions": dispatched.decisions }))
    }
}
