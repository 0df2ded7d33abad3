//! `--backend aws`: the same commands on the serverless form. Reads go to DynamoDB (the query
//! port, [`DynamoQueries`]); `deploy` posts the request to the submit function and follows the
//! deployment on the events table until it ends. `cancel`, `redrive` and `redeploy` record on
//! the stack with the operator's AWS credentials, through the api function's own engine
//! ([`Recorder`]), and follow the deployment as the stack's functions carry them out.
//!
//! Its settings come from the environment, as `make local-aws` writes them to
//! `.overture/local-aws.env`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use overture_api::recorded::Recorded;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::logs::S3AttemptLogs;
use overture_aws::query::DynamoQueries;
use overture_aws::read_models::DynamoReadModels;
use overture_aws::recording::Recording;
use overture_aws::s3::S3Payloads;
use overture_aws::seals::KmsSeals;
use overture_aws::triggers::{DynamoTriggerLedger, S3TriggerBundle, SqsEvents};
use overture_domain::blueprint::{BlueprintError, BlueprintProblem};
use overture_domain::projection::{project, DeploymentStatus, DeploymentView};
use overture_domain::secret::SecretValues;
use overture_domain::text::escaped;
use overture_domain::{DeploymentError, DeploymentState};
use overture_events::{DeploymentId, LogEntry};
use overture_kit::SystemClock;
use overture_kit::{DeploymentLog, ReadStream};
use secrecy::ExposeSecret;
use serde_json::json;

use crate::commands::cancel::CancelArgs;
use crate::commands::deploy::Deploy;
use crate::commands::redrive::{self, Again};
use crate::commands::trigger::SendArgs;
use crate::commands::verify::Report;
use crate::output::print_view;
use crate::progress::Progress;
use crate::token::TokenArgs;
use crate::triggers;
use crate::Failure;
use overture_embedded::{Unwatched, Watch};

/// How often a followed deployment's log is read again.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

/// The environment variables the aws backend reads.
const SETTINGS: [&str; 5] = [
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "OVERTURE_EVENTS_TABLE",
    "OVERTURE_DEPLOYMENTS_TABLE",
    "OVERTURE_TENANTS_TABLE",
];

/// Where the serverless form keeps things.
pub struct Aws {
    /// The events table, as a deployment log.
    pub log: DynamoDeployments,
    /// The queries on the read models and the log.
    pub queries: DynamoQueries,
}

fn setting(name: &str) -> Result<String, Failure> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.is_empty())
        .ok_or_else(|| {
            Failure::BadInput(format!(
                "--backend aws: the environment variable {name} is not set; `make local-aws` \
                 writes every setting the aws backend needs to .overture/local-aws.env \
                 (`set -a; . .overture/local-aws.env; set +a`)"
            ))
        })
}

impl Aws {
    /// The clients, from the environment; a missing setting is named.
    pub async fn from_env() -> Result<Self, Failure> {
        for name in SETTINGS {
            setting(name)?;
        }
        let config = overture_aws::config::from_env().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&config);
        let log = DynamoDeployments::new(
            dynamodb.clone(),
            setting("OVERTURE_EVENTS_TABLE")?,
            Arc::new(SystemClock),
        );
        let views = DynamoReadModels::new(
            dynamodb,
            setting("OVERTURE_DEPLOYMENTS_TABLE")?,
            setting("OVERTURE_TENANTS_TABLE")?,
        );
        // Only `logs` reads the bucket; the other commands need not be given it.
        let outputs = setting("OVERTURE_PAYLOADS_BUCKET")
            .ok()
            .map(|bucket| S3AttemptLogs::new(overture_aws::s3::client(&config), bucket));
        Ok(Self {
            queries: DynamoQueries::new(views, log.clone(), outputs),
            log,
        })
    }
}

/// The trigger events queue (`OVERTURE_TRIGGER_EVENTS_QUEUE_URL`), where `trigger send` puts
/// an event.
pub async fn trigger_events() -> Result<SqsEvents, Failure> {
    let url = setting("OVERTURE_TRIGGER_EVENTS_QUEUE_URL")?;
    let config = overture_aws::config::from_env().await;
    Ok(SqsEvents::new(aws_sdk_sqs::Client::new(&config), url))
}

