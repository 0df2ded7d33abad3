//! Which steps the aggregate schedules, abandons and reports as running, given/when/then.
//!
//! The aggregate keeps these answers up to date as it folds events (it does not look at every
//! step for each command), so these tests go through the paths that change them: needs met one
//! by one, retries, failures for good, cancels and redrives. A whole deployment is also run
//! command by command, and after every command its answers are checked against what scanning
//! every step says.

use std::collections::BTreeMap;

use overture_domain::deployment::{
    actions, actions_besides_attempts, attempt_action, Action, Deployment, DeploymentCommand as C,
    DeploymentState, Outcome, Phase, StepStatus,
};
use overture_domain::testing::events as kit;
use overture_domain::testing::events::{
    abandoned, advance, blueprint, failed, ran, scheduled, started, succeeded,
};
use overture_domain::testing::{given, t};
use overture_events::{BlueprintSnapshot, DeploymentEvent as E, ErrorClass};

fn requested(blueprint: BlueprintSnapshot) -> E {
    kit::requested("b.yaml", blueprint)
}

/// root → (zeta, alpha, mid), listed out of alphabetical order; join needs all three.
fn fan() -> E {
    requested(blueprint(
        r#"
name: fan
on_failure: { grace: 60s }
steps:
  root: { run: noop }
  zeta: { run: noop, needs: [root] }
  alpha: { run: noop, needs: [root], retry: { step-failed: { times: 1, wait: 5s } } }
  mid: { run: noop, needs: [root] }
  join: { run: noop, needs: [zeta, alpha, mid] }
"#,
    ))
}

/// a → b → c.
fn chain() -> E {
    requested(blueprint(
        r#"
name: chain
steps:
  a: { run: noop }
  b: { run: noop, needs: [a] }
  c: { run: noop, needs: [b] }
"#,
    ))
}

#[test]
fn a_step_is_scheduled_only_once_its_last_need_succeeded() {
    let mut history: Vec<E> = std::iter::once(fan()).chain(ran("root", 1, 0)).collect();
    history.extend([scheduled("zeta", 1, 1), scheduled("alpha", 1, 1)]);
    history.extend([
        scheduled("mid", 1, 1),
        started("mid", 1),
        succeeded("mid", 1),
    ]);
    history.extend([
        started("zeta", 1),
        succeeded("zeta", 1),
        started("alpha", 1),
    ]);
    assert_eq!(
        given(history.clone()).when(advance(2)).expect("accepted"),
        vec![],
        "alpha still runs"
    );
    history.push(succeeded("alpha", 1));
    assert_eq!(
        given(history).when(advance(2)).expect("accepted"),
        vec![scheduled("join", 1, 2)]
    );
}

#[test]
fn steps_that_become_ready_together_are_scheduled_in_blueprint_order() {
    let history = std::iter::once(fan()).chain(ran("root", 1, 0));
    assert_eq!(
        given(history).when(advance(1)).expect("accepted"),
        vec![
            scheduled("zeta", 1, 1),
            scheduled("alpha", 1, 1),
            scheduled("mid", 1, 1)
        ]
    );
}

#[test]
fn a_step_whose_need_is_retried_waits_for_the_retry_to_succeed() {
    let mut history: Vec<E> = std::iter::once(fan()).chain(ran("root", 1, 0)).collect();
    history.extend(ran("zeta", 1, 1));
    history.extend(ran("mid", 1, 1));
    history.extend([scheduled("alpha", 1, 1), started("alpha", 1)]);
    history.push(E::StepRetryScheduled {
        step: "alpha".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(7),
    });
    let retrying = given(history.clone());
    assert_eq!(retrying.when(advance(8)).expect("accepted"), vec![]);
    assert_eq!(
        actions(retrying.state()),
        vec![Action::RunAttempt {
            step: "alpha".into(),
            attempt: 2,
            not_before: t(7)
        }]
    );
    history.extend([started("alpha", 2), succeeded("alpha", 2)]);
    assert_eq!(
        given(history).when(advance(9)).expect("accepted"),
        vec![scheduled("join", 1, 9)]
    );
}

