//! [`provision`]: carries out a `servers` step's [`Plan`] in the cloud, reusing what an earlier
//! attempt made, and waits for every server to be `ACTIVE`.
//!
//! Every resource is found by its name first, so running the same plan again (a retried attempt,
//! an engine restarted in the middle) makes nothing twice: a group or a server that exists is
//! used as it is, a rule that exists is answered with its id. A server left in `ERROR` by an
//! earlier attempt is deleted and made again, since it never recovers.

use std::collections::BTreeMap;
use std::time::Duration;

use overture_domain::duration::format_duration;
use overture_domain::servers::GROUP_OUTPUT_PREFIX;
use overture_runner::servers::{Plan, RuleFrom, ServerPlan};
use tokio::time::Instant;

use super::{Cloud, CloudError, NewRule, NewServer, RuleSource, Server};

/// The first pause between two looks at the servers while they build; it doubles up to
/// [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(500);
/// The longest pause between two looks.
const MAX_POLL: Duration = Duration::from_secs(5);

/// Why a plan could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The cloud refused or failed a call.
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// A server failed to build.
    #[error("server `{name}` ({id}) failed to build: {reason}")]
    ServerFailed {
        /// Its name in the step.
        name: String,
        /// Its id in the cloud.
        id: String,
        /// What Nova said, or its status.
        reason: String,
    },
    /// Servers were still not `ACTIVE` when the wait ended.
    #[error(
        "the servers were not all ACTIVE within {}: {}; raise the step's `with.timeout` if the cloud is slow",
        format_duration(*wait),
        describe(waiting)
    )]
    NotActive {
        /// How long it waited.
        wait: Duration,
        /// The servers still waited for: name and status.
        waiting: Vec<(String, String)>,
    },
    /// A plan's rule names a group the plan does not hold.
    #[error("the plan's rule names security group `{0}`, which it does not make")]
    UnknownGroup(String),
}

impl ProvisionError {
    /// Whether trying again later may succeed: the cloud API could not be reached.
    pub fn is_backend(&self) -> bool {
        matches!(self, ProvisionError::Cloud(error) if error.is_backend())
    }
}

