//! The event card against the code: every event type has exactly one card; the commands the card
//! names for an event are exactly those the aggregate was seen to record it for, driving it
//! through every family of commands; the projection changes a read model for an event exactly
//! when the card says it does; and `ARCHITECTURE.md` shows the card as it is.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use overture_domain::deployment::card::{card_of, markdown, CARD};
use overture_domain::deployment::{
    BastionAccess, Deployment, DeploymentCommand as C, DeploymentState, Interruption, PinnedHost,
    SealedCredentials,
};
use overture_domain::projection::project;
use overture_domain::testing::events::{
    advance, blueprint, envelopes, failure, instance, ran, registered, request, requested,
    resolved, samples, start, success,
};
use overture_domain::testing::t;
use overture_events::{
    DeploymentEvent as E, DeploymentId, ErrorClass, HostKeySource, PinnedHostKey,
};

#[test]
fn every_event_type_has_exactly_one_card() {
    let carded: Vec<&str> = CARD.iter().map(|card| card.event).collect();
    assert_eq!(
        carded,
        E::TYPES,
        "one card per event, in the order of the types"
    );
}

/// (command, event type) pairs the aggregate was seen to decide.
type Seen = Rc<RefCell<BTreeSet<(&'static str, &'static str)>>>;

/// A deployment driven command by command; clones share what was seen.
#[derive(Clone)]
struct Drive {
    state: DeploymentState,
    seen: Seen,
}

impl Drive {
    fn new(seen: &Seen) -> Self {
        Self {
            state: DeploymentState::default(),
            seen: seen.clone(),
        }
    }

    /// Starts from recorded events (their commands are not counted).
    fn from(seen: &Seen, history: Vec<E>) -> Self {
        Self {
            state: Deployment::replay(history),
            seen: seen.clone(),
        }
    }

    #[track_caller]
    fn on(&mut self, command: C) -> &mut Self {
        let name = command.name();
        let events = match Deployment::handle(&self.state, command) {
            Ok(events) => events,
            Err(error) => panic!("{name} is refused: {error}"),
        };
        for event in events {
            self.seen.borrow_mut().insert((name, event.event_type()));
            self.state = Deployment::apply(std::mem::take(&mut self.state), event);
        }
        self
    }

    fn fork(&self) -> Self {
        self.clone()
    }
}

fn sealed() -> Option<SealedCredentials> {
    Some(SealedCredentials {
        seal: "seal-1".into(),
        secrets: vec!["api_key".into()],
        ssh_public_key: None,
        token: false,
    })
}

/// build → (unit, lint, docs) → package; lint retries a failure once, unit is never retried
/// after an interruption.
fn shop() -> overture_events::BlueprintSnapshot {
    blueprint(
        r#"
name: shop
on_failure: { grace: 60s }
steps:
  build: { run: noop }
  unit: { run: noop, needs: [build], retry: { interrupted: { times: 0 } } }
  lint: { run: noop, needs: [build], retry: { step-failed: { times: 1, wait: 5s } } }
  docs: { run: noop, needs: [build] }
  package: { run: noop, needs: [unit, lint, docs] }
"#,
    )
}

fn access() -> BastionAccess {
    BastionAccess {
        rule: "r1".into(),
        security_group: "sg".into(),
        bastion: "203.0.113.7".into(),
        source: "198.51.100.1/32".into(),
        port: 22,
    }
}

