//! The Deployment aggregate, given/when/then: given these events, when this command,
//! then these events (or this error); and the actions a state calls for.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use overture_domain::blueprint::parse;
use overture_domain::deployment::{
    actions, Action, Deployment, DeploymentCommand as C, DeploymentError, DeploymentState,
    Interruption, SealedCredentials, StepStatus,
};
use overture_events::{BlueprintSnapshot, DeploymentEvent as E, ErrorClass};

fn t(seconds: i64) -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(1_800_000_000 + seconds)
}

/// build → (unit, lint) → package; lint retries step-failed twice, 5 s apart; grace 60 s.
fn blueprint() -> BlueprintSnapshot {
    parse(
        r#"
name: shop
on_failure: { grace: 60s }
steps:
  build: { run: noop }
  unit: { run: noop, needs: [build] }
  lint: { run: noop, needs: [build], retry: { step-failed: { times: 2, wait: 5s } } }
  package: { run: noop, needs: [unit, lint] }
"#,
    )
    .expect("valid")
    .snapshot
}

fn requested() -> E {
    E::DeploymentRequested {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "shop.yaml".into(),
        blueprint: blueprint(),
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
    }
}

fn scheduled(step: &str, attempt: u32, at: i64) -> E {
    E::StepScheduled {
        step: step.into(),
        attempt,
        not_before: t(at),
    }
}
/// Started at t(0) or later: every step of [`blueprint`] has the default 10 min timeout, so
/// its lease ends at t(660) at the earliest.
fn started(step: &str, attempt: u32) -> E {
    started_at(step, attempt, 0)
}
fn started_at(step: &str, attempt: u32, at: i64) -> E {
    E::StepStarted {
        step: step.into(),
        attempt,
        sandbox: format!("{step}-{attempt}"),
        lease_until: Some(t(at + 600 + 60)),
    }
}
fn succeeded(step: &str, attempt: u32) -> E {
    E::StepSucceeded {
        step: step.into(),
        attempt,
        outputs: BTreeMap::new(),
        duration_ms: 1,
    }
}
fn attempt_failed(step: &str, attempt: u32, class: ErrorClass) -> E {
    E::StepAttemptFailed {
        step: step.into(),
        attempt,
        error_class: class,
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
    }
}
fn failure(step: &str, attempt: u32, class: ErrorClass, now: i64) -> C {
    C::RecordFailure {
        step: step.into(),
        attempt,
        error_class: class,
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
        now: t(now),
    }
}
fn start(step: &str, attempt: u32, now: i64) -> C {
    C::StartAttempt {
        step: step.into(),
        attempt,
        sandbox: format!("{step}-{attempt}"),
        now: t(now),
    }
}
fn success(step: &str, attempt: u32) -> C {
    C::RecordSuccess {
        step: step.into(),
        attempt,
        outputs: BTreeMap::new(),
        duration_ms: 1,
    }
}

struct Given(DeploymentState);

fn given(events: impl IntoIterator<Item = E>) -> Given {
    Given(Deployment::replay(events))
}

impl Given {
    fn when(self, command: C) -> Result<Vec<E>, DeploymentError> {
        Deployment::handle(&self.0, command)
    }
    fn state(&self) -> &DeploymentState {
        &self.0
    }
}

/// What [`running_lint`]'s request sealed: its purge is the orchestrator's to carry out.
fn sealed() -> E {
    E::CredentialsSealed {
        seal: "seal-1".into(),
        secrets: vec!["api_key".into()],
        ssh_public_key: None,
        token: false,
    }
}

/// build succeeded; the first attempts of unit and lint are running.
fn running_lint() -> Vec<E> {
    vec![
        requested(),
        sealed(),
        scheduled("build", 1, 0),
        started("build", 1),
        succeeded("build", 1),
        scheduled("unit", 1, 1),
        scheduled("lint", 1, 1),
        started("unit", 1),
        started("lint", 1),
    ]
}

#[test]
fn a_request_is_recorded_with_its_sealed_secrets() {
    let then = given([]).when(C::Request {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "shop.yaml".into(),
        blueprint: blueprint(),
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        sealed: Some(SealedCredentials {
            seal: "seal-1".into(),
            secrets: vec!["api_key".into()],
            ssh_public_key: Some("ssh-ed25519 AAAA overture".into()),
            token: false,
        }),
    });
    assert_eq!(
        then,
        Ok(vec![
            requested(),
            E::CredentialsSealed {
                seal: "seal-1".into(),
                secrets: vec!["api_key".into()],
                ssh_public_key: Some("ssh-ed25519 AAAA overture".into()),
                token: false,
            }
        ])
    );
}

