//! How a trigger's batch failed, as Lambda is told.
//!
//! Each item that failed is given back on its own (a partial batch failure), so the rest of the
//! batch is done with. But a batch whose every item failed with an error fails its invocation
//! instead ([`BatchFailed`]): then it counts in the function's error metrics, which partial
//! failures never touch, so an outage of DynamoDB or KMS shows as errors, not as a quiet loop.
//! The invocation's `Diagnostic` carries a stable error type, [`error_type`]: "Retryable" when
//! handling the batch again may help, "NonRetryable" when it cannot. For the batch itself the
//! two answers mean the same: SQS keeps every message, a stream delivers the batch again.
//!
//! An item that is only put off (a job due later, kept by SQS on purpose) is no error, and a
//! batch of such items is answered with its partial failures as before.

/// The stable error type of a failure: "Retryable" when handling it again may help.
pub fn error_type(retryable: bool) -> &'static str {
    if retryable {
        "Retryable"
    } else {
        "NonRetryable"
    }
}

/// Every item of a batch failed with an error: the invocation fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("every one of the batch's {failed} items failed; the first: {first}")]
pub struct BatchFailed {
    /// How many items failed (all of them).
    pub failed: usize,
    /// Whether handling the batch again may help: true when any item's failure may pass.
    pub retryable: bool,
    /// The first item's error, as it displays (errors never carry a secret).
    pub first: String,
}

impl BatchFailed {
    /// The stable error type Lambda reports: "Retryable" or "NonRetryable".
    pub fn error_type(&self) -> &'static str {
        error_type(self.retryable)
    }
}

/// Counts a batch's items as they are handled, to tell whether the whole batch failed.
#[derive(Debug, Default)]
pub struct BatchTally {
    items: usize,
    failed: usize,
    retryable: bool,
    first: Option<String>,
}

impl BatchTally {
    /// A tally of a batch of `items` items.
    pub fn new(items: usize) -> Self {
        Self {
            items,
            ..Self::default()
        }
    }

    /// One item failed with `error`.
    pub fn failed(&mut self, retryable: bool, error: &dyn std::fmt::Display) {
        self.failed += 1;
        self.retryable |= retryable;
        self.first.get_or_insert_with(|| error.to_string());
    }

    /// The batch's answer: `response` (its partial failures), unless every item failed with an
    /// error.
    pub fn answer<R>(self, response: R) -> Result<R, BatchFailed> {
        match self.first {
            Some(first) if self.failed == self.items => Err(BatchFailed {
                failed: self.failed,
                retryable: self.retryable,
                first,
            }),
            _ => Ok(response),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_with_one_item_done_is_answered_with_its_partial_failures() {
        let mut tally = BatchTally::new(3);
        tally.failed(true, &"DynamoDB is unavailable");
        tally.failed(false, &"not a job");
        assert_eq!(tally.answer("partial"), Ok("partial"));
    }

    #[test]
    fn a_batch_whose_every_item_failed_fails_retryable_if_any_may_pass() {
        let mut tally = BatchTally::new(2);
        tally.failed(false, &"not a job");
        tally.failed(true, &"DynamoDB is unavailable");
        let failed = tally.answer(()).expect_err("failed whole");
        assert_eq!(failed.error_type(), "Retryable");
        assert_eq!(
            failed.to_string(),
            "every one of the batch's 2 items failed; the first: not a job"
        );
    }

    #[test]
    fn a_batch_of_items_that_can_never_be_handled_fails_non_retryable() {
        let mut tally = BatchTally::new(1);
        tally.failed(false, &"not a job");
        assert_eq!(
            tally.answer(()).expect_err("failed whole").error_type(),
            "NonRetryable"
        );
    }

    #[test]
    fn an_empty_batch_and_a_batch_only_put_off_are_not_failures() {
        assert_eq!(BatchTally::new(0).answer(()), Ok(()));
        // Items put off are given back but are not counted as failed.
        assert_eq!(BatchTally::new(2).answer(()), Ok(()));
    }
}
