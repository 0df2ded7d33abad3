//! `overture events`: a deployment's history as a timeline a person can follow, and the filters
//! that choose which of its events are shown.
//!
//! - [`Filter`]: `--step`, `--type` and `--since`, read from the command line and applied to
//!   envelopes; `--json` prints the envelopes it keeps, the timeline their lines.
//! - [`lines`]: the timeline. One line per event: revision, time (UTC), who (the actor), what
//!   (the event in words, the step and attempt as `build#2`); under it, where there is one, the
//!   why: error class, exit code, the message's headline and last line of output, and the retry
//!   policy's decision with its wait.
//!
//! Both are pure functions of the envelopes the query port returned, so the embedded and the aws
//! backends print the same. The timeline reads the whole history for its context (the retry
//! decision recorded after a failed attempt, the blueprint's retry rules, when the deployment
//! was requested) and prints only the events the filter keeps.
//!
//! Where things are: [`filter`] reads and applies the filters; [`context`] reads what the whole
//! history says; [`describe`] puts each event in words, through one file per family of events
//! (the request, attempts, failures, ends, the bastion, services, destroy); here the lines are
//! laid out and wrapped.

use overture_events::{BlueprintSnapshot, DeploymentEvent, Envelope, Timestamp};

use context::Context;
pub use filter::{Filter, FilterError};

mod attempts;
mod bastion;
mod context;
mod describe;
mod destroy;
mod ends;
mod failures;
mod filter;
mod request;
mod services;

/// The widest a timeline line gets, wrapping where it would be wider.
const WIDTH: usize = 100;

/// The widest the actor column gets; a longer actor pushes its own line's text along.
const MAX_WHO: usize = 16;

/// The blueprint the deployment was requested with, from its first event.
fn blueprint_of(history: &[Envelope]) -> Option<BlueprintSnapshot> {
    history
        .iter()
        .find(|e| e.event_type == "DeploymentRequested")
        .and_then(|e| DeploymentEvent::from_parts(&e.event_type, e.data.clone()).ok())
        .and_then(|event| match event {
            DeploymentEvent::DeploymentRequested { blueprint, .. } => Some(blueprint),
            _ => None,
        })
}

/// One event as the timeline shows it.
struct Entry {
    revision: u64,
    at: Timestamp,
    who: String,
    /// The event in words, with its step and attempt and a short detail.
    what: String,
    /// The lines under it: why it happened and what was decided, each `(label, text)`.
    why: Vec<(&'static str, String)>,
}

/// The timeline of a deployment's `history` (every event of its stream, in order), showing
/// the events `filter` keeps: a header, then each event's line and its why lines. Nothing
/// (not even the header) when the filter keeps no event.
pub fn lines(history: &[Envelope], filter: &Filter) -> Vec<String> {
    let context = Context::of(history);
    let entries: Vec<Entry> = history
        .iter()
        .enumerate()
        .filter(|(_, envelope)| filter.keeps(envelope))
        .map(|(index, envelope)| context.entry(index, envelope))
        .collect();
    if entries.is_empty() {
        return Vec::new();
    }
    let rev_width = entries
        .iter()
        .map(|e| e.revision.to_string().len())
        .max()
        .unwrap_or(0)
        .max("REV".len());
    let who_width = entries
        .iter()
        .map(|e| e.who.chars().count())
        .max()
        .unwrap_or(0)
        .clamp("WHO".len(), MAX_WHO);
    // REV, two spaces, the time (23 characters), two spaces: where WHO starts, and the why
    // lines, which have the room of both columns.
    let who_column = rev_width + 2 + 23 + 2;
    let what_column = who_column + who_width + 2;
    let mut out = vec![format!(
        "{:>rev_width$}  {:<23}  {:<who_width$}  WHAT",
        "REV", "TIME (UTC)", "WHO"
    )];
    for entry in entries {
        let lead = format!(
            "{:>rev_width$}  {}  {:<who_width$}  ",
            entry.revision,
            entry.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            entry.who
        );
        let start = lead.chars().count();
        wrap(&mut out, lead, start, &entry.what, what_column + 4);
        for (label, text) in entry.why {
            let lead = format!("{:who_column$}{label}: ", "");
            let start = lead.chars().count();
            wrap(&mut out, lead, start, &text, start);
        }
    }
    out
}

/// Appends `text` after `lead` (which is `start` characters wide), wrapped at [`WIDTH`] on
/// spaces, continuation lines indented by `indent`. A word wider than the room is not cut.
fn wrap(out: &mut Vec<String>, lead: String, start: usize, text: &str, indent: usize) {
    let mut line = lead;
    let mut used = start;
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = word.chars().count();
        if !empty && used + 1 + len > WIDTH {
            out.push(line.trim_end().to_owned());
            line = " ".repeat(indent);
            used = indent;
            empty = true;
        }
        if !empty {
            line.push(' ');
            used += 1;
        }
        line.push_str(word);
        used += len;
        empty = false;
    }
    out.push(line.trim_end().to_owned());
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use overture_events::{ErrorClass, Metadata, RetryRule, StepSpec};

