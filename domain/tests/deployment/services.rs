//! Services across hosts in the Deployment aggregate, given/when/then: registration, waits for
//! required services, their timeout, re-runs of watching steps, the seal a watching deployment
//! keeps, and deregistration when it is destroyed.

use overture_domain::deployment::{
    actions, Action, DeploymentCommand as C, DeploymentError, StepStatus,
};
use overture_domain::services::ServiceInstance;
use overture_domain::testing::events as kit;
use overture_domain::testing::events::{
    deregistered, instance, ran, registered, resolved, scheduled, started, succeeded,
};
use overture_domain::testing::{given, t, Then};
use overture_events::{BlueprintSnapshot, DeploymentEvent as E, ErrorClass, ServiceShortfall};

/// db provides `db` on one host; app waits up to 60 s for `db` and provides `app` on two hosts;
/// lb waits for two `app` (2 min) and for `db` (30 s), watches `app` and takes its members;
/// side sees no service. No step needs another: only services order them.
fn blueprint() -> BlueprintSnapshot {
    kit::blueprint(
        r#"
name: cluster
on_failure: { grace: 60s }
steps:
  db:
    run: wait-ssh
    with: { hosts: ["10.0.0.5:22"] }
    provides: { service: db, port: 5432 }
  app:
    run: wait-ssh
    with: { hosts: ["10.0.0.6:22", "10.0.0.7:22"] }
    requires: [{ service: db, timeout: 60s }]
    provides: { service: app, port: 8000, check: { http: /health } }
  lb:
    run: script
    with: { command: "echo {{ services.app.addresses }}" }
    requires: [{ service: app, count: 2, timeout: 2m }, { service: db, timeout: 30s }]
    watch: [app]
  side: { run: noop }
"#,
    )
}

fn requested() -> E {
    kit::requested("cluster.yaml", blueprint())
}

fn sealed() -> E {
    E::CredentialsSealed {
        seal: "seal-1".into(),
        secrets: vec![],
        ssh_public_key: Some("ssh-ed25519 AAAA overture".into()),
        token: true,
    }
}

fn db() -> ServiceInstance {
    instance("db", "db", "10.0.0.5", 5432)
}

fn app(last: u8) -> ServiceInstance {
    instance("app", "app", &format!("10.0.0.{last}"), 8000)
}

/// An `app` instance another deployment of the tenant registered.
fn elsewhere(last: u8) -> ServiceInstance {
    instance("app", "web", &format!("10.9.0.{last}"), 8000)
}

fn short(service: &str, count: u32, registered: u32) -> ServiceShortfall {
    ServiceShortfall {
        service: service.into(),
        count,
        registered,
    }
}

fn observe(now: i64, others: Vec<ServiceInstance>) -> C {
    C::ObserveServices {
        now: t(now),
        others,
    }
}

fn register(step: &str, attempt: u32, instances: Vec<ServiceInstance>) -> C {
    C::RegisterServices {
        step: step.into(),
        attempt,
        instances,
    }
}

/// The first look at the registry found nothing: app waits for db until t(60), lb for app and
/// db until t(120); db and side were scheduled by the first advance.
fn awaiting() -> Vec<E> {
    vec![
        requested(),
        sealed(),
        scheduled("db", 1, 0),
        scheduled("side", 1, 0),
        E::StepAwaitingServices {
            step: "app".into(),
            waiting_for: vec![short("db", 1, 0)],
            deadline: t(60),
        },
        E::StepAwaitingServices {
            step: "lb".into(),
            waiting_for: vec![short("app", 2, 0), short("db", 1, 0)],
            deadline: t(120),
        },
    ]
}

/// db runs; side has not started.
fn db_running() -> Vec<E> {
    let mut history = awaiting();
    history.push(started("db", 1));
    history
}

/// db registered and succeeded, app ran with it and registered its two hosts, side ran.
fn app_registered() -> Vec<E> {
    let mut history = db_running();
    history.extend([registered(&db()), succeeded("db", 1)]);
    history.extend([started("side", 1), succeeded("side", 1)]);
    history.extend([
        resolved("app", &[("db", &["10.0.0.5:5432"])]),
        scheduled("app", 1, 5),
        started("app", 1),
        registered(&app(6)),
        registered(&app(7)),
        succeeded("app", 1),
    ]);
    history
}

