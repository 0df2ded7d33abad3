//! Reading and validating blueprints.
//!
//! [`parse`] turns a blueprint's YAML text into a [`BlueprintSnapshot`] or into every problem it
//! has, each naming the field (`steps.build.needs`) and what is wrong with it. Nothing runs until
//! a blueprint passes. Its parts:
//!
//! - `raw`: the YAML as serde reads it; `top`: the fields besides steps (params, secrets,
//!   `on_failure`, hosts); `step`: one step, its kind read through [`crate::kind::Kind`];
//!   `cycles`: the needs and service waits as a graph.
//! - `references`, `bastion` (and egress), `services`: the checks across steps, once read.
//! - [`recorded_problems`]: what the engine needs of a recorded blueprint, whatever door it came
//!   through. [`attach_files`]: the steps' files from the blueprint's folder.
//!   [`resolve_params`], [`check_secrets`]: what a deployment is given.

mod bastion;
mod cycles;
mod files;
mod params;
mod raw;
mod recorded;
mod references;
mod services;
mod step;
mod top;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use overture_events::{BastionSpec, BlueprintSnapshot, StepSpec};
use sha2::{Digest, Sha256};

use crate::shape;
use crate::template::{Reference, Template};
use crate::text::{check_name, escaped};
use raw::RawBlueprint;

pub use files::{attach_files, bundle_dirs};
pub use params::{check_secrets, resolve_params};
pub use recorded::recorded_problems;

/// How long running steps may go on after another failed for good, unless the blueprint says.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(120);
/// How long one attempt may run, unless the step says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest step name: it names sandboxes and log folders, which have length limits.
pub const MAX_STEP_NAME: usize = crate::text::MAX_NAME;

/// The most a blueprint's steps may take from its folder, in all: the files are kept with the
/// deployment, by size and hash in its history and their text in the payload store.
pub const MAX_FILES_BYTES: usize = 1024 * 1024;

/// One thing wrong with a blueprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlueprintProblem {
    /// Where: a dotted path such as `steps.build.needs`, or `(top level)`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// Both parts are [escaped]: they quote what the user wrote (names, keys, values), and an
/// error must not be able to write a raw escape sequence to the terminal that shows it.
impl fmt::Display for BlueprintProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", escaped(&self.field), escaped(&self.problem))
    }
}

/// Every problem found in a blueprint (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct BlueprintError(pub Vec<BlueprintProblem>);

impl BlueprintError {
    fn one(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self(vec![BlueprintProblem {
            field: field.into(),
            problem: problem.into(),
        }])
    }
}

/// A parsed blueprint and the hash of the text it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedBlueprint {
    /// The validated blueprint.
    pub snapshot: BlueprintSnapshot,
    /// SHA-256 of the text, hex.
    pub hash: String,
    /// What is allowed but likely not meant: a required service this blueprint alone cannot
    /// provide enough of. Shown to the user; nothing is refused for it.
    pub warnings: Vec<BlueprintProblem>,
}

/// Who the engine logs in as on a bastion that does not say.
pub const DEFAULT_BASTION_USER: &str = "root";


/// Parses and validates a blueprint's YAML text. A text too large or too deep, or with a key
/// given twice, is refused before it is read: which of two equal keys was meant is unknown, so
/// the rest is not checked until that is settled.
pub fn parse(text: &str) -> Result<ParsedBlueprint, BlueprintError> {
    let shape = shape::check(text);
    if !shape.is_empty() {
        return Err(BlueprintError(shape));
    }
    let raw: RawBlueprint = serde_yaml_ng::from_str(text).map_err(yaml_problem)?;
    let mut problems = Vec::new();
    let mut problem = |field: String, text: String| {
        problems.push(BlueprintProblem {
            field,
            problem: text,
        })
    };

    if let Err(error) = check_name(&raw.name) {
        problem("name".into(), format!("the blueprint's name {error}"));
    }
    let params = top::params(&raw.params, &mut problem);
    top::check_secret_names(&raw.secrets, &mut problem);
    let grace_ms = top::grace_ms(raw.on_failure.as_ref(), &mut problem);
    let hosts = top::hosts(&raw.hosts, &mut problem);

    if raw.steps.is_empty() {
        problem("steps".into(), "a blueprint needs at least one step".into());
    }
    let steps: Vec<StepSpec> = raw
        .steps
        .iter()
        .map(|(name, step)| step::read(name, step, &raw.steps, &hosts, &mut problem))
        .collect();
    cycles::check(&steps, &mut problem);

    let snapshot = BlueprintSnapshot {
        name: raw.name,
        description: raw.description,
        params,
        secrets: raw.secrets,
        grace_ms,
        steps,
        hosts,
        files: BTreeMap::new(),
        stored_files: BTreeMap::new(),
        bastion: raw.bastion.map(|bastion| BastionSpec {
            host: bastion.host,
            security_group: bastion.security_group,
            user: bastion
                .user
                .unwrap_or_else(|| DEFAULT_BASTION_USER.to_owned()),
        }),
        egress: raw.egress,
    };
    checked_whole(text, snapshot, problems)
}

