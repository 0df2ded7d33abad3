//! The shop deployment the aggregate's tests share (build → (unit, lint) → package), the
//! histories they start from, and what every family's tests use (the kit's builders and
//! harness: `overture_domain::testing`).


pub use overture_domain::deployment::{
    actions, Action, DeploymentCommand as C, DeploymentError, Interruption, SealedCredentials,
    StepStatus,
};
pub use overture_domain::testing::events as kit;
pub use overture_domain::testing::events::{
    attempt_failed, failure, scheduled, start, succeeded, success,
};
pub use overture_domain::testing::{given, t, Then};
pub use overture_events::{BlueprintSnapshot, DeploymentEvent as E, ErrorClass};

/// build → (unit, lint) → package; lint retries step-failed twice, 5 s apart; grace 60 s.
pub fn blueprint() -> BlueprintSnapshot {
    kit::blueprint(
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
}

pub fn requested() -> E {
    kit::requested("shop.yaml", blueprint())
}

/// Started at t(0) or later: every step of [`blueprint`] has the default 10 min timeout, so
/// its lease ends at t(660) at the earliest.
pub fn started(step: &str, attempt: u32) -> E {
    started_at(step, attempt, 0)
}

pub fn started_at(step: &str, attempt: u32, at: i64) -> E {
    E::StepStarted {
        step: step.into(),
        attempt,
        sandbox: format!("{step}-{attempt}"),
        lease_until: Some(t(at + 600 + 60)),
        fingerprint: None,
    }
}

/// What [`running_lint`]'s request sealed: its purge is the orchestrator's to carry out.
pub fn sealed() -> E {
    E::CredentialsSealed {
        seal: "seal-1".into(),
        secrets: vec!["api_key".into()],
        ssh_public_key: None,
        token: false,
    }
}

/// build succeeded; the first attempts of unit and lint are running.
pub fn running_lint() -> Vec<E> {
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

pub fn failing_with_lint_in_grace() -> Vec<E> {
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

/// A history without its seal: a request that sealed nothing.
pub fn with_nothing_sealed(history: Vec<E>) -> Vec<E> {
    history
        .into_iter()
        .filter(|event| !matches!(event, E::CredentialsSealed { .. }))
        .collect()
}

/// build failed on its first attempt, so the deployment failed.
pub fn failed_at_build() -> Vec<E> {
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

pub fn access(rule: &str) -> overture_domain::deployment::BastionAccess {
    overture_domain::deployment::BastionAccess {
        rule: rule.into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    }
}

pub fn granted(rule: &str) -> E {
    E::BastionAccessGranted {
        rule: rule.into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    }
}

pub fn cancellation_requested() -> E {
    E::CancellationRequested {
        requested_by: "ada".into(),
        reason: "wrong version".into(),
    }
}

pub fn abandoned_by_cancel(step: &str, attempt: u32) -> E {
    E::StepAbandoned {
        step: step.into(),
        attempt,
        reason: "cancelled by ada".into(),
    }
}
