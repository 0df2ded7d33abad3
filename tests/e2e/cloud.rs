//! The whole workflow against the local cloud: servers made with the user's token, the bastion
//! opened for the engine only while needed, Ansible through it, and every grant closed and every
//! secret purged at the end, whatever the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::local_cloud::{example, in_namespace, listening_programs, LocalCloud};
use crate::support::{files_containing, gone_within, id_of, text, types, Deploying, Overture};

/// `overture deploy FILE`, acting with the token in `token_file`.
pub(crate) fn deploy_command(
    o: &Overture,
    cloud: &LocalCloud,
    file: &Path,
    token_file: &Path,
) -> Command {
    let mut command = o.command(&["deploy", file.to_str().expect("utf-8 path"), "--json"]);
    command
        .arg("--token-file")
        .arg(token_file)
        .env("OS_AUTH_URL", &cloud.auth_url);
    command
}

/// Deploys `file` acting with the token in `token_file`.
pub(crate) fn deploy(
    o: &Overture,
    cloud: &LocalCloud,
    file: &Path,
    token_file: &Path,
) -> (i32, Value, Output) {
    let output = deploy_command(o, cloud, file, token_file)
        .output()
        .expect("run overture");
    let status = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), status, output)
}

/// The example's blueprint with `change` applied, beside a playbook of the given text; returns
/// the blueprint's path.
pub(crate) fn blueprint(
    o: &Overture,
    change: impl Fn(String) -> String,
    playbook: Option<&str>,
) -> PathBuf {
    let original = std::fs::read_to_string(example().join("blueprint.yaml")).expect("example");
    let path = o.blueprint("cloud.yaml", &change(original));
    let folder = path.parent().expect("folder").join("playbook");
    std::fs::create_dir_all(&folder).expect("playbook folder");
    let text = match playbook {
        Some(text) => text.to_owned(),
        None => std::fs::read_to_string(example().join("playbook/site.yml")).expect("playbook"),
    };
    std::fs::write(folder.join("site.yml"), text).expect("playbook");
    path
}

/// The example without its HTTP checks: enough for the failure paths.
pub(crate) fn without_checks(text: String) -> String {
    text.split("\n  check-web-1:")
        .next()
        .expect("text")
        .to_owned()
        + "\n"
}

