//! Who is asking: the `X-Auth-Token` header, checked with the cloud's identity service on every
//! request. The tenant is the token's project *id* (names are unique only within a Keystone
//! domain, and come back when a project is made again); nothing the client says overrides it.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use overture_domain::secret::SecretString;
use overture_events::CloudAccount;
use overture_submit::TokenError;

use crate::error::ApiError;
use crate::Api;

/// The header that carries the user's cloud token, as OpenStack's own APIs take it.
pub const TOKEN_HEADER: &str = "x-auth-token";

/// The longest token accepted (as `--token-file`).
const MAX_TOKEN: usize = 16 * 1024;

/// The caller of an authenticated request.
#[derive(Clone)]
pub struct Caller {
    /// Whom the cloud says the token belongs to; `project_id` is the tenant.
    pub account: CloudAccount,
    /// The token, for deployments the caller starts (they act with it).
    pub token: SecretString,
}

impl Caller {
    /// The caller's tenant: its token's project id.
    pub fn tenant(&self) -> &str {
        &self.account.project_id
    }

    /// Whether a record of `tenant` is the caller's ([`overture_domain::tenancy::owns`]).
    pub fn owns(&self, tenant: &str) -> bool {
        overture_domain::tenancy::owns(self.tenant(), tenant)
    }
}

/// Checks the token of every request it wraps and hands the [`Caller`] on; 401 without one the
/// cloud accepts.
pub async fn authenticate(
    State(api): State<Api>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let token = request
        .headers()
        .get(TOKEN_HEADER)
        .ok_or_else(|| {
            ApiError::Unauthorized(
                "send your cloud token in the X-Auth-Token header (for example \
                 `overture cloud token --project NAME`)"
                    .into(),
            )
        })?
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|t| {
            !t.is_empty() && t.len() <= MAX_TOKEN && t.chars().all(|c| c.is_ascii_graphic())
        })
        .ok_or_else(|| {
            ApiError::Unauthorized("the X-Auth-Token header does not hold a token".into())
        })?;
    let token = SecretString::from(token.to_owned());
    let account = api
        .identity
        .account(&token)
        .await
        .map_err(|error| match error {
            TokenError::Refused => ApiError::Unauthorized(error.to_string()),
            TokenError::Unavailable(_) => ApiError::Unavailable(error.to_string()),
            TokenError::Failed(_) => ApiError::Internal(error.to_string()),
        })?;
    let caller = Caller { account, token };
    tracing::Span::current().record("tenant", tracing::field::display(caller.tenant()));
    api.deployments.caller_seen(&caller).await;
    request.extensions_mut().insert(caller);
    Ok(next.run(request).await)
}
