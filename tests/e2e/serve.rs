//! `overture serve`, the HTTP API: a real server process on loopback, its callers authenticated
//! by tokens of a local cloud's projects. Tenant A deploys and follows; tenant B sees nothing of
//! A's; bad tokens and bad bodies change nothing; Server-Sent Events resume without gaps or
//! repeats; the OpenAPI document lists every route; SIGTERM stops it gracefully.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::{code, parsed, streamed_all, Client, Server};
use crate::http::Gate;
use crate::local_cloud::LocalCloud;
use crate::support::{files_containing, text, types, Overture};

const SECRET: &str = "http-s3cr3t-never-shown";

const BLUEPRINT: &str = r#"
name: over-http
secrets: [password]
steps:
  first:
    run: script
    with: { command: 'echo "password={{ secrets.password }}"; echo first done' }
  second:
    run: script
    needs: [first]
    with: { command: 'sleep 1; echo second done' }
  third:
    run: script
    needs: [second]
    with: { command: 'echo third done' }
"#;

fn request() -> Value {
    json!({"blueprint": BLUEPRINT, "secrets": {"password": SECRET}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_deploys_over_http_and_another_tenant_sees_nothing_of_it() {
    let cloud = LocalCloud::up();
    let (_, token_a) = cloud.token("acme");
    let (_, token_b) = cloud.token("globex");
    let acme = cloud.project_id("acme");
    let globex = cloud.project_id("globex");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let (a, b) = (Client::new(&token_a), Client::new(&token_b));
    let mut answers = Vec::new();

    let response = a
        .http
        .post(server.at("/v1/deployments"))
        .header("X-Auth-Token", &token_a)
        .json(&request())
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()[LOCATION]
        .to_str()
        .expect("a location")
        .to_owned();
    let created = parsed(&response.text().await.expect("body"));
    let id = created["id"].as_str().expect("an id").to_owned();
    assert_eq!(location, format!("/v1/deployments/{id}"));
    assert_eq!(
        created["tenant"], acme,
        "the tenant is the token's project id"
    );
    assert_eq!(
        created["project"],
        json!({"name": "acme", "domain": "Default"}),
        "its name and domain beside it"
    );

    // Followed to its end through the stream, then read.
    let streamed = a
        .events(
            &server.at(&format!("/v1/deployments/{id}/events")),
            None,
            |_, _| false,
        )
        .await;
    assert_eq!(
        streamed.last().map(|(_, event, _)| event.as_str()),
        Some("DeploymentSucceeded")
    );
    let (status, body) = a.get(&server.at(&location)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = parsed(&body);
    assert_eq!(view["status"], "succeeded", "{body}");
    assert_eq!(view["steps"]["third"]["status"], "succeeded", "{body}");
    answers.push(body);

    // As it stood after its request, folded from the log alone.
    let (status, body) = a.get(&server.at(&format!("{location}?at=0"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(parsed(&body)["status"], "running", "{body}");
    assert_eq!(parsed(&body)["revision"], 0, "{body}");
    let (status, body) = a.get(&server.at(&format!("{location}?at=9999"))).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "bad_request"),
        "{body}"
    );

    for query in ["", "?status=succeeded"] {
        let (status, body) = a.get(&server.at(&format!("/v1/deployments{query}"))).await;
        assert_eq!(status, StatusCode::OK);
        let listed = parsed(&body);
        let ids: Vec<&str> = listed
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|v| v["id"].as_str())
            .collect();
        assert_eq!(ids, [id.as_str()], "{query}");
        answers.push(body);
    }
    let (status, body) = a.get(&server.at("/v1/deployments?status=running")).await;
    assert_eq!((status, parsed(&body)), (StatusCode::OK, json!([])));
    let (status, body) = a.get(&server.at("/v1/deployments?status=sideways")).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );

    let (status, body) = a
        .get(&server.at(&format!("/v1/deployments/{id}/events")))
        .await;
    assert_eq!(status, StatusCode::OK);
    let events = parsed(&body).as_array().expect("envelopes").clone();
    assert_eq!(types(&events), types(&o.events(&id)), "the log as recorded");
    answers.push(body);

    let (status, body) = a
        .get(&server.at(&format!("/v1/deployments/{id}/logs/first")))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("password=") && body.contains("first done"),
        "{body}"
    );
    answers.push(body);

    let (status, body) = a.get(&server.at("/v1/tenant")).await;
    assert_eq!(status, StatusCode::OK);
    let summary = parsed(&body);
    assert_eq!(
        (summary["tenant"].clone(), summary["succeeded"].clone()),
        (json!(acme), json!(1))
    );
    let (status, body) = a.get(&server.at("/v1/grants")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(parsed(&body)
        .as_array()
        .expect("grants")
        .iter()
        .all(|g| g["tenant"] == acme.as_str()));
    answers.push(body);

    let (status, body) = a
        .post(
            &server.at(&format!("/v1/deployments/{id}/cancel")),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::CONFLICT, "conflict")
    );

    // Tenant B: A's deployment does not exist, on every route.
    for path in [
        format!("/v1/deployments/{id}"),
        format!("/v1/deployments/{id}?at=0"),
        format!("/v1/deployments/{id}/events"),
        format!("/v1/deployments/{id}/logs/first"),
    ] {
        let (status, body) = b.get(&server.at(&path)).await;
        assert_eq!(
            (status, code(&body).as_str()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    let streamed = b
        .http
        .get(server.at(&format!("/v1/deployments/{id}/events")))
        .header("X-Auth-Token", &token_b)
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .expect("GET");
    assert_eq!(streamed.status(), StatusCode::NOT_FOUND);
    let (status, body) = b
        .post(
            &server.at(&format!("/v1/deployments/{id}/cancel")),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, body) = b.get(&server.at("/v1/deployments")).await;
    assert_eq!((status, parsed(&body)), (StatusCode::OK, json!([])));
    let (_, body) = b.get(&server.at("/v1/tenant")).await;
    assert_eq!(
        (
            parsed(&body)["tenant"].clone(),
            parsed(&body)["total"].clone()
        ),
        (json!(globex), json!(0))
    );
    let (_, body) = b.get(&server.at("/v1/grants")).await;
    assert_eq!(parsed(&body), json!([]));

    // The secret given over HTTP: in no answer, no event, no log, no file.
    for answer in &answers {
        assert!(!answer.contains(SECRET), "{answer}");
    }
    for (_, _, data) in &streamed_all(&a, &server, &id).await {
        assert!(!data.to_string().contains(SECRET));
    }
    assert_eq!(
        files_containing(&o.data_dir(), SECRET.as_bytes()),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_tokens_and_bad_requests_are_refused_and_nothing_is_recorded() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let expired = std::fs::read_to_string(cloud.expired_token("acme")).expect("expired token");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let url = server.at("/v1/deployments");
    let http = reqwest::Client::new();

    // Missing, unknown and expired tokens.
    for given in [None, Some("gAAAAA-not-a-token"), Some(expired.trim())] {
        for post in [false, true] {
            let mut request = if post {
                http.post(&url).json(&request())
            } else {
                http.get(&url)
            };
            if let Some(token) = given {
                request = request.header("X-Auth-Token", token);
            }
            let response = request.send().await.expect("request");
            let status = response.status();
            let body = response.text().await.expect("body");
            assert_eq!(
                (status, code(&body).as_str()),
                (StatusCode::UNAUTHORIZED, "unauthorized"),
                "{given:?} {body}"
            );
        }
    }

    let send = |body: Vec<u8>, content_type: &'static str| {
        http.post(&url)
            .header("X-Auth-Token", &token)
            .header(CONTENT_TYPE, content_type)
            .body(body)
            .send()
    };
    let mut unknown_field = request();
    unknown_field["tenant"] = json!("someone-else");
    let mut huge = request();
    huge["params"] = json!({"filler": "x".repeat(1024 * 1024)});
    let invalid = json!({"blueprint": "name: broken\nsteps: {}\n"});
    for (body, content_type, status, expected) in [
        (
            b"{\"blueprint\": ".to_vec(),
            "application/json",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            b"not json at all".to_vec(),
            "application/json",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            unknown_field.to_string().into_bytes(),
            "application/json",
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            huge.to_string().into_bytes(),
            "application/json",
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        ),
        (
            request().to_string().into_bytes(),
            "text/plain",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported",
        ),
        (
            invalid.to_string().into_bytes(),
            "application/json",
            StatusCode::BAD_REQUEST,
            "invalid",
        ),
    ] {
        let response = send(body, content_type).await.expect("POST");
        let got = response.status();
        let answer = response.text().await.expect("body");
        assert_eq!(
            (got, code(&answer).as_str()),
            (status, expected),
            "{answer}"
        );
        assert!(!parsed(&answer)["message"]
            .as_str()
            .unwrap_or_default()
            .is_empty());
        assert!(!answer.contains(SECRET), "{answer}");
    }

    let (status, body) = Client::new(&token).get(&url).await;
    assert_eq!(
        (status, parsed(&body)),
        (StatusCode::OK, json!([])),
        "nothing recorded"
    );
    let listed = o.json(&["list", "--json"]);
    assert_eq!(listed, json!([]), "nothing recorded in the data directory");
    assert_eq!(
        files_containing(&o.data_dir(), SECRET.as_bytes()),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_sent_events_deliver_each_event_once_in_order_and_resume_after_a_reconnect() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let client = Client::new(&token);
    let (status, body) = client.post(&server.at("/v1/deployments"), &request()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    let url = server.at(&format!("/v1/deployments/{id}/events"));

    // Leave after the first step has succeeded, and come back.
    let before = client
        .events(&url, None, |event, _| event == "StepSucceeded")
        .await;
    let last = before.last().expect("some events").0.to_string();
    let after = client.events(&url, Some(&last), |_, _| false).await;

    let revisions: Vec<u64> = before.iter().chain(&after).map(|(id, ..)| *id).collect();
    let recorded = o.events(&id);
    assert_eq!(
        revisions,
        (0..recorded.len() as u64).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let streamed: Vec<String> = before
        .iter()
        .chain(&after)
        .map(|(_, e, _)| e.clone())
        .collect();
    assert_eq!(streamed, types(&recorded));
    for ((revision, event, data), envelope) in before.iter().chain(&after).zip(&recorded) {
        assert_eq!(data, envelope, "event {revision} ({event}) as recorded");
    }
    assert_eq!(
        streamed.last().map(String::as_str),
        Some("DeploymentSucceeded")
    );

    // Once it has ended, a stream resumed at its last event ends at once, empty.
    let end = revisions.last().expect("events").to_string();
    assert!(client
        .events(&url, Some(&end), |_, _| false)
        .await
        .is_empty());
    let bad = client
        .http
        .get(&url)
        .header("X-Auth-Token", &token)
        .header(ACCEPT, "text/event-stream")
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .expect("GET");
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_lists_every_route() {
    let o = Overture::new();
    // No route below asks the identity service, which is never reached.
    let server = Server::start(&o, "http://127.0.0.1:9/identity/v3");
    let http = reqwest::Client::new();
    let health = http.get(server.at("/healthz")).send().await.expect("GET");
    assert_eq!(health.status(), StatusCode::OK);
    let document: Value = http
        .get(server.at("/openapi.json"))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON");
    assert!(document["openapi"]
        .as_str()
        .expect("a version")
        .starts_with("3."));
    let mut routes: Vec<String> = document["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("an item")
                .keys()
                .map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        .collect();
    routes.sort();
    assert_eq!(
        routes,
        [
            "GET /healthz",
            "GET /openapi.json",
            "GET /v1/deployments",
            "GET /v1/deployments/{id}",
            "GET /v1/deployments/{id}/events",
            "GET /v1/deployments/{id}/logs/{step}",
            "GET /v1/grants",
            "GET /v1/services",
            "GET /v1/tenant",
            "POST /v1/deployments",
            "POST /v1/deployments/{id}/cancel",
            "POST /v1/deployments/{id}/redrive",
            "POST /v1/events",
        ]
    );
    let wrong = http
        .delete(server.at("/healthz"))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        code(&wrong.text().await.expect("body")),
        "method_not_allowed"
    );
    let missing = http
        .get(server.at("/v1/nowhere"))
        .send()
        .await
        .expect("GET");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(code(&missing.text().await.expect("body")), "not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_resumes_a_deployment_when_its_tenant_comes_back() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let client = Client::new(&token);
    let blueprint = r#"
name: resumable-over-http
steps:
  first:
    run: script
    with: { command: 'echo first' }
  slow:
    run: script
    needs: [first]
    with: { command: 'if [ "$OVERTURE_ATTEMPT" = 1 ]; then sleep 120; fi; echo slow done' }
"#;
    let server = Server::start(&o, &cloud.auth_url);
    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": blueprint}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    let path = format!("/v1/deployments/{id}/events");
    let started = client
        .events(&server.at(&path), None, |event, data| {
            event == "StepStarted" && data["data"]["step"] == "slow"
        })
        .await;
    let last = started.last().expect("events").0.to_string();
    drop(server);

    // Its token's seal opens only with a token of its project: it goes on at the first request
    // of its tenant.
    let server = Server::start(&o, &cloud.auth_url);
    let rest = client
        .events(&server.at(&path), Some(&last), |_, _| false)
        .await;
    let streamed: Vec<String> = rest.iter().map(|(_, e, _)| e.clone()).collect();
    assert_eq!(
        streamed.last().map(String::as_str),
        Some("DeploymentSucceeded"),
        "{streamed:?}"
    );
    let interrupted = rest
        .iter()
        .find(|(_, e, _)| e == "StepAttemptFailed")
        .expect("the first attempt of `slow` was recorded as interrupted");
    assert_eq!(
        interrupted.2["data"]["error_class"], "interrupted",
        "{}",
        interrupted.2
    );
    let (_, body) = client
        .get(&server.at(&format!("/v1/deployments/{id}")))
        .await;
    assert_eq!(parsed(&body)["steps"]["slow"]["attempts"], 2, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_deployment_is_cancelled_over_http() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let client = Client::new(&token);
    let server = Server::start(&o, &cloud.auth_url);
    let blueprint = "name: cancelled-over-http\nsteps:\n  slow:\n    run: script\n    with: { command: 'sleep 120' }\n";
    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": blueprint}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    let path = format!("/v1/deployments/{id}/events");
    let started = client
        .events(&server.at(&path), None, |event, _| event == "StepStarted")
        .await;
    let last = started.last().expect("events").0.to_string();

    let (status, body) = client
        .post(
            &server.at(&format!("/v1/deployments/{id}/cancel")),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let rest = client
        .events(&server.at(&path), Some(&last), |_, _| false)
        .await;
    let end = rest.last().expect("events");
    assert_eq!(end.1, "DeploymentCancelled", "{rest:?}");
    assert_eq!(
        end.2["metadata"]["actor"].as_str().map(|a| !a.is_empty()),
        Some(true)
    );
    let (_, body) = client
        .get(&server.at(&format!("/v1/deployments/{id}")))
        .await;
    assert_eq!(parsed(&body)["status"], "cancelled", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_the_server_gracefully_and_resume_carries_on_what_it_left() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    let o = Overture::new();
    let client = Client::new(&token);
    // `first` runs until its gate opens, which the test does only once the server has taken the
    // SIGTERM (its port is closed): the step is running when the stop comes, however slow the
    // machine, and `second` must not start after it ends.
    let gate = Gate::new();
    let blueprint = format!(
        r#"
name: stopped-gracefully
egress: ["{}"]
steps:
  first:
    run: http
    with: {{ url: "{}" }}
  second:
    run: script
    needs: [first]
    with: {{ command: 'echo second done' }}
"#,
        gate.address(),
        gate.url()
    );
    let mut server = Server::with_flags(&o, &cloud.auth_url, &["--allow-loopback-egress"]);
    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": blueprint}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    tokio::task::block_in_place(|| gate.wait_called());

    let address = server.url.trim_start_matches("http://").to_owned();
    server.terminate();
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(&address).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the port is still open after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gate.open();
    // The step running finishes first: a generous deadline, never a fixed wait.
    assert_eq!(
        tokio::task::block_in_place(|| server.exited_within(Duration::from_secs(120))),
        0
    );

    // What ran was recorded as it ended, not cut short; the rest is for `resume`.
    let status = o.json(&["status", &id, "--json"]);
    assert_eq!(status["steps"]["first"]["status"], "succeeded", "{status}");
    assert_ne!(status["status"], "succeeded", "{status}");
    let resumed = o.run(&[
        "resume",
        "--token-file",
        token_file.to_str().expect("a path"),
        "--auth-url",
        &cloud.auth_url,
    ]);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let status = o.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["steps"]["first"]["attempts"], 1, "never interrupted");
    assert_eq!(status["steps"]["second"]["attempts"], 1, "{status}");
}
