//! One step of a blueprint, read and checked: its kind and settings (through
//! [`Kind`](crate::kind::Kind), which owns what each kind takes), needs, timeout, retry rules,
//! limits, the services it provides, requires and watches.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use indexmap::IndexMap;
use overture_events::{ErrorClass, RetryRule, StepSpec};
use serde_json::Value;

use super::raw::{RawRetry, RawStep};
use super::services::{provision, requirements};
use super::{duration_ms, positive_ms, yaml_to_json, DEFAULT_TIMEOUT};
use crate::duration::{format_duration, read_duration};
use crate::kind::{self, Kind};
use crate::text::check_name;

/// The step `name` as recorded, with its problems recorded.
pub(super) fn read(
    name: &str,
    step: &RawStep,
    steps: &IndexMap<String, RawStep>,
    hosts: &BTreeMap<String, Vec<String>>,
    problem: &mut impl FnMut(String, String),
) -> StepSpec {
    let field = |rest: &str| format!("steps.{name}{rest}");
    if let Err(error) = check_name(name) {
        problem(field(""), format!("the step name {error}"));
    }
    let with = settings(step, hosts, &field, problem);
    check_needs(&step.needs, steps, &field, problem);
    let timeout_ms = match &step.timeout {
        None => duration_ms(DEFAULT_TIMEOUT),
        Some(text) => positive_ms(text, field(".timeout"), problem),
    };
    check_wait(&step.run, &with, timeout_ms, &field, problem);
    let retry = retry_rules(&step.retry, &field, problem);
    let limits = crate::limits::effective(step.limits.as_ref()).unwrap_or_else(|bad| {
        for (limit, text) in bad {
            problem(field(&format!(".limits.{limit}")), text);
        }
        Default::default()
    });
    let provides = step
        .provides
        .as_ref()
        .and_then(|raw| provision(raw, &field, problem));
    if provides.is_some() && !with.contains_key("hosts") {
        problem(
            field(".provides"),
            "a service runs on the step's hosts: give the step `with.hosts`, or provide the service from a step that configures them".into(),
        );
    }
    let requires = requirements(&step.requires, &field, problem);
    check_watch(&step.watch, &field, problem);
    StepSpec {
        name: name.to_owned(),
        kind: step.run.clone(),
        with,
        needs: step.needs.clone(),
        timeout_ms,
        retry,
        limits: Some(limits),
        provides,
        requires,
        watch: step.watch.clone(),
    }
}

/// The step's `with` as JSON, checked by its kind; an unknown kind is a problem of `run`.
fn settings(
    step: &RawStep,
    hosts: &BTreeMap<String, Vec<String>>,
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) -> BTreeMap<String, Value> {
    let with: BTreeMap<String, Value> = step
        .with
        .iter()
        .map(|(key, value)| (key.clone(), yaml_to_json(value)))
        .collect();
    match Kind::parse(&step.run) {
        Some(kind) => {
            for (rest, text) in kind.check_with(&with, hosts) {
                problem(field(&format!(".with{rest}")), text);
            }
        }
        None => problem(
            field(".run"),
            format!(
                "unknown step kind `{}`; the kinds are: {}",
                step.run,
                kind::names().join(", ")
            ),
        ),
    }
    with
}

/// Checks every need names a step of the blueprint.
fn check_needs(
    needs: &[String],
    steps: &IndexMap<String, RawStep>,
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) {
    for need in needs {
        if !steps.contains_key(need) {
            problem(
                field(".needs"),
                format!(
                    "unknown step `{need}`; the steps are: {}",
                    steps.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }
}

/// A wait that outlasts the attempt would end as a plain timeout, never saying what it waited
/// for (SSH, or servers to boot): the kinds that wait must wait less than the step's timeout.
fn check_wait(
    run: &str,
    with: &BTreeMap<String, Value>,
    timeout_ms: u64,
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) {
    let Some(default_wait) = Kind::parse(run).and_then(Kind::default_wait) else {
        return;
    };
    let wait = with
        .get("timeout")
        .and_then(|v| v.as_str())
        .and_then(|text| read_duration(text).ok())
        .unwrap_or(default_wait);
    if timeout_ms > 0 && duration_ms(wait) >= timeout_ms {
        problem(
            field(".with.timeout"),
            format!(
                "the wait ({}) must be shorter than the step's `timeout` ({}); raise the step's `timeout`",
                format_duration(wait),
                format_duration(Duration::from_millis(timeout_ms))
            ),
        );
    }
}

/// The step's retry rules by error class; the classes that are never retried are refused.
fn retry_rules(
    raw: &IndexMap<String, RawRetry>,
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) -> BTreeMap<ErrorClass, RetryRule> {
    let mut retry = BTreeMap::new();
    for (class_name, rule) in raw {
        let Ok(class) = class_name.parse::<ErrorClass>() else {
            let classes: Vec<&str> = ErrorClass::ALL.iter().map(ErrorClass::as_str).collect();
            problem(
                field(&format!(".retry.{class_name}")),
                format!(
                    "unknown error class; the classes are: {}",
                    classes.join(", ")
                ),
            );
            continue;
        };
        if class == ErrorClass::ServiceTimeout {
            problem(
                field(&format!(".retry.{class_name}")),
                "a wait for services is not retried, since the step never ran: give a longer `timeout` under `requires`, or redrive the deployment".into(),
            );
            continue;
        }
        if class == ErrorClass::EgressRefused {
            problem(
                field(&format!(".retry.{class_name}")),
                "a refused destination is not retried, since it would be refused again: declare it under `egress:` (and have the engine's operator allow the host's loopback), or call another address".into(),
            );
            continue;
        }
        let wait_ms = match &rule.wait {
            None => 0,
            Some(text) => read_duration(text)
                .map(duration_ms)
                .unwrap_or_else(|error| {
                    problem(
                        field(&format!(".retry.{class_name}.wait")),
                        error.to_string(),
                    );
                    0
                }),
        };
        retry.insert(
            class,
            RetryRule {
                times: rule.times,
                wait_ms,
            },
        );
    }
    retry
}

/// Checks the services the step watches: names, each listed once.
fn check_watch(
    watch: &[String],
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) {
    let mut watched = BTreeSet::new();
    for (i, service) in watch.iter().enumerate() {
        if let Err(error) = check_name(service) {
            problem(
                field(&format!(".watch[{i}]")),
                format!("a service's name {error}"),
            );
        }
        if !watched.insert(service.as_str()) {
            problem(
                field(&format!(".watch[{i}]")),
                format!("`{service}` is listed twice"),
            );
        }
    }
}
