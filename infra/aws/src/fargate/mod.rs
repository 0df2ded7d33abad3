//! Step attempts on AWS: each one an ECS Fargate task of its own ([`FargateSteps`], the runner's
//! [`RunSandboxed`] port), a fresh micro-VM destroyed when the attempt ends, as bubblewrap gives
//! each attempt a fresh sandbox embedded.
//!
//! A task's overrides are shown to anyone who may call `DescribeTasks`, so the runner hands the
//! task no part of the job there, only where to find it: the whole job (command, variables, secret
//! variables, files, what to collect, its limits) is sealed under a fresh KMS data key bound to
//! the attempt (encryption context `purpose=step-input`, `deployment`, `step`, `attempt`) and put
//! as `steps/<deployment>/<step>/<attempt>/input.sealed` in the payloads bucket. The command, too,
//! is sealed: a template may have written a secret into it. The task's command is
//!
//! ```text
//! overture step-run --bucket <bucket> --input steps/<deployment>/<step>/<attempt>/input.sealed
//! ```
//!
//! The runner then polls `DescribeTasks` every [`FargateSteps::with_poll_interval`] until the task
//! is `STOPPED`, and stops it (`StopTask`) when the attempt is abandoned or runs past its timeout.
//! Both objects are deleted once the attempt is over.
//!
//! # What the task's entrypoint does (`overture step-run`, [`crate::step_task`])
//!
//! This is the image's contract (`infra/aws/step-image/Dockerfile`); [`open_input`] and
//! [`seal_result`] are its two halves in code, [`crate::step_task::run_step`] the whole.
//! 1. Read the input object and open it with [`open_input`]: `kms:Decrypt` of its data key with
//!    the encryption context above. The stack's `StepTaskRole` allows exactly that (`kms:Decrypt`
//!    with `purpose=step-input`), `s3:GetObject` on `steps/*/input.sealed` and `s3:PutObject` on
//!    `steps/*/result.sealed`.
//! 2. Drop every AWS credential before the user's command runs: the command's environment is
//!    cleared (only the job's variables, `PATH`, `HOME` and `OVERTURE_OUTPUTS`; no
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, no other `AWS_*`) and it runs as an unprivileged
//!    user of its own (`overture-step`), so that it cannot read the entrypoint's environment
//!    either. The user's tools act with what the step hands them, never with the engine's rights.
//! 3. Place the files under `/work`, set `$OVERTURE_OUTPUTS`, run the command with `/bin/sh -c`
//!    and the variables, kill it at the timeout, keep the last `output_limit` bytes of its output
//!    (and print it all, so that CloudWatch Logs has it), the deployment's secrets masked in both
//!    as the runner masks them ([`AttemptInput::masked`]).
//! 4. Seal what the command left with [`seal_result`] under the input's data key (no new KMS call)
//!    and put it as `result.sealed` beside the input; then exit with the command's exit code
//!    (128 + the signal's number when a signal killed it, as a shell reports it). When the
//!    entrypoint itself fails (the input does not open, S3 refuses), it exits with 125 and leaves
//!    no result.
//!
//! The sealed objects themselves, and both halves of the entrypoint, are in `sealed`.
//!
//! What a Fargate task cannot give that bubblewrap does: a step that asks for no network
//! (`network: false`) still has the network of its subnets, since a task's network is its
//! ENI's; the subnets' routes and the task's security groups decide what it reaches.
//!
//! The output a runner reads back is the result's tail. When the task left no result (it never
//! started, or died first), the output is only what ECS says about the stop: the container's own
//! lines are in CloudWatch Logs (`awslogs`), which this adapter does not read.

use std::io::Write as _;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_sdk_ecs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ecs::operation::run_task::{RunTaskError, RunTaskOutput};
use aws_sdk_ecs::types::{
    AssignPublicIp, AwsVpcConfiguration, ContainerOverride, LaunchType, NetworkConfiguration, Task,
    TaskOverride,
};
use aws_sdk_kms::types::DataKeySpec;
use aws_sdk_s3::primitives::ByteStream;
use overture_runner::{
    Cancel, OutputsFile, PortError, RunError, RunSandboxed, SandboxExit, SandboxJob, SandboxResult,
};
use overture_seal::ROOT_KEY_BYTES;
use secrecy::{ExposeSecret, SecretString};

mod sealed;

use sealed::{decode, seal, unseal};
pub use sealed::{encode, open_input, seal_result, AttemptInput, AttemptRef, AttemptResult};

