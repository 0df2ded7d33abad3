//! The stack's triggers (Lambda event source mappings), read back from the emulator's Lambda:
//! what the poller delivers, to which function, in batches of what size.

use aws_sdk_lambda::error::DisplayErrorContext;

use crate::LocalError;

/// Where a trigger reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A DynamoDB table's stream, by its ARN.
    Stream {
        /// The stream's ARN.
        arn: String,
    },
    /// An SQS queue, by its ARN and its URL as SQS gives it.
    Queue {
        /// The queue's ARN.
        arn: String,
        /// The queue's URL on the emulator.
        url: String,
    },
}

/// One event source mapping of the stack.
#[derive(Debug, Clone)]
pub struct Trigger {
    /// The function, by its binary's name (`cargo lambda watch` serves it under that name).
    pub function: String,
    /// Where its events come from.
    pub source: Source,
    /// The region of the source, as Lambda names it in each record.
    pub region: String,
    /// At most this many records or messages in one invocation.
    pub batch_size: usize,
    /// Stream batches retried this many times before they are given up; `None`: until they
    /// succeed.
    pub max_retries: Option<u32>,
    /// Where a given-up stream batch is recorded (a queue's URL), if anywhere.
    pub on_failure: Option<String>,
    /// Whether the stream starts from its oldest record (TRIM_HORIZON) rather than the newest.
    pub from_oldest: bool,
}

/// The kind of an event source, from its ARN.
#[derive(Debug, PartialEq, Eq)]
pub enum SourceKind<'a> {
    /// A DynamoDB stream.
    Stream,
    /// An SQS queue, by name.
    Queue(&'a str),
}

/// What an ARN names (`arn:aws:sqs:REGION:ACCOUNT:NAME`,
/// `arn:aws:dynamodb:REGION:ACCOUNT:table/NAME/stream/LABEL`), and its region.
pub fn source_kind(arn: &str) -> Option<(SourceKind<'_>, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (_, _, service, region, _, resource) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    match service {
        "sqs" => Some((SourceKind::Queue(resource), region)),
        "dynamodb" if resource.contains("/stream/") => Some((SourceKind::Stream, region)),
        _ => None,
    }
}

/// The name of the function `function_arn` (`...:function:STACK-NAME`, maybe with a version)
/// within the stack `stack`, or `None` for a function of another stack.
pub fn function_in_stack<'a>(function_arn: &'a str, stack: &str) -> Option<&'a str> {
    let (_, name) = function_arn.split_once(":function:")?;
    let name = name.split(':').next()?;
    name.strip_prefix(stack)?.strip_prefix('-')
}

/// The enabled triggers of the stack `stack`, for the functions in `only` when it is given.
pub async fn read(
    lambda: &aws_sdk_lambda::Client,
    sqs: &aws_sdk_sqs::Client,
    stack: &str,
    only: Option<&[String]>,
) -> Result<Vec<Trigger>, LocalError> {
    let mut triggers = Vec::new();
    let mut marker = None;
    loop {
        let page = lambda
            .list_event_source_mappings()
            .set_marker(marker)
            .send()
            .await
            .map_err(|e| LocalError::call("ListEventSourceMappings", DisplayErrorContext(e)))?;
        for mapping in page.event_source_mappings() {
            let Some(function) = mapping
                .function_arn()
                .and_then(|arn| function_in_stack(arn, stack))
            else {
                continue;
            };
            if only.is_some_and(|only| !only.iter().any(|f| f == function))
                || mapping
                    .state()
                    .is_some_and(|s| s.eq_ignore_ascii_case("disabled"))
            {
                continue;
            }
            let arn = mapping.event_source_arn().unwrap_or_default();
            let Some((kind, region)) = source_kind(arn) else {
                tracing::warn!(
                    function,
                    arn,
                    "a trigger of a kind the poller does not deliver"
                );
                continue;
            };
            let source = match kind {
                SourceKind::Stream => Source::Stream {
                    arn: arn.to_owned(),
                },
                SourceKind::Queue(name) => Source::Queue {
                    arn: arn.to_owned(),
                    url: queue_url(sqs, name).await?,
                },
            };
            let on_failure = match mapping
                .destination_config()
                .and_then(|d| d.on_failure())
                .and_then(|f| f.destination())
                .and_then(source_kind)
            {
                Some((SourceKind::Queue(name), _)) => Some(queue_url(sqs, name).await?),
                _ => None,
            };
            let default_batch = if matches!(source, Source::Queue { .. }) {
                10
            } else {
                100
            };
            triggers.push(Trigger {
                function: function.to_owned(),
                region: region.to_owned(),
                batch_size: mapping
                    .batch_size()
                    .and_then(|b| usize::try_from(b).ok())
                    .filter(|b| *b > 0)
                    .unwrap_or(default_batch),
                // -1 (or none given) is Lambda's "until the record expires".
                max_retries: mapping
                    .maximum_retry_attempts()
                    .and_then(|r| u32::try_from(r).ok()),
                on_failure,
                from_oldest: mapping
                    .starting_position()
                    .is_none_or(|p| p.as_str() != "LATEST"),
                source,
            });
        }
        marker = page.next_marker().map(str::to_owned);
        if marker.is_none() {
            return Ok(triggers);
        }
    }
}

async fn queue_url(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<String, LocalError> {
    overture_aws::stack::queue_url(sqs, name)
        .await
        .map_err(|e| LocalError::call("GetQueueUrl", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_a_stream_or_a_queue_by_its_arn() {
        assert_eq!(
            source_kind("arn:aws:dynamodb:eu-west-1:123456789012:table/s-events/stream/2026-11-23T12:00:00.000"),
            Some((SourceKind::Stream, "eu-west-1"))
        );
        assert_eq!(
            source_kind("arn:aws:sqs:eu-west-1:123456789012:s-jobs"),
            Some((SourceKind::Queue("s-jobs"), "eu-west-1"))
        );
        assert_eq!(source_kind("arn:aws:kinesis:eu-west-1:1:stream/x"), None);
        assert_eq!(source_kind("not an arn"), None);
    }

    #[test]
    fn a_function_is_named_without_its_stacks_prefix() {
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function:overture-local-orchestrator";
        assert_eq!(
            function_in_stack(arn, "overture-local"),
            Some("orchestrator")
        );
        assert_eq!(
            function_in_stack(&format!("{arn}:$LATEST"), "overture-local"),
            Some("orchestrator")
        );
        assert_eq!(function_in_stack(arn, "other"), None);
        assert_eq!(function_in_stack(arn, "overture-lo"), None);
    }
}
