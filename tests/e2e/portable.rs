//! `overture export` and `overture import`: the log as portable JSON lines, moved to another
//! data directory with everything a reader sees preserved, and refused whole when a line is bad.

use crate::support::{text, Overture};

const FLAKY: &str = r#"
name: flaky
steps:
  flaky:
    run: script
    retry: { step-failed: { times: 2, wait: 100ms } }
    with: { command: 'echo "attempt $OVERTURE_ATTEMPT"; echo "$OVERTURE_ATTEMPT" | grep -qx 2' }
  after:
    run: noop
    needs: [flaky]
"#;

const BROKEN: &str = r#"
name: broken
steps:
  breaks:
    run: script
    with: { command: "echo 'no such thing' >&2; exit 3" }
"#;

/// A data directory with three deployments of two tenants: one retried to success, one failed.
fn recorded() -> (Overture, Vec<String>) {
    let overture = Overture::new();
    let flaky = overture.blueprint("flaky.yaml", FLAKY);
    let broken = overture.blueprint("broken.yaml", BROKEN);
    let mut ids = Vec::new();
    for (file, tenant) in [(&flaky, "acme"), (&broken, "acme"), (&flaky, "globex")] {
        let (_, status, output) = overture.deploy(file, &["--tenant", tenant]);
        ids.push(
            status["id"]
                .as_str()
                .unwrap_or_else(|| panic!("a status: {}", text(&output.stderr)))
                .to_owned(),
        );
    }
    (overture, ids)
}

/// Everything a reader of the data directory is shown, byte for byte.
fn shown(overture: &Overture, ids: &[String]) -> Vec<(String, String)> {
    let mut commands: Vec<Vec<String>> = vec![
        vec!["list".into(), "--json".into()],
        vec!["tenants".into(), "--json".into()],
        vec!["grants".into(), "--json".into()],
    ];
    for id in ids {
        commands.push(vec!["status".into(), id.clone(), "--json".into()]);
        commands.push(vec!["events".into(), id.clone(), "--json".into()]);
    }
    commands
        .iter()
        .map(|args| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let output = overture.run(&args);
            assert!(
                output.status.success(),
                "{args:?}: {}",
                text(&output.stderr)
            );
            (args.join(" "), text(&output.stdout))
        })
        .collect()
}

fn export(overture: &Overture, args: &[&str]) -> String {
    let mut all = vec!["export"];
    all.extend_from_slice(args);
    let output = overture.run(&all);
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn an_export_imported_elsewhere_shows_the_same_and_a_second_import_changes_nothing() {
    let (from, ids) = recorded();
    let log = export(&from, &[]);
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    assert!(lines.len() > 15, "{log}");
    for (n, line) in lines.iter().enumerate() {
        assert_eq!(line["position"], n as u64 + 1, "the log's own order");
        for field in ["stream", "revision", "id", "type", "data", "metadata"] {
            assert!(!line[field].is_null(), "{field} in {line}");
        }
    }

    let (to, file) = Overture::with_blueprint("log.jsonl", &log);
    let output = to.run(&["import", file.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).starts_with(&format!("imported {} event(s)", lines.len())),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(shown(&to, &ids), shown(&from, &ids));
    assert_eq!(
        export(&to, &[]),
        log,
        "ids, revisions, times and positions as they were"
    );

    let again = to.run(&["import", file.to_str().expect("utf-8")]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains(&format!("imported 0 event(s) from {}", file.display())),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(shown(&to, &ids), shown(&from, &ids));
    assert_eq!(export(&to, &[]), log);
}

#[test]
fn an_export_of_one_tenant_or_since_a_position_holds_only_those_events() {
    let (from, ids) = recorded();
    let whole = export(&from, &[]);
    let globex = export(&from, &["--tenant", "globex"]);
    assert!(!globex.is_empty());
    for line in globex.lines() {
        let event: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(event["metadata"]["tenant"], "globex", "{line}");
        assert_eq!(event["stream"], format!("deployment-{}", ids[2]));
    }

    let first: Vec<&str> = whole.lines().take(5).collect();
    let rest = export(&from, &["--since", "5"]);
    assert_eq!(
        format!("{}\n{rest}", first.join("\n")),
        whole,
        "an export since the fifth event carries on where the first five stop"
    );

    // Imported one after the other, the two parts make the whole log.
    let to = Overture::new();
    let head = to.blueprint("head.jsonl", &format!("{}\n", first.join("\n")));
    let tail = to.blueprint("tail.jsonl", &rest);
    for file in [&head, &tail] {
        let output = to.run(&["import", file.to_str().expect("utf-8")]);
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    assert_eq!(export(&to, &[]), whole);
}

#[test]
fn a_corrupted_or_reordered_line_is_refused_with_its_number_and_nothing_is_imported() {
    let (from, _) = recorded();
    let log = export(&from, &[]);
    let lines: Vec<&str> = log.lines().collect();

    let mut corrupted = lines.clone();
    let garbled = corrupted[6].replacen('{', "[", 1);
    corrupted[6] = &garbled;
    let mut reordered = lines.clone();
    reordered.swap(3, 4);
    // Within one stream: the second attempt's events before the first's.
    let mut skipped = lines.clone();
    skipped.remove(2);
    let mut wrong_type = lines.clone();
    let mistyped = wrong_type[1].replacen("\"type\":\"", "\"type\":\"NoSuchEvent", 1);
    wrong_type[1] = &mistyped;

    for (name, body, line, says) in [
        ("corrupted", corrupted, 7, "not a JSON object"),
        ("reordered", reordered, 5, "out of the log's order"),
        ("skipped", skipped, 3, "takes revision"),
        ("mistyped", wrong_type, 2, "is not a `NoSuchEvent"),
    ] {
        let (to, file) =
            Overture::with_blueprint(&format!("{name}.jsonl"), &(body.join("\n") + "\n"));
        let output = to.run(&["import", file.to_str().expect("utf-8")]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{}:{line}: ", file.display())) && stderr.contains(says),
            "{name}: {stderr}"
        );
        assert!(stderr.contains("nothing was imported"), "{name}: {stderr}");
        assert_eq!(export(&to, &[]), "", "{name}: nothing imported");
    }
}

#[test]
fn an_import_that_contradicts_the_log_is_refused_and_changes_nothing() {
    let (from, _) = recorded();
    let log = export(&from, &[]);
    // The same deployment's first event with other content, in a log that already has it.
    let (to, file) = Overture::with_blueprint("log.jsonl", &log);
    assert!(to
        .run(&["import", file.to_str().expect("utf-8")])
        .status
        .success());
    let first = log.lines().next().expect("a line");
    let altered = to.blueprint(
        "altered.jsonl",
        &format!("{}\n", first.replacen("\"acme\"", "\"initech\"", 1)),
    );
    let output = to.run(&["import", altered.to_str().expect("utf-8")]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(":1: ") && stderr.contains("with other content"),
        "{stderr}"
    );
    assert_eq!(export(&to, &[]), log);
}