#[test]
fn a_second_request_is_refused() {
    let request = C::Request {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "s".into(),
        blueprint: blueprint(),
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        sealed: None,
    };
    assert_eq!(
        given([requested()]).when(request),
        Err(DeploymentError::AlreadyRequested)
    );
}

#[test]
fn commands_before_a_request_are_refused() {
    assert_eq!(
        given([]).when(C::Advance { now: t(0) }),
        Err(DeploymentError::NotRequested)
    );
}

#[test]
fn advancing_schedules_only_steps_whose_needs_succeeded() {
    assert_eq!(
        given([requested()]).when(C::Advance { now: t(0) }),
        Ok(vec![scheduled("build", 1, 0)])
    );
    assert_eq!(
        given([
            requested(),
            scheduled("build", 1, 0),
            started("build", 1),
            succeeded("build", 1)
        ])
        .when(C::Advance { now: t(1) }),
        Ok(vec![scheduled("unit", 1, 1), scheduled("lint", 1, 1)])
    );
    // Nothing new while work is under way: advancing twice records nothing twice.
    assert_eq!(
        given(running_lint()).when(C::Advance { now: t(2) }),
        Ok(vec![])
    );
}

#[test]
fn an_attempt_starts_only_when_scheduled_and_due() {
    let history = [requested(), scheduled("build", 1, 10)];
    assert_eq!(
        given(history.clone()).when(start("build", 1, 10)),
        Ok(vec![started_at("build", 1, 10)]),
        "its lease lasts its timeout (10 min) and a minute"
    );
    assert_eq!(
        given(history.clone()).when(start("build", 1, 9)),
        Err(DeploymentError::NotYetDue {
            step: "build".into(),
            attempt: 1,
            not_before: t(10)
        })
    );
    assert_eq!(
        given(history.clone()).when(start("build", 2, 10)),
        Err(DeploymentError::AttemptNotScheduled {
            step: "build".into(),
            attempt: 2
        })
    );
    assert_eq!(
        given(history).when(start("nope", 1, 10)),
        Err(DeploymentError::UnknownStep("nope".into()))
    );
    // A started attempt cannot start again (a redelivered job).
    assert_eq!(
        given(running_lint()).when(start("lint", 1, 5)),
        Err(DeploymentError::AttemptNotScheduled {
            step: "lint".into(),
            attempt: 1
        })
    );
}

#[test]
fn a_success_is_recorded_once() {
    assert_eq!(
        given(running_lint()).when(success("lint", 1)),
        Ok(vec![succeeded("lint", 1)])
    );
    let mut done = running_lint();
    done.push(succeeded("lint", 1));
    assert_eq!(
        given(done).when(success("lint", 1)),
        Err(DeploymentError::AttemptNotRunning {
            step: "lint".into(),
            attempt: 1
        })
    );
}

#[test]
fn a_failure_with_retries_left_schedules_the_next_attempt_after_the_wait() {
    assert_eq!(
        given(running_lint()).when(failure("lint", 1, ErrorClass::StepFailed, 20)),
        Ok(vec![
            attempt_failed("lint", 1, ErrorClass::StepFailed),
            E::StepRetryScheduled {
                step: "lint".into(),
                attempt: 1,
                next_attempt: 2,
                delay_ms: 5_000,
                not_before: t(25)
            },
        ])
    );
}

#[test]
fn a_retrying_step_is_retrying_and_its_next_attempt_is_an_action() {
    let mut history = running_lint();
    history.push(attempt_failed("lint", 1, ErrorClass::StepFailed));
    history.push(E::StepRetryScheduled {
        step: "lint".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(25),
    });
    let given = given(history);
    assert_eq!(given.state().steps["lint"].status, StepStatus::Retrying);
    assert_eq!(
        actions(given.state()),
        vec![Action::RunAttempt {
            step: "lint".into(),
            attempt: 2,
            not_before: t(25)
        }]
    );
    assert!(matches!(
        given.when(start("lint", 2, 24)),
        Err(DeploymentError::NotYetDue { .. })
    ));
}

