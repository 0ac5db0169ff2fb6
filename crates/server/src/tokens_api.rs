//! `GET /v1/tokens`, `POST /v1/tokens`, `DELETE /v1/tokens/{name}`: the token list of a running
//! server, for `research-ledger token … --server URL`. Admins only. The list is the token file
//! the server reads, so a token made here works on the next request; the token itself is in
//! the answer to `POST` and nowhere else.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use service::tokens::{Role, TokenEntry, TokenError};
use service::{Caller, ServiceError};

use crate::app::AppState;
use crate::rest::{ApiError, PathParam, RequestBody, caller, json_body};

/// The token routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/tokens", get(list).post(add))
        .route("/v1/tokens/{name}", delete(revoke))
}

fn service_error(e: TokenError) -> ServiceError {
    match e {
        TokenError::NameTaken(_) | TokenError::BadName(_) => ServiceError::InvalidArgument {
            field: "name".into(),
            message: e.to_string(),
        },
        TokenError::NotFound(name) => ServiceError::NotFound {
            resource: "token",
            id: name,
        },
        other => ServiceError::Unavailable(other.to_string()),
    }
}

/// A token as listed: never its hash, which would let a guesser check guesses offline.
pub fn listing(entry: &TokenEntry) -> Value {
    json!({
        "name": entry.name,
        "role": entry.role.name(),
        "created_at": entry.created_at,
        "revoked_at": entry.revoked_at,
    })
}

async fn list(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
) -> Result<Json<Value>, ApiError> {
    caller(authenticated).require(Role::Admin, "listing tokens")?;
    let tokens = state.auth.store().list().map_err(service_error)?;
    Ok(Json(json!({
        "tokens": tokens.iter().map(listing).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBody {
    name: String,
    role: String,
}

async fn add(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
    headers: HeaderMap,
    RequestBody(body): RequestBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller(authenticated).require(Role::Admin, "making tokens")?;
    let body: AddBody = json_body(&headers, &body, r#"{"name": …, "role": …}"#)?;
    let role: Role = body
        .role
        .parse()
        .map_err(|e: String| ServiceError::InvalidArgument {
            field: "role".into(),
            message: e,
        })?;
    let token = state
        .auth
        .store()
        .add(&body.name, role)
        .map_err(service_error)?;
    tracing::info!(name = %body.name, role = role.name(), "token added");
    Ok((
        StatusCode::CREATED,
        Json(json!({ "name": body.name, "role": role.name(), "token": token })),
    ))
}

async fn revoke(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
    PathParam(name): PathParam,
) -> Result<Json<Value>, ApiError> {
    caller(authenticated).require(Role::Admin, "revoking tokens")?;
    state.auth.store().revoke(&name).map_err(service_error)?;
    tracing::info!(%name, "token revoked");
    Ok(Json(json!({ "revoked": name })))
}
