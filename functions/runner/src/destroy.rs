//! Tearing a finished deployment down: `terraform destroy` for every Terraform step that ran.
//!
//! [`destroy`] first checks, recording nothing, that the deployment may be destroyed now and
//! that every secret the steps' variables use was given again (the deployment's sealed secrets
//! were purged when it ended). It then records `DestroyRequested` and destroys the steps in the
//! order the aggregate gives (dependents first), each in a fresh sandbox with the state the
//! step's attempts kept, its output copied masked to the step's destroy log. The state is kept
//! again afterwards, however the command ended. The first failure stops it; asking again
//! carries on from the step that failed.

use std::collections::BTreeSet;
use std::time::Duration;

use overture_domain::blueprint::strings_in;
use overture_domain::secret::{Masker, SecretValues};
use overture_domain::template::{Reference, Template};
use overture_domain::{Deployment, DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::{DeploymentId, StepSpec};
use overture_kit::payload::StorePayloads;
use overture_kit::{execute, Cause, DeploymentLog};
use serde_json::Value;

use crate::attempt::{fetch_files, shown_output, with_tail};
use crate::logs::{AttemptLogs, LogName};
use crate::step::{collected, sandbox_job, StepInput};
use crate::{
    millis, sandbox_id, terraform, KeepStepState, RunError, RunSandboxed, RunnerError, SandboxExit,
    ACTOR,
};

/// The ports [`destroy`] uses.
pub struct DestroyPorts<'a> {
    /// The deployments.
    pub log: &'a dyn DeploymentLog,
    /// The sandbox.
    pub sandbox: &'a dyn RunSandboxed,
    /// The states the steps kept.
    pub kept: &'a dyn KeepStepState,
    /// The destroy logs.
    pub logs: &'a dyn AttemptLogs,
    /// The blueprint's files (the Terraform configurations), by hash.
    pub payloads: &'a dyn StorePayloads,
}

/// Who asks for a deployment to be destroyed, with what.
pub struct DestroyRequest<'a> {
    /// The deployment.
    pub deployment: DeploymentId,
    /// The user asking; the actor of `DestroyRequested`.
    pub requested_by: &'a str,
    /// The secrets the steps' variables use, given again (kept in memory only).
    pub secrets: &'a SecretValues,
    /// The request's id, the cause of every event recorded.
    pub cause: uuid::Uuid,
}

/// How a destroy ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DestroyOutcome {
    /// Every resource the deployment made is gone.
    Destroyed,
    /// Destroying this step's resources failed; asking again carries on from it.
    Failed {
        /// The step.
        step: String,
    },
}

/// Why a destroy was refused, with nothing recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DestroyRefused {
    /// The deployment does not exist, is still running, or is already destroyed.
    #[error(transparent)]
    Deployment(#[from] DeploymentError),
    /// The variables of these steps use secrets that were not given.
    #[error(
        "the variables of step(s) {} use secret(s) {}, which were not given",
        list(steps),
        list(secrets)
    )]
    MissingSecrets {
        /// The secrets missing.
        secrets: Vec<String>,
        /// The steps whose variables use them.
        steps: Vec<String>,
    },
    /// These secrets were given but the blueprint declares no such secret.
    #[error("the blueprint declares no secret named {}", list(given))]
    UnknownSecrets {
        /// The names given that the blueprint does not declare.
        given: Vec<String>,
        /// The names it declares.
        declared: Vec<String>,
    },
}