#[test]
fn the_default_policy_fails_a_step_failed_at_once_and_starts_the_grace_period() {
    // unit has no override: step-failed is not retried. lint is still running.
    assert_eq!(
        given(running_lint()).when(failure("unit", 1, ErrorClass::StepFailed, 30)),
        Ok(vec![
            attempt_failed("unit", 1, ErrorClass::StepFailed),
            E::StepFailed {
                step: "unit".into(),
                attempts: 1,
                error_class: ErrorClass::StepFailed
            },
            E::FailureGracePeriodStarted {
                failed_step: "unit".into(),
                deadline: t(90)
            },
        ])
    );
}

#[test]
fn the_retry_table_sets_how_many_attempts_each_class_gets() {
    // (class, attempts allowed by the default table)
    for (class, allowed) in [
        (ErrorClass::Terraform, 2),
        (ErrorClass::BackendUnreachable, 6),
        (ErrorClass::BootstrapTimeout, 1),
        (ErrorClass::HostUnreachable, 2),
        (ErrorClass::StepFailed, 1),
    ] {
        let mut history = vec![requested(), scheduled("build", 1, 0)];
        let mut attempt = 1;
        loop {
            history.push(started("build", attempt));
            let events = given(history.clone())
                .when(failure("build", attempt, class, 0))
                .expect("recorded");
            let gave_up = events.iter().any(|e| matches!(e, E::StepFailed { .. }));
            history.extend(events);
            if gave_up {
                break;
            }
            attempt += 1;
        }
        assert_eq!(attempt, allowed, "{class}");
    }
}

#[test]
fn a_failure_for_good_abandons_waiting_attempts_at_once() {
    let mut history = running_lint();
    history.push(attempt_failed("lint", 1, ErrorClass::StepFailed));
    history.push(E::StepRetryScheduled {
        step: "lint".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(25),
    });
    assert_eq!(
        given(history).when(failure("unit", 1, ErrorClass::StepFailed, 21)),
        Ok(vec![
            attempt_failed("unit", 1, ErrorClass::StepFailed),
            E::StepFailed {
                step: "unit".into(),
                attempts: 1,
                error_class: ErrorClass::StepFailed
            },
            E::StepAbandoned {
                step: "lint".into(),
                attempt: 2,
                reason: "not started because step `unit` failed".into()
            },
        ])
    );
}

fn failing_with_lint_in_grace() -> Vec<E> {
    let mut history = running_lint();
    history.push(attempt_failed("unit", 1, ErrorClass::StepFailed));
    history.push(E::StepFailed {
        step: "unit".into(),
        attempts: 1,
        error_class: ErrorClass::StepFailed,
    });
    history.push(E::FailureGracePeriodStarted {
        failed_step: "unit".into(),
        deadline: t(90),
    });
    history
}

#[test]
fn within_the_grace_period_a_running_step_may_still_finish() {
    let given = given(failing_with_lint_in_grace());
    assert_eq!(actions(given.state()), vec![Action::WakeAt(t(90))]);
    assert_eq!(
        given.when(success("lint", 1)),
        Ok(vec![succeeded("lint", 1)])
    );
}

#[test]
fn while_failing_no_new_attempt_starts_and_failures_are_not_retried() {
    let given = given(failing_with_lint_in_grace());
    assert_eq!(
        given.when(C::Advance { now: t(40) }),
        Ok(vec![]),
        "nothing is scheduled before the deadline"
    );
    let given = self::given(failing_with_lint_in_grace());
    assert_eq!(
        given.when(failure("lint", 1, ErrorClass::StepFailed, 40)),
        Ok(vec![
            attempt_failed("lint", 1, ErrorClass::StepFailed),
            E::StepFailed {
                step: "lint".into(),
                attempts: 1,
                error_class: ErrorClass::StepFailed
            },
        ])
    );
}

#[test]
fn at_the_deadline_running_steps_are_abandoned() {
    assert_eq!(
        given(failing_with_lint_in_grace()).when(C::Advance { now: t(90) }),
        Ok(vec![E::StepAbandoned {
            step: "lint".into(),
            attempt: 1,
            reason: "still running when the failure grace period ended".into()
        }])
    );
}

#[test]
fn an_abandoned_attempt_can_no_longer_record_its_outcome() {
    let mut history = failing_with_lint_in_grace();
    history.push(E::StepAbandoned {
        step: "lint".into(),
        attempt: 1,
        reason: "late".into(),
    });
    assert_eq!(
        given(history).when(success("lint", 1)),
        Err(DeploymentError::AttemptNotRunning {
            step: "lint".into(),
            attempt: 1
        })
    );
}

