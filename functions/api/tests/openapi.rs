//! The OpenAPI document as a client generator reads it: every parameter where the route takes it.

/// Every parameter of every operation: (path, method, name, in, required).
fn parameters() -> Vec<(String, String, String, String, bool)> {
    let document = serde_json::to_value(overture_api::document()).expect("the document is JSON");
    let mut found = Vec::new();
    for (path, operations) in document["paths"].as_object().expect("paths") {
        for (method, operation) in operations.as_object().expect("operations") {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                found.push((
                    path.clone(),
                    method.clone(),
                    parameter["name"].as_str().expect("a name").to_owned(),
                    parameter["in"].as_str().expect("an in").to_owned(),
                    parameter["required"].as_bool().unwrap_or(false),
                ));
            }
        }
    }
    found
}

#[test]
fn the_query_parameters_are_in_the_query_and_optional() {
    let parameters = parameters();
    for (path, method, name) in [
        ("/v1/deployments", "get", "status"),
        ("/v1/deployments/{id}", "get", "at"),
        ("/v1/deployments/{id}/logs/{step}", "get", "attempt"),
        ("/v1/deployments/{id}/logs/{step}", "get", "destroy"),
        ("/v1/grants", "get", "open"),
    ] {
        let declared: Vec<_> = parameters
            .iter()
            .filter(|p| p.0 == path && p.1 == method && p.2 == name)
            .collect();
        assert_eq!(
            declared.len(),
            1,
            "{method} {path} declares `{name}` once: {declared:?}"
        );
        let (_, _, _, place, required) = declared[0];
        assert_eq!(
            place, "query",
            "{method} {path}: `{name}` is a query parameter"
        );
        assert!(!required, "{method} {path}: `{name}` may be left out");
    }
}

#[test]
fn a_path_parameter_is_one_the_path_names_and_is_required() {
    for (path, method, name, place, required) in parameters() {
        if place == "path" {
            assert!(
                path.contains(&format!("{{{name}}}")),
                "{method} {path} declares `{name}` in the path, which has no such part"
            );
            assert!(required, "{method} {path}: a path parameter is required");
        }
    }
}

/// A client of the project's own virtual environment (`scripts/setup.sh` installs them).
fn client(name: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .expect("the workspace's root");
    let path = root.join(".venv/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    path
}

#[test]
fn a_real_validator_accepts_the_document() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("openapi.json");
    let text =
        serde_json::to_string_pretty(overture_api::document()).expect("the document is JSON");
    std::fs::write(&file, text).expect("write the document");
    let output = std::process::Command::new(client("openapi-spec-validator"))
        .arg(&file)
        .output()
        .expect("run openapi-spec-validator");
    assert!(
        output.status.success(),
        "openapi-spec-validator refuses the document:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether `schema` says what its values hold: a named schema, a list of them, or text.
fn typed(schema: &serde_json::Value) -> bool {
    if schema.get("$ref").is_some() || schema["type"] == "string" {
        return true;
    }
    schema["type"] == "array" && typed(&schema["items"])
}

#[test]
fn every_answer_with_a_body_names_its_schema() {
    let document = serde_json::to_value(overture_api::document()).expect("the document is JSON");
    let mut untyped = Vec::new();
    for (path, operations) in document["paths"].as_object().expect("paths") {
        // The document itself is OpenAPI's own schema.
        if path == "/openapi.json" {
            continue;
        }
        for (method, operation) in operations.as_object().expect("operations") {
            for (status, response) in operation["responses"].as_object().expect("responses") {
                for (media, content) in response["content"].as_object().into_iter().flatten() {
                    if !typed(&content["schema"]) {
                        untyped.push(format!(
                            "{method} {path} {status} {media}: {}",
                            content["schema"]
                        ));
                    }
                }
            }
        }
    }
    assert!(
        untyped.is_empty(),
        "answers without a schema a client generator can type:\n{}",
        untyped.join("\n")
    );
}

#[test]
fn a_link_leads_to_an_operation_of_the_document_with_its_parameters() {
    let document = overture_api::document();
    let mut operations = std::collections::BTreeMap::new();
    for operation in document["paths"].as_object().expect("paths").values() {
        for operation in operation.as_object().expect("operations").values() {
            let parameters: Vec<&str> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str())
                .collect();
            operations.insert(
                operation["operationId"].as_str().expect("an id"),
                parameters,
            );
        }
    }
    let mut links = 0;
    for (path, operation) in document["paths"].as_object().expect("paths") {
        for (method, operation) in operation.as_object().expect("operations") {
            let responses = operation["responses"].as_object().expect("responses");
            for (name, link) in responses
                .values()
                .filter_map(|r| r["links"].as_object())
                .flatten()
            {
                let target = link["operationId"].as_str().unwrap_or_else(|| {
                    panic!("{method} {path}: link `{name}` names no operationId: {link}")
                });
                let parameters = operations
                    .get(target)
                    .unwrap_or_else(|| panic!("{method} {path}: `{name}` leads to no `{target}`"));
                for parameter in link["parameters"].as_object().expect("parameters").keys() {
                    assert!(
                        parameters.contains(&parameter.as_str()),
                        "{method} {path}: `{name}` gives `{target}` a `{parameter}` it does not take"
                    );
                }
                links += 1;
            }
        }
    }
    assert!(
        links > 0,
        "the deployment routes are linked from where ids come from"
    );
}
