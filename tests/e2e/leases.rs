//! Bastion leases on the local cloud: deployments of one tenant configuring through one
//! long-lived bastion (made by an earlier deployment; they name its host and security group)
//! each lease the engine's rule on it, and the rule goes only with the last lease; a rule
//! deleted under an open lease fails the deployment as `bastion-access-lost`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cloud::{
    assert_closed_and_purged, blueprint, deploy, deploy_command, go_ahead_file, step,
    waiting_playbook, without_checks,
};
use crate::local_cloud::LocalCloud;
use crate::support::{text, Deploying, Overture};

/// The example's `servers` step alone: the long-lived infrastructure, no bastion opened.
fn servers_only(text: String) -> String {
    let steps = text.find("\nsteps:").expect("steps");
    let hosts = text.find("\nhosts:").expect("hosts");
    let booted = text.find("\n  booted:").expect("booted");
    format!("{}{}\n", &text[..hosts], &text[steps..booted])
}

/// The example without its `servers` step and checks: it waits for SSH on acme's servers and
/// configures them through acme's bastion, named by its address and security group, then runs
/// `more` (further steps, if any).
fn through_the_bastion(cloud: &LocalCloud, more: &str) -> impl Fn(String) -> String {
    let address = |name: &str| {
        cloud.server("acme", name)["address"]
            .as_str()
            .expect("address")
            .to_owned()
    };
    let (bastion, web_1, web_2) = (address("bastion"), address("web-1"), address("web-2"));
    let group = cloud.security_group("acme", "bastion")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let more = more.to_owned();
    move |text: String| {
        let text = without_checks(text);
        let servers = text.find("\n  servers:\n").expect("servers");
        let booted = text.find("\n  booted:").expect("booted");
        format!("{}{}{more}", &text[..servers], &text[booted..])
            .replace("{{ steps.servers.outputs.bastion }}", &bastion)
            .replace("{{ steps.servers.outputs.web-1 }}", &web_1)
            .replace("{{ steps.servers.outputs.web-2 }}", &web_2)
            .replace("{{ steps.servers.outputs.security-group-bastion }}", &group)
            .replace("    needs: [servers]\n", "")
    }
}

