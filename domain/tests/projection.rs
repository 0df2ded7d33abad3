//! The read models as folds: a deployment's status, a tenant's summary, idempotence.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use overture_domain::projection::{
    steps_of, Change, DeploymentStatus, Folding, ReadModels, Touched,
};
use overture_domain::testing::events::blueprint;
use overture_domain::testing::folds::BothWays;
use overture_domain::StepStatus;
use overture_events::{
    BlueprintSnapshot, DeploymentEvent as E, DeploymentId, Envelope, ErrorClass, Metadata,
};
use uuid::Uuid;

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(1_800_000_000 + seconds)
}

fn envelope(id: DeploymentId, tenant: &str, revision: u64, event: E) -> Envelope {
    Envelope {
        stream: id.stream(),
        revision,
        id: Uuid::new_v4(),
        event_type: event.event_type().into(),
        data: event.data(),
        metadata: Metadata {
            tenant: tenant.into(),
            actor: "test".into(),
            correlation_id: id.uuid(),
            causation_id: id.uuid(),
            recorded_at: at(revision as i64),
            previous: None,
            hash: None,
        },
    }
}

/// A deployment of the blueprint for `tenant`, requested by `u` from the CLI, read from `f`.
fn requested(tenant: &str, blueprint: BlueprintSnapshot) -> E {
    E::DeploymentRequested {
        triggered_by: None,
        tenant: tenant.into(),
        requested_by: "u".into(),
        trigger: "cli".into(),
        source: "f".into(),
        blueprint,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

/// The bastion's rule `rule-1`, opened for 10.1.0.1 to 10.1.0.10:22.
fn rule_1_granted() -> E {
    E::BastionAccessGranted {
        rule: "rule-1".into(),
        security_group: "sg-1".into(),
        bastion: "10.1.0.10".into(),
        source: "10.1.0.1".into(),
        port: 22,
    }
}

/// The views after folding `events` of one deployment of `acme`, at revisions from 0.
fn folded(id: DeploymentId, events: impl IntoIterator<Item = E>) -> ReadModels {
    let mut models = ReadModels::default();
    for (revision, event) in (0..).zip(events) {
        models
            .apply(&envelope(id, "acme", revision, event))
            .expect("folds");
    }
    models
}

fn history(id: DeploymentId, tenant: &str, ending: E) -> Vec<Envelope> {
    let blueprint = blueprint("name: app\nsteps:\n  a: { run: noop }\n  b: { run: noop }\n");
    let events = vec![
        requested(tenant, blueprint),
        E::StepScheduled {
            step: "a".into(),
            attempt: 1,
            not_before: at(0),
        },
        E::StepScheduled {
            step: "b".into(),
            attempt: 1,
            not_before: at(0),
        },
        E::StepStarted {
            step: "a".into(),
            attempt: 1,
            sandbox: "s".into(),
            lease_until: None,
            fingerprint: None,
        },
        E::StepStarted {
            step: "b".into(),
            attempt: 1,
            sandbox: "s".into(),
            lease_until: None,
            fingerprint: None,
        },
        E::StepSucceeded {
            step: "a".into(),
            attempt: 1,
            outputs: [("k".to_owned(), "v".to_owned())].into(),
            duration_ms: 5,
        },
        E::StepAttemptFailed {
            step: "b".into(),
            attempt: 1,
            error_class: ErrorClass::StepFailed,
            exit_code: Some(3),
            message: "m".into(),
            duration_ms: 5,
        },
        E::StepFailed {
            step: "b".into(),
            attempts: 1,
            error_class: ErrorClass::StepFailed,
        },
        E::SecretsPurged {},
        ending,
    ];
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| envelope(id, tenant, i as u64, e))
        .collect()
}

#[test]
fn a_deployment_view_follows_its_steps_and_ending() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let mut models = ReadModels::default();
    for e in history(
        id,
        "acme",
        E::DeploymentFailed {
            reason: "step `b` failed".into(),
        },
    ) {
        models.apply(&e).expect("folds");
    }
    let view = &models.deployments[&id];
    assert_eq!(view.status, DeploymentStatus::Failed);
    assert_eq!(view.blueprint, "app");
    assert_eq!(view.steps["a"].status, StepStatus::Succeeded);
    assert_eq!(view.steps["a"].outputs["k"], "v");
    assert_eq!(view.steps["b"].status, StepStatus::Failed);
    assert_eq!(view.steps["b"].attempts, 1);
    assert_eq!(view.steps["b"].error_class, Some(ErrorClass::StepFailed));
    assert_eq!(view.started_at, at(0));
    assert_eq!(view.finished_at, Some(at(9)));
    assert_eq!(view.reason.as_deref(), Some("step `b` failed"));

    let json = serde_json::to_value(view).expect("serialises");
    assert_eq!(json["status"], "failed");
    assert_eq!(json["steps"]["b"]["status"], "failed");
    assert_eq!(json["steps"]["b"]["attempts"], 1);
}

