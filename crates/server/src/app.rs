//! The app: one axum router that every front end adds its routes to, behind the same layers.
//!
//! Every request passes, outermost first: the request log (one line per request with its
//! status and duration), the `Host` allow-list ([`crate::hosts`]), the access check
//! ([`crate::auth`]), and the limits (requests in flight, request time, body size and the time
//! the body may take to arrive). The access check comes before the limits so that a caller
//! without a valid token holds no slot and has no byte of its body read. A request refused by a
//! limit, the allow-list or the access check gets the structured error body of every other
//! refusal; so does a path or method the server does not have, and `/mcp` answers its own
//! refusals as JSON-RPC errors.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use service::{Caller, Service, ServiceError};
use tokio::sync::Semaphore;

use crate::auth::Auth;
use crate::rest::ApiError;

/// Bounds on every HTTP request, whatever route it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body, in bytes (GraphQL has its own, usually lower, bound).
    pub request_bytes_max: usize,
    /// Longest a request may take to produce its response.
    pub request_time_max: Duration,
    /// Requests being handled at once; more are refused, not queued.
    pub requests_in_flight_max: usize,
    /// Longest a request's body may take to arrive, whole.
    pub body_read_time_max: Duration,
}

/// How the app serves.
#[derive(Debug, Clone)]
pub struct AppOptions {
    /// How the GraphQL API is served.
    pub graphql: graphql::Options,
    /// How the MCP endpoint is served.
    pub bridge: mcp_bridge::BridgeOptions,
    /// Who may call.
    pub auth: Arc<Auth>,
    /// Bounds on every request.
    pub limits: HttpLimits,
    /// The names the server answers to.
    pub hosts: Arc<crate::hosts::HostAllowList>,
    /// Exports being written at once.
    pub export_concurrent_max: usize,
}

/// The state every route shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) service: Service,
    /// Who may call.
    pub(crate) auth: Arc<Auth>,
    /// The largest request body.
    pub(crate) request_bytes_max: usize,
    /// A permit per export being made.
    pub(crate) exports: Arc<Semaphore>,
    /// How many exports may be made at once.
    pub(crate) export_concurrent_max: usize,
}

/// What the limits layer shares.
#[derive(Debug, Clone)]
struct Gate {
    in_flight: Arc<Semaphore>,
    limits: HttpLimits,
}

/// Every route of the server, behind its layers, with an MCP endpoint of its own at `/mcp`.
///
/// Tests drive it in process (`tower::ServiceExt::oneshot`); `serve` passes the endpoint it
/// stops at shutdown to [`app_with_mcp`].
pub fn app(service: &Service, options: &AppOptions) -> Router {
    let mcp = mcp_bridge::HttpEndpoint::new(service.clone(), options.bridge.clone());
    app_with_mcp(service, options, Some(&mcp))
}

