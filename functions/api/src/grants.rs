//! The temporary grants of access deployments held, one row each. A bastion rule is shared
//! by every deployment that leases it: each holds a row of its own, and an open one names all
//! the rule's holders.

use overture_domain::projection::{DeploymentStatus, DeploymentView, GrantKind, GrantView};
use overture_events::{DeploymentId, Timestamp};
use serde::Serialize;
use utoipa::ToSchema;

/// A deployment holding an open lease on a bastion rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct Holder {
    /// The deployment.
    pub deployment: DeploymentId,
    /// Since when it holds the rule.
    #[schema(value_type = String, format = DateTime)]
    pub since: Timestamp,
}

/// One row of the grants ledger: a grant and the deployment that held it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Grant)]
pub struct GrantRow {
    /// The deployment.
    pub deployment: DeploymentId,
    /// Its tenant.
    pub tenant: String,
    /// Whether the deployment has ended: a grant still open then is a defect.
    pub deployment_ended: bool,
    /// The grant.
    #[serde(flatten)]
    pub grant: GrantView,
    /// For an open bastion rule: every deployment holding it now (this one too), oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
}

/// The grants of these deployments, oldest first; only open ones when `open_only`.
pub fn grant_rows(views: &[DeploymentView], open_only: bool) -> Vec<GrantRow> {
    let mut rows: Vec<GrantRow> = views
        .iter()
        .flat_map(|view| {
            view.grants.iter().map(|grant| GrantRow {
                deployment: view.id,
                tenant: view.tenant.clone(),
                deployment_ended: view.status != DeploymentStatus::Running,
                grant: grant.clone(),
                holders: Vec::new(),
            })
        })
        .filter(|row| !open_only || row.grant.is_open())
        .collect();
    rows.sort_by_key(|row| row.grant.opened_at);
    let holders_of = |rule: &str| -> Vec<Holder> {
        let mut holders: Vec<Holder> = views
            .iter()
            .flat_map(|view| {
                view.grants
                    .iter()
                    .filter(|g| g.kind == GrantKind::BastionRule && g.is_open())
                    .filter(|g| g.reference == rule)
                    .map(|g| Holder {
                        deployment: view.id,
                        since: g.opened_at,
                    })
            })
            .collect();
        holders.sort_by_key(|h| (h.since, h.deployment));
        holders
    };
    for row in &mut rows {
        if row.grant.kind == GrantKind::BastionRule && row.grant.is_open() {
            row.holders = holders_of(&row.grant.reference);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use overture_domain::projection::ReadModels;
    use overture_events::{DeploymentEvent as E, Envelope, Metadata};

    fn at(second: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + chrono::TimeDelta::seconds(1_800_000_000 + second)
    }

    /// A deployment of acme through the bastion's rule `rule-1`, granted at `granted`, and its
    /// lease closed (kept for `kept_for`) at `revoked` if given.
    fn through_the_bastion(
        models: &mut ReadModels,
        id: DeploymentId,
        granted: i64,
        revoked: Option<(i64, Vec<DeploymentId>)>,
    ) {
        let blueprint = overture_domain::blueprint::parse("name: a\nsteps:\n  s: { run: noop }\n")
            .expect("valid")
            .snapshot;
        let mut events = vec![
            (
                granted - 1,
                E::DeploymentRequested {
                    triggered_by: None,
                    tenant: "acme".into(),
                    requested_by: "ada".into(),
                    trigger: "cli".into(),
                    source: "a.yaml".into(),
                    blueprint,
                    blueprint_hash: "h".into(),
                    params: Default::default(),
                    cloud: None,
                    name: None,
                },
            ),
            (
                granted,
                E::BastionAccessGranted {
                    rule: "rule-1".into(),
                    security_group: "sg".into(),
                    bastion: "10.1.0.10:22".into(),
                    source: "10.0.0.1/32".into(),
                    port: 22,
                },
            ),
        ];
        if let Some((second, kept_for)) = revoked {
            events.push((
                second,
                E::BastionAccessRevoked {
                    rule: "rule-1".into(),
                    kept_for,
                },
            ));
        }
        for (revision, (second, event)) in events.into_iter().enumerate() {
            let envelope = Envelope {
                stream: id.stream(),
                revision: revision as u64,
                id: uuid::Uuid::new_v4(),
                event_type: event.event_type().into(),
                data: event.data(),
                metadata: Metadata {
                    tenant: "acme".into(),
                    actor: "test".into(),
                    correlation_id: id.uuid(),
                    causation_id: id.uuid(),
                    recorded_at: at(second),
                    previous: None,
                    hash: None,
                },
            };
            models.apply(&envelope).expect("folds");
        }
    }

    #[test]
    fn an_open_shared_rule_names_every_holder_and_a_closed_lease_for_whom_the_rule_stayed() {
        let (longer, shorter) = (
            DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            DeploymentId::from_uuid(uuid::Uuid::now_v7()),
        );
        let mut models = ReadModels::default();
        through_the_bastion(&mut models, longer, 10, None);
        through_the_bastion(&mut models, shorter, 20, None);
        let views: Vec<DeploymentView> = models.deployments.values().cloned().collect();
        let rules: Vec<GrantRow> = grant_rows(&views, true)
            .into_iter()
            .filter(|row| row.grant.kind == GrantKind::BastionRule)
            .collect();
        let both = vec![
            Holder {
                deployment: longer,
                since: at(10),
            },
            Holder {
                deployment: shorter,
                since: at(20),
            },
        ];
        assert_eq!(rules.len(), 2, "a row per holder");
        assert!(rules.iter().all(|row| row.holders == both), "{rules:?}");

        let mut models = ReadModels::default();
        through_the_bastion(&mut models, longer, 10, None);
        through_the_bastion(&mut models, shorter, 20, Some((30, vec![longer])));
        let views: Vec<DeploymentView> = models.deployments.values().cloned().collect();
        let rows = grant_rows(&views, false);
        let closed = rows
            .iter()
            .find(|row| row.deployment == shorter && row.grant.kind == GrantKind::BastionRule)
            .expect("the shorter's row");
        assert_eq!(closed.grant.kept_for, vec![longer]);
        assert!(closed.holders.is_empty(), "a closed lease holds nothing");
        let open = rows
            .iter()
            .find(|row| row.deployment == longer && row.grant.kind == GrantKind::BastionRule)
            .expect("the longer's row");
        assert_eq!(
            open.holders,
            vec![Holder {
                deployment: longer,
                since: at(10)
            }]
        );
    }
}
