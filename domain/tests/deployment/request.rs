//! Requesting a deployment: recorded once, with what was sealed; nothing before it.

use super::shop::*;

#[test]
fn a_request_is_recorded_with_its_sealed_secrets() {
    let sealed = SealedCredentials {
        seal: "seal-1".into(),
        secrets: vec!["api_key".into()],
        ssh_public_key: Some("ssh-ed25519 AAAA overture".into()),
        token: false,
    };
    let then = given([]).when(kit::request_from("shop.yaml", blueprint(), Some(sealed)));
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
    given([requested()])
        .when(kit::request_from("s", blueprint(), None))
        .then_error(DeploymentError::AlreadyRequested);
}

#[test]
fn commands_before_a_request_are_refused() {
    given([])
        .when(C::Advance { now: t(0) })
        .then_error(DeploymentError::NotRequested);
}

/// `kit::request_from`, named.
fn named(text: &str) -> C {
    let mut request = kit::request_from("shop.yaml", blueprint(), None);
    if let C::Request { name: slot, .. } = &mut request {
        *slot = Some(text.into());
    }
    request
}

#[test]
fn a_named_request_records_its_name() {
    let then = given([]).when(named("prod-web"));
    let Ok(events) = then else {
        panic!("refused: {then:?}")
    };
    let [E::DeploymentRequested { name: recorded, .. }] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(recorded.as_deref(), Some("prod-web"));
}

#[test]
fn a_request_with_a_name_against_the_rule_is_refused_naming_the_field() {
    for bad in [
        "Prod",
        "-web",
        "prod web",
        "",
        "0192e4c5-6f1a-7c3e-9b1d-2f4a5b6c7d8e",
    ] {
        let then = given([]).when(named(bad));
        let Err(DeploymentError::Unrunnable(problems)) = then else {
            panic!("`{bad}` was not refused: {then:?}")
        };
        assert!(
            problems.0.iter().any(|p| p.field == "name"),
            "`{bad}`: {problems:?}"
        );
    }
}
