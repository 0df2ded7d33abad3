//! The poller: for each trigger, reads its source and invokes its function through the Lambda
//! invoke API of `cargo lambda watch`, as Lambda's event source mappings do on AWS.
//!
//! - A stream is read shard by shard, one iterator per consuming function; a shard's batches go
//!   to the function one at a time, in order. A failed batch is delivered again after a backoff,
//!   from its first failed record when the function reported which (`ReportBatchItemFailures`);
//!   after the trigger's retries it is recorded on its failure queue and the shard moves on.
//! - A queue is long-polled by a few pollers at once; the messages of a batch that the function
//!   did not report failed are deleted, the others come back after their visibility timeout.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use serde::Serialize;

use crate::batches::{backoff, outcome, queue_event, resume_at, settled, stream_event, Outcome};
use crate::triggers::{Source, Trigger};
use crate::LocalError;

/// How long a stream with nothing new is left before it is read again.
const IDLE: Duration = Duration::from_millis(300);
/// SQS's longest long poll.
const LONG_POLL: i32 = 20;

/// The clients the poller reads with and the functions' invoke endpoint.
#[derive(Clone)]
pub struct Poller {
    /// The events table's stream.
    pub streams: aws_sdk_dynamodbstreams::Client,
    /// The queues.
    pub sqs: aws_sdk_sqs::Client,
    /// `cargo lambda watch`'s invoke API.
    pub invoker: Invoker,
    /// Pollers working one queue at once (Lambda starts with five).
    pub queue_pollers: usize,
    /// Where each function's position in each shard is kept; `None`: in memory only, so a
    /// poller started again starts from each trigger's starting position.
    pub checkpoints: Option<std::path::PathBuf>,
}

impl Poller {
    /// Delivers every trigger's events until one of them cannot go on (its source is gone).
    pub async fn run(&self, triggers: Vec<Trigger>) -> Result<(), LocalError> {
        let mut tasks = tokio::task::JoinSet::new();
        for trigger in triggers {
            let trigger = Arc::new(trigger);
            match &trigger.source {
                Source::Stream { arn } => {
                    for shard in self.shards(arn).await? {
                        let (poller, trigger) = (self.clone(), Arc::clone(&trigger));
                        tasks.spawn(async move { poller.follow_shard(&trigger, shard).await });
                    }
                }
                Source::Queue { .. } => {
                    for _ in 0..self.queue_pollers.max(1) {
                        let (poller, trigger) = (self.clone(), Arc::clone(&trigger));
                        tasks.spawn(async move { poller.drain_queue(&trigger).await });
                    }
                }
            }
        }
        while let Some(ended) = tasks.join_next().await {
            ended.map_err(|e| LocalError::call("a delivery task", e))??;
        }
        Ok(())
    }

