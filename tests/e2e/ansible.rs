//! The `ansible` kind for real: `ansible-playbook` in the sandbox logs in over SSH, with the
//! deployment's own key, to an sshd the test started on loopback (or to a port nobody listens
//! on), and the tests look at what it did on the host, in the history and in the data directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::servers::{closed_port, Sshd};
use crate::support::{
    assert_causal, assert_step, files_containing, step_events, text, types, Overture,
};

/// Writes the blueprint and, beside it, `playbook/site.yml`; returns the blueprint's path.
fn blueprint_with_playbook(overture: &Overture, blueprint: &str, playbook: &str) -> PathBuf {
    let file = overture.blueprint("ansible.yaml", blueprint);
    let folder = file.parent().expect("a folder").join("playbook");
    std::fs::create_dir_all(&folder).expect("playbook folder");
    std::fs::write(folder.join("site.yml"), playbook).expect("write the playbook");
    file
}

/// The failed attempts of a step, as (error class, exit code).
fn failures(events: &[Value], step: &str) -> Vec<(String, Option<i64>)> {
    events
        .iter()
        .filter(|e| e["type"] == "StepAttemptFailed" && e["data"]["step"] == step)
        .map(|e| {
            (
                e["data"]["error_class"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["data"]["exit_code"].as_i64(),
            )
        })
        .collect()
}

fn count(events: &[(String, u64)], kind: &str) -> usize {
    events.iter().filter(|(t, _)| t == kind).count()
}

/// The SHA-256 fingerprint (`SHA256:...`) of the deployment's public key, from its history.
fn key_fingerprint(events: &[Value]) -> String {
    let public = events
        .iter()
        .find(|e| e["type"] == "CredentialsSealed")
        .and_then(|e| e["data"]["ssh_public_key"].as_str())
        .expect("CredentialsSealed carries the deployment's public key");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("key.pub");
    std::fs::write(&path, format!("{public}\n")).expect("write the public key");
    let output = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(&path)
        .output()
        .expect("run ssh-keygen");
    assert!(
        output.status.success(),
        "ssh-keygen -lf: {}",
        text(&output.stderr)
    );
    // "256 SHA256:... comment (ED25519)"
    text(&output.stdout)
        .split_whitespace()
        .nth(1)
        .expect("a fingerprint")
        .to_owned()
}

#[test]
fn an_unreachable_host_exits_4_and_is_tried_twice() {
    let overture = Overture::new();
    let port = closed_port();
    let file = blueprint_with_playbook(
        &overture,
        &format!(
            r#"
name: unreachable
steps:
  configure:
    run: ansible
    timeout: 2m
    with: {{ playbook: playbook/site.yml, hosts: ["127.0.0.1:{port}"] }}
"#
        ),
        "- hosts: all\n  tasks:\n    - ansible.builtin.ping:\n",
    );
    let status = overture.deploy_failed(&file, &[]);
    assert_step(&status, "configure", "failed", 2);
    assert_eq!(
        status["steps"]["configure"]["error_class"],
        "host-unreachable"
    );

    let id = status["id"].as_str().expect("id");
    let events = overture.events(id);
    assert_causal(&events, &BTreeMap::new());
    let steps = step_events(&events, "configure");
    assert_eq!(count(&steps, "StepStarted"), 2, "{steps:?}");
    assert_eq!(count(&steps, "StepRetryScheduled"), 1, "{steps:?}");
    assert_eq!(
        failures(&events, "configure"),
        vec![("host-unreachable".to_owned(), Some(4)); 2]
    );
    let message = events
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .and_then(|e| e["data"]["message"].as_str())
        .expect("a message");
    assert!(
        message.contains(&format!("could not reach 127_0_0_1_{port}"))
            && message.contains("UNREACHABLE"),
        "{message}"
    );
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("DeploymentFailed")
    );
}

