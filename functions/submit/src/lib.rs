//! The submit function: turns a user's request into a recorded deployment.
//!
//! [`submit`] validates the tenant ([`tenant_problem`]), the blueprint, the files its steps take
//! and the parameters, checks every declared secret was given (and nothing else), makes the
//! deployment's own SSH key when a step logs in to servers, seals the secret values, the private
//! key and the user's cloud token through [`SealSecrets`] (under a key the token derives, when
//! there is one), and appends `DeploymentRequested` (and `CredentialsSealed`, which names what
//! was sealed and carries the public key). Nothing is recorded for a request it refuses.
//!
//! The same append holds the deployment's first advance, decided on the state the request
//! leaves at the time the [`Clock`] port gives: the `StepScheduled` of every step that needs
//! none. A new deployment then costs one commit, not one for the request and another for the
//! orchestrator's first advance; the orchestrator, fed the records, queues the jobs of the
//! attempts they scheduled, as it does for any writer's.
//!
//! The files the steps take go to the payload store ([`StorePayloads`]) first, and the event
//! records each one's size and hash only, so it fits one DynamoDB item (400 KB) however large
//! the files (up to 1 MiB). A refused or failed request may leave payloads behind: they are
//! named by their content, so they harm nothing and a later request reuses them.
//!
//! [`again`]: a recorded deployment run again, sealing anew what the user gives again: a redrive
//! (in its own stream) or a redeploy (a new deployment of the same request).
//!
//! [`http`]: the same function behind an HTTPS endpoint (a Lambda function URL): a JSON request
//! in, the deployment's id or the problems out; a token sent with it is checked with the cloud
//! through [`CheckToken`].

pub mod again;
pub mod http;

use std::collections::BTreeMap;

use async_trait::async_trait;
use overture_domain::blueprint::{self, BlueprintError, BlueprintProblem};
use overture_domain::deployment::SealedCredentials;
use overture_domain::kind::{self, Kind};
use overture_domain::secret::{
    too_short, SecretString, SecretValues, MIN_SECRET, SSH_KEY_SECRET, TOKEN_SECRET,
};
use overture_domain::text::{check_name, check_project_name};
use overture_domain::{DeploymentCommand, DeploymentError};
use overture_events::{BlueprintSnapshot, CloudAccount, DeploymentId, StoredFile, TriggeredBy};
use overture_kit::payload::{PayloadError, StorePayloads};
use overture_kit::{
    execute, execute_all, Cause, Clock, DeploymentLog, LogError, ORCHESTRATOR_ACTOR,
};
use uuid::Uuid;

/// A user's request for a deployment.
#[derive(Debug)]
pub struct Submission {
    /// Where the blueprint came from (a file name), for messages and the record.
    pub source: String,
    /// The blueprint's YAML text.
    pub text: String,
    /// The tenant deploying.
    pub tenant: String,
    /// The user asking.
    pub requested_by: String,
    /// What asked: `cli`, `http`, ...
    pub trigger: String,
    /// Parameter values given.
    pub params: BTreeMap<String, String>,
    /// Secret values given, by name.
    pub secrets: SecretValues,
    /// The files the steps take from the blueprint's folder, by path relative to it (see
    /// [`blueprint::bundle_dirs`]).
    pub files: BTreeMap<String, String>,
    /// The user's cloud token and the account it was checked to belong to, when given.
    pub cloud: Option<CloudSession>,
    /// The trigger and event that asked, when a trigger did.
    pub triggered_by: Option<TriggeredBy>,
    /// The deployment's name, when the user gave one: unique among the tenant's deployments
    /// that are not destroyed, which the log enforces ([`LogError::NameTaken`]).
    pub name: Option<String>,
}

/// A user's cloud token, checked against the cloud's identity service before submitting.
#[derive(Debug)]
pub struct CloudSession {
    /// Who the token says the user is; the project is the tenant.
    pub account: CloudAccount,
    /// The token itself.
    pub token: SecretString,
}

/// The step kinds that put the deployment's SSH key on servers or log in with it.
const KINDS_USING_THE_KEY: [Kind; 2] = [Kind::Ansible, Kind::Servers];

/// Keeps a deployment's secret values sealed until it ends.
#[async_trait]
pub trait SealSecrets: Send + Sync {
    /// Seals the values for this deployment and returns a reference to them.
    async fn seal(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
        token: Option<&SecretString>,
    ) -> Result<String, SealError>;
}

/// Sealing failed; nothing sealed is left to use.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The key service or the store could not be reached, or failed on its side: asking again
    /// later may help.
    #[error("could not seal the deployment's secrets, for now: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Sealing was refused or cannot work (no such key, access denied): asking again will not
    /// help.
    #[error("could not seal the deployment's secrets: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl SealError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, SealError::Unavailable(_))
    }
}

