//! Bastion leases: every deployment that goes through a bastion holds a lease on the engine's
//! rule there, and the rule is deleted only when the last lease on it closes.
//!
//! Two deployments of one tenant through one bastion need the identical rule (same cloud,
//! security group, source address and port), and the cloud keeps it once: without leases the
//! first deployment to end would delete the rule the other still goes through. So:
//!
//! - [`LeaseBastionRules`] is the port: the lease table, whose every change is atomic.
//! - [`grant_leased`] opens the deployment's lease *before* the rule is created (or found), so
//!   the rule it returns cannot be deleted under it.
//! - [`revoke_leased`] closes the lease; only the last holder is told to delete the rule, and
//!   while it deletes the rule stays *closing*: a grant meanwhile is refused with
//!   [`LeaseError::Closing`], which a retry fixes (the rule is then made afresh).
//! - [`LeaseBastionRules::held_by`] lists every lease a deployment holds, recorded or not: a
//!   lease opened just before a crash, before its grant was recorded, is closed by it at the
//!   deployment's end and by `resume`.
//! - [`MemoryLeases`] keeps leases in memory, for handlers' tests; `leases_contract` (feature
//!   `leases-contract`) is the suite every adapter passes (SQLite, DynamoDB, memory).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;

use async_trait::async_trait;
use overture_events::DeploymentId;

/// The identity of one rule on a bastion: what the cloud would keep only once.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuleKey {
    /// The cloud (its identity endpoint): security group ids are unique within it.
    pub cloud: String,
    /// The bastion's security group.
    pub security_group: String,
    /// The address admitted.
    pub source: String,
    /// The port admitted.
    pub port: u16,
}

impl std::fmt::Display for RuleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tcp/{} from {} in security group {} of {}",
            self.port, self.source, self.security_group, self.cloud
        )
    }
}

impl RuleKey {
    /// One string naming the rule, for stores keyed by a single value.
    pub fn as_key(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.cloud, self.security_group, self.source, self.port
        )
    }

    /// Reads back what [`RuleKey::as_key`] made; `None` when `key` is not one. The cloud, an
    /// address, is read as the rest, so a `|` in it does not matter.
    pub fn from_key(key: &str) -> Option<RuleKey> {
        let mut parts = key.rsplitn(4, '|');
        let port = parts.next()?.parse().ok()?;
        let source = parts.next()?.to_owned();
        let security_group = parts.next()?.to_owned();
        let cloud = parts.next()?.to_owned();
        Some(RuleKey {
            cloud,
            security_group,
            source,
            port,
        })
    }
}

/// What closing a lease left to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// Others still hold the rule (these deployments): it stays.
    Kept(Vec<DeploymentId>),
    /// This was the last lease: the rule is now closing, held by this deployment; delete the
    /// rule, then call [`LeaseBastionRules::closed`].
    Last,
}

