//! Each deployment's last fold, so that a log adapter reads only what is new.
//!
//! Folding a deployment's whole stream for every command would cost O(events) per command and
//! O(events²) per deployment. An adapter keeps the last [`Loaded`] of each deployment here,
//! reads the stream from the revision after it, and folds only those events in. The log stays
//! the only source of truth: the fold is refreshed from it on every load, so other writers'
//! appends are seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use overture_domain::Deployment;
use overture_events::deployment::SchemaError;
use overture_events::{DeploymentEvent, DeploymentId, Envelope};

use crate::Loaded;

/// The last fold of each deployment; clones share it.
#[derive(Clone, Debug, Default)]
pub struct Folds {
    folded: Arc<Mutex<HashMap<DeploymentId, Loaded>>>,
}

impl Folds {
    /// The deployment's last fold (empty when none is kept); read its stream after
    /// `revision`.
    pub fn last(&self, deployment: DeploymentId) -> Loaded {
        self.folded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&deployment)
            .cloned()
            .unwrap_or_default()
    }

    /// Folds `newer` (the stream's events after `loaded`, in order) into `loaded`, keeps the
    /// result unless another task got further meanwhile, and returns it.
    pub fn fold(
        &self,
        deployment: DeploymentId,
        mut loaded: Loaded,
        newer: Vec<Envelope>,
    ) -> Result<Loaded, SchemaError> {
        if newer.is_empty() {
            return Ok(loaded);
        }
        for envelope in newer {
            let event = DeploymentEvent::from_parts(&envelope.event_type, envelope.data)?;
            loaded.state = Deployment::apply(loaded.state, event);
            loaded.revision = Some(envelope.revision);
        }
        let mut folded = self.folded.lock().unwrap_or_else(PoisonError::into_inner);
        let further = folded
            .get(&deployment)
            .is_some_and(|kept| kept.revision >= loaded.revision);
        if !further {
            folded.insert(deployment, loaded.clone());
        }
        Ok(loaded)
    }
}