#[test]
fn a_failure_for_good_abandons_the_waiting_steps_in_blueprint_order_and_waits_for_the_running() {
    let mut history: Vec<E> = std::iter::once(fan()).chain(ran("root", 1, 0)).collect();
    history.extend([
        scheduled("zeta", 1, 1),
        scheduled("alpha", 1, 1),
        scheduled("mid", 1, 1),
        started("alpha", 1),
        started("zeta", 1),
    ]);
    let given = given(history);
    let running: Vec<&String> = given
        .state()
        .running_steps()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(running, ["zeta", "alpha"], "in blueprint order");
    assert_eq!(
        given
            .when(C::RecordFailure {
                step: "zeta".into(),
                attempt: 1,
                error_class: ErrorClass::StepFailed,
                exit_code: Some(1),
                message: "boom".into(),
                duration_ms: 1,
                now: t(2),
            })
            .expect("accepted"),
        vec![
            E::StepAttemptFailed {
                step: "zeta".into(),
                attempt: 1,
                error_class: ErrorClass::StepFailed,
                exit_code: Some(1),
                message: "boom".into(),
                duration_ms: 1,
            },
            failed("zeta", 1),
            abandoned("mid", 1, "not started because step `zeta` failed"),
            E::FailureGracePeriodStarted {
                failed_step: "zeta".into(),
                deadline: t(62),
            },
        ]
    );
}

#[test]
fn a_cancel_abandons_waiting_and_running_steps_in_blueprint_order() {
    let mut history: Vec<E> = std::iter::once(fan()).chain(ran("root", 1, 0)).collect();
    history.extend([
        scheduled("zeta", 1, 1),
        scheduled("alpha", 1, 1),
        scheduled("mid", 1, 1),
        started("zeta", 1),
        started("mid", 1),
    ]);
    let why = "cancelled by ada";
    assert_eq!(
        given(history)
            .when(C::Cancel {
                requested_by: "ada".into(),
                reason: "wrong branch".into(),
            })
            .expect("accepted"),
        vec![
            E::CancellationRequested {
                requested_by: "ada".into(),
                reason: "wrong branch".into(),
            },
            abandoned("zeta", 1, why),
            abandoned("alpha", 1, why),
            abandoned("mid", 1, why),
        ]
    );
}

#[test]
fn after_a_redrive_a_step_waits_for_its_redriven_need_and_not_for_one_that_had_succeeded() {
    let mut history: Vec<E> = std::iter::once(chain()).chain(ran("a", 1, 0)).collect();
    history.extend([scheduled("b", 1, 1), started("b", 1), failed("b", 1)]);
    history.extend([
        E::SecretsPurged {},
        E::DeploymentFailed { reason: "b".into() },
    ]);
    history.push(E::DeploymentRedriven {
        requested_by: "ada".into(),
        steps: vec!["b".into(), "c".into()],
    });
    assert_eq!(
        given(history.clone()).when(advance(5)).expect("accepted"),
        vec![scheduled("b", 2, 5)],
        "a stays done; c waits for b"
    );
    history.extend([scheduled("b", 2, 5), started("b", 2)]);
    assert_eq!(
        given(history.clone()).when(advance(6)).expect("accepted"),
        vec![]
    );
    history.push(succeeded("b", 2));
    assert_eq!(
        given(history).when(advance(7)).expect("accepted"),
        vec![scheduled("c", 1, 7)]
    );
}

/// How each attempt of the wide deployment ends: `(step, attempt)` pairs that fail.
const FAILING: [(&str, u32); 3] = [("s2", 1), ("s3", 1), ("s6", 1)];

/// root → s1 … s8 → sink; s2 retries once.
fn wide() -> E {
    let mut yaml = String::from("name: wide\non_failure: { grace: 60s }\nsteps:\n");
    yaml.push_str("  root: { run: noop }\n");
    for i in 1..=8 {
        let retry = if i == 2 {
            ", retry: { step-failed: { times: 1, wait: 5s } }"
        } else {
            ""
        };
        yaml.push_str(&format!("  s{i}: {{ run: noop, needs: [root]{retry} }}\n"));
    }
    let all: Vec<String> = (1..=8).map(|i| format!("s{i}")).collect();
    yaml.push_str(&format!(
        "  sink: {{ run: noop, needs: [{}] }}\n",
        all.join(", ")
    ));
    requested(blueprint(&yaml))
}

