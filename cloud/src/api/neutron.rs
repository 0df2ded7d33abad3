//! Neutron: security groups and their rules, in the caller's project. Rule changes are enforced
//! on every server of the project before the call answers.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as Shared};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{each, parse, reply, unauthorized, Service, Tenant};
use crate::cloud::{Cloud, Failure};
use crate::state::{NewRule, Rule, SecurityGroup, State, StateError};

#[derive(Deserialize)]
struct GroupBody {
    security_group: NewGroup,
}

#[derive(Deserialize)]
struct NewGroup {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    project_id: Option<String>,
    tenant_id: Option<String>,
}

#[derive(Deserialize)]
struct RuleBody {
    security_group_rule: NewRuleBody,
}

#[derive(Deserialize)]
struct NewRuleBody {
    security_group_id: String,
    direction: Option<String>,
    ethertype: Option<String>,
    /// A name, a number, or null for every protocol.
    #[serde(default)]
    protocol: Value,
    port_range_min: Option<i64>,
    port_range_max: Option<i64>,
    remote_ip_prefix: Option<String>,
    remote_group_id: Option<String>,
    description: Option<String>,
    project_id: Option<String>,
    tenant_id: Option<String>,
}

/// Neutron's error shape.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    reply(
        status,
        json!({"NeutronError": {"type": kind, "message": message, "detail": ""}}),
    )
}

fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "HTTPBadRequest", message)
}

fn forbidden() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "HTTPForbidden",
        "A token acts on its own project only: drop project_id/tenant_id or give the token's project.",
    )
}

/// Neutron's words for a failure and for another project.
const NEUTRON: Service = Service {
    failure,
    other_project: forbidden,
};

fn failure(failure: Failure) -> Response {
    let refusal = match failure {
        Failure::Refused(refusal) => refusal,
        Failure::Broken(message) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "HTTPInternalServerError",
                &message,
            )
        }
    };
    let (status, kind) = match &refusal {
        StateError::Unauthenticated => return unauthorized(),
        StateError::GroupNotFound(_) | StateError::NoSuchProject(_) => {
            (StatusCode::NOT_FOUND, "SecurityGroupNotFound")
        }
        StateError::RuleNotFound(_) => (StatusCode::NOT_FOUND, "SecurityGroupRuleNotFound"),
        StateError::RuleExists(_) => (StatusCode::CONFLICT, "SecurityGroupRuleExists"),
        StateError::GroupInUse(_) => (StatusCode::CONFLICT, "SecurityGroupInUse"),
        StateError::DefaultGroup => (StatusCode::CONFLICT, "SecurityGroupCannotRemoveDefault"),
        _ => (StatusCode::BAD_REQUEST, "HTTPBadRequest"),
    };
    error(status, kind, &refusal.to_string())
}

/// Whether a body names a project other than the caller's.
fn names_other(project_id: &Option<String>, tenant_id: &Option<String>, caller: &str) -> bool {
    [project_id, tenant_id]
        .into_iter()
        .flatten()
        .any(|named| named != caller)
}

/// `POST /network/v2.0/security-groups`.
pub async fn create_group(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    body: Bytes,
) -> Response {
    let new = match parse::<GroupBody>(&body) {
        Ok(body) => body.security_group,
        Err(message) => return bad_request(&message),
    };
    if names_other(&new.project_id, &new.tenant_id, &tenant.project_id) {
        return forbidden();
    }
    let created = cloud.write(|state| {
        let group = state.create_group(&tenant.project_id, &new.name, &new.description)?;
        Ok::<_, StateError>(group_body(state, &tenant.project_id, &group))
    });
    NEUTRON.answer(StatusCode::CREATED, "security_group", created)
}

/// `GET /network/v2.0/security-groups[?name=]`.
pub async fn list_groups(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    NEUTRON.list(
        &cloud,
        &tenant,
        &query,
        "security_groups",
        |state, project| {
            let name = query.get("name").map(String::as_str);
            let groups = state.groups(project, name)?;
            Ok(each(groups, |g| group_body(state, project, g)))
        },
    )
}

