//! What every function binary does as it starts: its log, and the settings the stack gives it;
//! and, with the feature `lambda`, how a batch that failed entirely is told to the runtime.

/// A setting the stack gives every function is missing from the environment.
#[derive(Debug, thiserror::Error)]
#[error("{0} is not set; the stack sets it (infra/aws/template.yaml)")]
pub struct MissingSetting(pub String);

/// The environment variable `name`, which the stack sets.
pub fn setting(name: &str) -> Result<String, MissingSetting> {
    std::env::var(name).map_err(|_| MissingSetting(name.to_owned()))
}

/// Logs to standard error (Lambda keeps it), at the level `OVERTURE_LOG` asks (default: warn),
/// without a time of its own (Lambda stamps every line); each handler's span is logged as it
/// ends, at `info`.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OVERTURE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .without_time()
        .with_ansi(false)
        .init();
}

/// A batch that failed entirely, as the Lambda runtime reports it: its error type is the stable
/// "Retryable" or "NonRetryable" (see `overture_kit::batch`), never a Rust type's name.
#[cfg(feature = "lambda")]
pub fn diagnostic(failed: overture_kit::batch::BatchFailed) -> lambda_runtime::Diagnostic {
    lambda_runtime::Diagnostic {
        error_type: failed.error_type().to_owned(),
        error_message: failed.to_string(),
    }
}