const APP_MEMBERS: &[&str] = &["10.0.0.6:8000", "10.0.0.7:8000"];

const DB_MEMBERS: &[&str] = &["10.0.0.5:5432"];

/// Every step succeeded, lb with the deployment's own two app members; the bastion was never
/// opened, the seal is kept.
fn succeeded_watching() -> Vec<E> {
    let mut history = app_registered();
    history.push(resolved("lb", &[("app", APP_MEMBERS), ("db", DB_MEMBERS)]));
    history.extend(ran("lb", 1, 6));
    history.push(E::DeploymentSucceeded {});
    history
}

#[test]
fn given_a_providing_step_running_when_its_hosts_answer_then_each_is_registered_once() {
    let mut history = db_running();
    history.extend([registered(&db()), succeeded("db", 1)]);
    history.extend([
        resolved("app", &[("db", DB_MEMBERS)]),
        scheduled("app", 1, 5),
        started("app", 1),
    ]);
    assert_eq!(
        given(history.clone()).when(register("app", 1, vec![app(6), app(7), app(6)])),
        Ok(vec![registered(&app(6)), registered(&app(7))]),
        "one registration per host, a host named twice counted once"
    );
    history.push(registered(&app(6)));
    assert_eq!(
        given(history.clone()).when(register("app", 1, vec![app(6), app(7)])),
        Ok(vec![registered(&app(7))]),
        "an instance the deployment registered already is not registered twice"
    );
    assert_eq!(
        given(history).when(register("app", 2, vec![app(7)])),
        Err(DeploymentError::AttemptNotRunning {
            step: "app".into(),
            attempt: 2
        }),
        "only a running attempt registers"
    );
}

#[test]
fn given_a_running_step_when_it_registers_a_service_it_does_not_provide_then_it_is_refused() {
    given(db_running())
        .when(register(
            "db",
            1,
            vec![instance("app", "db", "10.0.0.5", 8000)],
        ))
        .then_error(DeploymentError::NotProvided {
            step: "db".into(),
            service: "app".into(),
        });
    let mut side_running = db_running();
    side_running.push(started("side", 1));
    assert_eq!(
        given(side_running).when(register(
            "side",
            1,
            vec![instance("db", "side", "10.0.0.5", 5432)]
        )),
        Err(DeploymentError::NotProvided {
            step: "side".into(),
            service: "db".into()
        }),
        "a step that provides nothing registers nothing"
    );
}

#[test]
fn given_steps_that_see_services_when_advancing_then_only_the_others_are_scheduled() {
    assert_eq!(
        given([requested(), sealed()]).when(C::Advance { now: t(0) }),
        Ok(vec![scheduled("db", 1, 0), scheduled("side", 1, 0)]),
        "app and lb require services: they are left to ObserveServices"
    );
    let mut history = db_running();
    history.extend([registered(&db()), succeeded("db", 1)]);
    assert_eq!(
        given(history).when(C::Advance { now: t(5) }),
        Ok(vec![]),
        "not even once the service they wait for is there"
    );
}

#[test]
fn given_steps_short_of_services_when_observing_then_each_awaits_once_until_its_longest_timeout() {
    let mut history = vec![requested(), sealed()];
    history.extend([scheduled("db", 1, 0), scheduled("side", 1, 0)]);
    assert_eq!(
        given(history).when(observe(0, vec![])),
        Ok(awaiting()[4..].to_vec()),
        "app waits its one requirement's 60 s; lb the larger of 2 min and 30 s, for both"
    );
    let waiting = given(awaiting());
    assert_eq!(waiting.state().steps["lb"].status, StepStatus::Awaiting);
    let wakes: Vec<Action> = actions(waiting.state())
        .into_iter()
        .filter(|action| matches!(action, Action::WakeAt(_)))
        .collect();
    assert_eq!(
        wakes,
        vec![Action::WakeAt(t(60)), Action::WakeAt(t(120))],
        "the deployment is woken at each deadline"
    );
    assert_eq!(
        waiting.when(observe(30, vec![elsewhere(1)])),
        Ok(vec![]),
        "still short: the wait is recorded once"
    );
}

