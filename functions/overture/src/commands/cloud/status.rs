//! `overture cloud status`: the admin API's status, as JSON or for people.

use std::path::Path;

use overture_cloud::CloudInfo;
use serde_json::Value;

use super::client::connect;
use super::project::{Named, DEFAULT_DOMAIN};
use crate::Failure;

/// Prints the status of the cloud serving `dir`.
pub(super) async fn status(dir: &Path, json: bool) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let (_, status) = client
        .admin(reqwest::Method::GET, "/admin/status", None)
        .await?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&status).unwrap_or_default()
        );
    } else {
        out!("{}", render_status(&client.info, &status));
    }
    Ok(())
}

/// The admin status for people.
fn render_status(info: &CloudInfo, status: &Value) -> String {
    let mut out = format!(
        "cloud {} at {} (OS_AUTH_URL={}), servers on {}\n",
        info.instance, info.url, info.auth_url, info.network
    );
    let projects = status["projects"].as_array().cloned().unwrap_or_default();
    if projects.is_empty() {
        out.push_str("no projects yet: `overture cloud token --project NAME` creates one\n");
    }
    for project in &projects {
        render_project(&mut out, project);
        render_faults(&mut out, &project["faults"]);
        render_servers(&mut out, project);
        render_security_groups(&mut out, project);
    }
    out
}

/// A JSON string as text, `-` when missing.
fn text(value: &Value) -> String {
    value.as_str().unwrap_or("-").to_owned()
}

/// The project's heading: its name within its domain, its id and its network.
fn render_project(out: &mut String, project: &Value) {
    let network = &project["network"];
    let domain = project["domain"]["name"].as_str().unwrap_or(DEFAULT_DOMAIN);
    let named = Named {
        name: &text(&project["name"]),
        domain,
    }
    .to_string();
    out.push_str(&format!(
        "\nproject {named} ({}): network {} on {}, host {}\n",
        text(&project["id"]),
        text(&network["cidr"]),
        text(&network["bridge"]),
        text(&network["gateway"]),
    ));
}

/// The project's injected faults, on one line, when it has any.
fn render_faults(out: &mut String, faults: &Value) {
    let failing = faults["backend_unreachable"].as_u64().unwrap_or(0);
    let never_boot: Vec<String> = faults["never_boot"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    let mut faults = Vec::new();
    if failing > 0 {
        faults.push(format!("backend-unreachable for {failing} more call(s)"));
    }
    if !never_boot.is_empty() {
        faults.push(format!("never-boot {}", never_boot.join(", ")));
    }
    if !faults.is_empty() {
        out.push_str(&format!("  faults: {}\n", faults.join("; ")));
    }
}

/// The project's servers, one a line.
fn render_servers(out: &mut String, project: &Value) {
    let servers = project["servers"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!("  servers: {}\n", servers.len()));
    for server in &servers {
        let groups: Vec<String> = server["security_groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        out.push_str(&format!(
            "    {:<20} {:<7} {:<15} [{}] {}{}\n",
            text(&server["name"]),
            text(&server["status"]),
            text(&server["address"]),
            groups.join(", "),
            text(&server["id"]),
            if server["unreachable"] == true {
                " (unreachable)"
            } else {
                ""
            },
        ));
    }
}

/// The project's security groups, each with its rules; a rule's remote group by its name.
fn render_security_groups(out: &mut String, project: &Value) {
    let groups = project["security_groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    out.push_str("  security groups:\n");
    for group in &groups {
        out.push_str(&format!(
            "    {} ({})\n",
            text(&group["name"]),
            text(&group["id"])
        ));
        let named = |id: &Value| {
            groups
                .iter()
                .find(|g| g["id"] == *id)
                .map(|g| text(&g["name"]))
                .unwrap_or_else(|| text(id))
        };
        for rule in group["rules"].as_array().into_iter().flatten() {
            let ports = match (
                rule["port_range_min"].as_u64(),
                rule["port_range_max"].as_u64(),
            ) {
                (Some(min), Some(max)) if min == max => format!(" {min}"),
                (Some(min), Some(max)) => format!(" {min}-{max}"),
                _ => String::new(),
            };
            let from = if rule["remote_group_id"].is_string() {
                format!("group {}", named(&rule["remote_group_id"]))
            } else if rule["remote_ip_prefix"].is_string() {
                text(&rule["remote_ip_prefix"])
            } else {
                "anywhere".into()
            };
            out.push_str(&format!(
                "      {} {}{} from {}\n",
                text(&rule["direction"]),
                rule["protocol"].as_str().unwrap_or("any"),
                ports,
                from,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_status_reads_for_people() {
        let info = CloudInfo {
            pid: 1,
            pid_start_time: 1,
            url: "http://127.0.0.1:4000".into(),
            auth_url: "http://127.0.0.1:4000/identity/v3".into(),
            instance: "ab12".into(),
            network: "10.7.0.0/16".into(),
        };
        let status = json!({"projects": [{
            "id": "p1", "name": "tenant-a",
            "network": {"bridge": "ovcab12b1", "cidr": "10.7.1.0/24", "gateway": "10.7.1.1"},
            "faults": {"backend_unreachable": 2, "never_boot": []},
            "servers": [{"id": "s1", "name": "web-1", "status": "ACTIVE", "address": "10.7.1.2",
                         "security_groups": ["web"], "unreachable": false}],
            "security_groups": [
                {"id": "g1", "name": "bastion", "rules": []},
                {"id": "g2", "name": "web", "rules": [
                    {"direction": "ingress", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22,
                     "remote_group_id": "g1", "remote_ip_prefix": null}]}],
        }, {
            "id": "p2", "name": "tenant-a", "domain": {"id": "d2", "name": "Other"},
            "network": {"bridge": "ovcab12b2", "cidr": "10.7.2.0/24", "gateway": "10.7.2.1"},
            "faults": {"backend_unreachable": 0, "never_boot": []},
            "servers": [], "security_groups": [],
        }]});
        let text = render_status(&info, &status);
        assert!(
            text.contains("project tenant-a (p1): network 10.7.1.0/24 on ovcab12b1, host 10.7.1.1"),
            "{text}"
        );
        assert!(
            text.contains("project tenant-a in domain Other (p2): network 10.7.2.0/24"),
            "{text}"
        );
        assert!(
            text.contains("backend-unreachable for 2 more call(s)"),
            "{text}"
        );
        assert!(text.contains("web-1"), "{text}");
        assert!(
            text.contains("      ingress tcp 22 from group bastion\n"),
            "{text}"
        );
    }
}