#[test]
fn a_failed_deployment_purges_its_secrets_before_it_ends() {
    let mut history = failing_with_lint_in_grace();
    history.push(succeeded("lint", 1));
    let before_purge = given(history.clone());
    assert_eq!(actions(before_purge.state()), vec![Action::PurgeSecrets]);
    assert_eq!(
        before_purge.when(C::Advance { now: t(50) }),
        Ok(vec![]),
        "it does not end before the purge"
    );
    assert_eq!(
        given(history.clone()).when(C::RecordSecretsPurged),
        Ok(vec![E::SecretsPurged {}])
    );
    history.push(E::SecretsPurged {});
    assert_eq!(
        given(history).when(C::Advance { now: t(51) }),
        Ok(vec![E::DeploymentFailed {
            reason: "step `unit` failed after 1 attempt(s) (step-failed)".into()
        }])
    );
}

#[test]
fn secrets_are_not_purged_while_steps_may_run() {
    assert_eq!(
        given(running_lint()).when(C::RecordSecretsPurged),
        Err(DeploymentError::StepsStillRunning)
    );
}

#[test]
fn a_deployment_whose_steps_all_succeeded_purges_then_succeeds() {
    let mut history = running_lint();
    history.extend([
        succeeded("unit", 1),
        succeeded("lint", 1),
        scheduled("package", 1, 3),
        started("package", 1),
        succeeded("package", 1),
    ]);
    let given_done = given(history.clone());
    assert_eq!(actions(given_done.state()), vec![Action::PurgeSecrets]);
    assert_eq!(given_done.when(C::Advance { now: t(4) }), Ok(vec![]));
    history.push(E::SecretsPurged {});
    assert_eq!(
        given(history.clone()).when(C::Advance { now: t(5) }),
        Ok(vec![E::DeploymentSucceeded {}])
    );
    history.push(E::DeploymentSucceeded {});
    let finished = given(history);
    assert!(finished.state().is_finished());
    assert!(
        actions(finished.state()).is_empty(),
        "a finished deployment calls for nothing"
    );
}

/// A history without its seal: a request that sealed nothing.
fn with_nothing_sealed(history: Vec<E>) -> Vec<E> {
    history
        .into_iter()
        .filter(|event| !matches!(event, E::CredentialsSealed { .. }))
        .collect()
}

#[test]
fn a_deployment_that_sealed_nothing_records_its_purge_with_its_end() {
    let mut history = with_nothing_sealed(running_lint());
    history.extend([
        succeeded("unit", 1),
        succeeded("lint", 1),
        scheduled("package", 1, 3),
        started("package", 1),
    ]);
    history.push(succeeded("package", 1));
    // The advance the last outcome is committed with ends it: there is nothing to delete.
    assert_eq!(
        given(history.clone()).when(C::Advance { now: t(4) }),
        Ok(vec![E::SecretsPurged {}, E::DeploymentSucceeded {}])
    );
    assert_eq!(
        actions(given(history).state()),
        vec![Action::PurgeSecrets],
        "until an advance records it, the orchestrator's purge ends it as before"
    );
}

#[test]
fn a_failing_deployment_that_sealed_nothing_ends_when_its_last_attempt_is_abandoned() {
    let history = with_nothing_sealed(failing_with_lint_in_grace());
    assert_eq!(
        given(history).when(C::Advance { now: t(90) }),
        Ok(vec![
            E::StepAbandoned {
                step: "lint".into(),
                attempt: 1,
                reason: "still running when the failure grace period ended".into()
            },
            E::SecretsPurged {},
            E::DeploymentFailed {
                reason: "step `unit` failed after 1 attempt(s) (step-failed)".into()
            }
        ])
    );
}

/// build failed on its first attempt, so the deployment failed.
fn failed_at_build() -> Vec<E> {
    vec![
        requested(),
        scheduled("build", 1, 0),
        started("build", 1),
        E::StepFailed {
            step: "build".into(),
            attempts: 1,
            error_class: ErrorClass::StepFailed,
        },
        E::SecretsPurged {},
        E::DeploymentFailed { reason: "r".into() },
    ]
}

#[test]
fn a_finished_deployment_refuses_step_commands_but_advancing_is_harmless() {
    let history = failed_at_build();
    assert_eq!(
        given(history.clone()).when(C::Advance { now: t(9) }),
        Ok(vec![])
    );
    assert_eq!(
        given(history).when(success("build", 1)),
        Err(DeploymentError::AlreadyFinished)
    );
}