/// Every route of the server, behind its layers; the MCP endpoint too when given.
pub fn app_with_mcp(
    service: &Service,
    options: &AppOptions,
    mcp: Option<&mcp_bridge::HttpEndpoint>,
) -> Router {
    let mut graphql_options = options.graphql.clone();
    let auth = options.auth.clone();
    graphql_options.authenticator = Some(graphql::Authenticator {
        changes: auth.watch(),
        check: Arc::new(move |token| auth.caller_of_token(token)),
    });
    let state = AppState {
        service: service.clone(),
        auth: options.auth.clone(),
        request_bytes_max: options.limits.request_bytes_max,
        exports: Arc::new(Semaphore::new(options.export_concurrent_max)),
        export_concurrent_max: options.export_concurrent_max,
    };
    // The REST view, export, tokens and what `--server` needs: refused to pages of other sites.
    let rest = Router::new()
        .merge(crate::rest::routes())
        .merge(crate::export::routes())
        .merge(crate::tokens_api::routes())
        .merge(crate::remote_api::routes())
        .route_layer(middleware::from_fn(crate::rest::json_writes))
        .route_layer(middleware::from_fn(crate::rest::same_origin));
    let mut app = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .merge(crate::transparency::routes())
        .merge(crate::console::routes())
        .merge(rest)
        .with_state(state)
        .merge(graphql::router(service.clone(), graphql_options));
    if let Some(mcp) = mcp {
        let guard = McpGuard {
            bytes_max: options.limits.request_bytes_max,
            endpoint: mcp.clone(),
            owners: Arc::default(),
            auth: options.auth.clone(),
        };
        let endpoint = Router::new()
            .route_service("/mcp", mcp.service())
            .layer(middleware::from_fn_with_state(guard, mcp_refusals));
        app = app.merge(endpoint);
    }
    // What the server does not have is refused like everything else: with the structured error.
    app = app
        .method_not_allowed_fallback(crate::rest::no_method)
        .fallback(crate::rest::no_route);
    let gate = Gate {
        in_flight: Arc::new(Semaphore::new(options.limits.requests_in_flight_max)),
        limits: options.limits,
    };
    // Bodies are bounded by `limit` already; this keeps axum's extractors from imposing their
    // own, smaller default on a route that reads its body with one.
    app.layer(DefaultBodyLimit::max(options.limits.request_bytes_max))
        .layer(middleware::from_fn_with_state(gate, limit))
        .layer(middleware::from_fn_with_state(
            options.auth.clone(),
            crate::auth::layer,
        ))
        .layer(middleware::from_fn_with_state(
            options.hosts.clone(),
            crate::hosts::layer,
        ))
        .layer(middleware::from_fn(log))
}

/// The structured error of a refused request, with its status.
/// A refusal for a limit that frees itself (a slot in use, not a size): the client is told to
/// try again in a second.
pub(crate) fn try_again_soon(mut refused: Response) -> Response {
    refused
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    refused
}

fn refusal(status: StatusCode, error: &ServiceError) -> Response {
    (status, Json(error.to_json())).into_response()
}

/// Refuses a request past a limit: too many in flight (503, try again shortly: never queued,
/// though a body already on its way is read and dropped first), a body over the bound (413),
/// a body that does not arrive in time (408), or a request that takes too long (504; a write
/// it started may still land, which is what idempotency keys are for).
///
/// A declared body (`Content-Length`) over the bound is refused before anything is read. Any
/// other body is read here, up to the bound and no further and within `body_read_time_max`,
/// so that every route sees a whole body within it, a client trickling its body holds its slot
/// no longer than that, and every refusal of one is this structured error, whichever front end
/// the request was for.
async fn limit(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let HttpLimits {
        request_bytes_max,
        request_time_max,
        requests_in_flight_max,
        body_read_time_max,
        ..
    } = gate.limits;
    let Ok(_permit) = gate.in_flight.clone().try_acquire_owned() else {
        discard_body(request, request_bytes_max, request_time_max).await;
        return try_again_soon(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            &ServiceError::LimitExceeded {
                limit: "requests_in_flight_max".into(),
                max: requests_in_flight_max as u64,
                actual: requests_in_flight_max as u64 + 1,
            },
        ));
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared.filter(|n| *n > request_bytes_max as u64) {
        return too_large(request_bytes_max, declared).into_response();
    }
    let handled = async move {
        let request = if !request.body().is_end_stream() {
            let (parts, body) = request.into_parts();
            let read =
                tokio::time::timeout(body_read_time_max, read_body(body, request_bytes_max)).await;
            match read {
                Ok(Ok(bytes)) => Request::from_parts(parts, Body::from(bytes)),
                Ok(Err(e)) => return e.into_response(),
                Err(_) => {
                    return ApiError::http(
                        StatusCode::REQUEST_TIMEOUT,
                        ServiceError::Timeout(format!(
                            "the request's body did not arrive within body_read_secs_max = {} s",
                            body_read_time_max.as_secs()
                        )),
                    )
                    .into_response();
                }
            }
        } else {
            request
        };
        next.run(request).await
    };
    match tokio::time::timeout(request_time_max, handled).await {
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

/// The refusal of a body over `request_bytes_max`; `actual` is its size, or for a body of
/// undeclared length the bytes read when it crossed the bound.
fn too_large(request_bytes_max: usize, actual: u64) -> ApiError {
    ApiError::http(
        StatusCode::PAYLOAD_TOO_LARGE,
        ServiceError::LimitExceeded {
            limit: "request_bytes_max".into(),
            max: request_bytes_max as u64,
            actual,
        },
    )
}

/// Reads a request's body whole, refusing one over `bytes_max` as soon as it crosses it (413
/// `limit_exceeded`, `request_bytes_max`) and one that breaks off or is badly framed (400
/// `invalid_argument`).
pub(crate) async fn read_body(mut body: Body, bytes_max: usize) -> Result<Bytes, ApiError> {
    let mut read = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            // What went wrong is in the causes (a malformed chunk, a connection cut short); a
            // wrapper may repeat its cause's text.
            let mut said = e.to_string();
            let mut message = format!("the request's body could not be read: {said}");
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                let text = c.to_string();
                if text != said {
                    message.push_str(&format!(": {text}"));
                    said = text;
                }
                cause = c.source();
            }
            ApiError::from(ServiceError::InvalidArgument {
                field: "body".into(),
                message,
            })
        })?;
        let Ok(data) = frame.into_data() else {
            // Trailers carry no body.
            continue;
        };
        if read.len() + data.len() > bytes_max {
            return Err(too_large(bytes_max, (read.len() + data.len()) as u64));
        }
        read.extend_from_slice(&data);
    }
    Ok(Bytes::from(read))
}