#[test]
fn given_enough_members_when_observing_then_services_are_resolved_and_the_step_is_scheduled() {
    let mut history = db_running();
    history.extend([registered(&db()), succeeded("db", 1)]);
    assert_eq!(
        given(history.clone()).when(observe(5, vec![])),
        Ok(vec![
            resolved("app", &[("db", DB_MEMBERS)]),
            scheduled("app", 1, 5),
        ]),
        "the deployment's own registration counts; lb is still short and already waits"
    );
    let mut lb_waits = app_registered();
    lb_waits.push(registered(&app(6)));
    assert_eq!(
        given(lb_waits).when(observe(6, vec![elsewhere(2), app(7)])),
        Ok(vec![
            resolved(
                "lb",
                &[
                    ("app", &["10.0.0.6:8000", "10.0.0.7:8000", "10.9.0.2:8000"]),
                    ("db", DB_MEMBERS)
                ]
            ),
            scheduled("lb", 1, 6),
        ]),
        "own and other deployments' members, sorted, each once"
    );
}

#[test]
fn given_instances_of_other_deployments_when_observing_then_they_count_toward_the_requirement() {
    given(db_running())
        .when(observe(10, vec![elsewhere(1), elsewhere(2), db()]))
        .then([
            resolved("app", &[("db", DB_MEMBERS)]),
            scheduled("app", 1, 10),
            resolved(
                "lb",
                &[
                    ("app", &["10.9.0.1:8000", "10.9.0.2:8000"]),
                    ("db", DB_MEMBERS),
                ],
            ),
            scheduled("lb", 1, 10),
        ]);
}

#[test]
fn given_a_step_still_short_at_its_deadline_when_observing_then_it_fails_as_service_timeout() {
    let history = db_running();
    assert_eq!(
        given(history.clone()).when(observe(59, vec![])),
        Ok(vec![]),
        "before the deadline it goes on waiting"
    );
    let timed_out = vec![
        E::StepFailed {
            step: "app".into(),
            attempts: 0,
            error_class: ErrorClass::ServiceTimeout,
        },
        E::StepAbandoned {
            step: "side".into(),
            attempt: 1,
            reason: "not started because step `app` failed".into(),
        },
        E::StepAbandoned {
            step: "lb".into(),
            attempt: 0,
            reason: "not started because step `app` failed".into(),
        },
        E::FailureGracePeriodStarted {
            failed_step: "app".into(),
            deadline: t(120),
        },
    ];
    assert_eq!(
        given(history.clone()).when(observe(60, vec![])),
        Ok(timed_out.clone()),
        "the other waiting and awaiting steps are abandoned; db, running, gets the grace period"
    );

    // Then it fails as any failure: the secrets are purged, and the reason names the service.
    let mut history = history;
    history.extend(timed_out);
    history.push(succeeded("db", 1));
    let failing = given(history.clone());
    assert_eq!(actions(failing.state()), vec![Action::PurgeSecrets]);
    failing
        .when(C::RecordSecretsPurged)
        .then([E::SecretsPurged {}]);
    history.push(E::SecretsPurged {});
    given(history)
        .when(C::Advance { now: t(61) })
        .then([E::DeploymentFailed {
        reason:
            "step `app` timed out waiting for service `db` (0 of 1 registered) (service-timeout)"
                .into(),
    }]);
}

