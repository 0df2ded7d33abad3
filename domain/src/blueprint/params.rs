//! What a deployment is given for a blueprint's parameters and secrets, checked against what
//! it declares.

use std::collections::BTreeMap;

use overture_events::BlueprintSnapshot;

use super::{BlueprintError, BlueprintProblem};

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
