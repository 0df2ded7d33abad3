//! A tenant's step cannot act as the host's root, whatever its kind: each kind's own way of
//! running a command (a `script`, a terraform `local-exec`, an ansible task delegated to the
//! controller) tries what a hostile tenant would first — the kernel's global knobs — and sees its
//! own unprivileged user; an `http` step's curl is looked at from the host while it waits for the
//! answer.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::http::{HttpServer, Reply};
use crate::servers::Sshd;
use crate::support::{id_of, text, Overture};

/// The step's user (the sandbox crate's `STEP_UID`), as a user of Overture would find it.
const STEP_UID: u32 = 65533;

/// Prints the caller's uid and capabilities, tries to write two kernel knobs (each with the value
/// it already has) and exits 1 if either write was taken, so the step fails if the host's kernel
/// could be retuned.
const PROBE: &str = r#"echo "uid=$(id -u)"; grep '^CapEff:' /proc/self/status; w=0; for k in /proc/sys/vm/swappiness /proc/sys/kernel/core_pattern; do if (cat $k > $k) 2>/dev/null; then echo "WROTE $k"; w=1; else echo "refused $k"; fi; done; exit $w"#;

/// What the probe prints when it holds.
fn assert_held(log: &str) {
    // ansible shows the lines as JSON strings, with the tab escaped.
    let log = &log.replace("\\t", "\t");
    assert!(log.contains(&format!("uid={STEP_UID}")), "{log}");
    assert!(log.contains("CapEff:\t0000000000000000"), "{log}");
    assert!(log.contains("refused /proc/sys/vm/swappiness"), "{log}");
    assert!(
        log.contains("refused /proc/sys/kernel/core_pattern"),
        "{log}"
    );
    assert!(!log.contains("WROTE /proc"), "{log}");
}

/// `overture logs ID STEP`: the step's last attempt's output.
fn step_log(overture: &Overture, id: &str, step: &str) -> String {
    let output = overture.run(&["logs", id, step]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    text(&output.stdout)
}

fn deployed(overture: &Overture, file: &Path) -> String {
    let swappiness = std::fs::read("/proc/sys/vm/swappiness").expect("swappiness");
    let core_pattern = std::fs::read("/proc/sys/kernel/core_pattern").expect("core_pattern");
    let status = overture.deploy_ok(file, &[]);
    assert_eq!(
        std::fs::read("/proc/sys/vm/swappiness").expect("swappiness"),
        swappiness
    );
    assert_eq!(
        std::fs::read("/proc/sys/kernel/core_pattern").expect("core_pattern"),
        core_pattern
    );
    id_of(&status)
}

#[test]
fn a_script_step_runs_as_its_own_user_and_cannot_write_the_kernels_settings() {
    let (overture, file) = Overture::with_blueprint(
        "probe.yaml",
        &format!(
            "name: probe\nsteps:\n  probe:\n    run: script\n    with:\n      command: '{}'\n",
            PROBE.replace('\'', "''")
        ),
    );
    let id = deployed(&overture, &file);
    assert_held(&step_log(&overture, &id, "probe"));
}

#[test]
fn a_terraform_local_exec_runs_as_the_steps_user() {
    let (overture, file) = Overture::with_blueprint(
        "probe.yaml",
        "name: probe\nsteps:\n  infra:\n    run: terraform\n    timeout: 2m\n    with: { dir: network }\n",
    );
    let folder = file.parent().expect("a folder").join("network");
    std::fs::create_dir_all(&folder).expect("the configuration's folder");
    let main_tf = format!(
        "resource \"terraform_data\" \"probe\" {{\n  provisioner \"local-exec\" {{\n    command = <<-EOT\n{}\nEOT\n  }}\n}}\n",
        PROBE.replace("${", "$${")
    );
    std::fs::write(folder.join("main.tf"), main_tf).expect("main.tf");
    let id = deployed(&overture, &file);
    assert_held(&step_log(&overture, &id, "infra"));
}

#[test]
fn an_ansible_task_delegated_to_the_controller_runs_as_the_steps_user() {
    let sshd = Sshd::start();
    let (overture, file) = Overture::with_blueprint(
        "probe.yaml",
        &format!(
            "name: probe\nhosts:\n  web: [\"{}\"]\nsteps:\n  configure:\n    run: ansible\n    timeout: 2m\n    with: {{ playbook: playbook/site.yml, hosts: web, user: root }}\n",
            sshd.address()
        ),
    );
    let folder = file.parent().expect("a folder").join("playbook");
    std::fs::create_dir_all(&folder).expect("playbook folder");
    let playbook = format!(
        "- hosts: web\n  gather_facts: false\n  tasks:\n    - name: probe the controller\n      delegate_to: localhost\n      ansible.builtin.shell: {}\n      register: probe\n    - ansible.builtin.debug: {{ var: probe.stdout_lines }}\n",
        serde_json::to_string(PROBE).expect("quoted")
    );
    std::fs::write(folder.join("site.yml"), playbook).expect("the playbook");
    let id = deployed(&overture, &file);
    assert_held(&step_log(&overture, &id, "configure"));
}

/// The uid and effective capabilities of the first `curl` whose command line names `marker`.
fn curl_identity(marker: &str) -> Option<(String, String)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        let program = cmdline.split('\0').next().unwrap_or("");
        if !program.ends_with("/curl") || !cmdline.contains(marker) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
        };
        return Some((field("Uid:")?, field("CapEff:")?));
    }
    None
}

#[test]
fn an_http_steps_curl_runs_as_the_steps_user_with_no_capabilities() {
    let seen = Arc::new(Mutex::new(None));
    let server = {
        let seen = Arc::clone(&seen);
        // curl is waiting for this answer, so it is alive while the host looks at it.
        HttpServer::start(move |_, _| {
            *seen.lock().expect("lock") = curl_identity("request.curl");
            Reply(200, "OK", "{}".to_owned())
        })
    };
    let (overture, file) = Overture::with_blueprint(
        "probe.yaml",
        &format!(
            "name: probe\nsteps:\n  call:\n    run: http\n    with: {{ url: \"{}\" }}\n",
            server.url("/")
        ),
    );
    deployed(&overture, &file);
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        Some((STEP_UID.to_string(), "0000000000000000".to_owned())),
        "curl's uid and effective capabilities"
    );
}