/// A deployment that goes well, through the bastion, then is destroyed.
fn succeeding(seen: &Seen) {
    let mut run = Drive::new(seen);
    run.on(request(shop(), sealed()))
        .on(advance(0))
        .on(start("build", 1, 0))
        .on(C::RecordNetworkPolicy {
            step: "build".into(),
            attempt: 1,
            allowed: vec!["10.0.0.5:22".into()],
        })
        .on(C::RecordAccessGranted(access()))
        .on(C::PinHostKeys(vec![PinnedHost {
            server: "web-1".into(),
            host: "10.0.0.5".into(),
            learned: HostKeySource::Console,
            keys: vec![PinnedHostKey {
                key_type: "ssh-ed25519".into(),
                fingerprint: "SHA256:x".into(),
                public_key: "AAAA".into(),
            }],
        }]))
        .on(success("build", 1))
        .on(advance(1));
    for step in ["unit", "lint", "docs"] {
        run.on(start(step, 1, 1)).on(success(step, 1));
    }
    run.on(advance(2))
        .on(start("package", 1, 2))
        .on(success("package", 1))
        .on(advance(3))
        .on(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        })
        .on(C::RecordSecretsPurged)
        .on(advance(4))
        .on(C::RequestDestroy);

    // Nothing sealed: the purge is recorded with the end.
    let mut bare = Drive::new(seen);
    bare.on(request(
        blueprint("name: one\nsteps:\n  build: { run: noop }\n"),
        None,
    ))
    .on(advance(0))
    .on(start("build", 1, 0))
    .on(success("build", 1))
    .on(advance(1));
}

/// unit and lint running, docs waiting to start.
fn shop_running(seen: &Seen) -> Drive {
    let mut run = Drive::new(seen);
    run.on(request(shop(), sealed()))
        .on(advance(0))
        .on(start("build", 1, 0))
        .on(success("build", 1))
        .on(advance(1))
        .on(start("unit", 1, 1))
        .on(start("lint", 1, 1));
    run
}

/// Every way an attempt fails, with a retry or a failure for good and what follows it; a
/// failed deployment ends, is redriven; a cancel.
fn failing(seen: &Seen) {
    let running = shop_running(seen);
    running
        .fork()
        .on(failure("lint", 1, ErrorClass::StepFailed, 2));
    let mut failed = running.fork();
    failed
        .on(failure("unit", 1, ErrorClass::StepFailed, 2))
        .on(advance(200))
        .on(C::RecordSecretsPurged)
        .on(advance(201))
        .on(C::Redrive {
            requested_by: "ada".into(),
            sealed: sealed(),
        });
    let interrupt = |step: &str| C::InterruptAttempt {
        step: step.into(),
        attempt: 1,
        why: Interruption::EngineStopped,
        now: t(2),
    };
    running.fork().on(interrupt("lint"));
    running.fork().on(interrupt("unit"));
    let dead_letter = |step: &str| C::RecordDeadLetter {
        step: step.into(),
        attempt: 1,
        receives: 3,
        now: t(10_000),
    };
    running.fork().on(dead_letter("lint"));
    running.fork().on(dead_letter("unit"));
    running
        .fork()
        .on(C::Cancel {
            requested_by: "ada".into(),
            reason: "wrong branch".into(),
        })
        .on(advance(3))
        .on(C::RecordSecretsPurged)
        .on(advance(4));
}

/// A Terraform step's resources destroyed, after a failed try.
fn destroying(seen: &Seen) {
    let mut run = Drive::new(seen);
    run.on(request(
        blueprint("name: infra\nsteps:\n  network: { run: terraform, with: { dir: network } }\n"),
        None,
    ))
    .on(advance(0))
    .on(start("network", 1, 0))
    .on(success("network", 1))
    .on(advance(1))
    .on(C::RequestDestroy)
    .on(C::RecordDestroyFailure {
        step: "network".into(),
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
    })
    .on(C::RequestDestroy)
    .on(C::RecordStepDestroyed {
        step: "network".into(),
        duration_ms: 1,
    });
}

/// db provides `db`; app requires it and is scheduled; lb requires two `app` and watches it;
/// side runs meanwhile.
fn cluster() -> overture_events::BlueprintSnapshot {
    blueprint(
        r#"
name: cluster
on_failure: { grace: 60s }
steps:
  db:
    run: wait-ssh
    with: { hosts: ["10.0.0.5:22"] }
    provides: { service: db, port: 5432 }
  app:
    run: noop
    requires: [{ service: db, timeout: 60s }]
  lb:
    run: noop
    requires: [{ service: app, count: 2, timeout: 2m }, { service: db, timeout: 30s }]
    watch: [app]
  side: { run: noop }
"#,
    )
}

