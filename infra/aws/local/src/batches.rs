//! The pure half of the poller: the events a function is handed, built from what the stream and
//! the queue return, exactly as Lambda shapes them; what a function's answer means for the
//! batch; and what is delivered again after a partial failure.

use std::collections::HashMap;
use std::time::Duration;

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::dynamodb::{self, EventRecord, StreamRecord, StreamViewType};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_dynamodbstreams::types::Record;
use aws_sdk_sqs::types::Message;
use serde_json::Value;

/// The DynamoDB stream event Lambda hands a function for `records` read from the stream
/// `stream_arn` in `region`.
pub fn stream_event(records: &[Record], stream_arn: &str, region: &str) -> dynamodb::Event {
    let mut event = dynamodb::Event::default();
    event.records = records
        .iter()
        .map(|record| stream_record(record, stream_arn, region))
        .collect();
    event
}

fn stream_record(record: &Record, stream_arn: &str, region: &str) -> EventRecord {
    let mut change = StreamRecord::default();
    if let Some(from) = record.dynamodb() {
        if let Some(at) = from.approximate_creation_date_time() {
            change.approximate_creation_date_time =
                chrono::DateTime::from_timestamp(at.secs(), at.subsec_nanos()).unwrap_or_default();
        }
        change.keys = from.keys().cloned().unwrap_or_default().into();
        change.new_image = from.new_image().cloned().unwrap_or_default().into();
        change.old_image = from.old_image().cloned().unwrap_or_default().into();
        change.sequence_number = from.sequence_number().map(str::to_owned);
        change.size_bytes = from.size_bytes().unwrap_or_default();
        change.stream_view_type = from.stream_view_type().map(|view| match view.as_str() {
            "NEW_IMAGE" => StreamViewType::NewImage,
            "OLD_IMAGE" => StreamViewType::OldImage,
            "NEW_AND_OLD_IMAGES" => StreamViewType::NewAndOldImages,
            _ => StreamViewType::KeysOnly,
        });
    }
    let mut event = EventRecord::default();
    // The emulator names one fixed region in its records; Lambda names the stream's.
    event.aws_region = region.to_owned();
    event.change = change;
    event.event_id = record.event_id().unwrap_or_default().to_owned();
    event.event_name = record
        .event_name()
        .map(|name| name.as_str().to_owned())
        .unwrap_or_default();
    event.event_source = Some("aws:dynamodb".to_owned());
    event.event_version = record.event_version().map(str::to_owned);
    event.event_source_arn = Some(stream_arn.to_owned());
    event
}

/// The SQS event Lambda hands a function for `messages` received from the queue `queue_arn`
/// in `region`: their receipt handles, system attributes (`ApproximateReceiveCount` among them)
/// and message attributes as SQS gave them.
pub fn queue_event(messages: &[Message], queue_arn: &str, region: &str) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages
        .iter()
        .map(|message| {
            let mut record = SqsMessage::default();
            record.message_id = message.message_id().map(str::to_owned);
            record.receipt_handle = message.receipt_handle().map(str::to_owned);
            record.body = message.body().map(str::to_owned);
            record.md5_of_body = message.md5_of_body().map(str::to_owned);
            record.md5_of_message_attributes =
                message.md5_of_message_attributes().map(str::to_owned);
            record.attributes = message
                .attributes()
                .map(|attributes| {
                    attributes
                        .iter()
                        .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
                        .collect()
                })
                .unwrap_or_default();
            record.message_attributes = message
                .message_attributes()
                .map(|attributes| {
                    attributes
                        .iter()
                        .map(|(name, value)| (name.clone(), message_attribute(value)))
                        .collect::<HashMap<_, _>>()
                })
                .unwrap_or_default();
            record.event_source_arn = Some(queue_arn.to_owned());
            record.event_source = Some("aws:sqs".to_owned());
            record.aws_region = Some(region.to_owned());
            record
        })
        .collect();
    event
}

fn message_attribute(value: &aws_sdk_sqs::types::MessageAttributeValue) -> SqsMessageAttribute {
    let mut attribute = SqsMessageAttribute::default();
    attribute.data_type = Some(value.data_type().to_owned());
    attribute.string_value = value.string_value().map(str::to_owned);
    attribute.binary_value = value.binary_value().map(|blob| {
        let mut data = Base64Data::default();
        data.extend_from_slice(blob.as_ref());
        data
    });
    attribute
}

