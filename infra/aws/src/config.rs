//! The AWS SDK's configuration.
//!
//! Every client is built on one HTTP client with rustls and ring, so the SDK needs neither
//! OpenSSL nor its default TLS stack (builds are much shorter on small machines). The region and
//! credentials come from the standard chain (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, roles on Lambda);
//! `AWS_ENDPOINT_URL` or [`for_endpoint`] points every client at a local emulator.

use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

/// The configuration the standard chain finds (environment, profile, Lambda's role).
pub async fn from_env() -> SdkConfig {
    loader().load().await
}

/// The configuration for a local emulator at `endpoint`, in `region`. Emulators check no
/// credentials, so fixed ones are given: the standard chain would otherwise look for a role at
/// the instance-metadata address.
pub async fn for_endpoint(endpoint: &str, region: &str) -> SdkConfig {
    let local = aws_sdk_dynamodb::config::Credentials::new(
        "overture-local",
        "overture-local",
        None,
        None,
        "overture-local-emulator",
    );
    loader()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new(region.to_owned()))
        .credentials_provider(local)
        .load()
        .await
}

fn loader() -> aws_config::ConfigLoader {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest()).http_client(http)
}
