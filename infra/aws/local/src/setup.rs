//! The stack in the local emulator, made once through CloudFormation with its functions (their
//! code a stand-in: `cargo lambda watch` runs the real binaries), and the settings that point
//! the functions and the `overture` program at it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_cloudformation::types::StackStatus;
use overture_aws::stack::{deploy_local, functions, queue_url, stand_in_code};

use crate::LocalError;

/// How long CloudFormation in the emulator may take (about a second in practice).
const CREATE_WITHIN: Duration = Duration::from_secs(120);
/// The code prefix the template's `CodePrefix` parameter defaults to.
const CODE_PREFIX: &str = "overture/";

/// Makes the stack `name`, with the template's `parameters` (name, value) besides its code's,
/// unless it is already complete, and returns its outputs by name.
pub async fn stack(
    config: &aws_config::SdkConfig,
    name: &str,
    parameters: &[(&str, &str)],
) -> Result<HashMap<String, String>, LocalError> {
    let cloudformation = aws_sdk_cloudformation::Client::new(config);
    if let Some(outputs) = existing(&cloudformation, name).await? {
        return Ok(outputs);
    }
    let s3 = overture_aws::s3::client(config);
    let code = format!("{name}-code");
    if s3.head_bucket().bucket(&code).send().await.is_err() {
        overture_aws::s3::create_payloads_bucket(&s3, &code)
            .await
            .map_err(|e| LocalError::call("CreateBucket", e))?;
    }
    for function in functions() {
        s3.put_object()
            .bucket(&code)
            .key(format!("{CODE_PREFIX}{function}.zip"))
            .body(stand_in_code().into())
            .send()
            .await
            .map_err(|e| {
                LocalError::call("PutObject", aws_sdk_s3::error::DisplayErrorContext(e))
            })?;
    }
    let mut all = vec![
        ("CodeBucket", code.as_str()),
        // Never pulled: steps run in bubblewrap under `cargo lambda watch`.
        ("StepImage", "overture-step:local"),
    ];
    all.extend_from_slice(parameters);
    deploy_local(&cloudformation, name, &all, CREATE_WITHIN)
        .await
        .map_err(|e| LocalError::call("CreateStack", e))
}

async fn existing(
    cloudformation: &aws_sdk_cloudformation::Client,
    name: &str,
) -> Result<Option<HashMap<String, String>>, LocalError> {
    // An unknown stack is an error answer, not an empty list.
    let Ok(described) = cloudformation
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
    else {
        return Ok(None);
    };
    let Some(stack) = described.stacks().first() else {
        return Ok(None);
    };
    match stack.stack_status() {
        Some(StackStatus::CreateComplete | StackStatus::UpdateComplete) => Ok(Some(
            stack
                .outputs()
                .iter()
                .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
                .collect(),
        )),
        other => Err(LocalError::call(
            "DescribeStacks",
            format!(
                "stack `{name}` is {}; `make local-aws-down` and start again",
                other.map_or("in no known state", |s| s.as_str())
            ),
        )),
    }
}

/// The settings of the stack's functions (the union of their environments, as the stack gives
/// them), with each queue URL as the emulator's SQS gives it, and the stack's tables, bucket
/// and queues named as the `overture` program reads them (`EventsTable` becomes
/// `OVERTURE_EVENTS_TABLE`, `JobsQueueUrl` `OVERTURE_JOBS_QUEUE_URL`).
pub async fn settings(
    config: &aws_config::SdkConfig,
    name: &str,
    outputs: &HashMap<String, String>,
) -> Result<BTreeMap<String, String>, LocalError> {
    let lambda = aws_sdk_lambda::Client::new(config);
    let sqs = aws_sdk_sqs::Client::new(config);
    let mut settings = BTreeMap::new();
    for (output, value) in outputs {
        if output.ends_with("Table") || output.ends_with("Bucket") || output.ends_with("QueueUrl") {
            let variable = setting_name(output.strip_suffix("Url").unwrap_or(output));
            let variable = if output.ends_with("QueueUrl") {
                format!("{variable}_URL")
            } else {
                variable
            };
            settings.insert(variable, value.clone());
        }
    }
    for function in functions() {
        let found = lambda
            .get_function_configuration()
            .function_name(format!("{name}-{function}"))
            .send()
            .await
            .map_err(|e| {
                LocalError::call(
                    "GetFunctionConfiguration",
                    aws_sdk_lambda::error::DisplayErrorContext(e),
                )
            })?;
        if let Some(variables) = found.environment().and_then(|e| e.variables()) {
            settings.extend(variables.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    // Locally the runner runs attempts in bubblewrap: the step cluster it would start Fargate
    // tasks on is AWS's only (the emulator's ECS runs no container).
    settings.remove("OVERTURE_STEP_CLUSTER");
    for (variable, value) in settings.iter_mut() {
        if variable.ends_with("_QUEUE_URL") {
            if let Some(queue) = value.rsplit('/').next().filter(|q| !q.is_empty()) {
                *value = queue_url(&sqs, queue)
                    .await
                    .map_err(|e| LocalError::call("GetQueueUrl", e))?;
            }
        }
    }
    Ok(settings)
}

/// `OVERTURE_` and an output's name in upper snake case (`JobsDeadLetterQueue` becomes
/// `OVERTURE_JOBS_DEAD_LETTER_QUEUE`).
pub fn setting_name(output: &str) -> String {
    let mut name = String::from("OVERTURE");
    for c in output.chars() {
        if c.is_ascii_uppercase() {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// The access key the local form's settings export: the emulator checks none, and the door of
/// the AWS_IAM function URLs lets in requests signed with it.
pub const LOCAL_ACCESS_KEY: &str = "overture-local";
/// Its secret.
pub const LOCAL_SECRET_KEY: &str = "overture-local";
/// The account the emulator makes everything in (moto's default).
pub const LOCAL_ACCOUNT: &str = "123456789012";

/// The local credentials, as the door checks signatures with them.
pub fn local_credentials() -> aws_credential_types::Credentials {
    aws_credential_types::Credentials::new(
        LOCAL_ACCESS_KEY,
        LOCAL_SECRET_KEY,
        None,
        None,
        "overture-local",
    )
}

/// Whom the local credentials belong to: the requester of what is submitted with them.
pub fn local_caller_arn() -> String {
    format!("arn:aws:iam::{LOCAL_ACCOUNT}:user/{LOCAL_ACCESS_KEY}")
}

/// `settings` as lines a shell sources (`export NAME='value'`).
pub fn exports(settings: &BTreeMap<String, String>) -> String {
    settings
        .iter()
        .map(|(name, value)| format!("export {name}='{}'\n", value.replace('\'', r"'\''")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_named_as_the_functions_read_them() {
        assert_eq!(setting_name("EventsTable"), "OVERTURE_EVENTS_TABLE");
        assert_eq!(
            setting_name("JobsDeadLetterQueue"),
            "OVERTURE_JOBS_DEAD_LETTER_QUEUE"
        );
    }

    #[test]
    fn settings_are_exported_quoted() {
        let settings = BTreeMap::from([
            ("A".to_owned(), "http://127.0.0.1:4566".to_owned()),
            ("B".to_owned(), "it's".to_owned()),
        ]);
        assert_eq!(
            exports(&settings),
            "export A='http://127.0.0.1:4566'\nexport B='it'\\''s'\n"
        );
    }
}
