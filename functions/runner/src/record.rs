//! Recording how an attempt went: its [`Outcome`] in the runner's words, and the commands that
//! record its start, an interruption, a success or a failure (the aggregate then applies the
//! retry policy, in the same commit).

use std::collections::BTreeMap;
use std::time::Duration;

use overture_domain::deployment::Interruption;
use overture_domain::services::ServiceInstance;
use overture_domain::{DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::{DeploymentId, ErrorClass, Timestamp};
use overture_kit::{execute, execute_all, Cause, LogError};

use crate::{AttemptReport, RunnerPorts};

/// How an attempt in a sandbox ended, as the runner records it.
pub(crate) enum Outcome {
    Success {
        outputs: BTreeMap<String, String>,
        duration: Duration,
        /// The instances of the service the step provides, which answered its check.
        registrations: Vec<ServiceInstance>,
    },
    Failure {
        class: ErrorClass,
        exit_code: Option<i32>,
        message: String,
        duration: Duration,
    },
    Abandoned,
    /// The runner lost the job's lease and killed the sandbox.
    LostJob,
}

impl Outcome {
    /// A `step-failed` attempt that never ran its command: what it was given could not be
    /// used, and trying again would not change that. `message` is already masked.
    pub(crate) fn not_run(message: String) -> Self {
        Outcome::Failure {
            class: ErrorClass::StepFailed,
            exit_code: None,
            message,
            duration: Duration::ZERO,
        }
    }
}

/// Records what becomes of one attempt of one step, under one cause.
pub(crate) struct Record<'a> {
    pub(crate) ports: &'a RunnerPorts<'a>,
    pub(crate) deployment: DeploymentId,
    pub(crate) cause: &'a Cause,
    pub(crate) step: &'a str,
    pub(crate) attempt: u32,
}

impl Record<'_> {
    /// Records the start (`StepStarted`) and answers the state it leads to, or what the job has
    /// become when the deployment refuses it.
    pub(crate) async fn start(
        &self,
        start: DeploymentCommand,
    ) -> Result<Result<DeploymentState, AttemptReport>, LogError> {
        let (ports, cause) = (self.ports, self.cause);
        Ok(
            match execute(ports.log, self.deployment, "", cause, |_| start.clone()).await? {
                Ok(executed) => Ok(executed.state),
                Err(refused) => Err(not_started(refused)),
            },
        )
    }

    /// A step that runs nothing: nothing can happen between the start and the outcome, so both,
    /// and the steps the success makes ready, are one commit.
    pub(crate) async fn start_and_succeed(
        &self,
        start: DeploymentCommand,
        now: Timestamp,
    ) -> Result<AttemptReport, LogError> {
        let success = DeploymentCommand::RecordSuccess {
            step: self.step.to_owned(),
            attempt: self.attempt,
            outputs: Default::default(),
            duration_ms: 0,
        };
        let commands = [start, success, DeploymentCommand::Advance { now }];
        let recorded = execute_all(self.ports.log, self.deployment, "", self.cause, |_| {
            commands.to_vec()
        })
        .await?;
        Ok(match recorded {
            Ok(_) => AttemptReport::Succeeded,
            Err(refused) => not_started(refused),
        })
    }

    /// The job came back while its attempt runs: its runner died, or this is a duplicate
    /// delivery. Only the attempt's lease tells which.
    pub(crate) async fn came_back(&self) -> Result<AttemptReport, LogError> {
        Ok(match self.interrupt(Interruption::LeaseExpired).await? {
            Ok(()) => AttemptReport::Interrupted,
            Err(DeploymentError::LeaseNotExpired { until, .. }) => {
                AttemptReport::StillRunning(until)
            }
            Err(refused) => AttemptReport::Obsolete(refused.to_string()),
        })
    }

    /// Records the outcome of the attempt's sandbox.
    pub(crate) async fn outcome(&self, outcome: Outcome) -> Result<AttemptReport, LogError> {
        let recorded = match outcome {
            Outcome::Abandoned => return Ok(AttemptReport::Abandoned),
            Outcome::LostJob => self
                .interrupt(Interruption::RunnerLostJob)
                .await?
                .map(|()| AttemptReport::Interrupted),
            Outcome::Success {
                outputs,
                duration,
                registrations,
            } => self
                .success(outputs, duration, registrations)
                .await?
                .map(|()| AttemptReport::Succeeded),
            Outcome::Failure {
                class,
                exit_code,
                message,
                duration,
            } => self
                .failure(class, exit_code, message, duration)
                .await?
                .map(|()| AttemptReport::Failed(class)),
        };
        // Refused here means the attempt was abandoned while it finished.
        Ok(recorded.unwrap_or(AttemptReport::Abandoned))
    }

    /// Records the attempt as interrupted, or says why it is not.
    async fn interrupt(&self, why: Interruption) -> Result<Result<(), DeploymentError>, LogError> {
        let command = DeploymentCommand::InterruptAttempt {
            step: self.step.to_owned(),
            attempt: self.attempt,
            why,
            now: self.ports.clock.now(),
        };
        Ok(
            execute(self.ports.log, self.deployment, "", self.cause, |_| {
                command.clone()
            })
            .await?
            .map(|_| ()),
        )
    }

    async fn success(
        &self,
        outputs: BTreeMap<String, String>,
        duration: Duration,
        registrations: Vec<ServiceInstance>,
    ) -> Result<Result<(), DeploymentError>, LogError> {
        // The instances are registered with the success, in its commit: a service that
        // answered its check runs, and steps waiting for it may start.
        let register = (!registrations.is_empty()).then(|| DeploymentCommand::RegisterServices {
            step: self.step.to_owned(),
            attempt: self.attempt,
            instances: registrations,
        });
        let commands: Vec<DeploymentCommand> = register
            .into_iter()
            .chain([
                DeploymentCommand::RecordSuccess {
                    step: self.step.to_owned(),
                    attempt: self.attempt,
                    outputs,
                    duration_ms: crate::millis(duration),
                },
                DeploymentCommand::Advance {
                    now: self.ports.clock.now(),
                },
            ])
            .collect();
        Ok(
            execute_all(self.ports.log, self.deployment, "", self.cause, |_| {
                commands.clone()
            })
            .await?
            .map(|_| ()),
        )
    }

    async fn failure(
        &self,
        error_class: ErrorClass,
        exit_code: Option<i32>,
        message: String,
        duration: Duration,
    ) -> Result<Result<(), DeploymentError>, LogError> {
        let now = self.ports.clock.now();
        // What the failure leads to (a retry, the grace period, the deployment's end) is decided
        // in the same commit.
        let commands = [
            DeploymentCommand::RecordFailure {
                step: self.step.to_owned(),
                attempt: self.attempt,
                error_class,
                exit_code,
                message,
                duration_ms: crate::millis(duration),
                now,
            },
            DeploymentCommand::Advance { now },
        ];
        Ok(
            execute_all(self.ports.log, self.deployment, "", self.cause, |_| {
                commands.to_vec()
            })
            .await?
            .map(|_| ()),
        )
    }
}

/// What a job whose start the deployment refused has become.
fn not_started(refused: DeploymentError) -> AttemptReport {
    match refused {
        DeploymentError::NotYetDue { not_before, .. } => AttemptReport::NotYetDue(not_before),
        refused => AttemptReport::Obsolete(refused.to_string()),
    }
}
