//! SigV4 for the submit function's URL, whose auth type is `AWS_IAM`: a caller signs its request
//! with its AWS credentials ([`sign`], as `overture --backend aws deploy` does), and Lambda
//! checks the signature before the function sees the request. [`verify`] is that check, for the
//! local stand-in of Lambda's door (`overture-local-aws urls`): `cargo lambda watch` checks
//! nothing.
//!
//! Both sides use the SDK's own signer (`aws-sigv4`): the check signs the request again as it
//! arrived, with the key the signature names and the time it was signed at, and compares.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{self, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;

/// The service a function URL's requests are signed for.
pub const SERVICE: &str = "lambda";

/// How far a signature's time may be from now: AWS refuses requests signed more than 15 minutes
/// away, so a captured request cannot be replayed later.
pub const SKEW: Duration = Duration::from_secs(15 * 60);

/// The request could not be signed (a URL or a header the signer cannot read).
#[derive(Debug, thiserror::Error)]
#[error("could not sign the request: {0}")]
pub struct SigningError(String);

/// Why a request's signature was refused. None of them holds a secret key or a signature.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No `Authorization` header, or not a SigV4 one.
    #[error("the request is not signed (no SigV4 Authorization header)")]
    Unsigned,
    /// The `Authorization` header or `X-Amz-Date` cannot be read.
    #[error("the request's signature cannot be read: {0}")]
    Malformed(&'static str),
    /// The access key is not one this door knows.
    #[error("the access key {0} is not known here")]
    UnknownKey(String),
    /// Signed for another region or service.
    #[error("the request is signed for {0}, not for this function URL ({1})")]
    WrongScope(String, String),
    /// Signed too long ago, or in the future.
    #[error("the request was signed more than 15 minutes from now")]
    Stale,
    /// The signature does not match the request: it was changed, or signed with another secret.
    #[error("the signature does not match the request")]
    Mismatch,
}

/// The headers to add to a request so that it is signed: `authorization`, `x-amz-date`, and
/// `x-amz-security-token` with temporary credentials. `url` is the whole URL, already encoded;
/// `headers` are the request's own headers to sign (say its `content-type`).
pub fn sign(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    credentials: &Credentials,
    region: &str,
    at: SystemTime,
) -> Result<Vec<(String, String)>, SigningError> {
    let signature = signing(method, url, headers, body, credentials, region, at)?;
    Ok(signature
        .output()
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

fn signing(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    credentials: &Credentials,
    region: &str,
    at: SystemTime,
) -> Result<aws_sigv4::SigningOutput<http_request::SigningInstructions>, SigningError> {
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(at)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SigningError(e.to_string()))?
        .into();
    let request = SignableRequest::new(
        method,
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| SigningError(e.to_string()))?;
    http_request::sign(request, &params).map_err(|e| SigningError(e.to_string()))
}

/// The credentials and the region a caller signs with, from the standard chain's configuration
/// (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, a profile, a role).
pub async fn caller(config: &aws_config::SdkConfig) -> Result<(Credentials, String), CallerError> {
    use aws_credential_types::provider::ProvideCredentials;
    let region = config
        .region()
        .map(|region| region.as_ref().to_owned())
        .ok_or(CallerError::NoRegion)?;
    let provider = config
        .credentials_provider()
        .ok_or_else(|| CallerError::NoCredentials("no credential provider is configured".into()))?;
    let credentials = provider
        .provide_credentials()
        .await
        .map_err(|e| CallerError::NoCredentials(e.to_string()))?;
    Ok((credentials, region))
}

/// The caller has nothing to sign with.
#[derive(Debug, thiserror::Error)]
pub enum CallerError {
    /// The standard chain found no credentials.
    #[error("no AWS credentials were found to sign the request with ({0}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")]
    NoCredentials(String),
    /// No region is set: the signature names the function URL's region.
    #[error("no AWS region is set to sign the request for; set AWS_REGION to the stack's region")]
    NoRegion,
}

/// Who signed a request the door let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The access key the request was signed with.
    pub access_key: String,
}

