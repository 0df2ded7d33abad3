//! The DynamoDB read models against the local AWS emulator: the read-model store contract that
//! the SQLite read models keep too, and reads that follow every page.

mod support;

use std::collections::BTreeSet;

use aws_sdk_dynamodb::Client;
use overture_aws::dynamodb::MAX_ITEM_BYTES;
use overture_aws::read_models::{create_read_model_tables, DynamoReadModels};
use overture_domain::projection::{DeploymentView, TenantDelta};
use overture_domain::registry::Registry;
use overture_events::DeploymentId;
use overture_projector::{DeploymentViews, ViewError};

const DEPLOYMENTS: &str = "overture-deployments";
const TENANTS: &str = "overture-tenants";

/// A client of its own, as a separate Lambda would have.
async fn client() -> DynamoReadModels {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = Client::new(&config);
    create_read_model_tables(&client, DEPLOYMENTS, TENANTS)
        .await
        .expect("the read-model tables");
    DynamoReadModels::new(client, DEPLOYMENTS, TENANTS)
}

async fn clients() -> (DynamoReadModels, DynamoReadModels) {
    (client().await, client().await)
}

overture_projector::read_model_contract_tests!(clients());

/// Every step of a view: what saving a new view writes.
fn all_steps(view: &DeploymentView) -> BTreeSet<String> {
    view.steps.keys().cloned().collect()
}

/// A view of `tenant`'s deployment at revision 0 whose step output takes about `bytes`.
fn large_view(tenant: &str, bytes: usize) -> DeploymentView {
    let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let blob: String = (0..bytes)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    serde_json::from_value(serde_json::json!({
        "id": id,
        "tenant": tenant,
        "blueprint": "large",
        "status": "running",
        "steps": { "a": { "status": "succeeded", "attempts": 1, "outputs": { "blob": blob } } },
        "started_at": "2027-01-15T08:00:00Z",
        "finished_at": null,
        "revision": 0,
    }))
    .expect("a deployment view")
}

#[tokio::test]
async fn deployments_over_a_megabyte_list_whole_and_their_tenant_counts_them() {
    let store = client().await;
    let tenant = format!("large-{}", uuid::Uuid::now_v7());
    let delta = TenantDelta {
        running: 1,
        total: 1,
        ..TenantDelta::default()
    };
    // A scan page holds at most 1 MB: fourteen views of 100 KB take two pages or more.
    let mut saved = Vec::new();
    for _ in 0..14 {
        let view = large_view(&tenant, 100 * 1024);
        store
            .save(&view, None, &delta, &all_steps(&view), &Registry::default())
            .await
            .expect("saved");
        saved.push(view.id);
    }
    let listed: Vec<DeploymentId> = store
        .deployments(Some(&tenant))
        .await
        .expect("listed")
        .iter()
        .map(|view| view.id)
        .collect();
    saved.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, saved);
    let tenants = store.tenants().await.expect("listed");
    let summary = tenants
        .iter()
        .find(|t| t.tenant == tenant)
        .expect("the tenant is listed");
    assert_eq!((summary.running, summary.total), (14, 14));
}

#[tokio::test]
async fn a_view_beyond_one_item_is_refused_and_stores_nothing() {
    let store = client().await;
    let view = large_view("acme", MAX_ITEM_BYTES);
    let refused = store
        .save(
            &view,
            None,
            &TenantDelta::default(),
            &all_steps(&view),
            &Registry::default(),
        )
        .await;
    assert!(
        matches!(&refused, Err(error @ ViewError::TooLarge { .. }) if !error.is_retryable()),
        "{refused:?}"
    );
    assert_eq!(store.view(view.id).await.expect("loaded"), None);
}