/// What a function made of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It answered; the items it lists (sequence numbers or message ids) failed, the rest are
    /// done.
    Answered {
        /// The `itemIdentifier`s of its `batchItemFailures`.
        failed: Vec<String>,
    },
    /// The invocation failed: the whole batch is to be delivered again.
    Failed {
        /// The function's error type, or what was wrong with its answer.
        error_type: String,
    },
}

/// Reads an invocation's answer: an HTTP 500 with `errorType` (`cargo lambda watch`) or a 200
/// with `X-Amz-Function-Error` (Lambda) is a failure of the whole batch, as is an answer whose
/// `batchItemFailures` names no item; an empty or null answer, or one without failures, is a
/// batch done.
pub fn outcome(status: u16, function_error: bool, body: &[u8]) -> Outcome {
    let answer: Option<Value> = serde_json::from_slice(body).ok();
    let error_type = |fallback: &str| {
        answer
            .as_ref()
            .and_then(|a| a.get("errorType"))
            .and_then(Value::as_str)
            .unwrap_or(fallback)
            .to_owned()
    };
    if function_error || !(200..300).contains(&status) {
        return Outcome::Failed {
            error_type: error_type(&format!("HTTP {status}")),
        };
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Outcome::Answered { failed: Vec::new() };
    }
    let Some(answer) = answer else {
        return Outcome::Failed {
            error_type: "an answer that is not JSON".into(),
        };
    };
    let failures = match answer.get("batchItemFailures") {
        None | Some(Value::Null) => return Outcome::Answered { failed: Vec::new() },
        Some(Value::Array(failures)) => failures,
        Some(_) => {
            return Outcome::Failed {
                error_type: "batchItemFailures that is not a list".into(),
            }
        }
    };
    let mut failed = Vec::with_capacity(failures.len());
    for failure in failures {
        match failure.get("itemIdentifier").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => failed.push(id.to_owned()),
            // Lambda fails the whole batch on an item failure without an identifier.
            _ => {
                return Outcome::Failed {
                    error_type: "a batch item failure without an itemIdentifier".into(),
                }
            }
        }
    }
    Outcome::Answered { failed }
}

/// Where a stream batch is taken up again after its function reported `failed` among the
/// records with `sequence_numbers` (in stream order): at the failed record first in the
/// stream, as Lambda retries from there; `None` when none failed. An identifier that is not one
/// of the batch's fails the whole batch (position 0), as on Lambda.
pub fn resume_at(sequence_numbers: &[&str], failed: &[String]) -> Option<usize> {
    if failed.is_empty() {
        return None;
    }
    failed
        .iter()
        .map(|id| sequence_numbers.iter().position(|s| s == id))
        .try_fold(usize::MAX, |first, at| at.map(|at| first.min(at)))
        .or(Some(0))
}

/// The messages of an SQS batch to delete after their function reported `failed`: every one it
/// did not list. An identifier that is not one of the batch's fails the whole batch (none is
/// deleted), as on Lambda.
pub fn settled<'a>(message_ids: &[&'a str], failed: &[String]) -> Vec<&'a str> {
    if failed.iter().any(|id| !message_ids.contains(&id.as_str())) {
        return Vec::new();
    }
    message_ids
        .iter()
        .filter(|id| !failed.iter().any(|f| f == *id))
        .copied()
        .collect()
}