/// What the guard of `/mcp` shares.
#[derive(Clone)]
struct McpGuard {
    bytes_max: usize,
    endpoint: mcp_bridge::HttpEndpoint,
    owners: Arc<crate::streams::SessionOwners>,
    auth: Arc<Auth>,
}

/// A JSON-RPC error response for a refusal of `/mcp` with the structured error `error`.
fn mcp_refusal(status: StatusCode, error: &ServiceError) -> Response {
    let data = error.to_json();
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32600, "message": error.to_string(), "data": data},
    });
    (status, Json(body)).into_response()
}

/// `/mcp` answers every refusal in JSON-RPC: a body the SDK could not read is refused before it
/// gets there, with the code JSON-RPC gives the fault (parse error, invalid request, invalid
/// params), and a refusal the SDK answers in plain text (a wrong `Content-Type` or `Accept`, an
/// unknown session) is rewritten as a JSON-RPC error with the same status.
///
/// It also holds sessions to their callers ([`crate::streams`]): a session answers only the
/// token that opened it, an event stream ends when its caller no longer holds, and an
/// `initialize` past `mcp_sessions_max` is refused with `limit_exceeded`.
async fn mcp_refusals(State(guard): State<McpGuard>, request: Request, next: Next) -> Response {
    let token = crate::streams::token_of(request.headers());
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !guard.owners.may_use(id, token.as_deref())
    {
        return mcp_refusal(
            StatusCode::NOT_FOUND,
            &ServiceError::NotFound {
                resource: "session",
                id: id.clone(),
            },
        );
    }
    // A `GET` event stream, or a `subscriptions/listen`, has no end of its own: it ends when the
    // server begins to stop. Every other response is a request's answer, finished even then.
    let standing_get = request.method() == Method::GET;
    let (request, checked) = match checked_post(&guard, session.is_none(), request).await {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    let initializing = checked.is_some_and(|c| session.is_none() && c.initialize);
    let standing = standing_get || checked.is_some_and(|c| c.standing);
    let response = next.run(request).await;
    if initializing
        && let Some(id) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        guard
            .owners
            .opened(id, token.as_deref(), &guard.endpoint)
            .await;
    }
    as_json_rpc(&guard, token, standing, response).await
}