    use super::*;

    /// 2026-11-23 10:00:00 UTC plus `ms`.
    fn at(ms: i64) -> Timestamp {
        chrono::DateTime::parse_from_rfc3339("2026-11-23T10:00:00Z")
            .expect("a time")
            .to_utc()
            + chrono::TimeDelta::milliseconds(ms)
    }

    fn step(name: &str, retry: &[(ErrorClass, u32, u64)]) -> StepSpec {
        StepSpec {
            name: name.into(),
            kind: "script".into(),
            with: BTreeMap::new(),
            needs: vec![],
            timeout_ms: 60_000,
            retry: retry
                .iter()
                .map(|(class, times, wait_ms)| {
                    (
                        *class,
                        RetryRule {
                            times: *times,
                            wait_ms: *wait_ms,
                        },
                    )
                })
                .collect(),
            limits: Default::default(),
            provides: None,
            requires: vec![],
            watch: vec![],
        }
    }

    fn requested(steps: Vec<StepSpec>) -> DeploymentEvent {
        DeploymentEvent::DeploymentRequested {
            triggered_by: None,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "examples/publish.yaml".into(),
            blueprint: BlueprintSnapshot {
                name: "publish".into(),
                description: None,
                params: vec![],
                secrets: vec!["token".into()],
                grace_ms: 120_000,
                steps,
                hosts: BTreeMap::new(),
                files: BTreeMap::new(),
                stored_files: BTreeMap::new(),
                bastion: None,
                egress: vec![],
            },
            blueprint_hash: "ab".into(),
            params: [("channel".to_owned(), "stable".to_owned())].into(),
            cloud: None,
            name: None,
        }
    }

    /// A history: each event with its actor and its time in ms after 10:00:00.
    fn history(events: Vec<(&str, i64, DeploymentEvent)>) -> Vec<Envelope> {
        events
            .into_iter()
            .enumerate()
            .map(|(revision, (actor, ms, event))| Envelope {
                stream: "deployment-x".into(),
                revision: revision as u64,
                id: uuid::Uuid::nil(),
                event_type: event.event_type().into(),
                data: event.data(),
                metadata: Metadata {
                    tenant: "acme".into(),
                    actor: actor.into(),
                    correlation_id: uuid::Uuid::nil(),
                    causation_id: uuid::Uuid::nil(),
                    recorded_at: at(ms),
                    previous: None,
                    hash: None,
                },
            })
            .collect()
    }

    fn failed(step: &str, attempt: u32, message: &str) -> DeploymentEvent {
        DeploymentEvent::StepAttemptFailed {
            step: step.into(),
            attempt,
            error_class: ErrorClass::BackendUnreachable,
            exit_code: Some(1),
            message: message.into(),
            duration_ms: 1_200,
        }
    }

