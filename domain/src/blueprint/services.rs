//! The services a blueprint's steps provide and require: each step's `provides:` and
//! `requires:` read, the graph in which a wait is a need, and the warnings for counts the
//! blueprint alone cannot meet.

use std::collections::BTreeSet;
use std::time::Duration;

use overture_events::{
    BlueprintSnapshot, ServiceCheck, ServiceProvision, ServiceRequirement, StepSpec,
};

use super::raw::{RawProvides, RawRequirement};
use super::{duration_ms, positive_ms, BlueprintProblem};
use crate::duration::format_duration;
use crate::kind;
use crate::text::check_name;

/// The `provides:` of a step, or `None` with its problems recorded.
pub(super) fn provision(
    raw: &RawProvides,
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) -> Option<ServiceProvision> {
    let mut ok = true;
    if let Err(error) = check_name(&raw.service) {
        problem(
            field(".provides.service"),
            format!("a service's name {error}"),
        );
        ok = false;
    }
    let port = u16::try_from(raw.port).ok().filter(|port| *port != 0);
    if port.is_none() {
        problem(
            field(".provides.port"),
            format!("`{}` is not a TCP port: give 1 to 65535", raw.port),
        );
    }
    let check = match &raw.check {
        None => Some(ServiceCheck::Tcp),
        Some(serde_yaml_ng::Value::String(text)) if text == "tcp" => Some(ServiceCheck::Tcp),
        Some(serde_yaml_ng::Value::Mapping(map)) if map.len() == 1 => {
            match (map.get("http"), map.keys().next()) {
                (Some(serde_yaml_ng::Value::String(path)), _)
                    if path.starts_with('/') && !path.chars().any(char::is_whitespace) =>
                {
                    Some(ServiceCheck::Http { path: path.clone() })
                }
                _ => None,
            }
        }
        Some(_) => None,
    };
    if check.is_none() {
        problem(
            field(".provides.check"),
            "write `check: tcp` (the port accepts a connection) or `check: { http: /PATH }` (a GET of the path answers 2xx)".into(),
        );
    }
    Some(ServiceProvision {
        service: raw.service.clone(),
        port: port?,
        check: check?,
    })
    .filter(|_| ok)
}

/// The `requires:` of a step, defaults filled in, with their problems recorded.
pub(super) fn requirements(
    raw: &[RawRequirement],
    field: &impl Fn(&str) -> String,
    problem: &mut impl FnMut(String, String),
) -> Vec<ServiceRequirement> {
    let mut seen = BTreeSet::new();
    let mut requires = Vec::new();
    for (i, need) in raw.iter().enumerate() {
        let at = |key: &str| field(&format!(".requires[{i}]{key}"));
        if let Err(error) = check_name(&need.service) {
            problem(at(".service"), format!("a service's name {error}"));
        }
        if !seen.insert(need.service.as_str()) {
            problem(
                at(".service"),
                format!(
                    "`{}` is required twice; give it once, with the larger count",
                    need.service
                ),
            );
        }
        let count = need.count.unwrap_or(1);
        if count == 0 {
            problem(
                at(".count"),
                "a step requires at least 1 instance; leave the service out to wait for none"
                    .into(),
            );
        }
        let timeout_ms = match &need.timeout {
            None => duration_ms(crate::services::DEFAULT_SERVICE_WAIT),
            Some(text) => positive_ms(text, at(".timeout"), problem),
        };
        requires.push(ServiceRequirement {
            service: need.service.clone(),
            count,
            timeout_ms,
        });
    }
    requires
}

/// The steps with each step that requires a service needing every step of the blueprint that
/// provides it: the graph in which a wait is a need.
pub(super) fn with_providers(steps: &[StepSpec]) -> Vec<StepSpec> {
    steps
        .iter()
        .map(|step| {
            let mut step = step.clone();
            for need in &step.requires.clone() {
                step.needs.extend(
                    steps
                        .iter()
                        .filter(|other| {
                            other
                                .provides
                                .as_ref()
                                .is_some_and(|p| p.service == need.service)
                        })
                        .map(|provider| provider.name.clone()),
                );
            }
            step
        })
        .collect()
}

/// A warning for each required count that the blueprint's own providers cannot meet: the step
/// then waits for other deployments of the tenant, and fails at its timeout if none provide.
pub(super) fn warnings(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
    let mut warnings = Vec::new();
    for step in &blueprint.steps {
        for (i, need) in step.requires.iter().enumerate() {
            let providers: Vec<&StepSpec> = blueprint
                .steps
                .iter()
                .filter(|s| {
                    s.provides
                        .as_ref()
                        .is_some_and(|p| p.service == need.service)
                })
                .collect();
            let wait = format_duration(Duration::from_millis(need.timeout_ms));
            let capacity: Option<usize> = providers
                .iter()
                .map(|provider| {
                    let hosts = provider.with.get("hosts")?;
                    kind::host_list(hosts, &blueprint.hosts)
                        .ok()
                        .map(|list| list.len())
                })
                .sum();
            let problem = if providers.is_empty() {
                format!(
                    "no step of this blueprint provides service `{}`: the step waits up to {wait} for another deployment of the tenant to register {} instance(s), and fails as service-timeout if none does",
                    need.service, need.count
                )
            } else {
                match capacity {
                    Some(hosts) if hosts < need.count as usize => format!(
                        "this blueprint's steps provide at most {hosts} instance(s) of service `{}`, fewer than the {} required: the step waits up to {wait} for other deployments of the tenant to register the rest",
                        need.service, need.count
                    ),
                    _ => continue,
                }
            };
            warnings.push(BlueprintProblem {
                field: format!("steps.{}.requires[{i}]", step.name),
                problem,
            });
        }
    }
    warnings
}
