//! The ledger and the corpus over HTTP, for auditors and operators who cannot stop a running
//! server to use its data directory: what `research-ledger … --server URL` acts through,
//! besides `GET /v1/export` and `/v1/tokens`.
//!
//! - `GET /v1/verify`: the whole ledger verified from its first event, as `research-ledger
//!   verify` does (the report it prints with `--json`). One such verification runs at a time;
//!   others wait their turn.
//! - `GET /v1/proofs/inclusion?seq=N[&tree_size=M]`: `{"proof": FILE}`, the proof file
//!   `research-ledger prove` writes; without `tree_size`, against the latest checkpoint, once
//!   the server's periodic checkpointer has covered the event (a reader never causes a signed
//!   write; the wait is at most one checkpoint interval).
//! - `GET /v1/proofs/consistency?first=A[&second=B]`: `{"proof": FILE}`; without `second`, to
//!   the latest checkpoint once it covers the head.
//! - `GET /v1/tasks/{id}/head`: `{"task_id", "version", "state_hash"}`, the hash of the task's
//!   state in the read model the server answers from, for an auditor who replays the task from
//!   an export bundle to compare with.
//! - `POST /v1/checkpoints` (admin): writes a signed checkpoint and answers it (201).
//! - `POST /v1/corpus/documents` (admin): `{"documents": [DOCUMENT…]}`, documents read and
//!   checked by the client, added to the embedded corpus after the same checks here; answers
//!   what was added, replaced and left alone, and which documents were rejected, by position.
//!
//! Every read needs a token of any role (auditor and above); the service refuses the two
//! writes to anyone but an admin. Errors are the SPEC §10 body with an HTTP status
//! ([`crate::rest::ApiError`]); an unknown query parameter is refused, never ignored.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use service::ledger::VerifyReport;
use service::ledger::ledger_proof::{Checkpoint, ProofFile};
use service::{Caller, ServiceError};
use sources::AddReport;
use tokio::sync::Semaphore;

use crate::app::AppState;
use crate::rest::{ApiError, RequestBody, blocking, caller, json_body};

/// The routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/verify", get(verify))
        .route("/v1/proofs/inclusion", get(inclusion))
        .route("/v1/proofs/consistency", get(consistency))
        .route("/v1/tasks/{id}/head", get(head))
        .route("/v1/checkpoints", post(checkpoint))
        .route("/v1/corpus/documents", post(documents))
        .layer(Extension(Verifying(Arc::new(Semaphore::new(1)))))
}

/// The one verification from scratch that may run at a time: it reads the whole ledger.
#[derive(Debug, Clone)]
struct Verifying(Arc<Semaphore>);

/// The query parameters, or the refusal of a malformed or unknown one.
fn params<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query.map(|Query(params)| params).map_err(|rejection| {
        ApiError::from(ServiceError::InvalidArgument {
            field: "query".into(),
            message: rejection.body_text(),
        })
    })
}

async fn verify(
    State(state): State<AppState>,
    Extension(Verifying(gate)): Extension<Verifying>,
) -> Result<Json<VerifyReport>, ApiError> {
    let permit = gate
        .acquire_owned()
        .await
        .map_err(|e| ApiError::from(ServiceError::Unavailable(e.to_string())))?;
    let service = state.service.clone();
    // The permit goes with the work: a request that times out leaves its verification
    // running, and the next one waits for it rather than running beside it.
    let report = blocking(move || {
        let _permit = permit;
        Ok(service.verify_from_scratch(&mut |_, _| {}))
    })
    .await?;
    Ok(Json(report))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InclusionParams {
    seq: u64,
    tree_size: Option<u64>,
}

async fn inclusion(
    State(state): State<AppState>,
    query: Result<Query<InclusionParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let InclusionParams { seq, tree_size } = params(query)?;
    let service = state.service.clone();
    let proof = blocking(move || service.prove_inclusion(seq, tree_size)).await?;
    Ok(Json(json!({ "proof": ProofFile::Inclusion(proof) })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsistencyParams {
    first: u64,
    /// Without it: today's ledger (the latest checkpoint, once it covers the head).
    second: Option<u64>,
}

async fn consistency(
    State(state): State<AppState>,
    query: Result<Query<ConsistencyParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let ConsistencyParams { first, second } = params(query)?;
    let service = state.service.clone();
    let proof = blocking(move || service.prove_consistency(first, second)).await?;
    Ok(Json(json!({ "proof": ProofFile::Consistency(proof) })))
}

async fn head(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (version, hash) = state.service.task_head(&id)?;
    Ok(Json(json!({
        "task_id": id,
        "version": version,
        "state_hash": hash.to_hex(),
    })))
}

async fn checkpoint(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
) -> Result<(StatusCode, Json<Checkpoint>), ApiError> {
    let service = state.service.clone();
    let caller = caller(authenticated);
    let checkpoint = blocking(move || service.checkpoint(&caller)).await?;
    tracing::info!(
        tree_size = checkpoint.tree_size,
        "checkpoint written on request"
    );
    Ok((StatusCode::CREATED, Json(checkpoint)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentsBody {
    documents: Vec<sources::Document>,
}

async fn documents(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
    headers: axum::http::HeaderMap,
    RequestBody(body): RequestBody,
) -> Result<Json<AddReport>, ApiError> {
    let body: DocumentsBody = json_body(&headers, &body, r#"{"documents": [DOCUMENT…]}"#)?;
    let service = state.service.clone();
    let caller = caller(authenticated);
    let report = blocking(move || service.ingest_documents(&caller, &body.documents)).await?;
    tracing::info!(
        added = report.added,
        replaced = report.replaced,
        unchanged = report.unchanged,
        rejected = report.rejected.len(),
        "documents ingested"
    );
    Ok(Json(report))
}