/// Says whom a user's cloud token was issued to, by asking the cloud's identity service, so that
/// the cloud account of a request that comes with a token is never taken from the client.
#[async_trait]
pub trait CheckToken: Send + Sync {
    /// The account the token acts for, as the cloud says.
    async fn account(&self, token: &SecretString) -> Result<CloudAccount, TokenError>;
}

/// A token could not be checked, or the cloud refused it. No variant holds the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The cloud does not know the token: expired, revoked or never issued.
    #[error("the cloud refused the token (it is expired, revoked or unknown); get a new one and try again")]
    Refused,
    /// The identity service could not be reached or failed on its side: asking again later may
    /// help.
    #[error("could not check the token with the cloud, for now: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The check failed for another reason: asking again will not help.
    #[error("could not check the token with the cloud: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl TokenError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, TokenError::Unavailable(_))
    }
}

/// The ports [`submit`] uses.
pub struct SubmitPorts<'a> {
    /// Where the deployment is recorded.
    pub log: &'a dyn DeploymentLog,
    /// Where its secrets are sealed.
    pub seals: &'a dyn SealSecrets,
    /// Where the blueprint's files are kept (never a secret).
    pub payloads: &'a dyn StorePayloads,
    /// The time the first steps are scheduled at.
    pub clock: &'a dyn Clock,
}

/// Why a submission was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The blueprint, its parameters or its secrets are wrong; nothing was recorded.
    #[error("{0}")]
    Invalid(#[from] BlueprintError),
    /// The secrets could not be sealed; nothing was recorded.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The blueprint's files could not be stored; nothing was recorded.
    #[error("could not store the blueprint's files: {0}")]
    Payload(#[from] PayloadError),
    /// The log could not record the request.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The aggregate refused the request (an id collision).
    #[error("the deployment could not be requested: {0}")]
    Refused(#[from] DeploymentError),
    /// The deployment's SSH key could not be made.
    #[error("could not make the deployment's SSH key: {0}")]
    Key(String),
}

/// Whether a blueprint acts in a cloud (makes servers there, or opens a bastion), and so needs
/// the user's token.
pub fn needs_cloud(blueprint: &BlueprintSnapshot) -> bool {
    blueprint.bastion.is_some()
        || blueprint
            .steps
            .iter()
            .any(|step| kind::is(step, Kind::Servers))
}

/// Validates, seals and records a deployment; returns its id.
#[tracing::instrument(
    name = "submit",
    level = "info",
    skip_all,
    fields(tenant = %submission.tenant, requested_by = %submission.requested_by, source = %submission.source, deployment)
)]
pub async fn submit(
    submission: Submission,
    ports: &SubmitPorts<'_>,
) -> Result<DeploymentId, SubmitError> {
    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    submit_checked(None, deployment, submission, ports).await?;
    Ok(deployment)
}

/// Whether [`submit_as`] recorded the deployment or found it recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// This call recorded it.
    Recorded,
    /// The same request (the same tenant, asked for by the same trigger and event) was recorded
    /// under the id before: nothing was sealed or recorded again.
    AlreadyRecorded,
}

/// Like [`submit`], under an id the caller derived (a trigger's, from its claim of an event), so
/// that recording is idempotent: a request already recorded under the id is
/// [`Submitted::AlreadyRecorded`], and another request under it is refused.
#[tracing::instrument(
    name = "submit",
    level = "info",
    skip_all,
    fields(tenant = %submission.tenant, requested_by = %submission.requested_by, source = %submission.source, deployment = %deployment)
)]
pub async fn submit_as(
    deployment: DeploymentId,
    submission: Submission,
    ports: &SubmitPorts<'_>,
) -> Result<Submitted, SubmitError> {
    let request = (submission.tenant.clone(), submission.triggered_by.clone());
    let recorded = |state: &overture_domain::DeploymentState| {
        let same = state.tenant == request.0 && state.triggered_by == request.1;
        match state.blueprint {
            None => Ok(None),
            Some(_) if same => Ok(Some(Submitted::AlreadyRecorded)),
            Some(_) => Err(SubmitError::Refused(DeploymentError::AlreadyRequested)),
        }
    };
    match submit_checked(Some(&recorded), deployment, submission, ports).await {
        Ok(submitted) => Ok(submitted),
        // Another delivery recorded it between the look and the append.
        Err(SubmitError::Refused(DeploymentError::AlreadyRequested)) => {
            recorded(&ports.log.load(deployment).await?.state)?
                .ok_or(SubmitError::Refused(DeploymentError::AlreadyRequested))
        }
        Err(error) => Err(error),
    }
}