#[test]
fn scheduled_attempts_are_actions_until_they_start() {
    let given = given([requested(), scheduled("build", 1, 7)]);
    assert_eq!(
        actions(given.state()),
        vec![Action::RunAttempt {
            step: "build".into(),
            attempt: 1,
            not_before: t(7)
        }]
    );
}

/// network → (app, dns) → check, where network and dns are Terraform steps; dns never started.
fn infra_requested() -> E {
    let blueprint = parse(
        r#"
name: infra
steps:
  network: { run: terraform, with: { dir: network } }
  app: { run: noop, needs: [network] }
  dns: { run: terraform, with: { dir: dns }, needs: [app] }
  data: { run: terraform, with: { dir: data }, needs: [network] }
"#,
    )
    .expect("valid")
    .snapshot;
    E::DeploymentRequested {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "infra.yaml".into(),
        blueprint,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
    }
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
    assert_eq!(
        given(running_lint()).when(C::RequestDestroy),
        Err(DeploymentError::StillRunning)
    );
}

#[test]
fn destroying_tears_down_the_terraform_steps_that_ran_dependents_first() {
    assert_eq!(
        given(infra_failed()).when(C::RequestDestroy),
        Ok(vec![E::DestroyRequested {
            steps: vec!["data".into(), "network".into()]
        }])
    );
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
    assert_eq!(
        given(history.clone()).when(C::RecordStepDestroyed {
            step: "network".into(),
            duration_ms: 2
        }),
        Ok(vec![
            E::StepDestroyed {
                step: "network".into(),
                duration_ms: 2
            },
            E::DeploymentDestroyed {}
        ])
    );
    history.push(E::DeploymentDestroyed {});
    assert_eq!(
        given(history).when(C::RequestDestroy),
        Err(DeploymentError::AlreadyDestroyed)
    );
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
    assert_eq!(
        given(history).when(C::RequestDestroy),
        Ok(vec![E::DestroyRequested {
            steps: vec!["network".into()]
        }])
    );
}

#[test]
fn a_deployment_with_nothing_to_destroy_is_destroyed_at_once() {
    let history = failed_at_build();
    assert_eq!(
        given(history).when(C::RequestDestroy),
        Ok(vec![
            E::DestroyRequested { steps: vec![] },
            E::DeploymentDestroyed {}
        ])
    );
}

fn access(rule: &str) -> overture_domain::deployment::BastionAccess {
    overture_domain::deployment::BastionAccess {
        rule: rule.into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    }
}

fn granted(rule: &str) -> E {
    E::BastionAccessGranted {
        rule: rule.into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    }
}

#[test]
fn the_bastion_is_opened_once_for_a_running_step_and_shared() {
    assert_eq!(
        given(running_lint()).when(C::RecordAccessGranted(access("r1"))),
        Ok(vec![granted("r1")])
    );
    let mut history = running_lint();
    history.push(granted("r1"));
    assert_eq!(
        given(history).when(C::RecordAccessGranted(access("r2"))),
        Err(DeploymentError::AccessAlreadyGranted("r1".into())),
        "a second step finds it open"
    );
    let mut nothing_runs = running_lint();
    nothing_runs.extend([succeeded("unit", 1), succeeded("lint", 1)]);
    assert_eq!(
        given(nothing_runs).when(C::RecordAccessGranted(access("r1"))),
        Err(DeploymentError::NoStepRunning),
        "no earlier than needed: only for a step that runs"
    );
}

#[test]
fn a_lease_closed_while_others_hold_the_rule_records_for_whom_it_was_kept() {
    let mut history = failing_with_lint_in_grace();
    history.insert(history.len() - 2, granted("r1"));
    history.push(succeeded("lint", 1));
    let others = vec![overture_events::DeploymentId::from_uuid(
        uuid::Uuid::from_u128(7),
    )];
    assert_eq!(
        given(history.clone()).when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: others.clone(),
        }),
        Ok(vec![E::BastionAccessRevoked {
            rule: "r1".into(),
            kept_for: others.clone(),
        }])
    );
    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: others,
    });
    assert_eq!(
        actions(given(history).state()),
        vec![Action::PurgeSecrets],
        "its own lease is closed: the deployment goes on to purge its secrets"
    );
}

