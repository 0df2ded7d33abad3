//! The templates in a blueprint: every reference names a parameter, secret, step output or
//! service the blueprint has, and a step refers only to steps it needs and services it waits for.

use overture_events::{BlueprintSnapshot, StepSpec};

use super::{strings_in, BlueprintProblem};
use crate::graph;
use crate::template::{Reference, Template};

/// The steps whose outputs a text's templates refer to (none when it does not parse).
pub(super) fn referenced_steps(text: &str) -> Vec<String> {
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
pub(super) fn problems(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
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
pub(super) fn parsed_template(
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
pub(super) fn undeclared(blueprint: &BlueprintSnapshot, reference: &Reference) -> Option<String> {
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
