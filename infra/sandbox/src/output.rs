//! Capturing a step's output into a buffer that keeps only the tail, read as it comes so a chatty
//! step can neither block on a full pipe nor fill the engine's memory.
//!
//! stdout and stderr arrive through one pipe (the sandbox's stderr is a duplicate of its stdout),
//! so they interleave exactly in the order they were written; two pipes read side by side could
//! only approximate that, and could put a final error message before the output that preceded it.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt};

use overture_runner::sandbox::TailBuffer;

use super::request::OutputLog;

/// A buffer shared between the reading task and `run`, which takes what is there even if the
/// reading had to be abandoned.
pub(super) type SharedTail = Arc<Mutex<TailBuffer>>;

/// Takes the buffered output out of `shared`.
pub(super) fn take(shared: &SharedTail) -> Vec<u8> {
    // A panic while holding this lock cannot leave the buffer half-written in a way that matters.
    let mut tail = shared.lock().unwrap_or_else(PoisonError::into_inner);
    std::mem::replace(&mut *tail, TailBuffer::new(0)).into_vec()
}

/// Reads `output` until it is closed, appending each chunk to `tail` and writing it to `log` as
/// it arrives.
///
/// The log is written synchronously: it is a local file taking chunks of at most 16 KiB, and a
/// write that fails only stops the copy, never the step.
pub(super) async fn capture(
    mut output: impl AsyncRead + Unpin,
    tail: SharedTail,
    mut log: Option<OutputLog>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match output.read(&mut buf).await {
            Ok(0) => {
                if let Some(Err(error)) = log.as_mut().map(|log| log.flush()) {
                    tracing::warn!(%error, "could not finish the step's log");
                }
                return;
            }
            Ok(n) => {
                if let Some(writer) = log.as_mut() {
                    if let Err(error) = writer.write_all(&buf[..n]) {
                        tracing::warn!(%error, "could not write the step's log; it stops here");
                        log = None;
                    }
                }
                tail.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&buf[..n]);
            }
            // A broken pipe that no further read will mend.
            Err(error) => {
                tracing::warn!(%error, "reading sandbox output failed");
                return;
            }
        }
    }
}