fn list(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Destroys what the deployment's Terraform steps made, and records how it went.
pub async fn destroy(
    request: &DestroyRequest<'_>,
    ports: &DestroyPorts<'_>,
) -> Result<Result<DestroyOutcome, DestroyRefused>, RunnerError> {
    let deployment = request.deployment;
    let loaded = ports.log.load(deployment).await?;
    if let Err(refused) = check(&loaded.state, request.secrets) {
        return Ok(Err(refused));
    }

    let asked = Cause::new(request.requested_by, deployment, request.cause);
    let state = match execute(ports.log, deployment, "", &asked, |_| {
        DeploymentCommand::RequestDestroy
    })
    .await?
    {
        Ok(executed) => executed.state,
        Err(refused) => return Ok(Err(refused.into())),
    };
    let remaining = state
        .destroy
        .as_ref()
        .map(|destroy| destroy.remaining.clone())
        .unwrap_or_default();

    let cause = Cause::new(ACTOR, deployment, request.cause);
    let masker = Masker::new(request.secrets.values());
    for step in remaining {
        let ended =
            destroy_step(&state, &step, request.secrets, &masker, deployment, ports).await?;
        let failed = matches!(ended, StepEnd::Failed { .. });
        let command = match ended {
            StepEnd::Destroyed { duration } => DeploymentCommand::RecordStepDestroyed {
                step: step.clone(),
                duration_ms: millis(duration),
            },
            StepEnd::Failed {
                exit_code,
                message,
                duration,
            } => DeploymentCommand::RecordDestroyFailure {
                step: step.clone(),
                exit_code,
                message,
                duration_ms: millis(duration),
            },
        };
        if let Err(refused) =
            execute(ports.log, deployment, "", &cause, |_| command.clone()).await?
        {
            // Only another destroy of the same deployment, running at the same time, gets here.
            return Ok(Err(refused.into()));
        }
        if failed {
            return Ok(Ok(DestroyOutcome::Failed { step }));
        }
    }
    Ok(Ok(DestroyOutcome::Destroyed))
}

/// What can be refused before anything is recorded: what the aggregate would refuse, and
/// secrets missing from or unknown to the steps still to destroy.
fn check(state: &DeploymentState, secrets: &SecretValues) -> Result<(), DestroyRefused> {
    let events = Deployment::handle(state, DeploymentCommand::RequestDestroy)?;
    let planned = events.into_iter().fold(state.clone(), Deployment::apply);
    let Some(blueprint) = &planned.blueprint else {
        return Err(DeploymentError::NotRequested.into());
    };

    let given: Vec<String> = secrets
        .keys()
        .filter(|name| !blueprint.secrets.contains(name))
        .cloned()
        .collect();
    if !given.is_empty() {
        return Err(DestroyRefused::UnknownSecrets {
            given,
            declared: blueprint.secrets.clone(),
        });
    }

    let mut missing = BTreeSet::new();
    let mut steps = Vec::new();
    let remaining = planned.destroy.iter().flat_map(|d| &d.remaining);
    for spec in remaining.filter_map(|step| blueprint.step(step)) {
        let lacking: Vec<String> = secrets_used(spec)
            .into_iter()
            .filter(|name| !secrets.contains_key(name))
            .collect();
        if !lacking.is_empty() {
            steps.push(spec.name.clone());
            missing.extend(lacking);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(DestroyRefused::MissingSecrets {
            secrets: missing.into_iter().collect(),
            steps,
        })
    }
}

/// The secrets a Terraform step's variables refer to.
pub fn secrets_used(spec: &StepSpec) -> BTreeSet<String> {
    let vars = overture_domain::kind::terraform::read(&spec.with)
        .map(|settings| Value::Object(settings.vars))
        .unwrap_or_default();
    let texts = strings_in(&vars);
    texts
        .into_iter()
        .filter_map(|text| Template::parse(text).ok())
        .flat_map(|template| {
            template
                .references()
                .filter_map(|reference| match reference {
                    Reference::Secret(name) => Some(name.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How destroying one step's resources ended.
enum StepEnd {
    Destroyed {
        duration: Duration,
    },
    Failed {
        exit_code: Option<i32>,
        message: String,
        duration: Duration,
    },
}

/// Runs `terraform destroy` for one step, in a fresh sandbox with the step's kept state, and
/// keeps the state it leaves.
async fn destroy_step(
    state: &DeploymentState,
    step: &str,
    secrets: &SecretValues,
    masker: &Masker,
    deployment: DeploymentId,
    ports: &DestroyPorts<'_>,
) -> Result<StepEnd, RunnerError> {
    let failed = |message: String| StepEnd::Failed {
        exit_code: None,
        message: masker.mask(&message),
        duration: Duration::ZERO,
    };
    let Some(spec) = state.spec(step) else {
        return Ok(failed(format!("the blueprint has no step `{step}`")));
    };
    // Destroy runs the configuration the deployment recorded, fetched by its hash.
    let files = match fetch_files(state, spec, ports.payloads).await? {
        Ok(files) => files,
        Err(problem) => return Ok(failed(problem)),
    };
    let input = StepInput {
        state,
        spec,
        secrets,
        deployment,
        attempt: state.steps.get(step).map_or(0, |s| s.attempt),
        kept: ports.kept.load(deployment, &state.tenant, step).await?,
        files: &files,
    };
    let prepared = match terraform::prepare_destroy(&input) {
        Ok(prepared) => prepared,
        Err(problem) => return Ok(failed(problem)),
    };
    let log = ports.logs.create(deployment, step, LogName::Destroy)?;
    let id = sandbox_id(deployment, step, LogName::Destroy);
    let job = sandbox_job(id, prepared, &input, LogName::Destroy, log, masker);
    // Nothing abandons a destroy: it runs until it ends or times out.
    let result = match ports
        .sandbox
        .run(job, Box::pin(std::future::pending()))
        .await
    {
        Ok(result) => result,
        // Refused before anything ran: running it again would be refused again.
        Err(RunError::Unrunnable(refused)) => return Ok(failed(refused.to_string())),
        Err(RunError::Failed(error)) => return Err(error.into()),
    };
    if let Some(kept) = collected(&result.collected, terraform::STATE_FILE) {
        ports
            .kept
            .save(deployment, &state.tenant, step, kept)
            .await?;
    }

    let headline = match result.exit {
        SandboxExit::Code(0) => {
            return Ok(StepEnd::Destroyed {
                duration: result.duration,
            })
        }
        SandboxExit::Code(code) => terraform::failure_headline(code, &result),
        SandboxExit::Signal(signal) => format!("killed by signal {signal}"),
        SandboxExit::TimedOut => format!(
            "timed out after {}",
            overture_domain::duration::format_duration(Duration::from_millis(spec.timeout_ms))
        ),
        SandboxExit::Cancelled => "cancelled".to_owned(),
        SandboxExit::LimitReached(limit) => limit.to_string(),
    };
    let exit_code = match result.exit {
        SandboxExit::Code(code) => Some(code),
        _ => None,
    };
    Ok(StepEnd::Failed {
        exit_code,
        message: with_tail(
            masker.mask(&headline),
            &shown_output(masker, &result.output),
        ),
        duration: result.duration,
    })
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::secret::SecretString;
    use overture_events::DeploymentEvent;

    use super::*;
    use crate::testing::{requested_event, succeeded};

    const BLUEPRINT: &str = "name: x\nsecrets: [token, other]\nsteps:\n  net:\n    run: terraform\n    with: { dir: net, vars: { a: { nested: ['{{ secrets.token }}'] } } }\n  app:\n    run: terraform\n    needs: [net]\n    with: { dir: app }\n  never:\n    run: terraform\n    needs: [app]\n    with: { dir: never, vars: { b: '{{ secrets.other }}' } }\n";

    /// `net` and `app` ran and `never` never started, because `app` failed.
    fn ended() -> DeploymentState {
        let blueprint = parse(BLUEPRINT).expect("valid").snapshot;
        let started = |step: &str| DeploymentEvent::StepStarted {
            step: step.into(),
            attempt: 1,
            sandbox: "s".into(),
            lease_until: None,
            fingerprint: None,
        };
        let scheduled = |step: &str| DeploymentEvent::StepScheduled {
            step: step.into(),
            attempt: 1,
            not_before: Default::default(),
        };
        Deployment::replay([
            requested_event(&blueprint, &[]),
            scheduled("net"),
            started("net"),
            succeeded("net", &[]),
            scheduled("app"),
            started("app"),
            DeploymentEvent::StepFailed {
                step: "app".into(),
                attempts: 1,
                error_class: overture_events::ErrorClass::Terraform,
            },
            DeploymentEvent::SecretsPurged {},
            DeploymentEvent::DeploymentFailed { reason: "r".into() },
        ])
    }

    fn given(names: &[&str]) -> SecretValues {
        names
            .iter()
            .map(|name| ((*name).to_owned(), SecretString::from("v")))
            .collect()
    }

    #[test]
    fn secrets_used_by_the_steps_still_to_destroy_must_be_given_again() {
        let state = ended();
        assert_eq!(
            check(&state, &given(&[])),
            Err(DestroyRefused::MissingSecrets {
                secrets: vec!["token".into()],
                steps: vec!["net".into()],
            }),
            "`never` never started, so its secret is not needed"
        );
        assert_eq!(check(&state, &given(&["token"])), Ok(()));
        assert_eq!(
            check(&state, &given(&["token", "tokn"])),
            Err(DestroyRefused::UnknownSecrets {
                given: vec!["tokn".into()],
                declared: vec!["token".into(), "other".into()],
            })
        );
    }

    #[test]
    fn what_the_aggregate_refuses_is_refused_before_the_secrets_are_looked_at() {
        assert_eq!(
            check(&DeploymentState::default(), &given(&[])),
            Err(DestroyRefused::Deployment(DeploymentError::NotRequested))
        );
        let mut running = ended();
        running.phase = overture_domain::deployment::Phase::Running;
        assert_eq!(
            check(&running, &given(&[])),
            Err(DestroyRefused::Deployment(DeploymentError::StillRunning))
        );
        let destroyed = [
            DeploymentEvent::DestroyRequested {
                steps: vec!["app".into(), "net".into()],
            },
            DeploymentEvent::StepDestroyed {
                step: "app".into(),
                duration_ms: 0,
            },
            DeploymentEvent::StepDestroyed {
                step: "net".into(),
                duration_ms: 0,
            },
            DeploymentEvent::DeploymentDestroyed {},
        ]
        .into_iter()
        .fold(ended(), Deployment::apply);
        assert_eq!(
            check(&destroyed, &given(&[])),
            Err(DestroyRefused::Deployment(
                DeploymentError::AlreadyDestroyed
            ))
        );
    }

    #[test]
    fn after_a_failure_only_the_steps_left_need_their_secrets() {
        let state = [
            DeploymentEvent::DestroyRequested {
                steps: vec!["app".into(), "net".into()],
            },
            DeploymentEvent::StepDestroyed {
                step: "app".into(),
                duration_ms: 0,
            },
            DeploymentEvent::StepDestroyFailed {
                step: "net".into(),
                exit_code: Some(1),
                message: "m".into(),
                duration_ms: 0,
            },
        ]
        .into_iter()
        .fold(ended(), Deployment::apply);
        assert!(matches!(
            check(&state, &given(&[])),
            Err(DestroyRefused::MissingSecrets { .. })
        ));
        let only_app = DeploymentEvent::StepDestroyFailed {
            step: "app".into(),
            exit_code: Some(1),
            message: "m".into(),
            duration_ms: 0,
        };
        let state = Deployment::apply(
            Deployment::apply(
                ended(),
                DeploymentEvent::DestroyRequested {
                    steps: vec!["app".into()],
                },
            ),
            only_app,
        );
        assert_eq!(check(&state, &given(&[])), Ok(()));
    }
}
