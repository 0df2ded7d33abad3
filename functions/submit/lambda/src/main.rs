//! The submit function as a Lambda behind a function URL. Only wiring: the clients are built
//! once from the environment (the stack sets the variables), and each HTTP request goes to
//! `overture_submit::http::on_request`.
//!
//! `OVERTURE_AUTH_URL`, the cloud's identity service (Keystone v3), is optional: without it (or
//! empty) a request that brings a cloud token is refused, as nothing could vouch for the token.

use std::sync::Arc;

use lambda_http::{service_fn, Body, Request, Response};
use overture_aws::function::{init_tracing, setting};
use overture_aws::recording::Recording;
use overture_openstack::Keystone;
use overture_submit::http::{on_request, HttpPorts};
use overture_submit::CheckToken;

/// The adapters, built once per execution environment.
struct Adapters {
    recording: Recording,
    identity: Option<Keystone>,
}

impl Adapters {
    fn ports(&self) -> HttpPorts<'_> {
        HttpPorts {
            submit: self.recording.ports(),
            tokens: self.identity.as_ref().map(|k| k as &dyn CheckToken),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let adapters = Arc::new(Adapters {
        recording: Recording::from_settings(&config, setting)?,
        identity: std::env::var("OVERTURE_AUTH_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .map(Keystone::new),
    });
    lambda_http::run(service_fn(move |request: Request| {
        let adapters = Arc::clone(&adapters);
        async move {
            let response: Response<Body> = on_request(request, &adapters.ports()).await;
            Ok::<_, lambda_http::Error>(response)
        }
    }))
    .await
}