/// The prefix of every attempt's objects.
pub const KEY_PREFIX: &str = "steps/";
/// The name of the container in the step task definition (`StepTask` in the stack).
pub const CONTAINER: &str = "step";
/// How often a running task's state is asked for, unless set otherwise.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);
/// Who started a task, as `DescribeTasks` shows it.
const STARTED_BY: &str = "overture-runner";
/// Why the runner stops a task it abandoned.
const ABANDONED: &str = "Overture abandoned the attempt";
/// Why the runner stops a task past its timeout.
const TIMED_OUT: &str = "Overture stopped the attempt at its timeout";

/// Where and how step tasks run: the stack's `StepCluster`, `StepTask` and `StepSubnets`.
#[derive(Clone, Debug)]
pub struct StepTasks {
    /// The cluster (name or ARN).
    pub cluster: String,
    /// The task definition (family, family:revision or ARN).
    pub task_definition: String,
    /// The subnets a task's network interface is made in (awsvpc).
    pub subnets: Vec<String>,
    /// The security groups of that interface; none means the VPC's default one.
    pub security_groups: Vec<String>,
}

/// Runs each step attempt as an ECS Fargate task of its own.
#[derive(Clone)]
pub struct FargateSteps {
    ecs: aws_sdk_ecs::Client,
    s3: aws_sdk_s3::Client,
    kms: aws_sdk_kms::Client,
    bucket: String,
    key: String,
    tasks: StepTasks,
    poll: Duration,
}

/// Why a step task could not be started, watched, stopped or read back; never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum FargateError {
    /// A call to ECS, S3 or KMS failed.
    #[error("{service} {operation} failed: {message}")]
    Call {
        service: &'static str,
        operation: &'static str,
        message: String,
    },
    /// ECS did not place the task (no capacity, a missing subnet): `RunTask`'s failures.
    #[error("ECS did not start the step task: {0}")]
    NotPlaced(String),
    /// The task stopped with no exit code of its container: it never ran the step.
    #[error("the step task stopped before its step ran ({0})")]
    StoppedBeforeRunning(String),
    /// The job cannot be run as a task.
    #[error("{0}")]
    Job(String),
    /// A sealed input or result does not open.
    #[error("the step's sealed {0}")]
    DoesNotOpen(String),
}

pub(crate) fn call<E>(
    service: &'static str,
    operation: &'static str,
) -> impl FnOnce(E) -> FargateError
where
    E: std::error::Error + 'static,
{
    move |error| FargateError::Call {
        service,
        operation,
        message: aws_sdk_ecs::error::DisplayErrorContext(error).to_string(),
    }
}

/// Whether an ECS call's failure may pass: the service's own fault, throttling, the wire.
fn transient<E: ProvideErrorMetadata>(error: &aws_sdk_ecs::error::SdkError<E>) -> bool {
    match error.as_service_error() {
        None => true,
        Some(service) => matches!(
            service.code(),
            Some("ServerException" | "ThrottlingException" | "ServiceUnavailableException") | None
        ),
    }
}

fn unavailable(error: FargateError) -> RunError {
    RunError::Failed(PortError::unavailable(error))
}

impl FargateSteps {
    /// Step tasks of `tasks`, with their inputs in `bucket` (the payloads bucket) sealed under
    /// data keys of the KMS key `key`.
    pub fn new(
        ecs: aws_sdk_ecs::Client,
        s3: aws_sdk_s3::Client,
        kms: aws_sdk_kms::Client,
        bucket: impl Into<String>,
        key: impl Into<String>,
        tasks: StepTasks,
    ) -> Self {
        Self {
            ecs,
            s3,
            kms,
            bucket: bucket.into(),
            key: key.into(),
            tasks,
            poll: POLL_INTERVAL,
        }
    }

    /// The same, asking for a task's state every `poll`.
    pub fn with_poll_interval(self, poll: Duration) -> Self {
        Self { poll, ..self }
    }

