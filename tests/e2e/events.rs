//! `overture events`: the timeline of a deployment with a retried failing step, its filters
//! (`--step`, `--type`, `--since`, together and with `--json`) and the mistakes they refuse.

use serde_json::Value;

use crate::support::{text, types, Overture};

const SECRET: &str = "timeline-secret-5e1f";

/// `build` fails twice (the second time for good), saying the secret, which is masked.
const RETRIED: &str = r#"
name: retried
secrets: [token]
steps:
  fetch:
    run: script
    with: { command: 'echo "version=1.4.2" >> "$OVERTURE_OUTPUTS"' }
  build:
    run: script
    needs: [fetch]
    retry: { step-failed: { times: 1, wait: 200ms } }
    with: { command: 'echo "token {{ secrets.token }} refused"; exit 3' }
"#;

/// Runs `overture events ID ARGS... --json`, expecting success: the envelopes printed.
fn envelopes(o: &Overture, id: &str, args: &[&str]) -> Vec<Value> {
    events_printed(o, &[&["events", id, "--json"], args].concat())
        .lines()
        .map(|line| serde_json::from_str(line).expect("one envelope per line"))
        .collect()
}

/// Runs `overture events ID ARGS...` expecting success: the timeline's lines.
fn timeline(o: &Overture, id: &str, args: &[&str]) -> Vec<String> {
    events_printed(o, &[&["events", id], args].concat())
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `overture` with `all` (an `events` command), expecting success: what it printed.
fn events_printed(o: &Overture, all: &[&str]) -> String {
    let output = o.run(all);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{all:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// The revisions of envelopes.
fn revisions(envelopes: &[Value]) -> Vec<u64> {
    envelopes
        .iter()
        .map(|e| e["revision"].as_u64().expect("a revision"))
        .collect()
}

#[test]
fn events_reads_as_a_timeline_with_the_retry_decision_and_filters_it_and_its_json() {
    let (o, file) = Overture::with_blueprint("retried.yaml", RETRIED);
    let output = o
        .command(&["deploy", file.to_str().expect("utf-8 path"), "--json"])
        .args(["--tenant", "acme", "--secret", "token=OVERTURE_E2E_SECRET"])
        .env("OVERTURE_E2E_SECRET", SECRET)
        .env("USER", "ada")
        .output()
        .expect("run overture");
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).expect("the status");
    let id = status["id"].as_str().expect("an id");

    // The timeline: who asked for what, then each attempt's failure, why, and what followed.
    let all = timeline(&o, id, &[]);
    let shown = all.join("\n");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(all[0].starts_with("REV  TIME (UTC)"), "a header: {shown}");
    assert!(
        all[1].ends_with("ada           deployment requested: retried for tenant acme"),
        "{shown}"
    );
    assert!(all[2].trim() == "by: ada via cli", "{shown}");
    let after = |what: &str| -> Vec<String> {
        let at = all
            .iter()
            .position(|line| line.contains(what))
            .unwrap_or_else(|| panic!("no line with {what:?}:\n{shown}"));
        all[at + 1..]
            .iter()
            .take_while(|line| line.starts_with("   "))
            .map(|line| line.trim().to_owned())
            .collect()
    };
    let first = after("step attempt failed: build#1 after ");
    assert_eq!(
        first[..2],
        [
            "why: step-failed, exit 3: exited with code 3",
            "output: token *** refused"
        ],
        "{shown}"
    );
    assert!(
        first[2].starts_with("next: retry #1 in 200ms (at ") && first[2].ends_with(')'),
        "the retry decision and its wait: {shown}"
    );
    assert_eq!(
        after("step attempt failed: build#2 after ")[2],
        "next: no retry: class step-failed allows 1, all used",
        "{shown}"
    );
    assert!(
        all.iter()
            .any(|line| line.ends_with("step failed: build after 2 attempts (step-failed)")),
        "{shown}"
    );

    // --json is still one envelope per line, every one of them unfiltered.
    let every = envelopes(&o, id, &[]);
    let kinds = types(&every);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("DeploymentRequested")
    );
    assert_eq!(kinds.last().map(String::as_str), Some("DeploymentFailed"));
    for envelope in &every {
        let mut keys: Vec<&str> = envelope
            .as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["data", "id", "metadata", "revision", "stream", "type"]
        );
    }

    // --step: that step's events, and nothing else.
    let build = envelopes(&o, id, &["--step", "build"]);
    assert_eq!(
        types(&build),
        [
            "StepScheduled",
            "StepStarted",
            "StepAttemptFailed",
            "StepRetryScheduled",
            "StepStarted",
            "StepAttemptFailed",
            "StepFailed"
        ]
    );
    assert!(build.iter().all(|e| e["data"]["step"] == "build"));
    assert_eq!(
        build,
        every
            .iter()
            .filter(|e| e["data"]["step"] == "build")
            .cloned()
            .collect::<Vec<_>>(),
        "the same envelopes, only filtered"
    );

    // --type: repeatable, comma-separated, any case.
    let failures = envelopes(
        &o,
        id,
        &[
            "--type",
            "stepattemptfailed,StepRetryScheduled",
            "--type",
            "STEPFAILED",
        ],
    );
    assert_eq!(
        types(&failures),
        [
            "StepAttemptFailed",
            "StepRetryScheduled",
            "StepAttemptFailed",
            "StepFailed"
        ]
    );

    // --since: a revision, or a time, at or after it.
    let from = &failures[0];
    let revision = from["revision"].as_u64().expect("revision");
    let since = envelopes(&o, id, &["--since", &revision.to_string()]);
    assert_eq!(
        revisions(&since),
        (revision..every.len() as u64).collect::<Vec<_>>()
    );
    let time = from["metadata"]["recorded_at"].as_str().expect("a time");
    let since_time = envelopes(&o, id, &["--since", time]);
    let recorded = |e: &Value| {
        chrono::DateTime::parse_from_rfc3339(e["metadata"]["recorded_at"].as_str().expect("time"))
            .expect("RFC 3339")
    };
    let cut = recorded(from);
    assert_eq!(
        revisions(&since_time),
        revisions(
            &every
                .iter()
                .filter(|e| recorded(e) >= cut)
                .cloned()
                .collect::<Vec<_>>()
        )
    );
    assert!(since_time.iter().any(|e| e["revision"] == revision));

    // Filters combine, on the timeline as on --json.
    let combined = [
        "--step",
        "build",
        "--type",
        "StepStarted",
        "--since",
        &revision.to_string(),
    ];
    let second_start = envelopes(&o, id, &combined);
    assert_eq!(types(&second_start), ["StepStarted"]);
    assert_eq!(second_start[0]["data"]["attempt"], 2);
    let lines = timeline(&o, id, &combined);
    assert_eq!(lines.len(), 2, "the header and one event: {lines:?}");
    assert!(
        lines[1].ends_with("  runner  step started: build#2"),
        "{lines:?}"
    );

    // A filter that matches nothing prints nothing, and is no error.
    for json in [true, false] {
        let mut args = vec!["events", id, "--step", "fetch", "--type", "StepFailed"];
        if json {
            args.push("--json");
        }
        let output = o.run(&args);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert_eq!(text(&output.stdout), "", "{args:?}");
    }

    // Mistakes are bad input, naming the flag and what to do.
    for (args, said) in [
        (
            vec!["--type", "StepExploded"],
            vec![
                "--type `StepExploded`",
                "StepAttemptFailed",
                "StepRetryScheduled",
            ],
        ),
        (
            vec!["--since", "yesterday"],
            vec!["--since `yesterday`", "revision number", "RFC 3339"],
        ),
        (
            vec!["--step", "biuld"],
            vec!["--step `biuld`", "its steps are: fetch, build"],
        ),
    ] {
        let mut all = vec!["events", id];
        all.extend_from_slice(&args);
        let output = o.run(&all);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&output.stdout), "", "{args:?}");
        let stderr = text(&output.stderr);
        for words in said {
            assert!(stderr.contains(words), "{args:?}: {stderr}");
        }
    }
    let unknown = o.run(&[
        "events",
        "0192e4c5-6f1a-7c3e-9b1d-2f4a5b6c7d8e",
        "--type",
        "StepFailed",
    ]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("no deployment"));
}
