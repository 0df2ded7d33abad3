//! Egress, given/when/then: given what the engine's operator allows of the host's loopback, when
//! a step wants a destination, then it enters the attempt's policy or not; when a step's own
//! target is outside the policy, then it is refused, naming the destination and why; and an
//! attempt refused so fails its step at once, never retried.

use std::net::Ipv4Addr;

use overture_domain::blueprint::parse;
use overture_domain::deployment::{Deployment, DeploymentCommand as C, DeploymentState};
use overture_domain::egress::{Destination, EgressRefusal, LoopbackEgress, Origin};
use overture_domain::retry::{decide, RetryDecision};
use overture_domain::testing::events::{requested, scheduled, started_until};
use overture_domain::testing::t;
use overture_events::{DeploymentEvent as E, ErrorClass, RetryRule};

use LoopbackEgress::{Declared, Operator, Refused};

/// `ADDRESS:PORT`, `ADDRESS/PREFIX` or `ADDRESS`, unchecked: `parse` would refuse the
/// loopback and link-local ones that the policy must be seen to leave out.
fn destination(text: &str) -> Destination {
    let (address, prefix, port) = if let Some((address, port)) = text.split_once(':') {
        (address, 32, Some(port.parse().expect("a port")))
    } else if let Some((address, prefix)) = text.split_once('/') {
        (address, prefix.parse().expect("a prefix"), None)
    } else {
        (text, 32, None)
    };
    Destination {
        address: address.parse().expect("an address"),
        prefix,
        port,
    }
}

struct Given(LoopbackEgress);

fn given(loopback: LoopbackEgress) -> Given {
    Given(loopback)
}

impl Given {
    /// Whether `wanted`, from `origin`, enters the attempt's policy.
    fn when_wanted(&self, wanted: &str, origin: Origin) -> bool {
        self.0.admits(&destination(wanted), origin)
    }

    /// Why a connection to `target` (ADDRESS:PORT) is refused under the policy `allowed`.
    fn when_connecting(&self, target: &str, allowed: &[&str]) -> Option<EgressRefusal> {
        let (address, port) = target.split_once(':').expect("ADDRESS:PORT");
        let address: Ipv4Addr = address.parse().expect("an address");
        let allowed: Vec<Destination> = allowed.iter().map(|d| destination(d)).collect();
        self.0
            .refusal(target, address, port.parse().expect("a port"), &allowed)
    }
}

#[test]
fn given_an_api_engine_when_a_step_wants_the_hosts_loopback_then_only_its_clouds_endpoints_enter() {
    let api = given(Refused);
    assert!(api.when_wanted("127.0.0.1:5000", Origin::Cloud));
    assert!(!api.when_wanted("127.0.0.1:8500", Origin::Declared));
    assert!(!api.when_wanted("127.0.0.1:9100", Origin::Target));
    // Anything off the host stays the step's to reach.
    assert!(api.when_wanted("192.0.2.7:443", Origin::Target));
    assert!(api.when_wanted("10.20.0.0/16", Origin::Declared));
}

#[test]
fn given_an_operator_who_allows_loopback_egress_when_a_step_wants_it_then_only_declared_ports_enter(
) {
    let allowing = given(Declared);
    assert!(allowing.when_wanted("127.0.0.1:8500", Origin::Declared));
    assert!(
        !allowing.when_wanted("127.0.0.1:9100", Origin::Target),
        "the step's own URL is not a declaration"
    );
    assert!(allowing.when_wanted("127.0.0.1:5000", Origin::Cloud));
}

#[test]
fn given_the_operators_own_run_when_a_step_wants_the_loopback_then_its_targets_and_declarations_enter(
) {
    let operator = given(Operator);
    assert!(operator.when_wanted("127.0.0.1:8500", Origin::Declared));
    assert!(operator.when_wanted("127.0.0.1:9100", Origin::Target));
}

#[test]
fn given_any_operator_when_a_step_wants_link_local_or_the_loopback_beyond_127_0_0_1_ports_then_it_never_enters(
) {
    for loopback in [Refused, Declared, Operator] {
        for origin in [Origin::Cloud, Origin::Declared, Origin::Target] {
            for wanted in [
                "169.254.169.254:80",
                "169.254.0.0/16",
                "127.0.0.2:80",
                "127.0.0.0/8",
            ] {
                assert!(
                    !given(loopback).when_wanted(wanted, origin),
                    "{wanted} from {origin:?} under {loopback:?}"
                );
            }
        }
    }
}