/// Services waited for, registered, resolved; a wait that times out; a watching step run again;
/// a destroy that deregisters.
fn serving(seen: &Seen) {
    let observe = |now: i64, others| C::ObserveServices {
        now: t(now),
        others,
    };
    let db = instance("db", "db", "10.0.0.5", 5432);
    let mut run = Drive::new(seen);
    run.on(request(cluster(), None))
        .on(advance(0))
        .on(observe(0, vec![]))
        .on(start("db", 1, 0))
        .on(start("side", 1, 0))
        .on(C::RegisterServices {
            step: "db".into(),
            attempt: 1,
            instances: vec![db.clone()],
        })
        .on(success("db", 1))
        .on(observe(5, vec![]));
    run.fork().on(observe(130, vec![]));

    // Every step succeeded, lb with two app members of another deployment; one more comes.
    let app = |last: u8| instance("app", "web", &format!("10.9.0.{last}"), 8000);
    let mut history = vec![requested("cluster.yaml", cluster()), registered(&db)];
    for step in ["db", "side", "app"] {
        history.extend(ran(step, 1, 0));
    }
    history.push(resolved(
        "lb",
        &[
            ("app", &["10.9.0.1:8000", "10.9.0.2:8000"]),
            ("db", &["10.0.0.5:5432"]),
        ],
    ));
    history.extend(ran("lb", 1, 1));
    history.extend([E::SecretsPurged {}, E::DeploymentSucceeded {}]);
    let done = Drive::from(seen, history);
    done.fork().on(observe(10, vec![app(1), app(2), app(3)]));
    done.fork().on(C::RequestDestroy);
}

#[test]
fn the_card_names_exactly_the_commands_that_record_each_event() {
    let seen: Seen = Rc::default();
    succeeding(&seen);
    failing(&seen);
    destroying(&seen);
    serving(&seen);
    let seen = seen.borrow().clone();
    let carded: BTreeSet<(&str, &str)> = CARD
        .iter()
        .flat_map(|card| card.commands.iter().map(|command| (*command, card.event)))
        .collect();
    let unseen: Vec<_> = carded.difference(&seen).collect();
    let uncarded: Vec<_> = seen.difference(&carded).collect();
    assert!(
        unseen.is_empty() && uncarded.is_empty(),
        "(command, event) on the card but never decided: {unseen:?}; decided but not on the \
         card: {uncarded:?}"
    );
}

#[test]
fn the_projection_changes_a_read_model_exactly_for_the_events_the_card_says() {
    // The samples folded in order, as one stream: each record against the views the ones
    // before it left.
    let id = DeploymentId::from_uuid(uuid::Uuid::from_u128(7));
    let stream: Vec<(E, _)> = samples()
        .into_iter()
        .enumerate()
        .map(|(at, event)| (event, t(at as i64)))
        .collect();
    let records = envelopes(id, &stream);
    let mut view = None;
    for (record, (sample, _)) in records.iter().zip(&stream) {
        let before = view.clone();
        let after = project(view, std::slice::from_ref(record)).expect("folds");
        view = after.view.clone();
        let moved_on = |mut folded: overture_domain::projection::DeploymentView| {
            folded.revision = before.as_ref().map_or(0, |v| v.revision);
            Some(folded) != before
        };
        let changed = after.view.clone().is_some_and(moved_on)
            || after.delta != Default::default()
            || !after.registry.is_empty();
        let card = card_of(sample.event_type()).expect("a card");
        assert_eq!(
            changed,
            card.read_model.is_some(),
            "the card says of {} that the projection does {:?}",
            sample.event_type(),
            card.read_model
        );
    }
}

#[test]
fn architecture_md_shows_the_card_as_it_is() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md");
    let shown = text
        .split_once("<!-- card -->\n")
        .and_then(|(_, rest)| rest.split_once("<!-- /card -->"))
        .map(|(table, _)| table)
        .expect("ARCHITECTURE.md has the card between <!-- card --> and <!-- /card -->");
    assert_eq!(
        shown,
        markdown(),
        "ARCHITECTURE.md's card is not the card: paste overture_domain::deployment::card::markdown()"
    );
}
