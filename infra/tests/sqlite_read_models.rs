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
    use overture_kit::registry::ReadServiceRegistry;
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
                previous: None,
                hash: None,
            },
        }
    }

    fn events(tenant: &str, succeeds: bool) -> Vec<DeploymentEvent> {
        let blueprint = blueprint::parse(
            "name: app\nsteps:\n  c: { run: noop }\n  a: { run: noop, requires: [{ service: db }] }\n  b: { run: noop, watch: [app] }\n",
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
            name: None,
        }];
        for step in ["c", "a", "b"] {
            if !succeeds && step == "a" {
                // A first attempt that fails and is retried: an error class, attempts 2.
                events.push(DeploymentEvent::StepStarted {
                    step: step.into(),
                    attempt: 1,
                    sandbox: "s".into(),
                    lease_until: None,
                    fingerprint: None,
                });
                events.push(DeploymentEvent::StepAttemptFailed {
                    step: step.into(),
                    attempt: 1,
                    error_class: overture_events::ErrorClass::BootstrapTimeout,
                    exit_code: Some(3),
                    message: "timed out".into(),
                    duration_ms: 5,
                });
                events.push(DeploymentEvent::StepRetryScheduled {
                    step: step.into(),
                    attempt: 1,
                    next_attempt: 2,
                    delay_ms: 10,
                    not_before: Timestamp::UNIX_EPOCH,
                });
            }
            events.push(DeploymentEvent::StepScheduled {
                step: step.into(),
                attempt: 1,
                not_before: Timestamp::UNIX_EPOCH,
            });
            let attempt = if !succeeds && step == "a" { 2 } else { 1 };
            events.push(DeploymentEvent::StepStarted {
                step: step.into(),
                attempt,
                sandbox: "s".into(),
                lease_until: None,
                fingerprint: None,
            });
            events.push(DeploymentEvent::StepSucceeded {
                step: step.into(),
                attempt,
                outputs: [("k".to_owned(), step.to_owned())].into(),
                duration_ms: 1,
            });
            // Step `c` registers two instances of `app`; once `a` succeeded, one leaves.
            let instance = |address: &str| (address.to_owned(), format!("c-{address}"));
            match step {
                "c" => {
                    for (address, host) in [instance("10.0.0.1"), instance("10.0.0.2")] {
                        events.push(DeploymentEvent::ServiceRegistered {
                            service: "app".into(),
                            step: "c".into(),
                            host,
                            address,
                            port: 8000,
                        });
                    }
                }
                "a" => {
                    let (address, host) = instance("10.0.0.1");
                    events.push(DeploymentEvent::ServiceDeregistered {
                        service: "app".into(),
                        step: "c".into(),
                        host,
                        address,
                        port: 8000,
                        reason: "replaced".into(),
                    });
                }
                _ => {}
            }
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
        let longest = streams.iter().map(|s| s.2.len()).max().unwrap_or(0);
        for revision in 0..longest {
            for (id, tenant, events) in &streams {
                if revision >= events.len() {
                    continue;
                }
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
        // The service registry was rebuilt too: one instance left of each deployment.
        let members = |tenant| {
            let store = store.clone();
            async move {
                store
                    .service_instances(tenant)
                    .await
                    .expect("the registry")
                    .into_iter()
                    .map(|r| r.instance.member())
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(members("acme").await, ["10.0.0.2:8000"; 3]);
        assert_eq!(members("globex").await, ["10.0.0.2:8000"; 2]);
    }

    /// Always empty: records are delivered in order, so the projector never asks for more.
    struct NoGaps;

    #[async_trait::async_trait]
    impl overture_kit::ReadStream for NoGaps {
        async fn read_stream(
            &self,
            _: DeploymentId,
            _: u64,
        ) -> Result<Vec<overture_events::Envelope>, overture_kit::LogError> {
            Ok(Vec::new())
        }
    }

    /// The views a running engine stores record by record (the per-stream projector) and the
    /// views a rebuild stores batch by batch are the same, step rows and summaries alike.
    #[tokio::test]
    async fn a_rebuild_stores_what_projecting_record_by_record_stores() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("overture.db");
        let db = Database::open(&path).await.expect("database opens");
        let log = EventLog::new(db.clone());
        for i in 0..4 {
            let tenant = if i % 2 == 0 { "acme" } else { "globex" };
            let id = DeploymentId::from_uuid(Uuid::now_v7());
            let events: Vec<NewEvent> = events(tenant, i != 1)
                .into_iter()
                .enumerate()
                .map(|(second, event)| new_event(tenant, second as i64, event))
                .collect();
            log.append(&id.stream(), ExpectedRevision::NoStream, events)
                .await
                .expect("appended");
        }
        let entries = log.read_all(0, 10_000).await.expect("the log");

        let engine_dir = tempfile::tempdir().expect("temp dir");
        let engine = SqliteReadModels::new(
            Database::open(engine_dir.path().join("overture.db"))
                .await
                .expect("database opens"),
        );
        for entry in &entries {
            let deployment = DeploymentId::from_stream(&entry.envelope.stream).expect("an id");
            let records = std::slice::from_ref(&entry.envelope);
            overture_projector::project_stream(deployment, records, &NoGaps, &engine)
                .await
                .expect("projected");
        }
        let store = SqliteReadModels::new(db);
        let reader = LogChanges::new(Database::open(&path).await.expect("database opens"));
        overture_projector::rebuild(&reader, &store, 5)
            .await
            .expect("rebuilt");

        let rebuilt = store.list(ListFilter::default()).await.expect("listed");
        assert_eq!(rebuilt.len(), 4);
        assert_eq!(
            rebuilt,
            engine.list(ListFilter::default()).await.expect("listed")
        );
        assert_eq!(
            store.tenants().await.expect("tenants"),
            engine.tenants().await.expect("tenants")
        );
        for tenant in ["acme", "globex"] {
            let instances = store.service_instances(tenant).await.expect("the registry");
            assert_eq!(instances.len(), 2, "{tenant}");
            assert_eq!(
                instances,
                engine
                    .service_instances(tenant)
                    .await
                    .expect("the registry")
            );
            // Every deployment watches `app`; those that succeeded and the running none.
            assert_eq!(
                store
                    .interested_deployments(tenant, "app")
                    .await
                    .expect("the registry"),
                engine
                    .interested_deployments(tenant, "app")
                    .await
                    .expect("the registry"),
            );
        }
        assert_eq!(
            store
                .interested_deployments("globex", "app")
                .await
                .expect("the registry")
                .len(),
            1,
            "the one that succeeded"
        );
        let retried = rebuilt
            .iter()
            .find(|view| view.status == DeploymentStatus::Failed)
            .and_then(|view| view.steps.get("a"))
            .map(|step| (step.attempts, step.error_class));
        assert_eq!(
            retried,
            Some((2, Some(overture_events::ErrorClass::BootstrapTimeout)))
        );
    }
}