/// What a request already recorded under the id says: `None` when there is none.
type LookFirst<'a> = &'a (dyn Fn(&overture_domain::DeploymentState) -> Result<Option<Submitted>, SubmitError>
         + Sync);

/// Checks, seals and records the submission under `deployment`; with `look_first`, looks at
/// what is recorded under the id before sealing anything.
async fn submit_checked(
    look_first: Option<LookFirst<'_>>,
    deployment: DeploymentId,
    submission: Submission,
    ports: &SubmitPorts<'_>,
) -> Result<Submitted, SubmitError> {
    let tenant = tenant_problem(&submission.tenant, submission.cloud.is_some());
    let mut parsed = blueprint::parse(&submission.text).map_err(|mut error| {
        error.0.splice(0..0, tenant.clone());
        error
    })?;
    if let Some(problem) = tenant {
        return Err(BlueprintError(vec![problem]).into());
    }
    blueprint::attach_files(&mut parsed, submission.files)?;
    let params = blueprint::resolve_params(&parsed.snapshot, &submission.params)?;
    check_secrets(&parsed.snapshot.secrets, &submission.secrets)?;
    if needs_cloud(&parsed.snapshot) && submission.cloud.is_none() {
        return Err(BlueprintError(vec![BlueprintProblem {
            field: "--token-file".into(),
            problem:
                "this blueprint acts in a cloud (it makes servers or goes through a bastion); \
                      give your cloud token with --token-file FILE or the OS_TOKEN variable, and \
                      the cloud's identity URL with --auth-url or OS_AUTH_URL"
                    .into(),
        }])
        .into());
    }

    store_files(&mut parsed.snapshot, ports.payloads).await?;

    tracing::Span::current().record("deployment", tracing::field::display(deployment));
    if let Some(look) = look_first {
        // Sealing again would overwrite the seal of the deployment already recorded.
        if let Some(found) = look(&ports.log.load(deployment).await?.state)? {
            return Ok(found);
        }
    }
    let (account, sealed) = seal_for(
        deployment,
        &submission.tenant,
        &parsed.snapshot,
        submission.secrets,
        submission.cloud,
        ports.seals,
    )
    .await?;
    let cause = Cause::new(
        submission.requested_by.clone(),
        deployment,
        deployment.uuid(),
    );
    let command = DeploymentCommand::Request {
        triggered_by: submission.triggered_by,
        tenant: submission.tenant.clone(),
        requested_by: submission.requested_by,
        trigger: submission.trigger,
        source: submission.source,
        blueprint: parsed.snapshot,
        blueprint_hash: parsed.hash,
        params,
        cloud: account,
        sealed,
        name: submission.name,
    };
    record_and_advance(ports, deployment, &submission.tenant, &cause, command).await?;
    Ok(Submitted::Recorded)
}

/// Appends the events of `command` (a `Request` or a `Redrive`) and of the advance that follows
/// it, decided on the state it leaves, in one append: one commit instead of two.
///
/// Right after a request or a redrive the deployment runs and no step has started, so the
/// advance only schedules the steps whose needs are met: it decides from the state and the time
/// alone and needs no port the submit lacks. What the state calls for then (queuing the jobs;
/// later, closing the bastion and purging the secrets) is the orchestrator's, which sees these
/// records.
///
/// A store that cannot hold the two as one append ([`LogError::TooLarge`]: a DynamoDB
/// transaction holds at most 100 events) gets the command's events alone, as before; the
/// orchestrator then advances the deployment itself. So does a user whose name is the
/// orchestrator's actor ([`ORCHESTRATOR_ACTOR`]): the orchestrator would take the steps
/// scheduled under that name for its own, already queued, and never queue them.
pub(crate) async fn record_and_advance(
    ports: &SubmitPorts<'_>,
    deployment: DeploymentId,
    tenant: &str,
    cause: &Cause,
    command: DeploymentCommand,
) -> Result<(), SubmitError> {
    // The aggregate checks the request again; what it finds the engine could not run is the
    // caller's to fix, like any other invalid input.
    let unrunnable = |error: DeploymentError| match error {
        DeploymentError::Unrunnable(problems) => SubmitError::Invalid(problems),
        other => SubmitError::Refused(other),
    };
    if cause.actor == ORCHESTRATOR_ACTOR {
        execute(ports.log, deployment, tenant, cause, |_| command.clone())
            .await?
            .map_err(unrunnable)?;
        return Ok(());
    }
    let now = ports.clock.now();
    let with_advance = [command.clone(), DeploymentCommand::Advance { now }];
    match execute_all(ports.log, deployment, tenant, cause, |_| {
        with_advance.to_vec()
    })
    .await
    {
        Err(LogError::TooLarge { .. }) => {
            execute(ports.log, deployment, tenant, cause, |_| command.clone())
                .await?
                .map_err(unrunnable)?;
        }
        recorded => {
            recorded?.map_err(unrunnable)?;
        }
    }
    Ok(())
}

