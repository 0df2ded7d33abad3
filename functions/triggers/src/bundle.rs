//! A trigger file with the blueprints it deploys, as one JSON document.
//!
//! The serverless form has no folder to read a trigger file's blueprints from, so
//! `overture --backend aws triggers publish FILE` reads and checks them where the user is, as
//! `overture deploy` would, and stores them with the file in one object; the triggers function
//! reads it ([`LoadBundle`]) and finds each trigger's blueprint in it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use overture_domain::trigger::{self, TriggerFile};
use serde::{Deserialize, Serialize};

use crate::{BlueprintSource, BlueprintUnavailable, FindBlueprints};

/// A trigger file and every blueprint its triggers deploy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerBundle {
    /// The trigger file's YAML text.
    pub triggers: String,
    /// Each trigger's blueprint, by its `deploy` as written in the trigger file.
    pub blueprints: BTreeMap<String, BlueprintSource>,
}

/// A stored bundle that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The store could not be reached or failed on its side: trying again later may help.
    #[error("could not read the published trigger file, for now: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// What is stored is not a bundle, or its trigger file is invalid: publish it again.
    #[error("the published trigger file is unusable ({0}); publish it again with `overture --backend aws triggers publish FILE`")]
    Invalid(String),
}

impl BundleError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, BundleError::Unavailable(_))
    }
}

/// Reads the published bundle.
#[async_trait]
pub trait LoadBundle: Send + Sync {
    /// The bundle, or `None` when none was published.
    async fn load(&self) -> Result<Option<TriggerBundle>, BundleError>;
}

impl TriggerBundle {
    /// The bundle as stored.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a stored bundle back.
    pub fn from_json(text: &str) -> Result<Self, BundleError> {
        serde_json::from_str(text).map_err(|e| BundleError::Invalid(e.to_string()))
    }

    /// Its trigger file, checked.
    pub fn file(&self) -> Result<TriggerFile, BundleError> {
        trigger::parse(&self.triggers)
            .map_err(|problems| BundleError::Invalid(problems.to_string()))
    }
}

#[async_trait]
impl FindBlueprints for TriggerBundle {
    async fn blueprint(&self, deploy: &str) -> Result<BlueprintSource, BlueprintUnavailable> {
        self.blueprints.get(deploy).cloned().ok_or_else(|| {
            BlueprintUnavailable(format!(
                "{deploy}: the blueprint was not published with the trigger file; publish the \
                 trigger file again"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "triggers:
  - name: on-release
    on: { source: artifacts, type: release.published }
    deploy: app.yaml
    tenant: acme
";

    fn bundle() -> TriggerBundle {
        TriggerBundle {
            triggers: FILE.into(),
            blueprints: BTreeMap::from([(
                "app.yaml".into(),
                BlueprintSource {
                    source: "app.yaml".into(),
                    text: "name: app\nsteps:\n  a: { run: noop }\n".into(),
                    files: BTreeMap::new(),
                },
            )]),
        }
    }

    #[tokio::test]
    async fn a_stored_bundle_reads_back_with_its_triggers_and_blueprints() {
        let read = TriggerBundle::from_json(&bundle().to_json()).expect("readable");
        assert_eq!(read, bundle());
        assert_eq!(read.file().expect("valid").triggers[0].name, "on-release");
        let found = read.blueprint("app.yaml").await.expect("published");
        assert_eq!(found.source, "app.yaml");
        let missing = read
            .blueprint("other.yaml")
            .await
            .expect_err("not published");
        assert!(
            missing.0.contains("publish the trigger file again"),
            "{missing}"
        );
    }

    #[test]
    fn a_bundle_whose_trigger_file_is_invalid_is_refused_with_the_fix() {
        let mut broken = bundle();
        broken.triggers = "triggers:\n  - name: x\n".into();
        let error = TriggerBundle::from_json(&broken.to_json())
            .expect("readable")
            .file()
            .expect_err("invalid");
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("triggers publish"), "{error}");
        let error = TriggerBundle::from_json("{\"triggers\": 1}").expect_err("not a bundle");
        assert!(matches!(error, BundleError::Invalid(_)));
    }
}
