//! The ledger of temporary grants a deployment holds (`overture grants`): what opens each kind
//! and what closes it.

use overture_events::{DeploymentId, Timestamp};
use serde::{Deserialize, Serialize};

use super::DeploymentView;

/// One temporary grant of access, opened by one event and closed by another: the ledger that
/// `overture grants` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantView {
    /// What is granted.
    pub kind: GrantKind,
    /// What identifies it: the rule's id, the bastion, the key's fingerprint, the seal.
    pub reference: String,
    /// What it admits, for people.
    pub detail: String,
    /// When it was opened.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub opened_at: Timestamp,
    /// When it was closed; `None` while it is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub closed_at: Option<Timestamp>,
    /// For a bastion rule whose lease closed while other deployments still held the rule: those
    /// deployments, for which the rule was kept rather than deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_for: Vec<DeploymentId>,
}

impl GrantView {
    /// Whether the grant is still open.
    pub fn is_open(&self) -> bool {
        self.closed_at.is_none()
    }
}

/// The kinds of temporary grant a deployment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum GrantKind {
    /// A security-group rule admitting the engine to the bastion's SSH port.
    BastionRule,
    /// Forwarding through the bastion to the hosts behind it, which that rule opens.
    TcpForwarding,
    /// The deployment's own SSH key, authorized on its servers, its private half sealed.
    SshKey,
    /// The user's cloud token, sealed.
    Token,
}

impl GrantKind {
    /// The name used in output.
    pub const fn as_str(&self) -> &'static str {
        match self {
            GrantKind::BastionRule => "bastion-rule",
            GrantKind::TcpForwarding => "tcp-forwarding",
            GrantKind::SshKey => "ssh-key",
            GrantKind::Token => "token",
        }
    }

    /// Whether events of this kind are closed by `BastionAccessRevoked` (rather than by the purge).
    const fn closed_by_revocation(&self) -> bool {
        matches!(self, GrantKind::BastionRule | GrantKind::TcpForwarding)
    }
}

/// `CredentialsSealed` opens a grant for the deployment's SSH key, if it has one, and for the
/// user's token, if it was sealed too.
pub(super) fn sealed(
    view: &mut DeploymentView,
    seal: String,
    ssh_public_key: Option<String>,
    token: bool,
    at: Timestamp,
) {
    if let Some(key) = ssh_public_key {
        let detail = "the deployment's SSH key: public half on its servers, private half sealed";
        open_grant(
            view,
            GrantKind::SshKey,
            key_fingerprint(&key),
            detail.into(),
            at,
        );
    }
    if token {
        let detail = "the user's cloud token, sealed under a key it derives";
        open_grant(view, GrantKind::Token, seal, detail.into(), at);
    }
}

/// `BastionAccessGranted` opens the bastion's rule and the forwarding through it.
pub(super) fn bastion_granted(
    view: &mut DeploymentView,
    rule: String,
    security_group: String,
    bastion: String,
    source: String,
    port: u16,
    at: Timestamp,
) {
    let detail =
        format!("tcp/{port} from {source} to bastion {bastion} (security group {security_group})");
    open_grant(view, GrantKind::BastionRule, rule, detail, at);
    let detail = format!("SSH forwarding through {bastion} to the deployment's hosts");
    open_grant(view, GrantKind::TcpForwarding, bastion, detail, at);
}

/// `BastionAccessRevoked` closes the bastion's rule and forwarding, noting the deployments the
/// rule was kept for.
pub(super) fn bastion_revoked(
    view: &mut DeploymentView,
    kept_for: Vec<DeploymentId>,
    at: Timestamp,
) {
    for grant in view
        .grants
        .iter_mut()
        .filter(|g| g.is_open() && g.kind == GrantKind::BastionRule)
    {
        grant.kept_for.clone_from(&kept_for);
    }
    close_grants(view, GrantKind::closed_by_revocation, at);
}

/// `SecretsPurged` closes every grant the revocation does not.
pub(super) fn purged(view: &mut DeploymentView, at: Timestamp) {
    close_grants(view, |kind| !kind.closed_by_revocation(), at);
}

fn open_grant(
    view: &mut DeploymentView,
    kind: GrantKind,
    reference: String,
    detail: String,
    at: Timestamp,
) {
    view.grants.push(GrantView {
        kind,
        reference,
        detail,
        opened_at: at,
        closed_at: None,
        kept_for: Vec::new(),
    });
}

fn close_grants(view: &mut DeploymentView, which: impl Fn(&GrantKind) -> bool, at: Timestamp) {
    for grant in view
        .grants
        .iter_mut()
        .filter(|g| g.is_open() && which(&g.kind))
    {
        grant.closed_at = Some(at);
    }
}

/// A short, stable name for a public key: the start of the SHA-256 of its OpenSSH text.
fn key_fingerprint(public_key: &str) -> String {
    use sha2::{Digest, Sha256};
    let algorithm = public_key.split_whitespace().next().unwrap_or("key");
    let digest = hex::encode(Sha256::digest(public_key.trim().as_bytes()));
    format!("{algorithm} {}", &digest[..16])
}