/// A playbook whose first task waits on every server for `path` to exist. It waits up to 8
/// minutes (under the `ansible` step's default 10-minute timeout): a test gives the go-ahead
/// after deploying more through a loaded machine, and a long wait costs nothing once it comes.
pub(crate) fn waiting_playbook(path: &Path) -> String {
    format!(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: wait for the go-ahead\n      ansible.builtin.wait_for: {{ path: \"{}\", timeout: 480 }}\n    - ansible.builtin.command: \"true\"\n",
        path.display()
    )
}

/// Starts deploying the example (without its checks) with a playbook that waits for a go-ahead
/// file on every server; returns once Ansible has started, with the go-ahead's path.
fn configuring(o: &Overture, cloud: &LocalCloud, token_file: &Path) -> (Deploying, PathBuf) {
    let go_ahead = go_ahead_file();
    let file = blueprint(o, without_checks, Some(&waiting_playbook(&go_ahead)));
    let deploying = Deploying::spawn(
        deploy_command(o, cloud, &file, token_file),
        &["configure", "started"],
    );
    (deploying, go_ahead)
}

/// A file path the servers can see, unique to the test. A server sees the machine's files
/// read-only but has its own `/tmp`, `/var/tmp`, `/root`, `/srv` and `/run`, so the path must be
/// outside those wherever the tests run from.
pub(crate) fn go_ahead_file() -> PathBuf {
    let dir = Path::new("/var/lib/overture-e2e");
    std::fs::create_dir_all(dir).expect("a folder the servers see");
    dir.join(format!("go-ahead-{}", uuid::Uuid::new_v4().simple()))
}

pub(crate) fn step(status: &Value, name: &str) -> Value {
    status["steps"][name].clone()
}

/// The checks every deployment through a bastion must pass once it has ended: the bastion
/// admits the engine no more, in the cloud and in its firewall, every grant is closed, and the
/// seal is gone.
pub(crate) fn assert_closed_and_purged(o: &Overture, cloud: &LocalCloud, project: &str, id: &str) {
    let events = types(&o.events(id));
    if let Some(granted) = events.iter().position(|t| t == "BastionAccessGranted") {
        let revoked = events
            .iter()
            .position(|t| t == "BastionAccessRevoked")
            .unwrap_or_else(|| panic!("the bastion was never closed: {events:?}"));
        let purged = events
            .iter()
            .position(|t| t == "SecretsPurged")
            .expect("purged");
        assert!(granted < revoked && revoked < purged, "{events:?}");
        let group = cloud.security_group(project, "bastion");
        assert_eq!(
            group["rules"],
            serde_json::json!([]),
            "no rule is left: {group}"
        );
        let bastion = cloud.server(project, "bastion");
        let gateway = cloud.project(project)["network"]["gateway"]
            .as_str()
            .expect("gateway")
            .to_owned();
        let rules = in_namespace(
            bastion["namespace"].as_str().expect("namespace"),
            &["nft", "list", "ruleset"],
        );
        assert!(
            !rules.contains(&gateway),
            "the bastion's firewall still admits {gateway}: {rules}"
        );
    }
    assert!(events.contains(&"SecretsPurged".to_owned()), "{events:?}");
    let open = o.json(&["grants", "--open", "--json"]);
    assert_eq!(open, serde_json::json!([]), "grants left open");
    let seal = o.data_dir().join("seals").join(format!("{id}.json"));
    assert!(!seal.exists(), "the sealed token and key are deleted");
}

/// The `HostKeysPinned` events of a deployment, by server.
fn pinned(o: &Overture, id: &str) -> std::collections::BTreeMap<String, Value> {
    o.events(id)
        .into_iter()
        .filter(|e| e["type"] == "HostKeysPinned")
        .map(|e| {
            (
                e["data"]["server"].as_str().expect("server").to_owned(),
                e["data"].clone(),
            )
        })
        .collect()
}

/// Every server of the example was pinned from its console, with the key its sshd has.
fn assert_pinned_from_console(o: &Overture, cloud: &LocalCloud, id: &str) {
    let pinned = pinned(o, id);
    for server in ["bastion", "web-1", "web-2"] {
        let pin = pinned
            .get(server)
            .unwrap_or_else(|| panic!("{server} was not pinned: {pinned:?}"));
        assert_eq!(pin["learned"], "console", "{pin}");
        let made = cloud.server("acme", server);
        assert_eq!(pin["host"], made["address"], "{pin}");
        let actual = cloud.host_key_fingerprint(made["id"].as_str().expect("id"));
        assert_eq!(pin["keys"][0]["key_type"], "ssh-ed25519", "{pin}");
        assert_eq!(pin["keys"][0]["fingerprint"], actual.as_str(), "{pin}");
    }
    assert_eq!(pinned.len(), 3, "nothing learned on first use: {pinned:?}");
}

#[test]
fn hello_world_answers_on_both_servers_configured_through_the_bastion() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    let o = Overture::new();
    let (code, status, output) = deploy(&o, &cloud, &example().join("blueprint.yaml"), &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let id = id_of(&status);
    assert_eq!(
        status["tenant"],
        cloud.project("acme")["id"],
        "the tenant is the token's project's id"
    );
    assert_eq!(
        status["project"],
        serde_json::json!({"name": "acme", "domain": "Default"})
    );
    let first_line = format!(
        "for tenant `{}` (project acme in domain Default)",
        status["tenant"].as_str().expect("the tenant")
    );
    assert!(
        text(&output.stderr).contains(&first_line),
        "the progress names the project beside its id: {}",
        text(&output.stderr)
    );
    let requested = &o.events(&id)[0];
    assert_eq!(
        requested["data"]["requested_by"], "acme",
        "the requester is the token's user"
    );
    assert_eq!(requested["data"]["cloud"]["project"], "acme");
    // The token's catalog endpoints, by host and port: the local cloud serves Keystone, Nova
    // and Neutron at one address, its identity URL's.
    let identity = cloud
        .auth_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port");
    assert_eq!(
        requested["data"]["cloud"]["endpoints"],
        serde_json::json!([identity])
    );
    let servers_policy = o
        .events(&id)
        .into_iter()
        .find(|e| e["type"] == "StepNetworkPolicyApplied" && e["data"]["step"] == "servers")
        .expect("the servers step's policy");
    assert!(
        servers_policy["data"]["allowed"]
            .as_array()
            .expect("allowed")
            .contains(&Value::from(identity)),
        "a step acting with the token may reach its catalog's endpoints: {servers_policy}"
    );
    for server in ["web-1", "web-2"] {
        assert_eq!(
            step(&status, &format!("check-{server}"))["outputs"]["greeting"],
            format!("Hello, world, from {server}!")
        );
        let namespace = cloud.server("acme", server)["namespace"]
            .as_str()
            .expect("namespace")
            .to_owned();
        assert_eq!(
            listening_programs(&namespace),
            vec!["python3".to_owned(), "sshd".to_owned()],
            "no agent: only sshd and the service listen on {server}"
        );
    }
    assert_closed_and_purged(&o, &cloud, "acme", &id);
    assert_pinned_from_console(&o, &cloud, &id);
    let trail = text(&o.run(&["events", &id]).stdout);
    let bastion = cloud.server("acme", "bastion");
    let fingerprint = cloud.host_key_fingerprint(bastion["id"].as_str().expect("id"));
    assert!(
        trail.contains(&format!(
            "host keys pinned: bastion ({}) from its console",
            bastion["address"].as_str().expect("address")
        )) && trail.contains(&format!("key: ssh-ed25519 {fingerprint}")),
        "the audit trail shows the pinned keys: {trail}"
    );

    let grants = o.json(&["grants", "--json"]);
    let kinds: Vec<&str> = grants
        .as_array()
        .expect("grants")
        .iter()
        .map(|g| g["kind"].as_str().expect("kind"))
        .collect();
    for kind in ["ssh-key", "token", "bastion-rule", "tcp-forwarding"] {
        assert!(kinds.contains(&kind), "{kind} in the ledger: {grants}");
    }

    // Not the token, not the private key: nowhere in the data directory once it has ended.
    assert_eq!(
        files_containing(&o.data_dir(), token.as_bytes()),
        Vec::<String>::new()
    );
    assert_eq!(
        files_containing(&o.data_dir(), b"OPENSSH PRIVATE KEY"),
        Vec::<String>::new()
    );
}

#[test]
fn a_failing_playbook_task_fails_the_deployment_and_still_closes_the_bastion() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    let o = Overture::new();
    // The failing task prints a secret parameter: it must be masked everywhere.
    let playbook = "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.fail: { msg: \"release {{ release_key }} is broken\" }\n";
    let with_secret = |text: String| {
        without_checks(text)
            .replacen("\nhosts:", "\nsecrets: [release_key]\nhosts:", 1)
            .replace(
                "with: { playbook: playbook/site.yml, hosts: web }",
                "with: { playbook: playbook/site.yml, hosts: web, vars: { release_key: \"{{ secrets.release_key }}\" } }",
            )
    };
    let file = blueprint(&o, with_secret, Some(playbook));
    let secret = "rk-5e3c7b1d9a";
    let output = deploy_command(&o, &cloud, &file, &token_file)
        .arg("--secret")
        .arg("release_key=RELEASE_KEY")
        .env("RELEASE_KEY", secret)
        .output()
        .expect("deploy");
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).expect("status");
    let id = status["id"].as_str().expect("id");
    let configure = step(&status, "configure");
    assert_eq!(configure["status"], "failed");
    assert_eq!(configure["attempts"], 1, "a failed task is not retried");
    assert_closed_and_purged(&o, &cloud, "acme", id);
    let log = text(&o.run(&["logs", id, "configure"]).stdout);
    assert!(
        log.contains("release *** is broken"),
        "the task ran and was masked: {log}"
    );
    for needle in [secret, token.as_str(), "OPENSSH PRIVATE KEY"] {
        assert_eq!(
            files_containing(&o.data_dir(), needle.as_bytes()),
            Vec::<String>::new(),
            "the data directory holds none of the deployment's secrets"
        );
        assert!(!text(&output.stderr).contains(needle) && !text(&output.stdout).contains(needle));
    }
}

