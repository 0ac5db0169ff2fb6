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
        .merge(crate::rest::routes())
        .merge(crate::export::routes())
        .with_state(state)
        .merge(graphql)
}

/// The MCP endpoint (Streamable HTTP, both protocol eras) at `/mcp`.
fn with_mcp(router: Router, mcp: &mcp_bridge::HttpEndpoint) -> Router {
    router.route_service("/mcp", mcp.service())
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
    let mcp = mcp_bridge::HttpEndpoint::new(service.clone(), mcp_bridge::BridgeOptions::default());
    let app = with_mcp(
        router(AppState {
            service: service.clone(),
            graphql,
        }),
        &mcp,
    );
    // Contracts reload when their files change.
    let watcher = {
        let service = service.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let service = service.clone();
                if let Ok(true) = tokio::task::spawn_blocking(move || service.refresh_tools()).await
                {
                    tracing::info!("contracts changed; the tool list was reloaded");
                }
            }
        })
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            // Open MCP streams (subscriptions, progress) would hold the shutdown open.
            mcp.stop();
        })
        .await
        .context("the server stopped")?;
    watcher.abort();
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