/// The blueprint once its parts are read: what is wrong across steps (references, the bastion,
/// egress, what the engine records), or the parsed blueprint with its warnings.
fn checked_whole(
    text: &str,
    snapshot: BlueprintSnapshot,
    mut problems: Vec<BlueprintProblem>,
) -> Result<ParsedBlueprint, BlueprintError> {
    problems.extend(references::problems(&snapshot));
    let warnings = services::warnings(&snapshot);
    problems.extend(bastion::problems(&snapshot));
    problems.extend(bastion::egress_problems(&snapshot.egress));
    // What the engine needs of the result: mostly said above in the field's own words, so one
    // problem per field is enough.
    for found in recorded_problems(&snapshot) {
        if !problems.iter().any(|known| known.field == found.field) {
            problems.push(found);
        }
    }

    if problems.is_empty() {
        Ok(ParsedBlueprint {
            snapshot,
            hash: hex::encode(Sha256::digest(text.as_bytes())),
            warnings,
        })
    } else {
        Err(BlueprintError(problems))
    }
}

/// The outputs of step `source` that some template of the blueprint uses (in a step's settings,
/// a host group or the bastion), by key.
pub fn used_outputs(blueprint: &BlueprintSnapshot, source: &str) -> BTreeSet<String> {
    let settings = blueprint
        .steps
        .iter()
        .flat_map(|step| step.with.values().flat_map(strings_in));
    let groups = blueprint.hosts.values().flatten().map(String::as_str);
    let bastion = blueprint
        .bastion
        .iter()
        .flat_map(|bastion| [bastion.host.as_str(), bastion.security_group.as_str()]);
    settings
        .chain(groups)
        .chain(bastion)
        .filter_map(|text| Template::parse(text).ok())
        .flat_map(|template| {
            template
                .references()
                .filter_map(|reference| match reference {
                    Reference::Output { step, key } if step == source => Some(key.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every string inside a JSON value.
pub fn strings_in(value: &serde_json::Value) -> Vec<&str> {
    match value {
        serde_json::Value::String(text) => vec![text.as_str()],
        serde_json::Value::Array(items) => items.iter().flat_map(strings_in).collect(),
        serde_json::Value::Object(map) => map.values().flat_map(strings_in).collect(),
        _ => vec![],
    }
}

fn yaml_problem(error: serde_yaml_ng::Error) -> BlueprintError {
    // serde_yaml_ng prefixes nested errors with their path ("steps.build: unknown field ...").
    let message = error.to_string();
    let (field, problem) = match message.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') => (path.to_owned(), rest.to_owned()),
        _ => ("(top level)".to_owned(), message.clone()),
    };
    let problem = match error.location() {
        Some(at) if !problem.contains("line ") => {
            format!("{problem} (line {}, column {})", at.line(), at.column())
        }
        _ => problem,
    };
    BlueprintError::one(field, problem)
}

fn yaml_to_json(value: &serde_yaml_ng::Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

fn scalar_text(value: &serde_yaml_ng::Value) -> Option<String> {
    match value {
        serde_yaml_ng::Value::String(text) => Some(text.clone()),
        serde_yaml_ng::Value::Number(number) => Some(number.to_string()),
        serde_yaml_ng::Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn zero_duration(text: &str) -> String {
    format!("`{text}` is no time at all; give a duration like 30s or 10m")
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A duration that must not be zero, in milliseconds; 0, with the problem recorded under
/// `field`, when the text is not one.
fn positive_ms(text: &str, field: String, problem: &mut impl FnMut(String, String)) -> u64 {
    match crate::duration::read_duration(text) {
        Ok(d) if !d.is_zero() => duration_ms(d),
        Ok(_) => {
            problem(field, zero_duration(text));
            0
        }
        Err(error) => {
            problem(field, error.to_string());
            0
        }
    }
}

fn is_slug(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn is_identifier(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
