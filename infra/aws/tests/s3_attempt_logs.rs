//! Attempt logs as S3 objects, against the local AWS emulator: what the runner writes is what
//! `overture logs` reads back, run by run; destroy runs add to one log; a log is bounded.
//!
//! The writer puts its object from a blocking section of tokio's multi-thread runtime, as the
//! runner's Lambda runs it, so these tests run on that runtime.

mod support;

use std::io::Write;

use overture_aws::logs::{LogsError, S3AttemptLogs, MAX_LOG};
use overture_aws::s3::{client, create_payloads_bucket};
use overture_events::DeploymentId;
use overture_kit::query::AttemptLog;
use overture_runner::logs::{AttemptLogs, LogName};

const BUCKET: &str = "overture-logs";

/// A client of its own, as the runner and the command-line program each have.
async fn logs() -> S3AttemptLogs {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = client(&config);
    create_payloads_bucket(&client, BUCKET)
        .await
        .expect("the bucket");
    S3AttemptLogs::new(client, BUCKET)
}

fn deployment() -> DeploymentId {
    DeploymentId::from_uuid(uuid::Uuid::now_v7())
}

fn write(logs: &S3AttemptLogs, id: DeploymentId, step: &str, name: LogName, output: &[u8]) {
    let mut log = logs.create(id, step, name).expect("a log");
    log.write_all(output).expect("written");
    log.flush().expect("put");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_of_a_step_reads_back_in_attempt_order() {
    let (runner, reader) = (logs().await, logs().await);
    let id = deployment();
    for attempt in [2, 10, 1] {
        write(
            &runner,
            id,
            "build",
            LogName::Attempt(attempt),
            format!("attempt {attempt}\n").as_bytes(),
        );
    }
    write(&runner, id, "build", LogName::Destroy, b"destroyed\n");
    write(
        &runner,
        id,
        "build-2",
        LogName::Attempt(3),
        b"another step\n",
    );

    assert_eq!(
        reader.attempts(id, "build").await.expect("listed"),
        vec![1, 2, 10]
    );
    let second = reader.read(id, "build", AttemptLog::Attempt(2)).await;
    assert_eq!(second.expect("read").as_deref(), Some(&b"attempt 2\n"[..]));
    let destroy = reader.read(id, "build", AttemptLog::Destroy).await;
    assert_eq!(destroy.expect("read").as_deref(), Some(&b"destroyed\n"[..]));
    assert_eq!(
        reader
            .read(id, "build", AttemptLog::Attempt(4))
            .await
            .expect("read"),
        None
    );
    assert!(reader
        .attempts(deployment(), "build")
        .await
        .expect("listed")
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_printed_nothing_has_an_empty_log_put_when_its_writer_is_dropped() {
    let logs = logs().await;
    let id = deployment();
    drop(
        logs.create(id, "quiet", LogName::Attempt(1))
            .expect("a log"),
    );
    assert_eq!(logs.attempts(id, "quiet").await.expect("listed"), vec![1]);
    let read = logs.read(id, "quiet", AttemptLog::Attempt(1)).await;
    assert_eq!(read.expect("read"), Some(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_destroy_run_adds_to_the_steps_destroy_log() {
    let logs = logs().await;
    let id = deployment();
    write(
        &logs,
        id,
        "network",
        LogName::Destroy,
        b"first run failed\n",
    );
    write(
        &logs,
        id,
        "network",
        LogName::Destroy,
        b"second run destroyed\n",
    );
    let read = logs.read(id, "network", AttemptLog::Destroy).await;
    assert_eq!(
        read.expect("read").as_deref(),
        Some(&b"first run failed\nsecond run destroyed\n"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_keeps_the_first_bytes_of_a_long_run_and_says_how_many_it_dropped() {
    let logs = logs().await;
    let id = deployment();
    let mut log = logs
        .create(id, "chatty", LogName::Attempt(1))
        .expect("a log");
    let line = [b'x'; 1023]
        .iter()
        .chain(b"\n")
        .copied()
        .collect::<Vec<u8>>();
    for _ in 0..(MAX_LOG / line.len() + 3) {
        log.write_all(&line).expect("written");
    }
    log.flush().expect("put");
    let read = logs
        .read(id, "chatty", AttemptLog::Attempt(1))
        .await
        .expect("read")
        .expect("a log");
    let (kept, note) = read.split_at(MAX_LOG);
    assert!(kept.chunks(1024).all(|chunk| chunk == line.as_slice()));
    let note = String::from_utf8_lossy(note);
    assert!(
        note.contains("3072 more bytes of output were not kept"),
        "{note}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_from_a_missing_bucket_is_refused_and_not_worth_retrying() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let logs = S3AttemptLogs::new(client(&config), "no-such-log-bucket");
    match logs.attempts(deployment(), "build").await {
        Err(error @ LogsError::Refused { .. }) => {
            assert!(!error.is_retryable());
            assert!(error.to_string().contains("no-such-log-bucket"), "{error}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_writer_off_the_multi_thread_runtime_fails_its_flush_instead_of_hanging() {
    let logs = logs().await;
    let mut log = logs
        .create(deployment(), "build", LogName::Attempt(1))
        .expect("a log");
    log.write_all(b"hello\n").expect("held");
    let flushed = log.flush();
    assert!(
        flushed
            .as_ref()
            .is_err_and(|e| e.to_string().contains("multi-thread")),
        "{flushed:?}"
    );
}