    async fn shards(&self, arn: &str) -> Result<Vec<String>, LocalError> {
        let mut shards = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let described = self
                .streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(after.clone())
                .send()
                .await
                .map_err(|e| LocalError::call("DescribeStream", DisplayErrorContext(e)))?;
            let Some(description) = described.stream_description() else {
                return Ok(shards);
            };
            shards.extend(
                description
                    .shards()
                    .iter()
                    .filter_map(|s| s.shard_id().map(str::to_owned)),
            );
            after = description.last_evaluated_shard_id().map(str::to_owned);
            if after.is_none() {
                return Ok(shards);
            }
        }
    }

    /// Delivers one shard of a stream to the trigger's function, in order, until the shard
    /// closes.
    async fn follow_shard(&self, trigger: &Trigger, shard: String) -> Result<(), LocalError> {
        let Source::Stream { arn } = &trigger.source else {
            return Ok(());
        };
        let function = trigger.function.as_str();
        let (checkpoint, start, mut position) = self.starting_point(trigger, arn, &shard).await?;
        let mut iterator = self
            .iterator(arn, &shard, start.clone(), position.clone())
            .await?;
        let mut pending: VecDeque<Record> = VecDeque::new();
        let mut attempts = 0_u32;
        loop {
            if pending.is_empty() {
                let Some(current) = iterator.take() else {
                    tracing::info!(function, shard, "the shard is closed");
                    return Ok(());
                };
                let read = match self
                    .streams
                    .get_records()
                    .shard_iterator(&current)
                    .limit(i32::try_from(trigger.batch_size.min(1000)).unwrap_or(1000))
                    .send()
                    .await
                {
                    Ok(read) => read,
                    Err(error) if passing(&error) => {
                        tracing::warn!(function, error = %DisplayErrorContext(error), "reading the stream again");
                        iterator = Some(current);
                        tokio::time::sleep(backoff(1)).await;
                        continue;
                    }
                    Err(error) => {
                        return Err(LocalError::call("GetRecords", DisplayErrorContext(error)))
                    }
                };
                iterator = read.next_shard_iterator().map(str::to_owned);
                pending.extend(read.records().iter().cloned());
                if pending.is_empty() {
                    tokio::time::sleep(IDLE).await;
                    // moto undoes a cancelled TransactWriteItems by putting back a copy of the
                    // table, stream shard included: an iterator taken before then reads the
                    // old shard, empty for ever after. A fresh one after the last record done
                    // with reads the live shard (on AWS the two are the same).
                    if iterator.is_some() {
                        let (kind, at) = match &position {
                            Some(_) => (ShardIteratorType::AfterSequenceNumber, position.clone()),
                            None => (start.clone(), None),
                        };
                        iterator = self.iterator(arn, &shard, kind, at).await?;
                    }
                    continue;
                }
            }
            let batch: Vec<Record> = pending.iter().take(trigger.batch_size).cloned().collect();
            let Some(done) = self.deliver(trigger, arn, &batch).await else {
                continue;
            };
            pending.drain(..done);
            if let Some(last) = done.checked_sub(1) {
                position = sequence_of(&batch[last]).or(position);
                if let Some(file) = &checkpoint {
                    self.keep_position(file, &batch[last]);
                }
            }
            if done == batch.len() {
                attempts = 0;
                continue;
            }
            attempts += 1;
            if trigger.max_retries.is_some_and(|max| attempts > max) {
                let given_up = &batch[done..];
                self.record_failure(trigger, &shard, given_up, attempts)
                    .await;
                pending.drain(..given_up.len());
                if let Some(last) = given_up.last() {
                    position = sequence_of(last).or(position);
                    if let Some(file) = &checkpoint {
                        self.keep_position(file, last);
                    }
                }
                attempts = 0;
                continue;
            }
            tokio::time::sleep(backoff(attempts)).await;
        }
    }

    /// Where a shard is read from: its checkpoint file (when checkpoints are kept), how to
    /// start, and the last record done with.
    async fn starting_point(
        &self,
        trigger: &Trigger,
        arn: &str,
        shard: &str,
    ) -> Result<(Option<PathBuf>, ShardIteratorType, Option<String>), LocalError> {
        let function = trigger.function.as_str();
        let checkpoint = self
            .checkpoints
            .as_ref()
            .map(|dir| dir.join(checkpoint_name(function, arn, shard)));
        let after = checkpoint
            .as_ref()
            .and_then(|file| std::fs::read_to_string(file).ok())
            .map(|sequence| sequence.trim().to_owned())
            .filter(|sequence| !sequence.is_empty());
        // The last record done with (where to read on from), and how to start without one.
        let (start, position) = match (after, trigger.from_oldest) {
            (Some(after), _) => (ShardIteratorType::AfterSequenceNumber, Some(after)),
            (None, true) => (ShardIteratorType::TrimHorizon, None),
            // LATEST: the records the shard holds now are passed over once, here, rather than
            // with a LATEST iterator, which the idle refresh of `follow_shard` would take again and again,
            // skipping whatever arrived in between.
            (None, false) => match self.last_sequence(arn, shard).await? {
                Some(last) => (ShardIteratorType::AfterSequenceNumber, Some(last)),
                None => (ShardIteratorType::TrimHorizon, None),
            },
        };
        Ok((checkpoint, start, position))
    }

    /// Hands one batch to the trigger's function: how many of its records are done with (all,
    /// those before the first that failed, or none when the batch failed); `None` when the
    /// function never saw it, which uses up no retry.
    async fn deliver(&self, trigger: &Trigger, arn: &str, batch: &[Record]) -> Option<usize> {
        let function = trigger.function.as_str();
        let event = stream_event(batch, arn, &trigger.region);
        let done = match self.invoker.invoke(function, &event).await {
            Ok(Outcome::Answered { failed }) => {
                let sequences: Vec<&str> = batch
                    .iter()
                    .map(|r| {
                        r.dynamodb()
                            .and_then(|d| d.sequence_number())
                            .unwrap_or_default()
                    })
                    .collect();
                match resume_at(&sequences, &failed) {
                    None => batch.len(),
                    Some(at) => {
                        tracing::warn!(function, failed = ?failed, "records failed; retrying from the first");
                        at
                    }
                }
            }
            Ok(Outcome::Failed { error_type }) => {
                tracing::warn!(
                    function,
                    error_type,
                    records = batch.len(),
                    "the batch failed"
                );
                0
            }
            Err(error) => {
                // The function never saw the batch: no retry of its is used up.
                tracing::warn!(function, %error, "not delivered");
                tokio::time::sleep(backoff(1)).await;
                return None;
            }
        };
        Some(done)
    }

    /// The sequence number of the last record `shard` holds now, if it holds any.
    async fn last_sequence(&self, arn: &str, shard: &str) -> Result<Option<String>, LocalError> {
        let mut last = None;
        let mut iterator = self
            .iterator(arn, shard, ShardIteratorType::TrimHorizon, None)
            .await?;
        while let Some(current) = iterator {
            let read = self
                .streams
                .get_records()
                .shard_iterator(&current)
                .limit(1000)
                .send()
                .await
                .map_err(|e| LocalError::call("GetRecords", DisplayErrorContext(e)))?;
            let Some(record) = read.records().last() else {
                break;
            };
            last = sequence_of(record).or(last);
            iterator = read.next_shard_iterator().map(str::to_owned);
        }
        Ok(last)
    }

    /// An iterator on `shard` of the stream `arn` of this kind, at `after` when it is after a
    /// sequence number.
    async fn iterator(
        &self,
        arn: &str,
        shard: &str,
        kind: ShardIteratorType,
        after: Option<String>,
    ) -> Result<Option<String>, LocalError> {
        Ok(self
            .streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard)
            .shard_iterator_type(kind)
            .set_sequence_number(after)
            .send()
            .await
            .map_err(|e| LocalError::call("GetShardIterator", DisplayErrorContext(e)))?
            .shard_iterator()
            .map(str::to_owned))
    }

    /// Keeps `record`'s sequence number as the last one its function is done with, so a poller
    /// started again goes on after it rather than from the stream's start.
    fn keep_position(&self, file: &std::path::Path, record: &Record) {
        let Some(sequence) = record.dynamodb().and_then(|d| d.sequence_number()) else {
            return;
        };
        if let Err(error) = std::fs::write(file, sequence) {
            tracing::warn!(file = %file.display(), %error, "the stream position was not kept");
        }
    }

    /// Records a stream batch given up after its retries on the trigger's failure queue, as
    /// Lambda's on-failure destination gets it: where the records are, not the records.
    async fn record_failure(
        &self,
        trigger: &Trigger,
        shard: &str,
        records: &[Record],
        attempts: u32,
    ) {
        let Source::Stream { arn } = &trigger.source else {
            return;
        };
        let sequence = |record: Option<&Record>| {
            record
                .and_then(|r| r.dynamodb())
                .and_then(|d| d.sequence_number())
                .unwrap_or_default()
                .to_owned()
        };
        let failure = serde_json::json!({
            "requestContext": {
                "condition": "RetryAttemptsExhausted",
                "functionName": trigger.function,
                "approximateInvokeCount": attempts,
            },
            "version": "1.0",
            "timestamp": chrono::Utc::now().to_rfc3339(),
            "DDBStreamBatchInfo": {
                "shardId": shard,
                "startSequenceNumber": sequence(records.first()),
                "endSequenceNumber": sequence(records.last()),
                "batchSize": records.len(),
                "streamArn": arn,
            }
        });
        tracing::error!(
            function = trigger.function,
            shard,
            records = records.len(),
            "records given up after their retries"
        );
        let Some(queue) = &trigger.on_failure else {
            return;
        };
        if let Err(error) = self
            .sqs
            .send_message()
            .queue_url(queue)
            .message_body(failure.to_string())
            .send()
            .await
        {
            tracing::error!(function = trigger.function, error = %aws_sdk_sqs::error::DisplayErrorContext(error), "the failure was not recorded");
        }
    }

    /// Long-polls the trigger's queue and hands each batch to its function, for ever.
    async fn drain_queue(&self, trigger: &Trigger) -> Result<(), LocalError> {
        let Source::Queue { arn, url } = &trigger.source else {
            return Ok(());
        };
        let function = trigger.function.as_str();
        loop {
            let received = match self
                .sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(i32::try_from(trigger.batch_size.min(10)).unwrap_or(10))
                .wait_time_seconds(LONG_POLL)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await
            {
                Ok(received) => received,
                Err(error) if passing(&error) => {
                    tracing::warn!(function, error = %aws_sdk_sqs::error::DisplayErrorContext(error), "receiving again");
                    tokio::time::sleep(backoff(1)).await;
                    continue;
                }
                Err(error) => {
                    return Err(LocalError::call(
                        "ReceiveMessage",
                        aws_sdk_sqs::error::DisplayErrorContext(error),
                    ))
                }
            };
            let messages = received.messages();
            if messages.is_empty() {
                continue;
            }
            let event = queue_event(messages, arn, &trigger.region);
            let ids: Vec<&str> = messages
                .iter()
                .map(|m| m.message_id().unwrap_or_default())
                .collect();
            let done = match self.invoker.invoke(function, &event).await {
                Ok(Outcome::Answered { failed }) => {
                    if !failed.is_empty() {
                        tracing::warn!(function, failed = ?failed, "messages failed; they come back after their visibility timeout");
                    }
                    settled(&ids, &failed)
                }
                Ok(Outcome::Failed { error_type }) => {
                    tracing::warn!(
                        function,
                        error_type,
                        messages = ids.len(),
                        "the batch failed; it comes back after its visibility timeout"
                    );
                    Vec::new()
                }
                Err(error) => {
                    // The function never saw them: they are shown again at once rather than
                    // after a visibility timeout that counts a delivery that did not happen.
                    tracing::warn!(function, %error, "not delivered");
                    for message in messages {
                        if let Some(receipt) = message.receipt_handle() {
                            let _ = self
                                .sqs
                                .change_message_visibility()
                                .queue_url(url)
                                .receipt_handle(receipt)
                                .visibility_timeout(0)
                                .send()
                                .await;
                        }
                    }
                    tokio::time::sleep(backoff(1)).await;
                    continue;
                }
            };
            let entries: Vec<DeleteMessageBatchRequestEntry> = messages
                .iter()
                .filter(|m| m.message_id().is_some_and(|id| done.contains(&id)))
                .enumerate()
                .filter_map(|(at, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(at.to_string())
                        .set_receipt_handle(m.receipt_handle().map(str::to_owned))
                        .build()
                        .ok()
                })
                .collect();
            if entries.is_empty() {
                continue;
            }
            if let Err(error) = self
                .sqs
                .delete_message_batch()
                .queue_url(url)
                .set_entries(Some(entries))
                .send()
                .await
            {
                if !passing(&error) {
                    return Err(LocalError::call(
                        "DeleteMessageBatch",
                        aws_sdk_sqs::error::DisplayErrorContext(error),
                    ));
                }
                // Delivery is at least once: the handled messages come back and are handled
                // again, as on Lambda when its delete fails.
                tracing::warn!(function, error = %aws_sdk_sqs::error::DisplayErrorContext(error), "handled messages not deleted");
            }
        }
    }
}