    /// `publish`, whose backend-unreachable failures are retried twice after 20 s: it fails
    /// twice, then succeeds.
    fn a_retried_publish() -> Vec<Envelope> {
        let publish = step("publish", &[(ErrorClass::BackendUnreachable, 2, 20_000)]);
        let message = "the cloud answered 503; last output:\nusing token ***\n\
                       503 The backend server is unreachable\n";
        history(vec![
            ("ada", 0, requested(vec![publish])),
            (
                "ada",
                5,
                DeploymentEvent::CredentialsSealed {
                    seal: "seal-1".into(),
                    secrets: vec!["token".into()],
                    ssh_public_key: Some("ssh-ed25519 AAAAC3Nza deployment".into()),
                    token: true,
                },
            ),
            (
                "orchestrator",
                10,
                DeploymentEvent::StepScheduled {
                    step: "publish".into(),
                    attempt: 1,
                    not_before: at(10),
                },
            ),
            (
                "runner",
                20,
                DeploymentEvent::StepStarted {
                    step: "publish".into(),
                    attempt: 1,
                    sandbox: "sb-1".into(),
                    lease_until: None,
                    fingerprint: None,
                },
            ),
            ("runner", 1_234, failed("publish", 1, message)),
            (
                "runner",
                1_234,
                DeploymentEvent::StepRetryScheduled {
                    step: "publish".into(),
                    attempt: 1,
                    next_attempt: 2,
                    delay_ms: 20_000,
                    not_before: at(21_234),
                },
            ),
            (
                "runner",
                21_240,
                DeploymentEvent::StepStarted {
                    step: "publish".into(),
                    attempt: 2,
                    sandbox: "sb-2".into(),
                    lease_until: None,
                    fingerprint: None,
                },
            ),
            (
                "runner",
                22_000,
                DeploymentEvent::StepSucceeded {
                    step: "publish".into(),
                    attempt: 2,
                    outputs: [("url".to_owned(), "https://example.test/1.4.2".to_owned())].into(),
                    duration_ms: 760,
                },
            ),
            ("orchestrator", 22_010, DeploymentEvent::SecretsPurged {}),
            (
                "orchestrator",
                22_020,
                DeploymentEvent::DeploymentSucceeded {},
            ),
        ])
    }

    #[test]
    fn a_retried_failure_reads_as_who_did_what_and_why_and_what_was_decided() {
        let lines = lines(&a_retried_publish(), &Filter::default());
        let expected = [
            "REV  TIME (UTC)               WHO           WHAT",
            "  0  2026-11-23 10:00:00.000  ada           deployment requested: publish for tenant acme",
            "                              by: ada via cli",
            "                              from: examples/publish.yaml",
            "                              params: channel=stable",
            "  1  2026-11-23 10:00:00.005  ada           credentials sealed",
            "                              sealed: secrets token; its own SSH key; the cloud token",
            "  2  2026-11-23 10:00:00.010  orchestrator  step scheduled: publish#1",
            "  3  2026-11-23 10:00:00.020  runner        step started: publish#1",
            "  4  2026-11-23 10:00:01.234  runner        step attempt failed: publish#1 after 1.2s",
            "                              why: backend-unreachable, exit 1: the cloud answered 503",
            "                              output: 503 The backend server is unreachable",
            "                              next: retry #1 in 20s (at 10:00:21.234)",
            "  5  2026-11-23 10:00:01.234  runner        step retry scheduled: publish#2 in 20s (at 10:00:21.234)",
            "  6  2026-11-23 10:00:21.240  runner        step started: publish#2",
            "  7  2026-11-23 10:00:22.000  runner        step succeeded: publish#2 in 760ms",
            "                              outputs: url=https://example.test/1.4.2",
            "  8  2026-11-23 10:00:22.010  orchestrator  secrets purged",
            "  9  2026-11-23 10:00:22.020  orchestrator  deployment succeeded after 22.0s",
        ];
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
        assert!(lines.iter().all(|line| line.chars().count() <= WIDTH));
    }

    #[test]
    fn a_step_attempts_network_policy_lists_what_it_may_reach() {
        let mut given = a_retried_publish();
        given.truncate(4);
        let policy = DeploymentEvent::StepNetworkPolicyApplied {
            step: "publish".into(),
            attempt: 1,
            allowed: vec!["10.0.0.0/24".into(), "127.0.0.1:5000".into()],
        };
        let mut event = history(vec![("runner", 21, policy)]).remove(0);
        event.revision = 4;
        given.push(event);
        let text = lines(&given, &Filter::default()).join("\n");
        assert!(
            text.contains("runner        step network policy applied: publish#1\n"),
            "{text}"
        );
        assert!(
            text.contains("allowed: 10.0.0.0/24, 127.0.0.1:5000"),
            "{text}"
        );
    }