#[test]
fn when_the_work_is_over_the_bastion_is_closed_before_the_secrets_are_purged() {
    let mut history = failing_with_lint_in_grace();
    history.insert(history.len() - 2, granted("r1"));
    history.push(succeeded("lint", 1));
    let open = given(history.clone());
    assert_eq!(
        actions(open.state()),
        vec![Action::RevokeAccess(access("r1"))]
    );
    assert_eq!(
        open.when(C::RecordSecretsPurged),
        Err(DeploymentError::StepsStillRunning),
        "the purge waits: closing the bastion needs the token"
    );
    assert_eq!(
        given(history.clone()).when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        }),
        Ok(vec![E::BastionAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        }])
    );
    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: vec![],
    });
    let closed = given(history.clone());
    assert_eq!(actions(closed.state()), vec![Action::PurgeSecrets]);
    assert_eq!(
        closed.when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        }),
        Ok(vec![]),
        "revoking again records nothing"
    );
}

#[test]
fn the_bastion_stays_open_while_a_step_still_runs() {
    let mut history = running_lint();
    history.push(granted("r1"));
    assert!(
        !actions(given(history).state())
            .iter()
            .any(|action| matches!(action, Action::RevokeAccess(_))),
        "lint still runs"
    );
}

fn cancel() -> C {
    C::Cancel {
        requested_by: "ada".into(),
        reason: "wrong version".into(),
    }
}

fn cancellation_requested() -> E {
    E::CancellationRequested {
        requested_by: "ada".into(),
        reason: "wrong version".into(),
    }
}

fn abandoned_by_cancel(step: &str, attempt: u32) -> E {
    E::StepAbandoned {
        step: step.into(),
        attempt,
        reason: "cancelled by ada".into(),
    }
}

#[test]
fn a_cancel_abandons_running_and_waiting_attempts_at_once_with_no_grace_period() {
    let mut history = running_lint();
    history.extend([
        attempt_failed("lint", 1, ErrorClass::StepFailed),
        E::StepRetryScheduled {
            step: "lint".into(),
            attempt: 1,
            next_attempt: 2,
            delay_ms: 5_000,
            not_before: t(6),
        },
    ]);
    assert_eq!(
        given(history).when(cancel()),
        Ok(vec![
            cancellation_requested(),
            abandoned_by_cancel("unit", 1),
            abandoned_by_cancel("lint", 2),
        ]),
        "unit was running, lint waited for its retry; package never starts"
    );
}

#[test]
fn a_cancelled_deployment_starts_nothing_and_closes_the_bastion_then_purges_then_ends() {
    let mut history = running_lint();
    history.push(granted("r1"));
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    let cancelling = given(history.clone());
    assert_eq!(
        actions(cancelling.state()),
        vec![Action::RevokeAccess(access("r1"))]
    );
    assert_eq!(cancelling.when(C::Advance { now: t(9) }), Ok(vec![]));
    assert_eq!(
        given(history.clone()).when(start("package", 1, 9)),
        Err(DeploymentError::AttemptNotScheduled {
            step: "package".into(),
            attempt: 1
        })
    );
    assert_eq!(
        given(history.clone()).when(success("unit", 1)),
        Err(DeploymentError::AttemptNotRunning {
            step: "unit".into(),
            attempt: 1
        }),
        "a sandbox that finishes as it is killed records nothing"
    );

    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: vec![],
    });
    assert_eq!(
        actions(given(history.clone()).state()),
        vec![Action::PurgeSecrets]
    );
    history.push(E::SecretsPurged {});
    assert_eq!(
        given(history.clone()).when(C::Advance { now: t(10) }),
        Ok(vec![E::DeploymentCancelled {
            reason: "wrong version".into(),
            requested_by: "ada".into(),
        }])
    );
}

#[test]
fn cancelling_twice_records_nothing_more_and_an_ended_deployment_refuses() {
    let mut history = running_lint();
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    assert_eq!(given(history).when(cancel()), Ok(vec![]));
    assert_eq!(
        given(failed_at_build()).when(cancel()),
        Err(DeploymentError::AlreadyFinished)
    );
    assert_eq!(given([]).when(cancel()), Err(DeploymentError::NotRequested));
}

#[test]
fn a_cancelled_deployment_that_sealed_nothing_ends_at_the_next_advance() {
    let mut history = with_nothing_sealed(running_lint());
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    assert_eq!(
        given(history).when(C::Advance { now: t(9) }),
        Ok(vec![
            E::SecretsPurged {},
            E::DeploymentCancelled {
                reason: "wrong version".into(),
                requested_by: "ada".into(),
            }
        ])
    );
}