/// Checks a request's SigV4 signature, as Lambda does for a function URL with `AWS_IAM` auth.
/// `url` is the URL as the caller addressed it (the `Host` header's authority and the path and
/// query as received); `headers` are every header received; `known` are the credentials this
/// door accepts; `now` is the time to judge the signature's age by.
pub fn verify(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    known: &[Credentials],
    region: &str,
    now: SystemTime,
) -> Result<Signer, Refused> {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    };
    let authorization = header("authorization")
        .and_then(|value| value.strip_prefix("AWS4-HMAC-SHA256 "))
        .ok_or(Refused::Unsigned)?;
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in authorization.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", value)) => credential = Some(value),
            Some(("SignedHeaders", value)) => signed_headers = Some(value),
            Some(("Signature", value)) => signature = Some(value),
            _ => {}
        }
    }
    let (credential, signed_headers, signature) = match (credential, signed_headers, signature) {
        (Some(c), Some(h), Some(s)) => (c, h, s),
        _ => {
            return Err(Refused::Malformed(
                "Credential, SignedHeaders and Signature",
            ))
        }
    };
    // KEY/DATE/REGION/SERVICE/aws4_request
    let scope: Vec<&str> = credential.split('/').collect();
    let [key, _, scope_region, scope_service, "aws4_request"] = scope.as_slice() else {
        return Err(Refused::Malformed("the Credential's scope"));
    };
    if *scope_region != region || *scope_service != SERVICE {
        return Err(Refused::WrongScope(
            format!("{scope_region}/{scope_service}"),
            format!("{region}/{SERVICE}"),
        ));
    }
    let credentials = known
        .iter()
        .find(|c| c.access_key_id() == *key)
        .ok_or_else(|| Refused::UnknownKey((*key).to_owned()))?;
    let signed_at = header("x-amz-date")
        .and_then(|date| chrono::NaiveDateTime::parse_from_str(date, "%Y%m%dT%H%M%SZ").ok())
        .map(|date| SystemTime::from(date.and_utc()))
        .ok_or(Refused::Malformed("X-Amz-Date"))?;
    let apart = now
        .duration_since(signed_at)
        .or_else(|_| signed_at.duration_since(now))
        .unwrap_or(Duration::MAX);
    if apart > SKEW {
        return Err(Refused::Stale);
    }
    let signed: Vec<&str> = signed_headers.split(';').collect();
    if !signed.contains(&"host") {
        return Err(Refused::Malformed("SignedHeaders without host"));
    }
    // Only what the caller signed is signed again: a proxy may add headers on the way.
    let again: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(name, _)| signed.iter().any(|s| name.eq_ignore_ascii_case(s)))
        .copied()
        .collect();
    let credentials = match header("x-amz-security-token") {
        Some(token) => Credentials::new(
            credentials.access_key_id(),
            credentials.secret_access_key(),
            Some(token.to_owned()),
            None,
            "a temporary credential",
        ),
        None => credentials.clone(),
    };
    let expected = signing(method, url, &again, body, &credentials, region, signed_at)
        .map_err(|_| Refused::Malformed("the request's URL or headers"))?;
    if constant_time_equal(expected.signature().as_bytes(), signature.as_bytes()) {
        Ok(Signer {
            access_key: credentials.access_key_id().to_owned(),
        })
    } else {
        Err(Refused::Mismatch)
    }
}

/// Compares two signatures without stopping at the first difference, so the time taken says
/// nothing of how much of a guess was right.
fn constant_time_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "http://127.0.0.1:9078/lambda-url/submit/";
    const BODY: &[u8] = br#"{"source":"b.yaml"}"#;

    fn ada() -> Credentials {
        Credentials::new("AKIDADA", "ada-secret", None, None, "test")
    }

    /// The headers of a request signed by `credentials` at `at`, as they arrive.
    fn signed(credentials: &Credentials, at: SystemTime) -> Vec<(String, String)> {
        let mut headers = vec![
            ("host".to_owned(), "127.0.0.1:9078".to_owned()),
            ("content-type".to_owned(), "application/json".to_owned()),
        ];
        let added = sign(
            "POST",
            URL,
            &[("content-type", "application/json")],
            BODY,
            credentials,
            "eu-west-1",
            at,
        )
        .expect("signed");
        headers.extend(added);
        headers
    }

    fn check(headers: &[(String, String)], body: &[u8], at: SystemTime) -> Result<Signer, Refused> {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        verify("POST", URL, &headers, body, &[ada()], "eu-west-1", at)
    }

    #[test]
    fn a_request_signed_with_a_known_key_is_let_in_and_nothing_else_is() {
        let now = SystemTime::now();
        let headers = signed(&ada(), now);
        assert_eq!(
            check(&headers, BODY, now),
            Ok(Signer {
                access_key: "AKIDADA".into()
            })
        );
        // A header added on the way (not signed) changes nothing.
        let mut proxied = headers.clone();
        proxied.push(("x-forwarded-for".into(), "192.0.2.1".into()));
        assert!(check(&proxied, BODY, now).is_ok());

        assert_eq!(check(&headers[..2], BODY, now), Err(Refused::Unsigned));
        assert_eq!(
            check(&headers, br#"{"source":"c.yaml"}"#, now),
            Err(Refused::Mismatch),
            "a changed body"
        );
        let forged = Credentials::new("AKIDADA", "a-guess", None, None, "test");
        assert_eq!(
            check(&signed(&forged, now), BODY, now),
            Err(Refused::Mismatch),
            "another secret"
        );
        let stranger = Credentials::new("AKIDEVE", "eve-secret", None, None, "test");
        assert_eq!(
            check(&signed(&stranger, now), BODY, now),
            Err(Refused::UnknownKey("AKIDEVE".into()))
        );
        assert_eq!(
            check(&headers, BODY, now + Duration::from_secs(16 * 60)),
            Err(Refused::Stale),
            "a request replayed later"
        );
        let elsewhere: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert!(matches!(
            verify("POST", URL, &elsewhere, BODY, &[ada()], "us-east-1", now),
            Err(Refused::WrongScope(..))
        ));
    }
}
