//! The pre-flight check: what this machine must have before any step can run in a sandbox,
//! looked at once when an engine, `overture serve` or the runner function starts, so that a
//! missing tool is one clear refusal naming its package instead of every attempt failing as a
//! sandbox error that is retried in vain.
//!
//! Every tool is looked up as the sandbox runs it ([`on_path`]): on the engine's `PATH`, then
//! run by the absolute path found, so the check and the runs cannot disagree.

use std::path::{Path, PathBuf};

use super::Bubblewrap;

/// Where tools are looked for when the engine has no `PATH` at all: the usual system
/// directories, as a login shell of root has them.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One thing this machine lacks that steps need.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    /// A program is not on the engine's `PATH` (or, for `setpriv`, at its fixed place).
    #[error(
        "`{program}` ({role}) is not on PATH: install the Debian package `{package}` \
         (`apt-get install {package}`)"
    )]
    Program {
        /// The program's name.
        program: &'static str,
        /// What the sandbox needs it for.
        role: &'static str,
        /// The Debian package that installs it.
        package: &'static str,
    },
    /// No cgroup hierarchy in which each attempt's limits could be kept.
    #[error(
        "no cgroups to limit the steps with: {reason}; the engine needs the memory, pids and cpu \
         controllers, as root or in a cgroup delegated to it (systemd's `Delegate=yes`)"
    )]
    Cgroups {
        /// What is missing, as the machine's cgroup files tell.
        reason: String,
    },
}

/// Everything a machine lacks for steps to run, in the order the checks found it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "steps cannot run on this machine:\n{}\n(`scripts/setup.sh` in Overture's source installs \
     each of these packages)",
    shown(.0)
)]
pub struct Unready(pub Vec<Missing>);

fn shown(missing: &[Missing]) -> String {
    missing
        .iter()
        .map(|missing| format!("  - {missing}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tools a sandbox runs, with what each is for and its Debian package.
const TOOLS: [(&str, &str, &str); 4] = [
    ("bwrap", "the sandbox itself", "bubblewrap"),
    (
        "nsenter",
        "to enter a step's network namespace",
        "util-linux",
    ),
    ("nft", "to load a networked step's firewall", "nftables"),
    ("pasta", "to connect a networked step's namespace", "passt"),
];

impl Bubblewrap {
    /// Checks that this machine has everything a step's sandbox needs: bubblewrap, `setpriv`,
    /// the network's tools (`nsenter`, `nft`, `pasta`) and cgroups with the memory, pids and
    /// cpu controllers. Reads files only; starts nothing.
    pub fn preflight(&self) -> Result<(), Unready> {
        let mut missing = Vec::new();
        for (program, role, package) in TOOLS {
            let found = match program {
                // This sandbox's own bubblewrap, which may have been given by its path.
                "bwrap" => is_executable(&self.program) || on_path(&self.program).is_some(),
                _ => on_path(Path::new(program)).is_some(),
            };
            if !found {
                missing.push(Missing::Program {
                    program,
                    role,
                    package,
                });
            }
        }
        if self.layout.setpriv().is_none() {
            missing.push(Missing::Program {
                program: "setpriv",
                role: "to drop a step to its own user",
                package: "util-linux",
            });
        }
        if let Err(reason) = &self.cgroups {
            missing.push(Missing::Cgroups {
                reason: reason.clone(),
            });
        }
        match missing.is_empty() {
            true => Ok(()),
            false => Err(Unready(missing)),
        }
    }
}

/// `program` as the sandbox runs it: itself when it is a path, else the first executable of
/// that name on the engine's `PATH` (the system directories when there is none).
pub(crate) fn on_path(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return is_executable(program).then(|| program.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_missing_thing_names_its_package_and_the_setup_script() {
        let unready = Unready(vec![
            Missing::Program {
                program: "pasta",
                role: "to connect a networked step's namespace",
                package: "passt",
            },
            Missing::Cgroups {
                reason: "cgroup v2 lacks the pids controller".into(),
            },
        ]);
        let message = unready.to_string();
        assert!(
            message.contains("`pasta` (to connect a networked step's namespace) is not on PATH: install the Debian package `passt` (`apt-get install passt`)"),
            "{message}"
        );
        assert!(message.contains("lacks the pids controller"), "{message}");
        assert!(message.contains("scripts/setup.sh"), "{message}");
        assert_eq!(message.lines().filter(|l| l.starts_with("  - ")).count(), 2);
    }
}
