//! The caller's tenant: its summary, the grants of access its deployments held, and its
//! service registry.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};
use overture_domain::projection::TenantView;
use overture_domain::services::RegisteredInstance;
use overture_kit::query::DeploymentFilter;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::grants::{grant_rows, GrantRow};
use crate::Api;

/// The caller's tenant: how many deployments it has, by status.
#[utoipa::path(
    get,
    path = "/v1/tenant",
    security(("token" = [])),
    responses(
        (status = 200, description = "The tenant's summary", body = TenantView),
        (status = 401, body = ErrorBody),
    )
)]
pub(super) async fn tenant(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<TenantView>, ApiError> {
    let tenants = api.queries.tenants().await?;
    Ok(Json(
        tenants
            .into_iter()
            .find(|t| caller.owns(&t.tenant))
            .unwrap_or_else(|| TenantView::new(caller.tenant())),
    ))
}

/// Which grants.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantsQuery {
    /// Only grants still open.
    #[serde(default)]
    #[param(required = false)]
    open: bool,
}

/// The temporary grants of access the caller's deployments held, oldest first.
#[utoipa::path(
    get,
    path = "/v1/grants",
    params(GrantsQuery),
    security(("token" = [])),
    responses(
        (status = 200, description = "The grants", body = [GrantRow]),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
pub(super) async fn grants(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<GrantsQuery>, QueryRejection>,
) -> Result<Json<Vec<GrantRow>>, ApiError> {
    let Query(query) = query
        .map_err(|_| ApiError::BadRequest("the only query parameter is open=true|false".into()))?;
    let views = api
        .queries
        .list(&DeploymentFilter {
            tenant: Some(caller.tenant().to_owned()),
            status: None,
        })
        .await?;
    Ok(Json(grant_rows(&views, query.open)))
}

/// The caller's service registry: the instances its deployments registered, by service, then
/// address, then port. Another tenant's, even one whose project has the same name, is not shown.
#[utoipa::path(
    get,
    path = "/v1/services",
    security(("token" = [])),
    responses(
        (status = 200, description = "The registered instances", body = [RegisteredInstance]),
        (status = 401, body = ErrorBody),
    )
)]
pub(super) async fn services(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<RegisteredInstance>>, ApiError> {
    Ok(Json(api.queries.service_instances(caller.tenant()).await?))
}