#[test]
fn given_a_step_partly_served_at_its_deadline_when_it_fails_then_the_reason_counts_what_was_registered(
) {
    // lb began to wait with no app and no db; by its deadline db and one app are registered.
    let mut history = db_running();
    history.extend([registered(&db()), succeeded("db", 1)]);
    history.extend([started("side", 1), succeeded("side", 1)]);
    history.extend([
        resolved("app", &[("db", DB_MEMBERS)]),
        scheduled("app", 1, 5),
        started("app", 1),
    ]);
    let failed = given(history.clone()).when(observe(120, vec![elsewhere(1)]));
    assert_eq!(
        failed,
        Ok(vec![
            E::StepAwaitingServices {
                step: "lb".into(),
                waiting_for: vec![short("app", 2, 1)],
                deadline: t(120),
            },
            E::StepFailed {
                step: "lb".into(),
                attempts: 0,
                error_class: ErrorClass::ServiceTimeout,
            },
            E::FailureGracePeriodStarted {
                failed_step: "lb".into(),
                deadline: t(180),
            },
        ]),
        "what it still waits for at the deadline is recorded with its failure"
    );
    history.extend(failed.expect("observed"));
    history.extend([succeeded("app", 1), E::SecretsPurged {}]);
    assert_eq!(
        given(history).when(C::Advance { now: t(121) }),
        Ok(vec![E::DeploymentFailed {
            reason:
                "step `lb` timed out waiting for service `app` (1 of 2 registered) (service-timeout)"
                    .into()
        }]),
        "the reason counts what was registered when the step failed, not when it began to wait"
    );
}

#[test]
fn given_a_succeeded_watching_step_when_its_service_changes_then_it_alone_runs_again() {
    let history = succeeded_watching();
    assert_eq!(
        given(history.clone()).when(observe(100, vec![])),
        Ok(vec![]),
        "the same members: nothing runs again"
    );
    let rerun = E::StepRerunRequested {
        step: "lb".into(),
        service: "app".into(),
        from: APP_MEMBERS.iter().map(|m| (*m).to_owned()).collect(),
        to: vec![
            "10.0.0.6:8000".into(),
            "10.0.0.7:8000".into(),
            "10.9.0.3:8000".into(),
        ],
    };
    assert_eq!(
        given(history.clone()).when(observe(100, vec![elsewhere(3)])),
        Ok(vec![rerun.clone()]),
        "only the step that watches app; app and db, which provide, do not"
    );

    let mut history = history;
    history.push(rerun);
    let again = given(history.clone());
    assert!(!again.state().is_finished(), "the deployment runs again");
    assert_eq!(again.state().steps["lb"].status, StepStatus::Pending);
    assert_eq!(again.state().steps["lb"].first_attempt, 2);
    assert_eq!(again.state().steps["app"].status, StepStatus::Succeeded);
    assert_eq!(
        again.when(C::Advance { now: t(101) }),
        Ok(vec![]),
        "advancing leaves it to the next look at the registry"
    );
    let members = ["10.0.0.6:8000", "10.0.0.7:8000", "10.9.0.3:8000"];
    assert_eq!(
        given(history.clone()).when(observe(101, vec![elsewhere(3)])),
        Ok(vec![
            resolved("lb", &[("app", &members), ("db", DB_MEMBERS)]),
            scheduled("lb", 2, 101),
        ]),
        "its next attempt, with the new members"
    );
    history.push(resolved("lb", &[("app", &members), ("db", DB_MEMBERS)]));
    history.extend(ran("lb", 2, 101));
    let done = given(history.clone());
    assert_eq!(
        done.when(C::Advance { now: t(102) }),
        Ok(vec![E::DeploymentSucceeded {}]),
        "it ends succeeded again, its seal still kept"
    );
    history.push(E::DeploymentSucceeded {});
    assert_eq!(
        given(history).when(observe(103, vec![elsewhere(3)])),
        Ok(vec![]),
        "the members it ran with are now the ones recorded"
    );
}

#[test]
fn given_a_watching_deployment_whose_steps_succeeded_when_it_ends_then_it_keeps_its_seal() {
    let mut history = succeeded_watching();
    history.pop();
    let done = given(history.clone());
    assert!(
        !actions(done.state()).contains(&Action::PurgeSecrets),
        "a re-run needs the SSH key and the token"
    );
    assert_eq!(
        done.when(C::Advance { now: t(7) }),
        Ok(vec![E::DeploymentSucceeded {}]),
        "it ends without SecretsPurged"
    );
    let ended = given(succeeded_watching());
    assert!(ended.state().is_finished());
    assert!(ended.state().keeps_watching());
    assert!(actions(ended.state()).is_empty(), "no purge action");
    assert!(
        ended.when(C::RecordSecretsPurged).is_err(),
        "a purge is not accepted while it watches"
    );
}

