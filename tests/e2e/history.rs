//! `status --at` and `graph --at`: a real deployment as it stood at each of its revisions and
//! instants, folded from its log alone.

use chrono::{DateTime, FixedOffset, Utc};
use overture_domain::projection::project;
use serde_json::Value;

use crate::support::{envelopes, id_of, text, Overture};

/// prepare → flaky; flaky fails its first attempt and is retried (a second attempt, 200 ms
/// later), which succeeds.
const RETRIED: &str = r#"
name: retried
steps:
  prepare:
    run: noop
  flaky:
    run: script
    needs: [prepare]
    retry: { step-failed: { times: 1, wait: 200ms } }
    with: { command: 'echo "attempt $OVERTURE_ATTEMPT"; [ "$OVERTURE_ATTEMPT" = 2 ]' }
"#;

/// A test deployment of [`RETRIED`], run to its end: its id, its final status and its events.
fn retried(overture: &Overture) -> (String, Value, Vec<Value>) {
    let file = overture.blueprint("retried.yaml", RETRIED);
    let status = overture.deploy_ok(&file, &[]);
    assert_eq!(status["steps"]["flaky"]["attempts"], 2, "{status}");
    let id = id_of(&status);
    let events = overture.events(&id);
    (id, status, events)
}

/// When the event at each revision was recorded.
fn times(events: &[Value]) -> Vec<DateTime<Utc>> {
    events
        .iter()
        .map(|e| {
            let at = e["metadata"]["recorded_at"].as_str().expect("a time");
            at.parse().expect("an RFC 3339 time")
        })
        .collect()
}

/// The first revision whose event has type `kind` (and concerns `step`).
fn revision_of(events: &[Value], kind: &str, step: &str) -> usize {
    events
        .iter()
        .position(|e| e["type"] == kind && e["data"]["step"] == step)
        .unwrap_or_else(|| panic!("no {kind} of {step}"))
}

/// An instant halfway between flaky's retry being scheduled and its second attempt starting
/// (200 ms later at least).
fn while_retrying(events: &[Value]) -> String {
    let times = times(events);
    let retry = revision_of(events, "StepRetryScheduled", "flaky");
    let second = events
        .iter()
        .position(|e| {
            e["type"] == "StepStarted" && e["data"]["step"] == "flaky" && e["data"]["attempt"] == 2
        })
        .expect("the second attempt started");
    let between = times[retry] + (times[second] - times[retry]) / 2;
    between.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

#[test]
fn status_at_every_revision_is_the_projection_of_exactly_that_prefix() {
    let overture = Overture::new();
    let (id, status, events) = retried(&overture);
    let records = envelopes(&events);
    let last = events.len() - 1;

    for revision in 0..=last {
        let at = revision.to_string();
        let shown = overture.json(&["status", &id, "--at", &at, "--json"]);
        let view = project(None, &records[..=revision])
            .expect("the prefix folds")
            .view
            .expect("a view");
        let expected = serde_json::to_value(&view).expect("JSON");
        assert_eq!(shown, expected, "--at {revision}");
        assert_eq!(shown["revision"], revision as u64);
    }

    // What people see at the moments that matter.
    let at =
        |revision: usize| overture.json(&["status", &id, "--at", &revision.to_string(), "--json"]);
    let first = at(0);
    assert_eq!(first["status"], "running");
    assert_eq!(first["steps"]["prepare"]["status"], "pending");
    assert!(first["finished_at"].is_null());
    let failed = at(revision_of(&events, "StepAttemptFailed", "flaky"));
    assert_eq!(failed["steps"]["prepare"]["status"], "succeeded");
    assert_eq!(failed["steps"]["flaky"]["status"], "running");
    assert_eq!(failed["steps"]["flaky"]["attempts"], 1);
    assert_eq!(failed["steps"]["flaky"]["error_class"], "step-failed");
    let retrying = at(revision_of(&events, "StepRetryScheduled", "flaky"));
    assert_eq!(retrying["steps"]["flaky"]["status"], "retrying");
    assert_eq!(at(last - 1)["status"], "running");

    // The last revision is the deployment as it is now: the same JSON and the same text.
    let last_at = last.to_string();
    assert_eq!(
        overture.json(&["status", &id, "--at", &last_at, "--json"]),
        overture.json(&["status", &id, "--json"])
    );
    assert_eq!(overture.json(&["status", &id, "--json"]), status);
    let now = overture.run(&["status", &id]);
    let then = overture.run(&["status", &id, "--at", &last_at]);
    assert!(then.status.success(), "{}", text(&then.stderr));
    assert_eq!(text(&then.stdout), text(&now.stdout));
    assert!(
        text(&then.stderr).contains(&format!("as it stood at revision {last}")),
        "{}",
        text(&then.stderr)
    );
}

#[test]
fn status_at_a_time_shows_every_event_recorded_at_or_before_it() {
    let overture = Overture::new();
    let (id, _, events) = retried(&overture);
    let times = times(&events);
    let revision_at = |at: &str| {
        overture.json(&["status", &id, "--at", at, "--json"])["revision"]
            .as_u64()
            .expect("a revision")
    };
    // The last revision recorded at or before an instant (several events may share one).
    let expected = |instant: DateTime<Utc>| {
        times.iter().rposition(|t| *t <= instant).expect("recorded") as u64
    };
    let offset = FixedOffset::east_opt(2 * 3600).expect("an offset");
    for (revision, time) in times.iter().enumerate() {
        let utc = time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
        assert_eq!(revision_at(&utc), expected(*time), "--at {utc}");
        assert!(expected(*time) >= revision as u64);
        // The same instant written in another offset is the same moment.
        let elsewhere = time
            .with_timezone(&offset)
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false);
        assert_eq!(revision_at(&elsewhere), expected(*time), "--at {elsewhere}");
    }
    // Between the failed attempt and the retry's start, flaky waits to be retried.
    let between = while_retrying(&events);
    let shown = overture.json(&["status", &id, "--at", &between, "--json"]);
    let instant: DateTime<Utc> = between.parse().expect("a time");
    assert_eq!(shown["revision"].as_u64(), Some(expected(instant)));
    assert_eq!(shown["steps"]["flaky"]["status"], "retrying");
    // Long after the end, it is the deployment as it ended.
    assert_eq!(revision_at("2999-01-01T00:00:00Z"), events.len() as u64 - 1);
}

