//! The contract every [`LeaseBastionRules`] adapter keeps, as one suite its tests call with an
//! empty table: the SQLite table of the embedded engine, the DynamoDB table of the serverless
//! form, and [`MemoryLeases`](crate::leases::MemoryLeases).

use overture_events::DeploymentId;

use crate::leases::{LeaseBastionRules, LeaseError, Release, RuleKey};

fn rule(group: &str) -> RuleKey {
    RuleKey {
        cloud: "http://127.0.0.1:5000/identity/v3".into(),
        security_group: group.into(),
        source: "10.0.0.1/32".into(),
        port: 22,
    }
}

fn deployment(n: u128) -> DeploymentId {
    DeploymentId::from_uuid(uuid::Uuid::from_u128(
        0x0190_b6c6_8d6e_7000_8000_0000_0000_0000 + n,
    ))
}

/// Runs every part of the contract on `leases`, which must be empty.
pub async fn leases_keep_their_contract(leases: &dyn LeaseBastionRules) {
    the_last_lease_to_close_deletes_the_rule(leases).await;
    a_lease_is_held_once_however_often_it_is_opened(leases).await;
    a_grant_while_the_rule_closes_is_refused_until_it_is_deleted(leases).await;
    a_release_tried_again_after_a_failed_delete_answers_last_again(leases).await;
    rules_are_leased_apart(leases).await;
    many_concurrent_grants_and_releases_leave_one_last(leases).await;
    every_rule_a_deployment_holds_is_listed(leases).await;
}

async fn every_rule_a_deployment_holds_is_listed(leases: &dyn LeaseBastionRules) {
    let (one, other) = (deployment(40), deployment(41));
    // A cloud whose address holds the key's separator still reads back whole.
    let odd = RuleKey {
        cloud: "http://127.0.0.1:5000/a|b/v3".into(),
        ..rule("held-b")
    };
    let (a, b, c) = (rule("held-a"), odd, rule("held-c"));
    assert_eq!(leases.held_by(one).await.expect("held"), vec![]);
    leases.acquire(&a, one).await.expect("acquired");
    leases.acquire(&b, one).await.expect("acquired");
    leases.acquire(&b, other).await.expect("acquired");
    leases.acquire(&c, other).await.expect("acquired");
    let mut expected = vec![a.clone(), b.clone()];
    expected.sort();
    assert_eq!(leases.held_by(one).await.expect("held"), expected);
    // A lease closing (its rule being deleted) is still held until the delete is over.
    assert_eq!(
        leases.release(&a, one).await.expect("released"),
        Release::Last
    );
    assert_eq!(leases.held_by(one).await.expect("held"), expected);
    leases.closed(&a, one).await.expect("closed");
    assert_eq!(leases.held_by(one).await.expect("held"), vec![b.clone()]);
    assert_eq!(
        leases.release(&b, one).await.expect("released"),
        Release::Kept(vec![other])
    );
    assert_eq!(leases.held_by(one).await.expect("held"), vec![]);
    let mut others = vec![b.clone(), c.clone()];
    others.sort();
    assert_eq!(leases.held_by(other).await.expect("held"), others);
    for rule in [&b, &c] {
        assert_eq!(
            leases.release(rule, other).await.expect("released"),
            Release::Last
        );
        leases.closed(rule, other).await.expect("closed");
    }
}

async fn the_last_lease_to_close_deletes_the_rule(leases: &dyn LeaseBastionRules) {
    let rule = rule("shared");
    let (first, second) = (deployment(1), deployment(2));
    leases.acquire(&rule, first).await.expect("acquired");
    leases.acquire(&rule, second).await.expect("acquired");
    assert_eq!(
        leases.holders(&rule).await.expect("holders"),
        vec![first, second]
    );
    assert_eq!(
        leases.release(&rule, first).await.expect("released"),
        Release::Kept(vec![second])
    );
    assert_eq!(leases.holders(&rule).await.expect("holders"), vec![second]);
    assert_eq!(
        leases.release(&rule, second).await.expect("released"),
        Release::Last
    );
    assert_eq!(leases.holders(&rule).await.expect("holders"), vec![]);
    leases.closed(&rule, second).await.expect("closed");
    // The rule may be made again, and leased afresh.
    leases
        .acquire(&rule, deployment(3))
        .await
        .expect("acquired");
    assert_eq!(
        leases
            .release(&rule, deployment(3))
            .await
            .expect("released"),
        Release::Last
    );
    leases.closed(&rule, deployment(3)).await.expect("closed");
}

