//! The data directory is the engine's own: 0700, every folder in it 0700 and every file 0600,
//! the SQLite file's `-wal` and `-shm` included; an older one with wider modes is narrowed when
//! the engine opens it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::{text, Overture, Serving};

const BLUEPRINT: &str = r#"
name: modes
secrets: [token]
steps:
  one:
    run: script
    with: { command: 'echo "{{ secrets.token }}" > kept; echo "word=done" >> "$OVERTURE_OUTPUTS"' }
"#;

/// Every path under `dir` (itself included) whose mode is not 0700 for a folder or 0600 for a
/// file, with its mode.
fn not_private(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mode = std::fs::symlink_metadata(dir)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777;
    if mode != 0o700 {
        found.push(format!("{} {mode:o}", dir.display()));
    }
    for entry in std::fs::read_dir(dir).expect("a folder").flatten() {
        let kind = entry.file_type().expect("a type");
        if kind.is_dir() {
            found.extend(not_private(&entry.path()));
        } else {
            let mode = entry.metadata().expect("metadata").permissions().mode() & 0o777;
            if mode != 0o600 {
                found.push(format!("{} {mode:o}", entry.path().display()));
            }
        }
    }
    found
}

#[test]
fn the_data_directory_is_0700_and_every_file_in_it_0600() {
    let (overture, file) = Overture::with_blueprint("modes.yaml", BLUEPRINT);
    // While an engine holds the database open, its -wal and -shm are there too.
    let serving = Serving::start(&overture);
    overture.deploy_ok_with_secret(&file, "token", "s3cr3t-modes");
    let db = overture.data_dir().join("overture.db");
    for beside in ["overture.db-wal", "overture.db-shm"] {
        assert!(overture.data_dir().join(beside).exists(), "{beside}");
    }
    assert!(db.exists());
    assert_eq!(not_private(&overture.data_dir()), Vec::<String>::new());
    serving.stop();
    assert_eq!(not_private(&overture.data_dir()), Vec::<String>::new());
}

#[test]
fn an_older_data_directory_with_wider_modes_is_narrowed_when_opened() {
    let (overture, file) = Overture::with_blueprint("modes.yaml", BLUEPRINT);
    overture.deploy_ok_with_secret(&file, "token", "s3cr3t-modes");
    let dir = overture.data_dir();
    let set = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    // As an Overture from before this rule left it.
    set(&dir, 0o755);
    set(&dir.join("overture.db"), 0o644);
    set(&dir.join("locks"), 0o755);
    set(&dir.join("engine.lock"), 0o644);

    let listed = overture.run(&["list"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert_eq!(not_private(&dir), Vec::<String>::new());
}