#[test]
fn given_a_policy_when_a_step_connects_to_a_target_outside_it_then_the_refusal_names_it_and_why() {
    let policy = ["127.0.0.1:5000", "127.0.0.1:8500", "10.20.0.0/16"];
    assert_eq!(
        given(Refused).when_connecting("127.0.0.1:5000", &policy),
        None
    );
    assert_eq!(
        given(Refused).when_connecting("10.20.3.4:22", &policy),
        None
    );

    let refused = given(Refused)
        .when_connecting("127.0.0.1:9100", &policy)
        .expect("refused");
    assert_eq!(
        refused,
        EgressRefusal::LoopbackNotAllowed {
            target: "127.0.0.1:9100".into()
        }
    );
    assert!(
        refused.to_string().contains("--allow-loopback-egress"),
        "says what the operator can do: {refused}"
    );

    let undeclared = given(Declared)
        .when_connecting("127.0.0.1:9100", &policy)
        .expect("refused");
    assert_eq!(
        undeclared.to_string(),
        "127.0.0.1:9100 is on the engine host's loopback and not declared under the blueprint's \
         `egress:`; declare \"127.0.0.1:9100\" there to reach it"
    );

    for loopback in [Refused, Declared, Operator] {
        assert_eq!(
            given(loopback).when_connecting("169.254.169.254:80", &["169.254.169.254:80"]),
            None,
            "the policy is what the sandbox enforces; link-local never enters it (above)"
        );
        assert!(matches!(
            given(loopback).when_connecting("169.254.169.254:80", &policy),
            Some(EgressRefusal::LinkLocal { target }) if target == "169.254.169.254:80"
        ));
        assert!(matches!(
            given(loopback).when_connecting("127.0.0.2:8500", &policy),
            Some(EgressRefusal::LoopbackAddress { .. })
        ));
        assert!(matches!(
            given(loopback).when_connecting("192.0.2.9:443", &policy),
            Some(EgressRefusal::NotAllowed { .. })
        ));
    }
}

/// `call`, an http step that retries everything it may; it has started.
fn calling() -> DeploymentState {
    let blueprint = parse(
        r#"
name: probe
steps:
  call:
    run: http
    retry: { step-failed: { times: 3 }, backend-unreachable: { times: 5, wait: 1s } }
    with: { url: "http://127.0.0.1:9100/" }
"#,
    )
    .expect("valid")
    .snapshot;
    Deployment::replay([
        requested("probe.yaml", blueprint),
        scheduled("call", 1, 0),
        started_until("call", 1, t(660)),
    ])
}

#[test]
fn given_a_running_step_when_its_attempt_is_refused_egress_then_the_step_fails_at_once() {
    let events = Deployment::handle(
        &calling(),
        C::RecordFailure {
            step: "call".into(),
            attempt: 1,
            error_class: ErrorClass::EgressRefused,
            exit_code: None,
            message: "egress refused: 127.0.0.1:9100 is on the engine host's loopback".into(),
            duration_ms: 0,
            now: t(1),
        },
    )
    .expect("recorded");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, E::StepRetryScheduled { .. })),
        "{events:?}"
    );
    assert!(
        events.iter().any(|event| matches!(
            event,
            E::StepFailed { step, attempts: 1, error_class: ErrorClass::EgressRefused } if step == "call"
        )),
        "{events:?}"
    );
}

#[test]
fn given_a_step_that_asks_to_retry_refused_egress_then_it_is_never_retried() {
    let mut step = calling().blueprint.expect("a blueprint").steps[0].clone();
    // A blueprint cannot say so (below); a recorded one that did is not obeyed either.
    step.retry.insert(
        ErrorClass::EgressRefused,
        RetryRule {
            times: 5,
            wait_ms: 1_000,
        },
    );
    assert_eq!(
        decide(&step, ErrorClass::EgressRefused, 1),
        RetryDecision::GiveUp
    );
    let problems = parse(
        "name: x\nsteps:\n  call:\n    run: http\n    retry: { egress-refused: { times: 2 } }\n    with: { url: \"http://192.0.2.1/\" }\n",
    )
    .expect_err("refused")
    .to_string();
    assert!(
        problems.contains("steps.call.retry.egress-refused"),
        "{problems}"
    );
}
