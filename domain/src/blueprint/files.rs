//! The files a blueprint's steps take from its folder (a Terraform configuration, a playbook and
//! its neighbours): which folders, and recording them in the blueprint and its hash.

use std::collections::BTreeMap;

use overture_events::BlueprintSnapshot;
use sha2::{Digest, Sha256};

use super::{BlueprintError, BlueprintProblem, ParsedBlueprint, MAX_FILES_BYTES};
use crate::kind::Kind;

/// The folders (relative to the blueprint's) whose files the steps take, with the field naming
/// each.
pub fn bundle_dirs(blueprint: &BlueprintSnapshot) -> Vec<(String, String)> {
    blueprint
        .steps
        .iter()
        .filter_map(|step| {
            let kind = Kind::of(step)?;
            let dir = kind.bundle_dir(&step.with)?;
            let key = kind.bundle_setting()?;
            Some((format!("steps.{}.with.{key}", step.name), dir))
        })
        .collect()
}

/// Records the files the steps take from the blueprint's folder in the blueprint, and in its
/// hash. Fails when a step's files are missing or they are too large to record.
pub fn attach_files(
    parsed: &mut ParsedBlueprint,
    files: BTreeMap<String, String>,
) -> Result<(), BlueprintError> {
    let mut problems: Vec<BlueprintProblem> = files
        .keys()
        .filter_map(|path| crate::inputs::path_problem(path))
        .map(|problem| BlueprintProblem {
            field: "files".into(),
            problem,
        })
        .collect();
    for step in &parsed.snapshot.steps {
        let missing = Kind::of(step).and_then(|kind| kind.missing_files(&step.with, &files));
        if let Some((key, problem)) = missing {
            problems.push(BlueprintProblem {
                field: format!("steps.{}.with.{key}", step.name),
                problem,
            });
        }
    }
    let size: usize = files
        .iter()
        .map(|(path, text)| path.len() + text.len())
        .sum();
    if size > MAX_FILES_BYTES {
        problems.push(BlueprintProblem {
            field: "steps".into(),
            problem: format!(
                "the steps' files come to {size} bytes, more than the {MAX_FILES_BYTES} a deployment records; keep large artefacts out of the Terraform and playbook folders"
            ),
        });
    }
    if !problems.is_empty() {
        return Err(BlueprintError(problems));
    }
    let mut hash = Sha256::new();
    hash.update(parsed.hash.as_bytes());
    for (path, text) in &files {
        for part in [path.as_bytes(), b"\0", text.as_bytes(), b"\0"] {
            hash.update(part);
        }
    }
    if !files.is_empty() {
        parsed.hash = hex::encode(hash.finalize());
    }
    parsed.snapshot.files = files;
    Ok(())
}
