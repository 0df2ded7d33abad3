//! `overture services`: the tenants' service registry, as the projector folds it from the log.
//!
//! No step registers a service through the engine yet, so the registrations are written into
//! the log the way a user moves a log: real deployments are recorded, exported, given
//! `ServiceRegistered` and `ServiceDeregistered` events before their ends, and imported into
//! another data directory, where `overture services` reads them back, and `overture replay`
//! rebuilds them.

use serde_json::{json, Value};

use crate::support::{id_of, text, Overture};

const APP: &str = "name: app\nsteps:\n  app: { run: noop }\n";

#[test]
fn an_empty_registry_is_said_plainly_and_as_no_tenants() {
    let overture = Overture::new();
    let output = overture.run(&["services"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "no service is registered\n");
    assert_eq!(
        overture.json(&["services", "--json"]),
        json!({ "tenants": [] })
    );
    let output = overture.run(&["services", "--tenant", "acme", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        shown,
        json!({ "tenants": [{ "tenant": "acme", "services": [] }] })
    );
}

fn registered(address: &str, port: u16, host: &str) -> Value {
    json!({
        "type": "ServiceRegistered",
        "data": { "service": "app", "step": "app", "host": host, "address": address, "port": port },
    })
}

/// The log's lines with `events` inserted into `stream` before its last event, its later
/// revisions and every position renumbered; each inserted event recorded as the event before
/// it was. Returns the lines and the time each inserted event was recorded.
fn with_events(lines: Vec<Value>, stream: &str, events: &[Value]) -> (Vec<Value>, String) {
    let last = lines
        .iter()
        .rposition(|line| line["stream"] == stream)
        .expect("the stream's events");
    let mut out = Vec::new();
    let mut recorded = String::new();
    for (index, mut line) in lines.into_iter().enumerate() {
        if index == last {
            let revision = line["revision"].as_u64().expect("a revision");
            let before = out
                .iter()
                .rev()
                .find(|l: &&Value| l["stream"] == stream)
                .cloned()
                .expect("an event before the end");
            recorded = before["metadata"]["recorded_at"]
                .as_str()
                .expect("a time")
                .to_owned();
            for (i, event) in events.iter().enumerate() {
                let mut inserted = before.clone();
                inserted["revision"] = json!(revision + i as u64);
                inserted["id"] = json!(uuid::Uuid::now_v7().to_string());
                inserted["type"] = event["type"].clone();
                inserted["data"] = event["data"].clone();
                out.push(inserted);
            }
            line["revision"] = json!(revision + events.len() as u64);
        }
        out.push(line);
    }
    for (n, line) in out.iter_mut().enumerate() {
        line["position"] = json!(n as u64 + 1);
    }
    (out, recorded)
}

#[test]
fn registered_instances_are_listed_per_tenant_and_service_and_rebuilt_by_a_replay() {
    let (from, file) = Overture::with_blueprint("app.yaml", APP);
    let mut ids = Vec::new();
    for tenant in ["acme", "globex"] {
        let (code, status, output) = from.deploy(&file, &["--tenant", tenant]);
        assert_eq!(code, 0, "{}", text(&output.stderr));
        ids.push(id_of(&status));
    }
    let export = from.run(&["export"]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    let lines: Vec<Value> = text(&export.stdout)
        .lines()
        .filter(|line| !line.starts_with("{\"trailer\""))
        .map(|line| serde_json::from_str(line).expect("JSON"))
        .collect();

    // acme: two instances of `app`, and a third that leaves again; globex: one.
    let leaving = json!({
        "type": "ServiceDeregistered",
        "data": { "service": "app", "step": "app", "host": "app-3", "address": "10.0.0.11",
                  "port": 8000, "reason": "replaced" },
    });
    let (lines, acme_at) = with_events(
        lines,
        &format!("deployment-{}", ids[0]),
        &[
            registered("10.0.0.9", 8000, "app-1"),
            registered("10.0.0.11", 8000, "app-3"),
            registered("10.0.0.10", 8000, "app-2"),
            leaving,
        ],
    );
    let (lines, globex_at) = with_events(
        lines,
        &format!("deployment-{}", ids[1]),
        &[registered("192.0.2.7", 9000, "edge\u{1b}[31m")],
    );
    // Signed anew by the engine that exported it, whose key the importer trusts.
    let log = from.signed_export(&lines);

    let to = Overture::new();
    let imported = to.blueprint("log.jsonl", &log);
    let key = from.key();
    let output = to.run(&["import", imported.to_str().expect("utf-8"), "--trust", &key]);
    assert!(output.status.success(), "{}", text(&output.stderr));

    let instance = |host: &str, address: &str, port: u16, id: &str, at: &str| {
        json!({
            "host": host, "address": address, "port": port,
            "member": format!("{address}:{port}"), "deployment": id, "step": "app",
            "registered_at": at,
        })
    };
    let acme = json!({
        "tenant": "acme",
        "services": [{
            "service": "app",
            "count": 2,
            "instances": [
                instance("app-2", "10.0.0.10", 8000, &ids[0], &acme_at),
                instance("app-1", "10.0.0.9", 8000, &ids[0], &acme_at),
            ],
        }],
    });
    let globex = json!({
        "tenant": "globex",
        "services": [{
            "service": "app",
            "count": 1,
            "instances": [instance("edge\u{1b}[31m", "192.0.2.7", 9000, &ids[1], &globex_at)],
        }],
    });
    let everything = json!({ "tenants": [acme, globex] });
    assert_eq!(to.json(&["services", "--json"]), everything);
    assert_eq!(
        to.json(&["services", "--tenant", "globex", "--json"]),
        json!({ "tenants": [globex] })
    );

    let output = to.run(&["services"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let shown = text(&output.stdout);
    let rows: Vec<&str> = shown.lines().collect();
    assert_eq!(rows[0], "tenant acme");
    assert_eq!(rows[1], "  app  2 members");
    assert!(
        rows[2].trim_start().starts_with("10.0.0.10:8000")
            && rows[2].contains("host app-2")
            && rows[2].contains(&format!("deployment {}", ids[0]))
            && rows[2].contains("step app"),
        "{shown}"
    );
    assert!(rows[3].trim_start().starts_with("10.0.0.9:8000"), "{shown}");
    assert!(
        !shown.contains("10.0.0.11"),
        "the instance that left: {shown}"
    );
    assert!(shown.contains("tenant globex"), "{shown}");
    // A host name is user text: its control characters are shown escaped, never sent.
    assert!(shown.contains("host edge\\u{1b}[31m"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "{shown}");

    // A rebuild of the read models from the log gives the same registry, and agrees with it.
    let output = to.run(&["replay"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(to.json(&["services", "--json"]), everything);
    let output = to.run(&["replay", "--check"]);
    assert!(
        output.status.success(),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}