    /// Seals the job's input, puts it, and starts its task; the job's log is kept for the end.
    pub async fn start(&self, job: SandboxJob) -> Result<StartedStep, RunError> {
        let attempt = AttemptRef::of(&job)?;
        let input_key = format!("{}input.sealed", attempt.prefix());
        let (root, body) = self.seal_input(&attempt, &job).await?;
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(&input_key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(call("S3", "PutObject"))
            .map_err(unavailable)?;
        let ran = match self.run_task(&input_key).await? {
            Ok(ran) => ran,
            Err(error) => {
                let retry = transient(&error);
                let error = call("ECS", "RunTask")(error);
                self.forget(&attempt).await;
                return Err(RunError::Failed(if retry {
                    PortError::unavailable(error)
                } else {
                    PortError::refused(error)
                }));
            }
        };
        let Some(task_arn) = ran.tasks().first().and_then(|t| t.task_arn()) else {
            let reasons = ran
                .failures()
                .iter()
                .map(|f| f.reason().unwrap_or("no reason given"))
                .collect::<Vec<_>>()
                .join("; ");
            self.forget(&attempt).await;
            return Err(unavailable(FargateError::NotPlaced(reasons)));
        };
        Ok(StartedStep {
            task_arn: task_arn.to_owned(),
            attempt,
            root,
            job,
            started: Instant::now(),
        })
    }

    /// The job's input sealed under a fresh data key bound to the attempt: the key (kept for
    /// the result) and the object's body.
    async fn seal_input(
        &self,
        attempt: &AttemptRef,
        job: &SandboxJob,
    ) -> Result<([u8; ROOT_KEY_BYTES], Vec<u8>), RunError> {
        let generated = self
            .kms
            .generate_data_key()
            .key_id(&self.key)
            .key_spec(DataKeySpec::Aes256)
            .set_encryption_context(Some(attempt.encryption_context()))
            .send()
            .await
            .map_err(call("KMS", "GenerateDataKey"))
            .map_err(unavailable)?;
        let malformed = || {
            unavailable(FargateError::Call {
                service: "KMS",
                operation: "GenerateDataKey",
                message: "the answer has no 256-bit key".into(),
            })
        };
        let root: [u8; ROOT_KEY_BYTES] = generated
            .plaintext()
            .and_then(|key| key.as_ref().try_into().ok())
            .ok_or_else(malformed)?;
        let encrypted = generated.ciphertext_blob().ok_or_else(malformed)?.as_ref();
        let input = AttemptInput::of(job);
        let plain =
            SecretString::from(serde_json::to_string(&input).map_err(|e| {
                RunError::Failed(PortError::refused(FargateError::Job(e.to_string())))
            })?);
        let body = seal(
            &root,
            encrypted,
            attempt,
            "step-input",
            plain.expose_secret().as_bytes(),
        )
        .map_err(|e| RunError::Failed(PortError::refused(e)))?;
        Ok((root, body))
    }

    /// Asks ECS for the step's task, in the step subnets, told only where its input is.
    async fn run_task(
        &self,
        input_key: &str,
    ) -> Result<Result<RunTaskOutput, SdkError<RunTaskError>>, RunError> {
        let network = AwsVpcConfiguration::builder()
            .set_subnets(Some(self.tasks.subnets.clone()))
            .set_security_groups(
                (!self.tasks.security_groups.is_empty())
                    .then(|| self.tasks.security_groups.clone()),
            )
            .assign_public_ip(AssignPublicIp::Disabled)
            .build()
            .map_err(|e| RunError::Failed(PortError::refused(FargateError::Job(e.to_string()))))?;
        let command = vec![
            "overture".to_owned(),
            "step-run".to_owned(),
            "--bucket".to_owned(),
            self.bucket.clone(),
            "--input".to_owned(),
            input_key.to_owned(),
        ];
        Ok(self
            .ecs
            .run_task()
            .cluster(&self.tasks.cluster)
            .task_definition(&self.tasks.task_definition)
            .launch_type(LaunchType::Fargate)
            .count(1)
            .started_by(STARTED_BY)
            .network_configuration(
                NetworkConfiguration::builder()
                    .awsvpc_configuration(network)
                    .build(),
            )
            .overrides(
                TaskOverride::builder()
                    .container_overrides(
                        ContainerOverride::builder()
                            .name(CONTAINER)
                            .set_command(Some(command))
                            .build(),
                    )
                    .build(),
            )
            .send()
            .await)
    }

    /// Waits for a started task to stop, stopping it on `cancel` or at the job's timeout.
    pub async fn wait(
        &self,
        started: StartedStep,
        mut cancel: Cancel<'_>,
    ) -> Result<SandboxResult, RunError> {
        let deadline = tokio::time::Instant::from_std(started.started) + started.job.timeout;
        let stopped = loop {
            tokio::select! {
                () = &mut cancel => {
                    break self.stop(&started, ABANDONED).await
                        .map(|()| Stop::By(SandboxExit::Cancelled));
                }
                () = tokio::time::sleep_until(deadline) => {
                    break self.stop(&started, TIMED_OUT).await
                        .map(|()| Stop::By(SandboxExit::TimedOut));
                }
                () = tokio::time::sleep(self.poll) => match self.describe(&started).await {
                    Ok(Some(task)) => break Ok(Stop::Itself(Box::new(task))),
                    Ok(None) => {}
                    // A call that may pass is asked again at the next poll: the timeout and the
                    // lease still bound the wait.
                    Err(error) if error.retryable() => {
                        tracing::warn!(task = %started.task_arn, %error, "step task not described");
                    }
                    Err(error) => {
                        let _ = self.stop(&started, ABANDONED).await;
                        break Err(error);
                    }
                },
            }
        };
        let finished = match stopped {
            Ok(Stop::By(exit)) => self.finish(&started, exit, None).await,
            Ok(Stop::Itself(task)) => match container_exit(&task) {
                Ok(code) => {
                    self.finish(&started, SandboxExit::Code(code), Some(&task))
                        .await
                }
                Err(reason) => Err(unavailable(FargateError::StoppedBeforeRunning(reason))),
            },
            Err(error) => Err(error),
        };
        // Whatever happened, the sealed job is no longer needed.
        self.forget(&started.attempt).await;
        let mut finished = finished?;
        if let Some(mut log) = started.job.log {
            // The log is the attempt's record; a failed write must not hide how it ended.
            let _ = log.write_all(&finished.output);
            let _ = log.flush();
        }
        finished.duration = started.started.elapsed();
        Ok(finished)
    }

    /// The task once it is `STOPPED`.
    async fn describe(&self, started: &StartedStep) -> Result<Option<Task>, RunError> {
        let described = self
            .ecs
            .describe_tasks()
            .cluster(&self.tasks.cluster)
            .tasks(&started.task_arn)
            .send()
            .await
            .map_err(call("ECS", "DescribeTasks"))
            .map_err(unavailable)?;
        let Some(task) = described.tasks().first() else {
            return Err(RunError::Failed(PortError::refused(
                FargateError::StoppedBeforeRunning(format!(
                    "ECS no longer knows task {}",
                    started.task_arn
                )),
            )));
        };
        Ok((task.last_status() == Some("STOPPED")).then(|| task.clone()))
    }

    async fn stop(&self, started: &StartedStep, reason: &str) -> Result<(), RunError> {
        self.ecs
            .stop_task()
            .cluster(&self.tasks.cluster)
            .task(&started.task_arn)
            .reason(reason)
            .send()
            .await
            .map_err(call("ECS", "StopTask"))
            .map_err(unavailable)?;
        Ok(())
    }

    /// The result the task left, opened; or, without one, what ECS said about the stop.
    async fn finish(
        &self,
        started: &StartedStep,
        exit: SandboxExit,
        task: Option<&Task>,
    ) -> Result<SandboxResult, RunError> {
        let key = format!("{}result.sealed", started.attempt.prefix());
        let object = match self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
        {
            Ok(object) => Some(
                object
                    .body
                    .collect()
                    .await
                    .map_err(call("S3", "GetObject"))
                    .map_err(unavailable)?
                    .into_bytes(),
            ),
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => None,
            Err(error) => return Err(unavailable(call("S3", "GetObject")(error))),
        };
        let Some(object) = object else {
            let said = task
                .and_then(|t| t.stopped_reason())
                .unwrap_or("no reason given");
            let output = format!(
                "the step task left no result; ECS says it stopped: {said} (its own output is in \
                 CloudWatch Logs)\n"
            );
            return Ok(SandboxResult {
                exit,
                output: output.into_bytes(),
                outputs_file: OutputsFile::default(),
                duration: Duration::ZERO,
                collected: Vec::new(),
            });
        };
        let (_, plain) = unseal(&object, &started.attempt, "step-result", |_| async {
            Ok(started.root)
        })
        .await
        .map_err(|e| RunError::Failed(PortError::refused(e)))?;
        let result: AttemptResult = serde_json::from_slice(&plain).map_err(|e| {
            RunError::Failed(PortError::refused(FargateError::DoesNotOpen(format!(
                "result is malformed: {e}"
            ))))
        })?;
        let malformed = |what: &str| {
            RunError::Failed(PortError::refused(FargateError::DoesNotOpen(format!(
                "result's {what} is not base64"
            ))))
        };
        Ok(SandboxResult {
            exit,
            output: decode(&result.output).ok_or_else(|| malformed("output"))?,
            outputs_file: match result.outputs_file {
                Ok(content) => {
                    OutputsFile::Read(decode(&content).ok_or_else(|| malformed("outputs"))?)
                }
                Err((bytes, limit)) => OutputsFile::TooLarge { bytes, limit },
            },
            duration: Duration::ZERO,
            collected: result
                .collected
                .into_iter()
                .map(|(path, bytes)| Ok((path, decode(&bytes).ok_or_else(|| malformed("file"))?)))
                .collect::<Result<_, RunError>>()?,
        })
    }

    /// Deletes the attempt's objects; what is gone is gone, and a leftover holds only sealed bytes.
    async fn forget(&self, attempt: &AttemptRef) {
        for name in ["input.sealed", "result.sealed"] {
            let _ = self
                .s3
                .delete_object()
                .bucket(&self.bucket)
                .key(format!("{}{name}", attempt.prefix()))
                .send()
                .await;
        }
    }
}

/// How the wait for a task ended.
enum Stop {
    /// The runner stopped it.
    By(SandboxExit),
    /// It stopped by itself.
    Itself(Box<Task>),
}

/// A step task that was started and not yet waited for.
pub struct StartedStep {
    task_arn: String,
    attempt: AttemptRef,
    root: [u8; ROOT_KEY_BYTES],
    job: SandboxJob,
    started: Instant,
}

impl StartedStep {
    /// The task's ARN.
    pub fn task_arn(&self) -> &str {
        &self.task_arn
    }

