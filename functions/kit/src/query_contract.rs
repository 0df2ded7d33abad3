//! What every query adapter must answer for the same deployments, so the embedded and the AWS
//! read sides cannot drift apart. An adapter's test appends [`ended`]'s and [`running`]'s events
//! to its log, folds them into its read models, and hands the queries to [`check`].

use std::collections::BTreeMap;

use overture_domain::blueprint::parse;
use overture_domain::projection::DeploymentStatus;
use overture_events::{DeploymentEvent, DeploymentId, Timestamp};

use crate::query::{DeploymentFilter, QueryDeployments};

/// Two deployments written for [`check`]: each with a tenant of its own, so tests sharing a
/// store do not see each other's.
#[derive(Clone, Debug)]
pub struct Written {
    /// A deployment whose one step succeeded, and which ended.
    pub ended: DeploymentId,
    /// Its tenant.
    pub ended_tenant: String,
    /// A deployment only requested, written after the other.
    pub running: DeploymentId,
    /// Its tenant.
    pub running_tenant: String,
}

/// A tenant name no other test uses.
pub fn fresh_tenant(prefix: &str) -> String {
    let unique = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}-{}", &unique[..12])
}

fn requested(tenant: &str) -> DeploymentEvent {
    DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: tenant.into(),
        requested_by: "ada".into(),
        trigger: "test".into(),
        source: "hello.yaml".into(),
        blueprint: parse("name: hello\nsteps:\n  build: { run: noop }\n")
            .expect("a valid blueprint")
            .snapshot,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

/// The events of a deployment of one step that ran once and succeeded.
pub fn ended(tenant: &str) -> Vec<DeploymentEvent> {
    vec![
        requested(tenant),
        DeploymentEvent::StepScheduled {
            step: "build".into(),
            attempt: 1,
            not_before: Timestamp::UNIX_EPOCH,
        },
        DeploymentEvent::StepStarted {
            step: "build".into(),
            attempt: 1,
            sandbox: "sandbox-1".into(),
            lease_until: None,
            fingerprint: None,
        },
        DeploymentEvent::StepSucceeded {
            step: "build".into(),
            attempt: 1,
            outputs: BTreeMap::new(),
            duration_ms: 10,
        },
        DeploymentEvent::DeploymentSucceeded {},
    ]
}

/// The events of a deployment only requested.
pub fn running(tenant: &str) -> Vec<DeploymentEvent> {
    vec![requested(tenant)]
}

/// Asks `queries` everything about `written` and checks the answers.
pub async fn check(queries: &dyn QueryDeployments, written: &Written) {
    let view = queries
        .deployment(written.ended)
        .await
        .expect("read")
        .expect("the ended deployment's view");
    assert_eq!(view.status, DeploymentStatus::Succeeded);
    assert_eq!(view.tenant, written.ended_tenant);
    assert_eq!(view.revision, 4);
    let unknown = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    assert!(queries.deployment(unknown).await.expect("read").is_none());

    let ids = |views: Vec<overture_domain::projection::DeploymentView>| {
        views.into_iter().map(|v| v.id).collect::<Vec<_>>()
    };
    let of = |tenant: &str, status| DeploymentFilter {
        tenant: Some(tenant.to_owned()),
        status,
    };
    let list =
        |filter: DeploymentFilter| async move { ids(queries.list(&filter).await.expect("list")) };
    assert_eq!(list(of(&written.ended_tenant, None)).await, [written.ended]);
    assert_eq!(
        list(of(&written.running_tenant, Some(DeploymentStatus::Running))).await,
        [written.running]
    );
    assert!(
        list(of(&written.ended_tenant, Some(DeploymentStatus::Running)))
            .await
            .is_empty()
    );
    let everything = list(DeploymentFilter::default()).await;
    let running_at = everything.iter().position(|id| *id == written.running);
    let ended_at = everything.iter().position(|id| *id == written.ended);
    assert!(
        matches!((running_at, ended_at), (Some(r), Some(e)) if r < e),
        "both listed, newest first: {everything:?}"
    );

    let tenants = queries.tenants().await.expect("tenants");
    let ended_tenant = tenants
        .iter()
        .find(|t| t.tenant == written.ended_tenant)
        .expect("the ended deployment's tenant");
    assert_eq!((ended_tenant.total, ended_tenant.succeeded), (1, 1));
    let running_tenant = tenants
        .iter()
        .find(|t| t.tenant == written.running_tenant)
        .expect("the running deployment's tenant");
    assert_eq!((running_tenant.total, running_tenant.running), (1, 1));
    let names: Vec<&str> = tenants.iter().map(|t| t.tenant.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "tenants by name");

    let events = queries.events(written.ended).await.expect("events");
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "DeploymentRequested",
            "StepScheduled",
            "StepStarted",
            "StepSucceeded",
            "DeploymentSucceeded"
        ]
    );
    assert!(events.iter().zip(0..).all(|(e, r)| e.revision == r));
    assert!(queries.events(unknown).await.expect("events").is_empty());
}
