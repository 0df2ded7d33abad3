//! The deployment-log contract on the in-memory log that handlers' own tests use, so those
//! tests stand on the same behaviour as the SQLite and DynamoDB logs.

use overture_kit::memory::MemoryLog;

async fn clients() -> (MemoryLog, MemoryLog) {
    let log = MemoryLog::new(chrono::Utc::now());
    (log.clone(), log)
}

overture_kit::log_contract_tests!(clients());
