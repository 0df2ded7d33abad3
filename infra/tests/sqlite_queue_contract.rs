//! The queue contract ([`overture_kit::queue_contract`]) on the SQLite queue: each test on a
//! database of its own.

use overture_infra::sqlite::{Database, JobQueue};

async fn queue() -> JobQueue {
    // Kept for the whole test run; one file per test, so each queue starts empty.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let path = dir.path().join(format!("{}.db", uuid::Uuid::now_v7()));
    JobQueue::new(Database::open(path).await.expect("database opens"))
}

overture_kit::queue_contract_tests!(queue());
