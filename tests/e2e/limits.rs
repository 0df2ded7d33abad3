//! A step cannot starve the machine: a fork bomb, a memory hog and a disk filler each fail their
//! own step as `step-failed`, naming the limit they ran into, and an output flood is kept to its
//! log's size, head and tail; meanwhile a step of another deployment runs on and ends normally.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{processes_with, text, Overture};

/// One step of `limits` running `command`, as a blueprint.
fn one_step(name: &str, limits: &str, command: &str) -> String {
    format!(
        "name: {name}\nsteps:\n  greedy:\n    run: script\n    limits: {limits}\n    with:\n      command: '{command}'\n"
    )
}

/// The message of the deployment's one failed attempt, and its class.
fn failure(overture: &Overture, id: &str) -> (String, String) {
    let events = overture.events(id);
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "StepAttemptFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    (
        failed[0]["data"]["message"]
            .as_str()
            .expect("a message")
            .to_owned(),
        failed[0]["data"]["error_class"]
            .as_str()
            .expect("a class")
            .to_owned(),
    )
}

/// The pids of `sleep SECONDS` processes (not the shells that started them).
fn sleeps(seconds: u32) -> Vec<i32> {
    processes_with(&format!("sleep {seconds}"))
        .iter()
        .filter(|line| line.contains(&format!(": sleep {seconds}")))
        .filter_map(|line| line.split(':').next()?.parse().ok())
        .collect()
}

#[test]
fn greedy_steps_fail_naming_their_limit_while_another_deployment_runs_on() {
    let overture = Overture::new();
    // A length no other test sleeps for: the neighbour's step is found by it.
    let seconds = 400_000 + (uuid::Uuid::new_v4().as_u128() % 500_000) as u32;
    let neighbour = overture.blueprint(
        "neighbour.yaml",
        &format!(
            "name: neighbour\nsteps:\n  steady:\n    run: script\n    with:\n      command: 'sleep {seconds} || true; echo finished=yes >> \"$OVERTURE_OUTPUTS\"'\n"
        ),
    );
    let mut running = overture.deploy_until(&neighbour, &["steady", "started (attempt 1)"]);
    let start = Instant::now();
    while sleeps(seconds).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the neighbour never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let cases = [
        (
            "bomb",
            "{ pids: 32 }",
            "i=0; while [ $i -lt 1000 ]; do sleep 300 & i=$((i+1)); done; wait",
            "process limit reached (limit 32)",
        ),
        (
            "hog",
            "{ memory: 32MiB }",
            "head -c 512M /dev/zero | tail -n 1 > /dev/null",
            "out of memory (limit 32 MiB)",
        ),
        (
            "filler",
            "{ workspace: 2MiB }",
            "dd if=/dev/zero of=big bs=64k count=1000",
            "workspace full (limit 2 MiB)",
        ),
    ];
    for (name, limits, command, headline) in cases {
        let file = overture.blueprint(&format!("{name}.yaml"), &one_step(name, limits, command));
        let (code, status, output) = overture.deploy(&file, &[]);
        assert_eq!(code, 1, "{name}: {}", text(&output.stderr));
        assert_eq!(status["steps"]["greedy"]["status"], "failed", "{status}");
        let id = status["id"].as_str().expect("an id");
        let (message, class) = failure(&overture, id);
        assert_eq!(class, "step-failed", "{name}");
        assert!(message.starts_with(headline), "{name}: {message}");
        // Its limits are on record with the step.
        let requested = overture
            .events(id)
            .into_iter()
            .find(|e| e["type"] == "DeploymentRequested")
            .expect("requested");
        assert!(
            requested["data"]["blueprint"]["steps"][0]["limits"].is_object(),
            "{requested}"
        );
    }

    // A flood of output is no failure; its log keeps the head and the tail.
    let flood = overture.blueprint(
        "flood.yaml",
        &one_step(
            "flood",
            "{ log: 64KiB }",
            "echo first line; head -c 20M /dev/zero | tr \"\\0\" x; echo; echo last line",
        ),
    );
    let status = overture.deploy_ok(&flood, &[]);
    let id = status["id"].as_str().expect("an id");
    let logs = overture.run(&["logs", id, "greedy"]);
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    let log = text(&logs.stdout);
    assert!(log.starts_with("first line\nxxxx"), "{}", &log[..80]);
    assert!(
        log.ends_with("xxxx\nlast line\n"),
        "{}",
        &log[log.len() - 80..]
    );
    assert!(
        log.contains(&format!(
            "\n… {} bytes cut …\n",
            20 * 1024 * 1024 + 22 - 64 * 1024
        )),
        "{}",
        log.lines()
            .find(|l| l.contains("cut"))
            .unwrap_or("no cut line")
    );
    assert!(log.len() < 64 * 1024 + 100, "{}", log.len());

    // All that time the neighbour's step ran on, and it ends as it would have anyway.
    let pids = sleeps(seconds);
    assert_eq!(pids.len(), 1, "the neighbour still runs: {pids:?}");
    // SAFETY: kill(2) on the neighbour's `sleep`, which this test's engine started.
    assert_eq!(unsafe { libc::kill(pids[0], libc::SIGKILL) }, 0);
    assert_eq!(running.wait_within(Duration::from_secs(60)), 0);
    let status = overture.json(&["status", &running.id, "--json"]);
    assert_eq!(
        status["steps"]["steady"]["outputs"]["finished"], "yes",
        "{status}"
    );
}

#[test]
fn a_limit_that_is_not_one_is_refused_naming_the_file_the_field_and_the_fix() {
    let (overture, file) = Overture::with_blueprint(
        "bad.yaml",
        &one_step("bad", "{ memory: lots, pids: 2 }", "true"),
    );
    let (code, _, output) = overture.deploy(&file, &[]);
    let stderr = text(&output.stderr);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("bad.yaml: steps.greedy.limits.memory: not a size; write a number with a unit, like 512MiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad.yaml: steps.greedy.limits.pids: 2 is too few; give at least 8"),
        "{stderr}"
    );
    assert!(overture.deployment_ids().is_empty(), "nothing recorded");
}
