//! Every attempt's output on AWS: one S3 object per run of a step in the payloads bucket,
//! `logs/<deployment>/<step>/<attempt>.log` (and `destroy.log`), the same names as the data
//! directory's files (`overture_infra::logs`), written by the runner and read by `overture logs`.
//!
//! No function holds a file for a deployment's life, and a Lambda's disk goes with its execution
//! environment, so the output must leave the runner as an object. An object cannot be appended
//! to: the writer ([`AttemptLogs::create`]) holds a run's output in memory, at most [`MAX_LOG`]
//! bytes (the rest is counted and named at the end of the object, never kept), and puts the
//! whole object when it is flushed (the sandbox flushes when the step's output ends) or dropped
//! having been written since. Each destroy run adds to the step's destroy log, as embedded: its
//! writer starts from the object the earlier runs left.
//!
//! `Write` is synchronous and the SDK is not, so the upload blocks its thread in place
//! (`tokio::task::block_in_place`): the writer must be used on tokio's multi-thread runtime, as
//! the runner's Lambda and its tests run it; elsewhere its flush fails with an error saying so.

#[cfg(feature = "runner")]
use std::io::{self, Write};

use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
#[cfg(feature = "runner")]
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use overture_events::DeploymentId;
use overture_kit::query::AttemptLog;
#[cfg(feature = "runner")]
use overture_runner::{
    logs::{AttemptLogs, LogName},
    PortError,
};

use crate::s3::passes;

/// The prefix of every log's key.
pub const KEY_PREFIX: &str = "logs/";
/// The most of one run's output a log keeps: its first 8 MiB. A run's output is held in the
/// runner's memory until it is put, and a step that writes more is not one a person reads whole.
pub const MAX_LOG: usize = 8 * 1024 * 1024;

/// A call to S3 failed, reading or writing a log.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    /// S3 could not be reached, was throttled or failed itself: trying again later may succeed.
    #[error("S3 bucket `{bucket}`: {operation} failed: {message}")]
    Unavailable {
        /// The bucket.
        bucket: String,
        /// The API operation.
        operation: &'static str,
        /// What the SDK said.
        message: String,
    },
    /// S3 refused the call (no such bucket, access denied): trying again will not help.
    #[error("S3 bucket `{bucket}` refused {operation}: {message}")]
    Refused {
        /// The bucket.
        bucket: String,
        /// The API operation.
        operation: &'static str,
        /// What the SDK said.
        message: String,
    },
}

impl LogsError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, LogsError::Unavailable { .. })
    }

    fn of<E>(bucket: &str, operation: &'static str, error: SdkError<E>) -> Self
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let (bucket, message) = (bucket.to_owned(), DisplayErrorContext(&error).to_string());
        if passes(&error) {
            LogsError::Unavailable {
                bucket,
                operation,
                message,
            }
        } else {
            LogsError::Refused {
                bucket,
                operation,
                message,
            }
        }
    }
}

/// Attempt logs as objects of one S3 bucket.
#[derive(Clone, Debug)]
pub struct S3AttemptLogs {
    client: Client,
    bucket: String,
}

impl S3AttemptLogs {
    /// The logs in `bucket` (the payloads bucket), through `client` (see [`crate::s3::client`]).
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// The key of the object holding the output of this run of a step.
    pub fn key(deployment: DeploymentId, step: &str, name: AttemptLog) -> String {
        let prefix = Self::step_prefix(deployment, step);
        match name {
            AttemptLog::Attempt(attempt) => format!("{prefix}{attempt}.log"),
            AttemptLog::Destroy => format!("{prefix}destroy.log"),
        }
    }

    fn step_prefix(deployment: DeploymentId, step: &str) -> String {
        format!("{KEY_PREFIX}{deployment}/{step}/")
    }

    /// The attempts of a step that have a log, in order.
    pub async fn attempts(
        &self,
        deployment: DeploymentId,
        step: &str,
    ) -> Result<Vec<u32>, LogsError> {
        let prefix = Self::step_prefix(deployment, step);
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&prefix)
            .into_paginator()
            .send();
        let mut attempts = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| LogsError::of(&self.bucket, "ListObjectsV2", e))?;
            let numbered = page
                .contents()
                .iter()
                .filter_map(|object| object.key()?.strip_prefix(&prefix)?.strip_suffix(".log"))
                .filter_map(|stem| stem.parse::<u32>().ok());
            attempts.extend(numbered);
        }
        attempts.sort_unstable();
        Ok(attempts)
    }

    /// The output of this run of a step, if it has a log.
    pub async fn read(
        &self,
        deployment: DeploymentId,
        step: &str,
        name: AttemptLog,
    ) -> Result<Option<Vec<u8>>, LogsError> {
        read_object(
            &self.client,
            &self.bucket,
            &Self::key(deployment, step, name),
        )
        .await
    }
}

