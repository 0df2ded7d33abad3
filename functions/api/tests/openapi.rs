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
