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
