//! Triggers: rules that turn incoming events into deployments.
//!
//! - [`parse`] reads and checks a trigger file (YAML, a `triggers:` list) into a [`TriggerFile`],
//!   reporting every problem like a blueprint does: the field and the fix.
//! - [`IncomingEvent::from_json`] reads a caller's event: CloudEvents 1.0 JSON, or the
//!   EventBridge shape (`detail-type`, `detail`) mapped onto the same form. A caller's event never
//!   speaks for Overture: the source [`OVERTURE_SOURCE`] is refused
//!   ([`EventError::ReservedSource`]), so no caller can forge or pre-empt a deployment's end.
//!   [`IncomingEvent::from_published_json`] reads what the engine published back, for a
//!   receiver that checks an end against the log before it believes it.
//! - [`Trigger::evaluate`] decides what a trigger does with an event: deploy (with its params
//!   rendered from `{{ event.PATH }}` templates), not match (naming the condition that failed),
//!   or refuse (a chain past [`MAX_CHAIN_DEPTH`], a template the event cannot fill).
//! - [`IncomingEvent::deployment_ended`] is the event a deployment's end publishes, one chain
//!   step deeper than the event that started it.
//!
//! Nothing here reads files, clocks or stores: claiming an event exactly once and starting the
//! deployment are the caller's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

use crate::blueprint::{BlueprintError, BlueprintProblem};
use crate::text::check_name;

/// How many deployments deep a chain of triggers may go: an event whose depth has reached it
/// starts nothing, and that is recorded as refused.
pub const MAX_CHAIN_DEPTH: u32 = 8;

/// The `source` of the events Overture publishes when a deployment ends.
pub const OVERTURE_SOURCE: &str = "overture";

/// The CloudEvents extension attribute that carries a chain's depth.
pub const DEPTH_ATTRIBUTE: &str = "overturedepth";

/// A checked trigger file.
#[derive(Clone, Debug, PartialEq)]
pub struct TriggerFile {
    /// The triggers, in the file's order.
    pub triggers: Vec<Trigger>,
}

/// One rule: on an event like this, deploy that blueprint for that tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct Trigger {
    /// Unique within its file; recorded with every decision.
    pub name: String,
    /// The event `source` it listens to.
    pub source: String,
    /// The event `type` it listens to.
    pub event_type: String,
    /// Dotted paths into the event (`data.channel`) and the values they must equal.
    pub conditions: BTreeMap<String, Value>,
    /// The blueprint to deploy, as written (relative to the trigger file).
    pub deploy: String,
    /// The tenant the deployment is for.
    pub tenant: String,
    /// Parameter values, templated from the event.
    pub params: BTreeMap<String, EventTemplate>,
    /// Secrets, by name, each read from the named environment variable of the receiving process.
    pub secrets: BTreeMap<String, String>,
}

/// A parameter value with `{{ event.PATH }}` references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTemplate {
    pieces: Vec<Piece>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Event(String),
}

impl EventTemplate {
    /// Parses a text that may hold `{{ event.PATH }}` references.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| "`{{` has no closing `}}`".to_owned())?;
            let inner = after[..close].trim();
            let path = inner
                .strip_prefix("event.")
                .filter(|path| !path.is_empty() && path.split('.').all(|p| !p.is_empty()))
                .ok_or_else(|| {
                    format!(
                        "`{{{{ {inner} }}}}` is not an event reference: use {{{{ event.data.NAME }}}} \
                         (or event.id, event.source, event.type)"
                    )
                })?;
            pieces.push(Piece::Event(path.to_owned()));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(Self { pieces })
    }

    /// Fills the references from the event; the error names the first path it lacks.
    pub fn render(&self, event: &IncomingEvent) -> Result<String, String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Event(path) => match event.lookup(path) {
                    Some(Value::String(text)) => out.push_str(text),
                    Some(value @ (Value::Number(_) | Value::Bool(_))) => {
                        out.push_str(&value.to_string());
                    }
                    Some(_) => return Err(format!("event.{path} is not a string or number")),
                    None => return Err(format!("the event has no {path}")),
                },
            }
        }
        Ok(out)
    }
}

/// An event that arrived, in CloudEvents form whatever shape it came in.
#[derive(Clone, Debug, PartialEq)]
pub struct IncomingEvent {
    /// Unique within its source: (source, id) identifies a delivery's event.
    pub id: String,
    /// Who sent it.
    pub source: String,
    /// What happened.
    pub event_type: String,
    /// How many deployments deep in a chain of triggers it is (0 from outside).
    pub depth: u32,
    /// The whole event as a CloudEvents JSON object, for `where` and templates.
    pub document: Value,
}

