//! The embedded engine's data directory is the engine's own: the directory is 0700 and every
//! file in it 0600, whatever the umask, for it holds every tenant's blueprints, parameters,
//! outputs, logs and sealed secrets.
//!
//! Each adapter creates what it writes with these modes ([`DIR_MODE`], [`FILE_MODE`]);
//! [`make_private`] creates the directory so, and brings a directory left with wider modes (by an
//! Overture from before this rule, or by hand) back to them; [`private_file`] does it for the
//! SQLite file, whose `-wal` and `-shm` SQLite creates with the database file's own mode.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of the data directory and of every directory in it.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file in the data directory.
pub const FILE_MODE: u32 = 0o600;
/// The folder of the step sandboxes, left out of [`make_private`]'s walk: a sandbox a dead engine
/// left behind may still have the host's folders bound into it, which are not the engine's to
/// change. Its workspaces are private to the engine (0700) and removed when a run ends.
const SANDBOXES: &str = "sandboxes";

/// Creates `dir` (with its missing parents) as 0700; when it exists with another mode, sets it
/// to 0700, every directory under it to 0700 and every file to 0600. `dir` itself may be a link
/// the operator made (it is followed, as every open of the data directory follows it); links
/// under it are not.
pub fn make_private(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    if fs::metadata(dir)?.permissions().mode() & 0o777 != DIR_MODE {
        restrict(dir)?;
    }
    Ok(())
}

/// Creates the file at `path`, empty, as 0600 if it is missing, and sets it, and the `-wal` and
/// `-shm` files beside it if there are any, to 0600.
///
/// An existing file is never opened: closing any descriptor of a SQLite file drops every POSIX
/// lock this process holds on it, so opening the database again beside a live connection (the
/// engine's and the read models' in one `overture serve`) would leave that connection unlocked
/// and other processes would read a log in mid-write.
pub fn private_file(path: &Path) -> io::Result<()> {
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path);
    match created {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    set_mode(path, FILE_MODE)?;
    for suffix in ["-wal", "-shm"] {
        let mut beside = path.as_os_str().to_owned();
        beside.push(suffix);
        set_mode(Path::new(&beside), FILE_MODE)?;
    }
    Ok(())
}

/// Sets `dir` and everything under it to the private modes.
fn restrict(dir: &Path) -> io::Result<()> {
    set_mode(dir, DIR_MODE)?;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            if entry.file_name() == SANDBOXES {
                set_mode(&entry.path(), DIR_MODE)?;
            } else {
                restrict(&entry.path())?;
            }
        } else if kind.is_file() {
            set_mode(&entry.path(), FILE_MODE)?;
        }
    }
    Ok(())
}

/// Sets the mode of a file or directory that exists; one that does not is left alone.
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(found) if found.permissions().mode() & 0o777 == mode => Ok(()),
        Ok(_) => fs::set_permissions(path, fs::Permissions::from_mode(mode)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).expect("exists").permissions().mode() & 0o777
    }

    #[test]
    fn an_open_data_directory_is_made_private_throughout() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("data");
        fs::create_dir_all(dir.join("payloads")).expect("mkdir");
        for (path, bits) in [(dir.as_path(), 0o755), (&dir.join("payloads"), 0o755)] {
            fs::set_permissions(path, fs::Permissions::from_mode(bits)).expect("chmod");
        }
        for file in ["overture.db", "overture.db-wal", "payloads/abc"] {
            fs::write(dir.join(file), "x").expect("write");
            fs::set_permissions(dir.join(file), fs::Permissions::from_mode(0o644)).expect("chmod");
        }

        make_private(&dir).expect("made private");

        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("payloads")), 0o700);
        for file in ["overture.db", "overture.db-wal", "payloads/abc"] {
            assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
        }
    }

    #[test]
    fn a_new_data_directory_and_database_are_private_whatever_the_umask() {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join("new").join("data");
        make_private(&dir).expect("created");
        assert_eq!(mode(&dir), 0o700);
        let db = dir.join("overture.db");
        private_file(&db).expect("created");
        assert_eq!(mode(&db), 0o600);
        fs::write(dir.join("overture.db-shm"), "").expect("write");
        fs::set_permissions(
            dir.join("overture.db-shm"),
            fs::Permissions::from_mode(0o644),
        )
        .expect("chmod");
        private_file(&db).expect("again");
        assert_eq!(mode(&dir.join("overture.db-shm")), 0o600);
        assert_eq!(
            fs::read(&db).expect("read"),
            b"",
            "an existing file is kept as it is"
        );
    }
}