/// Deploys the example, with `change` applied, as tenant `acme` on a fresh local cloud in which
/// `fault` was set first: the cloud and the CLI, to look at, and what `deploy` gave.
fn deploy_under_fault(
    fault: &[&str],
    change: impl Fn(String) -> String,
) -> (LocalCloud, Overture, (i32, Value, Output)) {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    cloud.fault("acme", fault);
    let o = Overture::new();
    let file = blueprint(&o, change, None);
    let deployed = deploy(&o, &cloud, &file, &token_file);
    (cloud, o, deployed)
}

/// Lets the playbook waiting on `go_ahead` go on and waits for the deployment to end; its id
/// and the CLI's exit code.
fn go_ahead_and_wait(deploying: Deploying, go_ahead: &Path) -> (String, i32) {
    std::fs::write(go_ahead, "").expect("go ahead");
    let id = deploying.id.clone();
    let finished = deploying.wait();
    let _ = std::fs::remove_file(go_ahead);
    (id, finished)
}

#[test]
fn a_server_that_never_boots_fails_at_once_with_bootstrap_timeout() {
    let (cloud, o, (code, status, output)) =
        deploy_under_fault(&["never-boot", "--server", "web-2"], |text| {
            without_checks(text).replace(
                "timeout: 2m }\n    timeout: 3m",
                "timeout: 4s }\n    timeout: 1m",
            )
        });
    assert_eq!(code, 1, "{}", text(&output.stderr));
    let booted = step(&status, "booted");
    assert_eq!(booted["error_class"], "bootstrap-timeout");
    assert_eq!(booted["attempts"], 1, "bootstrap-timeout is not retried");
    assert_closed_and_purged(&o, &cloud, "acme", status["id"].as_str().expect("id"));
}