/// An event that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Not a JSON object.
    #[error("an event is a JSON object (CloudEvents 1.0, or EventBridge's shape)")]
    NotAnObject,
    /// Neither shape.
    #[error("neither a CloudEvent (no `specversion`) nor an EventBridge event (no `detail-type`): send CloudEvents 1.0 JSON with specversion, id, source, type and data")]
    UnknownShape,
    /// A CloudEvent of another version.
    #[error("`specversion` is {0}; only CloudEvents \"1.0\" is accepted")]
    SpecVersion(String),
    /// A required attribute is missing or not a non-empty string.
    #[error("`{0}` is missing or not a non-empty string; every event needs it")]
    Attribute(&'static str),
    /// The depth extension is not a whole number.
    #[error("`overturedepth` must be a whole number (the chain's depth)")]
    Depth,
    /// A caller's event under the source only the engine publishes under.
    #[error(
        "`source` is `overture`, which only the engine publishes under (a deployment's end); \
         send your event under a source of your own"
    )]
    ReservedSource,
}

impl IncomingEvent {
    /// Reads a caller's event: a CloudEvent, or an EventBridge event mapped onto one. The
    /// source [`OVERTURE_SOURCE`] is refused: a deployment's end is delivered by the engine only.
    pub fn from_json(value: Value) -> Result<Self, EventError> {
        let event = Self::from_published_json(value)?;
        if event.source == OVERTURE_SOURCE {
            return Err(EventError::ReservedSource);
        }
        Ok(event)
    }

    /// Reads an event as [`IncomingEvent::from_json`] does, the engine's own source included:
    /// for a receiver of what the engine published, which checks an end against the log.
    pub fn from_published_json(value: Value) -> Result<Self, EventError> {
        let Value::Object(object) = value else {
            return Err(EventError::NotAnObject);
        };
        let text =
            |name: &'static str, object: &serde_json::Map<String, Value>| match object.get(name) {
                Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
                _ => Err(EventError::Attribute(name)),
            };
        let document = if let Some(version) = object.get("specversion") {
            if version != &Value::String("1.0".into()) {
                return Err(EventError::SpecVersion(version.to_string()));
            }
            for name in ["id", "source", "type"] {
                text(name, &object)?;
            }
            object
        } else if object.contains_key("detail-type") {
            let mut mapped = serde_json::Map::new();
            mapped.insert("specversion".into(), "1.0".into());
            mapped.insert("id".into(), text("id", &object)?.into());
            mapped.insert("source".into(), text("source", &object)?.into());
            mapped.insert("type".into(), text("detail-type", &object)?.into());
            for (from, to) in [
                ("time", "time"),
                ("account", "account"),
                ("region", "region"),
            ] {
                if let Some(value) = object.get(from) {
                    mapped.insert(to.into(), value.clone());
                }
            }
            mapped.insert(
                "data".into(),
                object.get("detail").cloned().unwrap_or(Value::Null),
            );
            mapped
        } else {
            return Err(EventError::UnknownShape);
        };
        let depth = match document.get(DEPTH_ATTRIBUTE) {
            None => 0,
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or(EventError::Depth)?,
            Some(Value::String(text)) => text.parse().map_err(|_| EventError::Depth)?,
            Some(_) => return Err(EventError::Depth),
        };
        Ok(Self {
            id: text("id", &document)?,
            source: text("source", &document)?,
            event_type: text("type", &document)?,
            depth,
            document: Value::Object(document),
        })
    }

    /// The event a deployment's end publishes: one step deeper than the one that started it.
    pub fn deployment_ended(
        deployment: &str,
        tenant: &str,
        blueprint: &str,
        status: &str,
        started_by_depth: u32,
    ) -> Self {
        let succeeded = status == "succeeded";
        let event_type = if succeeded {
            "deployment.succeeded"
        } else {
            "deployment.failed"
        };
        let depth = started_by_depth.saturating_add(1);
        let document = serde_json::json!({
            "specversion": "1.0",
            "id": format!("{deployment}.{status}"),
            "source": OVERTURE_SOURCE,
            "type": event_type,
            "datacontenttype": "application/json",
            DEPTH_ATTRIBUTE: depth,
            "data": { "id": deployment, "tenant": tenant, "blueprint": blueprint, "status": status },
        });
        Self {
            id: format!("{deployment}.{status}"),
            source: OVERTURE_SOURCE.into(),
            event_type: event_type.into(),
            depth,
            document,
        }
    }

    /// The value at a dotted path (`data.channel`, `id`), if the event has one.
    pub fn lookup(&self, path: &str) -> Option<&Value> {
        path.split('.')
            .try_fold(&self.document, |value, key| value.as_object()?.get(key))
    }
}