    /// The attempt it runs.
    pub fn attempt(&self) -> &AttemptRef {
        &self.attempt
    }
}

/// The step container's exit code, or why a stopped task has none.
///
/// A container with an exit code ran the step: the code is the step's (0 success, else the
/// step's failure, which the step kind concludes on as in bubblewrap). A task stopped without
/// one never ran the step: ECS could not start it (`TaskFailedToStart`: no capacity, the image
/// could not be pulled, the subnet has no free address), or stopped it from outside (a Spot
/// reclaim, a person's `StopTask`). That is the sandbox failing, not the step: it is reported as
/// [`RunError::Failed`] with a retryable error, so the attempt is not failed and the job is
/// handed out again after its lease, and the queue's redrive policy sends it to the dead letters
/// if it never starts.
pub fn container_exit(task: &Task) -> Result<i32, String> {
    let container = task
        .containers()
        .iter()
        .find(|c| c.name() == Some(CONTAINER))
        .or_else(|| task.containers().first());
    if let Some(code) = container.and_then(|c| c.exit_code()) {
        return Ok(code);
    }
    let mut said = vec![];
    if let Some(code) = task.stop_code() {
        said.push(code.as_str().to_owned());
    }
    if let Some(reason) = task.stopped_reason() {
        said.push(reason.to_owned());
    }
    if let Some(reason) = container.and_then(|c| c.reason()) {
        said.push(reason.to_owned());
    }
    if said.is_empty() {
        said.push("ECS gave no reason".to_owned());
    }
    Err(said.join(": "))
}

#[async_trait]
impl RunSandboxed for FargateSteps {
    async fn run<'a>(
        &self,
        job: SandboxJob,
        cancel: Cancel<'a>,
    ) -> Result<SandboxResult, RunError> {
        let started = self.start(job).await?;
        self.wait(started, cancel).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ecs::types::{Container, TaskStopCode};
    use overture_events::DeploymentId;

    #[test]
    fn an_input_key_names_its_attempt_in_one_spelling_only() {
        let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let attempt = AttemptRef {
            deployment,
            step: "network".into(),
            attempt: 2,
        };
        let key = format!("steps/{deployment}/network/2/input.sealed");
        assert_eq!(AttemptRef::of_input_key(&key), Some(attempt));
        for bad in [
            format!("steps/{deployment}/network/2/result.sealed"),
            format!("steps/{deployment}/network/02/input.sealed"),
            format!("steps/{deployment}/network/x/input.sealed"),
            format!("steps/{deployment}//2/input.sealed"),
            format!("steps/{deployment}/a/b/2/input.sealed"),
            format!("kept/{deployment}/network/2/input.sealed"),
            "steps/not-a-deployment/network/2/input.sealed".to_owned(),
            String::new(),
        ] {
            assert_eq!(AttemptRef::of_input_key(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_container_that_exited_reports_its_code() {
        let task = Task::builder()
            .last_status("STOPPED")
            .containers(Container::builder().name(CONTAINER).exit_code(3).build())
            .build();
        assert_eq!(container_exit(&task), Ok(3));
    }

    #[test]
    fn a_task_that_never_ran_its_step_says_why_ecs_stopped_it() {
        let task = Task::builder()
            .last_status("STOPPED")
            .stop_code(TaskStopCode::TaskFailedToStart)
            .stopped_reason("CannotPullContainerError: pull image manifest has been retried")
            .containers(Container::builder().name(CONTAINER).build())
            .build();
        let reason = container_exit(&task).expect_err("no exit code");
        assert!(
            reason.starts_with("TaskFailedToStart: CannotPullContainerError"),
            "{reason}"
        );
        let error = unavailable(FargateError::StoppedBeforeRunning(reason));
        assert!(error.retryable(), "the sandbox failed, not the step");
    }
}