/// Seals what a run of the deployment needs: the user's secrets, a new SSH key of the
/// deployment's when a step uses one, and the user's cloud token. Returns the token's account
/// and what was sealed, if anything was.
pub(crate) async fn seal_for(
    deployment: DeploymentId,
    tenant: &str,
    blueprint: &BlueprintSnapshot,
    secrets: SecretValues,
    cloud: Option<CloudSession>,
    seals: &dyn SealSecrets,
) -> Result<(Option<CloudAccount>, Option<SealedCredentials>), SubmitError> {
    let uses_key = blueprint.bastion.is_some()
        || blueprint
            .steps
            .iter()
            .any(|step| Kind::of(step).is_some_and(|kind| KINDS_USING_THE_KEY.contains(&kind)));
    let mut to_seal = secrets;
    let ssh_public_key = if uses_key {
        let (private, public) = deployment_key(deployment)?;
        to_seal.insert(SSH_KEY_SECRET.to_owned(), private);
        Some(public)
    } else {
        None
    };
    let (account, token) = match cloud {
        Some(CloudSession { account, token }) => (Some(account), Some(token)),
        None => (None, None),
    };
    if let Some(token) = &token {
        to_seal.insert(TOKEN_SECRET.to_owned(), token.clone());
    }
    if to_seal.is_empty() {
        return Ok((account, None));
    }
    let seal = seals
        .seal(deployment, tenant, &to_seal, token.as_ref())
        .await?;
    let sealed = SealedCredentials {
        seal,
        secrets: blueprint.secrets.clone(),
        ssh_public_key,
        token: token.is_some(),
    };
    Ok((account, Some(sealed)))
}

/// Moves the blueprint's files into the payload store, leaving each one's size and hash in the
/// snapshot. The blueprint's hash already covers their text ([`blueprint::attach_files`]).
pub async fn store_files(
    snapshot: &mut BlueprintSnapshot,
    payloads: &dyn StorePayloads,
) -> Result<(), PayloadError> {
    for (path, text) in std::mem::take(&mut snapshot.files) {
        let sha256 = payloads.put(text.as_bytes()).await?;
        let size = u64::try_from(text.len()).unwrap_or(u64::MAX);
        snapshot
            .stored_files
            .insert(path, StoredFile { size, sha256 });
    }
    Ok(())
}

/// What is wrong with the tenant, if anything. Checked here rather than in the CLI so that every
/// way in gets the rule. A tenant given by the user (`--tenant`) follows the name rule of
/// blueprints ([`check_name`]); with a cloud token the tenant is the token's project, named by
/// the cloud, so it only has to be safe to show and to store ([`check_project_name`]).
pub fn tenant_problem(tenant: &str, from_cloud: bool) -> Option<BlueprintProblem> {
    if from_cloud {
        check_project_name(tenant).err().map(|error| BlueprintProblem {
            field: "--token-file".into(),
            problem: format!(
                "the tenant is the token's project, whose name {error}; use a token of another project, or ask the cloud's administrators to rename it"
            ),
        })
    } else {
        check_name(tenant).err().map(|error| BlueprintProblem {
            field: "--tenant".into(),
            problem: format!("the tenant {error}"),
        })
    }
}

/// A new Ed25519 key for one deployment: the private half in OpenSSH format, and the public half.
fn deployment_key(deployment: DeploymentId) -> Result<(SecretString, String), SubmitError> {
    let mut key = ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
        .map_err(|e| SubmitError::Key(e.to_string()))?;
    key.set_comment(format!("overture-{deployment}"));
    let private = key
        .to_openssh(ssh_key::LineEnding::LF)
        .map_err(|e| SubmitError::Key(e.to_string()))?;
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| SubmitError::Key(e.to_string()))?;
    Ok((SecretString::from(private.as_str().to_owned()), public))
}

/// The secrets given are those declared, each one a step can be given (the domain's rule,
/// [`blueprint::check_secrets`]), and none too short to mask.
pub(crate) fn check_secrets(
    declared: &[String],
    given: &SecretValues,
) -> Result<(), BlueprintError> {
    let mut problems = match blueprint::check_secrets(declared, given) {
        Ok(()) => Vec::new(),
        Err(BlueprintError(problems)) => problems,
    };
    for name in too_short(given) {
        problems.push(BlueprintProblem {
            field: format!("secrets.{name}"),
            problem: format!(
                "the value is shorter than {MIN_SECRET} bytes, too short to be masked in the logs \
                 without turning ordinary output into `***`; give a value of at least \
                 {MIN_SECRET} bytes"
            ),
        });
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BlueprintError(problems))
    }
}
