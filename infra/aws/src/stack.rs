//! The stack (`infra/aws/template.yaml`) made through CloudFormation, for the local set-up and
//! the tests: the tables, bucket, queues and key exactly as an AWS account gets them, rather
//! than by separate create calls.
//!
//! [`deploy_local`] creates the stack and waits until CloudFormation reports it complete, then
//! hands back its outputs. Queue URLs among them name the AWS host even in the emulator; ask
//! SQS for them with [`queue_url`]. The emulator stores functions without running them, so
//! [`stand_in_code`] is all the code its functions need, one zip for each of [`functions`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_cloudformation::error::DisplayErrorContext;
use aws_sdk_cloudformation::types::{Capability, Parameter, StackStatus};
use aws_sdk_cloudformation::Client;

/// The template, as deployed to AWS.
pub const TEMPLATE: &str = include_str!("../template.yaml");

/// How often the stack's status is asked for while it is being made.
const POLL: Duration = Duration::from_millis(250);

/// Why the stack was not made.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// A call to CloudFormation or SQS failed.
    #[error("stack `{stack}`: {operation} failed: {message}")]
    Call {
        /// The stack.
        stack: String,
        /// The API operation.
        operation: &'static str,
        /// What the SDK said, with its causes.
        message: String,
    },
    /// CloudFormation ended in another state than `CREATE_COMPLETE`.
    #[error("stack `{stack}` ended {status}: {reason}")]
    Failed {
        /// The stack.
        stack: String,
        /// Its final status.
        status: String,
        /// CloudFormation's reason, and the first resource that failed.
        reason: String,
    },
    /// The stack was still being made when the wait ran out.
    #[error("stack `{stack}` was not complete within {within:?}")]
    TimedOut {
        /// The stack.
        stack: String,
        /// The wait.
        within: Duration,
    },
}