/// The lease table: who holds which bastion rule. Each call is one atomic change.
#[async_trait]
pub trait LeaseBastionRules: Send + Sync {
    /// Opens `deployment`'s lease on `rule` (again: holding it already is no error). Refused
    /// with [`LeaseError::Closing`] while the rule's last holder deletes it.
    async fn acquire(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError>;

    /// Closes `deployment`'s lease on `rule`. When no one else holds it, the rule turns
    /// closing, held by `deployment`, and [`Release::Last`] says to delete it. Calling it again
    /// after a failed delete answers `Last` again.
    async fn release(
        &self,
        rule: &RuleKey,
        deployment: DeploymentId,
    ) -> Result<Release, LeaseError>;

    /// The rule closed by `deployment` is deleted: grants may make it again.
    async fn closed(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError>;

    /// The deployments holding an open lease on `rule`, in the order of their ids (which is
    /// the order they were requested in).
    async fn holders(&self, rule: &RuleKey) -> Result<Vec<DeploymentId>, LeaseError>;

    /// Every rule `deployment` holds a lease on, open or closing, whether or not its grant was
    /// recorded (a lease opened just before a crash is one), in the order of their keys.
    async fn held_by(&self, deployment: DeploymentId) -> Result<Vec<RuleKey>, LeaseError>;
}

/// Why a lease could not be opened or closed; says whether trying again can help.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The rule's last holder is deleting it right now: try again shortly, and the rule will be
    /// made afresh.
    #[error("the rule ({rule}) is being closed by deployment {by}, its last holder")]
    Closing {
        /// The rule.
        rule: RuleKey,
        /// The deployment deleting it.
        by: DeploymentId,
    },
    /// The lease table could not be reached or failed in a way that may pass.
    #[error("the bastion lease table failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The lease table refused, and will refuse again (no right to it, a damaged row).
    #[error("the bastion lease table refused: {0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LeaseError {
    /// Whether the same call may succeed later.
    pub const fn is_retryable(&self) -> bool {
        matches!(
            self,
            LeaseError::Closing { .. } | LeaseError::Unavailable(_)
        )
    }
}

/// Why a leased grant or revocation failed: the lease table, or the cloud.
#[derive(Debug, thiserror::Error)]
pub enum Leased<E> {
    /// The lease could not be opened or closed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The cloud could not create or delete the rule.
    #[error(transparent)]
    Cloud(E),
}

/// How a leased revocation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revocation {
    /// The rule was deleted: this deployment held the last lease.
    Deleted,
    /// The rule stays, for these deployments that still hold it.
    KeptFor(Vec<DeploymentId>),
}

/// Opens `deployment`'s lease on `rule`, then has `create` make (or find) the rule. Should
/// `create` fail, the lease is closed again, since no `BastionAccessGranted` will name it for the
/// deployment's end to close; were it the last, no rule was made to delete.
pub async fn grant_leased<T, E, F>(
    leases: &dyn LeaseBastionRules,
    rule: &RuleKey,
    deployment: DeploymentId,
    create: F,
) -> Result<T, Leased<E>>
where
    F: Future<Output = Result<T, E>>,
{
    leases.acquire(rule, deployment).await?;
    match create.await {
        Ok(created) => Ok(created),
        Err(error) => {
            // Should closing fail, the lease stays open: the rule then outlives its use, which
            // is the safe way to be wrong.
            if let Ok(Release::Last) = leases.release(rule, deployment).await {
                let _ = leases.closed(rule, deployment).await;
            }
            Err(Leased::Cloud(error))
        }
    }
}

/// Closes `deployment`'s lease on `rule`; when it was the last, has `delete` delete the rule
/// and then ends the closing. A failed delete leaves the rule closing (grants wait) until the
/// revocation is tried again.
pub async fn revoke_leased<E, F>(
    leases: &dyn LeaseBastionRules,
    rule: &RuleKey,
    deployment: DeploymentId,
    delete: F,
) -> Result<Revocation, Leased<E>>
where
    F: Future<Output = Result<(), E>>,
{
    match leases.release(rule, deployment).await? {
        Release::Kept(others) => Ok(Revocation::KeptFor(others)),
        Release::Last => {
            delete.await.map_err(Leased::Cloud)?;
            leases.closed(rule, deployment).await?;
            Ok(Revocation::Deleted)
        }
    }
}

/// Closes every lease `deployment` holds on a rule other than `recorded` (the one its recorded
/// grant names, closed by [`revoke_leased`] with the grant's rule id): a lease opened just before
/// a crash, before its grant was recorded, that nothing else would close. `delete` deletes a rule
/// whose last lease it was. Returns the rules whose leases it closed.
pub async fn revoke_unrecorded<E, F, D>(
    leases: &dyn LeaseBastionRules,
    deployment: DeploymentId,
    recorded: Option<&RuleKey>,
    delete: D,
) -> Result<Vec<RuleKey>, Leased<E>>
where
    D: Fn(RuleKey) -> F,
    F: Future<Output = Result<(), E>>,
{
    let mut closed = Vec::new();
    for rule in leases.held_by(deployment).await? {
        if Some(&rule) == recorded {
            continue;
        }
        revoke_leased(leases, &rule, deployment, delete(rule.clone())).await?;
        closed.push(rule);
    }
    Ok(closed)
}