#[test]
fn a_failing_deployment_can_be_cancelled_before_its_grace_period_ends() {
    let history = failing_with_lint_in_grace();
    let events = given(history.clone()).when(cancel()).expect("cancelled");
    assert_eq!(events[0], cancellation_requested());
    assert!(
        events.contains(&abandoned_by_cancel("lint", 1)),
        "lint does not get the rest of its grace period: {events:?}"
    );
}

#[test]
fn a_rule_opened_by_an_attempt_abandoned_meanwhile_is_recorded_so_it_gets_closed() {
    let mut history = running_lint();
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    assert_eq!(
        given(history.clone()).when(C::RecordAccessGranted(access("r1"))),
        Ok(vec![granted("r1")])
    );
    history.push(granted("r1"));
    assert_eq!(
        actions(given(history).state()),
        vec![Action::RevokeAccess(access("r1"))]
    );
}

#[test]
fn an_interrupted_attempt_is_retried_twice_by_default_with_no_wait() {
    let history = running_lint();
    assert_eq!(
        given(history).when(C::RecordFailure {
            step: "unit".into(),
            attempt: 1,
            error_class: ErrorClass::Interrupted,
            exit_code: None,
            message: "the attempt was interrupted".into(),
            duration_ms: 0,
            now: t(3),
        }),
        Ok(vec![
            E::StepAttemptFailed {
                step: "unit".into(),
                attempt: 1,
                error_class: ErrorClass::Interrupted,
                exit_code: None,
                message: "the attempt was interrupted".into(),
                duration_ms: 0,
            },
            E::StepRetryScheduled {
                step: "unit".into(),
                attempt: 1,
                next_attempt: 2,
                delay_ms: 0,
                not_before: t(3),
            }
        ])
    );
}

fn interrupt(step: &str, attempt: u32, why: Interruption, now: i64) -> C {
    C::InterruptAttempt {
        step: step.into(),
        attempt,
        why,
        now: t(now),
    }
}

#[test]
fn a_running_attempt_is_interrupted_for_an_expired_lease_only_once_the_lease_has_ended() {
    // unit started at t(0): its lease ends at t(660).
    assert_eq!(
        given(running_lint()).when(interrupt("unit", 1, Interruption::LeaseExpired, 659)),
        Err(DeploymentError::LeaseNotExpired {
            step: "unit".into(),
            attempt: 1,
            until: t(660)
        }),
        "a second delivery of its job is no sign that it died"
    );
    let events = given(running_lint())
        .when(interrupt("unit", 1, Interruption::LeaseExpired, 660))
        .expect("interrupted");
    assert_eq!(
        events[0],
        E::StepAttemptFailed {
            step: "unit".into(),
            attempt: 1,
            error_class: ErrorClass::Interrupted,
            exit_code: None,
            message: Interruption::LeaseExpired.message().into(),
            duration_ms: 0,
        }
    );
    assert!(
        matches!(
            &events[1],
            E::StepRetryScheduled {
                next_attempt: 2,
                delay_ms: 0,
                ..
            }
        ),
        "{events:?}"
    );
}

#[test]
fn an_attempt_whose_engine_stopped_or_whose_runner_lost_the_job_is_interrupted_at_once() {
    for why in [Interruption::EngineStopped, Interruption::RunnerLostJob] {
        let events = given(running_lint())
            .when(interrupt("unit", 1, why, 5))
            .expect("interrupted");
        assert!(
            matches!(&events[0], E::StepAttemptFailed { error_class: ErrorClass::Interrupted, exit_code: None, message, .. } if message == why.message()),
            "{why:?}: {events:?}"
        );
    }
    assert_eq!(
        given(running_lint()).when(interrupt("build", 1, Interruption::EngineStopped, 5)),
        Err(DeploymentError::AttemptNotRunning {
            step: "build".into(),
            attempt: 1
        }),
        "an attempt that ended is not interrupted"
    );
}

#[test]
fn an_attempt_recorded_before_leases_existed_may_be_interrupted_at_once() {
    let mut history = running_lint();
    history.push(scheduled("package", 1, 2));
    history.push(E::StepStarted {
        step: "package".into(),
        attempt: 1,
        sandbox: "old".into(),
        lease_until: None,
    });
    assert!(given(history)
        .when(interrupt("package", 1, Interruption::LeaseExpired, 3))
        .is_ok());
}

