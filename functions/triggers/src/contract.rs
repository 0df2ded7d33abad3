//! The contract every [`TriggerLedger`] adapter keeps, as one suite its tests call with an empty
//! ledger: the SQLite ledger of the embedded engine, the DynamoDB ledger of the serverless form,
//! and the in-memory ledger of this crate's own tests.

use futures_util::future::join_all;

use crate::{Claim, TriggerDecision, TriggerLedger, Verdict};

fn claim<'a>(event_id: &'a str, trigger: &'a str) -> Claim<'a> {
    Claim {
        source: "artifacts",
        event_id,
        trigger,
    }
}

fn decision(at: &str, verdict: Verdict, deployment: Option<&str>) -> TriggerDecision {
    TriggerDecision {
        at: at.into(),
        source: "artifacts".into(),
        event_id: format!("event-{at}"),
        trigger: "on-release".into(),
        decision: verdict,
        deployment: deployment.map(str::to_owned),
        reason: format!("because of {at}"),
    }
}

/// Runs every part of the contract on `ledger`, which must be empty.
pub async fn ledger_keeps_its_contract(ledger: &dyn TriggerLedger) {
    decisions_are_listed_oldest_first_as_recorded(ledger).await;
    a_pair_is_claimed_once_and_a_claim_records_nothing(ledger).await;
    one_of_many_concurrent_claims_wins(ledger).await;
    a_released_claim_can_be_claimed_again(ledger).await;
}

async fn decisions_are_listed_oldest_first_as_recorded(ledger: &dyn TriggerLedger) {
    let recorded = [
        decision("2026-01-01T00:00:01.000Z", Verdict::NotMatched, None),
        decision(
            "2026-01-01T00:00:02.000Z",
            Verdict::Deployed,
            Some("0190b6c6-8d6e-7000-8000-000000000001"),
        ),
        decision("2026-01-01T00:00:03.000Z", Verdict::Refused, None),
    ];
    for one in &recorded {
        ledger.record(one).await.expect("recorded");
    }
    assert_eq!(ledger.decisions().await.expect("listed"), recorded);
}

async fn a_pair_is_claimed_once_and_a_claim_records_nothing(ledger: &dyn TriggerLedger) {
    let before = ledger.decisions().await.expect("listed");
    let at = "2026-01-01T00:01:00.000Z";
    assert!(ledger.claim(claim("e1", "t"), at).await.expect("claim"));
    assert!(!ledger.claim(claim("e1", "t"), at).await.expect("claim"));
    assert!(!ledger.claim(claim("e1", "t"), at).await.expect("claim"));
    // Another trigger, or another event, is another pair.
    assert!(ledger.claim(claim("e1", "other"), at).await.expect("claim"));
    assert!(ledger.claim(claim("e2", "t"), at).await.expect("claim"));
    // Whether a later delivery is a duplicate is the dispatcher's to decide and record.
    assert_eq!(ledger.decisions().await.expect("listed"), before);
}

async fn one_of_many_concurrent_claims_wins(ledger: &dyn TriggerLedger) {
    let at = "2026-01-01T00:02:00.000Z";
    let won: Vec<bool> = join_all((0..20).map(|_| ledger.claim(claim("raced", "t"), at)))
        .await
        .into_iter()
        .map(|won| won.expect("claim"))
        .collect();
    assert_eq!(won.iter().filter(|won| **won).count(), 1, "{won:?}");
}

async fn a_released_claim_can_be_claimed_again(ledger: &dyn TriggerLedger) {
    let at = "2026-01-01T00:03:00.000Z";
    assert!(ledger.claim(claim("e3", "t"), at).await.expect("claim"));
    ledger.release(claim("e3", "t")).await.expect("released");
    assert!(ledger
        .claim(claim("e3", "t"), at)
        .await
        .expect("claim again"));
    // Releasing what is not claimed changes nothing.
    ledger.release(claim("never", "t")).await.expect("released");
}