    #[test]
    fn a_failure_shows_its_masked_message_and_credentials_only_by_name() {
        let mut given = a_retried_publish();
        given[4] = history(vec![(
            "runner",
            1_234,
            failed(
                "publish",
                1,
                "exited with code 1; last output:\nlogin as ada\ntoken *** refused\n",
            ),
        )])
        .remove(0);
        given[4].revision = 4;
        let text = lines(&given, &Filter::default()).join("\n");
        assert!(
            text.contains("\n                              output: token *** refused\n"),
            "the last line of output, masked as it was recorded:\n{text}"
        );
        assert!(text.contains("sealed: secrets token;"), "{text}");
        assert!(
            !text.contains("AAAAC3Nza"),
            "the key is named, not printed: {text}"
        );
        assert!(!text.contains("seal-1"), "{text}");
    }

    #[test]
    fn a_step_that_is_not_retried_says_so_and_one_out_of_retries_says_they_are_used() {
        let build = step("build", &[]);
        let push = step("push", &[(ErrorClass::BackendUnreachable, 1, 0)]);
        let failure = |step: &str, attempt, class, code| DeploymentEvent::StepAttemptFailed {
            step: step.into(),
            attempt,
            error_class: class,
            exit_code: code,
            message: "it broke".into(),
            duration_ms: 0,
        };
        let given = history(vec![
            ("ada", 0, requested(vec![push, build])),
            (
                "runner",
                1_000,
                failure("push", 1, ErrorClass::BackendUnreachable, None),
            ),
            (
                "runner",
                1_000,
                DeploymentEvent::StepRetryScheduled {
                    step: "push".into(),
                    attempt: 1,
                    next_attempt: 2,
                    delay_ms: 0,
                    not_before: at(1_000),
                },
            ),
            (
                "runner",
                2_000,
                failure("push", 2, ErrorClass::BackendUnreachable, None),
            ),
            (
                "runner",
                2_000,
                DeploymentEvent::StepFailed {
                    step: "push".into(),
                    attempts: 2,
                    error_class: ErrorClass::BackendUnreachable,
                },
            ),
            (
                "runner",
                2_000,
                DeploymentEvent::FailureGracePeriodStarted {
                    failed_step: "push".into(),
                    deadline: at(122_000),
                },
            ),
            (
                "runner",
                3_000,
                failure("build", 1, ErrorClass::StepFailed, Some(2)),
            ),
            (
                "runner",
                3_000,
                DeploymentEvent::StepFailed {
                    step: "build".into(),
                    attempts: 1,
                    error_class: ErrorClass::StepFailed,
                },
            ),
        ]);
        let lines = lines(&given, &Filter::default());
        let expected = [
            "REV  TIME (UTC)               WHO     WHAT",
            "  0  2026-11-23 10:00:00.000  ada     deployment requested: publish for tenant acme",
            "                              by: ada via cli",
            "                              from: examples/publish.yaml",
            "                              params: channel=stable",
            "  1  2026-11-23 10:00:01.000  runner  step attempt failed: push#1",
            "                              why: backend-unreachable: it broke",
            "                              next: retry #1 at once",
            "  2  2026-11-23 10:00:01.000  runner  step retry scheduled: push#2 at once",
            "  3  2026-11-23 10:00:02.000  runner  step attempt failed: push#2",
            "                              why: backend-unreachable: it broke",
            "                              next: no retry: class backend-unreachable allows 1, all used",
            "  4  2026-11-23 10:00:02.000  runner  step failed: push after 2 attempts (backend-unreachable)",
            "                              why: no retry: class backend-unreachable allows 1, all used",
            "  5  2026-11-23 10:00:02.000  runner  failure grace period started: after push failed",
            "                              why: step `push` failed for good; steps still running may finish until",
            "                                   10:02:02.000 (in 2m00s), then they are abandoned",
            "  6  2026-11-23 10:00:03.000  runner  step attempt failed: build#1",
            "                              why: step-failed, exit 2: it broke",
            "                              next: no retry: the deployment is already failing (step `push` failed)",
            "  7  2026-11-23 10:00:03.000  runner  step failed: build after 1 attempt (step-failed)",
            "                              why: no retry: the deployment is already failing (step `push` failed)",
        ];
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
    }

