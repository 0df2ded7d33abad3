//! [`CloudAccess`]: the engine opens a deployment's bastion for itself ([`GrantAccess`]) and closes
//! it again ([`RevokeAccess`]), with the user's token held in the session.
//!
//! Every use of a rule is a lease ([`overture_kit::leases`]): the grant opens the deployment's
//! lease before it creates (or finds) the rule, and the revocation deletes the rule only when it
//! closes the last lease on it. A grant that finds the rule being deleted by its last holder
//! waits a moment for the delete to end, then makes the rule afresh.

#[cfg(feature = "runner")]
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_events::{CloudAccount, DeploymentId};
#[cfg(feature = "orchestrator")]
use overture_orchestrator::{RevokeAccess, WorkError};
#[cfg(feature = "runner")]
use overture_runner::{step::SshAddress, GrantAccess, GrantError};

use super::{Cloud, CloudError};
#[cfg(feature = "runner")]
use super::{NewRule, RuleSource};
use std::sync::Arc;

#[cfg(feature = "runner")]
use overture_kit::leases::grant_leased;
#[cfg(feature = "orchestrator")]
use overture_kit::leases::{revoke_leased, revoke_unrecorded, Revocation};
use overture_kit::leases::{LeaseBastionRules, LeaseError, Leased, RuleKey};
use overture_kit::TokenCustody;

/// How often a grant finds the rule closing before it gives up for the retry policy to try again.
#[cfg(feature = "runner")]
const CLOSING_WAITS: u32 = 20;
/// How long a grant waits for the last holder's delete to end before it asks again.
#[cfg(feature = "runner")]
const CLOSING_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Opens and closes bastions for the engine with the tokens of the deployments it runs.
#[derive(Clone)]
pub struct CloudAccess {
    custody: Arc<dyn TokenCustody>,
    leases: Arc<dyn LeaseBastionRules>,
}

