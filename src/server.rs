//! The HTTP server: one axum router that every front end adds its routes to, behind the same
//! layers, served with a graceful shutdown that loses nothing acknowledged.
//!
//! Every request passes, outermost first: the request log (one line per request with its
//! status and duration), the limits (requests in flight, request time, declared body size),
//! and the access check ([`crate::auth`]). A request refused by a limit or the access check
//! gets the structured error body of every other refusal.
//!
//! On SIGTERM or Ctrl-C the server stops accepting connections, lets requests in flight finish,
//! then shuts the service down: the projections are snapshotted, a signed checkpoint covers
//! everything appended, and the ledger's writer stops after the appends queued for it (every
//! acknowledged append was already durable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::HttpBody;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use service::{Caller, Service, ServiceError};
use tokio::sync::Semaphore;

use crate::auth::Auth;

/// Bounds on every HTTP request, whatever route it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HttpLimits {
    /// Largest request body, in bytes (GraphQL has its own, usually lower, bound).
    pub(crate) request_bytes_max: usize,
    /// Longest a request may take to produce its response.
    pub(crate) request_time_max: Duration,
    /// Requests being handled at once; more are refused, not queued.
    pub(crate) requests_in_flight_max: usize,
}

/// How the server serves.
#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    /// How the GraphQL API is served.
    pub(crate) graphql: graphql::Options,
    /// How the MCP endpoint is served.
    pub(crate) bridge: mcp_bridge::BridgeOptions,
    /// Who may call.
    pub(crate) auth: Arc<Auth>,
    /// Bounds on every request.
    pub(crate) limits: HttpLimits,
}

/// The state every route shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) service: Service,
    /// Who may call.
    pub(crate) auth: Arc<Auth>,
}

/// What the limits layer shares.
#[derive(Debug, Clone)]
struct Gate {
    in_flight: Arc<Semaphore>,
    limits: HttpLimits,
}

/// Every route of the server, behind its layers; the MCP endpoint too when given.
pub(crate) fn router(
    service: &Service,
    options: &ServerOptions,
    mcp: Option<&mcp_bridge::HttpEndpoint>,
) -> Router {
    let mut graphql_options = options.graphql.clone();
    let auth = options.auth.clone();
    graphql_options.authenticator = Some(graphql::Authenticator(Arc::new(move |token| {
        auth.caller_of_token(token)
    })));
    let state = AppState {
        service: service.clone(),
        auth: options.auth.clone(),
    };
    let mut app = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(crate::rest::routes())
        .merge(crate::export::routes())
        .merge(crate::tokens_api::routes())
        .merge(crate::remote_api::routes())
        .with_state(state)
        .merge(graphql::router(service.clone(), graphql_options));
    if let Some(mcp) = mcp {
        app = app.route_service("/mcp", mcp.service());
    }
    let gate = Gate {
        in_flight: Arc::new(Semaphore::new(options.limits.requests_in_flight_max)),
        limits: options.limits,
    };
    app.layer(middleware::from_fn_with_state(
        options.auth.clone(),
        crate::auth::layer,
    ))
    .layer(DefaultBodyLimit::max(options.limits.request_bytes_max))
    .layer(middleware::from_fn_with_state(gate, limit))
    .layer(middleware::from_fn(log))
}

/// The structured error of a refused request, with its status.
fn refusal(status: StatusCode, error: &ServiceError) -> Response {
    (status, Json(error.to_json())).into_response()
}

/// Refuses a request past a limit: too many in flight (503, try again shortly: never queued,
/// though a body already on its way is read and dropped first), a declared body over the bound
/// (413), or one that takes too long (504; a write it started may still land, which is what
/// idempotency keys are for).
async fn limit(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let HttpLimits {
        request_bytes_max,
        request_time_max,
        requests_in_flight_max,
    } = gate.limits;
    let Ok(_permit) = gate.in_flight.clone().try_acquire_owned() else {
        discard_body(request, request_bytes_max, request_time_max).await;
        let mut response = refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            &ServiceError::LimitExceeded {
                limit: "requests_in_flight_max".into(),
                max: requests_in_flight_max as u64,
                actual: requests_in_flight_max as u64 + 1,
            },
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    if let Some(declared) = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n > request_bytes_max as u64)
    {
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            &ServiceError::LimitExceeded {
                limit: "request_bytes_max".into(),
                max: request_bytes_max as u64,
                actual: declared,
            },
        );
    }
    match tokio::time::timeout(request_time_max, next.run(request)).await {
        Ok(response) => response,
        Err(_) => refusal(
            StatusCode::GATEWAY_TIMEOUT,
            &ServiceError::Timeout(format!(
                "the request took longer than {} ms; a write it started may still land: retry it with the same idempotency key",
                request_time_max.as_millis()
            )),
        ),
    }
}

/// Reads and drops the body of a request refused before its handler runs, up to `bytes_max`
/// and for no longer than `time_max`. The client may already be sending it, and a connection
/// closed with data unread is reset, taking the refusal with it: the client would see a reset
/// connection instead of the error and its `Retry-After`. A client that waits to be asked for
/// the body (`Expect: 100-continue`) is not asked, and a body declared over `bytes_max` is not
/// read either.
async fn discard_body(request: Request, bytes_max: usize, time_max: Duration) {
    let headers = request.headers();
    let expects_continue = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let too_large = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > bytes_max as u64);
    if expects_continue || too_large {
        return;
    }
    let mut body = request.into_body();
    let mut read = 0usize;
    let _ = tokio::time::timeout(time_max, async {
        while read <= bytes_max {
            match std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, |data| data.len()),
                Some(Err(_)) | None => break,
            }
        }
    })
    .await;
}

/// One log line per request: method, path, status, duration and who called.
async fn log(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let actor = response
        .extensions()
        .get::<Caller>()
        .map(|c| c.actor.clone());
    tracing::info!(
        target: "research_ledger::http",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        actor = actor.as_deref().unwrap_or("-"),
        "request"
    );
    response
}

/// `GET /metrics`: the service's counters in the Prometheus text format. Any token's holder
/// may read them.
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.service.metrics(),
    )
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

/// Connections the kernel may complete before the server accepts them (it caps the number at
/// `net.core.somaxconn`). A burst of new connections beyond it is dropped or reset by the
/// kernel before the server could answer, even with `limit_exceeded`; the usual 1024 is less
/// than the 1,200 concurrent writers the server is meant to take.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (the port may be 0: the address actually bound is returned with the listener).
pub(crate) async fn bind(
    addr: SocketAddr,
) -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listen = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does: a restarted server may take its port straight back.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    let listener = listen().with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// Reloads the contracts of external tools when their files change (checked every second), so
/// MCP clients hear `tools/list_changed`. Runs until aborted.
pub(crate) fn watch_contracts(service: Service) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let service = service.clone();
            if let Ok(true) = tokio::task::spawn_blocking(move || service.refresh_tools()).await {
                tracing::info!("contracts changed; the tool list was reloaded");
            }
        }
    })
}

/// Serves every route on `listener` until SIGTERM or Ctrl-C, then shuts down gracefully.
pub(crate) async fn serve(
    service: Service,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
) -> anyhow::Result<()> {
    let mcp = mcp_bridge::HttpEndpoint::new(service.clone(), options.bridge.clone());
    let app = router(&service, &options, Some(&mcp));
    let watcher = watch_contracts(service.clone());
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
