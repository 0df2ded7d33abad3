//! The read-model store contract ([`overture_projector::contract`]) on SQLite: two clients are
//! two handles on one database file, as two processes would hold.

use overture_infra::sqlite::{Database, SqliteReadModels};

async fn clients() -> (SqliteReadModels, SqliteReadModels) {
    // Kept for the whole test run: every test has deployments and a tenant of its own in it.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let path = dir.path().join("overture.db");
    let a = Database::open(&path).await.expect("database opens");
    let b = Database::open(&path).await.expect("database opens");
    (SqliteReadModels::new(a), SqliteReadModels::new(b))
}

overture_projector::read_model_contract_tests!(clients());