/// The example with the servers step's `backend-unreachable` waits shortened (the count stays).
fn quick_backend_retries(text: String) -> String {
    without_checks(text).replace(
        "  servers:\n    run: servers\n",
        "  servers:\n    run: servers\n    retry: { backend-unreachable: { times: 5, wait: 200ms } }\n",
    )
}

#[test]
fn the_api_answering_503_five_times_is_retried_through() {
    let (cloud, o, (code, status, output)) = deploy_under_fault(
        &["backend-unreachable", "--times", "5"],
        quick_backend_retries,
    );
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(step(&status, "servers")["attempts"], 6);
    assert_closed_and_purged(&o, &cloud, "acme", status["id"].as_str().expect("id"));
}

#[test]
fn the_api_answering_503_six_times_fails_after_six_attempts() {
    let (cloud, o, (code, status, output)) = deploy_under_fault(
        &["backend-unreachable", "--times", "6"],
        quick_backend_retries,
    );
    assert_eq!(code, 1, "{}", text(&output.stderr));
    let servers = step(&status, "servers");
    assert_eq!(servers["attempts"], 6);
    assert_eq!(servers["error_class"], "backend-unreachable");
    assert_closed_and_purged(&o, &cloud, "acme", status["id"].as_str().expect("id"));
}

#[test]
fn a_server_made_unreachable_during_ansible_is_attempted_twice() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let (deploying, go_ahead) = configuring(&o, &cloud, &token_file);
    // Ansible is connected (or connecting) to both servers and waits for the go-ahead.
    let web_2 = cloud.server("acme", "web-2");
    let name = web_2["name"].as_str().expect("name");
    cloud.fault("acme", &["unreachable", "--server", name]);
    let (id, finished) = go_ahead_and_wait(deploying, &go_ahead);
    assert_eq!(finished, 1);
    let status = o.json(&["status", &id, "--json"]);
    let configure = step(&status, "configure");
    assert_eq!(configure["error_class"], "host-unreachable");
    assert_eq!(configure["attempts"], 2, "host-unreachable is retried once");
    let exits: Vec<Value> = o
        .events(&id)
        .iter()
        .filter(|e| e["type"] == "StepAttemptFailed")
        .map(|e| e["data"]["exit_code"].clone())
        .collect();
    assert_eq!(
        exits,
        vec![Value::from(4), Value::from(4)],
        "ansible exited 4 both times"
    );
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

#[test]
fn a_server_whose_host_key_changed_after_pinning_is_refused_and_not_retried() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    // Ansible is connected to both servers, with the keys pinned, and waits for the go-ahead.
    let (deploying, go_ahead) = configuring(&o, &cloud, &token_file);
    let web_2 = cloud.server("acme", "web-2");
    let web_2_id = web_2["id"].as_str().expect("id").to_owned();
    let before = cloud.host_key_fingerprint(&web_2_id);
    cloud.fault(
        "acme",
        &["rekey", "--server", web_2["name"].as_str().expect("name")],
    );
    let after = cloud.host_key_fingerprint(&web_2_id);
    assert_ne!(before, after, "web-2 has a new key");
    let (id, finished) = go_ahead_and_wait(deploying, &go_ahead);
    assert_eq!(finished, 1);

    let status = o.json(&["status", &id, "--json"]);
    let configure = step(&status, "configure");
    assert_eq!(configure["error_class"], "host-key-mismatch", "{configure}");
    let events = o.events(&id);
    let failures: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "StepAttemptFailed")
        .collect();
    let last = failures.last().expect("a failed attempt");
    assert_eq!(last["data"]["error_class"], "host-key-mismatch");
    // The restart of web-2's sshd cut the waiting session (host-unreachable, retried once);
    // the next connection met the new key, and that is never retried.
    assert!(failures.len() <= 2, "{failures:?}");
    assert_eq!(configure["attempts"], failures.len());
    let message = last["data"]["message"].as_str().expect("message");
    let address = web_2["address"].as_str().expect("address");
    for expected in [
        format!("the SSH host key of server `web-2` ({address}) is not the one pinned"),
        format!("pinned ssh-ed25519 {before} from its console output"),
        format!("it offered ED25519 {after}"),
        "replaced or rebuilt".to_owned(),
        "intercepting the connection".to_owned(),
    ] {
        assert!(message.contains(&expected), "{expected:?} in {message}");
    }
    let types = types(&events);
    let failed_at = types
        .iter()
        .rposition(|t| t == "StepAttemptFailed")
        .expect("failed");
    assert!(
        !types[failed_at..].contains(&"StepRetryScheduled".to_owned()),
        "no retry after the mismatch: {types:?}"
    );
    // The pin was not replaced by the new key.
    assert_eq!(
        pinned(&o, &id)["web-2"]["keys"][0]["fingerprint"],
        before.as_str()
    );
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