/// The wait before a failed batch is delivered again: one second, doubling with each attempt,
/// at most half a minute.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1_u64 << attempt.saturating_sub(1).min(5)).min(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodbstreams::types::{
        AttributeValue, OperationType, StreamRecord as Change, StreamViewType as View,
    };
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    use serde_json::json;

    const STREAM: &str = "arn:aws:dynamodb:eu-west-1:123456789012:table/t-events/stream/2026";

    fn inserted(revision: &str, sequence: &str) -> Record {
        let key = HashMap::from([
            (
                "stream".to_owned(),
                AttributeValue::S("deployment-1".into()),
            ),
            ("revision".to_owned(), AttributeValue::N(revision.into())),
        ]);
        let mut image = key.clone();
        image.insert(
            "type".into(),
            AttributeValue::S("DeploymentRequested".into()),
        );
        Record::builder()
            .event_id("e1")
            .event_name(OperationType::Insert)
            .event_version("1.0")
            .event_source("aws:dynamodb")
            .aws_region("us-east-1")
            .dynamodb(
                Change::builder()
                    .approximate_creation_date_time(
                        aws_sdk_dynamodbstreams::primitives::DateTime::from_secs(1_800_000_000),
                    )
                    .set_keys(Some(key))
                    .set_new_image(Some(image))
                    .sequence_number(sequence)
                    .size_bytes(120)
                    .stream_view_type(View::NewImage)
                    .build(),
            )
            .build()
    }

    #[test]
    fn a_stream_record_is_handed_over_as_lambda_delivers_it() {
        let event = stream_event(&[inserted("0", "100")], STREAM, "eu-west-1");
        let json = serde_json::to_value(&event).expect("serialisable");
        let record = &json["Records"][0];
        assert_eq!(record["eventName"], "INSERT");
        assert_eq!(record["eventSource"], "aws:dynamodb");
        assert_eq!(record["eventSourceARN"], STREAM);
        assert_eq!(record["awsRegion"], "eu-west-1", "the stream's region");
        assert_eq!(record["dynamodb"]["SequenceNumber"], "100");
        assert_eq!(record["dynamodb"]["StreamViewType"], "NEW_IMAGE");
        assert_eq!(record["dynamodb"]["Keys"]["revision"], json!({ "N": "0" }));
        assert_eq!(
            record["dynamodb"]["NewImage"]["type"],
            json!({ "S": "DeploymentRequested" })
        );
        // And the functions read it back as the type they take.
        let read: dynamodb::Event = serde_json::from_value(json).expect("a stream event");
        assert_eq!(
            read.records[0].change.sequence_number.as_deref(),
            Some("100")
        );
    }

    #[test]
    fn a_queue_message_is_handed_over_with_its_receipt_and_receive_count() {
        let message = Message::builder()
            .message_id("m1")
            .receipt_handle("receipt-1")
            .body("{\"job\":1}")
            .md5_of_body("md5")
            .attributes(MessageSystemAttributeName::ApproximateReceiveCount, "3")
            .build();
        let arn = "arn:aws:sqs:eu-west-1:123456789012:t-jobs";
        let json =
            serde_json::to_value(queue_event(&[message], arn, "eu-west-1")).expect("serialisable");
        let record = &json["Records"][0];
        assert_eq!(record["messageId"], "m1");
        assert_eq!(record["receiptHandle"], "receipt-1");
        assert_eq!(record["body"], "{\"job\":1}");
        assert_eq!(record["attributes"]["ApproximateReceiveCount"], "3");
        assert_eq!(record["eventSource"], "aws:sqs");
        assert_eq!(record["eventSourceARN"], arn);
    }

    #[test]
    fn an_answer_is_a_batch_done_partly_failed_or_failed() {
        assert_eq!(
            outcome(200, false, br#"{"batchItemFailures":[]}"#),
            Outcome::Answered { failed: vec![] }
        );
        assert_eq!(
            outcome(200, false, b""),
            Outcome::Answered { failed: vec![] }
        );
        assert_eq!(
            outcome(200, false, b"null"),
            Outcome::Answered { failed: vec![] }
        );
        assert_eq!(
            outcome(
                200,
                false,
                br#"{"batchItemFailures":[{"itemIdentifier":"7"}]}"#
            ),
            Outcome::Answered {
                failed: vec!["7".into()]
            }
        );
        // cargo lambda watch reports a handler's error as a 500, Lambda as a 200 with a header.
        let error = br#"{"errorType":"Retryable","errorMessage":"throttled"}"#;
        for (status, header) in [(500, false), (200, true)] {
            assert_eq!(
                outcome(status, header, error),
                Outcome::Failed {
                    error_type: "Retryable".into()
                }
            );
        }
        assert!(matches!(
            outcome(
                200,
                false,
                br#"{"batchItemFailures":[{"itemIdentifier":""}]}"#
            ),
            Outcome::Failed { .. }
        ));
    }

    #[test]
    fn a_stream_batch_resumes_at_its_first_failed_record() {
        let batch = ["100", "101", "102", "103"];
        assert_eq!(resume_at(&batch, &[]), None);
        assert_eq!(resume_at(&batch, &["103".into(), "101".into()]), Some(1));
        assert_eq!(
            resume_at(&batch, &["999".into()]),
            Some(0),
            "unknown: all again"
        );
    }

    #[test]
    fn the_messages_not_reported_failed_are_deleted() {
        let batch = ["a", "b", "c"];
        assert_eq!(settled(&batch, &[]), ["a", "b", "c"]);
        assert_eq!(settled(&batch, &["b".into()]), ["a", "c"]);
        assert!(
            settled(&batch, &["z".into()]).is_empty(),
            "unknown: none deleted"
        );
    }

    #[test]
    fn retries_wait_longer_each_time_up_to_half_a_minute() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(50), Duration::from_secs(30));
    }
}