#[test]
fn a_tenant_summary_counts_deployments_by_outcome() {
    let mut models = ReadModels::default();
    let ids: Vec<DeploymentId> = (0..3)
        .map(|_| DeploymentId::from_uuid(Uuid::now_v7()))
        .collect();
    let mut all = history(ids[0], "acme", E::DeploymentSucceeded {});
    all.extend(history(
        ids[1],
        "acme",
        E::DeploymentFailed { reason: "r".into() },
    ));
    all.extend(
        history(ids[2], "acme", E::DeploymentSucceeded {})
            .into_iter()
            .take(4),
    );
    all.extend(history(
        DeploymentId::from_uuid(Uuid::now_v7()),
        "globex",
        E::DeploymentSucceeded {},
    ));
    for e in &all {
        models.apply(e).expect("folds");
    }
    let acme = &models.tenants["acme"];
    assert_eq!(
        (acme.running, acme.succeeded, acme.failed, acme.total),
        (1, 1, 1, 3)
    );
    assert_eq!(acme.last_deployment_at, Some(at(0)));
    assert_eq!(models.tenants["globex"].total, 1);
}

#[test]
fn folding_the_same_events_twice_changes_nothing() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let events = history(id, "acme", E::DeploymentSucceeded {});
    let mut once = ReadModels::default();
    let mut twice = ReadModels::default();
    for e in &events {
        once.apply(e).expect("folds");
    }
    for e in events.iter().chain(events.iter()) {
        twice.apply(e).expect("folds");
    }
    assert_eq!(once, twice);
}

#[test]
fn an_envelope_that_does_not_match_the_schema_is_an_error() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let mut bad = history(id, "acme", E::DeploymentSucceeded {}).remove(0);
    bad.data = serde_json::json!({ "tenant": 3 });
    assert!(ReadModels::default().apply(&bad).is_err());
}

#[test]
fn the_grants_ledger_opens_and_closes_each_grant_with_its_pair_of_events() {
    use overture_domain::projection::GrantKind;
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let blueprint = blueprint("name: app\nsteps:\n  a: { run: noop }\n");
    let events = [
        requested("acme", blueprint),
        E::CredentialsSealed {
            seal: "token:x".into(),
            secrets: vec![],
            ssh_public_key: Some("ssh-ed25519 AAAAC3Nz overture-x".into()),
            token: true,
        },
        rule_1_granted(),
        E::BastionAccessRevoked {
            rule: "rule-1".into(),
            kept_for: vec![],
        },
        E::SecretsPurged {},
    ];
    let mut models = ReadModels::default();
    let open_after = |models: &ReadModels| -> Vec<GrantKind> {
        models.deployments[&id]
            .grants
            .iter()
            .filter(|g| g.is_open())
            .map(|g| g.kind)
            .collect()
    };
    let mut open = Vec::new();
    for (revision, event) in events.into_iter().enumerate() {
        models
            .apply(&envelope(id, "acme", revision as u64, event))
            .expect("folds");
        open.push(open_after(&models));
    }
    assert_eq!(open[1], vec![GrantKind::SshKey, GrantKind::Token]);
    assert_eq!(
        open[2],
        vec![
            GrantKind::SshKey,
            GrantKind::Token,
            GrantKind::BastionRule,
            GrantKind::TcpForwarding
        ]
    );
    assert_eq!(open[3], vec![GrantKind::SshKey, GrantKind::Token]);
    assert!(open[4].is_empty(), "the purge closes the key and the token");
    let rule = &models.deployments[&id].grants[2];
    assert_eq!(rule.reference, "rule-1");
    assert_eq!((rule.opened_at, rule.closed_at), (at(2), Some(at(3))));
}