/// What a trigger does with an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Deploy, with these parameter values.
    Deploy {
        /// The rendered parameters.
        params: BTreeMap<String, String>,
    },
    /// The event is not for this trigger; the reason names the condition that failed.
    NotMatched(String),
    /// The event is for this trigger, but it must not deploy; the reason says why.
    Refused(String),
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

impl Trigger {
    /// Decides what this trigger does with the event.
    pub fn evaluate(&self, event: &IncomingEvent) -> Decision {
        if event.source != self.source {
            return Decision::NotMatched(format!(
                "source is `{}`, not `{}`",
                event.source, self.source
            ));
        }
        if event.event_type != self.event_type {
            return Decision::NotMatched(format!(
                "type is `{}`, not `{}`",
                event.event_type, self.event_type
            ));
        }
        for (path, expected) in &self.conditions {
            match event.lookup(path) {
                Some(found) if found == expected => {}
                Some(found) => {
                    return Decision::NotMatched(format!(
                        "where {path}: is `{}`, not `{}`",
                        shown(found),
                        shown(expected)
                    ))
                }
                None => {
                    return Decision::NotMatched(format!("where {path}: the event has no {path}"))
                }
            }
        }
        if event.depth >= MAX_CHAIN_DEPTH {
            return Decision::Refused(format!("chain depth limit {MAX_CHAIN_DEPTH} reached"));
        }
        let mut params = BTreeMap::new();
        for (name, template) in &self.params {
            match template.render(event) {
                Ok(value) => {
                    params.insert(name.clone(), value);
                }
                Err(why) => return Decision::Refused(format!("params.{name}: {why}")),
            }
        }
        Decision::Deploy { params }
    }
}

/// The problems found in a trigger file, each at its field, in the order they were found.
#[derive(Default)]
struct Problems(Vec<BlueprintProblem>);

impl Problems {
    fn add(&mut self, field: &str, text: String) {
        self.0.push(BlueprintProblem {
            field: field.to_owned(),
            problem: text,
        });
    }
}

/// Reads and checks a trigger file; every problem found is reported.
pub fn parse(text: &str) -> Result<TriggerFile, BlueprintError> {
    let root: serde_yaml_ng::Value = match serde_yaml_ng::from_str(text) {
        Ok(root) => root,
        Err(error) => {
            return Err(BlueprintError(vec![BlueprintProblem {
                field: "(top level)".into(),
                problem: format!("not valid YAML: {error}"),
            }]))
        }
    };
    let Some(list) = root
        .as_mapping()
        .and_then(|m| m.get("triggers"))
        .and_then(|t| t.as_sequence())
    else {
        return Err(BlueprintError(vec![BlueprintProblem {
            field: "triggers".into(),
            problem: "missing: a trigger file is a mapping with a `triggers:` list".into(),
        }]));
    };
    let mut problems = Problems::default();
    if let Some(mapping) = root.as_mapping() {
        for key in mapping.keys() {
            if key.as_str() != Some("triggers") {
                problems.add(
                    "(top level)",
                    format!(
                        "unknown field `{}`: only `triggers` is allowed",
                        yaml_text(key)
                    ),
                );
            }
        }
    }
    if list.is_empty() {
        problems.add("triggers", "empty: add at least one trigger".into());
    }
    let mut names = BTreeSet::new();
    let mut triggers = Vec::new();
    for (index, item) in list.iter().enumerate() {
        triggers.extend(parse_trigger(index, item, &mut names, &mut problems));
    }
    if problems.0.is_empty() {
        Ok(TriggerFile { triggers })
    } else {
        Err(BlueprintError(problems.0))
    }
}

