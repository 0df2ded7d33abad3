//! The fingerprint of a step attempt's inputs: one digest per named input, so that a later
//! fingerprint of the same step can say which input changed ([`compare`]), not only that one did.
//!
//! The parts, each a SHA-256 in lowercase hex unless said otherwise:
//! - `kind`: the step's `run:`; `settings`: its `with:` as written (templates unrendered) and
//!   what it `provides:`; `limits`: its timeout and limits.
//! - `files.PATH`: each file the step takes from the blueprint's folder, by its content.
//! - `hosts.GROUP`: the host group its `hosts` names, as written; `bastion`: the blueprint's
//!   bastion, for a step that reaches its hosts through it.
//! - one part per reference its templates make (in its settings, its host group, the bastion):
//!   `params.NAME` (the value), `inputs.STEP.KEY` (the upstream output as recorded, masked;
//!   `absent` when there is none yet), `services.NAME` (the members, sorted; also for every
//!   service it requires or watches), `secrets.NAME`.
//!
//! A secret's part is the word `secret`: the step reads it, and nothing about its value is kept.
//! The event log is exported and read by auditors, so anything derived from a value in it must
//! not let the value be found again; a plain or salted hash of a short secret is found by trying
//! candidates, and a keyed hash needs a key kept secret longer than the deployment's own seal,
//! which is purged when the deployment ends (before any later plan would read it). Whether a
//! secret's value changed is for whoever holds both values to say.

use std::collections::{BTreeMap, BTreeSet};

use overture_events::{BlueprintSnapshot, InputFingerprint, StepSpec};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::blueprint::strings_in;
use crate::kind::{bundle_dir, uses_bastion};
use crate::template::{Reference, Template};
use crate::DeploymentState;

/// What a secret's part holds: that the step reads it, never anything of its value.
pub const SECRET: &str = "secret";

/// What an upstream output's part holds while the output has not been recorded.
pub const ABSENT: &str = "absent";

/// The fingerprint of an attempt of `spec` started in `state`: what it runs with.
pub fn of_attempt(state: &DeploymentState, spec: &StepSpec) -> InputFingerprint {
    let Some(blueprint) = state.blueprint.as_deref() else {
        return seal(own_parts(spec));
    };
    let mut parts = own_parts(spec);
    files(blueprint, spec, &mut parts);
    let mut texts: Vec<&str> = spec.with.values().flat_map(strings_in).collect();
    if let Some((group, addresses)) = host_group(blueprint, spec) {
        parts.insert(
            format!("hosts.{group}"),
            digest_json(&addresses.clone().into()),
        );
        texts.extend(addresses.iter().map(String::as_str));
    }
    if let Some(bastion) = blueprint.bastion.as_ref().filter(|_| uses_bastion(spec)) {
        let written = serde_json::to_value(bastion).unwrap_or_default();
        parts.insert("bastion".to_owned(), digest_json(&written));
        texts.extend([bastion.host.as_str(), bastion.security_group.as_str()]);
    }
    let step = state.steps.get(&spec.name);
    let members = |service: &str| {
        let members = step.and_then(|s| s.services.get(service));
        digest_json(&members.cloned().unwrap_or_default().into())
    };
    for reference in references(&texts) {
        let (name, part) = match reference {
            Reference::Param(name) => {
                let value = state.params.get(&name).map_or(ABSENT.to_owned(), digest);
                (format!("params.{name}"), value)
            }
            Reference::Secret(name) => (format!("secrets.{name}"), SECRET.to_owned()),
            Reference::Output { step, key } => {
                let output = state.steps.get(&step).and_then(|s| s.outputs.get(&key));
                (
                    format!("inputs.{step}.{key}"),
                    output.map_or(ABSENT.to_owned(), digest),
                )
            }
            Reference::Service { service, .. } => {
                let part = members(&service);
                (format!("services.{service}"), part)
            }
        };
        parts.insert(name, part);
    }
    let interests = spec.requires.iter().map(|r| &r.service).chain(&spec.watch);
    for service in interests {
        parts.insert(format!("services.{service}"), members(service));
    }
    seal(parts)
}

/// One input whose digest differs between a recorded fingerprint and a new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedInput {
    /// The input's part name (`settings`, `params.region`, `inputs.build.url`, ...).
    pub input: String,
    /// How it changed.
    pub change: InputChange,
}

/// How one input changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputChange {
    /// Its digest differs.
    Changed,
    /// The step did not take it before.
    Added,
    /// The step no longer takes it.
    Removed,
    /// Nothing was recorded to compare with (an attempt recorded before fingerprints, or none):
    /// it counts as changed.
    UnknownBefore,
}