/// Why the engine could not act in a deployment's cloud.
#[derive(Debug, thiserror::Error)]
enum AccessError {
    /// This process was not given the deployment's token.
    #[error(
        "this engine holds no cloud token for deployment {0}; run `overture resume` with \
         `--token-file FILE` or `OS_TOKEN` set to a token of the deployment's project"
    )]
    NoToken(DeploymentId),
    /// The token given is for another project than the deployment's.
    #[error(
        "the token given for deployment {deployment} is for project `{given}`, but the deployment \
         acts in project `{wanted}`; give a token of `{wanted}`"
    )]
    OtherProject {
        deployment: DeploymentId,
        given: String,
        wanted: String,
    },
    /// The engine's own address towards the bastion could not be found.
    #[cfg_attr(not(feature = "runner"), allow(dead_code))]
    #[error("cannot find the engine's address towards the bastion {bastion}: {reason}")]
    NoRoute { bastion: String, reason: String },
    /// The cloud refused or failed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// The token's custody failed.
    #[error(transparent)]
    Custody(#[from] overture_kit::CustodyError),
    /// The deployment's lease on the rule could not be opened or closed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

impl From<Leased<AccessError>> for AccessError {
    fn from(leased: Leased<AccessError>) -> Self {
        match leased {
            Leased::Lease(lease) => AccessError::Lease(lease),
            Leased::Cloud(cloud) => cloud,
        }
    }
}

/// The lease key of the rule that admits `source` to `port` in `security_group` of `cloud`.
fn rule_key(cloud: &CloudAccount, security_group: &str, source: &str, port: u16) -> RuleKey {
    RuleKey {
        cloud: cloud.auth_url.clone(),
        security_group: security_group.to_owned(),
        source: source.to_owned(),
        port,
    }
}

impl CloudAccess {
    /// Acts with the tokens `custody` keeps; every deployment's use of a rule is a lease in
    /// `leases`, which every engine sharing the bastions must share.
    pub fn new(custody: Arc<dyn TokenCustody>, leases: Arc<dyn LeaseBastionRules>) -> Self {
        Self { custody, leases }
    }

    /// A client for the deployment's project, with the token this process holds for it.
    async fn cloud(
        &self,
        deployment: DeploymentId,
        account: &CloudAccount,
    ) -> Result<Cloud, AccessError> {
        let token = self
            .custody
            .token(deployment, &account.project)
            .await?
            .ok_or(AccessError::NoToken(deployment))?;
        let cloud = Cloud::connect(&account.auth_url, token).await?;
        if cloud.info().project_id != account.project_id {
            return Err(AccessError::OtherProject {
                deployment,
                given: cloud.info().project.clone(),
                wanted: account.project.clone(),
            });
        }
        Ok(cloud)
    }
}

#[cfg(feature = "runner")]
#[async_trait]
impl GrantAccess for CloudAccess {
    async fn grant(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        bastion: &SshAddress,
        security_group: &str,
    ) -> Result<BastionAccess, GrantError> {
        let granted = async {
            let source = local_address_towards(&bastion.host, bastion.port)
                .await
                .map_err(|error| AccessError::NoRoute {
                    bastion: bastion.address.clone(),
                    reason: error.to_string(),
                })?;
            let source = match source {
                IpAddr::V4(ip) => format!("{ip}/32"),
                IpAddr::V6(ip) => format!("{ip}/128"),
            };
            let client = self.cloud(deployment, cloud).await?;
            let key = rule_key(cloud, security_group, &source, bastion.port);
            let create = || async {
                client
                    .create_rule(&NewRule {
                        security_group_id: security_group.to_owned(),
                        port: bastion.port,
                        from: RuleSource::Cidr(source.clone()),
                        description: Some(
                            "overture: engine access, leased by each deployment through it"
                                .to_owned(),
                        ),
                    })
                    .await
                    .map_err(AccessError::Cloud)
            };
            let mut waits = 0;
            let rule = loop {
                match grant_leased(self.leases.as_ref(), &key, deployment, create()).await {
                    // The last holder is deleting the rule: once it is gone, it is made afresh.
                    Err(Leased::Lease(LeaseError::Closing { .. })) if waits < CLOSING_WAITS => {
                        waits += 1;
                        tokio::time::sleep(CLOSING_WAIT).await;
                    }
                    granted => break granted?,
                }
            };
            tracing::debug!(%deployment, rule, source, "opened the bastion for the engine");
            Ok::<_, AccessError>(BastionAccess {
                rule,
                security_group: security_group.to_owned(),
                bastion: bastion.address.clone(),
                source,
                port: bastion.port,
            })
        };
        granted.await.map_err(|error| match error {
            AccessError::Cloud(CloudError::Backend(message)) => GrantError::Backend(message),
            AccessError::Lease(lease) if lease.is_retryable() => {
                GrantError::Backend(lease.to_string())
            }
            other => GrantError::Refused(other.to_string()),
        })
    }

    async fn still_granted(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<bool, GrantError> {
        let found = async {
            let client = self.cloud(deployment, cloud).await?;
            match client.rules(&access.security_group).await {
                Ok(rules) => Ok(rules.iter().any(|rule| rule.id == access.rule)),
                // The group went, and every rule with it.
                Err(CloudError::NotFound(_)) => Ok(false),
                Err(other) => Err(AccessError::Cloud(other)),
            }
        };
        found.await.map_err(|error| match error {
            AccessError::Cloud(CloudError::Backend(message)) => GrantError::Backend(message),
            other => GrantError::Refused(other.to_string()),
        })
    }
}

#[cfg(feature = "orchestrator")]
#[async_trait]
impl RevokeAccess for CloudAccess {
    async fn revoke(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<Revocation, WorkError> {
        let revoked = async {
            let client = self.cloud(deployment, cloud).await?;
            let key = rule_key(cloud, &access.security_group, &access.source, access.port);
            let delete = async {
                match client.delete_rule(&access.rule).await {
                    // Deleted by an earlier try, or with its group: either way it admits no one.
                    Ok(()) | Err(CloudError::NotFound(_)) => Ok(()),
                    Err(other) => Err(AccessError::Cloud(other)),
                }
            };
            Ok::<_, AccessError>(
                revoke_leased(self.leases.as_ref(), &key, deployment, delete).await?,
            )
        };
        let revocation = revoked.await.map_err(|error| match &error {
            AccessError::Cloud(cloud) if cloud.is_backend() => WorkError::unavailable(error),
            AccessError::NoRoute { .. } => WorkError::unavailable(error),
            AccessError::Lease(lease) if lease.is_retryable() => WorkError::unavailable(error),
            _ => WorkError::refused(error),
        })?;
        match &revocation {
            Revocation::Deleted => {
                tracing::debug!(%deployment, rule = access.rule, "closed the bastion");
            }
            Revocation::KeptFor(others) => {
                tracing::debug!(%deployment, rule = access.rule, ?others, "closed the deployment's lease; the rule stays for the others");
            }
        }
        Ok(revocation)
    }

    async fn revoke_unrecorded(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        recorded: Option<&BastionAccess>,
    ) -> Result<usize, WorkError> {
        let recorded = recorded.map(|a| rule_key(cloud, &a.security_group, &a.source, a.port));
        // No grant names the rule's id: the rule is found by what it admits.
        let delete = |key: RuleKey| async move {
            let client = self.cloud(deployment, cloud).await?;
            let rules = match client.rules(&key.security_group).await {
                Ok(rules) => rules,
                Err(CloudError::NotFound(_)) => return Ok(()),
                Err(other) => return Err(AccessError::Cloud(other)),
            };
            let admits = |rule: &&crate::SecurityGroupRule| {
                rule.direction == "ingress"
                    && rule.remote_ip_prefix.as_deref() == Some(key.source.as_str())
                    && rule.port_range_min == Some(key.port)
                    && rule.port_range_max == Some(key.port)
            };
            for rule in rules.iter().filter(admits) {
                match client.delete_rule(&rule.id).await {
                    Ok(()) | Err(CloudError::NotFound(_)) => {}
                    Err(other) => return Err(AccessError::Cloud(other)),
                }
            }
            Ok(())
        };
        let closed = revoke_unrecorded(self.leases.as_ref(), deployment, recorded.as_ref(), delete)
            .await
            .map_err(AccessError::from)
            .map_err(|error| match &error {
                AccessError::Cloud(cloud) if cloud.is_backend() => WorkError::unavailable(error),
                AccessError::Lease(lease) if lease.is_retryable() => WorkError::unavailable(error),
                _ => WorkError::refused(error),
            })?;
        for rule in &closed {
            tracing::info!(%deployment, %rule, "closed a bastion lease no recorded grant named");
        }
        Ok(closed.len())
    }
}

/// The engine's own address as a host at `host:port` sees it: the source address the kernel
/// picks for the route there. A UDP `connect` only picks the route; it sends nothing.
#[cfg(feature = "runner")]
async fn local_address_towards(host: &str, port: u16) -> std::io::Result<IpAddr> {
    let target = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("`{host}` has no address")))?;
    let unspecified = match target {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let socket = tokio::net::UdpSocket::bind(SocketAddr::new(unspecified, 0)).await?;
    socket.connect(target).await?;
    Ok(socket.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use overture_domain::secret::SecretString;
    use overture_kit::CustodyError;

    /// A custody that was never given a token.
    struct NoTokens;

    #[async_trait]
    impl TokenCustody for NoTokens {
        async fn keep(
            &self,
            _: DeploymentId,
            _: &str,
            _: &SecretString,
        ) -> Result<(), CustodyError> {
            unreachable!("the grant only reads the token")
        }

        async fn token(
            &self,
            _: DeploymentId,
            _: &str,
        ) -> Result<Option<SecretString>, CustodyError> {
            Ok(None)
        }

        async fn forget(&self, _: DeploymentId) -> Result<(), CustodyError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_engines_address_towards_loopback_is_loopback() {
        let address = local_address_towards("127.0.0.1", 22)
            .await
            .expect("a route");
        assert_eq!(address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    }

    #[tokio::test]
    async fn without_a_token_the_user_is_told_how_to_give_one() {
        let access = CloudAccess::new(
            Arc::new(NoTokens),
            Arc::new(overture_kit::leases::MemoryLeases::new()),
        );
        let deployment = DeploymentId::from_uuid(uuid::Uuid::nil());
        let account = CloudAccount {
            auth_url: "http://127.0.0.1:9/identity/v3".into(),
            project_id: "p".into(),
            project: "tenant-a".into(),
            domain: "Default".into(),
            user: "tenant-a".into(),
            endpoints: vec![],
        };
        let bastion = SshAddress::parse("127.0.0.1:22").expect("an address");
        let error = access
            .grant(deployment, &account, &bastion, "g")
            .await
            .expect_err("no token");
        let GrantError::Refused(message) = error else {
            panic!("{error:?}");
        };
        assert!(
            message.contains("overture resume") && message.contains("--token-file"),
            "{message}"
        );
        let revoked = access
            .revoke(
                deployment,
                &account,
                &BastionAccess {
                    rule: "r".into(),
                    security_group: "g".into(),
                    bastion: "127.0.0.1:22".into(),
                    source: "127.0.0.1/32".into(),
                    port: 22,
                },
            )
            .await
            .expect_err("no token");
        assert!(revoked.to_string().contains("OS_TOKEN"), "{revoked}");
        assert!(!revoked.is_retryable(), "only a person can give the token");
    }
}
