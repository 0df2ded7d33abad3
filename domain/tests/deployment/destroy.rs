//! Destroying a finished deployment's Terraform resources, dependents first.

use super::shop::*;

/// network → (app, dns) → check, where network and dns are Terraform steps; dns never started.
fn infra_requested() -> E {
    let blueprint = kit::blueprint(
        r#"
name: infra
steps:
  network: { run: terraform, with: { dir: network } }
  app: { run: noop, needs: [network] }
  dns: { run: terraform, with: { dir: dns }, needs: [app] }
  data: { run: terraform, with: { dir: data }, needs: [network] }
"#,
    );
    kit::requested("infra.yaml", blueprint)
}

/// network and data were applied, app failed, so dns never started.
fn infra_failed() -> Vec<E> {
    vec![
        infra_requested(),
        scheduled("network", 1, 0),
        started("network", 1),
        succeeded("network", 1),
        scheduled("app", 1, 1),
        scheduled("data", 1, 1),
        started("app", 1),
        started("data", 1),
        succeeded("data", 1),
        E::StepFailed {
            step: "app".into(),
            attempts: 1,
            error_class: ErrorClass::StepFailed,
        },
        E::SecretsPurged {},
        E::DeploymentFailed { reason: "r".into() },
    ]
}

#[test]
fn a_running_deployment_cannot_be_destroyed() {
    given(running_lint())
        .when(C::RequestDestroy)
        .then_error(DeploymentError::StillRunning);
}

#[test]
fn destroying_tears_down_the_terraform_steps_that_ran_dependents_first() {
    given(infra_failed())
        .when(C::RequestDestroy)
        .then([E::DestroyRequested {
            steps: vec!["data".into(), "network".into()],
        }]);
}

#[test]
fn the_last_step_destroyed_destroys_the_deployment() {
    let mut history = infra_failed();
    history.push(E::DestroyRequested {
        steps: vec!["data".into(), "network".into()],
    });
    assert_eq!(
        given(history.clone()).when(C::RecordStepDestroyed {
            step: "network".into(),
            duration_ms: 1
        }),
        Err(DeploymentError::NotNextToDestroy("network".into())),
        "dependents go first"
    );
    history.push(E::StepDestroyed {
        step: "data".into(),
        duration_ms: 1,
    });
    given(history.clone())
        .when(C::RecordStepDestroyed {
            step: "network".into(),
            duration_ms: 2,
        })
        .then([
            E::StepDestroyed {
                step: "network".into(),
                duration_ms: 2,
            },
            E::DeploymentDestroyed {},
        ]);
    history.push(E::DeploymentDestroyed {});
    given(history)
        .when(C::RequestDestroy)
        .then_error(DeploymentError::AlreadyDestroyed);
}

#[test]
fn after_a_failed_destroy_asking_again_carries_on_where_it_stopped() {
    let mut history = infra_failed();
    history.extend([
        E::DestroyRequested {
            steps: vec!["data".into(), "network".into()],
        },
        E::StepDestroyed {
            step: "data".into(),
            duration_ms: 1,
        },
        E::StepDestroyFailed {
            step: "network".into(),
            exit_code: Some(1),
            message: "boom".into(),
            duration_ms: 1,
        },
    ]);
    assert_eq!(
        given(history.clone()).when(C::RecordStepDestroyed {
            step: "network".into(),
            duration_ms: 1
        }),
        Err(DeploymentError::NotNextToDestroy("network".into())),
        "a stopped destroy records nothing until asked again"
    );
    given(history)
        .when(C::RequestDestroy)
        .then([E::DestroyRequested {
            steps: vec!["network".into()],
        }]);
}

#[test]
fn a_deployment_with_nothing_to_destroy_is_destroyed_at_once() {
    let history = failed_at_build();
    given(history).when(C::RequestDestroy).then([
        E::DestroyRequested { steps: vec![] },
        E::DeploymentDestroyed {},
    ]);
}