#[test]
fn a_failing_task_on_a_real_host_fails_the_step_at_once() {
    let sshd = Sshd::start();
    let overture = Overture::new();
    let file = blueprint_with_playbook(
        &overture,
        &format!(
            r#"
name: refuses
hosts:
  web: ["{}"]
steps:
  configure:
    run: ansible
    timeout: 2m
    with: {{ playbook: playbook/site.yml, hosts: web }}
"#,
            sshd.address()
        ),
        // Gathering facts logs in first, so the failure happens on the host, not before.
        "- hosts: web\n  tasks:\n    - ansible.builtin.fail: { msg: refused on purpose }\n",
    );
    let status = overture.deploy_failed(&file, &[]);
    assert_eq!(status["steps"]["configure"]["attempts"], 1);

    let id = status["id"].as_str().expect("id");
    let events = overture.events(id);
    assert_causal(&events, &BTreeMap::new());
    let steps = step_events(&events, "configure");
    assert_eq!(count(&steps, "StepStarted"), 1, "{steps:?}");
    assert_eq!(count(&steps, "StepRetryScheduled"), 0, "{steps:?}");
    assert_eq!(count(&steps, "StepFailed"), 1, "{steps:?}");
    assert_eq!(
        failures(&events, "configure"),
        vec![("step-failed".to_owned(), Some(2))]
    );
    let message = events
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .and_then(|e| e["data"]["message"].as_str())
        .expect("a message");
    let host = format!("127_0_0_1_{}", sshd.port());
    assert!(
        message.starts_with(&format!("the playbook failed on {host}"))
            && message.contains("refused on purpose"),
        "{message}"
    );
    assert!(
        sshd.log().contains("Accepted publickey for root"),
        "ansible logged in before the task failed:\n{}",
        sshd.log()
    );
    assert_eq!(
        types(&events).last().map(String::as_str),
        Some("DeploymentFailed")
    );
}

#[test]
fn a_playbook_configures_real_hosts_with_the_deployments_key() {
    let sshd = Sshd::start();
    let overture = Overture::new();
    // One sshd, reached as two inventory hosts.
    let port = sshd.port();
    let hosts = [format!("127_0_0_1_{port}"), format!("localhost_{port}")];
    let file = blueprint_with_playbook(
        &overture,
        &format!(
            r#"
name: configures
params:
  note: {{}}
hosts:
  web: ["127.0.0.1:{port}", "localhost:{port}"]
steps:
  configure:
    run: ansible
    timeout: 2m
    with:
      playbook: playbook/site.yml
      hosts: web
      user: root
      vars: {{ target: "{target}", note: "{{{{ params.note }}}}", lines: [a, b] }}
  report:
    run: script
    needs: [configure]
    with: {{ command: 'echo "seen={{{{ steps.configure.outputs.{host}_changed }}}}/{{{{ steps.configure.outputs.changed }}}}" >> "$OVERTURE_OUTPUTS"' }}
"#,
            target = sshd.scratch().display(),
            host = hosts[0],
        ),
        r#"- hosts: web
  tasks:
    - name: write a file per host
      ansible.builtin.copy:
        dest: "{{ target }}/{{ inventory_hostname }}"
        content: "note={{ note }}\nhost={{ ansible_host }}\nlines={{ lines | join(',') }}\n"
"#,
    );
    // A value that looks like a template reaches the playbook as it is, never evaluated.
    let (code, status, output) = overture.deploy(&file, &["--param", "note={{ 7 * 6 }}"]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(status["status"], "succeeded");

    for (name, address) in hosts.iter().zip(["127.0.0.1", "localhost"]) {
        let written = std::fs::read_to_string(sshd.scratch().join(name))
            .unwrap_or_else(|e| panic!("the playbook wrote no file for {name}: {e}"));
        assert_eq!(
            written,
            format!("note={{{{ 7 * 6 }}}}\nhost={address}\nlines=a,b\n")
        );
    }

    // Per host, gathering facts and the copy are ok, and the copy changed something.
    let mut expected = serde_json::Map::new();
    for (field, total, each) in [
        ("ok", 4, 2),
        ("changed", 2, 1),
        ("failed", 0, 0),
        ("unreachable", 0, 0),
    ] {
        expected.insert(field.to_owned(), Value::from(total.to_string()));
        for host in &hosts {
            expected.insert(format!("{host}_{field}"), Value::from(each.to_string()));
        }
    }
    assert_eq!(
        status["steps"]["configure"]["outputs"],
        Value::Object(expected)
    );
    assert_eq!(status["steps"]["report"]["outputs"]["seen"], "1/2");

    let id = status["id"].as_str().expect("id");
    let events = overture.events(id);
    assert_causal(&events, &[("report", vec!["configure"])].into());
    // No cloud to ask: each host's key was learned on the first connection, and recorded.
    let pinned: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "HostKeysPinned")
        .map(|e| &e["data"])
        .collect();
    let hosts_pinned: Vec<&str> = pinned
        .iter()
        .map(|p| p["host"].as_str().expect("host"))
        .collect();
    assert_eq!(hosts_pinned.len(), 2, "one pin per host: {pinned:?}");
    for host in [format!("[127.0.0.1]:{port}"), format!("[localhost]:{port}")] {
        assert!(hosts_pinned.contains(&host.as_str()), "{host}: {pinned:?}");
    }
    for pin in &pinned {
        assert_eq!(pin["learned"], "first-use", "{pin}");
        assert_eq!(
            pin["keys"][0]["fingerprint"],
            sshd.host_key_fingerprint().as_str()
        );
    }
    assert!(
        text(&output.stderr).contains("learned on first use, trusted without a check"),
        "the progress says so: {}",
        text(&output.stderr)
    );
    let fingerprint = key_fingerprint(&events);
    let log = sshd.log();
    let logins: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("Accepted publickey for root"))
        .collect();
    assert!(!logins.is_empty(), "no login in the sshd log:\n{log}");
    for login in logins {
        assert!(
            login.ends_with(&format!("ED25519 {fingerprint}")),
            "a login with another key than the deployment's {fingerprint}: {login}"
        );
    }
}