/// The trigger at `index` of the list, when it has all it needs; what is wrong with it goes to
/// `problems`. `names` holds the names taken so far.
fn parse_trigger(
    index: usize,
    item: &serde_yaml_ng::Value,
    names: &mut BTreeSet<String>,
    problems: &mut Problems,
) -> Option<Trigger> {
    let Some(map) = item.as_mapping() else {
        problems.add(
            &format!("triggers[{index}]"),
            "a trigger is a mapping with name, on, deploy and tenant".into(),
        );
        return None;
    };
    let get = |key: &str| map.get(key);
    let name = get("name").and_then(|v| v.as_str()).map(str::to_owned);
    let at = match &name {
        Some(name) => format!("triggers.{name}"),
        None => format!("triggers[{index}]"),
    };
    match &name {
        None => problems.add(
            &format!("{at}.name"),
            "missing: give the trigger a name (it is recorded with every decision)".into(),
        ),
        Some(name) => {
            if let Err(error) = check_name(name) {
                problems.add(&format!("{at}.name"), error.to_string());
            } else if !names.insert(name.clone()) {
                problems.add(
                    &format!("{at}.name"),
                    "used twice: every trigger needs its own name".into(),
                );
            }
        }
    }
    for key in map.keys() {
        let key = yaml_text(key);
        if ![
            "name", "on", "where", "deploy", "tenant", "params", "secrets",
        ]
        .contains(&key.as_str())
        {
            problems.add(
                &format!("{at}.{key}"),
                "unknown field: expected name, on, where, deploy, tenant, params or secrets".into(),
            );
        }
    }
    let (source, event_type) = trigger_on(&at, get("on"), problems);
    let conditions = trigger_where(&at, get("where"), problems);
    let deploy = get("deploy").and_then(|v| v.as_str());
    if deploy.is_none_or(str::is_empty) {
        problems.add(
            &format!("{at}.deploy"),
            "missing: the blueprint file to deploy, relative to the trigger file".into(),
        );
    }
    let tenant = get("tenant").and_then(|v| v.as_str());
    match tenant {
        None => problems.add(
            &format!("{at}.tenant"),
            "missing: the tenant the deployment is for".into(),
        ),
        Some(tenant) => {
            if let Err(error) = check_name(tenant) {
                problems.add(&format!("{at}.tenant"), error.to_string());
            }
        }
    }
    let params = trigger_params(&at, get("params"), problems);
    let secrets = trigger_secrets(&at, get("secrets"), problems);
    let (Some(name), Some(source), Some(event_type), Some(deploy), Some(tenant)) =
        (name, source, event_type, deploy, tenant)
    else {
        return None;
    };
    Some(Trigger {
        name,
        source: source.to_owned(),
        event_type: event_type.to_owned(),
        conditions,
        deploy: deploy.to_owned(),
        tenant: tenant.to_owned(),
        params,
        secrets,
    })
}

/// `on`: the source and type of the events the trigger listens to.
fn trigger_on<'a>(
    at: &str,
    on: Option<&'a serde_yaml_ng::Value>,
    problems: &mut Problems,
) -> (Option<&'a str>, Option<&'a str>) {
    let on = on.and_then(|v| v.as_mapping());
    let on_text = |key: &str| on.and_then(|m| m.get(key)).and_then(|v| v.as_str());
    let source = on_text("source");
    let event_type = on_text("type");
    if on.is_none() {
        problems.add(
            &format!("{at}.on"),
            "missing: say which events it listens to, as on: { source: S, type: T }".into(),
        );
    } else {
        if source.is_none_or(str::is_empty) {
            problems.add(
                &format!("{at}.on.source"),
                "missing: the event source to listen to, e.g. `artifacts`".into(),
            );
        }
        if event_type.is_none_or(str::is_empty) {
            problems.add(
                &format!("{at}.on.type"),
                "missing: the event type to listen to, e.g. `release.published`".into(),
            );
        }
        for key in on.into_iter().flat_map(|m| m.keys()) {
            let key = yaml_text(key);
            if key != "source" && key != "type" {
                problems.add(
                    &format!("{at}.on.{key}"),
                    "unknown field: `on` takes source and type".into(),
                );
            }
        }
    }
    (source, event_type)
}