impl InputChange {
    /// How a plan says it.
    pub const fn as_str(&self) -> &'static str {
        match self {
            InputChange::Changed => "changed",
            InputChange::Added => "added",
            InputChange::Removed => "removed",
            InputChange::UnknownBefore => "changed (unknown before)",
        }
    }
}

/// The inputs that differ between what a step last ran with (`recorded`, `None` when unknown)
/// and what it would run with now, by part name. Empty when it would run with the same inputs.
/// A secret's part only says the step reads it: a new value of the same secret is not seen here.
pub fn compare(recorded: Option<&InputFingerprint>, new: &InputFingerprint) -> Vec<ChangedInput> {
    let Some(recorded) = recorded else {
        return new
            .parts
            .keys()
            .map(|input| changed(input, InputChange::UnknownBefore))
            .collect();
    };
    if recorded.hash == new.hash {
        return Vec::new();
    }
    let names: BTreeSet<&String> = recorded.parts.keys().chain(new.parts.keys()).collect();
    names
        .into_iter()
        .filter_map(|input| {
            let change = match (recorded.parts.get(input), new.parts.get(input)) {
                (Some(before), Some(now)) if before == now => return None,
                (Some(_), Some(_)) => InputChange::Changed,
                (None, _) => InputChange::Added,
                (_, None) => InputChange::Removed,
            };
            Some(changed(input, change))
        })
        .collect()
}

fn changed(input: &str, change: InputChange) -> ChangedInput {
    ChangedInput {
        input: input.to_owned(),
        change,
    }
}

/// The parts the step's own spec gives: its kind, settings and limits.
fn own_parts(spec: &StepSpec) -> BTreeMap<String, String> {
    let settings = serde_json::json!({
        "with": spec.with,
        "provides": spec.provides,
    });
    let limits = serde_json::json!({
        "timeout_ms": spec.timeout_ms,
        "limits": spec.limits,
    });
    BTreeMap::from([
        ("kind".to_owned(), digest(&spec.kind)),
        ("settings".to_owned(), digest_json(&settings)),
        ("limits".to_owned(), digest_json(&limits)),
    ])
}

/// Each file the step takes, as the runner gives them: every inline file of a deployment
/// recorded before the payload store, and the stored ones under the step's folder.
fn files(blueprint: &BlueprintSnapshot, spec: &StepSpec, parts: &mut BTreeMap<String, String>) {
    for (path, text) in &blueprint.files {
        parts.insert(format!("files.{path}"), digest(text));
    }
    let Some(dir) = bundle_dir(spec) else {
        return;
    };
    for (path, stored) in &blueprint.stored_files {
        let under = dir.is_empty()
            || path
                .strip_prefix(&dir)
                .is_some_and(|rest| rest.starts_with('/'));
        if under {
            // The recorded SHA-256 is the content's: the runner refuses bytes that differ.
            parts.insert(format!("files.{path}"), stored.sha256.clone());
        }
    }
}

/// The host group the step's `hosts` setting names, with its addresses as written.
fn host_group<'a>(
    blueprint: &'a BlueprintSnapshot,
    spec: &'a StepSpec,
) -> Option<(&'a str, &'a Vec<String>)> {
    let group = spec.with.get("hosts")?.as_str()?;
    Some((group, blueprint.hosts.get(group)?))
}

/// Every reference the texts' templates make, each once.
fn references(texts: &[&str]) -> BTreeSet<Reference> {
    texts
        .iter()
        .filter_map(|text| Template::parse(text).ok())
        .flat_map(|template| template.references().cloned().collect::<Vec<_>>())
        .collect()
}

/// The fingerprint of these parts: the digest over them all, and them.
fn seal(parts: BTreeMap<String, String>) -> InputFingerprint {
    let mut all = Sha256::new();
    for (name, part) in &parts {
        all.update(format!("{name}={part}\n").as_bytes());
    }
    InputFingerprint {
        hash: hex::encode(all.finalize()),
        parts,
    }
}

fn digest(text: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(text.as_ref()))
}

/// The digest of a JSON value written with its objects' keys sorted, so that the order a
/// blueprint wrote them in does not count.
fn digest_json(value: &Value) -> String {
    digest(canonical(value).to_string())
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> = map
                .iter()
                .map(|(key, item)| (key, canonical(item)))
                .collect();
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(key, item)| (key.clone(), item))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