/// A deployment driven command by command, as the handlers drive it.
struct Run {
    state: DeploymentState,
    log: Vec<E>,
    now: i64,
}

impl Run {
    fn exec(&mut self, command: C) -> bool {
        let Ok(events) = Deployment::handle(&self.state, command) else {
            return false;
        };
        for event in events {
            self.state = Deployment::apply(self.state.clone(), event.clone());
            self.log.push(event);
        }
        agrees_with_a_scan(&self.state, self.now);
        true
    }

    /// Advances, starts every due attempt, then records each running attempt's outcome in
    /// blueprint order; purges the secrets when asked; until the deployment ends.
    fn until_it_ends(&mut self) {
        while !self.state.is_finished() {
            self.now += 60;
            let now = t(self.now);
            let before = self.log.len();
            self.exec(C::Advance { now });
            for action in actions(&self.state) {
                match action {
                    Action::RunAttempt { step, attempt, .. } => {
                        self.exec(C::StartAttempt {
                            step,
                            attempt,
                            sandbox: "box".into(),
                            now,
                        });
                    }
                    Action::PurgeSecrets => {
                        self.exec(C::RecordSecretsPurged);
                    }
                    Action::WakeAt(_) | Action::RevokeAccess(_) => {}
                }
            }
            let running: Vec<(String, u32)> = self
                .state
                .running_steps()
                .map(|(name, s)| (name.clone(), s.attempt))
                .collect();
            for (step, attempt) in running {
                let outcome = if FAILING.contains(&(step.as_str(), attempt)) {
                    C::RecordFailure {
                        step,
                        attempt,
                        error_class: ErrorClass::StepFailed,
                        exit_code: Some(1),
                        message: "boom".into(),
                        duration_ms: 1,
                        now,
                    }
                } else {
                    C::RecordSuccess {
                        step,
                        attempt,
                        outputs: BTreeMap::new(),
                        duration_ms: 1,
                    }
                };
                self.exec(outcome);
            }
            assert!(self.log.len() > before, "stuck: {:?}", self.state.phase);
        }
    }
}

/// What the aggregate answers from its indices is what a scan of every step says.
fn agrees_with_a_scan(state: &DeploymentState, now: i64) {
    let scan = |wanted: &dyn Fn(StepStatus) -> bool| -> Vec<String> {
        state
            .steps
            .iter()
            .filter(|(_, s)| wanted(s.status))
            .map(|(name, _)| name.clone())
            .collect()
    };
    let running: Vec<String> = state.running_steps().map(|(n, _)| n.clone()).collect();
    assert_eq!(running, scan(&|s| s == StepStatus::Running));
    let to_run: Vec<String> = actions(state)
        .into_iter()
        .filter_map(|action| match action {
            Action::RunAttempt { step, .. } => Some(step),
            _ => None,
        })
        .collect();
    assert_eq!(to_run, scan(&|s| s.is_waiting()));
    if state.phase != Phase::Running {
        return;
    }
    let Some(blueprint) = &state.blueprint else {
        return;
    };
    let succeeded = |name: &String| {
        state
            .steps
            .get(name)
            .is_some_and(|s| s.status == StepStatus::Succeeded)
    };
    let ready: Vec<String> = blueprint
        .steps
        .iter()
        .filter(|spec| state.steps[&spec.name].status == StepStatus::Pending)
        .filter(|spec| spec.needs.iter().all(succeeded))
        .map(|spec| spec.name.clone())
        .collect();
    let scheduled: Vec<String> = Deployment::handle(state, C::Advance { now: t(now) })
        .expect("accepted")
        .into_iter()
        .filter_map(|event| match event {
            E::StepScheduled { step, .. } => Some(step),
            _ => None,
        })
        .collect();
    assert_eq!(scheduled, ready);
}