#[test]
fn a_bastion_rule_kept_for_other_holders_says_so_in_the_ledger() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let other = DeploymentId::from_uuid(Uuid::now_v7());
    let blueprint = blueprint("name: app\nsteps:\n  a: { run: noop }\n");
    let events = [
        requested("acme", blueprint),
        rule_1_granted(),
        E::BastionAccessRevoked {
            rule: "rule-1".into(),
            kept_for: vec![other],
        },
    ];
    let models = folded(id, events);
    let grants = &models.deployments[&id].grants;
    assert!(grants.iter().all(|g| !g.is_open()), "{grants:?}");
    assert_eq!(grants[0].kept_for, vec![other]);
    assert!(grants[1].kept_for.is_empty(), "only the rule is kept");
}

#[test]
fn a_stream_folds_only_the_record_it_needs_next_and_says_what_the_tenant_gains() {
    use overture_domain::projection::{project, TenantDelta};
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let records = history(id, "acme", E::DeploymentSucceeded {});
    let last = records.len() as u64 - 1;

    // Revision 3 before 1 and 2: the view starts at 0 and waits for 1.
    let first = project(None, &[records[0].clone(), records[3].clone()]).expect("folds");
    assert!(first.gap);
    assert_eq!((first.applied, first.next), (1, 1));
    assert_eq!(
        first.delta,
        TenantDelta {
            running: 1,
            total: 1,
            requested_at: Some(at(0)),
            ..TenantDelta::default()
        }
    );

    // The rest, with everything already folded delivered again: the replay changes nothing.
    let rest = project(first.view.clone(), &records).expect("folds");
    assert!(!rest.gap);
    assert_eq!(rest.next, last + 1);
    assert_eq!(
        rest.delta,
        TenantDelta {
            running: -1,
            succeeded: 1,
            ..TenantDelta::default()
        }
    );
    let again = project(rest.view.clone(), &records).expect("folds");
    assert_eq!((again.applied, again.delta.is_empty()), (0, true));
    assert_eq!(again.view, rest.view);
}

#[test]
fn a_record_of_another_stream_is_not_folded_into_a_view() {
    use overture_domain::projection::{project, ProjectionError};
    let one = history(
        DeploymentId::from_uuid(Uuid::now_v7()),
        "acme",
        E::DeploymentSucceeded {},
    );
    let other = history(
        DeploymentId::from_uuid(Uuid::now_v7()),
        "acme",
        E::DeploymentSucceeded {},
    );
    let view = project(None, &one[..1]).expect("folds").view;
    let refused = project(view, &other[1..2]);
    assert!(
        matches!(refused, Err(ProjectionError::OtherStream { .. })),
        "{refused:?}"
    );
}