/// `GET /network/v2.0/security-groups/{id}`.
pub async fn show_group(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Response {
    let group = cloud.read(|state| {
        state
            .group(&tenant.project_id, &id)
            .map(|g| group_body(state, &tenant.project_id, g))
    });
    NEUTRON.answer(StatusCode::OK, "security_group", group)
}

/// `DELETE /network/v2.0/security-groups/{id}`: 409 while a server uses it.
pub async fn delete_group(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Response {
    NEUTRON.deleted(cloud.delete_group(&tenant.project_id, &id).await)
}

/// `POST /network/v2.0/security-group-rules`: 201 once every server of the project enforces it.
pub async fn create_rule(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    body: Bytes,
) -> Response {
    let given = match parse::<RuleBody>(&body) {
        Ok(body) => body.security_group_rule,
        Err(message) => return bad_request(&message),
    };
    if names_other(&given.project_id, &given.tenant_id, &tenant.project_id) {
        return forbidden();
    }
    let protocol = match given.protocol {
        Value::Null => None,
        Value::String(name) => Some(name),
        Value::Number(number) => Some(number.to_string()),
        _ => return bad_request("protocol: give a name (tcp, udp, icmp), a number, or null"),
    };
    let new = NewRule {
        group_id: given.security_group_id,
        direction: given.direction,
        ethertype: given.ethertype,
        protocol,
        port_range_min: given.port_range_min,
        port_range_max: given.port_range_max,
        remote_ip_prefix: given.remote_ip_prefix,
        remote_group_id: given.remote_group_id,
        description: given.description,
    };
    let created = cloud.create_rule(&tenant.project_id, new).await;
    let created = created.map(|rule| rule_body(&rule, &tenant.project_id));
    NEUTRON.answer(StatusCode::CREATED, "security_group_rule", created)
}

/// `GET /network/v2.0/security-group-rules[?security_group_id=]`.
pub async fn list_rules(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    NEUTRON.list(
        &cloud,
        &tenant,
        &query,
        "security_group_rules",
        |state, project| {
            let group = query.get("security_group_id").map(String::as_str);
            let rules = state.rules(project, group)?;
            Ok(each(rules, |r| rule_body(r, project)))
        },
    )
}

/// `GET /network/v2.0/security-group-rules/{id}`.
pub async fn show_rule(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Response {
    let rule = cloud.read(|state| {
        state
            .rule(&tenant.project_id, &id)
            .map(|r| rule_body(r, &tenant.project_id))
    });
    NEUTRON.answer(StatusCode::OK, "security_group_rule", rule)
}

/// `DELETE /network/v2.0/security-group-rules/{id}`: 204 once no server admits it any more.
pub async fn delete_rule(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Response {
    NEUTRON.deleted(cloud.delete_rule(&tenant.project_id, &id).await)
}

/// A group as Neutron shows it, its rules included.
pub fn group_body(state: &State, project_id: &str, group: &SecurityGroup) -> Value {
    let rules: Vec<Value> = state
        .rules(project_id, Some(&group.id))
        .unwrap_or_default()
        .into_iter()
        .map(|r| rule_body(r, project_id))
        .collect();
    json!({
        "id": group.id,
        "name": group.name,
        "description": group.description,
        "project_id": project_id,
        "tenant_id": project_id,
        "security_group_rules": rules,
    })
}

/// A rule as Neutron shows it.
pub fn rule_body(rule: &Rule, project_id: &str) -> Value {
    json!({
        "id": rule.id,
        "security_group_id": rule.group_id,
        "direction": rule.direction,
        "ethertype": rule.ethertype,
        "protocol": rule.protocol,
        "port_range_min": rule.port_range_min,
        "port_range_max": rule.port_range_max,
        "remote_ip_prefix": rule.remote_ip_prefix,
        "remote_group_id": rule.remote_group_id,
        "description": rule.description,
        "project_id": project_id,
        "tenant_id": project_id,
    })
}
