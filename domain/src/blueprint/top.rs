//! A blueprint's fields besides its steps, read and checked: `params`, `secrets`,
//! `on_failure.grace` and `hosts`.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use overture_events::ParamSpec;

use super::raw::{RawOnFailure, RawParam};
use super::{duration_ms, is_identifier, scalar_text, DEFAULT_GRACE};
use crate::duration::read_duration;
use crate::kind;
use crate::text::check_name;

/// The declared parameters, with their defaults as text.
pub(super) fn params(
    raw: &IndexMap<String, Option<RawParam>>,
    problem: &mut impl FnMut(String, String),
) -> Vec<ParamSpec> {
    let mut params = Vec::new();
    for (name, spec) in raw {
        if !is_identifier(name) {
            problem(
                format!("params.{name}"),
                "a parameter name must be letters, digits and '_', not starting with a digit"
                    .into(),
            );
        }
        let default = match spec.as_ref().and_then(|p| p.default.as_ref()) {
            None => None,
            Some(value) => match scalar_text(value) {
                Some(text) => Some(text),
                None => {
                    problem(
                        format!("params.{name}.default"),
                        "a default must be a single value (text, number or boolean)".into(),
                    );
                    None
                }
            },
        };
        params.push(ParamSpec {
            name: name.clone(),
            default,
        });
    }
    params
}

/// Checks the secrets' names: identifiers, each listed once.
pub(super) fn check_secret_names(secrets: &[String], problem: &mut impl FnMut(String, String)) {
    let mut seen_secrets = BTreeSet::new();
    for (i, name) in secrets.iter().enumerate() {
        if !is_identifier(name) {
            problem(
                format!("secrets[{i}]"),
                format!("`{name}` must be letters, digits and '_', not starting with a digit"),
            );
        }
        if !seen_secrets.insert(name.as_str()) {
            problem(format!("secrets[{i}]"), format!("`{name}` is listed twice"));
        }
    }
}

/// How long running steps may go on after another failed for good, in milliseconds.
pub(super) fn grace_ms(
    on_failure: Option<&RawOnFailure>,
    problem: &mut impl FnMut(String, String),
) -> u64 {
    match on_failure.and_then(|f| f.grace.as_deref()) {
        None => duration_ms(DEFAULT_GRACE),
        Some(text) => read_duration(text)
            .map(duration_ms)
            .unwrap_or_else(|error| {
                problem("on_failure.grace".into(), error.to_string());
                0
            }),
    }
}

/// The host groups, by name.
pub(super) fn hosts(
    raw: &IndexMap<String, Vec<String>>,
    problem: &mut impl FnMut(String, String),
) -> BTreeMap<String, Vec<String>> {
    let mut hosts = BTreeMap::new();
    for (group, addresses) in raw {
        if let Err(error) = check_name(group) {
            problem(
                format!("hosts.{group}"),
                format!("a host group's name {error}"),
            );
        }
        if addresses.is_empty() {
            problem(
                format!("hosts.{group}"),
                "a host group needs at least one address:port".into(),
            );
        }
        for (i, address) in addresses.iter().enumerate() {
            if let Some(problem_text) = kind::address_problem(address) {
                problem(format!("hosts.{group}[{i}]"), problem_text);
            }
        }
        hosts.insert(group.clone(), addresses.clone());
    }
    hosts
}