    #[test]
    fn after_a_redrive_retries_and_give_ups_count_the_attempts_of_the_new_run() {
        let push = step("push", &[(ErrorClass::BackendUnreachable, 1, 0)]);
        let failure = |attempt| DeploymentEvent::StepAttemptFailed {
            step: "push".into(),
            attempt,
            error_class: ErrorClass::BackendUnreachable,
            exit_code: None,
            message: "it broke".into(),
            duration_ms: 0,
        };
        let retry = |attempt| DeploymentEvent::StepRetryScheduled {
            step: "push".into(),
            attempt,
            next_attempt: attempt + 1,
            delay_ms: 0,
            not_before: at(0),
        };
        let given_up = |attempts| DeploymentEvent::StepFailed {
            step: "push".into(),
            attempts,
            error_class: ErrorClass::BackendUnreachable,
        };
        let first_run = vec![
            ("ada", 0, requested(vec![push])),
            ("runner", 1_000, failure(1)),
            ("runner", 1_000, retry(1)),
            ("runner", 2_000, failure(2)),
            ("runner", 2_000, given_up(2)),
            (
                "runner",
                2_000,
                DeploymentEvent::DeploymentFailed {
                    reason: "step `push` failed".into(),
                },
            ),
            (
                "ada",
                3_000,
                DeploymentEvent::DeploymentRedriven {
                    requested_by: "ada".into(),
                    steps: vec!["push".into()],
                },
            ),
            ("runner", 4_000, failure(3)),
        ];
        let decisions = |events: Vec<(&str, i64, DeploymentEvent)>| -> Vec<String> {
            lines(&history(events), &Filter::default())
                .into_iter()
                .filter(|line| line.contains("next:") || line.contains("why: no retry"))
                .map(|line| line.trim().to_owned())
                .collect()
        };

        let mut retried = first_run.clone();
        retried.extend([
            ("runner", 4_000, retry(3)),
            ("runner", 5_000, failure(4)),
            ("runner", 5_000, given_up(4)),
        ]);
        let all_used = "no retry: class backend-unreachable allows 1, all used";
        assert_eq!(
            decisions(retried),
            [
                "next: retry #1 at once".to_owned(),
                format!("next: {all_used}"),
                format!("why: {all_used}"),
                // Attempt 4 is the redriven run's second: its first retry.
                "next: retry #1 at once".to_owned(),
                format!("next: {all_used}"),
                format!("why: {all_used}"),
            ]
        );

        // Given up after the new run's first attempt: its one retry was not used.
        let mut not_retried = first_run;
        not_retried.push(("runner", 4_000, given_up(3)));
        let decided = decisions(not_retried);
        assert_eq!(
            decided[3..],
            ["next: no retry".to_owned(), "why: no retry".to_owned()]
        );
    }

    #[test]
    fn a_class_the_policy_does_not_retry_is_named() {
        let given = history(vec![
            ("ada", 0, requested(vec![step("build", &[])])),
            (
                "runner",
                1_000,
                DeploymentEvent::StepAttemptFailed {
                    step: "build".into(),
                    attempt: 1,
                    error_class: ErrorClass::StepFailed,
                    exit_code: Some(3),
                    message: "exited with code 3".into(),
                    duration_ms: 40,
                },
            ),
            (
                "runner",
                1_000,
                DeploymentEvent::StepFailed {
                    step: "build".into(),
                    attempts: 1,
                    error_class: ErrorClass::StepFailed,
                },
            ),
        ]);
        let filter = Filter::parse(None, &["StepAttemptFailed".into()], None).expect("a filter");
        assert_eq!(
            lines(&given, &filter),
            [
                "REV  TIME (UTC)               WHO     WHAT",
                "  1  2026-11-23 10:00:01.000  runner  step attempt failed: build#1 after 40ms",
                "                              why: step-failed, exit 3: exited with code 3",
                "                              next: no retry: class step-failed is not retried",
            ]
        );
    }

    #[test]
    fn a_dead_lettered_job_reads_as_its_attempt_and_its_deliveries() {
        let given = history(vec![(
            "orchestrator",
            0,
            DeploymentEvent::StepJobDeadLettered {
                step: "build".into(),
                attempt: 2,
                receives: 5,
            },
        )]);
        assert_eq!(
            lines(&given, &Filter::default())[1..],
            [
                "  0  2026-11-23 10:00:00.000  orchestrator  step job dead lettered: build#2",
                "                              why: its job was delivered 5 times without an outcome and moved to the",
                "                                   dead-letter queue",
            ]
        );
    }