#[test]
fn given_a_watching_deployment_with_the_bastion_open_when_its_work_is_over_then_it_closes_it_and_ends_sealed(
) {
    let access = overture_domain::deployment::BastionAccess {
        rule: "r1".into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    };
    let mut history = app_registered();
    history.push(resolved("lb", &[("app", APP_MEMBERS), ("db", DB_MEMBERS)]));
    history.extend([scheduled("lb", 1, 6), started("lb", 1)]);
    history.push(E::BastionAccessGranted {
        rule: "r1".into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    });
    history.push(succeeded("lb", 1));
    let open = given(history.clone());
    assert_eq!(actions(open.state()), vec![Action::RevokeAccess(access)]);
    open.when(C::Advance { now: t(7) }).then_nothing();
    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: vec![],
    });
    let closed = given(history);
    assert!(actions(closed.state()).is_empty());
    closed
        .when(C::Advance { now: t(8) })
        .then([E::DeploymentSucceeded {}]);
}

#[test]
fn given_a_watching_deployment_cancelled_when_its_work_is_over_then_it_purges_as_always() {
    let cancelled = given(awaiting()).when(C::Cancel {
        requested_by: "ada".into(),
        reason: "changed my mind".into(),
    });
    let abandoned = |step: &str, attempt| E::StepAbandoned {
        step: step.into(),
        attempt,
        reason: "cancelled by ada".into(),
    };
    assert_eq!(
        cancelled,
        Ok(vec![
            E::CancellationRequested {
                requested_by: "ada".into(),
                reason: "changed my mind".into(),
            },
            abandoned("db", 1),
            abandoned("app", 0),
            abandoned("lb", 0),
            abandoned("side", 1),
        ]),
        "awaiting steps are abandoned with the waiting ones"
    );
    let mut history = awaiting();
    history.extend(cancelled.expect("cancelled"));
    let over = given(history);
    assert!(!over.state().keeps_watching());
    assert_eq!(actions(over.state()), vec![Action::PurgeSecrets]);
    over.when(observe(10, vec![db()])).then_nothing();
}

#[test]
fn given_a_succeeded_watching_deployment_when_destroyed_then_it_deregisters_stops_watching_and_purges(
) {
    assert_eq!(
        given(succeeded_watching()).when(C::RequestDestroy),
        Ok(vec![
            deregistered(&db()),
            deregistered(&app(6)),
            deregistered(&app(7)),
            E::DestroyRequested { steps: vec![] },
            E::DeploymentDestroyed {},
        ]),
        "its instances leave the registry before anything is torn down"
    );
    let mut history = succeeded_watching();
    history.extend([
        deregistered(&db()),
        deregistered(&app(6)),
        deregistered(&app(7)),
        E::DestroyRequested { steps: vec![] },
        E::DeploymentDestroyed {},
    ]);
    let destroyed = given(history.clone());
    assert!(destroyed.state().registrations.is_empty());
    assert!(!destroyed.state().keeps_watching());
    assert_eq!(actions(destroyed.state()), vec![Action::PurgeSecrets]);
    assert_eq!(
        given(history.clone()).when(observe(200, vec![elsewhere(3)])),
        Ok(vec![]),
        "it watches no more"
    );
    destroyed
        .when(C::RecordSecretsPurged)
        .then([E::SecretsPurged {}]);
    history.push(E::SecretsPurged {});
    let purged = given(history);
    assert!(actions(purged.state()).is_empty());
    purged.when(C::RecordSecretsPurged).then_nothing();
}