#[test]
fn a_wide_deployment_whose_steps_fail_and_are_redriven_runs_every_step_to_success() {
    let mut run = Run {
        state: Deployment::replay([wide()]),
        log: vec![],
        now: 0,
    };
    run.until_it_ends();
    assert_eq!(run.state.phase, Phase::Finished(Outcome::Failed));
    let abandoned_s2 = abandoned("s2", 2, "not started because step `s3` failed");
    assert!(run.log.contains(&abandoned_s2), "{:#?}", run.log);
    assert!(run.log.contains(&failed("s6", 1)), "{:#?}", run.log);
    let sink_scheduled = |e: &E| matches!(e, E::StepScheduled { step, .. } if step == "sink");
    assert!(!run.log.iter().any(sink_scheduled), "{:#?}", run.log);

    run.exec(C::Redrive {
        requested_by: "ada".into(),
        sealed: None,
    });
    assert_eq!(
        run.log.last(),
        Some(&E::DeploymentRedriven {
            requested_by: "ada".into(),
            steps: vec!["s2".into(), "s3".into(), "s6".into(), "sink".into()],
        })
    );
    let redriven = run.log.len();
    run.until_it_ends();
    assert_eq!(run.state.phase, Phase::Finished(Outcome::Succeeded));
    let again = &run.log[redriven..];
    let first_round: Vec<(&str, u32)> = again
        .iter()
        .filter_map(|e| match e {
            E::StepScheduled { step, attempt, .. } => Some((step.as_str(), *attempt)),
            _ => None,
        })
        .take(3)
        .collect();
    assert_eq!(
        first_round,
        [("s2", 3), ("s3", 2), ("s6", 2)],
        "each from the attempt after its last, in blueprint order: {again:#?}"
    );
    let sink = again
        .iter()
        .position(sink_scheduled)
        .expect("sink scheduled");
    let a_need_succeeded =
        |e: &E| matches!(e, E::StepSucceeded { step, .. } if step != "sink" && step != "root");
    let last_need = again
        .iter()
        .rposition(a_need_succeeded)
        .expect("needs succeeded");
    assert!(last_need < sink, "{again:#?}");
    assert_eq!(again.iter().filter(|e| sink_scheduled(e)).count(), 1);
}

#[test]
fn a_redrive_recorded_with_a_step_that_had_succeeded_runs_it_again_before_what_needs_it() {
    let mut history: Vec<E> = std::iter::once(chain()).chain(ran("a", 1, 0)).collect();
    history.extend(ran("b", 1, 1));
    history.extend([scheduled("c", 1, 2), started("c", 1), failed("c", 1)]);
    history.extend([
        E::SecretsPurged {},
        E::DeploymentFailed { reason: "c".into() },
    ]);
    // The log is the truth: a redrive event naming every step is folded as it says.
    history.push(E::DeploymentRedriven {
        requested_by: "ada".into(),
        steps: vec!["a".into(), "b".into(), "c".into()],
    });
    assert_eq!(
        given(history.clone()).when(advance(5)).expect("accepted"),
        vec![scheduled("a", 2, 5)]
    );
    history.extend([scheduled("a", 2, 5), started("a", 2), succeeded("a", 2)]);
    assert_eq!(
        given(history).when(advance(6)).expect("accepted"),
        vec![scheduled("b", 2, 6)]
    );
}

#[test]
fn the_actions_of_the_attempts_just_decided_are_those_every_waiting_attempt_calls_for() {
    let mut history: Vec<E> = std::iter::once(fan()).chain(ran("root", 1, 0)).collect();
    history.extend([
        scheduled("zeta", 1, 1),
        scheduled("alpha", 1, 1),
        scheduled("mid", 1, 1),
        started("zeta", 1),
    ]);
    let state = given(history).state().clone();
    let decided = [
        ("zeta", 1),
        ("alpha", 1),
        ("mid", 1),
        ("mid", 2),
        ("nope", 1),
    ];
    let mut piecemeal: Vec<Action> = decided
        .iter()
        .filter_map(|(step, attempt)| attempt_action(&state, step, *attempt))
        .collect();
    piecemeal.extend(actions_besides_attempts(&state));
    assert_eq!(
        piecemeal,
        actions(&state),
        "zeta started, mid waits at attempt 1, nope is no step"
    );
}