#[test]
fn at_outside_the_stream_is_refused_with_its_range_and_the_fix() {
    let overture = Overture::new();
    let (id, _, events) = retried(&overture);
    let last = events.len() - 1;
    let refused = |args: &[&str]| {
        let output = overture.run(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&output.stderr)
        );
        assert!(output.stdout.is_empty(), "{args:?}: nothing on stdout");
        text(&output.stderr)
    };

    let past = (last + 1).to_string();
    for command in ["status", "graph"] {
        let stderr = refused(&[command, &id, "--at", &past]);
        assert!(stderr.contains(&format!("--at {past}")), "{stderr}");
        assert!(
            stderr.contains(&format!("revisions 0 to {last}")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("--at {last} is the latest")),
            "{stderr}"
        );
    }

    let first = events[0]["metadata"]["recorded_at"]
        .as_str()
        .expect("a time");
    let stderr = refused(&["status", &id, "--at", "2000-01-01T00:00:00Z", "--json"]);
    assert!(stderr.contains("--at 2000-01-01T00:00:00Z"), "{stderr}");
    assert!(
        stderr.contains(&format!("first event was recorded at {first}")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("revision from 0 to {last}")),
        "{stderr}"
    );

    let stderr = refused(&["status", &id, "--at", "yesterday"]);
    assert!(stderr.contains("--at"), "{stderr}");
    assert!(stderr.contains("RFC 3339"), "{stderr}");

    let unknown = uuid::Uuid::now_v7().to_string();
    let stderr = refused(&["status", &unknown, "--at", "0"]);
    assert!(
        stderr.contains(&format!("no deployment {unknown}")),
        "{stderr}"
    );

    let file = overture.blueprint("retried.yaml", RETRIED);
    let stderr = refused(&["graph", file.to_str().expect("a path"), "--at", "0"]);
    assert!(
        stderr.contains("--at") && stderr.contains("deployment id"),
        "{stderr}"
    );
}

#[test]
fn graph_at_a_revision_shows_the_step_states_of_that_moment() {
    let overture = Overture::new();
    let (id, _, events) = retried(&overture);
    let graph = |extra: &[&str]| {
        let mut args = vec!["graph", id.as_str(), "--format", "dot"];
        args.extend_from_slice(extra);
        let output = overture.run(&args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
    };

    let drawn = graph(&["--at", "0"]);
    assert!(drawn.contains("\"prepare\" -> \"flaky\""), "{drawn}");
    assert!(
        drawn.contains("prepare (pending)") && drawn.contains("flaky (pending)"),
        "{drawn}"
    );

    let retry = revision_of(&events, "StepRetryScheduled", "flaky").to_string();
    let drawn = graph(&["--at", &retry]);
    assert!(drawn.contains("prepare (succeeded)"), "{drawn}");
    assert!(drawn.contains("flaky (retrying)"), "{drawn}");

    let drawn = graph(&["--at", &while_retrying(&events)]);
    assert!(drawn.contains("flaky (retrying)"), "{drawn}");

    let last = (events.len() - 1).to_string();
    assert_eq!(graph(&["--at", &last]), graph(&[]));
    assert!(graph(&[]).contains("flaky (succeeded)"));
}