async fn read_object(
    client: &Client,
    bucket: &str,
    key: &str,
) -> Result<Option<Vec<u8>>, LogsError> {
    let object = match client.get_object().bucket(bucket).key(key).send().await {
        Ok(object) => object,
        Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
            return Ok(None)
        }
        Err(error) => return Err(LogsError::of(bucket, "GetObject", error)),
    };
    let body = object
        .body
        .collect()
        .await
        .map_err(|error| LogsError::Unavailable {
            bucket: bucket.to_owned(),
            operation: "GetObject",
            message: format!("reading the object: {}", DisplayErrorContext(&error)),
        })?;
    Ok(Some(body.into_bytes().to_vec()))
}

/// The runner writes by its own name of a run; the object is the one the query port reads.
#[cfg(feature = "runner")]
impl AttemptLogs for S3AttemptLogs {
    fn create(
        &self,
        deployment: DeploymentId,
        step: &str,
        name: LogName,
    ) -> Result<Box<dyn Write + Send + Sync>, PortError> {
        Ok(Box::new(LogObject {
            client: self.client.clone(),
            bucket: self.bucket.clone(),
            key: Self::key(deployment, step, query_name(name)),
            earlier: (name != LogName::Destroy).then(Vec::new),
            output: Vec::new(),
            not_kept: 0,
            // A run that prints nothing still has its (empty) log, as embedded.
            unsaved: true,
        }))
    }
}

/// The runner's name of a run as the query port names its log.
#[cfg(feature = "runner")]
fn query_name(name: LogName) -> AttemptLog {
    match name {
        LogName::Attempt(attempt) => AttemptLog::Attempt(attempt),
        LogName::Destroy => AttemptLog::Destroy,
    }
}

/// One run's log, held in memory and put whole.
#[cfg(feature = "runner")]
struct LogObject {
    client: Client,
    bucket: String,
    key: String,
    /// What earlier runs left in the object (destroy runs add to it); `None` until read.
    earlier: Option<Vec<u8>>,
    /// This run's output, at most [`MAX_LOG`] bytes.
    output: Vec<u8>,
    /// How many bytes of output past [`MAX_LOG`] were not kept.
    not_kept: u64,
    /// Whether the object lacks output this run has had (or was never put).
    unsaved: bool,
}

#[cfg(feature = "runner")]
impl LogObject {
    async fn put(&mut self) -> Result<(), LogsError> {
        if self.earlier.is_none() {
            let left = read_object(&self.client, &self.bucket, &self.key).await?;
            self.earlier = Some(left.unwrap_or_default());
        }
        let mut body = self.earlier.clone().unwrap_or_default();
        body.extend_from_slice(&self.output);
        if self.not_kept > 0 {
            body.extend(
                format!(
                    "\n[overture: {} more bytes of output were not kept; a log keeps a run's \
                     first {} MiB]\n",
                    self.not_kept,
                    MAX_LOG / (1024 * 1024)
                )
                .into_bytes(),
            );
        }
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&self.key)
            .content_type("text/plain; charset=utf-8")
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| LogsError::of(&self.bucket, "PutObject", e))?;
        Ok(())
    }

    /// Puts the object now, blocking this thread (see the module's header).
    fn put_now(&mut self) -> io::Result<()> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return Err(io::Error::other(
                "an attempt's log is put to S3 from tokio's multi-thread runtime only",
            ));
        }
        tokio::task::block_in_place(|| runtime.block_on(self.put())).map_err(io::Error::other)?;
        self.unsaved = false;
        Ok(())
    }
}

#[cfg(feature = "runner")]
impl Write for LogObject {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = MAX_LOG.saturating_sub(self.output.len());
        let (kept, dropped) = bytes.split_at(bytes.len().min(room));
        self.output.extend_from_slice(kept);
        self.not_kept += dropped.len() as u64;
        self.unsaved = true;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.unsaved {
            self.put_now()?;
        }
        Ok(())
    }
}

#[cfg(feature = "runner")]
impl Drop for LogObject {
    fn drop(&mut self) {
        if self.unsaved {
            if let Err(error) = self.put_now() {
                tracing::warn!(key = self.key, %error, "could not put the step's log");
            }
        }
    }
}
