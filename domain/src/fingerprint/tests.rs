use overture_events::{DeploymentEvent, StoredFile};
use sha2::{Digest, Sha256};

use super::*;
use crate::blueprint::parse;
use crate::deployment::Deployment;
use crate::testing::events::{requested, succeeded_with};

const BLUEPRINT: &str = "name: x
params: { greeting: { default: hello }, region: { default: north } }
secrets: [api_key]
steps:
  build: { run: script, with: { command: 'echo {{ params.region }}' } }
  conf: { run: script, needs: [build], limits: { cpu: 0.5 }, with: { command: 'echo {{ params.greeting }} {{ steps.build.outputs.url }} {{ secrets.api_key }}' } }
";

const PARAMS: &[(&str, &str)] = &[("greeting", "hello"), ("region", "north")];
const OUTPUTS: &[(&str, &str)] = &[("url", "http://a"), ("other", "1")];

/// A deployment of `text` with these parameters, whose `build` succeeded with these outputs.
fn given(text: &str, params: &[(&str, &str)], outputs: &[(&str, &str)]) -> DeploymentState {
    given_snapshot(parse(text).expect("valid").snapshot, params, outputs)
}

fn given_snapshot(
    blueprint: BlueprintSnapshot,
    params: &[(&str, &str)],
    outputs: &[(&str, &str)],
) -> DeploymentState {
    let mut request = requested("b.yaml", blueprint);
    if let DeploymentEvent::DeploymentRequested { params: given, .. } = &mut request {
        *given = params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
    }
    [request, succeeded_with("build", 1, outputs)]
        .into_iter()
        .fold(DeploymentState::default(), Deployment::apply)
}

fn fingerprint_of(state: &DeploymentState, step: &str) -> InputFingerprint {
    of_attempt(state, state.spec(step).expect("a step of the blueprint"))
}

/// The parts whose digests differ, by name.
fn differing(before: &InputFingerprint, after: &InputFingerprint) -> Vec<String> {
    compare(Some(before), after)
        .into_iter()
        .map(|changed| changed.input)
        .collect()
}

#[test]
fn the_same_inputs_give_the_same_fingerprint_naming_each_input() {
    let first = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");
    let again = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");

    assert_eq!(first, again);
    let names: Vec<&str> = first.parts.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "inputs.build.url",
            "kind",
            "limits",
            "params.greeting",
            "secrets.api_key",
            "settings"
        ]
    );
}

#[test]
fn a_changed_parameter_changes_only_its_part_and_only_in_the_steps_that_read_it() {
    let before = given(BLUEPRINT, PARAMS, OUTPUTS);
    let after = given(
        BLUEPRINT,
        &[("greeting", "hi"), ("region", "north")],
        OUTPUTS,
    );

    assert_eq!(
        differing(
            &fingerprint_of(&before, "conf"),
            &fingerprint_of(&after, "conf")
        ),
        ["params.greeting"]
    );
    assert_eq!(
        fingerprint_of(&before, "build"),
        fingerprint_of(&after, "build")
    );
}

#[test]
fn a_changed_upstream_output_changes_only_its_part_and_an_unread_one_nothing() {
    let before = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");
    let read = given(BLUEPRINT, PARAMS, &[("url", "http://b"), ("other", "1")]);
    let unread = given(BLUEPRINT, PARAMS, &[("url", "http://a"), ("other", "2")]);

    assert_eq!(
        differing(&before, &fingerprint_of(&read, "conf")),
        ["inputs.build.url"]
    );
    assert_eq!(before, fingerprint_of(&unread, "conf"));
}

#[test]
fn the_kind_the_settings_and_the_limits_each_have_their_part() {
    let before = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");
    let changes = [
        (
            "'echo {{ params.greeting",
            "'echo -n {{ params.greeting",
            "settings",
        ),
        ("cpu: 0.5", "cpu: 0.25", "limits"),
        (
            "needs: [build], limits",
            "needs: [build], timeout: 5m, limits",
            "limits",
        ),
    ];
    for (from, to, part) in changes {
        let text = BLUEPRINT.replacen(from, to, 1);
        let after = fingerprint_of(&given(&text, PARAMS, OUTPUTS), "conf");
        assert_eq!(differing(&before, &after), [part], "{from} -> {to}");
    }
    let mut other_kind = given(BLUEPRINT, PARAMS, OUTPUTS);
    let mut blueprint = (**other_kind.blueprint.as_ref().expect("requested")).clone();
    blueprint.steps[1].kind = crate::kind::Kind::Noop.name().into();
    other_kind.blueprint = Some(std::sync::Arc::new(blueprint));
    assert_eq!(
        differing(&before, &fingerprint_of(&other_kind, "conf")),
        ["kind"]
    );
}

