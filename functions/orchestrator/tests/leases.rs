//! Closing the bastion at a deployment's end, on in-memory fakes: the deployment closes only
//! its own lease, and the rule is deleted only by the last deployment holding it.

mod support;

use std::collections::BTreeSet;
use std::sync::Mutex;

use async_trait::async_trait;
use overture_domain::deployment::{BastionAccess, DeploymentState};
use overture_domain::testing::events::{blueprint, requested, started_until, succeeded};
use overture_events::{CloudAccount, DeploymentEvent as E, DeploymentId};
use overture_kit::leases::{
    revoke_leased, revoke_unrecorded, LeaseBastionRules, Leased, MemoryLeases, RuleKey,
};
use overture_kit::memory::MemoryLog;
use overture_orchestrator::{
    orchestrate, OrchestratorPorts, Revocation, RevokeAccess, Since, WorkError,
};
use support::{at, record, scheduled_at, FixedClock};

const RULE: &str = "rule-1";

fn cloud() -> CloudAccount {
    CloudAccount {
        auth_url: "http://127.0.0.1:5000/identity/v3".into(),
        project_id: "p-acme".into(),
        project: "acme".into(),
        domain: "Default".into(),
        user: "ada".into(),
        endpoints: vec![],
    }
}

fn key() -> RuleKey {
    RuleKey {
        cloud: cloud().auth_url,
        security_group: "sg-bastion".into(),
        source: "10.0.0.1/32".into(),
        port: 22,
    }
}

/// The bastion's security group, with the engine's rule while it exists, behind the leases.
struct LeasedBastion {
    leases: MemoryLeases,
    rules: Mutex<BTreeSet<String>>,
}

impl LeasedBastion {
    /// The bastion with the engine's rule, each of `deployments` holding its own lease on it.
    async fn leased_to(deployments: &[DeploymentId]) -> Self {
        let bastion = LeasedBastion {
            leases: MemoryLeases::new(),
            rules: Mutex::new(BTreeSet::from([RULE.to_owned()])),
        };
        for deployment in deployments {
            bastion
                .leases
                .acquire(&key(), *deployment)
                .await
                .expect("leased");
        }
        bastion
    }