/// Waits until `deploying` has printed a progress line holding every one of `words`. The
/// engine prints as it goes; this reads what it printed, it does not time anything.
fn printed(deploying: &Deploying, words: &[&str]) {
    let start = std::time::Instant::now();
    while !deploying
        .later_lines()
        .iter()
        .any(|line| words.iter().all(|word| line.contains(word)))
    {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(180),
            "never printed {words:?}: {:?}",
            deploying.later_lines()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Starts a deployment of `file` through acme's bastion, authorizes its own SSH key on the
/// bastion and the web servers (as the servers' owner would for a colleague), and returns once
/// its `configure` step runs.
fn configuring_through_the_bastion(
    o: &Overture,
    cloud: &LocalCloud,
    file: &Path,
    token_file: &Path,
) -> Deploying {
    let deploying = Deploying::spawn(deploy_command(o, cloud, file, token_file), &["deployment "]);
    let key = o
        .events(&deploying.id)
        .iter()
        .find(|e| e["type"] == "CredentialsSealed")
        .and_then(|e| e["data"]["ssh_public_key"].as_str().map(str::to_owned))
        .expect("the deployment's public key, recorded as it was requested");
    for server in ["bastion", "web-1", "web-2"] {
        cloud.authorize("acme", server, &key);
    }
    printed(&deploying, &["configure", "started"]);
    deploying
}

fn bastion_rules(cloud: &LocalCloud) -> Vec<Value> {
    cloud.security_group("acme", "bastion")["rules"]
        .as_array()
        .expect("rules")
        .clone()
}

fn event(o: &Overture, id: &str, kind: &str) -> Value {
    o.events(id)
        .into_iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("{id} has no {kind}"))
}

/// Makes acme's bastion and web servers with a deployment of their own.
fn long_lived_servers(o: &Overture, cloud: &LocalCloud, token_file: &Path) {
    let file = blueprint(o, servers_only, None);
    let (code, _, output) = deploy(o, cloud, &file, token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(
        bastion_rules(cloud),
        Vec::<Value>::new(),
        "nothing open yet"
    );
}

/// Removes a go-ahead file when dropped, whatever the test's end.
struct GoAhead(PathBuf);

impl GoAhead {
    fn new() -> Self {
        Self(go_ahead_file())
    }

    fn give(&self) {
        std::fs::write(&self.0, "").expect("go ahead");
    }
}

impl Drop for GoAhead {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_shorter_of_two_deployments_through_one_bastion_leaves_the_rule_to_the_longer() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    long_lived_servers(&o, &cloud, &token_file);

    // Both configure through the bastion, each playbook waiting for its own go-ahead.
    let (longer_go, shorter_go) = (GoAhead::new(), GoAhead::new());
    let file = blueprint(
        &o,
        through_the_bastion(&cloud, ""),
        Some(&waiting_playbook(&longer_go.0)),
    );
    let longer = configuring_through_the_bastion(&o, &cloud, &file, &token_file);
    let file = blueprint(
        &o,
        through_the_bastion(&cloud, ""),
        Some(&waiting_playbook(&shorter_go.0)),
    );
    let shorter = configuring_through_the_bastion(&o, &cloud, &file, &token_file);
    let (longer_id, shorter_id) = (longer.id.clone(), shorter.id.clone());

    // One rule in the cloud, two leases on it, each recorded by its deployment.
    let rules = bastion_rules(&cloud);
    assert_eq!(rules.len(), 1, "the identical rule is shared: {rules:?}");
    let rule = rules[0]["id"].as_str().expect("rule id").to_owned();
    for id in [&longer_id, &shorter_id] {
        assert_eq!(
            event(&o, id, "BastionAccessGranted")["data"]["rule"],
            rule.as_str()
        );
    }
    let open = o.json(&["grants", "--open", "--json"]);
    let holders: Vec<Vec<String>> = open
        .as_array()
        .expect("grants")
        .iter()
        .filter(|g| g["kind"] == "bastion-rule")
        .map(|g| {
            g["holders"]
                .as_array()
                .expect("holders")
                .iter()
                .map(|h| h["deployment"].as_str().expect("id").to_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        holders,
        vec![
            vec![longer_id.clone(), shorter_id.clone()],
            vec![longer_id.clone(), shorter_id.clone()]
        ],
        "each holder's row names both: {open}"
    );
    let ledger = text(&o.run(&["grants", "--open"]).stdout);
    assert!(
        ledger.contains("held by") && ledger.contains(&shorter_id),
        "{ledger}"
    );

    // The shorter ends first: its lease closes, the rule stays for the longer.
    shorter_go.give();
    assert_eq!(shorter.wait(), 0);
    let revoked = event(&o, &shorter_id, "BastionAccessRevoked");
    assert_eq!(
        revoked["data"]["kept_for"],
        serde_json::json!([longer_id]),
        "{revoked}"
    );
    assert_eq!(
        bastion_rules(&cloud).len(),
        1,
        "the longer still goes through it"
    );
    let status = o.json(&["status", &longer_id, "--json"]);
    assert_eq!(
        step(&status, "configure")["status"],
        "running",
        "the longer still configures its servers"
    );

    // The longer goes on through the bastion, succeeds, and its end deletes the rule.
    longer_go.give();
    assert_eq!(longer.wait(), 0);
    let revoked = event(&o, &longer_id, "BastionAccessRevoked");
    assert!(revoked["data"].get("kept_for").is_none(), "{revoked}");
    assert_closed_and_purged(&o, &cloud, "acme", &longer_id);
    assert_closed_and_purged(&o, &cloud, "acme", &shorter_id);
    let ledger = o.json(&["grants", "--json"]);
    let kept: Vec<&Value> = ledger
        .as_array()
        .expect("grants")
        .iter()
        .filter(|g| g["kind"] == "bastion-rule" && g["deployment"] == shorter_id.as_str())
        .map(|g| &g["kept_for"])
        .collect();
    assert_eq!(kept, vec![&serde_json::json!([longer_id])], "{ledger}");
}

#[test]
fn a_rule_deleted_while_a_deployment_holds_its_lease_fails_it_as_bastion_access_lost() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    let o = Overture::new();
    long_lived_servers(&o, &cloud, &token_file);

    // After configuring, the deployment waits for SSH once more, through the bastion.
    let go = GoAhead::new();
    let again =
        "\n  again:\n    run: wait-ssh\n    with: { hosts: web, timeout: 4s }\n    needs: [configure]\n";
    let file = blueprint(
        &o,
        through_the_bastion(&cloud, again),
        Some(&waiting_playbook(&go.0)),
    );
    let deploying = configuring_through_the_bastion(&o, &cloud, &file, &token_file);
    let id = deploying.id.clone();

    // Someone deletes the engine's rule while the deployment holds its lease.
    let rules = bastion_rules(&cloud);
    let rule = rules[0]["id"].as_str().expect("rule id").to_owned();
    let (code, body) = cloud.call(
        "DELETE",
        &format!("/network/v2.0/security-group-rules/{rule}"),
        &token,
        None,
    );
    assert_eq!(code, 204, "{body}");
    go.give();
    assert_eq!(deploying.wait(), 1);

    let status = o.json(&["status", &id, "--json"]);
    let failed: Vec<&Value> = ["configure", "again"]
        .iter()
        .map(|name| &status["steps"][name])
        .filter(|s| s["status"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{status}");
    assert_eq!(failed[0]["error_class"], "bastion-access-lost", "{status}");
    assert_eq!(failed[0]["attempts"], 1, "a lost bastion is not retried");
    let message = o
        .events(&id)
        .into_iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .map(|e| e["data"]["message"].as_str().unwrap_or_default().to_owned())
        .expect("the attempt's failure");
    let bastion = cloud.server("acme", "bastion")["address"]
        .as_str()
        .expect("address")
        .to_owned();
    assert!(
        message.contains(&rule) && message.contains(&bastion) && message.contains("deleted"),
        "the message names the rule and the bastion: {message}"
    );
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

#[test]
fn after_a_crash_resume_closes_only_the_crashed_deployments_lease_and_the_last_deletes_the_rule() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    let o = Overture::new();
    long_lived_servers(&o, &cloud, &token_file);

    let (running_go, crashed_go) = (GoAhead::new(), GoAhead::new());
    let file = blueprint(
        &o,
        through_the_bastion(&cloud, ""),
        Some(&waiting_playbook(&running_go.0)),
    );
    let running = configuring_through_the_bastion(&o, &cloud, &file, &token_file);
    let file = blueprint(
        &o,
        through_the_bastion(&cloud, ""),
        Some(&waiting_playbook(&crashed_go.0)),
    );
    let crashed = configuring_through_the_bastion(&o, &cloud, &file, &token_file);
    let (running_id, crashed_id) = (running.id.clone(), crashed.id.clone());
    crashed.kill();

    // The deployment still running ends first: the crashed one still holds its lease.
    running_go.give();
    assert_eq!(running.wait(), 0);
    let revoked = event(&o, &running_id, "BastionAccessRevoked");
    assert_eq!(
        revoked["data"]["kept_for"],
        serde_json::json!([crashed_id]),
        "{revoked}"
    );
    assert_eq!(bastion_rules(&cloud).len(), 1, "kept for the crashed one");

    // `resume` carries the crashed deployment on; its end closes its lease, the last.
    crashed_go.give();
    let resumed = o
        .command(&["resume"])
        .env("OS_TOKEN", &token)
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("resume");
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let revoked = event(&o, &crashed_id, "BastionAccessRevoked");
    assert!(revoked["data"].get("kept_for").is_none(), "{revoked}");
    assert_closed_and_purged(&o, &cloud, "acme", &running_id);
    assert_closed_and_purged(&o, &cloud, "acme", &crashed_id);
}