#[test]
fn given_a_step_that_only_watches_when_observing_then_it_is_scheduled_with_the_members_there_are() {
    let only_watches = kit::blueprint(
        r#"
name: conf
steps:
  conf:
    run: script
    with: { command: "echo {{ services.web.count }}" }
    watch: [web]
"#,
    );
    let requested = kit::requested("conf.yaml", only_watches);
    assert_eq!(
        given([requested.clone()]).when(C::Advance { now: t(0) }),
        Ok(vec![]),
        "it sees a service: advancing leaves it to the registry's look"
    );
    assert_eq!(
        given([requested]).when(observe(0, vec![])),
        Ok(vec![
            resolved("conf", &[("web", &[])]),
            scheduled("conf", 1, 0)
        ]),
        "it requires nothing, so it does not wait: none is a membership too"
    );
}

#[test]
fn given_a_watching_step_still_running_when_its_service_changes_then_it_runs_again_once_it_succeeded(
) {
    let mut history = app_registered();
    history.push(resolved("lb", &[("app", APP_MEMBERS), ("db", DB_MEMBERS)]));
    history.extend([scheduled("lb", 1, 6), started("lb", 1)]);
    assert_eq!(
        given(history.clone()).when(observe(7, vec![elsewhere(3)])),
        Ok(vec![]),
        "a running attempt is not asked to run again"
    );
    history.push(succeeded("lb", 1));
    history.push(E::DeploymentSucceeded {});
    assert_eq!(
        given(history).when(observe(8, vec![elsewhere(3)])),
        Ok(vec![E::StepRerunRequested {
            step: "lb".into(),
            service: "app".into(),
            from: APP_MEMBERS.iter().map(|m| (*m).to_owned()).collect(),
            to: vec![
                "10.0.0.6:8000".into(),
                "10.0.0.7:8000".into(),
                "10.9.0.3:8000".into()
            ],
        }]),
        "once it succeeded, the members it ran with are compared with those there are"
    );
}

#[test]
fn given_a_rerun_that_fails_for_good_when_advancing_then_the_deployment_fails_and_purges() {
    let mut history = succeeded_watching();
    history.extend([
        E::StepRerunRequested {
            step: "lb".into(),
            service: "app".into(),
            from: APP_MEMBERS.iter().map(|m| (*m).to_owned()).collect(),
            to: vec!["10.0.0.6:8000".into()],
        },
        resolved("lb", &[("app", &["10.0.0.6:8000"]), ("db", DB_MEMBERS)]),
        scheduled("lb", 2, 100),
        started("lb", 2),
    ]);
    let failed = given(history.clone()).when(C::RecordFailure {
        step: "lb".into(),
        attempt: 2,
        error_class: ErrorClass::StepFailed,
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
        now: t(101),
    });
    let failed = failed.expect("recorded");
    assert!(
        failed.contains(&E::StepFailed {
            step: "lb".into(),
            attempts: 2,
            error_class: ErrorClass::StepFailed
        }),
        "{failed:#?}"
    );
    history.extend(failed);
    let failing = given(history.clone());
    assert!(!failing.state().keeps_watching());
    assert_eq!(actions(failing.state()), vec![Action::PurgeSecrets]);
    history.push(E::SecretsPurged {});
    given(history)
        .when(C::Advance { now: t(102) })
        .then([E::DeploymentFailed {
            reason: "step `lb` failed after 2 attempt(s) (step-failed)".into(),
        }]);
}

#[test]
fn given_a_retry_rule_for_service_timeout_when_the_wait_times_out_then_the_step_still_fails() {
    // A blueprint recorded with a retry rule for the class (validation refuses one now): the
    // step never ran, so a retry would start it without the services it waits for.
    let mut retried = blueprint();
    for step in &mut retried.steps {
        step.retry.insert(
            ErrorClass::ServiceTimeout,
            overture_events::RetryRule {
                times: 2,
                wait_ms: 1_000,
            },
        );
    }
    let mut history = db_running();
    if let Some(E::DeploymentRequested { blueprint, .. }) = history.first_mut() {
        *blueprint = retried;
    }
    let events = given(history).when(observe(60, vec![])).expect("observed");
    assert_eq!(
        events.first(),
        Some(&E::StepFailed {
            step: "app".into(),
            attempts: 0,
            error_class: ErrorClass::ServiceTimeout,
        }),
        "{events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, E::StepRetryScheduled { .. })),
        "{events:#?}"
    );
}
