//! The bastion lease contract ([`overture_kit::leases_contract`]) on the SQLite table, and on
//! two engines sharing one data directory.

use overture_events::DeploymentId;
use overture_infra::sqlite::{Database, SqliteLeases};
use overture_kit::leases::{LeaseBastionRules, MemoryLeases, Release, RuleKey};

#[tokio::test]
async fn the_sqlite_table_keeps_the_contract() {
    let dir = tempfile::tempdir().expect("a directory");
    let db = Database::open(dir.path().join("overture.db"))
        .await
        .expect("opened");
    overture_kit::leases_contract::leases_keep_their_contract(&SqliteLeases::new(db)).await;
}

#[tokio::test]
async fn the_memory_table_keeps_the_contract() {
    overture_kit::leases_contract::leases_keep_their_contract(&MemoryLeases::new()).await;
}

#[tokio::test]
async fn two_engines_on_one_file_see_each_others_leases() {
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("overture.db");
    let one = SqliteLeases::new(Database::open(&path).await.expect("opened"));
    let other = SqliteLeases::new(Database::open(&path).await.expect("opened"));
    let rule = RuleKey {
        cloud: "http://127.0.0.1:5000/identity/v3".into(),
        security_group: "bastion".into(),
        source: "10.0.0.1/32".into(),
        port: 22,
    };
    let (first, second) = (
        DeploymentId::from_uuid(uuid::Uuid::from_u128(1)),
        DeploymentId::from_uuid(uuid::Uuid::from_u128(2)),
    );
    one.acquire(&rule, first).await.expect("acquired");
    other.acquire(&rule, second).await.expect("acquired");
    assert_eq!(
        one.release(&rule, first).await.expect("released"),
        Release::Kept(vec![second])
    );
    assert_eq!(
        other.release(&rule, second).await.expect("released"),
        Release::Last
    );
    let refused = one.acquire(&rule, first).await.expect_err("closing");
    assert!(refused.is_retryable(), "{refused}");
}