/// The trigger ledger (`OVERTURE_TRIGGERS_TABLE`), which `triggers log` reads.
pub async fn trigger_ledger() -> Result<DynamoTriggerLedger, Failure> {
    let table = setting("OVERTURE_TRIGGERS_TABLE")?;
    let config = overture_aws::config::from_env().await;
    Ok(DynamoTriggerLedger::new(
        aws_sdk_dynamodb::Client::new(&config),
        table,
    ))
}

/// Where `triggers publish` stores the trigger file (`OVERTURE_PAYLOADS_BUCKET`).
pub async fn trigger_bundle() -> Result<S3TriggerBundle, Failure> {
    let bucket = setting("OVERTURE_PAYLOADS_BUCKET")?;
    let config = overture_aws::config::from_env().await;
    Ok(S3TriggerBundle::new(
        overture_aws::s3::client(&config),
        bucket,
    ))
}

/// What `cancel`, `redrive` and `redeploy` record with: the api function's engine on the stack's
/// events table, seals and payloads bucket.
pub type Recorder = Recorded<DynamoDeployments, KmsSeals, S3Payloads>;

/// The recorder, from the environment; a missing setting is named.
pub async fn recorder() -> Result<Recorder, Failure> {
    for name in SETTINGS {
        setting(name)?;
    }
    let config = overture_aws::config::from_env().await;
    let Recording {
        log,
        seals,
        payloads,
    } = Recording::from_settings(&config, setting)?;
    Ok(Recorded::new(log, seals, payloads, FOLLOW_POLL))
}

/// `overture --backend aws cancel ID`: records the cancel as the api function does, then follows the deployment until the
/// stack's orchestrator has carried it out (closed its bastion, purged its secrets).
pub async fn cancel(
    id: &str,
    reason: Option<String>,
    token: &TokenArgs,
    json: bool,
) -> Result<(), Failure> {
    let id = crate::input::parse_id(id)?;
    let tokens = token.check().await?;
    // Only the log: a cancel seals nothing.
    let log = Aws::from_env().await?.log;
    let requested_by = tokens
        .first()
        .map_or_else(crate::commands::cancel::local_user, |checked| {
            checked.info.user.clone()
        });
    let reason = reason.unwrap_or_else(|| "cancelled from the command line".into());
    let recorded = overture_api::recorded::cancel(&log, id, &requested_by, &reason)
        .await
        .context("recording the cancel on the events table")?;
    match recorded {
        Ok(()) => {}
        Err(DeploymentError::NotRequested) => return Err(missing(id)),
        Err(DeploymentError::AlreadyFinished) => {
            let ended = follow(&log, id, &mut Unwatched).await?;
            return Err(Failure::BadInput(format!(
                "deployment {id} has already ended ({}); there is nothing to cancel",
                ended.status.as_str()
            )));
        }
        Err(refused) => return Err(Failure::BadInput(format!("deployment {id}: {refused}"))),
    }
    eprintln!("deployment {id}: cancel recorded; the stack abandons its steps");
    let view = follow(&log, id, &mut Unwatched).await?;
    print_view(&view, json);
    Ok(())
}

/// Shows another watch only the entries from revision `from` on (what it has not shown yet).
pub struct FromRevision<'a> {
    from: u64,
    watch: &'a mut dyn Watch,
}

impl<'a> FromRevision<'a> {
    /// Shows `watch` the entries from revision `from` on.
    pub fn new(from: u64, watch: &'a mut dyn Watch) -> Self {
        Self { from, watch }
    }
}

impl Watch for FromRevision<'_> {
    fn entry(&mut self, entry: &LogEntry) {
        if entry.envelope.revision >= self.from {
            self.watch.entry(entry);
        }
    }

    fn tick(&mut self, state: &DeploymentState) {
        self.watch.tick(state);
    }
}

/// A deployment request, as the submit function reads it. It names no tenant and no requester:
/// the function takes them from whoever signed the request, or from the cloud token.
pub struct Request<'a> {
    /// The blueprint file.
    pub file: &'a Path,
    /// Its text.
    pub text: String,
    /// The files its steps take.
    pub files: BTreeMap<String, String>,
    /// Parameter values.
    pub params: BTreeMap<String, String>,
    /// Secret values.
    pub secrets: SecretValues,
    /// The user's cloud token, checked by the function.
    pub token: Option<secrecy::SecretString>,
}

