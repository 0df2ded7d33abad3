//! What the engine needs of a blueprint as it is recorded, whichever door it came through.

use overture_events::{BlueprintSnapshot, ServiceCheck};

use super::BlueprintProblem;
use crate::duration::{self as durations, read_duration};
use crate::kind::Kind;

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
        let waits = Kind::of(step).and_then(Kind::default_wait).is_some();
        if let (Some(text), true) = (wait, waits) {
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