/// Every kind of event the views fold, read as a rebuild reads them ([`Change::decode`], only
/// the fields the views need, from the log's text), changes the views exactly as the whole
/// event does, and names the steps it changed.
#[test]
fn an_event_decoded_only_as_far_as_the_views_need_folds_as_the_whole_event() {
    let id = DeploymentId::from_uuid(Uuid::new_v4());
    let mut records = history(
        id,
        "acme",
        E::DeploymentFailed {
            reason: "step `b` failed".into(),
        },
    );
    let more = vec![
        E::CredentialsSealed {
            seal: "seal-1".into(),
            secrets: vec!["token".into()],
            ssh_public_key: Some("ssh-ed25519 AAAA key".into()),
            token: true,
        },
        E::BastionAccessGranted {
            rule: "rule-1".into(),
            security_group: "sg-1".into(),
            bastion: "203.0.113.5".into(),
            source: "198.51.100.7".into(),
            port: 22,
        },
        E::BastionAccessRevoked {
            rule: "rule-1".into(),
            kept_for: vec![DeploymentId::from_uuid(Uuid::new_v4())],
        },
        E::DeploymentRedriven {
            requested_by: "u".into(),
            steps: vec!["b".into()],
        },
        E::StepRetryScheduled {
            step: "b".into(),
            attempt: 1,
            next_attempt: 2,
            delay_ms: 10,
            not_before: at(20),
        },
        E::StepAbandoned {
            step: "b".into(),
            attempt: 2,
            reason: "cancelled".into(),
        },
        E::CancellationRequested {
            requested_by: "u".into(),
            reason: "enough".into(),
        },
        E::DeploymentCancelled {
            reason: "enough".into(),
            requested_by: "u".into(),
        },
        E::DestroyRequested {
            steps: vec!["a".into()],
        },
        E::StepDestroyFailed {
            step: "a".into(),
            exit_code: Some(2),
            message: "m".into(),
            duration_ms: 1,
        },
        E::StepDestroyed {
            step: "a".into(),
            duration_ms: 1,
        },
        E::DeploymentDestroyed {},
    ];
    let first = records.len() as u64;
    records.extend(
        (first..)
            .zip(more)
            .map(|(revision, event)| envelope(id, "acme", revision, event)),
    );

    let mut folds = BothWays::default();
    for record in &records {
        folds.fold(record);
        assert_eq!(folds.lean, folds.whole, "after {}", record.event_type);
    }
    let BothWays { lean, touched, .. } = folds;
    assert_eq!(lean.deployments[&id].status, DeploymentStatus::Cancelled);
    // The records started the view: every step of it is to be written.
    assert!(touched[&id].all);
    assert!(touched[&id].contains("a") && touched[&id].contains("b"));
}

/// The steps records name are those a projector loads with the header: the step of each step
/// event and those a redrive runs again.
#[test]
fn the_steps_records_may_change_are_named_without_decoding_them() {
    let id = DeploymentId::from_uuid(Uuid::new_v4());
    let mut records = history(id, "acme", E::DeploymentSucceeded {});
    records.push(envelope(
        id,
        "acme",
        records.len() as u64,
        E::DeploymentRedriven {
            requested_by: "u".into(),
            steps: vec!["c".into()],
        },
    ));
    let named: Vec<String> = steps_of(&records[3..]).into_iter().collect();
    assert_eq!(named, ["a", "b", "c"]);
    assert!(steps_of(&records[..1]).is_empty());
}