/// `where`: the event's fields, by dotted path, and the values they must hold.
fn trigger_where(
    at: &str,
    value: Option<&serde_yaml_ng::Value>,
    problems: &mut Problems,
) -> BTreeMap<String, serde_json::Value> {
    let mut conditions = BTreeMap::new();
    match value {
        None => {}
        Some(serde_yaml_ng::Value::Mapping(map)) => {
            for (key, value) in map {
                let path = yaml_text(key);
                let scalar = matches!(
                    value,
                    serde_yaml_ng::Value::String(_)
                        | serde_yaml_ng::Value::Number(_)
                        | serde_yaml_ng::Value::Bool(_)
                );
                if path.is_empty() || path.split('.').any(str::is_empty) {
                    problems.add(
                        &format!("{at}.where"),
                        format!("`{path}` is not a dotted path such as data.channel"),
                    );
                } else if !scalar {
                    problems.add(
                        &format!("{at}.where.{path}"),
                        "must be a single value (text, number or true/false) to match exactly"
                            .into(),
                    );
                } else if let Ok(json) = serde_json::to_value(value) {
                    conditions.insert(path, json);
                }
            }
        }
        Some(_) => problems.add(
            &format!("{at}.where"),
            "must be a mapping of dotted paths to values, e.g. { \"data.channel\": stable }".into(),
        ),
    }
    conditions
}

/// `params`: the deployment's parameters, each a template of the event.
fn trigger_params(
    at: &str,
    value: Option<&serde_yaml_ng::Value>,
    problems: &mut Problems,
) -> BTreeMap<String, EventTemplate> {
    let mut params = BTreeMap::new();
    match value {
        None => {}
        Some(serde_yaml_ng::Value::Mapping(map)) => {
            for (key, value) in map {
                let key = yaml_text(key);
                let text = match value {
                    serde_yaml_ng::Value::String(text) => text.clone(),
                    serde_yaml_ng::Value::Number(n) => n.to_string(),
                    serde_yaml_ng::Value::Bool(b) => b.to_string(),
                    _ => {
                        problems.add(
                            &format!("{at}.params.{key}"),
                            "must be a text, e.g. \"{{ event.data.version }}\"".into(),
                        );
                        continue;
                    }
                };
                match EventTemplate::parse(&text) {
                    Ok(template) => {
                        params.insert(key, template);
                    }
                    Err(why) => problems.add(&format!("{at}.params.{key}"), why),
                }
            }
        }
        Some(_) => problems.add(
            &format!("{at}.params"),
            "must be a mapping of parameter names to values".into(),
        ),
    }
    params
}

/// `secrets`: the deployment's secrets, each by the environment variable that holds it.
fn trigger_secrets(
    at: &str,
    value: Option<&serde_yaml_ng::Value>,
    problems: &mut Problems,
) -> BTreeMap<String, String> {
    let mut secrets = BTreeMap::new();
    match value {
        None => {}
        Some(serde_yaml_ng::Value::Mapping(map)) => {
            for (key, value) in map {
                match value.as_str().filter(|v| !v.is_empty()) {
                    Some(variable) => {
                        secrets.insert(yaml_text(key), variable.to_owned());
                    }
                    None => problems.add(
                        &format!("{at}.secrets.{}", yaml_text(key)),
                        "must name the environment variable that holds the value".into(),
                    ),
                }
            }
        }
        Some(_) => problems.add(
            &format!("{at}.secrets"),
            "must be a mapping of secret names to environment variable names".into(),
        ),
    }
    secrets
}