/// A JSON `POST`, its body read and checked as the SDK will read it, refused when the SDK
/// could not read it or when it opens a session past `mcp_sessions_max`; with what the check
/// read of it. Any other request goes on as it came, with nothing read.
async fn checked_post(
    guard: &McpGuard,
    sessionless: bool,
    request: Request,
) -> Result<(Request, Option<mcp_bridge::CheckedPost>), Response> {
    if request.method() != Method::POST || crate::rest::require_json(request.headers()).is_err() {
        return Ok((request, None));
    }
    let (parts, body) = request.into_parts();
    let bytes = read_body(body, guard.bytes_max)
        .await
        .map_err(IntoResponse::into_response)?;
    let version = parts
        .headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    let checked = match mcp_bridge::check_post(&bytes, version) {
        Ok(checked) => checked,
        Err(refusal) => return Err((refusal.status, Json(refusal.body)).into_response()),
    };
    let initializing = sessionless && checked.initialize;
    let sessions_max = guard.endpoint.options().sessions_max;
    if initializing && guard.endpoint.session_count().await >= sessions_max {
        return Err(try_again_soon(mcp_refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            &ServiceError::LimitExceeded {
                limit: "mcp_sessions_max".into(),
                max: sessions_max as u64,
                actual: sessions_max as u64 + 1,
            },
        )));
    }
    Ok((Request::from_parts(parts, Body::from(bytes)), Some(checked)))
}

/// The SDK's response as the caller gets it: an event stream that ends once the caller's token
/// no longer holds, and, when it is `standing` (it has no end of its own), once the server
/// begins to stop; a refusal the SDK answered in plain text rewritten as a JSON-RPC error with
/// the same status; anything else as it is.
async fn as_json_rpc(
    guard: &McpGuard,
    token: Option<String>,
    standing: bool,
    response: Response,
) -> Response {
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if content_type.starts_with("text/event-stream") {
        let (parts, body) = response.into_parts();
        let mut body = crate::streams::revocable(body, guard.auth.clone(), token);
        if standing {
            body = crate::streams::until_stopping(body, guard.endpoint.streams_ended());
        }
        return Response::from_parts(parts, body);
    }
    let structured = content_type.starts_with("application/json");
    if structured || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // The SDK's refusals are one short line.
    let text = read_body(body, 64 * 1024).await.unwrap_or_default();
    let refusal = mcp_bridge::refusal_of_text(status, &String::from_utf8_lossy(&text));
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    (parts, Json(refusal.body)).into_response()
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
            match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
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
        duration_ms = millis(started.elapsed()),
        actor = actor.as_deref().unwrap_or("-"),
        "request"
    );
    response
}

/// A duration in milliseconds to the microsecond, as the request log writes it.
fn millis(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
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

/// `GET /health`: whether the store is open and writable (and if not, why: every problem the
/// ledger found), the ledger's size, the last checkpoint, what recovery did to the log, and the
/// version of the server.
///
/// Read on a blocking thread: on a shared database the latest checkpoint is a query, and
/// checks waiting on a database that does not answer must not hold the async threads.
async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let service = state.service.clone();
    crate::rest::blocking(move || Ok(Json(health_report(&service)))).await
}

fn health_report(service: &Service) -> Value {
    let ledger = service.ledger();
    let head = ledger.head();
    let checkpoint = ledger.latest_checkpoint().ok().flatten();
    let refusing = service.refusing_writes();
    // Writes go on without a usable key; checkpoints do not, and this says why (on a shared
    // database, another node rotated the key and this one waits for it).
    let signing = match ledger.public_key() {
        Ok(key) => json!({"key": key.fingerprint(), "reason": null}),
        Err(reason) => json!({"key": null, "reason": reason}),
    };
    json!({
        "signing": signing,
        "status": if refusing.is_none() { "ok" } else { "refusing_writes" },
        "reason": refusing,
        "problems": ledger.problems(),
        "recovery": ledger.recovery_notes(),
        "corpus": service.corpus_health(),
        "version": env!("CARGO_PKG_VERSION"),
        "ledger": {
            "size": head.size,
            "head_hash": head.last_hash,
            "last_checkpoint": checkpoint,
        },
    })
}