/// A step waiting for services shows as awaiting; a re-run of a watching step puts a succeeded
/// deployment back to running with that step pending, and nothing else.
#[test]
fn a_step_awaiting_services_and_a_rerun_of_a_watching_step_show_in_the_views() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let blueprint = blueprint("name: app\nsteps:\n  a: { run: noop }\n  b: { run: noop, requires: [{ service: web }], watch: [web] }\n");
    let members = |list: &[&str]| list.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>();
    let scheduled = |step: &str, attempt| E::StepScheduled {
        step: step.into(),
        attempt,
        not_before: at(0),
    };
    let started = |step: &str, attempt| E::StepStarted {
        step: step.into(),
        attempt,
        sandbox: "s".into(),
        lease_until: None,
        fingerprint: None,
    };
    let succeeded = |step: &str, attempt| E::StepSucceeded {
        step: step.into(),
        attempt,
        outputs: BTreeMap::new(),
        duration_ms: 5,
    };
    let awaiting = vec![
        requested("acme", blueprint),
        scheduled("a", 1),
        E::StepAwaitingServices {
            step: "b".into(),
            waiting_for: vec![overture_events::ServiceShortfall {
                service: "web".into(),
                count: 1,
                registered: 0,
            }],
            deadline: at(600),
        },
    ];
    let rerun = vec![
        E::ServicesResolved {
            step: "b".into(),
            services: [("web".to_owned(), members(&["10.0.0.1:80"]))].into(),
        },
        scheduled("b", 1),
        started("a", 1),
        started("b", 1),
        succeeded("a", 1),
        succeeded("b", 1),
        E::SecretsPurged {},
        E::DeploymentSucceeded {},
        E::StepRerunRequested {
            step: "b".into(),
            service: "web".into(),
            from: members(&["10.0.0.1:80"]),
            to: members(&["10.0.0.1:80", "10.0.0.2:80"]),
        },
    ];
    let records: Vec<Envelope> = awaiting
        .into_iter()
        .chain(rerun)
        .enumerate()
        .map(|(i, e)| envelope(id, "acme", i as u64, e))
        .collect();

    let mut whole = ReadModels::default();
    let mut lean = ReadModels::default();
    let mut touched = Touched::new();
    for (i, record) in records.iter().enumerate() {
        whole.apply(record).expect("folds");
        let decoded = Change::decode(&record.event_type, &record.data.to_string())
            .expect("decodes only what the views need");
        lean.apply_change(
            Folding {
                deployment: id,
                revision: record.revision,
                at: record.metadata.recorded_at,
                change: decoded,
            },
            &mut touched,
        );
        assert_eq!(lean, whole, "after {}", record.event_type);
        let view = &whole.deployments[&id];
        match i {
            2 => {
                assert_eq!(view.steps["b"].status, StepStatus::Awaiting);
                assert_eq!(view.status, DeploymentStatus::Running);
            }
            10 => assert_eq!(view.status, DeploymentStatus::Succeeded),
            _ => {}
        }
    }
    let view = &whole.deployments[&id];
    assert_eq!(view.status, DeploymentStatus::Running, "back to running");
    assert_eq!(view.finished_at, None);
    assert_eq!(view.reason, None);
    assert_eq!(view.steps["b"].status, StepStatus::Pending);
    assert_eq!(
        view.steps["a"].status,
        StepStatus::Succeeded,
        "nothing else runs again"
    );
    let acme = &whole.tenants["acme"];
    assert_eq!(
        (acme.running, acme.succeeded, acme.failed, acme.total),
        (1, 0, 0, 1),
        "the tenant counts it running again"
    );
}

/// A blueprint (the instances of `app` come from elsewhere) whose step `web` requires `db`
/// and watches `app`, and whose step `cron` requires `app` and `db`.
fn services_blueprint() -> overture_events::BlueprintSnapshot {
    blueprint(
        "name: svc
steps:
  app: { run: noop }
  web: { run: noop, requires: [{ service: db }], watch: [app] }
  cron: { run: noop, requires: [{ service: app, count: 2 }, { service: db }] }
",
    )
}

fn registered(address: &str, port: u16) -> E {
    E::ServiceRegistered {
        service: "app".into(),
        step: "app".into(),
        host: format!("app-{address}"),
        address: address.into(),
        port,
    }
}

