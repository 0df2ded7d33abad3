//! The submit function as a Lambda behind a function URL. Only wiring: the clients are built
//! once from the environment (the stack sets the variables), and each HTTP request goes to
//! `overture_submit::http::on_request`.
//!
//! `OVERTURE_AUTH_URL`, the cloud's identity service (Keystone v3), is optional: without it (or
//! empty) a request that brings a cloud token is refused, as nothing could vouch for the token.

use std::sync::Arc;

use lambda_http::{service_fn, Body, Request, Response};
use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::{init_tracing, setting};
use overture_aws::kept::KeptStates;
use overture_aws::s3::S3Payloads;
use overture_aws::seals::KmsSeals;
use overture_kit::SystemClock;
use overture_openstack::Keystone;
use overture_submit::http::{on_request, HttpPorts};
use overture_submit::{CheckToken, SubmitPorts};

/// The adapters, built once per execution environment.
struct Adapters {
    log: DynamoDeployments,
    seals: KmsSeals,
    payloads: S3Payloads,
    identity: Option<Keystone>,
}

impl Adapters {
    fn ports(&self) -> HttpPorts<'_> {
        HttpPorts {
            submit: SubmitPorts {
                log: &self.log,
                seals: &self.seals,
                payloads: &self.payloads,
            },
            tokens: self.identity.as_ref().map(|k| k as &dyn CheckToken),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    let key = setting("OVERTURE_KMS_KEY")?;
    let custody = Arc::new(KmsTokenCustody::new(
        kms.clone(),
        dynamodb.clone(),
        setting("OVERTURE_CUSTODY_TABLE")?,
        key.clone(),
    ));
    let adapters = Arc::new(Adapters {
        log: DynamoDeployments::new(
            dynamodb.clone(),
            setting("OVERTURE_EVENTS_TABLE")?,
            Arc::new(SystemClock),
        ),
        seals: KmsSeals::new(
            kms,
            dynamodb,
            setting("OVERTURE_SEALS_TABLE")?,
            key,
            custody,
            // Submit keeps no step state; the seal's other half is the runner's and the purge's.
            KeptStates::new(
                overture_aws::s3::client(&config),
                setting("OVERTURE_PAYLOADS_BUCKET")?,
            ),
        ),
        payloads: S3Payloads::new(
            overture_aws::s3::client(&config),
            setting("OVERTURE_PAYLOADS_BUCKET")?,
        ),
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
