//! The retry policy: how each error class is retried unless a step overrides it.

use std::time::Duration;

use overture_events::{ErrorClass, RetryRule, StepSpec};

/// The default rule for an error class (the retry table of the design).
pub const fn default_rule(class: ErrorClass) -> RetryRule {
    match class {
        ErrorClass::Terraform => rule(1, 0),
        ErrorClass::BackendUnreachable => rule(5, 10_000),
        ErrorClass::BootstrapTimeout => rule(0, 0),
        ErrorClass::HostUnreachable => rule(1, 0),
        // Running the step again is what every durable execution engine does after a crash;
        // a step that must never run twice opts out with `interrupted: { times: 0 }`.
        ErrorClass::Interrupted => rule(2, 0),
        ErrorClass::StepFailed => rule(0, 0),
        // Connecting again would meet the same key: what changed needs a person to look.
        ErrorClass::HostKeyMismatch => rule(0, 0),
        // Someone deleted the rule the deployment held: trying again would only hide that.
        ErrorClass::BastionAccessLost => rule(0, 0),
        // The wait was the step's whole chance: it never ran, and waiting again is a redrive.
        ErrorClass::ServiceTimeout => rule(0, 0),
        // The step never ran: its target is outside what it may reach, and stays so.
        ErrorClass::EgressRefused => rule(0, 0),
    }
}

/// A rule of `times` retries, `wait_ms` apart: the table above reads as a table.
const fn rule(times: u32, wait_ms: u64) -> RetryRule {
    RetryRule { times, wait_ms }
}

/// The rule that applies to a step's failures of one class.
///
/// A `service-timeout` is never retried, whatever the step says: the step never ran, and a
/// retry would start it without the services it waited for. Nor is an `egress-refused`: the
/// step never ran either, and its target would be refused again.
pub fn rule_for(step: &StepSpec, class: ErrorClass) -> RetryRule {
    if matches!(
        class,
        ErrorClass::ServiceTimeout | ErrorClass::EgressRefused
    ) {
        return default_rule(class);
    }
    step.retry
        .get(&class)
        .copied()
        .unwrap_or(default_rule(class))
}

/// What to do after an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Make attempt `next_attempt` after `wait`.
    Retry { next_attempt: u32, wait: Duration },
    /// The step has failed for good.
    GiveUp,
}

/// Decides after attempt `failed_attempt` (1-based) failed with `class`.
///
/// A rule of `times: n` allows n retries, so at most n + 1 attempts in all.
pub fn decide(step: &StepSpec, class: ErrorClass, failed_attempt: u32) -> RetryDecision {
    let rule = rule_for(step, class);
    match failed_attempt.checked_add(1) {
        Some(next_attempt) if failed_attempt <= rule.times => RetryDecision::Retry {
            next_attempt,
            wait: Duration::from_millis(rule.wait_ms),
        },
        // No attempt comes after the last number there is, whatever the rule allows.
        _ => RetryDecision::GiveUp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step() -> StepSpec {
        StepSpec {
            name: "s".into(),
            kind: "noop".into(),
            with: Default::default(),
            needs: vec![],
            timeout_ms: 1_000,
            retry: Default::default(),
            limits: Default::default(),
            provides: None,
            requires: vec![],
            watch: vec![],
        }
    }

    fn attempts_until_give_up(step: &StepSpec, class: ErrorClass) -> (u32, Vec<Duration>) {
        let mut waits = vec![];
        let mut attempt = 1;
        while let RetryDecision::Retry { next_attempt, wait } = decide(step, class, attempt) {
            assert_eq!(next_attempt, attempt + 1);
            waits.push(wait);
            attempt = next_attempt;
        }
        (attempt, waits)
    }

    #[test]
    fn the_default_table() {
        let step = step();
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::Terraform),
            (2, vec![Duration::ZERO])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::BackendUnreachable),
            (6, vec![Duration::from_secs(10); 5])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::BootstrapTimeout),
            (1, vec![])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::HostUnreachable),
            (2, vec![Duration::ZERO])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::Interrupted),
            (3, vec![Duration::ZERO; 2])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::StepFailed),
            (1, vec![])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::BastionAccessLost),
            (1, vec![]),
            "a lost bastion is never retried"
        );
    }

    #[test]
    fn a_step_overrides_one_class_and_keeps_the_others() {
        let mut step = step();
        step.retry.insert(
            ErrorClass::StepFailed,
            rule(2, 1_000),
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::StepFailed),
            (3, vec![Duration::from_secs(1); 2])
        );
        assert_eq!(
            attempts_until_give_up(&step, ErrorClass::HostUnreachable).0,
            2
        );
    }
}
