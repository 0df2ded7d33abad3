//! Reading and validating blueprints.
//!
//! [`parse`] turns a blueprint's YAML text into a [`BlueprintSnapshot`] or into every problem it
//! has, each naming the field (`steps.build.needs`) and what is wrong with it. Nothing runs until
//! a blueprint passes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use indexmap::IndexMap;
use overture_events::{
    BastionSpec, BlueprintSnapshot, ErrorClass, ParamSpec, RetryRule, ServiceCheck,
    ServiceProvision, ServiceRequirement, StepSpec,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::duration::{self as durations, format_duration, read_duration};
use crate::graph::{self, Cycle};
use crate::kinds;
use crate::shape;
use crate::template::{Reference, Template};
use crate::text::{check_name, escaped};

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBlueprint {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    params: IndexMap<String, Option<RawParam>>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    on_failure: Option<RawOnFailure>,
    #[serde(default)]
    hosts: IndexMap<String, Vec<String>>,
    #[serde(default)]
    bastion: Option<RawBastion>,
    #[serde(default)]
    egress: Vec<String>,
    steps: IndexMap<String, RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBastion {
    host: String,
    security_group: String,
    #[serde(default)]
    user: Option<String>,
}

/// Who the engine logs in as on a bastion that does not say.
pub const DEFAULT_BASTION_USER: &str = "root";

/// The step kind that makes servers in the tenant's cloud.
pub const SERVERS_KIND: &str = "servers";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    #[serde(default)]
    default: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnFailure {
    #[serde(default)]
    grace: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    run: String,
    #[serde(default)]
    with: BTreeMap<String, serde_yaml_ng::Value>,
    #[serde(default)]
    needs: Vec<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retry: IndexMap<String, RawRetry>,
    #[serde(default)]
    limits: Option<crate::limits::RawLimits>,
    #[serde(default)]
    provides: Option<RawProvides>,
    #[serde(default)]
    requires: Vec<RawRequirement>,
    #[serde(default)]
    watch: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvides {
    service: String,
    port: u32,
    #[serde(default)]
    check: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequirement {
    service: String,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    times: u32,
    #[serde(default)]
    wait: Option<String>,
}

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

    let mut params = Vec::new();
    for (name, spec) in &raw.params {
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

    let mut seen_secrets = BTreeSet::new();
    for (i, name) in raw.secrets.iter().enumerate() {
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

    let grace_ms = match raw.on_failure.as_ref().and_then(|f| f.grace.as_deref()) {
        None => duration_ms(DEFAULT_GRACE),
        Some(text) => read_duration(text)
            .map(duration_ms)
            .unwrap_or_else(|error| {
                problem("on_failure.grace".into(), error.to_string());
                0
            }),
    };

    let mut hosts = BTreeMap::new();
    for (group, addresses) in &raw.hosts {
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
            if let Some(problem_text) = kinds::address_problem(address) {
                problem(format!("hosts.{group}[{i}]"), problem_text);
            }
        }
        hosts.insert(group.clone(), addresses.clone());
    }

    if raw.steps.is_empty() {
        problem("steps".into(), "a blueprint needs at least one step".into());
    }
    let mut steps = Vec::new();
    for (name, step) in &raw.steps {
        let field = |rest: &str| format!("steps.{name}{rest}");
        if let Err(error) = check_name(name) {
            problem(field(""), format!("the step name {error}"));
        }
        let with: BTreeMap<String, serde_json::Value> = step
            .with
            .iter()
            .map(|(key, value)| (key.clone(), yaml_to_json(value)))
            .collect();
        if kinds::is_known(&step.run) {
            for (rest, text) in kinds::check_with(&step.run, &with, &hosts) {
                problem(field(&format!(".with{rest}")), text);
            }
        } else {
            problem(
                field(".run"),
                format!(
                    "unknown step kind `{}`; the kinds are: {}",
                    step.run,
                    kinds::names().join(", ")
                ),
            );
        }
        for need in &step.needs {
            if !raw.steps.contains_key(need) {
                problem(
                    field(".needs"),
                    format!(
                        "unknown step `{need}`; the steps are: {}",
                        raw.steps.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                );
            }
        }
        let timeout_ms = match &step.timeout {
            None => duration_ms(DEFAULT_TIMEOUT),
            Some(text) => match read_duration(text) {
                Ok(d) if !d.is_zero() => duration_ms(d),
                Ok(_) => {
                    problem(field(".timeout"), zero_duration(text));
                    0
                }
                Err(error) => {
                    problem(field(".timeout"), error.to_string());
                    0
                }
            },
        };
        // A wait that outlasts the attempt would end as a plain timeout, never saying what it
        // waited for (SSH, or servers to boot).
        let default_wait = match step.run.as_str() {
            "wait-ssh" => Some(kinds::DEFAULT_SSH_WAIT),
            SERVERS_KIND => Some(crate::servers::DEFAULT_BOOT_WAIT),
            _ => None,
        };
        if let Some(default_wait) = default_wait {
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
        let mut retry = BTreeMap::new();
        for (class_name, rule) in &step.retry {
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
        let limits = crate::limits::effective(step.limits.as_ref()).unwrap_or_else(|bad| {
            for (limit, text) in bad {
                problem(field(&format!(".limits.{limit}")), text);
            }
            Default::default()
        });
        let provides = step
            .provides
            .as_ref()
            .and_then(|raw| provision(raw, &field, &mut problem));
        if provides.is_some() && !with.contains_key("hosts") {
            problem(
                field(".provides"),
                "a service runs on the step's hosts: give the step `with.hosts`, or provide the service from a step that configures them".into(),
            );
        }
        let requires = requirements(&step.requires, &field, &mut problem);
        let mut watched = BTreeSet::new();
        for (i, service) in step.watch.iter().enumerate() {
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
        steps.push(StepSpec {
            name: name.clone(),
            kind: step.run.clone(),
            with,
            needs: step.needs.clone(),
            timeout_ms,
            retry,
            limits: Some(limits),
            provides,
            requires,
            watch: step.watch.clone(),
        });
    }

    let needs_cycles = graph::find_cycles(&steps);
    if needs_cycles.is_empty() {
        for cycle in graph::find_cycles(&with_providers(&steps)) {
            let path = match cycle {
                Cycle::SelfNeed(step) => vec![step.clone(), step],
                Cycle::Round { path, .. } => path,
            };
            problem(
                "steps".into(),
                format!(
                    "the needs and the services required form a cycle: {}; a step cannot wait for a service that only a step after it provides",
                    path.join(" → ")
                ),
            );
        }
    }
    for cycle in needs_cycles {
        match cycle {
            Cycle::SelfNeed(step) => problem(
                format!("steps.{step}.needs"),
                format!("step `{step}` needs itself; remove `{step}` from its needs"),
            ),
            Cycle::Round { path, others } => problem(
                "steps".into(),
                format!(
                    "the needs form a cycle: {}; remove one of these needs{}",
                    path.join(" → "),
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (steps {} are on other cycles with them)",
                            others.join(", ")
                        )
                    }
                ),
            ),
        }
    }

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
    problems.extend(reference_problems(&snapshot));
    let warnings = service_warnings(&snapshot);
    problems.extend(bastion_problems(&snapshot));
    problems.extend(egress_problems(&snapshot.egress));
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

/// What the engine needs of a blueprint as it is recorded, checked again on the snapshot
/// (whichever door it came through, and when a recorded deployment is run again): every
/// duration at most [`durations::MAX_DURATION`], every file's path plain and inside the
/// blueprint's folder, and no NUL byte in any text a step is given.
pub fn recorded_problems(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
    let mut problems = Vec::new();
    let mut problem = |field: String, problem: String| {
        problems.push(BlueprintProblem { field, problem });
    };
    let mut texts: Vec<(String, &str)> = vec![("name".into(), blueprint.name.as_str())];
    if let Some(description) = &blueprint.description {
        texts.push(("description".into(), description));
    }
    for param in &blueprint.params {
        texts.push((format!("params.{}", param.name), &param.name));
        if let Some(default) = &param.default {
            texts.push((format!("params.{}.default", param.name), default));
        }
    }
    for (i, name) in blueprint.secrets.iter().enumerate() {
        texts.push((format!("secrets[{i}]"), name));
    }
    for (group, addresses) in &blueprint.hosts {
        texts.push((format!("hosts.{group}"), group));
        for (i, address) in addresses.iter().enumerate() {
            texts.push((format!("hosts.{group}[{i}]"), address));
        }
    }
    if let Some(bastion) = &blueprint.bastion {
        texts.push(("bastion.host".into(), &bastion.host));
        texts.push(("bastion.security_group".into(), &bastion.security_group));
        texts.push(("bastion.user".into(), &bastion.user));
    }
    for (i, entry) in blueprint.egress.iter().enumerate() {
        texts.push((format!("egress[{i}]"), entry));
    }
    if let Some(problem_text) = durations::recorded_problem(blueprint.grace_ms) {
        problem("on_failure.grace".into(), problem_text);
    }
    for step in &blueprint.steps {
        let field = |rest: &str| format!("steps.{}{rest}", step.name);
        texts.push((field(""), &step.name));
        texts.push((field(".run"), &step.kind));
        for need in &step.needs {
            texts.push((field(".needs"), need));
        }
        for (field, text) in
            crate::inputs::nul_problems_in(&field(".with"), &serde_json::json!(step.with))
        {
            problem(field, text);
        }
        if let Some(problem_text) = durations::recorded_problem(step.timeout_ms) {
            problem(field(".timeout"), problem_text);
        }
        for (class, rule) in &step.retry {
            if let Some(problem_text) = durations::recorded_problem(rule.wait_ms) {
                problem(field(&format!(".retry.{class}.wait")), problem_text);
            }
        }
        for (i, need) in step.requires.iter().enumerate() {
            texts.push((field(&format!(".requires[{i}].service")), &need.service));
            if let Some(problem_text) = durations::recorded_problem(need.timeout_ms) {
                problem(field(&format!(".requires[{i}].timeout")), problem_text);
            }
        }
        if let Some(provides) = &step.provides {
            texts.push((field(".provides.service"), &provides.service));
            if let ServiceCheck::Http { path } = &provides.check {
                texts.push((field(".provides.check"), path));
            }
        }
        for (i, service) in step.watch.iter().enumerate() {
            texts.push((field(&format!(".watch[{i}]")), service));
        }
        // The kinds that wait inside the attempt keep their wait as written.
        let wait = step.with.get("timeout").and_then(serde_json::Value::as_str);
        if let (Some(text), "wait-ssh" | SERVERS_KIND) = (wait, step.kind.as_str()) {
            if let Err(long @ durations::DurationError::TooLong(_)) = read_duration(text) {
                problem(field(".with.timeout"), long.to_string());
            }
        }
    }
    for (field, text) in texts {
        if let Some(problem_text) = crate::inputs::nul_problem(text) {
            problem(field, problem_text);
        }
    }
    for path in blueprint.files.keys().chain(blueprint.stored_files.keys()) {
        if let Some(problem_text) = crate::inputs::path_problem(path) {
            problem("files".into(), problem_text);
        }
    }
    problems
}

/// The `provides:` of a step, or `None` with its problems recorded.
fn provision(
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
fn requirements(
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
            Some(text) => match read_duration(text) {
                Ok(d) if !d.is_zero() => duration_ms(d),
                Ok(_) => {
                    problem(at(".timeout"), zero_duration(text));
                    0
                }
                Err(error) => {
                    problem(at(".timeout"), error.to_string());
                    0
                }
            },
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
fn with_providers(steps: &[StepSpec]) -> Vec<StepSpec> {
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
fn service_warnings(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
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
                    kinds::host_list(hosts, &blueprint.hosts)
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

/// Checks every `egress:` entry is a destination a step may be allowed to reach.
fn egress_problems(egress: &[String]) -> Vec<BlueprintProblem> {
    egress
        .iter()
        .enumerate()
        .filter_map(|(index, entry)| {
            let reason = entry.parse::<crate::egress::Destination>().err()?;
            Some(BlueprintProblem {
                field: format!("egress[{index}]"),
                problem: format!(
                    "{reason}; write an IPv4 address with a TCP port (`10.0.0.5:443`), an \
                     address (`10.0.0.5`) or a network (`10.0.0.0/24`) outside 169.254.0.0/16; \
                     a port of the host's loopback is written `127.0.0.1:PORT`"
                ),
            })
        })
        .collect()
}

/// Checks the bastion: hosts made in the cloud need one, its templates name real steps, and every
/// step going through it comes after the steps its address and group come from.
fn bastion_problems(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
    let mut problems = Vec::new();
    let step_kind = |name: &str| blueprint.step(name).map(|step| step.kind.as_str());
    let Some(bastion) = &blueprint.bastion else {
        let made_in_cloud = blueprint.hosts.iter().find_map(|(group, addresses)| {
            addresses.iter().find_map(|address| {
                referenced_steps(address)
                    .into_iter()
                    .find(|step| step_kind(step) == Some(SERVERS_KIND))
                    .map(|step| (group, step))
            })
        });
        if let Some((group, step)) = made_in_cloud {
            problems.push(BlueprintProblem {
                field: "bastion".into(),
                problem: format!(
                    "host group `{group}` holds servers made by step `{step}`, which are reachable only through a bastion; \
                     add `bastion:` with its `host` and `security_group` (for example `{{{{ steps.{step}.outputs.bastion }}}}`)"
                ),
            });
        }
        return problems;
    };
    let mut sources = Vec::new();
    for (key, text) in [
        ("host", &bastion.host),
        ("security_group", &bastion.security_group),
    ] {
        let field = format!("bastion.{key}");
        if text.trim().is_empty() {
            problems.push(BlueprintProblem {
                field,
                problem: "must not be empty".into(),
            });
            continue;
        }
        let Some(template) = parsed_template(text, &field, &mut problems) else {
            continue;
        };
        for reference in template.references() {
            let problem = match reference {
                Reference::Secret(_) => Some(format!(
                    "`{reference}`: the bastion is recorded in the deployment's history, so it cannot be a secret"
                )),
                Reference::Service { .. } => Some(format!(
                    "`{reference}`: the bastion is reached before any service is, so it cannot come from one"
                )),
                _ => undeclared(blueprint, reference),
            };
            match (problem, reference) {
                (Some(problem), _) => problems.push(BlueprintProblem {
                    field: field.clone(),
                    problem,
                }),
                (None, Reference::Output { step, .. }) => sources.push(step.clone()),
                (None, _) => {}
            }
        }
    }
    if !is_slug(&bastion.user) {
        problems.push(BlueprintProblem {
            field: "bastion.user".into(),
            problem: format!("`{}` is not a user name", bastion.user),
        });
    }
    let mut dependents = graph::Dependents::new(&blueprint.steps);
    for step in &blueprint.steps {
        if !kinds::uses_bastion(&step.kind, &step.with) {
            continue;
        }
        for source in sources
            .iter()
            .filter(|source| !dependents.needs(&step.name, source))
        {
            problems.push(BlueprintProblem {
                field: format!("steps.{}.needs", step.name),
                problem: format!(
                    "the step goes through the bastion, whose address comes from step `{source}`; add `{source}` to its needs"
                ),
            });
        }
    }
    problems
}

/// The steps whose outputs a text's templates refer to (none when it does not parse).
fn referenced_steps(text: &str) -> Vec<String> {
    Template::parse(text)
        .map(|template| {
            template
                .references()
                .filter_map(|reference| match reference {
                    Reference::Output { step, .. } => Some(step.clone()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Checks every template in every step's settings refers to something that will exist.
fn reference_problems(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
    let mut problems = Vec::new();
    let mut dependents = graph::Dependents::new(&blueprint.steps);
    for step in &blueprint.steps {
        for (key, value) in &step.with {
            let field = format!("steps.{}.with.{key}", step.name);
            // A step naming a host group uses the group's addresses, and their templates.
            let group = match (key.as_str(), value) {
                ("hosts", serde_json::Value::String(group)) => blueprint.hosts.get(group),
                _ => None,
            };
            let texts = strings_in(value)
                .into_iter()
                .chain(group.into_iter().flatten().map(String::as_str));
            for text in texts {
                let Some(template) = parsed_template(text, &field, &mut problems) else {
                    continue;
                };
                for reference in template.references() {
                    let problem = undeclared(blueprint, reference).or_else(|| match reference {
                        Reference::Output { step: source, .. }
                            if !dependents.needs(&step.name, source) =>
                        {
                            Some(format!(
                                "`{reference}` refers to step `{source}`, which `{}` does not need; add `{source}` to its needs",
                                step.name
                            ))
                        }
                        Reference::Service { .. } if group.is_some() => Some(format!(
                            "`{reference}`: a host group cannot name a service's members; give the step's hosts as addresses or step outputs"
                        )),
                        Reference::Service { service, field } => service_problem(step, service, *field, reference),
                        _ => None,
                    });
                    if let Some(problem) = problem {
                        problems.push(BlueprintProblem {
                            field: field.clone(),
                            problem,
                        });
                    }
                }
            }
        }
    }
    problems
}

/// What is wrong with a step's template taking a service's members: the step must wait for the
/// service (or watch it), and for as many members as it takes.
fn service_problem(
    step: &StepSpec,
    service: &str,
    field: crate::template::ServiceField,
    reference: &Reference,
) -> Option<String> {
    let required = step.requires.iter().find(|need| need.service == service);
    let watched = step.watch.iter().any(|watched| watched == service);
    match (required, field) {
        // A step that only watches may start with no member at all: none can be taken by place.
        (None, crate::template::ServiceField::Address(at)) if watched => Some(format!(
            "`{reference}` takes member {at} of service `{service}`, but the step does not wait for any; require it with `count: {}`",
            at + 1
        )),
        (None, _) if watched => None,
        (None, _) => Some(format!(
            "`{reference}` refers to service `{service}`, which step `{}` neither requires nor watches; add `requires: [{{ service: {service} }}]`",
            step.name
        )),
        (Some(need), crate::template::ServiceField::Address(at)) if at >= need.count as usize => {
            Some(format!(
                "`{reference}` takes member {at} of service `{service}`, but the step waits for only {} member(s); require `count: {}`",
                need.count,
                at + 1
            ))
        }
        _ => None,
    }
}

/// The text's template, or `None` with the problem recorded under `field`.
fn parsed_template(
    text: &str,
    field: &str,
    problems: &mut Vec<BlueprintProblem>,
) -> Option<Template> {
    Template::parse(text)
        .map_err(|error| {
            problems.push(BlueprintProblem {
                field: field.to_owned(),
                problem: error.to_string(),
            })
        })
        .ok()
}

/// What is wrong with a reference to a parameter, secret or step the blueprint does not have.
fn undeclared(blueprint: &BlueprintSnapshot, reference: &Reference) -> Option<String> {
    match reference {
        Reference::Param(name) if !blueprint.params.iter().any(|p| &p.name == name) => {
            Some(format!(
                "`{reference}` refers to parameter `{name}`, which is not declared under `params`"
            ))
        }
        Reference::Secret(name) if !blueprint.secrets.contains(name) => Some(format!(
            "`{reference}` refers to secret `{name}`, which is not listed under `secrets`"
        )),
        Reference::Output { step, .. } if blueprint.step(step).is_none() => Some(format!(
            "`{reference}` refers to step `{step}`, which does not exist"
        )),
        _ => None,
    }
}

/// The folders (relative to the blueprint's) whose files the steps take, with the field naming
/// each.
pub fn bundle_dirs(blueprint: &BlueprintSnapshot) -> Vec<(String, String)> {
    blueprint
        .steps
        .iter()
        .filter_map(|step| {
            let dir = kinds::bundle_dir(&step.kind, &step.with)?;
            let key = if step.kind == "ansible" {
                "playbook"
            } else {
                "dir"
            };
            Some((format!("steps.{}.with.{key}", step.name), dir))
        })
        .collect()
}

/// Records the files the steps take from the blueprint's folder in the blueprint, and in its
/// hash. Fails when a step's files are missing or they are too large to record.
pub fn attach_files(
    parsed: &mut ParsedBlueprint,
    files: BTreeMap<String, String>,
) -> Result<(), BlueprintError> {
    let mut problems: Vec<BlueprintProblem> = files
        .keys()
        .filter_map(|path| crate::inputs::path_problem(path))
        .map(|problem| BlueprintProblem {
            field: "files".into(),
            problem,
        })
        .collect();
    for step in &parsed.snapshot.steps {
        let missing = match step.kind.as_str() {
            "terraform" => {
                let dir = kinds::bundle_dir(&step.kind, &step.with).unwrap_or_default();
                let prefix = format!("{dir}/");
                (!files.keys().any(|path| {
                    path.strip_prefix(&prefix).is_some_and(|name| {
                        !name.contains('/') && (name.ends_with(".tf") || name.ends_with(".tf.json"))
                    })
                }))
                .then(|| {
                    (
                        "dir",
                        format!("`{dir}` holds no Terraform configuration (*.tf files)"),
                    )
                })
            }
            "ansible" => {
                let playbook = step
                    .with
                    .get("playbook")
                    .and_then(|v| v.as_str())
                    .unwrap_or_default();
                (!files.contains_key(playbook)).then(|| {
                    (
                        "playbook",
                        format!("`{playbook}` is not a file in the blueprint's folder"),
                    )
                })
            }
            _ => None,
        };
        if let Some((key, problem)) = missing {
            problems.push(BlueprintProblem {
                field: format!("steps.{}.with.{key}", step.name),
                problem,
            });
        }
    }
    let size: usize = files
        .iter()
        .map(|(path, text)| path.len() + text.len())
        .sum();
    if size > MAX_FILES_BYTES {
        problems.push(BlueprintProblem {
            field: "steps".into(),
            problem: format!(
                "the steps' files come to {size} bytes, more than the {MAX_FILES_BYTES} a deployment records; keep large artefacts out of the Terraform and playbook folders"
            ),
        });
    }
    if !problems.is_empty() {
        return Err(BlueprintError(problems));
    }
    let mut hash = Sha256::new();
    hash.update(parsed.hash.as_bytes());
    for (path, text) in &files {
        for part in [path.as_bytes(), b"\0", text.as_bytes(), b"\0"] {
            hash.update(part);
        }
    }
    if !files.is_empty() {
        parsed.hash = hex::encode(hash.finalize());
    }
    parsed.snapshot.files = files;
    Ok(())
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

/// Fills in every parameter from `given` or its default; names what is missing or unknown.
pub fn resolve_params(
    blueprint: &BlueprintSnapshot,
    given: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, BlueprintError> {
    let mut problems = Vec::new();
    for name in given.keys() {
        if !blueprint.params.iter().any(|p| &p.name == name) {
            let declared: Vec<&str> = blueprint.params.iter().map(|p| p.name.as_str()).collect();
            problems.push(BlueprintProblem {
                field: format!("--param {name}"),
                problem: format!(
                    "the blueprint declares no such parameter; it declares: {}",
                    if declared.is_empty() {
                        "none".into()
                    } else {
                        declared.join(", ")
                    }
                ),
            });
        }
    }
    for (name, value) in given {
        if let Some(problem) = crate::inputs::nul_problem(value) {
            problems.push(BlueprintProblem {
                field: format!("params.{name}"),
                problem: format!("the value {problem}"),
            });
        }
    }
    let mut values = BTreeMap::new();
    for param in &blueprint.params {
        match given.get(&param.name).or(param.default.as_ref()) {
            Some(value) => {
                values.insert(param.name.clone(), value.clone());
            }
            None => problems.push(BlueprintProblem {
                field: format!("params.{}", param.name),
                problem: format!(
                    "no value given and no default; pass --param {}=VALUE",
                    param.name
                ),
            }),
        }
    }
    if problems.is_empty() {
        Ok(values)
    } else {
        Err(BlueprintError(problems))
    }
}

/// Checks the secrets given are exactly those the blueprint declares, and that each value can be
/// given to a step. No message quotes a value.
pub fn check_secrets(
    declared: &[String],
    given: &crate::secret::SecretValues,
) -> Result<(), BlueprintError> {
    use secrecy::ExposeSecret;
    let mut problems = Vec::new();
    for name in declared.iter().filter(|name| !given.contains_key(*name)) {
        problems.push(BlueprintProblem {
            field: format!("secrets.{name}"),
            problem: format!("no value given; pass --secret {name}=ENV_VAR with the value in that environment variable"),
        });
    }
    for (name, value) in given {
        if !declared.contains(name) {
            problems.push(BlueprintProblem {
                field: format!("--secret {name}"),
                problem: "the blueprint declares no such secret; list it under `secrets`".into(),
            });
        } else if let Some(problem) = crate::inputs::nul_problem(value.expose_secret()) {
            problems.push(BlueprintProblem {
                field: format!("secrets.{name}"),
                problem: format!("the value {problem}"),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BlueprintError(problems))
    }
}
