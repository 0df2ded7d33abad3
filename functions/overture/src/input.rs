//! What users give on the command line, read and checked: blueprint files, NAME=VALUE pairs,
//! secrets named by environment variable, deployment ids and names.

use std::collections::BTreeMap;
use std::path::Path;

use overture_domain::blueprint;
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::text::escaped;
use overture_domain::text::{check_deployment_name, NAME_RULE};
use overture_events::DeploymentId;
use overture_kit::query::QueryDeployments;
use overture_kit::LogError;
use overture_submit::SubmitError;

use crate::{bundle, Failure};

/// Why a blueprint read from `file` was not recorded: its problems, named in the file, or the
/// engine's failure.
pub fn not_submitted(file: &Path, error: SubmitError) -> Failure {
    match error {
        SubmitError::Invalid(problems) => Failure::BadInput(problems_in(file, &problems)),
        SubmitError::Log(taken @ LogError::NameTaken { .. }) => name_taken(&taken),
        other => Failure::Engine(other.into()),
    }
}

/// A request refused because its name is held by another live deployment: said with the flag.
pub fn name_taken(taken: &LogError) -> Failure {
    Failure::BadInput(format!("--name: {taken}"))
}

/// Checks `--name` before anything is read or recorded.
pub fn check_name_flag(name: Option<&str>) -> Result<(), Failure> {
    match name.map(check_deployment_name) {
        Some(Err(error)) => Err(Failure::BadInput(format!(
            "--name: the deployment's name {error}"
        ))),
        _ => Ok(()),
    }
}

pub fn read_blueprint(file: &Path) -> Result<(String, blueprint::ParsedBlueprint), Failure> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| {
        Failure::BadInput(format!("{}: cannot read the blueprint: {e}", shown(file)))
    };
    // One byte past the limit is enough to refuse it: a huge file is never read whole.
    let limit = u64::try_from(overture_domain::shape::MAX_BLUEPRINT_BYTES + 1).unwrap_or(u64::MAX);
    let mut bytes = Vec::new();
    let mut opened = std::fs::File::open(file).map_err(unreadable)?;
    (&mut opened)
        .take(limit)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let bad = |problems| Failure::BadInput(problems_in(file, &problems));
    if bytes.len() as u64 == limit {
        // The message says the whole file's size, not the bytes read to refuse it.
        let size = opened.metadata().map_or(limit, |m| m.len().max(limit));
        return Err(bad(blueprint::BlueprintError(vec![
            overture_domain::shape::too_large(size),
        ])));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let mut parsed = blueprint::parse(&text).map_err(bad)?;
    // Allowed, and shown: the user may have meant otherwise.
    for warning in &parsed.warnings {
        eprintln!("warning: {}: {warning}", shown(file));
    }
    let files = bundle::read_files(file, &parsed.snapshot).map_err(bad)?;
    blueprint::attach_files(&mut parsed, files).map_err(bad)?;
    Ok((text, parsed))
}

pub fn problems_in(file: &Path, problems: &blueprint::BlueprintError) -> String {
    problems
        .0
        .iter()
        .map(|p| format!("{}: {p}", shown(file)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A path as shown in messages: control characters escaped, like every user text.
pub fn shown(file: &Path) -> String {
    escaped(&file.display().to_string()).into_owned()
}

pub fn parse_pairs(
    pairs: &[String],
    option: &str,
    shape: &str,
) -> Result<BTreeMap<String, String>, Failure> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
            _ => Err(Failure::BadInput(format!(
                "{option} `{}`: expected {shape}",
                escaped(pair)
            ))),
        })
        .collect()
}

pub fn read_secrets(secrets: &[String]) -> Result<SecretValues, Failure> {
    let mut values = SecretValues::new();
    for pair in secrets {
        let Some((name, variable)) = pair
            .split_once('=')
            .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        else {
            return Err(Failure::BadInput(format!(
                "--secret `{}`: expected NAME=ENV_VAR, naming the environment variable that holds \
                 the value",
                escaped(pair)
            )));
        };
        let value = std::env::var(variable).map_err(|_| {
            let (name, variable) = (escaped(name), escaped(variable));
            Failure::BadInput(format!(
                "--secret {name}={variable}: the environment variable {variable} is not set; \
                     export it first"
            ))
        })?;
        values.insert(name.to_owned(), SecretString::from(value));
    }
    Ok(values)
}

/// The deployment `text` says: its id, or the live deployment (one not destroyed) that holds
/// the name `TENANT/NAME`, or `NAME` in `own_tenant` (in every tenant `queries` answers for,
/// when it is `None`: the caller's alone, through an HTTP API).
pub async fn resolve_id(
    text: &str,
    queries: &dyn QueryDeployments,
    own_tenant: Option<&str>,
) -> Result<DeploymentId, Failure> {
    if let Ok(id) = text.parse::<DeploymentId>() {
        return Ok(id);
    }
    let (tenant, name) = match text.split_once('/') {
        Some((tenant, name)) => (Some(tenant), name),
        None => (own_tenant, text),
    };
    if tenant == Some("") || check_deployment_name(name).is_err() {
        return Err(Failure::BadInput(format!(
            "`{}` is neither a deployment id (a UUID such as \
             0192e4c5-6f1a-7c3e-9b1d-2f4a5b6c7d8e) nor a deployment's name (NAME, or TENANT/NAME; \
             a name is {NAME_RULE})",
            escaped(text)
        )));
    }
    let found = queries.named(tenant, name).await?;
    match found.as_slice() {
        [view] => Ok(view.id),
        [] => Err(Failure::BadInput(match tenant {
            Some(tenant) => format!(
                "no live deployment named `{name}` in tenant `{}` (`overture list` shows them; \
                 a destroyed deployment's name is free)",
                escaped(tenant)
            ),
            None => format!("no live deployment of yours is named `{name}`"),
        })),
        several => Err(Failure::BadInput(format!(
            "deployments of several tenants are named `{name}`; say which: {}",
            several
                .iter()
                .map(|view| format!("{}/{name}", escaped(&view.tenant)))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub fn parse_id(text: &str) -> Result<DeploymentId, Failure> {
    text.parse()
        .map_err(|e: overture_events::ParseIdError| Failure::BadInput(e.to_string()))
}