#[test]
fn a_server_another_deployment_made_is_pinned_from_its_console_at_first_contact() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    // One deployment makes a server the engine may reach directly...
    let made = o.blueprint(
        "made.yaml",
        "name: made\nsteps:\n  servers:\n    run: servers\n    with:\n      security_groups:\n        open: [{ port: 22, from: 10.0.0.0/8 }]\n      servers:\n        web-1: { security_groups: [open] }\n",
    );
    let (code, _, output) = deploy(&o, &cloud, &made, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let web_1 = cloud.server("acme", "web-1");
    let address = web_1["address"].as_str().expect("address").to_owned();

    // ...and another one, given only its address, waits for it: it asks the cloud for the keys.
    let reached = o.blueprint(
        "reached.yaml",
        "name: reached\nparams: { web: {} }\nhosts:\n  web: ['{{ params.web }}']\nsteps:\n  booted: { run: wait-ssh, with: { hosts: web, timeout: 1m } }\n",
    );
    let mut command = deploy_command(&o, &cloud, &reached, &token_file);
    command.args(["--param", &format!("web={address}")]);
    let output = command.output().expect("run overture");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).expect("status");
    let id = status["id"].as_str().expect("id");
    let pinned = pinned(&o, id);
    let pin = pinned
        .get(web_1["name"].as_str().expect("name"))
        .unwrap_or_else(|| panic!("web-1 pinned under its cloud name: {pinned:?}"));
    assert_eq!(pin["learned"], "console", "{pin}");
    assert_eq!(pin["host"], address.as_str());
    assert_eq!(
        pin["keys"][0]["fingerprint"],
        cloud
            .host_key_fingerprint(web_1["id"].as_str().expect("id"))
            .as_str()
    );
    assert!(
        text(&output.stderr).contains("pinned from its console"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn after_a_crash_with_the_bastion_open_resume_closes_it_and_purges() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    let o = Overture::new();
    let (deploying, go_ahead) = configuring(&o, &cloud, &token_file);
    let id = deploying.id.clone();
    deploying.kill();
    let open = o.json(&["grants", "--open", "--json"]);
    assert!(
        open.as_array()
            .expect("grants")
            .iter()
            .any(|g| g["kind"] == "bastion-rule"),
        "the crash left the bastion open: {open}"
    );
    assert_ne!(
        cloud.security_group("acme", "bastion")["rules"],
        serde_json::json!([])
    );

    let without_token = o
        .command(&["resume"])
        .env_remove("OS_TOKEN")
        .output()
        .expect("resume");
    assert_eq!(
        without_token.status.code(),
        Some(2),
        "{}",
        text(&without_token.stderr)
    );
    assert!(
        text(&without_token.stderr).contains(&id),
        "{}",
        text(&without_token.stderr)
    );

    std::fs::write(&go_ahead, "").expect("go ahead");
    let resumed = o
        .command(&["resume"])
        .env("OS_TOKEN", &token)
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("resume");
    let _ = std::fs::remove_file(&go_ahead);
    assert!(
        resumed.status.code() == Some(0),
        "{}",
        text(&resumed.stderr)
    );
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

#[test]
fn a_missing_malformed_or_expired_token_is_refused_before_anything_is_recorded() {
    let cloud = LocalCloud::up();
    let o = Overture::new();
    let file = example().join("blueprint.yaml");
    let blueprint_path = file.to_str().expect("utf-8 path");

    let missing = o
        .command(&["deploy", blueprint_path])
        .env_remove("OS_TOKEN")
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("deploy");
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("--token-file"),
        "{}",
        text(&missing.stderr)
    );

    let malformed = o.blueprint("token", "not a token\nat all\n");
    let expired = cloud.expired_token("acme");
    let absent = PathBuf::from("/nonexistent/token");
    for (token_file, says) in [
        (&malformed, "malformed"),
        (&expired, "refused the token"),
        (&absent, "cannot read"),
    ] {
        let output = o
            .command(&["deploy", blueprint_path, "--token-file"])
            .arg(token_file)
            .env("OS_AUTH_URL", &cloud.auth_url)
            .output()
            .expect("deploy");
        assert_eq!(
            output.status.code(),
            Some(2),
            "{says}: {}",
            text(&output.stderr)
        );
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(says) && stderr.contains(&token_file.display().to_string()),
            "{stderr}"
        );
    }
    assert_eq!(
        o.json(&["list", "--json"]),
        serde_json::json!([]),
        "nothing recorded"
    );
    assert!(cloud.project("acme")["servers"]
        .as_array()
        .expect("servers")
        .is_empty());
}

