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

/// The export's event lines, without its signed trailer (the last line).
fn events_of(export: &str) -> Vec<&str> {
    export
        .lines()
        .filter(|line| !line.starts_with("{\"trailer\""))
        .collect()
}

/// The engine's public key, as `overture key` prints it.
fn key_of(overture: &Overture) -> String {
    let output = overture.run(&["key"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout)
        .lines()
        .next()
        .expect("a key")
        .to_owned()
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
    let lines: Vec<serde_json::Value> = events_of(&log)
        .into_iter()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    assert!(lines.len() > 15, "{log}");
    for (n, line) in lines.iter().enumerate() {
        assert_eq!(line["position"], n as u64 + 1, "the log's own order");
        for field in ["stream", "revision", "id", "type", "data", "metadata"] {
            assert!(!line[field].is_null(), "{field} in {line}");
        }
        assert!(line["metadata"]["hash"].is_string(), "chained: {line}");
    }
    let trust = key_of(&from);

    let (to, file) = Overture::with_blueprint("log.jsonl", &log);
    let untrusted = to.run(&["import", file.to_str().expect("utf-8")]);
    let stderr = text(&untrusted.stderr);
    assert_eq!(untrusted.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--trust") && stderr.contains("SHA256:"),
        "{stderr}"
    );
    let output = to.run(&["import", file.to_str().expect("utf-8"), "--trust", &trust]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).starts_with(&format!("imported {} event(s)", lines.len())),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(shown(&to, &ids), shown(&from, &ids));
    assert_eq!(
        events_of(&export(&to, &[])),
        events_of(&log),
        "ids, revisions, times, positions and chains as they were"
    );
    let verified = to.run(&["verify"]);
    assert!(verified.status.success(), "{}", text(&verified.stderr));

    let again = to.run(&["import", file.to_str().expect("utf-8"), "--trust", &trust]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).contains(&format!("imported 0 event(s) from {}", file.display())),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(shown(&to, &ids), shown(&from, &ids));
    assert_eq!(events_of(&export(&to, &[])), events_of(&log));
}

#[test]
fn an_export_of_one_tenant_or_since_a_position_holds_only_those_events() {
    let (from, ids) = recorded();
    let whole = export(&from, &[]);
    let globex = export(&from, &["--tenant", "globex"]);
    assert!(!globex.is_empty());
    for line in events_of(&globex) {
        let event: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(event["metadata"]["tenant"], "globex", "{line}");
        assert_eq!(event["stream"], format!("deployment-{}", ids[2]));
    }

    let first: Vec<&str> = whole.lines().take(5).collect();
    let rest = export(&from, &["--since", "5"]);
    let mut joined = first.clone();
    joined.extend(events_of(&rest));
    assert_eq!(
        joined,
        events_of(&whole),
        "an export since the fifth event carries on where the first five stop"
    );

    // Lines cut from an export carry no signed trailer: refused, saying how to make one.
    let to = Overture::new();
    let head = to.blueprint("head.jsonl", &format!("{}\n", first.join("\n")));
    let output = to.run(&["import", head.to_str().expect("utf-8")]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("signed trailer") && stderr.contains("overture export"),
        "{stderr}"
    );

    // The part since the fifth event, onto a log that holds the first five: its first line
    // follows them, and it imports.
    let own = to.blueprint("whole.jsonl", &whole);
    let trust = key_of(&from);
    let output = to.run(&["import", own.to_str().expect("utf-8"), "--trust", &trust]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let tail = to.blueprint("tail.jsonl", &rest);
    let output = to.run(&["import", tail.to_str().expect("utf-8"), "--trust", &trust]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(events_of(&export(&to, &[])), events_of(&whole));
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
        ("reordered", reordered, 4, "takes revision 3 next"),
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
        assert!(
            events_of(&export(&to, &[])).is_empty(),
            "{name}: nothing imported"
        );
    }
}

#[test]
fn an_import_that_contradicts_the_log_is_refused_and_changes_nothing() {
    let (from, _) = recorded();
    let log = export(&from, &[]);
    // The same deployment's first event with other content, in a log that already has it.
    let (to, file) = Overture::with_blueprint("log.jsonl", &log);
    assert!(to
        .run(&[
            "import",
            file.to_str().expect("utf-8"),
            "--trust",
            &key_of(&from)
        ])
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
    assert_eq!(events_of(&export(&to, &[])), events_of(&log));
}

/// Imports `body` into a new data directory trusting `from`'s key; returns the exit code and
/// what it said.
fn import_edited(from: &Overture, name: &str, body: &str) -> (Option<i32>, String, Overture) {
    let (to, file) = Overture::with_blueprint(&format!("{name}.jsonl"), body);
    let output = to.run(&[
        "import",
        file.to_str().expect("utf-8"),
        "--trust",
        &key_of(from),
    ]);
    let said = format!("{}: {}", file.display(), text(&output.stderr));
    (output.status.code(), said, to)
}

// An export edited on the way (an output, the requester, the tenant, a failure made a success,
// a line deleted, moved or repeated) is refused naming the line, and nothing is imported.
#[test]
fn an_edited_export_is_refused_naming_the_line() {
    let (from, _) = recorded();
    let log = export(&from, &[]);
    let lines: Vec<String> = log.lines().map(str::to_owned).collect();
    let find = |needle: &str| {
        lines
            .iter()
            .position(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("a line with {needle} in {log}"))
    };
    let edit = |at: usize, from_text: &str, to_text: &str| {
        let mut edited = lines.clone();
        assert!(edited[at].contains(from_text), "{}", edited[at]);
        edited[at] = edited[at].replacen(from_text, to_text, 1);
        (edited.join("\n") + "\n", at + 1)
    };
    let failed = find("\"type\":\"DeploymentFailed\"");
    let requested = find("\"requested_by\":\"");
    let mut deleted = lines.clone();
    deleted.remove(3);
    let mut moved = lines.clone();
    let line = moved.remove(2);
    moved.insert(4, line);
    let mut repeated = lines.clone();
    repeated.insert(6, lines[5].clone());
    let cases: Vec<(&str, (String, usize), &str)> = vec![
        (
            "requester",
            edit(requested, "\"requested_by\":\"", "\"requested_by\":\"m"),
            "does not follow",
        ),
        (
            "tenant",
            edit(1, "\"tenant\":\"acme\"", "\"tenant\":\"initech\""),
            "does not follow",
        ),
        (
            "failed-succeeded",
            edit(
                failed,
                "\"type\":\"DeploymentFailed\"",
                "\"type\":\"DeploymentSucceeded\"",
            ),
            "",
        ),
        ("deleted", (deleted.join("\n") + "\n", 4), "takes revision"),
        ("moved", (moved.join("\n") + "\n", 3), "takes revision"),
        (
            "repeated",
            (repeated.join("\n") + "\n", 7),
            "line 6 holds it already",
        ),
    ];
    for (name, (body, line), says) in cases {
        let (code, said, to) = import_edited(&from, name, &body);
        assert_eq!(code, Some(2), "{name}: {said}");
        assert!(
            said.contains(&format!(".jsonl:{line}: ")),
            "{name}: line {line}: {said}"
        );
        assert!(said.contains(says), "{name}: {said}");
        assert!(said.contains("nothing was imported"), "{name}: {said}");
        assert!(
            events_of(&export(&to, &[])).is_empty(),
            "{name}: nothing imported"
        );
    }
}

// `verify` finds every chain whole, and names the event an edit of the SQLite file changed:
// its deployment, revision and position.
#[test]
fn verify_names_the_event_edited_in_the_sqlite_file() {
    let (overture, ids) = recorded();
    let output = overture.run(&["verify"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("every chain whole"),
        "{}",
        text(&output.stdout)
    );

    let db = overture.data_dir().join("overture.db");
    let status = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg(
            "UPDATE events SET type = 'DeploymentSucceeded', data = '{}'
             WHERE type = 'DeploymentFailed'",
        )
        .status()
        .expect("sqlite3 runs");
    assert!(status.success());
    let output = overture.run(&["verify"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("deployment {}", ids[1]))
            && stderr.contains("content was changed"),
        "{stderr}"
    );
    let one = overture.run(&["verify", &ids[0]]);
    assert!(one.status.success(), "{}", text(&one.stderr));
}

// A log an older Overture wrote (no hashes) is chained once when this version first opens it;
// `verify` says so, and an edit made after that is caught.
#[test]
fn an_older_log_is_sealed_on_first_open_and_a_later_edit_is_caught() {
    let (overture, ids) = recorded();
    let db = overture.data_dir().join("overture.db");
    let sqlite = |sql: &str| {
        let output = std::process::Command::new("sqlite3")
            .arg(&db)
            .arg(sql)
            .output()
            .expect("sqlite3 runs");
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout).trim().to_owned()
    };
    // As an Overture before the chain left it: no links, never sealed.
    sqlite(
        "UPDATE events SET metadata = json_remove(metadata, '$.previous', '$.hash');
         DELETE FROM chain_seals;",
    );
    let count = sqlite("SELECT count(*) FROM events");
    let last = sqlite("SELECT max(position) FROM events");

    let output = overture.run(&["verify"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(stdout.contains("every chain whole"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "events up to position {last} ({count} of them) were recorded before the log was \
             chained and sealed on first read at"
        )),
        "{stdout}"
    );
    assert_eq!(
        sqlite("SELECT count(*) FROM events WHERE json_extract(metadata, '$.hash') IS NULL"),
        "0",
        "every event chained"
    );
    assert_eq!(sqlite("SELECT count(*) FROM chain_seals"), "1");
    let again = overture.run(&["verify"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        sqlite("SELECT count(*) FROM chain_seals"),
        "1",
        "sealed once, not on every open"
    );

    // After the sealing, an edit shows.
    sqlite(&format!(
        "UPDATE events SET metadata = json_set(metadata, '$.actor', 'mallory')
         WHERE stream = 'deployment-{}' AND revision = 0",
        ids[2]
    ));
    let output = overture.run(&["verify"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("deployment {}, revision 0", ids[2]))
            && stderr.contains("content was changed"),
        "{stderr}"
    );
}

/// Runs `overture` to its end; returns its exit code, its stderr and its peak resident set
/// size in KiB (the kernel's `ru_maxrss`, read as it is reaped).
fn run_measured(overture: &Overture, args: &[&str]) -> (Option<i32>, String, i64) {
    let stderr_path = overture.data_dir().with_extension("stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("a stderr file");
    // Reaped below by wait4, which also gives its resource usage.
    #[allow(clippy::zombie_processes)]
    let child = overture
        .command(args)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("overture starts");
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with pointers to live locals.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "{}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let said = std::fs::read_to_string(&stderr_path).expect("stderr");
    (code, said, usage.ru_maxrss)
}

// A 1 GiB line is refused as soon as it passes the line cap, naming the line and the cap,
// without the file (or the line) ever held in memory.
#[test]
fn an_import_of_a_one_gib_line_is_refused_in_bounded_memory() {
    let to = Overture::new();
    let path = to.blueprint("huge.jsonl", "");
    {
        // Sparse: the line costs no disk and no time to make.
        let mut file = std::fs::File::create(&path).expect("create");
        std::io::Write::write_all(
            &mut file,
            b"{\"position\":1,\"stream\":\"deployment-0190d9e4-0000-7000-8000-000000000001\",\
              \"data\":\"",
        )
        .expect("write");
        file.set_len(1 << 30).expect("a 1 GiB file");
    }
    let file = path.to_str().expect("utf-8");
    let (code, stderr, peak_kib) = run_measured(&to, &["import", file]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{file}:1: the line is longer than 16777216 bytes"))
            && stderr.contains("nothing was imported"),
        "{stderr}"
    );
    eprintln!("import of a 1 GiB line: peak RSS {peak_kib} KiB");
    assert!(
        peak_kib < 200 * 1024,
        "the import held {peak_kib} KiB at its peak"
    );
}
