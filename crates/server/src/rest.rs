//! The REST view of the same façade: `GET /v1/tools/list`, `POST /v1/tools/call` (which answers
//! like an MCP tool call), `POST /v1/tools/register`, `DELETE /v1/tools/{name}` and
//! `GET /v1/sessions/{id}` (a task's state with its session version).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use service::{Caller, ServiceError};

use crate::app::AppState;

/// The HTTP status of each error code; the body is always the structured error.
pub(crate) fn status_of(e: &ServiceError) -> StatusCode {
    match e.code() {
        "invalid_argument" => StatusCode::BAD_REQUEST,
        "workflow_order" | "session_conflict" | "idempotency_key_reused" | "task_closed" => {
            StatusCode::CONFLICT
        }
        "not_found" => StatusCode::NOT_FOUND,
        "limit_exceeded" => StatusCode::UNPROCESSABLE_ENTITY,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "forbidden" | "person_decision_required" => StatusCode::FORBIDDEN,
        "source_failed" | "contract_violation" => StatusCode::BAD_GATEWAY,
        "timeout" => StatusCode::GATEWAY_TIMEOUT,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A service error as an HTTP response: the one place the REST view maps errors. Its status is
/// the error code's ([`status_of`]), but for a refusal of the HTTP request itself — its method,
/// its content type, its size — which says so with [`ApiError::http`].
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    error: ServiceError,
}

impl ApiError {
    /// A refusal of the HTTP request itself, with the status that names its fault.
    pub(crate) fn http(status: StatusCode, error: ServiceError) -> Self {
        ApiError { status, error }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.error.to_json())).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> Self {
        ApiError {
            status: status_of(&error),
            error,
        }
    }
}

/// The routes of the REST view.
pub(crate) fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/tools/list", get(list))
        .route("/v1/tools/call", post(call))
        .route("/v1/tools/register", post(register))
        .route("/v1/tools/{name}", delete(unregister))
        .route("/v1/sessions/{id}", get(session))
}

/// A request's body, read whole (within `request_bytes_max`); a body that cannot be read is
/// refused with the structured error, like every other refusal.
pub(crate) struct RequestBody(pub(crate) Bytes);

impl FromRequest<AppState> for RequestBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = crate::app::read_body(request.into_body(), state.request_bytes_max).await?;
        Ok(RequestBody(bytes))
    }
}

/// The one parameter in a route's path (a task, tool or token name); one that cannot be read
/// (its percent-encoding is not UTF-8) is refused with the structured error.
pub(crate) struct PathParam(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for PathParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(PathParam(value)),
            Err(rejection) => Err(ApiError::from(ServiceError::InvalidArgument {
                field: "path".into(),
                message: rejection.body_text(),
            })),
        }
    }
}

/// Runs blocking work of the service off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ServiceError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(e) => Err(ApiError::from(ServiceError::Unavailable(format!(
            "the work stopped: {e}"
        )))),
    }
}

/// Reads a request body that must be JSON of the shape `T`: refused with 415 when it does not
/// say it is JSON ([`require_json`]), and with `invalid_argument` naming `expected` (the shape,
/// for the message) when it does not read as `T`.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
    expected: &str,
) -> Result<T, ApiError> {
    require_json(headers)?;
    serde_json::from_slice(body).map_err(|e| {
        ApiError::from(ServiceError::InvalidArgument {
            field: "body".into(),
            message: format!("expected {expected}: {e}"),
        })
    })
}

/// Refuses a body that does not say it is JSON. Besides being what the routes read, this keeps
/// browsers out: a page of any site may send a form or `text/plain` to this server without
/// asking first, but not `application/json` (that needs a CORS preflight it never grants), and
/// a server without tokens on loopback treats every caller as local.
pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if json {
        return Ok(());
    }
    Err(ApiError::http(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ServiceError::InvalidArgument {
            field: "content-type".into(),
            message: format!(
                "send the body as application/json, not {}",
                headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("without a Content-Type")
            ),
        },
    ))
}

/// Refuses a request from a page of another site: one whose `Origin` (a browser sends it with
/// every request a page makes, but for a plain `GET`) is not this server's own. A page of any
/// site may send a form or a `text/plain` body here without asking first, and on a server
/// without tokens every caller on loopback has every right, registering tools included.
/// Clients that are not browsers send no `Origin` and pass. (GraphQL and MCP check `Origin`
/// their own way.)
pub(crate) async fn same_origin(request: Request, next: Next) -> Response {
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, authority)| authority.trim_end_matches('/'));
        let own = matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h));
        if !own {
            return ApiError::from(ServiceError::Forbidden(format!(
                "requests from the origin {} are refused: only pages served by this server may call it",
                origin.to_str().unwrap_or("(not text)")
            )))
            .into_response();
        }
    }
    next.run(request).await
}

