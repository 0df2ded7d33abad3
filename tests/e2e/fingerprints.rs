//! Every attempt records the fingerprint of its inputs: the same blueprint with the same
//! parameters records the same fingerprints, and a changed parameter changes only those of the
//! steps that read it.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{id_of, text, Overture};

/// `fetch` makes an output `greet` reads; only `greet` reads the parameter.
const GREETING: &str = r#"
name: greeting
params:
  greeting: { default: "hello" }
steps:
  fetch:
    run: script
    with: { command: 'echo "version=1.4.2" >> "$OVERTURE_OUTPUTS"' }
  greet:
    run: script
    needs: [fetch]
    with: { command: 'echo "{{ params.greeting }} from {{ steps.fetch.outputs.version }}"' }
  done:
    run: noop
    needs: [greet]
"#;

/// The fingerprint each attempt's `StepStarted` recorded, by step.
fn fingerprints(overture: &Overture, id: &str) -> BTreeMap<String, Value> {
    let started: Vec<Value> = overture
        .events(id)
        .into_iter()
        .filter(|event| event["type"] == "StepStarted")
        .collect();
    assert_eq!(started.len(), 3, "one attempt per step: {started:?}");
    started
        .into_iter()
        .map(|event| {
            let step = event["data"]["step"].as_str().expect("a step").to_owned();
            let fingerprint = event["data"]["fingerprint"].clone();
            assert!(
                fingerprint["hash"].as_str().is_some_and(|h| h.len() == 64),
                "{step}: {fingerprint}"
            );
            (step, fingerprint)
        })
        .collect()
}

#[test]
fn a_redeploy_records_the_same_fingerprints_and_a_changed_parameter_changes_only_its_readers() {
    let (overture, file) = Overture::with_blueprint("greeting.yaml", GREETING);
    let first = id_of(&overture.deploy_ok(&file, &[]));
    let before = fingerprints(&overture, &first);
    assert!(before["greet"]["parts"]["params.greeting"].is_string());
    assert!(before["greet"]["parts"]["inputs.fetch.version"].is_string());

    let output = overture.run(&["redeploy", &first, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).expect("the status");
    assert_eq!(fingerprints(&overture, &id_of(&status)), before);

    let changed = id_of(&overture.deploy_ok(&file, &["--param", "greeting=bonjour"]));
    let after = fingerprints(&overture, &changed);
    assert_eq!(after["fetch"], before["fetch"]);
    assert_eq!(after["done"], before["done"]);
    let (old, new) = (&before["greet"]["parts"], &after["greet"]["parts"]);
    let differing: Vec<&String> = new
        .as_object()
        .expect("parts")
        .iter()
        .filter(|(name, digest)| old[name.as_str()] != **digest)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(differing, ["params.greeting"]);
}