async fn a_lease_is_held_once_however_often_it_is_opened(leases: &dyn LeaseBastionRules) {
    let rule = rule("again");
    let one = deployment(10);
    for _ in 0..3 {
        leases.acquire(&rule, one).await.expect("acquired");
    }
    assert_eq!(leases.holders(&rule).await.expect("holders"), vec![one]);
    assert_eq!(
        leases.release(&rule, one).await.expect("released"),
        Release::Last
    );
    leases.closed(&rule, one).await.expect("closed");
}

async fn a_grant_while_the_rule_closes_is_refused_until_it_is_deleted(
    leases: &dyn LeaseBastionRules,
) {
    let rule = rule("closing");
    let (last, late) = (deployment(20), deployment(21));
    leases.acquire(&rule, last).await.expect("acquired");
    assert_eq!(
        leases.release(&rule, last).await.expect("released"),
        Release::Last
    );
    let refused = leases
        .acquire(&rule, late)
        .await
        .expect_err("the rule is being deleted");
    assert!(
        matches!(&refused, LeaseError::Closing { by, .. } if *by == last),
        "{refused:?}"
    );
    assert!(refused.is_retryable(), "the grant is tried again");
    assert_eq!(leases.holders(&rule).await.expect("holders"), vec![]);
    leases.closed(&rule, last).await.expect("closed");
    leases.acquire(&rule, late).await.expect("acquired afresh");
    assert_eq!(leases.holders(&rule).await.expect("holders"), vec![late]);
    assert_eq!(
        leases.release(&rule, late).await.expect("released"),
        Release::Last
    );
    leases.closed(&rule, late).await.expect("closed");
}

async fn a_release_tried_again_after_a_failed_delete_answers_last_again(
    leases: &dyn LeaseBastionRules,
) {
    let rule = rule("retried");
    let one = deployment(30);
    leases.acquire(&rule, one).await.expect("acquired");
    assert_eq!(
        leases.release(&rule, one).await.expect("released"),
        Release::Last
    );
    // The delete failed; the orchestrator tries the revocation again later.
    assert_eq!(
        leases.release(&rule, one).await.expect("released again"),
        Release::Last
    );
    leases.closed(&rule, one).await.expect("closed");
    // Closing what is closed is no error (a crash between delete and record).
    leases.closed(&rule, one).await.expect("closed again");
    assert_eq!(
        leases
            .release(&rule, one)
            .await
            .expect("released after all"),
        Release::Last
    );
    leases.closed(&rule, one).await.expect("closed");
}

async fn rules_are_leased_apart(leases: &dyn LeaseBastionRules) {
    let (a, mut b) = (rule("apart"), rule("apart"));
    b.port = 2222;
    let (one, two) = (deployment(40), deployment(41));
    leases.acquire(&a, one).await.expect("acquired");
    leases.acquire(&b, two).await.expect("acquired");
    assert_eq!(
        leases.release(&a, one).await.expect("released"),
        Release::Last
    );
    assert_eq!(leases.holders(&b).await.expect("holders"), vec![two]);
    leases.closed(&a, one).await.expect("closed");
    assert_eq!(
        leases.release(&b, two).await.expect("released"),
        Release::Last
    );
    leases.closed(&b, two).await.expect("closed");
}

async fn many_concurrent_grants_and_releases_leave_one_last(leases: &dyn LeaseBastionRules) {
    let rule = rule("raced");
    let holders: Vec<DeploymentId> = (100..110).map(deployment).collect();
    let acquired = futures_join(holders.iter().map(|d| leases.acquire(&rule, *d))).await;
    assert!(acquired.iter().all(Result::is_ok), "{acquired:?}");
    let mut held = leases.holders(&rule).await.expect("holders");
    held.sort();
    assert_eq!(held, holders);
    let released = futures_join(holders.iter().map(|d| leases.release(&rule, *d))).await;
    let lasts = released
        .iter()
        .filter(|r| matches!(r, Ok(Release::Last)))
        .count();
    assert_eq!(
        lasts, 1,
        "exactly one holder deletes the rule: {released:?}"
    );
    assert!(released.iter().all(Result::is_ok), "{released:?}");
}

/// Runs the futures side by side, in order of their answers' positions.
async fn futures_join<F, T>(futures: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    let handles: Vec<_> = futures.map(Box::pin).collect();
    let mut results = Vec::with_capacity(handles.len());
    // The adapters serialise their changes themselves; polling the calls together is what
    // lets them race on a store that answers asynchronously (DynamoDB).
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut done: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (slot, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *out = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    results.extend(done.into_iter().flatten());
    results
}