fn yaml_text(value: &serde_yaml_ng::Value) -> String {
    match value {
        serde_yaml_ng::Value::String(text) => text.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|text| text.trim_end().to_owned())
            .unwrap_or_default(),
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Deploy { .. } => write!(f, "matched"),
            Decision::NotMatched(why) => write!(f, "not matched: {why}"),
            Decision::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FILE: &str = r#"
triggers:
  - name: deploy-on-release
    on: { source: artifacts, type: release.published }
    where: { "data.channel": stable }
    deploy: ../hello-world/blueprint.yaml
    tenant: acme
    params: { version: "v{{ event.data.version }}" }
"#;

    fn given_trigger() -> Trigger {
        parse(FILE).expect("valid").triggers.remove(0)
    }

    fn event(value: Value) -> IncomingEvent {
        IncomingEvent::from_json(value).expect("valid event")
    }

    fn release(channel: &str) -> IncomingEvent {
        event(json!({
            "specversion": "1.0", "id": "e-1", "source": "artifacts",
            "type": "release.published", "data": { "channel": channel, "version": "1.2.3" }
        }))
    }

    #[test]
    fn a_matching_event_deploys_with_templated_params() {
        let decision = given_trigger().evaluate(&release("stable"));
        assert_eq!(
            decision,
            Decision::Deploy {
                params: BTreeMap::from([("version".into(), "v1.2.3".into())])
            }
        );
    }

    #[test]
    fn a_failed_where_names_the_condition() {
        let decision = given_trigger().evaluate(&release("beta"));
        assert_eq!(
            decision,
            Decision::NotMatched("where data.channel: is `beta`, not `stable`".into())
        );
    }

    #[test]
    fn another_type_does_not_match() {
        let mut other = release("stable");
        other.event_type = "release.drafted".into();
        assert_eq!(
            given_trigger().evaluate(&other),
            Decision::NotMatched("type is `release.drafted`, not `release.published`".into())
        );
    }

    #[test]
    fn a_template_the_event_cannot_fill_is_refused() {
        let event = event(json!({
            "specversion": "1.0", "id": "e-2", "source": "artifacts",
            "type": "release.published", "data": { "channel": "stable" }
        }));
        assert_eq!(
            given_trigger().evaluate(&event),
            Decision::Refused("params.version: the event has no data.version".into())
        );
    }

    #[test]
    fn an_eventbridge_event_maps_to_the_same_form() {
        let event = event(json!({
            "version": "0", "id": "e-1", "source": "artifacts", "detail-type": "release.published",
            "time": "2026-01-01T00:00:00Z", "detail": { "channel": "stable", "version": "1.2.3" }
        }));
        assert_eq!(event.event_type, "release.published");
        assert_eq!(event.lookup("data.version"), Some(&json!("1.2.3")));
        assert!(matches!(
            given_trigger().evaluate(&event),
            Decision::Deploy { .. }
        ));
    }

    #[test]
    fn bad_events_say_what_is_wrong() {
        assert_eq!(
            IncomingEvent::from_json(json!({"specversion": "0.3", "id": "x"})),
            Err(EventError::SpecVersion("\"0.3\"".into()))
        );
        assert_eq!(
            IncomingEvent::from_json(json!({"specversion": "1.0", "id": "x", "type": "t"})),
            Err(EventError::Attribute("source"))
        );
        assert_eq!(
            IncomingEvent::from_json(json!({"id": "x"})),
            Err(EventError::UnknownShape)
        );
        assert_eq!(
            IncomingEvent::from_json(json!([])),
            Err(EventError::NotAnObject)
        );
    }

    #[test]
    fn a_callers_event_cannot_speak_for_overture() {
        let forged = json!({
            "specversion": "1.0", "id": "d1.succeeded", "source": OVERTURE_SOURCE,
            "type": "deployment.succeeded", "data": { "id": "d1" }
        });
        assert_eq!(
            IncomingEvent::from_json(forged.clone()),
            Err(EventError::ReservedSource)
        );
        let bridged = json!({
            "id": "d1.succeeded", "source": OVERTURE_SOURCE,
            "detail-type": "deployment.succeeded", "detail": {}
        });
        assert_eq!(
            IncomingEvent::from_json(bridged),
            Err(EventError::ReservedSource)
        );
        assert!(EventError::ReservedSource.to_string().contains("`source`"));
        let published = IncomingEvent::deployment_ended("d1", "acme", "b", "succeeded", 0);
        assert_eq!(
            IncomingEvent::from_published_json(published.document.clone()),
            Ok(published)
        );
    }

    #[test]
    fn a_chain_stops_at_the_depth_limit() {
        let trigger = Trigger {
            source: OVERTURE_SOURCE.into(),
            event_type: "deployment.succeeded".into(),
            conditions: BTreeMap::new(),
            params: BTreeMap::new(),
            ..given_trigger()
        };
        let shallow = IncomingEvent::deployment_ended("d1", "acme", "b", "succeeded", 0);
        assert_eq!(shallow.depth, 1);
        assert!(matches!(
            trigger.evaluate(&shallow),
            Decision::Deploy { .. }
        ));
        let deep = IncomingEvent::deployment_ended("d8", "acme", "b", "succeeded", 7);
        assert_eq!(
            trigger.evaluate(&deep),
            Decision::Refused("chain depth limit 8 reached".into())
        );
    }

    #[test]
    fn an_invalid_file_names_each_field_and_the_fix() {
        let problems = parse(
            "triggers:\n  - name: a\n    on: { source: s }\n    tenant: acme\n    colour: red\n    params: { v: \"{{ params.x }}\" }\n",
        )
        .expect_err("invalid");
        let fields: Vec<_> = problems.0.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "triggers.a.colour",
                "triggers.a.on.type",
                "triggers.a.deploy",
                "triggers.a.params.v"
            ]
        );
        assert!(problems.0[3].problem.contains("event.data.NAME"));
        assert_eq!(
            parse("name: x\n").expect_err("no list").0[0].field,
            "triggers"
        );
    }
}
