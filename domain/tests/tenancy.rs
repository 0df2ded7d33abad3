//! Records made when the tenant was the project's *name* (docs/security/tenant-ids.md): a
//! `DeploymentRequested` with `tenant: acme` and the token's account, `cloud.project_id`, is
//! read as that id by every fold, the whole event's and the rebuild's lean decode alike, and by
//! the deployment's own state; a same-named project of another domain is another tenant.

use std::collections::BTreeMap;

use overture_domain::blueprint::parse;
use overture_domain::deployment::{Deployment, DeploymentState};
use overture_domain::projection::ProjectLabel;
use overture_domain::testing::events::envelopes;
use overture_domain::testing::folds::BothWays;
use overture_domain::testing::t;
use overture_events::{CloudAccount, DeploymentEvent as E, DeploymentId, Envelope};
use uuid::Uuid;

const OURS: &str = "5f2c0e7a9b1d4e3f8a6c2b0d9e7f1a3c";
const THEIRS: &str = "c81d4e2a7f3b4c5d9e0a1b2c3d4e5f60";

/// The account an older build recorded: the project's id and name, no domain.
fn old_account(project_id: &str) -> CloudAccount {
    CloudAccount {
        auth_url: "http://127.0.0.1:5000/identity/v3".into(),
        project_id: project_id.into(),
        project: "acme".into(),
        domain: String::new(),
        user: "acme".into(),
        endpoints: Vec::new(),
    }
}

/// A deployment of `acme` as an older build recorded it: the tenant is the project's name.
fn old_records(id: DeploymentId, project_id: &str) -> Vec<Envelope> {
    let blueprint = parse("name: app\nsteps:\n  app: { run: noop }\n")
        .expect("valid")
        .snapshot;
    let events = [
        E::DeploymentRequested {
            triggered_by: None,
            tenant: "acme".into(),
            requested_by: "acme".into(),
            trigger: "api".into(),
            source: "app.yaml".into(),
            blueprint,
            blueprint_hash: "h".into(),
            params: BTreeMap::new(),
            cloud: Some(old_account(project_id)),
            name: None,
        },
        E::ServiceRegistered {
            service: "app".into(),
            step: "app".into(),
            host: "app-1".into(),
            address: "10.0.0.9".into(),
            port: 8000,
        },
    ];
    let stamped: Vec<_> = (0..)
        .zip(events)
        .map(|(at, event)| (event, t(at)))
        .collect();
    envelopes(id, &stamped)
}

#[test]
fn an_old_record_keyed_by_name_is_read_as_its_recorded_project_id_by_every_fold() {
    let ours = DeploymentId::from_uuid(Uuid::now_v7());
    let theirs = DeploymentId::from_uuid(Uuid::now_v7());
    let records: Vec<Envelope> = old_records(ours, OURS)
        .into_iter()
        .chain(old_records(theirs, THEIRS))
        .collect();

    let mut folds = BothWays::default();
    for record in &records {
        folds.fold(record);
    }
    let BothWays { whole, lean, .. } = folds;
    assert_eq!(
        lean, whole,
        "the rebuild's fold agrees with the whole event's"
    );

    let view = &whole.deployments[&ours];
    assert_eq!(view.tenant, OURS);
    assert_eq!(
        view.project,
        Some(ProjectLabel {
            name: "acme".into(),
            domain: String::new(),
        }),
        "the name beside the id, for people; no domain was recorded"
    );
    assert_eq!(whole.deployments[&theirs].tenant, THEIRS);
    let tenants: Vec<&str> = whole.tenants.keys().map(String::as_str).collect();
    let mut expected = [OURS, THEIRS];
    expected.sort();
    assert_eq!(tenants, expected, "two tenants, none named `acme`");
    assert_eq!(whole.tenants[OURS].total, 1);

    let registered: Vec<DeploymentId> = whole
        .registry
        .service_instances(OURS)
        .into_iter()
        .map(|r| r.deployment)
        .collect();
    assert_eq!(registered, [ours], "the registry is keyed on the id");
    assert!(whole.registry.service_instances("acme").is_empty());
}

#[test]
fn the_deployment_keeps_its_recorded_tenant_for_its_seals_and_is_keyed_on_the_project_id() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let state = old_records(id, OURS)
        .into_iter()
        .map(|record| E::from_parts(&record.event_type, record.data).expect("decodes"))
        .fold(DeploymentState::default(), Deployment::apply);
    assert_eq!(state.tenant, "acme", "as recorded: seals are bound to it");
    assert_eq!(state.tenant_id(), OURS);

    // A record made without a token names no project: its tenant stays the name it was given.
    let mut local = old_records(id, OURS);
    local[0].data["cloud"] = serde_json::Value::Null;
    let local = E::from_parts(&local[0].event_type, local[0].data.clone()).expect("decodes");
    let state = Deployment::apply(DeploymentState::default(), local);
    assert_eq!(state.tenant_id(), "acme");
}