/// The file of `function`'s position in `shard` of the stream `stream_arn`. The ARN names the
/// stream's creation time, so a table made again (a new emulator) never finds an old position.
pub fn checkpoint_name(function: &str, stream_arn: &str, shard: &str) -> String {
    format!("{function}@{stream_arn}@{shard}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '@' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Whether a failed call may pass if made again: the emulator did not answer, or answered with
/// a server error or a throttle, rather than refusing the request (a source that is gone stops
/// its delivery instead).
fn passing<E>(error: &SdkError<E, HttpResponse>) -> bool {
    error.raw_response().is_none_or(|answer| {
        let status = answer.status().as_u16();
        status >= 500 || status == 429
    })
}

/// The Lambda invoke API of `cargo lambda watch`.
#[derive(Clone)]
pub struct Invoker {
    client: reqwest::Client,
    endpoint: String,
    /// Invocations so far, by function: what Lambda would bill for.
    invocations: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
    /// Where they are written after each invocation, for the cost figures.
    counts_file: Option<std::path::PathBuf>,
}

impl Invoker {
    /// The invoke API at `endpoint` (`http://127.0.0.1:PORT`); an invocation may take `within`,
    /// the first of a function the longest, since `cargo lambda watch` builds it then.
    pub fn new(endpoint: &str, within: Duration) -> Result<Self, LocalError> {
        let client = reqwest::Client::builder()
            .timeout(within)
            .build()
            .map_err(|e| LocalError::call("an HTTP client", e))?;
        Ok(Self {
            client,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            invocations: std::sync::Arc::default(),
            counts_file: None,
        })
    }

    /// Also writes the invocations so far, by function, as a JSON object to `file` after each
    /// one (replacing it whole, so a reader never sees half of it).
    pub fn counting_to(mut self, file: std::path::PathBuf) -> Self {
        self.counts_file = Some(file);
        self
    }

    fn count(&self, function: &str) {
        let counts = {
            let mut invocations = self
                .invocations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *invocations.entry(function.to_owned()).or_default() += 1;
            serde_json::to_vec(&*invocations)
        };
        let (Some(file), Ok(counts)) = (&self.counts_file, counts) else {
            return;
        };
        let partial = file.with_extension("partial");
        if let Err(error) =
            std::fs::write(&partial, counts).and_then(|()| std::fs::rename(&partial, file))
        {
            tracing::warn!(file = %file.display(), %error, "could not write the invocation counts");
        }
    }

    /// Invokes `function` with `event` and reads its answer.
    pub async fn invoke(
        &self,
        function: &str,
        event: &impl Serialize,
    ) -> Result<Outcome, LocalError> {
        let url = format!(
            "{}/2015-03-31/functions/{function}/invocations",
            self.endpoint
        );
        self.count(function);
        let answer = self
            .client
            .post(&url)
            .json(event)
            .send()
            .await
            .map_err(|e| LocalError::call("Invoke", e))?;
        let status = answer.status().as_u16();
        let function_error = answer.headers().contains_key("x-amz-function-error");
        let body = answer
            .bytes()
            .await
            .map_err(|e| LocalError::call("Invoke", e))?;
        Ok(outcome(status, function_error, &body))
    }
}

/// A stream record's sequence number.
fn sequence_of(record: &Record) -> Option<String> {
    record
        .dynamodb()
        .and_then(|d| d.sequence_number())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_kept_per_function_stream_and_shard_in_a_plain_file_name() {
        let arn = "arn:aws:dynamodb:eu-west-1:1:table/s-events/stream/2026-11-23T13:17:51.793797";
        let name = checkpoint_name("projector", arn, "shardId-0001");
        assert!(
            name.starts_with("projector@arn_aws_dynamodb_eu-west-1"),
            "{name}"
        );
        assert!(!name.contains('/') && !name.contains(':'), "{name}");
        assert_ne!(name, checkpoint_name("orchestrator", arn, "shardId-0001"));
        assert_ne!(
            name,
            checkpoint_name("projector", &arn.replace("13:17", "13:18"), "shardId-0001"),
            "a table made again has a stream of another name"
        );
    }
}
