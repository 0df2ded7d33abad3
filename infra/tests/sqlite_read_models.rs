//! The read-model store contract ([`overture_projector::contract`]) on SQLite: two clients are
//! two handles on one database file, as two processes would hold.

use overture_infra::sqlite::{Database, SqliteReadModels};

async fn clients() -> (SqliteReadModels, SqliteReadModels) {
    // Kept for the whole test run: every test has deployments and a tenant of its own in it.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let path = dir.path().join("overture.db");
    let a = Database::open(&path).await.expect("database opens");
    let b = Database::open(&path).await.expect("database opens");
    (SqliteReadModels::new(a), SqliteReadModels::new(b))
}

overture_projector::read_model_contract_tests!(clients());

mod rebuild {
    use std::collections::BTreeMap;

    use overture_domain::blueprint;
    use overture_domain::projection::DeploymentStatus;
    use overture_events::{DeploymentEvent, DeploymentId, Metadata, Timestamp};
    use overture_infra::sqlite::read_models::LogChanges;
    use overture_infra::sqlite::{
        Database, EventLog, ExpectedRevision, ListFilter, NewEvent, SqliteReadModels,
    };
    use uuid::Uuid;

    fn new_event(tenant: &str, seconds: i64, event: DeploymentEvent) -> NewEvent {
        NewEvent {
            id: Uuid::now_v7(),
            event_type: event.event_type().into(),
            data: event.data(),
            metadata: Metadata {
                tenant: tenant.into(),
                actor: "tester".into(),
                correlation_id: Uuid::now_v7(),
                causation_id: Uuid::now_v7(),
                recorded_at: Timestamp::UNIX_EPOCH + chrono::TimeDelta::seconds(seconds),
            },
        }
    }

    fn events(tenant: &str, succeeds: bool) -> Vec<DeploymentEvent> {
        let blueprint = blueprint::parse(
            "name: app\nsteps:\n  c: { run: noop }\n  a: { run: noop }\n  b: { run: noop }\n",
        )
        .map(|parsed| parsed.snapshot)
        .unwrap_or_else(|problems| panic!("a valid blueprint: {problems}"));
        let mut events = vec![DeploymentEvent::DeploymentRequested {
            triggered_by: None,
            tenant: tenant.into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "app.yaml".into(),
            blueprint,
            blueprint_hash: "0".repeat(64),
            params: BTreeMap::new(),
            cloud: None,
        }];
        for step in ["c", "a", "b"] {
            events.push(DeploymentEvent::StepScheduled {
                step: step.into(),
                attempt: 1,
                not_before: Timestamp::UNIX_EPOCH,
            });
            events.push(DeploymentEvent::StepStarted {
                step: step.into(),
                attempt: 1,
                sandbox: "s".into(),
                lease_until: None,
            });
            events.push(DeploymentEvent::StepSucceeded {
                step: step.into(),
                attempt: 1,
                outputs: [("k".to_owned(), step.to_owned())].into(),
                duration_ms: 1,
            });
        }
        events.push(if succeeds {
            DeploymentEvent::DeploymentSucceeded {}
        } else {
            DeploymentEvent::DeploymentFailed {
                reason: "no".into(),
            }
        });
        events
    }

    /// Rebuilding from a log whose streams interleave, in batches that cut through every
    /// stream, through the lean reader and through the log's own reading, gives the views and
    /// summaries a fold of the whole log in memory gives.
    #[tokio::test]
    async fn a_rebuild_in_small_batches_of_interleaved_streams_matches_the_log() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("overture.db");
        let db = Database::open(&path).await.expect("database opens");
        let log = EventLog::new(db.clone());
        let store = SqliteReadModels::new(db);
        let streams: Vec<(DeploymentId, &str, Vec<DeploymentEvent>)> = (0..5)
            .map(|i| {
                let tenant = if i % 2 == 0 { "acme" } else { "globex" };
                (
                    DeploymentId::from_uuid(Uuid::now_v7()),
                    tenant,
                    events(tenant, i != 3),
                )
            })
            .collect();
        let mut appended = 0u64;
        for revision in 0..streams[0].2.len() {
            for (id, tenant, events) in &streams {
                let expected = match revision {
                    0 => ExpectedRevision::NoStream,
                    r => ExpectedRevision::Exact(r as u64 - 1),
                };
                let event = new_event(tenant, revision as i64, events[revision].clone());
                log.append(&id.stream(), expected, vec![event])
                    .await
                    .expect("appended");
                appended += 1;
            }
        }

        let reader = LogChanges::new(Database::open(&path).await.expect("database opens"));
        for batch in [2, 7] {
            let folded = overture_projector::rebuild(&reader, &store, batch)
                .await
                .expect("rebuilt");
            assert_eq!(folded, appended);
            let differences = overture_projector::check(&log, &store, 1000)
                .await
                .expect("checked");
            assert!(differences.is_empty(), "{differences:?}");
        }
        let folded = overture_projector::rebuild(&log, &store, 3)
            .await
            .expect("rebuilt");
        assert_eq!(folded, appended);
        let differences = overture_projector::check(&log, &store, 1000)
            .await
            .expect("checked");
        assert!(differences.is_empty(), "{differences:?}");

        let views = store.list(ListFilter::default()).await.expect("listed");
        assert_eq!(views.len(), 5);
        for view in &views {
            let names: Vec<&str> = view.steps.keys().map(String::as_str).collect();
            assert_eq!(names, ["c", "a", "b"], "in blueprint order");
        }
        let failed = views
            .iter()
            .filter(|view| view.status == DeploymentStatus::Failed)
            .count();
        assert_eq!(failed, 1);
        let tenants = store.tenants().await.expect("tenants");
        let totals: Vec<(&str, u64, u64)> = tenants
            .iter()
            .map(|t| (t.tenant.as_str(), t.total, t.succeeded))
            .collect();
        assert_eq!(totals, [("acme", 3, 3), ("globex", 2, 1)]);
    }
}