#[tokio::test]
async fn a_tenants_list_holds_all_its_deployments_newest_first_and_no_one_elses() {
    let store = client().await;
    let tenant = format!("many-{}", uuid::Uuid::now_v7());
    let neighbour = format!("neighbour-{}", uuid::Uuid::now_v7());
    let delta = TenantDelta {
        running: 1,
        total: 1,
        ..TenantDelta::default()
    };
    let view = |tenant: &str, minute: u32| -> DeploymentView {
        serde_json::from_value(serde_json::json!({
            "id": DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            "tenant": tenant,
            "blueprint": "many",
            "status": "running",
            "steps": {},
            "started_at": format!("2027-01-15T{:02}:{:02}:00Z", minute / 60, minute % 60),
            "finished_at": null,
            "revision": 0,
        }))
        .expect("a deployment view")
    };
    // More than a page of keys, saved in no particular order of start.
    let mut saved = Vec::new();
    for n in 0..130u32 {
        let view = view(&tenant, (n * 37) % 130);
        store
            .save(&view, None, &delta, &all_steps(&view), &Registry::default())
            .await
            .expect("saved");
        saved.push(view);
    }
    let other = view(&neighbour, 5);
    store
        .save(
            &other,
            None,
            &delta,
            &all_steps(&other),
            &Registry::default(),
        )
        .await
        .expect("saved");

    // Read by a client that names itself, so that the emulator's counts tell its requests.
    let app = format!("list-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let reader = DynamoReadModels::new(
        Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&config)
                .app_name(aws_config::AppName::new(app.clone()).expect("an app name"))
                .build(),
        ),
        DEPLOYMENTS,
        TENANTS,
    );
    let listed = reader.deployments(Some(&tenant)).await.expect("listed");
    saved.sort_by_key(|view| std::cmp::Reverse((view.started_at, view.id)));
    assert_eq!(listed, saved);
    // Through the tenant's index and each deployment's own items, not by reading every
    // tenant's deployments.
    let counts: serde_json::Value =
        reqwest::get(format!("{}/overture/requests", support::emulator()))
            .await
            .expect("the emulator's counts")
            .json()
            .await
            .expect("as JSON");
    let asked = &counts["by_app"][&app]["operations"];
    assert_eq!(asked["dynamodb:Scan"], serde_json::Value::Null, "{asked}");
    assert_eq!(asked["dynamodb:Query"], 1 + 130, "{asked}");
    let everyone = store.deployments(None).await.expect("listed");
    assert!(everyone.iter().any(|view| view.tenant == neighbour));
}

/// A new deployment of more steps than one transaction holds is saved whole, its steps in
/// blueprint order; a later save of one step leaves the others as they were.
#[tokio::test]
async fn a_deployment_of_many_steps_is_saved_in_order_and_one_step_at_a_time() {
    let store = client().await;
    let tenant = format!("wide-{}", uuid::Uuid::now_v7());
    let steps: serde_json::Map<String, serde_json::Value> = (0..250)
        .map(|i| {
            let name = format!("s{:03}", (i * 7) % 250);
            (
                name,
                serde_json::json!({ "status": "pending", "attempts": 0 }),
            )
        })
        .collect();
    let mut view: DeploymentView = serde_json::from_value(serde_json::json!({
        "id": DeploymentId::from_uuid(uuid::Uuid::now_v7()),
        "tenant": tenant,
        "blueprint": "wide",
        "status": "running",
        "steps": steps,
        "started_at": "2027-01-15T08:00:00Z",
        "finished_at": null,
        "revision": 0,
    }))
    .expect("a deployment view");
    // serde_json's map keeps keys sorted: give the steps an order that is not the names'.
    view.steps.reverse();
    store
        .save(
            &view,
            None,
            &TenantDelta::default(),
            &all_steps(&view),
            &Registry::default(),
        )
        .await
        .expect("saved");
    assert_eq!(
        store.view(view.id).await.expect("loaded").as_ref(),
        Some(&view)
    );

    let mut changed = view.clone();
    changed.revision = 1;
    let name = changed.steps.keys().nth(100).expect("a step").clone();
    changed.steps[&name].attempts = 1;
    let one = BTreeSet::from([name.clone()]);
    store
        .save(
            &changed,
            Some(0),
            &TenantDelta::default(),
            &one,
            &Registry::default(),
        )
        .await
        .expect("saved");
    let partial = store
        .view_of_steps(view.id, &one)
        .await
        .expect("loaded")
        .expect("a view");
    assert_eq!(partial.steps.len(), 1);
    assert_eq!(partial.steps[&name].attempts, 1);
    assert_eq!(store.view(view.id).await.expect("loaded"), Some(changed));
}
