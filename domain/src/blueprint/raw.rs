//! The blueprint's YAML as written, before it is checked: what serde reads, and nothing else.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBlueprint {
    pub(super) name: String,
    #[serde(default)]
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) params: IndexMap<String, Option<RawParam>>,
    #[serde(default)]
    pub(super) secrets: Vec<String>,
    #[serde(default)]
    pub(super) on_failure: Option<RawOnFailure>,
    #[serde(default)]
    pub(super) hosts: IndexMap<String, Vec<String>>,
    #[serde(default)]
    pub(super) bastion: Option<RawBastion>,
    #[serde(default)]
    pub(super) egress: Vec<String>,
    pub(super) steps: IndexMap<String, RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBastion {
    pub(super) host: String,
    pub(super) security_group: String,
    #[serde(default)]
    pub(super) user: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParam {
    #[serde(default)]
    pub(super) default: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOnFailure {
    #[serde(default)]
    pub(super) grace: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    pub(super) run: String,
    #[serde(default)]
    pub(super) with: BTreeMap<String, serde_yaml_ng::Value>,
    #[serde(default)]
    pub(super) needs: Vec<String>,
    #[serde(default)]
    pub(super) timeout: Option<String>,
    #[serde(default)]
    pub(super) retry: IndexMap<String, RawRetry>,
    #[serde(default)]
    pub(super) limits: Option<crate::limits::RawLimits>,
    #[serde(default)]
    pub(super) provides: Option<RawProvides>,
    #[serde(default)]
    pub(super) requires: Vec<RawRequirement>,
    #[serde(default)]
    pub(super) watch: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvides {
    pub(super) service: String,
    pub(super) port: u32,
    #[serde(default)]
    pub(super) check: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRequirement {
    pub(super) service: String,
    #[serde(default)]
    pub(super) count: Option<u32>,
    #[serde(default)]
    pub(super) timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetry {
    pub(super) times: u32,
    #[serde(default)]
    pub(super) wait: Option<String>,
}