/// Creates the stack `name` from [`TEMPLATE`] with `parameters` (name, value), waits at most
/// `within` for `CREATE_COMPLETE`, and returns its outputs by name.
pub async fn deploy_local(
    client: &Client,
    name: &str,
    parameters: &[(&str, &str)],
    within: Duration,
) -> Result<HashMap<String, String>, StackError> {
    let call = |operation, error: String| StackError::Call {
        stack: name.to_owned(),
        operation,
        message: error,
    };
    let parameters = parameters
        .iter()
        .map(|(key, value)| {
            Parameter::builder()
                .parameter_key(*key)
                .parameter_value(*value)
                .build()
        })
        .collect();
    client
        .create_stack()
        .stack_name(name)
        .template_body(TEMPLATE)
        .set_parameters(Some(parameters))
        // The template makes IAM roles (with names CloudFormation chooses).
        .capabilities(Capability::CapabilityIam)
        .send()
        .await
        .map_err(|e| call("CreateStack", DisplayErrorContext(e).to_string()))?;
    let start = Instant::now();
    loop {
        let described = client
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .map_err(|e| call("DescribeStacks", DisplayErrorContext(e).to_string()))?;
        let Some(stack) = described.stacks().first() else {
            return Err(call("DescribeStacks", "no such stack".into()));
        };
        match stack.stack_status() {
            Some(StackStatus::CreateComplete) => {
                return Ok(stack
                    .outputs()
                    .iter()
                    .filter_map(|o| {
                        Some((o.output_key()?.to_owned(), o.output_value()?.to_owned()))
                    })
                    .collect());
            }
            Some(StackStatus::CreateInProgress) | None => {}
            Some(other) => {
                let reason = stack.stack_status_reason().unwrap_or("").to_owned();
                let first = first_failure(client, name).await.unwrap_or_default();
                return Err(StackError::Failed {
                    stack: name.to_owned(),
                    status: other.as_str().to_owned(),
                    reason: format!("{reason} {first}").trim().to_owned(),
                });
            }
        }
        if start.elapsed() > within {
            return Err(StackError::TimedOut {
                stack: name.to_owned(),
                within,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The first resource of the stack that failed, and why, from its events.
async fn first_failure(client: &Client, name: &str) -> Option<String> {
    let events = client
        .describe_stack_events()
        .stack_name(name)
        .send()
        .await
        .ok()?;
    // Events come newest first; from the end, the first failure found is the first that happened.
    events
        .stack_events()
        .iter()
        .rev()
        .find(|e| {
            e.resource_status()
                .is_some_and(|s| s.as_str().ends_with("FAILED"))
        })
        .map(|e| {
            format!(
                "({}: {})",
                e.logical_resource_id().unwrap_or("?"),
                e.resource_status_reason().unwrap_or("")
            )
        })
}

/// The URL of the queue `name` as SQS itself reports it: the stack's outputs name the AWS host
/// even in the emulator.
pub async fn queue_url(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<String, StackError> {
    let call = |error: String| StackError::Call {
        stack: name.to_owned(),
        operation: "GetQueueUrl",
        message: error,
    };
    sqs.get_queue_url()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| call(DisplayErrorContext(e).to_string()))?
        .queue_url()
        .map(str::to_owned)
        .ok_or_else(|| call("no URL in the answer".into()))
}

/// The functions of the template, by the name of their code (`CodePrefix` + NAME + `.zip`),
/// which is also their binary's name and their name after the stack's (`STACK-NAME`).
pub fn functions() -> Vec<&'static str> {
    const CODE: &str = "${CodePrefix}";
    let mut names: Vec<&str> = TEMPLATE
        .match_indices(CODE)
        .filter_map(|(at, _)| TEMPLATE[at + CODE.len()..].split_once(".zip"))
        .map(|(name, _)| name)
        .filter(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// A zip holding a stand-in `bootstrap` (never run: the emulator only stores functions), so that
/// CloudFormation in the emulator can create the functions from a bucket as on AWS.
pub fn stand_in_code() -> Vec<u8> {
    // A stored (uncompressed) zip of one file, written by hand: no zip crate for one file.
    let name = b"bootstrap";
    let data = b"#!/bin/sh\nexit 1\n";
    let crc = crc32(data);
    let (name_len, data_len) = (name.len() as u16, data.len() as u32);
    let mut zip = Vec::new();
    zip.extend_from_slice(&0x0403_4b50_u32.to_le_bytes());
    zip.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    zip.extend_from_slice(&crc.to_le_bytes());
    zip.extend_from_slice(&data_len.to_le_bytes());
    zip.extend_from_slice(&data_len.to_le_bytes());
    zip.extend_from_slice(&name_len.to_le_bytes());
    zip.extend_from_slice(&0_u16.to_le_bytes());
    zip.extend_from_slice(name);
    zip.extend_from_slice(data);
    let central_at = zip.len() as u32;
    zip.extend_from_slice(&0x0201_4b50_u32.to_le_bytes());
    zip.extend_from_slice(&[20, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    zip.extend_from_slice(&crc.to_le_bytes());
    zip.extend_from_slice(&data_len.to_le_bytes());
    zip.extend_from_slice(&data_len.to_le_bytes());
    zip.extend_from_slice(&name_len.to_le_bytes());
    // Extra, comment, disk, internal attributes.
    zip.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    // External attributes: a regular file, mode 755.
    zip.extend_from_slice(&(0o100_755_u32 << 16).to_le_bytes());
    zip.extend_from_slice(&0_u32.to_le_bytes());
    zip.extend_from_slice(name);
    let central_len = zip.len() as u32 - central_at;
    zip.extend_from_slice(&0x0605_4b50_u32.to_le_bytes());
    zip.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
    zip.extend_from_slice(&central_len.to_le_bytes());
    zip.extend_from_slice(&central_at.to_le_bytes());
    zip.extend_from_slice(&0_u16.to_le_bytes());
    zip
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0_u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_functions_are_named_by_their_code() {
        let functions = functions();
        for name in ["orchestrator", "projector", "runner", "submit"] {
            assert!(functions.contains(&name), "{functions:?}");
        }
    }
}