#[test]
fn each_file_the_step_takes_has_its_part_and_a_file_it_does_not_take_none() {
    let text = "name: x\nsteps:\n  build: { run: script, with: { command: 'true' } }\n  net: { run: terraform, with: { dir: infra/net } }\n";
    let with_files = |main: &str, other: &str| {
        let mut blueprint = parse(text).expect("valid").snapshot;
        for (path, hash) in [("infra/net/main.tf", main), ("infra/app/main.tf", other)] {
            let stored = StoredFile {
                size: 1,
                sha256: hash.into(),
            };
            blueprint.stored_files.insert(path.into(), stored);
        }
        fingerprint_of(&given_snapshot(blueprint, &[], &[]), "net")
    };
    let before = with_files("aa", "bb");

    assert_eq!(before.parts["files.infra/net/main.tf"], "aa");
    assert!(!before.parts.contains_key("files.infra/app/main.tf"));
    assert_eq!(
        differing(&before, &with_files("cc", "bb")),
        ["files.infra/net/main.tf"]
    );
    assert_eq!(before, with_files("aa", "dd"));
}

#[test]
fn the_members_of_a_service_the_step_requires_are_its_part() {
    let text = "name: x\nsteps:\n  build: { run: script, with: { command: 'true' } }\n  app: { run: script, requires: [{ service: db, count: 1 }], with: { command: 'echo {{ services.db.addresses }}' } }\n";
    let with_members = |members: &[&str]| {
        let mut state = given(text, &[], &[]);
        let resolved = DeploymentEvent::ServicesResolved {
            step: "app".into(),
            services: [("db".into(), members.iter().map(|m| m.to_string()).collect())].into(),
        };
        state = Deployment::apply(state, resolved);
        fingerprint_of(&state, "app")
    };
    let before = with_members(&["10.0.0.5:5432"]);

    assert!(before.parts.contains_key("services.db"));
    assert_eq!(before, with_members(&["10.0.0.5:5432"]));
    assert_eq!(
        differing(&before, &with_members(&["10.0.0.5:5432", "10.0.0.6:5432"])),
        ["services.db"]
    );
}

#[test]
fn a_secret_is_named_but_nothing_of_its_value_is_kept() {
    let value = "s3cr3t-value";
    let fingerprint = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");
    let recorded = serde_json::to_string(&fingerprint).expect("serialisable");

    assert_eq!(fingerprint.parts["secrets.api_key"], SECRET);
    assert!(!recorded.contains(value));
    assert!(!recorded.contains(&hex::encode(Sha256::digest(value.as_bytes()))));
}

#[test]
fn given_nothing_recorded_when_compared_then_every_input_is_changed_unknown_before() {
    let new = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");

    let changes = compare(None, &new);

    assert_eq!(changes.len(), new.parts.len());
    assert!(changes
        .iter()
        .all(|changed| changed.change == InputChange::UnknownBefore));
    assert_eq!(
        InputChange::UnknownBefore.as_str(),
        "changed (unknown before)"
    );
}

#[test]
fn given_the_same_fingerprint_when_compared_then_nothing_changed() {
    let recorded = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");

    assert_eq!(compare(Some(&recorded), &recorded.clone()), []);
}

#[test]
fn given_an_input_taken_and_one_dropped_when_compared_then_each_is_named_with_its_change() {
    let recorded = fingerprint_of(&given(BLUEPRINT, PARAMS, OUTPUTS), "conf");
    let text = BLUEPRINT.replace("{{ params.greeting }}", "{{ params.region }}");
    let new = fingerprint_of(&given(&text, PARAMS, OUTPUTS), "conf");

    let changes = compare(Some(&recorded), &new);

    assert_eq!(
        changes,
        [
            changed("params.greeting", InputChange::Removed),
            changed("params.region", InputChange::Added),
            changed("settings", InputChange::Changed),
        ]
    );
}