    #[test]
    fn control_characters_in_recorded_text_are_shown_escaped() {
        let given = history(vec![(
            "ada\u{1b}[2J",
            0,
            DeploymentEvent::CancellationRequested {
                requested_by: "ada".into(),
                reason: "stop\u{1b}[31m now".into(),
            },
        )]);
        let text = lines(&given, &Filter::default()).join("\n");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("stop\\u{1b}[31m now"), "{text}");
    }

    #[test]
    fn filters_keep_the_events_of_a_step_of_some_types_from_a_revision_or_a_time() {
        let history = a_retried_publish();
        let kept = |filter: &Filter| -> Vec<u64> {
            history
                .iter()
                .filter(|e| filter.keeps(e))
                .map(|e| e.revision)
                .collect()
        };
        let parse = |step: Option<&str>, types: &[&str], since: Option<&str>| {
            let types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
            Filter::parse(step.map(str::to_owned), &types, since).expect("a filter")
        };
        assert_eq!(kept(&parse(Some("publish"), &[], None)), [2, 3, 4, 5, 6, 7]);
        assert_eq!(
            kept(&parse(
                None,
                &["stepstarted,step-succeeded", "SecretsPurged"],
                None
            )),
            [3, 6, 7, 8]
        );
        assert_eq!(kept(&parse(None, &[], Some("7"))), [7, 8, 9]);
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23T10:00:22Z"))),
            [7, 8, 9]
        );
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23 10:00:22.010"))),
            [8, 9],
            "a time as the timeline shows it is UTC"
        );
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23T11:00:22+01:00"))),
            [7, 8, 9]
        );
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23"))).len(),
            history.len(),
            "a day starts at midnight UTC"
        );
        assert!(kept(&parse(None, &[], Some("2026-11-24"))).is_empty());
        assert_eq!(
            kept(&parse(Some("publish"), &["StepStarted"], Some("4"))),
            [6],
            "filters combine"
        );
        assert!(kept(&parse(Some("publish"), &["SecretsPurged"], None)).is_empty());
        assert!(
            lines(&history, &parse(None, &[], Some("99"))).is_empty(),
            "nothing kept, nothing printed, not even the header"
        );
    }

    #[test]
    fn an_unknown_type_is_refused_listing_the_types() {
        let error = Filter::parse(None, &["StepStarted,StepExploded".into()], None)
            .expect_err("unknown type");
        assert_eq!(error, FilterError::UnknownType("StepExploded".into()));
        let message = error.to_string();
        assert!(message.starts_with("--type `StepExploded`: no such event type"));
        for known in DeploymentEvent::TYPES {
            assert!(message.contains(known), "{message}");
        }
        assert_eq!(
            Filter::parse(None, &["StepStarted,".into()], None),
            Err(FilterError::UnknownType(String::new())),
            "an empty type is a mistake too"
        );
    }

    #[test]
    fn a_since_that_is_neither_a_revision_nor_a_time_is_refused_saying_what_is_expected() {
        for bad in ["-1", "yesterday", "2026-13-01T00:00:00Z", "10:00"] {
            let error = Filter::parse(None, &[], Some(bad)).expect_err(bad);
            assert_eq!(error, FilterError::Since(bad.into()));
            let message = error.to_string();
            assert!(message.starts_with(&format!("--since `{bad}`: expected a revision number")));
            assert!(message.contains("RFC 3339"), "{message}");
        }
    }

    #[test]
    fn a_step_the_deployment_does_not_have_is_refused_naming_its_steps() {
        let history = a_retried_publish();
        let filter = Filter::parse(Some("pubish".into()), &[], None).expect("a filter");
        assert_eq!(
            filter.check_step(&history),
            Err(FilterError::UnknownStep {
                step: "pubish".into(),
                steps: vec!["publish".into()]
            })
        );
        let filter = Filter::parse(Some("publish".into()), &[], None).expect("a filter");
        assert_eq!(filter.check_step(&history), Ok(()));
    }
}