fn describe(waiting: &[(String, String)]) -> String {
    waiting
        .iter()
        .map(|(name, status)| format!("server `{name}` is still {status}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Makes (or finds) the plan's groups, rules and servers, waits for every server to be
/// `ACTIVE` with an address, and returns the step's outputs: each server's address by its name,
/// each group's id as `security-group-<group>`. `progress` hears what happens, a line at a time.
pub async fn provision(
    cloud: &Cloud,
    plan: &Plan,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<BTreeMap<String, String>, ProvisionError> {
    let group_ids = security_groups(cloud, plan, progress).await?;
    let mut outputs = admit(cloud, plan, &group_ids, progress).await?;
    let pending = start_servers(cloud, plan, &group_ids, progress).await?;
    wait_active(cloud, plan, pending, &mut outputs, progress).await?;
    Ok(outputs)
}

/// The plan's security groups, each found by its name in the cloud or made: their ids by the
/// plan's names.
async fn security_groups(
    cloud: &Cloud,
    plan: &Plan,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<BTreeMap<String, String>, ProvisionError> {
    let mut group_ids = BTreeMap::new();
    for group in &plan.security_groups {
        let found = cloud.security_groups_named(&group.cloud_name).await?;
        let id = match found.into_iter().next() {
            Some(existing) => {
                progress(&format!(
                    "security group `{}`: using {} ({})",
                    group.name, existing.name, existing.id
                ));
                existing.id
            }
            None => {
                let made = cloud
                    .create_security_group(&group.cloud_name, &group.description)
                    .await?;
                progress(&format!(
                    "security group `{}`: made {} ({})",
                    group.name, made.name, made.id
                ));
                made.id
            }
        };
        group_ids.insert(group.name.clone(), id);
    }
    Ok(group_ids)
}

/// Adds every group's rules (what each port admits); the outputs so far: each group's id.
async fn admit(
    cloud: &Cloud,
    plan: &Plan,
    group_ids: &BTreeMap<String, String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<BTreeMap<String, String>, ProvisionError> {
    let mut outputs = BTreeMap::new();
    for group in &plan.security_groups {
        let Some(group_id) = group_ids.get(&group.name) else {
            return Err(ProvisionError::UnknownGroup(group.name.clone()));
        };
        for rule in &group.rules {
            let (from, shown) = match &rule.from {
                RuleFrom::Group(source) => {
                    let id = group_ids
                        .get(source)
                        .ok_or_else(|| ProvisionError::UnknownGroup(source.clone()))?;
                    (RuleSource::Group(id.clone()), format!("group `{source}`"))
                }
                RuleFrom::Cidr(cidr) => (RuleSource::Cidr(cidr.clone()), cidr.clone()),
            };
            let id = cloud
                .create_rule(&NewRule {
                    security_group_id: group_id.clone(),
                    port: rule.port,
                    from,
                    description: Some(format!("overture deployment {}", plan.deployment)),
                })
                .await?;
            progress(&format!(
                "security group `{}`: port {} admits {shown} (rule {id})",
                group.name, rule.port
            ));
        }
        outputs.insert(
            format!("{GROUP_OUTPUT_PREFIX}{}", group.name),
            group_id.clone(),
        );
    }
    Ok(outputs)
}

/// Finds or makes each of the plan's servers in its groups: their names and ids, not yet
/// `ACTIVE`.
async fn start_servers(
    cloud: &Cloud,
    plan: &Plan,
    group_ids: &BTreeMap<String, String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<(String, String)>, ProvisionError> {
    let mut pending = Vec::new();
    for server in &plan.servers {
        // By id: a name could match another group of the project, an id cannot.
        let groups = server
            .security_groups
            .iter()
            .map(|group| {
                group_ids
                    .get(group)
                    .cloned()
                    .ok_or_else(|| ProvisionError::UnknownGroup(group.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let id = find_or_create(cloud, server, groups, progress).await?;
        pending.push((server.name.clone(), id));
    }
    Ok(pending)
}

/// Waits, polling less and less often, until every pending server is `ACTIVE` with an address
/// (added to `outputs` by its name), one is in `ERROR`, or the plan's boot wait is over.
async fn wait_active(
    cloud: &Cloud,
    plan: &Plan,
    mut pending: Vec<(String, String)>,
    outputs: &mut BTreeMap<String, String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), ProvisionError> {
    let wait = Duration::from_millis(plan.boot_wait_ms);
    progress(&format!(
        "waiting up to {} for {} server(s) to be ACTIVE",
        format_duration(wait),
        pending.len()
    ));
    let deadline = Instant::now() + wait;
    let mut pause = FIRST_POLL;
    loop {
        let mut still = Vec::new();
        let mut statuses = Vec::new();
        for (name, id) in pending {
            let server = cloud.server(&id).await?;
            if server.is_error() {
                return Err(ProvisionError::ServerFailed {
                    name,
                    id,
                    reason: server.fault().unwrap_or("its status is ERROR").to_owned(),
                });
            }
            match server.address().filter(|_| server.is_active()) {
                Some(address) => {
                    progress(&format!("server `{name}`: ACTIVE at {address}"));
                    outputs.insert(name, address.to_owned());
                }
                None => {
                    statuses.push((name.clone(), shown_status(&server)));
                    still.push((name, id));
                }
            }
        }
        if still.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ProvisionError::NotActive {
                wait,
                waiting: statuses,
            });
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(MAX_POLL);
        pending = still;
    }
}

/// The id of the plan's server in the cloud: one an earlier attempt made if there is a usable
/// one, else a new one. Servers of that name left in `ERROR`, and any beyond the first, go.
async fn find_or_create(
    cloud: &Cloud,
    server: &ServerPlan,
    security_groups: Vec<String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, ProvisionError> {
    let (failed, usable): (Vec<Server>, Vec<Server>) = cloud
        .servers_named(&server.cloud_name)
        .await?
        .into_iter()
        .partition(Server::is_error);
    let mut usable = usable.into_iter();
    let kept = usable.next();
    for extra in failed.iter().chain(usable.as_slice()) {
        match cloud.delete_server(&extra.id).await {
            Ok(()) | Err(CloudError::NotFound(_)) => progress(&format!(
                "server `{}`: deleted {} ({}), left {} by an earlier attempt",
                server.name,
                extra.name,
                extra.id,
                if extra.is_error() {
                    "in ERROR"
                } else {
                    "twice"
                }
            )),
            Err(other) => return Err(other.into()),
        }
    }
    if let Some(kept) = kept {
        progress(&format!(
            "server `{}`: using {} ({}, {})",
            server.name, kept.name, kept.id, kept.status
        ));
        return Ok(kept.id);
    }
    let id = cloud
        .create_server(&NewServer {
            name: server.cloud_name.clone(),
            image: server.image.clone(),
            flavor: server.flavor.clone(),
            user_data: server.user_data.clone(),
            metadata: server.metadata.clone(),
            security_groups,
        })
        .await?;
    progress(&format!(
        "server `{}`: made {} ({id})",
        server.name, server.cloud_name
    ));
    Ok(id)
}

/// A building server's status for a message: `ACTIVE` without an address says so.
fn shown_status(server: &Server) -> String {
    if server.is_active() {
        "ACTIVE without an address".to_owned()
    } else if server.status.is_empty() {
        "of unknown status".to_owned()
    } else {
        server.status.clone()
    }
}