/// The registry folded from a deployment's records: each registration adds an instance with
/// the deployment's tenant and the time recorded, a deregistration removes the one with its
/// deployment, service, address and port, and the blueprint's `requires` and `watch` give
/// one interest row per service, watched when some step watches it. Folding the records
/// again, one by one or all, changes nothing, in memory and through the rebuild's fold.
#[test]
fn the_service_registry_is_folded_from_registrations_and_the_blueprint() {
    use overture_domain::registry::{still_interested, InterestKey};
    let id = DeploymentId::from_uuid(Uuid::new_v4());
    let other = DeploymentId::from_uuid(Uuid::new_v4());
    let events = vec![
        requested("acme", services_blueprint()),
        registered("10.0.0.9", 8000),
        registered("10.0.0.10", 8000),
        registered("10.0.0.9", 7000),
        E::ServiceDeregistered {
            service: "app".into(),
            step: "app".into(),
            host: "app-10.0.0.9".into(),
            address: "10.0.0.9".into(),
            port: 8000,
            reason: "destroyed".into(),
        },
    ];
    let records: Vec<Envelope> = (0..)
        .zip(events)
        .map(|(revision, event)| envelope(id, "acme", revision, event))
        .collect();
    // Another tenant's deployment registers the same address: a registry of its own.
    let theirs = [
        envelope(
            other,
            "globex",
            0,
            requested("globex", services_blueprint()),
        ),
        envelope(other, "globex", 1, registered("10.0.0.9", 8000)),
    ];

    let mut models = ReadModels::default();
    for record in records.iter().chain(&theirs) {
        models.apply(record).expect("folds");
    }
    let listed: Vec<(String, u16, String, String, DateTime<Utc>)> = models
        .registry
        .service_instances("acme")
        .into_iter()
        .map(|r| {
            assert_eq!(r.deployment, id);
            assert_eq!(r.instance.service, "app");
            assert_eq!(r.instance.step, "app");
            let member = r.instance.member();
            (
                r.instance.address,
                r.instance.port,
                r.instance.host,
                member,
                r.registered_at,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "10.0.0.10".to_owned(),
                8000,
                "app-10.0.0.10".to_owned(),
                "10.0.0.10:8000".to_owned(),
                at(2)
            ),
            (
                "10.0.0.9".to_owned(),
                7000,
                "app-10.0.0.9".to_owned(),
                "10.0.0.9:7000".to_owned(),
                at(3)
            ),
        ]
    );
    let globex = models.registry.service_instances("globex");
    assert_eq!(globex.len(), 1);
    assert_eq!(globex[0].deployment, other);

    let interests: Vec<(String, bool)> = models
        .registry
        .interests
        .iter()
        .filter(|(key, _)| key.tenant == "acme")
        .map(
            |(
                InterestKey {
                    service,
                    deployment,
                    ..
                },
                watched,
            )| {
                assert_eq!(*deployment, id);
                (service.clone(), *watched)
            },
        )
        .collect();
    assert_eq!(
        interests,
        [("app".to_owned(), true), ("db".to_owned(), false)]
    );
    assert_eq!(
        models.registry.interested("acme", "db").collect::<Vec<_>>(),
        [(id, false)]
    );
    let view = &models.deployments[&id];
    assert!(still_interested(view.status, None, false));

    // Every record again, alone and all at once: nothing changes.
    let folded = models.clone();
    for record in &records {
        models.apply(record).expect("folds");
        assert_eq!(models, folded, "after {} again", record.event_type);
    }
    let mut again =
        overture_domain::projection::project(Some(folded.deployments[&id].clone()), &records)
            .expect("folds");
    assert_eq!(again.applied, 0);
    assert!(again.registry.is_empty());

    // Folded stream by stream, as the projector does, the records give the same registry
    // rows, and which instance to delete.
    again = overture_domain::projection::project(None, &records).expect("folds");
    assert_eq!(
        again.registry.service_instances("acme"),
        folded.registry.service_instances("acme")
    );
    assert_eq!(again.registry.removed.len(), 1);

    // The rebuild's fold, from the records decoded only as far as the read models need,
    // agrees.
    let mut lean = ReadModels::default();
    let mut touched = Touched::new();
    for record in records.iter().chain(&theirs).chain(&records) {
        let deployment = DeploymentId::from_stream(&record.stream).expect("a deployment stream");
        let change = Change::decode(&record.event_type, &record.data.to_string()).expect("decodes");
        let whole = E::from_parts(&record.event_type, record.data.clone()).expect("decodes");
        assert_eq!(change, Change::from(whole), "{}", record.event_type);
        lean.apply_change(
            Folding {
                deployment,
                revision: record.revision,
                at: record.metadata.recorded_at,
                change,
            },
            &mut touched,
        );
    }
    assert_eq!(lean, folded);
}
