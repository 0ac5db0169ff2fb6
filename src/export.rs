//! `GET /v1/export`: the export bundle for auditors over HTTP, the same bundle
//! `research-ledger export` writes (`Service::export`), so a running server need not be
//! stopped to hand one over. `research-ledger verify-bundle` checks it offline.
//!
//! `?task=ID` (repeated for several tasks) or `?all=true` chooses what goes in;
//! `without_content=true` leaves out the full texts of evidence (their hashes stay in the
//! events). Any other parameter is refused rather than ignored, so a misspelt one never
//! quietly exports something else. Errors are the SPEC §10 body with an HTTP status.

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ledger::bundle::Scope;
use service::ServiceError;

use crate::server::AppState;

/// The export routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/v1/export", get(export))
}

/// A service error as a REST answer: its status and the SPEC §10 body (mapped in one place,
/// [`crate::rest::ApiError`]).
fn error_response(error: &ServiceError) -> Response {
    crate::rest::ApiError::from(error.clone()).into_response()
}

fn invalid(field: &str, message: impl Into<String>) -> ServiceError {
    ServiceError::InvalidArgument {
        field: field.to_owned(),
        message: message.into(),
    }
}

fn flag(name: &str, value: &str) -> Result<bool, ServiceError> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(invalid(
            name,
            format!("{name} is true or false, not {other:?}"),
        )),
    }
}

/// What an export request asks for.
fn scope_of(params: &[(String, String)]) -> Result<(Scope, bool), ServiceError> {
    let mut tasks = Vec::new();
    let mut all = false;
    let mut without_content = false;
    for (name, value) in params {
        match name.as_str() {
            "task" if !value.is_empty() => tasks.push(value.clone()),
            "task" => return Err(invalid("task", "a task id is not empty")),
            "all" => all = flag("all", value)?,
            "without_content" => without_content = flag("without_content", value)?,
            other => {
                return Err(invalid(
                    other,
                    format!(
                        "unknown parameter {other:?}; the parameters are task, all and without_content"
                    ),
                ));
            }
        }
    }
    let scope = match (all, tasks.is_empty()) {
        (true, true) => Scope::All,
        (false, false) => Scope::Tasks(tasks),
        (true, false) => return Err(invalid("all", "give task=… or all=true, not both")),
        (false, true) => return Err(invalid("task", "give task=ID (repeatable) or all=true")),
    };
    Ok((scope, without_content))
}

async fn export(
    State(state): State<AppState>,
    params: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let params = match params {
        Ok(Query(params)) => params,
        Err(rejection) => return error_response(&invalid("query", rejection.body_text())),
    };
    let (scope, without_content) = match scope_of(&params) {
        Ok(asked) => asked,
        Err(e) => return error_response(&e),
    };
    let service = state.service.clone();
    // Reading every event and blob of the scope, and perhaps writing a checkpoint that covers
    // them, is blocking work.
    let bundle = tokio::task::spawn_blocking(move || service.export(scope, without_content)).await;
    match bundle {
        Ok(Ok(bundle)) => axum::Json(bundle).into_response(),
        Ok(Err(e)) => error_response(&e),
        Err(e) => error_response(&ServiceError::Unavailable(format!(
            "the export stopped: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_scope_is_tasks_or_all_and_nothing_else() {
        let (scope, without) = scope_of(&params(&[("task", "a"), ("task", "b")])).unwrap();
        assert!(matches!(scope, Scope::Tasks(t) if t == ["a", "b"]));
        assert!(!without);
        let (scope, without) =
            scope_of(&params(&[("all", "true"), ("without_content", "1")])).unwrap();
        assert!(matches!(scope, Scope::All));
        assert!(without);
        for bad in [
            params(&[]),
            params(&[("all", "false")]),
            params(&[("all", "true"), ("task", "a")]),
            params(&[("all", "yes")]),
            params(&[("tasks", "a")]),
            params(&[("task", "")]),
        ] {
            let error = scope_of(&bad).unwrap_err();
            assert_eq!(error.code(), "invalid_argument", "{bad:?}");
            assert_eq!(
                crate::rest::status_of(&error),
                axum::http::StatusCode::BAD_REQUEST
            );
        }
    }
}