    /// Moves `deployment` on through this bastion, as at its end.
    async fn orchestrate(&self, log: &MemoryLog, deployment: DeploymentId) -> DeploymentState {
        let work = support::queues_apart();
        let clock = FixedClock(at("10:00"));
        let ports = OrchestratorPorts {
            access: self,
            ..support::ports(log, &work, &clock)
        };
        orchestrate(deployment, uuid::Uuid::now_v7(), Since::Unknown, &ports)
            .await
            .expect("moved on")
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

#[async_trait]
impl RevokeAccess for LeasedBastion {
    async fn revoke(
        &self,
        deployment: DeploymentId,
        _: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<Revocation, WorkError> {
        let delete = async {
            self.rules.lock().expect("rules").remove(&access.rule);
            Ok::<_, Failed>(())
        };
        revoke_leased(&self.leases, &key(), deployment, delete)
            .await
            .map_err(|error| match error {
                Leased::Lease(lease) => WorkError::unavailable(lease),
                Leased::Cloud(cloud) => WorkError::unavailable(cloud),
            })
    }

    async fn revoke_unrecorded(
        &self,
        deployment: DeploymentId,
        _: &CloudAccount,
        recorded: Option<&BastionAccess>,
    ) -> Result<usize, WorkError> {
        let recorded = recorded.map(|_| key());
        // The fake's one rule is the one every lease here is on.
        let delete = |_| async {
            self.rules.lock().expect("rules").remove(RULE);
            Ok::<_, Failed>(())
        };
        revoke_unrecorded(&self.leases, deployment, recorded.as_ref(), delete)
            .await
            .map(|closed| closed.len())
            .map_err(|error| match error {
                Leased::Lease(lease) => WorkError::unavailable(lease),
                Leased::Cloud(cloud) => WorkError::unavailable(cloud),
            })
    }
}

/// A deployment of one step through the bastion, which has just succeeded.
async fn ended_through_the_bastion(log: &MemoryLog, deployment: DeploymentId) {
    let mut requested = requested(
        "x.yaml",
        blueprint("name: x\nsteps:\n  configure: { run: noop }\n"),
    );
    if let E::DeploymentRequested { cloud: on, .. } = &mut requested {
        *on = Some(cloud());
    }
    let history = vec![
        requested,
        scheduled_at("configure", 1, at("09:50")),
        started_until("configure", 1, at("11:00")),
        E::BastionAccessGranted {
            rule: RULE.into(),
            security_group: "sg-bastion".into(),
            bastion: "10.1.0.10:22".into(),
            source: "10.0.0.1/32".into(),
            port: 22,
        },
        succeeded("configure", 1),
    ];
    record(log, deployment, "runner", history).await;
}

fn revoked(log: &MemoryLog, deployment: DeploymentId) -> Vec<E> {
    log.events(deployment)
        .into_iter()
        .filter(|e| matches!(e, E::BastionAccessRevoked { .. }))
        .collect()
}

#[tokio::test]
async fn the_first_deployment_to_end_keeps_the_rule_for_the_other_and_the_last_deletes_it() {
    let (shorter, longer) = (
        DeploymentId::from_uuid(uuid::Uuid::from_u128(1)),
        DeploymentId::from_uuid(uuid::Uuid::from_u128(2)),
    );
    // Both deployments were granted the identical rule, each with its own lease.
    let bastion = LeasedBastion::leased_to(&[shorter, longer]).await;
    let log = MemoryLog::new(at("10:00"));
    ended_through_the_bastion(&log, shorter).await;
    let state = bastion.orchestrate(&log, shorter).await;
    assert!(state.secrets_purged, "the shorter deployment is over");
    assert_eq!(
        revoked(&log, shorter),
        vec![E::BastionAccessRevoked {
            rule: RULE.into(),
            kept_for: vec![longer],
        }]
    );
    assert!(
        bastion.rules.lock().expect("rules").contains(RULE),
        "the longer deployment still goes through the rule"
    );

    ended_through_the_bastion(&log, longer).await;
    bastion.orchestrate(&log, longer).await;
    assert_eq!(
        revoked(&log, longer),
        vec![E::BastionAccessRevoked {
            rule: RULE.into(),
            kept_for: vec![],
        }]
    );
    assert!(
        bastion.rules.lock().expect("rules").is_empty(),
        "no rule is left"
    );
}

/// A deployment of one step through the bastion, with its token sealed, whose engine opened a
/// lease on the rule and died before `BastionAccessGranted` was recorded; the deployment was
/// then cancelled, so the step is not tried again.
async fn failed_with_an_unrecorded_grant(log: &MemoryLog, deployment: DeploymentId) {
    let mut requested = requested(
        "x.yaml",
        blueprint("name: x\nsteps:\n  configure: { run: noop }\n"),
    );
    if let E::DeploymentRequested { cloud: on, .. } = &mut requested {
        *on = Some(cloud());
    }
    let history = vec![
        requested,
        E::CredentialsSealed {
            seal: "seal-1".into(),
            secrets: vec![],
            ssh_public_key: None,
            token: true,
        },
        scheduled_at("configure", 1, at("09:50")),
        started_until("configure", 1, at("11:00")),
    ];
    record(log, deployment, "runner", history).await;
    let cause = overture_kit::Cause::new("ada", deployment, uuid::Uuid::now_v7());
    overture_kit::execute(log, deployment, "", &cause, |_| {
        overture_domain::DeploymentCommand::Cancel {
            requested_by: "ada".into(),
            reason: "not today".into(),
        }
    })
    .await
    .expect("recorded")
    .expect("cancelled");
}

#[tokio::test]
async fn a_lease_opened_with_no_grant_recorded_is_closed_at_the_deployments_end() {
    let deployment = DeploymentId::from_uuid(uuid::Uuid::from_u128(7));
    let bastion = LeasedBastion::leased_to(&[deployment]).await;
    let log = MemoryLog::new(at("10:00"));
    failed_with_an_unrecorded_grant(&log, deployment).await;
    let state = bastion.orchestrate(&log, deployment).await;

    assert!(state.is_finished(), "{:?}", state.phase);
    assert!(state.secrets_purged);
    assert_eq!(
        bastion.leases.held_by(deployment).await.expect("held"),
        vec![],
        "the lease is closed"
    );
    assert!(
        bastion.rules.lock().expect("rules").is_empty(),
        "and the rule, whose last lease it was, deleted"
    );
}
