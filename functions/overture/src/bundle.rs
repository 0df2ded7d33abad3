//! Reading the files a blueprint's steps take from its folder (Terraform configurations,
//! playbooks), so the deployment records them as they are now.

use std::collections::BTreeMap;
use std::path::Path;

use overture_domain::blueprint::{self, BlueprintError, BlueprintProblem};
use overture_events::BlueprintSnapshot;

/// Every regular file under the folders the steps name, by path relative to the blueprint's
/// folder. Hidden entries (`.terraform`, `.git`) and Terraform state files are left out: a
/// deployment keeps its own state. Terraform's dependency lock file is kept, so every attempt
/// and `destroy` use the provider versions it pins.
pub fn read_files(
    blueprint_file: &Path,
    snapshot: &BlueprintSnapshot,
) -> Result<BTreeMap<String, String>, BlueprintError> {
    let root = blueprint_file.parent().unwrap_or(Path::new("."));
    let mut files = BTreeMap::new();
    let mut problems = Vec::new();
    for (field, dir) in blueprint::bundle_dirs(snapshot) {
        let folder = root.join(&dir);
        if !folder.is_dir() {
            problems.push(BlueprintProblem {
                field,
                problem: format!("`{}` is not a folder", folder.display()),
            });
            continue;
        }
        if let Err(problem) = read_folder(&folder, &dir, &mut files) {
            problems.push(BlueprintProblem { field, problem });
        }
    }
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(BlueprintError(problems))
    }
}

/// Terraform's dependency lock file: hidden, but part of the configuration.
const TERRAFORM_LOCK_FILE: &str = ".terraform.lock.hcl";

fn read_folder(
    folder: &Path,
    prefix: &str,
    files: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let entries = std::fs::read_dir(folder)
        .map_err(|e| format!("cannot read `{}`: {e}", folder.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read `{}`: {e}", folder.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(format!(
                "`{}` has a file whose name is not UTF-8",
                folder.display()
            ));
        };
        let hidden = name.starts_with('.') && name != TERRAFORM_LOCK_FILE;
        if hidden || name.contains(".tfstate") {
            continue;
        }
        let relative = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        if kind.is_dir() {
            read_folder(&path, &relative, files)?;
        } else if kind.is_file() {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                format!(
                    "cannot read `{}` as text ({e}); steps take text files only",
                    path.display()
                )
            })?;
            files.insert(relative, text);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_read_whole_but_for_hidden_entries_and_state_and_text_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let infra = dir.path().join("infra");
        for (path, content) in [
            ("main.tf", &b"resource \"terraform_data\" \"x\" {}"[..]),
            (".terraform.lock.hcl", b"# pins"),
            ("modules/net/net.tf", b"# module"),
            (".terraform/providers/p", b"binary"),
            ("terraform.tfstate", b"{}"),
            ("terraform.tfstate.backup", b"{}"),
        ] {
            let path = infra.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, content).expect("write");
        }
        let blueprint = dir.path().join("blueprint.yaml");
        let parsed = blueprint::parse(
            "name: b\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n",
        )
        .expect("valid");

        let files = read_files(&blueprint, &parsed.snapshot).expect("read");
        assert_eq!(
            files.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "infra/.terraform.lock.hcl",
                "infra/main.tf",
                "infra/modules/net/net.tf"
            ]
        );

        std::fs::write(infra.join("logo.png"), [0xff, 0xd8, 0xff]).expect("write");
        let refused = read_files(&blueprint, &parsed.snapshot).expect_err("binary");
        assert_eq!(refused.0[0].field, "steps.infra.with.dir");
        assert!(
            refused.0[0].problem.contains("logo.png"),
            "{}",
            refused.0[0].problem
        );
        assert!(refused.0[0].problem.contains("text files only"));
    }
}
