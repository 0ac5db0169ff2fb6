//! The log as the transparency-log ecosystem reads it: `GET /checkpoint`, the latest signed
//! checkpoint as a C2SP signed note with the witness cosignatures the ledger keeps of it, and
//! `GET /tile/<L>/<N>[.p/<W>]`, C2SP `tlog-tiles` hash tiles, with `GET
//! /tile/entries/<N>[.p/<W>]`, the entry bundles (each entry an event's 32-byte hash, the
//! leaf's data).
//!
//! A tile or bundle is served only once a signed checkpoint covers every hash in it, and never
//! changes after, so it is cacheable for good; the checkpoint changes with every one written
//! and is not cached. Reads need a token of any role when tokens are in force, like every other
//! read.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use ledger::ledger_proof::Tile;

use crate::app::AppState;

/// The routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/checkpoint", get(checkpoint))
        .route("/tile/{*path}", get(tile))
}

fn plain(status: StatusCode, text: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

async fn checkpoint(State(state): State<AppState>) -> Response {
    let service = state.service.clone();
    let note = tokio::task::spawn_blocking(move || service.ledger().checkpoint_note()).await;
    match note {
        Ok(Ok(Some(note))) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            note,
        )
            .into_response(),
        Ok(Ok(None)) => plain(
            StatusCode::NOT_FOUND,
            "the ledger has no signed checkpoint yet\n".into(),
        ),
        Ok(Err(e)) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

async fn tile(State(state): State<AppState>, Path(path): Path<String>) -> Response {
    let (entries, rest) = match path.strip_prefix("entries/") {
        Some(rest) => (true, format!("0/{rest}")),
        None => (false, path.clone()),
    };
    let tile = match Tile::parse(&rest) {
        Ok(tile) if !entries || tile.level == 0 => tile,
        Ok(_) => return plain(StatusCode::NOT_FOUND, "no such tile\n".into()),
        Err(e) => return plain(StatusCode::NOT_FOUND, format!("{e}\n")),
    };
    let service = state.service.clone();
    let bytes = tokio::task::spawn_blocking(move || {
        let ledger = service.ledger();
        if entries {
            ledger.tile_entries(&tile)
        } else {
            ledger.tile(&tile)
        }
    })
    .await;
    match bytes {
        Ok(Ok(Some(bytes))) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
            ],
            bytes,
        )
            .into_response(),
        Ok(Ok(None)) => plain(
            StatusCode::NOT_FOUND,
            format!("no signed checkpoint covers tile {path} yet\n"),
        ),
        Ok(Err(e)) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}
