//! The deployment-log contract ([`overture_kit::contract`]) on the SQLite log: two clients are
//! two handles on one database file, as two processes would hold.

use std::sync::Arc;

use overture_infra::sqlite::{Database, EventLog, SqliteDeployments};
use overture_kit::SystemClock;

async fn client(path: &std::path::Path) -> SqliteDeployments {
    let db = Database::open(path).await.expect("database opens");
    SqliteDeployments::new(EventLog::new(db), Arc::new(SystemClock))
}

async fn clients() -> (SqliteDeployments, SqliteDeployments) {
    // Kept for the whole test run: every test has deployments of its own in it.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let path = dir.path().join("overture.db");
    (client(&path).await, client(&path).await)
}

overture_kit::log_contract_tests!(clients());