/// Posts the request to the submit function (`OVERTURE_SUBMIT_URL`), signed with SigV4 with the
/// caller's AWS credentials (the URL's auth type is `AWS_IAM`); the deployment's id.
pub async fn submit(request: Request<'_>) -> Result<DeploymentId, Failure> {
    let url = setting("OVERTURE_SUBMIT_URL")?;
    check_submit_url(&url)?;
    let config = overture_aws::config::from_env().await;
    let (credentials, region) = overture_aws::signing::caller(&config)
        .await
        .map_err(|e| Failure::BadInput(format!("--backend aws deploy: {e}")))?;
    let secrets: BTreeMap<&str, &str> = request
        .secrets
        .iter()
        .map(|(name, value)| (name.as_str(), value.expose_secret()))
        .collect();
    let body = json!({
        "source": request.file.display().to_string(),
        "blueprint": request.text,
        "params": request.params,
        "secrets": secrets,
        "files": request.files,
        "token": request.token.as_ref().map(|t| t.expose_secret()),
    });
    let body = serde_json::to_vec(&body).context("writing the request")?;
    let content_type = ("content-type", "application/json");
    let signed = overture_aws::signing::sign(
        "POST",
        &url,
        &[content_type],
        &body,
        &credentials,
        &region,
        std::time::SystemTime::now(),
    )
    .with_context(|| format!("signing the request to the submit function at {url}"))?;
    let mut post = reqwest::Client::new()
        .post(&url)
        .header(content_type.0, content_type.1)
        .body(body);
    for (name, value) in signed {
        post = post.header(name, value);
    }
    let answer = post
        .send()
        .await
        .with_context(|| format!("posting the deployment to the submit function at {url}"))?;
    let status = answer.status();
    let answer: serde_json::Value = answer
        .json()
        .await
        .with_context(|| format!("reading the submit function's answer ({status})"))?;
    let message = answer["message"].as_str().unwrap_or_default().to_owned();
    match status.as_u16() {
        201 => answer["deployment"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| {
                Failure::Engine(anyhow::anyhow!(
                    "the submit function answered 201 without a deployment id: {answer}"
                ))
            }),
        400 => Err(Failure::BadInput(problems(&answer).unwrap_or(message))),
        403 => Err(Failure::BadInput(format!(
            "the submit function at {url} refused the signed request (403): {}; the AWS \
             credentials used must be allowed to call it (attach the stack's \
             SubmitCallersPolicy to your user or role)",
            if message.is_empty() {
                "access denied"
            } else {
                message.as_str()
            }
        ))),
        _ => Err(Failure::Engine(anyhow::anyhow!(
            "the submit function answered {status}: {message}"
        ))),
    }
}

/// The request carries secret values and the token: only HTTPS takes them off this machine.
fn check_submit_url(url: &str) -> Result<(), Failure> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| Failure::BadInput(format!("OVERTURE_SUBMIT_URL `{url}` is not a URL: {e}")))?;
    let loopback = match parsed.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    };
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(Failure::BadInput(format!(
            "OVERTURE_SUBMIT_URL `{url}`: the request carries secret values and the cloud \
             token, so it must be https (plain http only to this machine's loopback address)"
        ))),
    }
}

