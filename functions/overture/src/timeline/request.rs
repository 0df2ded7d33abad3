//! The request and what it brings: its blueprint, parameters and cloud, its credentials sealed and purged.

use overture_events::DeploymentEvent;

use super::describe::{said, Line};

/// The request and what it brings: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let title = &line.title;
    let why = &mut line.why;
    match event {
        E::DeploymentRequested {
            tenant,
            requested_by,
            trigger,
            source,
            blueprint,
            params,
            cloud,
            ..
        } => {
            why.push((
                "by",
                format!("{} via {}", said(requested_by), said(trigger)),
            ));
            why.push(("from", said(source)));
            if !params.is_empty() {
                let params: Vec<String> = params
                    .iter()
                    .map(|(k, v)| format!("{k}={}", said(v)))
                    .collect();
                why.push(("params", params.join(" ")));
            }
            if let Some(cloud) = cloud {
                why.push((
                    "cloud",
                    format!(
                        "project {} as user {} at {}",
                        said(&cloud.project),
                        said(&cloud.user),
                        said(&cloud.auth_url)
                    ),
                ));
            }
            format!(
                "{title}: {} for tenant {}",
                said(&blueprint.name),
                said(tenant)
            )
        }
        E::CredentialsSealed {
            secrets,
            ssh_public_key,
            token,
            ..
        } => {
            let mut sealed = Vec::new();
            if !secrets.is_empty() {
                let names: Vec<String> = secrets.iter().map(|s| said(s)).collect();
                sealed.push(format!("secrets {}", names.join(", ")));
            }
            if ssh_public_key.is_some() {
                sealed.push("its own SSH key".to_owned());
            }
            if *token {
                sealed.push("the cloud token".to_owned());
            }
            if sealed.is_empty() {
                sealed.push("nothing".to_owned());
            }
            why.push(("sealed", sealed.join("; ")));
            title.clone()
        }
        E::SecretsPurged {} => title.clone(),
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