#[test]
fn a_closing_action_recorded_again_after_the_end_is_harmless() {
    let mut history = failed_at_build();
    assert!(given(history.clone()).state().is_finished());
    assert_eq!(
        given(history.clone()).when(C::RecordSecretsPurged),
        Ok(vec![]),
        "a second handler purging finds it done"
    );
    assert_eq!(
        given(history.clone()).when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        }),
        Ok(vec![])
    );
    history.truncate(history.len() - 1);
    assert!(!given(history).state().is_finished());
}

fn dead_letter(step: &str, attempt: u32, receives: u32, now: i64) -> C {
    C::RecordDeadLetter {
        step: step.into(),
        attempt,
        receives,
        now: t(now),
    }
}

fn dead_lettered(step: &str, attempt: u32, receives: u32) -> Vec<E> {
    vec![
        E::StepJobDeadLettered {
            step: step.into(),
            attempt,
            receives,
        },
        E::StepAttemptFailed {
            step: step.into(),
            attempt,
            error_class: ErrorClass::Interrupted,
            exit_code: None,
            message: format!(
                "the attempt was interrupted: its job was delivered {receives} times without an \
                 outcome and moved to the dead-letter queue"
            ),
            duration_ms: 0,
        },
    ]
}

#[test]
fn a_dead_lettered_attempt_that_never_started_fails_as_interrupted_and_is_retried() {
    let mut then = dead_lettered("build", 1, 5);
    then.push(E::StepRetryScheduled {
        step: "build".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 0,
        not_before: t(30),
    });
    assert_eq!(
        given([requested(), scheduled("build", 1, 0)]).when(dead_letter("build", 1, 5, 30)),
        Ok(then)
    );
}

#[test]
fn a_dead_lettered_running_attempt_fails_only_once_its_lease_has_ended() {
    // unit started at t(0): its lease ends at t(660).
    assert_eq!(
        given(running_lint()).when(dead_letter("unit", 1, 5, 659)),
        Err(DeploymentError::LeaseNotExpired {
            step: "unit".into(),
            attempt: 1,
            until: t(660)
        }),
        "its runner may still hold the job and record the outcome"
    );
    let events = given(running_lint())
        .when(dead_letter("unit", 1, 5, 660))
        .expect("recorded");
    assert_eq!(events[..2], dead_lettered("unit", 1, 5)[..]);
    assert!(
        matches!(
            &events[2],
            E::StepRetryScheduled {
                next_attempt: 2,
                ..
            }
        ),
        "{events:?}"
    );
}

#[test]
fn the_third_dead_lettered_attempt_fails_the_step_as_the_interrupted_rule_says() {
    let history = vec![
        requested(),
        scheduled("build", 1, 0),
        attempt_failed("build", 1, ErrorClass::Interrupted),
        E::StepRetryScheduled {
            step: "build".into(),
            attempt: 1,
            next_attempt: 2,
            delay_ms: 0,
            not_before: t(1),
        },
        attempt_failed("build", 2, ErrorClass::Interrupted),
        E::StepRetryScheduled {
            step: "build".into(),
            attempt: 2,
            next_attempt: 3,
            delay_ms: 0,
            not_before: t(2),
        },
    ];
    let mut then = dead_lettered("build", 3, 5);
    then.push(E::StepFailed {
        step: "build".into(),
        attempts: 3,
        error_class: ErrorClass::Interrupted,
    });
    let given = given(history);
    assert_eq!(given.when(dead_letter("build", 3, 5, 3)), Ok(then));
}

#[test]
fn a_dead_letter_of_an_attempt_that_has_its_outcome_records_nothing() {
    assert_eq!(
        given(running_lint()).when(dead_letter("build", 1, 5, 700)),
        Ok(vec![]),
        "build succeeded"
    );
    let mut retried = running_lint();
    retried.push(attempt_failed("lint", 1, ErrorClass::StepFailed));
    retried.push(E::StepRetryScheduled {
        step: "lint".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(10),
    });
    assert_eq!(
        given(retried).when(dead_letter("lint", 1, 5, 700)),
        Ok(vec![]),
        "attempt 1 was superseded"
    );
    assert_eq!(
        given(failed_at_build()).when(dead_letter("build", 1, 5, 700)),
        Ok(vec![]),
        "the deployment ended"
    );
}
