//! `GET /v1/export`: the export bundle for auditors over HTTP, the same bundle
//! `research-ledger export` writes (`Service::export`), so a running server need not be
//! stopped to hand one over. `research-ledger verify-bundle` checks it offline.
//!
//! `?task=ID` (repeated for several tasks) or `?all=true` chooses what goes in;
//! `without_content=true` leaves out the full texts of evidence (their hashes stay in the
//! events). Any other parameter is refused rather than ignored, so a misspelt one never
//! quietly exports something else. Errors are the SPEC §10 body with an HTTP status.
//!
//! At most `export_concurrent_max` exports are made at once — each holds its scope's events
//! and blobs in memory while it is made — and one past it is refused with `limit_exceeded`
//! (503, `Retry-After`). The bundle is streamed as it is encoded, so its JSON text is never
//! held whole beside it.

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ledger::bundle::Scope;
use service::ServiceError;

use crate::app::AppState;

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

/// Bytes of encoded bundle sent at a time.
const CHUNK_BYTES: usize = 64 * 1024;

/// Chunks of a bundle waiting to be sent: the encoder waits for the client beyond them.
const CHUNKS_QUEUED_MAX: usize = 4;

/// A writer that hands the encoded bundle to the response a chunk at a time, waiting while
/// the client is slow to read.
struct ChunkWriter {
    buffer: Vec<u8>,
    chunks: tokio::sync::mpsc::Sender<Result<Vec<u8>, std::io::Error>>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        let chunk = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES));
        self.chunks
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(data);
        if self.buffer.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buffer.is_empty() {
            self.send()?;
        }
        Ok(())
    }
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
    let max = state.export_concurrent_max;
    let Ok(slot) = state.exports.clone().try_acquire_owned() else {
        return crate::app::try_again_soon(
            crate::rest::ApiError::http(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                ServiceError::LimitExceeded {
                    limit: "export_concurrent_max".into(),
                    max: max as u64,
                    actual: max as u64 + 1,
                },
            )
            .into_response(),
        );
    };
    let service = state.service.clone();
    // Reading every event and blob of the scope, and perhaps writing a checkpoint that covers
    // them, is blocking work.
    let bundle = tokio::task::spawn_blocking(move || service.export(scope, without_content)).await;
    let bundle = match bundle {
        Ok(Ok(bundle)) => bundle,
        Ok(Err(e)) => return error_response(&e),
        Err(e) => {
            return error_response(&ServiceError::Unavailable(format!(
                "the export stopped: {e}"
            )));
        }
    };
    let (chunks, queued) = tokio::sync::mpsc::channel(CHUNKS_QUEUED_MAX);
    // The slot is held until the bundle is encoded and sent, or the client leaves.
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        let mut out = ChunkWriter {
            buffer: Vec::with_capacity(CHUNK_BYTES),
            chunks: chunks.clone(),
        };
        let written = serde_json::to_writer(&mut out, &bundle)
            .map_err(std::io::Error::other)
            .and_then(|()| std::io::Write::flush(&mut out));
        if let Err(e) = written
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            // The response has begun: cutting it short is the one way left to say it failed.
            let _ = chunks.blocking_send(Err(e));
        }
    });
    let stream = futures_util::stream::unfold(queued, |mut queued| async move {
        queued.recv().await.map(|chunk| (chunk, queued))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
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