/// The problems of a refused request worded as the embedded engine words them (the function's
/// `message` names the file and field; its `problems` are read back to escape them here too).
fn problems(answer: &serde_json::Value) -> Option<String> {
    let problems = answer["problems"].as_array()?;
    let source = answer["message"].as_str()?.split(": ").next()?.to_owned();
    let problems: Vec<BlueprintProblem> = problems
        .iter()
        .map(|p| BlueprintProblem {
            field: p["field"].as_str().unwrap_or_default().to_owned(),
            problem: p["problem"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    Some(
        BlueprintError(problems)
            .0
            .iter()
            .map(|p| format!("{source}: {p}"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Follows a deployment on the events table until it ends, showing each event to `watch`, and
/// returns its view as the projector folds it from those same events.
pub async fn follow(
    log: &DynamoDeployments,
    id: DeploymentId,
    watch: &mut dyn Watch,
) -> Result<DeploymentView, Failure> {
    let mut recorded = Vec::new();
    loop {
        let from = u64::try_from(recorded.len()).unwrap_or(u64::MAX);
        let new = log
            .read_stream(id, from)
            .await
            .context("reading the events table")?;
        for envelope in new {
            watch.entry(&LogEntry {
                position: envelope.revision + 1,
                envelope: envelope.clone(),
            });
            recorded.push(envelope);
        }
        let loaded = log.load(id).await.context("reading the events table")?;
        watch.tick(&loaded.state);
        if loaded.state.is_finished() {
            // What was appended after the last read, up to the end.
            let rest = log
                .read_stream(id, u64::try_from(recorded.len()).unwrap_or(u64::MAX))
                .await
                .context("reading the events table")?;
            for envelope in rest {
                watch.entry(&LogEntry {
                    position: envelope.revision + 1,
                    envelope: envelope.clone(),
                });
                recorded.push(envelope);
            }
            let projected = project(None, &recorded).context("folding the deployment's view")?;
            return projected
                .view
                .ok_or_else(|| Failure::Engine(anyhow::anyhow!("deployment {id} has no view")));
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// `replay --check` on AWS: every deployment the read models hold, folded afresh from its own
/// stream, compared with its stored view, and the tenants' summaries folded from those streams
/// compared with the stored ones. Returns what differs, worded as the embedded check words it.
///
/// Without a global order, the deployments checked are the ones the deployments table lists: a
/// stream the projector never folded at all is not seen here.
pub async fn check(queries: &DynamoQueries) -> Result<Vec<String>, Failure> {
    use overture_domain::projection::ReadModels;
    use overture_kit::query::{DeploymentFilter, QueryDeployments};

    let stored = queries.list(&DeploymentFilter::default()).await?;
    let mut fresh = ReadModels::default();
    for view in &stored {
        for envelope in queries.events(view.id).await? {
            fresh
                .apply(&envelope)
                .with_context(|| format!("folding deployment {}", view.id))?;
        }
    }
    let mut differences = Vec::new();
    for view in &stored {
        if fresh.deployments.get(&view.id) != Some(view) {
            differences.push(format!("deployment {}", view.id));
        }
    }
    let stored_tenants = queries.tenants().await?;
    let mut names: Vec<&String> = fresh
        .tenants
        .keys()
        .chain(stored_tenants.iter().map(|t| &t.tenant))
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let stored = stored_tenants.iter().find(|t| t.tenant == *name);
        if fresh.tenants.get(name) != stored {
            differences.push(format!("tenant {name}"));
        }
        // The registry's instances too (its interest rows are not read through the query port).
        if fresh.registry.service_instances(name) != queries.service_instances(name).await? {
            differences.push(format!("service registry of tenant {name}"));
        }
    }
    Ok(differences)
}

/// The serverless form, its clients made from the environment when a command needs them.
pub struct AwsBackend;

/// No deployment `id` on the stack.
pub fn missing(id: DeploymentId) -> Failure {
    Failure::BadInput(format!(
        "no deployment {id} on the aws backend (see `overture --backend aws list`)"
    ))
}

#[async_trait::async_trait(?Send)]
impl super::Backend for AwsBackend {
    fn missing(&self, id: DeploymentId) -> Failure {
        missing(id)
    }

    fn only_embedded(&self, command: &str) -> Result<(), Failure> {
        Err(Failure::BadInput(format!(
            "`overture {command}` works only with the embedded backend; leave out --backend aws \
             (and unset OVERTURE_BACKEND)"
        )))
    }

    async fn queries(&self) -> Result<Box<dyn overture_kit::query::QueryDeployments>, Failure> {
        Ok(Box::new(Aws::from_env().await?.queries))
    }

    /// Posts the request to the submit function and follows the deployment on the events
    /// table: one blueprint at a time, the tenant being whoever signs or the token's project.
    async fn deploy(&self, deploy: Deploy<'_>) -> Result<(), Failure> {
        let Deploy {
            mut blueprints,
            tenant,
            token,
            params,
            secrets: secret_values,
            json,
            name,
            ..
        } = deploy;
        if name.is_some() {
            return Err(Failure::BadInput(
                "--name: names are kept by the embedded engine (and `overture serve`); the \
                 serverless form does not record them yet: leave out --name"
                    .into(),
            ));
        }
        if blueprints.len() > 1 {
            return Err(Failure::BadInput(
                "deploy: with --backend aws, give one blueprint at a time".into(),
            ));
        }
        let (file, (text, parsed)) = blueprints.remove(0);
        let files = parsed.snapshot.files.clone();
        let aws = Aws::from_env().await?;
        let mut given = token.given()?;
        if given.len() > 1 {
            return Err(Failure::BadInput(
                "--token-file: a deployment acts with one token; give it once".into(),
            ));
        }
        if let Some(tenant) = tenant {
            return Err(Failure::BadInput(format!(
                "--tenant {}: with --backend aws the tenant is not chosen: it is the AWS account \
                 that signs the request, or the project of the cloud token given; leave out \
                 --tenant",
                escaped(&tenant)
            )));
        }
        let id = submit(Request {
            file,
            text,
            files,
            params,
            secrets: secret_values,
            token: given.pop(),
        })
        .await?;
        eprintln!("deployment {id}");
        let view = follow(&aws.log, id, &mut Progress::new()).await?;
        print_view(&view, json);
        match view.status {
            DeploymentStatus::Succeeded => Ok(()),
            _ => Err(Failure::Unsuccessful(String::new())),
        }
    }

    async fn cancel(&self, args: &CancelArgs) -> Result<(), Failure> {
        cancel(&args.id, args.reason.clone(), &args.token, args.json).await
    }

    async fn redrive(&self, again: Again<'_>) -> Result<(), Failure> {
        redrive::redrive_on_aws(again).await
    }

    async fn redeploy(&self, again: Again<'_>) -> Result<(), Failure> {
        redrive::redeploy_on_aws(again).await
    }

    async fn check_read_models(&self) -> Result<Vec<String>, Failure> {
        check(&Aws::from_env().await?.queries).await
    }

    /// Reads every stream of the events table (or `stream`) and checks its chain.
    async fn verify(&self, stream: Option<String>) -> Result<Report, Failure> {
        let aws = Aws::from_env().await?;
        let streams = match stream {
            Some(stream) => vec![stream],
            None => aws.log.streams().await.map_err(anyhow::Error::from)?,
        };
        let mut report = Report::default();
        let (mut streams_unchained, mut events_unchained) = (0u64, 0u64);
        for stream in streams {
            let deployment = DeploymentId::from_stream(&stream).map_err(|_| {
                anyhow::anyhow!("the events table holds `{stream}`, which is not a deployment's")
            })?;
            let events = aws
                .log
                .read_stream(deployment, 0)
                .await
                .map_err(anyhow::Error::from)?;
            if events.is_empty() {
                continue;
            }
            let (whole, unchained) = report.check_stream(&stream, &events);
            if !whole {
                return Ok(report);
            }
            if unchained > 0 {
                streams_unchained += 1;
                events_unchained += unchained;
            }
        }
        if events_unchained > 0 {
            report.unchained.push(format!(
                "{events_unchained} event(s) of {streams_unchained} stream(s) were recorded \
                 before the log was chained: each stream's next event attests them as they \
                 stand then"
            ));
        }
        Ok(report)
    }

    async fn send_event(&self, args: SendArgs) -> Result<(), Failure> {
        triggers::send_to_aws(args).await
    }

    async fn trigger_log(&self, json: bool) -> Result<(), Failure> {
        triggers::log_on_aws(json).await
    }

    async fn publish_triggers(&self, file: &Path) -> Result<(), Failure> {
        triggers::publish(file).await
    }
}

#[cfg(test)]
mod tests {
    use super::check_submit_url;

    #[test]
    fn secrets_leave_this_machine_only_over_https() {
        for url in [
            "https://abc.lambda-url.eu-west-1.on.aws/",
            "http://127.0.0.1:9000/lambda-url/submit/",
            "http://localhost:9000/lambda-url/submit/",
            "http://[::1]:9000/lambda-url/submit/",
        ] {
            assert!(check_submit_url(url).is_ok(), "{url}");
        }
        for url in [
            "http://10.0.0.5/submit",
            "http://example.com/",
            "ftp://127.0.0.1/",
            "nonsense",
        ] {
            assert!(check_submit_url(url).is_err(), "{url}");
        }
    }
}
