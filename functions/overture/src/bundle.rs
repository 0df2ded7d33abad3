//! Reading the files a blueprint's steps take from its folder (Terraform configurations,
//! playbooks), so the deployment records them as they are now.

use std::collections::BTreeMap;
use std::path::Path;

use overture_domain::blueprint::{self, BlueprintError, BlueprintProblem};
use overture_events::BlueprintSnapshot;

/// Every regular file under the folders the steps name, by path relative to the blueprint's
/// folder. Hidden entries (`.terraform`, `.git`) and Terraform state files are left out: a
/// deployment keeps its own state.
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
        if name.starts_with('.') || name.contains(".tfstate") {
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
