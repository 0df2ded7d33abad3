//! Requesting a deployment: recorded once, with what was sealed; nothing before it.

use super::shop::*;

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
    given([requested()])
        .when(request)
        .then_error(DeploymentError::AlreadyRequested);
}

#[test]
fn commands_before_a_request_are_refused() {
    given([])
        .when(C::Advance { now: t(0) })
        .then_error(DeploymentError::NotRequested);
}
