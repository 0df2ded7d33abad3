//! Pinning servers' SSH host keys: once per host, never replaced.

use overture_events::DeploymentEvent;

use super::{DeploymentState, PinnedHost};

/// One `HostKeysPinned` per host not pinned yet: a pin is never replaced, so a server that
/// later offers other keys is refused rather than learned again.
pub(super) fn pin_host_keys(
    state: &DeploymentState,
    pins: Vec<PinnedHost>,
) -> Vec<DeploymentEvent> {
    let mut seen: Vec<String> = Vec::new();
    pins.into_iter()
        .filter(|pin| !pin.keys.is_empty())
        .filter(|pin| !state.host_keys.contains_key(&pin.host))
        .filter(|pin| {
            let first = !seen.contains(&pin.host);
            seen.push(pin.host.clone());
            first
        })
        .map(|pin| DeploymentEvent::HostKeysPinned {
            server: pin.server,
            host: pin.host,
            learned: pin.learned,
            keys: pin.keys,
        })
        .collect()
}
