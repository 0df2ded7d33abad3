//! The bastion and the egress a blueprint declares: hosts made in the cloud need a bastion, its
//! templates name real steps, every step going through it comes after them; every `egress:`
//! entry is a destination a step may be allowed to reach.

use overture_events::BlueprintSnapshot;

use super::references::{parsed_template, referenced_steps, undeclared};
use super::{is_slug, BlueprintProblem};
use crate::graph;
use crate::kind::{self, Kind};
use crate::template::Reference;

/// Checks every `egress:` entry is a destination a step may be allowed to reach.
pub(super) fn egress_problems(egress: &[String]) -> Vec<BlueprintProblem> {
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
pub(super) fn problems(blueprint: &BlueprintSnapshot) -> Vec<BlueprintProblem> {
    let mut problems = Vec::new();
    let step_kind = |name: &str| blueprint.step(name).and_then(Kind::of);
    let Some(bastion) = &blueprint.bastion else {
        let made_in_cloud = blueprint.hosts.iter().find_map(|(group, addresses)| {
            addresses.iter().find_map(|address| {
                referenced_steps(address)
                    .into_iter()
                    .find(|step| step_kind(step) == Some(Kind::Servers))
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
        if !kind::uses_bastion(step) {
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