/// Refuses a write whose body is not JSON, on every route of the REST view, export, tokens
/// and `--server`: each reads JSON, and a body of another type is what a page of another site
/// may send without asking first. A write without a body (`DELETE`, a checkpoint) needs no
/// type.
pub(crate) async fn json_writes(request: Request, next: Next) -> Response {
    use axum::body::HttpBody as _;
    let write = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let declared_empty = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "0");
    let has_body = !declared_empty && !request.body().is_end_stream();
    if write
        && has_body
        && let Err(refused) = require_json(request.headers())
    {
        return refused.into_response();
    }
    next.run(request).await
}

/// The answer to a path the server does not have.
pub(crate) async fn no_route(uri: Uri) -> ApiError {
    ApiError::from(ServiceError::NotFound {
        resource: "route",
        id: uri.path().to_owned(),
    })
}

/// The answer to a method a path does not take (axum adds the `Allow` header).
pub(crate) async fn no_method(method: Method, uri: Uri) -> ApiError {
    ApiError::http(
        StatusCode::METHOD_NOT_ALLOWED,
        ServiceError::InvalidArgument {
            field: "method".into(),
            message: format!(
                "{method} is not served on {}: the Allow header lists the methods that are",
                uri.path()
            ),
        },
    )
}

/// Who is calling: the holder of the request's access token, or, on a server without tokens,
/// one local client.
pub(crate) fn caller(authenticated: Option<Extension<Caller>>) -> Caller {
    authenticated
        .map_or_else(|| Caller::new("rest-client"), |Extension(caller)| caller)
        .deciding(service::research::event::DecidedBy::Person, "rest")
}

async fn list(State(state): State<AppState>) -> Json<Value> {
    let tools: Vec<Value> = state
        .service
        .tools()
        .into_iter()
        .map(|t| {
            // The annotations MCP's `tools/list` gives: only what differs from its defaults.
            let mut annotations = serde_json::Map::new();
            if t.read_only {
                annotations.insert("readOnlyHint".into(), json!(true));
            } else {
                annotations.insert("destructiveHint".into(), json!(false));
            }
            if t.idempotent {
                annotations.insert("idempotentHint".into(), json!(true));
            }
            if !t.open_world {
                annotations.insert("openWorldHint".into(), json!(false));
            }
            json!({
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "inputSchema": t.input_schema,
                "outputSchema": t.output_schema,
                "annotations": annotations,
            })
        })
        .collect();
    Json(json!({ "tools": tools }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody {
    name: String,
    #[serde(default)]
    arguments: Value,
}

async fn call(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
    headers: HeaderMap,
    RequestBody(body): RequestBody,
) -> Result<Json<Value>, ApiError> {
    let body: CallBody = json_body(&headers, &body, r#"{"name": …, "arguments": {…}}"#)?;
    let out = state
        .service
        .call_tool_async(caller(authenticated), body.name, body.arguments)
        .await?;
    Ok(Json(json!({ "result": out.structured, "text": out.text })))
}

/// `POST /v1/tools/register`: the contract's YAML text in a JSON body, like every other write,
/// so that no page of another site can send one without asking first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterBody {
    contract: String,
}

async fn register(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
    headers: HeaderMap,
    RequestBody(body): RequestBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let RegisterBody { contract: text } = json_body(
        &headers,
        &body,
        r#"{"contract": "the contract, as YAML text"}"#,
    )?;
    let service = state.service.clone();
    let caller = caller(authenticated);
    let name = blocking(move || service.register_tool(&caller, &text)).await?;
    Ok((StatusCode::CREATED, Json(json!({ "registered": name }))))
}

async fn unregister(
    State(state): State<AppState>,
    authenticated: Option<Extension<Caller>>,
    PathParam(name): PathParam,
) -> Result<Json<Value>, ApiError> {
    let service = state.service.clone();
    let removed = name.clone();
    let caller = caller(authenticated);
    blocking(move || service.unregister_tool(&caller, &removed)).await?;
    Ok(Json(json!({ "unregistered": name })))
}

async fn session(
    State(state): State<AppState>,
    PathParam(id): PathParam,
) -> Result<Json<Value>, ApiError> {
    let task = state.service.state(&id)?;
    let summary = task.summary();
    Ok(Json(json!({
        "session_id": id,
        "session_version": task.version(),
        "status": task.status().map(|s| s.name()),
        "summary": summary,
        "pending_actions": research::next_actions(&task),
        "conclusion": task.conclusion_card(None),
    })))
}