/// One rule's leases, in memory.
#[derive(Debug, Default)]
struct RuleLeases {
    /// Open leases.
    holders: Vec<DeploymentId>,
    /// The last holder deleting the rule, if one is.
    closing: Option<DeploymentId>,
}

/// The lease table in memory, for handlers' tests and as the contract's reference.
#[derive(Debug, Default)]
pub struct MemoryLeases {
    rules: Mutex<BTreeMap<RuleKey, RuleLeases>>,
}

impl MemoryLeases {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<RuleKey, RuleLeases>) -> T) -> T {
        let mut rules = self
            .rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut rules)
    }
}

#[async_trait]
impl LeaseBastionRules for MemoryLeases {
    async fn acquire(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError> {
        self.with(|rules| {
            let leases = rules.entry(rule.clone()).or_default();
            if let Some(by) = leases.closing {
                return Err(LeaseError::Closing {
                    rule: rule.clone(),
                    by,
                });
            }
            if !leases.holders.contains(&deployment) {
                leases.holders.push(deployment);
            }
            Ok(())
        })
    }

    async fn release(
        &self,
        rule: &RuleKey,
        deployment: DeploymentId,
    ) -> Result<Release, LeaseError> {
        self.with(|rules| {
            let leases = rules.entry(rule.clone()).or_default();
            leases.holders.retain(|holder| *holder != deployment);
            if !leases.holders.is_empty() {
                let mut others = leases.holders.clone();
                others.sort();
                return Ok(Release::Kept(others));
            }
            match leases.closing {
                Some(by) if by != deployment => Err(LeaseError::Closing {
                    rule: rule.clone(),
                    by,
                }),
                _ => {
                    leases.closing = Some(deployment);
                    Ok(Release::Last)
                }
            }
        })
    }

    async fn closed(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError> {
        self.with(|rules| {
            if rules
                .get(rule)
                .is_some_and(|l| l.closing == Some(deployment) && l.holders.is_empty())
            {
                rules.remove(rule);
            }
            Ok(())
        })
    }

    async fn holders(&self, rule: &RuleKey) -> Result<Vec<DeploymentId>, LeaseError> {
        Ok(self.with(|rules| {
            rules
                .get(rule)
                .map(|l| l.holders.clone())
                .unwrap_or_default()
        }))
        .map(|mut holders: Vec<DeploymentId>| {
            holders.sort();
            holders
        })
    }

    async fn held_by(&self, deployment: DeploymentId) -> Result<Vec<RuleKey>, LeaseError> {
        Ok(self.with(|rules| {
            rules
                .iter()
                .filter(|(_, l)| l.holders.contains(&deployment) || l.closing == Some(deployment))
                .map(|(rule, _)| rule.clone())
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> RuleKey {
        RuleKey {
            cloud: "http://127.0.0.1:5000/identity/v3".into(),
            security_group: "bastion-sg".into(),
            source: "10.0.0.1/32".into(),
            port: 22,
        }
    }

    fn deployment(n: u128) -> DeploymentId {
        DeploymentId::from_uuid(uuid::Uuid::from_u128(n))
    }

    /// The cloud's rules, as the grant and revocation change them.
    #[derive(Default)]
    struct Rules(Mutex<Vec<String>>);

    impl Rules {
        async fn create(&self) -> Result<String, String> {
            let mut rules = self.0.lock().expect("rules");
            if rules.is_empty() {
                rules.push("rule-1".into());
            }
            Ok(rules[0].clone())
        }

        async fn delete(&self) -> Result<(), String> {
            self.0.lock().expect("rules").clear();
            Ok(())
        }

        fn open(&self) -> bool {
            !self.0.lock().expect("rules").is_empty()
        }
    }

    #[tokio::test]
    async fn the_shorter_deployment_ending_first_leaves_the_rule_to_the_longer() {
        let (leases, rules) = (MemoryLeases::new(), Rules::default());
        let (shorter, longer) = (deployment(1), deployment(2));
        let granted = grant_leased(&leases, &rule(), longer, rules.create()).await;
        assert_eq!(granted.expect("granted"), "rule-1");
        let granted = grant_leased(&leases, &rule(), shorter, rules.create()).await;
        assert_eq!(granted.expect("granted"), "rule-1", "the identical rule");

        let revoked = revoke_leased(&leases, &rule(), shorter, rules.delete()).await;
        assert_eq!(revoked.expect("revoked"), Revocation::KeptFor(vec![longer]));
        assert!(rules.open(), "the longer deployment still goes through it");

        let revoked = revoke_leased(&leases, &rule(), longer, rules.delete()).await;
        assert_eq!(revoked.expect("revoked"), Revocation::Deleted);
        assert!(!rules.open(), "no rule is left");
    }

    #[tokio::test]
    async fn a_grant_while_the_last_holder_deletes_the_rule_is_refused_for_a_retry() {
        let (leases, rules) = (MemoryLeases::new(), Rules::default());
        let (last, late) = (deployment(1), deployment(2));
        grant_leased(&leases, &rule(), last, rules.create())
            .await
            .expect("granted");
        // The late grant arrives while the last holder's delete is under way.
        let deleting = async {
            let refused = grant_leased(&leases, &rule(), late, rules.create()).await;
            let Err(Leased::Lease(refused)) = refused else {
                panic!("granted a rule being deleted: {refused:?}");
            };
            assert!(refused.is_retryable(), "{refused}");
            rules.delete().await
        };
        let revoked = revoke_leased(&leases, &rule(), last, deleting).await;
        assert_eq!(revoked.expect("revoked"), Revocation::Deleted);
        // Tried again, the grant makes the rule afresh.
        grant_leased(&leases, &rule(), late, rules.create())
            .await
            .expect("granted");
        assert!(rules.open());
    }

    #[tokio::test]
    async fn a_failed_create_closes_the_lease_it_opened() {
        let leases = MemoryLeases::new();
        let failed = grant_leased(&leases, &rule(), deployment(1), async {
            Err::<String, _>("503".to_owned())
        })
        .await;
        assert!(matches!(failed, Err(Leased::Cloud(_))), "{failed:?}");
        assert_eq!(leases.holders(&rule()).await.expect("holders"), vec![]);
        leases
            .acquire(&rule(), deployment(2))
            .await
            .expect("nothing is closing");
    }

    #[tokio::test]
    async fn a_failed_delete_keeps_the_rule_closing_until_the_revocation_is_tried_again() {
        let (leases, rules) = (MemoryLeases::new(), Rules::default());
        let (last, late) = (deployment(1), deployment(2));
        grant_leased(&leases, &rule(), last, rules.create())
            .await
            .expect("granted");
        let failed = revoke_leased(&leases, &rule(), last, async {
            Err::<(), _>("503".to_owned())
        })
        .await;
        assert!(matches!(failed, Err(Leased::Cloud(_))), "{failed:?}");
        let refused = grant_leased(&leases, &rule(), late, rules.create()).await;
        assert!(matches!(
            refused,
            Err(Leased::Lease(LeaseError::Closing { .. }))
        ));
        let revoked = revoke_leased(&leases, &rule(), last, rules.delete()).await;
        assert_eq!(revoked.expect("revoked"), Revocation::Deleted);
        grant_leased(&leases, &rule(), late, rules.create())
            .await
            .expect("granted");
    }
}