#[test]
fn a_secret_in_vars_reaches_the_host_and_nothing_else() {
    const SECRET: &str = "tok-ansible-51c0e7-never-shown";
    let sshd = Sshd::start();
    let target = sshd.scratch().join("token");
    let overture = Overture::new();
    let file = blueprint_with_playbook(
        &overture,
        &format!(
            r#"
name: delivers-a-secret
secrets: [token]
hosts:
  web: ["{}"]
steps:
  configure:
    run: ansible
    timeout: 2m
    with:
      playbook: playbook/site.yml
      hosts: web
      vars: {{ target: "{}", token: "{{{{ secrets.token }}}}" }}
"#,
            sshd.address(),
            target.display(),
        ),
        r#"- hosts: web
  gather_facts: false
  tasks:
    - ansible.builtin.copy: { dest: "{{ target }}", content: "{{ token }}" }
    - ansible.builtin.debug: { msg: "the token is {{ token }}" }
"#,
    );
    let (_, status, output) = overture.deploy_with_secret(&file, "token", SECRET);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let id = status["id"].as_str().expect("id");

    assert_eq!(
        std::fs::read_to_string(&target).expect("the playbook wrote the token"),
        SECRET,
        "the secret was delivered"
    );
    let attempt_log = overture
        .data_dir()
        .join("logs")
        .join(id)
        .join("configure")
        .join("1.log");
    let logged = std::fs::read_to_string(&attempt_log).expect("the attempt's log");
    assert!(
        logged.contains("\"msg\": \"the token is ***\""),
        "the debug task's line is in the log, masked:\n{logged}"
    );

    let events = overture.events(id);
    assert!(events.iter().any(|e| e["type"] == "SecretsPurged"));
    let mut shown = vec![text(&output.stdout), text(&output.stderr)];
    shown.extend(overture.printed(&[
        vec!["events", id, "--json"],
        vec!["events", id],
        vec!["status", id, "--json"],
    ]));
    for (i, printed) in shown.iter().enumerate() {
        assert!(
            !printed.contains(SECRET),
            "output {i} shows the secret:\n{printed}"
        );
        assert!(
            !printed.contains("PRIVATE KEY"),
            "output {i} shows a private key:\n{printed}"
        );
    }
    for needle in [SECRET, "BEGIN OPENSSH PRIVATE KEY"] {
        let leaks = files_containing(&overture.data_dir(), needle.as_bytes());
        assert!(leaks.is_empty(), "files holding {needle:?}: {leaks:?}");
    }
}
