//! The HTTP server: one axum router that every front end adds its routes to, served with a
//! graceful shutdown that loses nothing acknowledged.
//!
//! On SIGTERM or Ctrl-C the server stops accepting connections, lets requests in flight finish,
//! then shuts the service down: the projections are snapshotted and the ledger's writer stops
//! after the appends queued for it (every acknowledged append was already durable).

use std::net::SocketAddr;

use anyhow::Context;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use service::Service;

/// The state every route shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) service: Service,
    /// How the GraphQL API is served.
    pub(crate) graphql: graphql::Options,
}

/// Every route of the server.
pub(crate) fn router(state: AppState) -> Router {
    let graphql = graphql::router(state.service.clone(), state.graphql.clone());
    Router::new()
        .route("/health", get(health))
        .merge(crate::export::routes())
        .with_state(state)
        .merge(graphql)
}

/// `GET /health`: whether the store is open and writable, the ledger's size, the last
/// checkpoint, and the version of the server.
async fn health(State(state): State<AppState>) -> Json<Value> {
    let ledger = state.service.ledger();
    let head = ledger.head();
    let checkpoint = ledger.latest_checkpoint().ok().flatten();
    let refusing = ledger.poisoned();
    Json(json!({
        "status": if refusing.is_none() { "ok" } else { "refusing_writes" },
        "reason": refusing,
        "version": env!("CARGO_PKG_VERSION"),
        "ledger": {
            "size": head.size,
            "head_hash": head.last_hash,
            "last_checkpoint": checkpoint,
        },
    }))
}

/// Binds `addr` (the port may be 0: the address actually bound is returned with the listener).
pub(crate) async fn bind(
    addr: SocketAddr,
) -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// Serves every route on `listener` until SIGTERM or Ctrl-C, then shuts down gracefully.
pub(crate) async fn serve(
    service: Service,
    listener: tokio::net::TcpListener,
    graphql: graphql::Options,
) -> anyhow::Result<()> {
    let app = router(AppState {
        service: service.clone(),
        graphql,
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("the server stopped")?;
    tracing::info!("no more requests in flight; shutting the service down");
    tokio::task::spawn_blocking(move || service.shutdown())
        .await
        .context("the shutdown did not finish")?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: no new connections; finishing the requests in flight");
}