#[test]
fn a_blueprint_with_cloud_hosts_but_no_bastion_or_an_unknown_host_group_is_refused() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let file = blueprint(
        &o,
        |text| {
            let start = text.find("\nbastion:").expect("bastion");
            let end = text.find("\nsteps:").expect("steps");
            format!("{}{}", &text[..start], &text[end..])
        },
        None,
    );
    let (code, _, output) = deploy(&o, &cloud, &file, &token_file);
    assert_eq!(code, 2);
    assert!(
        text(&output.stderr).contains("bastion: host group `web`"),
        "{}",
        text(&output.stderr)
    );

    let file = blueprint(
        &o,
        |text| text.replace("hosts: web }", "hosts: webs }"),
        None,
    );
    let (code, _, output) = deploy(&o, &cloud, &file, &token_file);
    assert_eq!(code, 2);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("steps.configure.with.hosts")
            && stderr.contains("`webs` is not a host group"),
        "{stderr}"
    );
    assert_eq!(o.json(&["list", "--json"]), serde_json::json!([]));
    assert!(
        cloud.project("acme")["servers"]
            .as_array()
            .expect("servers")
            .is_empty(),
        "nothing was made in the cloud"
    );
}

#[test]
fn one_tenants_token_cannot_see_or_change_another_tenants_project() {
    let cloud = LocalCloud::up();
    let (_, token_a) = cloud.token("tenant-a");
    let (_, token_b) = cloud.token("tenant-b");
    let (code, body) = cloud.call(
        "POST",
        "/network/v2.0/security-groups",
        &token_b,
        Some(r#"{"security_group":{"name":"b-private"}}"#),
    );
    assert_eq!(code, 201, "{body}");
    let group: Value = serde_json::from_str(&body).expect("JSON");
    let group_id = group["security_group"]["id"].as_str().expect("id");

    let (code, _) = cloud.call(
        "GET",
        &format!("/network/v2.0/security-groups/{group_id}"),
        &token_a,
        None,
    );
    assert_eq!(code, 404, "A cannot see B's group");
    let (code, _) = cloud.call(
        "DELETE",
        &format!("/network/v2.0/security-groups/{group_id}"),
        &token_a,
        None,
    );
    assert_eq!(code, 404, "A cannot delete B's group");
    let rule = format!(
        r#"{{"security_group_rule":{{"security_group_id":"{group_id}","direction":"ingress","ethertype":"IPv4","protocol":"tcp","port_range_min":22,"port_range_max":22,"remote_ip_prefix":"0.0.0.0/0"}}}}"#
    );
    let (code, _) = cloud.call(
        "POST",
        "/network/v2.0/security-group-rules",
        &token_a,
        Some(&rule),
    );
    assert!(
        code == 404 || code == 403,
        "A cannot open B's group: {code}"
    );
    let (code, body) = cloud.call("GET", "/network/v2.0/security-groups", &token_a, None);
    assert_eq!(code, 200);
    assert!(
        !body.contains(group_id),
        "A's listing does not show B's group"
    );
    let (code, _) = cloud.call("GET", "/compute/v2.1/servers", "not-a-token", None);
    assert_eq!(code, 401);
}

#[test]
fn a_deployment_of_one_tenant_cannot_open_or_reach_another_tenants_servers() {
    let cloud = LocalCloud::up();
    let (token_a, _) = cloud.token("tenant-a");
    let (token_b, _) = cloud.token("tenant-b");

    // B's servers, made by B's own deployment.
    let b = Overture::new();
    let servers_only = |text: String| {
        let steps = text.find("\nsteps:").expect("steps");
        let hosts = text.find("\nhosts:").expect("hosts");
        let booted = text.find("\n  booted:").expect("booted");
        format!("{}{}\n", &text[..hosts], &text[steps..booted])
    };
    let file = blueprint(&b, servers_only, None);
    let (code, _, output) = deploy(&b, &cloud, &file, &token_b);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let b_web = cloud.server("tenant-b", "web-1")["address"]
        .as_str()
        .expect("address")
        .to_owned();
    let b_group = cloud.security_group("tenant-b", "bastion")["id"]
        .as_str()
        .expect("id")
        .to_owned();

    // A goes through its own bastion to B's server: the networks do not meet.
    let a = Overture::new();
    let into_b = |text: String| {
        without_checks(text)
            .replace("{{ steps.servers.outputs.web-1 }}", &b_web)
            .replace(
                "timeout: 2m }\n    timeout: 3m",
                "timeout: 4s }\n    timeout: 1m",
            )
    };
    let file = blueprint(&a, into_b, None);
    let (code, status, output) = deploy(&a, &cloud, &file, &token_a);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    assert_eq!(step(&status, "booted")["error_class"], "bootstrap-timeout");
    assert_closed_and_purged(&a, &cloud, "tenant-a", status["id"].as_str().expect("id"));

    // A names B's bastion group as its own: the cloud refuses A's token there.
    let a = Overture::new();
    let open_b = |text: String| {
        without_checks(text).replace(
            "{{ steps.servers.outputs.security-group-bastion }}",
            &b_group,
        )
    };
    let file = blueprint(&a, open_b, None);
    let (code, status, output) = deploy(&a, &cloud, &file, &token_a);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    assert_eq!(step(&status, "booted")["status"], "failed");
    assert_eq!(
        cloud.security_group("tenant-b", "bastion")["rules"],
        serde_json::json!([])
    );
    assert_closed_and_purged(&a, &cloud, "tenant-a", status["id"].as_str().expect("id"));
}

#[test]
fn a_step_of_another_tenant_cannot_read_a_running_deployments_workspace_or_key() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("tenant-a");
    let o = Overture::new();
    let (deploying, go_ahead) = configuring(&o, &cloud, &token_file);
    // A's Ansible sandbox holds A's private key in its workspace while it waits.
    // `StepStarted` is recorded just before the sandbox is made: wait for its workspace.
    let sandboxes = o.data_dir().join("sandboxes");
    let started = std::time::Instant::now();
    let workspace = loop {
        let found = std::fs::read_dir(&sandboxes)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .find(|path| {
                path.to_string_lossy().contains("-configure-")
                    && !files_containing(path, b"PRIVATE KEY").is_empty()
            });
        match found {
            Some(workspace) => break workspace,
            None if started.elapsed() > std::time::Duration::from_secs(120) => {
                panic!("A's configure sandbox never held its key")
            }
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };

    // B, another tenant on the same engine, knows the path and tries.
    let probe = o.blueprint(
        "probe.yaml",
        r#"
name: probe
params: { target: {} }
steps:
  look:
    run: script
    with:
      command: |
        found=$(find "{{ params.target }}" -type f -exec cat {} + 2>/dev/null | grep -c 'PRIVATE KEY')
        echo "found=${found:-0}" >> "$OVERTURE_OUTPUTS"
        ls -d "{{ params.target }}" 2>/dev/null && echo visible=yes >> "$OVERTURE_OUTPUTS" || echo visible=no >> "$OVERTURE_OUTPUTS"
"#,
    );
    let target = format!("target={}", workspace.display());
    let status = o.deploy_ok(&probe, &["--tenant", "tenant-b", "--param", &target]);
    let outputs = &step(&status, "look")["outputs"];
    assert_eq!(outputs["visible"], "no", "{outputs}");
    assert_eq!(outputs["found"], "0", "{outputs}");

    let (_, finished) = go_ahead_and_wait(deploying, &go_ahead);
    assert_eq!(finished, 0);
}

#[test]
fn cancel_while_ansible_configures_kills_it_closes_the_bastion_and_purges() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let (mut deploying, _go_ahead) = configuring(&o, &cloud, &token_file);
    let id = deploying.id.clone();

    let cancelled = o.run(&["cancel", &id, "--reason", "maintenance window over"]);
    assert_eq!(
        cancelled.status.code(),
        Some(0),
        "{}",
        text(&cancelled.stderr)
    );
    assert_eq!(
        deploying.wait_within(std::time::Duration::from_secs(120)),
        1
    );

    let status = o.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "cancelled", "{status}");
    assert_eq!(step(&status, "configure")["status"], "abandoned");
    assert_closed_and_purged(&o, &cloud, "acme", &id);
    // The sandboxes are named after the deployment: ansible and its ssh processes are gone.
    let left = gone_within(&id.replace('-', ""), std::time::Duration::from_secs(60));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn after_a_crash_with_the_bastion_open_cancel_needs_the_token_to_close_it() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let (deploying, _go_ahead) = configuring(&o, &cloud, &token_file);
    let id = deploying.id.clone();
    deploying.kill();

    let without_token = o
        .command(&["cancel", &id])
        .env_remove("OS_TOKEN")
        .output()
        .expect("cancel");
    assert_eq!(without_token.status.code(), Some(0));
    assert!(
        text(&without_token.stderr).contains("--token-file"),
        "it says what is left to do: {}",
        text(&without_token.stderr)
    );
    assert_ne!(
        cloud.security_group("acme", "bastion")["rules"],
        serde_json::json!([]),
        "without the token the rule cannot be deleted"
    );

    let with_token = o
        .command(&["cancel", &id, "--token-file"])
        .arg(&token_file)
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("cancel");
    assert_eq!(
        with_token.status.code(),
        Some(0),
        "{}",
        text(&with_token.stderr)
    );
    assert_eq!(o.json(&["status", &id, "--json"])["status"], "cancelled");
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

