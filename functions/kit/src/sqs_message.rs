//! An SQS message as a Lambda trigger hands it over, read back into the job it carries.
//!
//! Every trigger on a queue of jobs (the runner's on the jobs queue, the timer's on the timers
//! queue, the dead letters' on the jobs' dead-letter queue) reads its messages here, so they
//! cannot disagree on the shape ([`Job::to_message`]) nor on what makes a message unreadable.

use aws_lambda_events::event::sqs::SqsMessage;

use crate::queue::Job;

/// A message that holds no job a consumer can act on: handling it again will not help, so it is
/// reported failed until SQS moves it to the queue's dead-letter queue.
#[derive(Debug, thiserror::Error)]
#[error("message {message_id} is not {expected}: {reason}")]
pub struct Unreadable {
    /// The message's id.
    pub message_id: String,
    /// What the consumer takes (for example "a runner's job").
    pub expected: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

/// The message's id, empty when Lambda gave none.
pub fn message_id(message: &SqsMessage) -> String {
    message.message_id.clone().unwrap_or_default()
}

/// The message's job and the kind of job its body is; `expected` names what the consumer takes,
/// for the error.
pub fn job_of(
    message: &SqsMessage,
    expected: &'static str,
) -> Result<(Job, overture_events::job::Job), Unreadable> {
    let unreadable = |reason: String| Unreadable {
        message_id: message_id(message),
        expected,
        reason,
    };
    let job = Job::from_message(message.body.as_deref().unwrap_or(""))
        .map_err(|e| unreadable(e.to_string()))?;
    let kind = overture_events::job::Job::from_body(job.body.clone())
        .map_err(|e| unreadable(e.to_string()))?;
    Ok((job, kind))
}

/// How many times SQS has handed the message out, this time included (its system attribute
/// `ApproximateReceiveCount`; approximate, as SQS says).
pub fn receive_count(message: &SqsMessage) -> Option<u32> {
    message
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|count| count.parse().ok())
}
