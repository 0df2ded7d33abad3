//! `overture step-run` (hidden): the entrypoint of a step's Fargate task on AWS, which the
//! runner starts with `overture step-run --bucket B --input steps/<deployment>/<step>/<attempt>/
//! input.sealed` ([`overture_aws::fargate`] has the contract, [`overture_aws::step_task`] the
//! work).
//!
//! It exits with the step command's exit code (128 + the signal's number when a signal ended
//! it), so the task's container exit code is the step's. When the entrypoint itself fails (the
//! input cannot be read or opened, the result cannot be put, the command cannot be started) it
//! exits with [`ENTRYPOINT_FAILED`], as `docker run` does for its own failures, and says why on
//! stderr without any of the job's values. The S3 endpoint and the region come from the usual
//! AWS environment (`AWS_REGION`, `AWS_ENDPOINT_URL`, the task role's credentials).

use std::path::PathBuf;
use std::process::ExitCode;

use overture_aws::step_task::{run_step, StepRun};

/// The exit code of a failure of the entrypoint itself, not of the step's command.
pub const ENTRYPOINT_FAILED: u8 = 125;

/// What `overture step-run` takes.
#[derive(clap::Args)]
pub struct StepRunArgs {
    /// The payloads bucket.
    #[arg(long)]
    bucket: String,
    /// The key of the attempt's sealed input: steps/<deployment>/<step>/<attempt>/input.sealed.
    #[arg(long)]
    input: String,
    /// Where the job's files are placed: the command's working directory and HOME.
    #[arg(long, default_value = overture_aws::step_task::WORK_DIR)]
    work_dir: PathBuf,
    /// Who runs the command when this runs as root (a user name or a uid); never root.
    #[arg(long, default_value = overture_aws::step_task::STEP_USER)]
    user: String,
}

/// Runs the attempt; the command's exit code, or [`ENTRYPOINT_FAILED`].
pub fn main(args: StepRunArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("overture step-run: cannot start the runtime: {error}");
            return ExitCode::from(ENTRYPOINT_FAILED);
        }
    };
    let run = StepRun {
        bucket: args.bucket,
        input: args.input,
        work_dir: args.work_dir,
        user: args.user,
    };
    let ran = runtime.block_on(async {
        let config = overture_aws::config::from_env().await;
        let s3 = overture_aws::s3::client(&config);
        let kms = aws_sdk_kms::Client::new(&config);
        run_step(&s3, &kms, &run, Box::new(std::io::stdout())).await
    });
    match ran {
        // A shell's codes are 0 to 255; anything else cannot come from a process's exit.
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
        Err(error) => {
            eprintln!("overture step-run: {error}");
            ExitCode::from(ENTRYPOINT_FAILED)
        }
    }
}
