//! Pinning SSH host keys, given/when/then: a host is pinned once, with the keys first learned,
//! and never again; a refused key is never retried.

use overture_domain::deployment::{Deployment, DeploymentCommand as C, PinnedHost};
use overture_domain::retry::{decide, RetryDecision};
use overture_domain::testing::events as kit;
use overture_events::{DeploymentEvent as E, ErrorClass, HostKeySource, PinnedHostKey};

/// Two ed25519 host keys made by `ssh-keygen`.
const KEY: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAfBWyWT1kqcBW4flZkhx+YZ0qby94sbtGBA2zMPVSew";
const OTHER: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn key(blob: &str) -> PinnedHostKey {
    overture_domain::host_keys::key("ssh-ed25519", blob).expect("a key")
}

fn requested() -> E {
    kit::requested(
        "x.yaml",
        kit::blueprint("name: x\nsteps:\n  conf: { run: noop }\n"),
    )
}

fn pin(server: &str, host: &str, learned: HostKeySource, blob: &str) -> PinnedHost {
    PinnedHost {
        server: server.into(),
        host: host.into(),
        learned,
        keys: vec![key(blob)],
    }
}

fn pinned_event(pin: &PinnedHost) -> E {
    E::HostKeysPinned {
        server: pin.server.clone(),
        host: pin.host.clone(),
        learned: pin.learned,
        keys: pin.keys.clone(),
    }
}

#[test]
fn each_host_is_pinned_once_with_its_keys() {
    let state = Deployment::replay([requested()]);
    let web = pin("web-1", "10.0.0.5", HostKeySource::Console, KEY);
    let again = pin("web-1", "10.0.0.5", HostKeySource::Console, OTHER);
    let tofu = pin(
        "[127.0.0.1]:2222",
        "[127.0.0.1]:2222",
        HostKeySource::FirstUse,
        OTHER,
    );
    let empty = PinnedHost {
        keys: vec![],
        ..pin("web-2", "10.0.0.6", HostKeySource::Console, KEY)
    };
    let events = Deployment::handle(
        &state,
        C::PinHostKeys(vec![web.clone(), again, empty, tofu.clone()]),
    )
    .expect("pinned");
    assert_eq!(events, vec![pinned_event(&web), pinned_event(&tofu)]);

    let state = events.into_iter().fold(state, Deployment::apply);
    assert_eq!(state.host_keys.get("10.0.0.5"), Some(&web));
    assert_eq!(state.host_keys.get("[127.0.0.1]:2222"), Some(&tofu));
}

#[test]
fn a_pinned_host_is_never_pinned_again_with_other_keys() {
    let web = pin("web-1", "10.0.0.5", HostKeySource::Console, KEY);
    let state = Deployment::replay([requested(), pinned_event(&web)]);
    let changed = pin("web-1", "10.0.0.5", HostKeySource::FirstUse, OTHER);
    assert_eq!(
        Deployment::handle(&state, C::PinHostKeys(vec![changed])),
        Ok(vec![])
    );
    assert_eq!(state.host_keys["10.0.0.5"].keys, vec![key(KEY)]);
}

#[test]
fn a_host_key_mismatch_is_never_retried_by_default() {
    let spec = kit::blueprint("name: x\nsteps:\n  conf: { run: noop }\n")
        .steps
        .remove(0);
    assert_eq!(
        decide(&spec, ErrorClass::HostKeyMismatch, 1),
        RetryDecision::GiveUp
    );
    assert_eq!(
        "host-key-mismatch".parse::<ErrorClass>(),
        Ok(ErrorClass::HostKeyMismatch)
    );
}