/// A shell test that succeeds only if a TCP connection to `host:port` opens.
fn connects(host: &str, port: u16) -> String {
    format!("bash -c 'exec 3<>/dev/tcp/{host}/{port}'")
}

#[test]
fn a_step_of_another_tenant_reaches_only_what_its_own_deployment_needs() {
    let cloud = LocalCloud::up();
    let (token_a, _) = cloud.token("tenant-a");
    let o = Overture::new();
    // A configures its servers and waits for a go-ahead: its bastion's rule stays open.
    let (deploying, go_ahead) = configuring(&o, &cloud, &token_a);
    let a_bastion = cloud.server("tenant-a", "bastion")["address"]
        .as_str()
        .expect("address")
        .to_owned();
    // The engine's own address can reach it now: what stops B below is B's policy alone.
    let open = std::net::TcpStream::connect((a_bastion.as_str(), 22));
    assert!(open.is_ok(), "A's bastion is open to the engine: {open:?}");

    let host_service = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let host_port = host_service.local_addr().expect("address").port();
    let declared = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let declared_port = declared.local_addr().expect("address").port();
    let sshd = crate::servers::Sshd::start();

    // Every probe must come out as the test says for the step to succeed.
    let probes = [
        format!("! {}", connects(&a_bastion, 22)),
        format!("! {}", connects("127.0.0.1", host_port)),
        format!("! {}", connects("169.254.169.254", 80)),
        connects("127.0.0.1", declared_port),
    ]
    .join(" && ");
    let b = o.blueprint(
        "probe.yaml",
        &format!(
            r#"
name: probe-network
egress: ["127.0.0.1:{declared_port}"]
hosts:
  own: ["{}"]
steps:
  infra: {{ run: terraform, with: {{ dir: infra }} }}
  configure:
    run: ansible
    timeout: 2m
    with: {{ playbook: playbook/site.yml, hosts: own }}
"#,
            sshd.address()
        ),
    );
    let folder = b.parent().expect("folder");
    std::fs::create_dir_all(folder.join("infra")).expect("infra folder");
    std::fs::write(
        folder.join("infra/main.tf"),
        format!(
            "resource \"terraform_data\" \"probe\" {{\n  provisioner \"local-exec\" {{\n    command = <<-EOT\n      {probes}\n    EOT\n  }}\n}}\n"
        ),
    )
    .expect("main.tf");
    std::fs::create_dir_all(folder.join("playbook")).expect("playbook folder");
    std::fs::write(
        folder.join("playbook/site.yml"),
        format!(
            "- hosts: own\n  gather_facts: false\n  tasks:\n    - name: only what the deployment needs\n      ansible.builtin.shell: {}\n      delegate_to: localhost\n    - name: the deployment's own server\n      ansible.builtin.command: \"true\"\n",
            serde_json::to_string(&probes).expect("quoted")
        ),
    )
    .expect("playbook");

    let status = o.deploy_ok(&b, &["--tenant", "tenant-b"]);
    assert_eq!(step(&status, "infra")["status"], "succeeded");
    assert_eq!(step(&status, "configure")["status"], "succeeded");
    assert!(
        sshd.log().contains("Accepted publickey for root"),
        "B's own traffic went through"
    );
    // The audit trail says what each attempt could reach.
    let id = status["id"].as_str().expect("id");
    let events = o.events(id);
    let configure = events
        .iter()
        .find(|e| e["type"] == "StepNetworkPolicyApplied" && e["data"]["step"] == "configure")
        .expect("configure's policy");
    let allowed: Vec<&str> = configure["data"]["allowed"]
        .as_array()
        .expect("allowed")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(allowed.contains(&sshd.address().as_str()), "{allowed:?}");
    assert!(
        allowed.contains(&format!("127.0.0.1:{declared_port}").as_str()),
        "{allowed:?}"
    );
    assert!(
        !allowed.iter().any(|a| a.starts_with(&a_bastion)),
        "{allowed:?}"
    );

    let (_, finished) = go_ahead_and_wait(deploying, &go_ahead);
    assert_eq!(finished, 0);
}
