//! The GraphQL API over HTTP: `POST /graphql` for queries and mutations, `GET /graphql/ws` for
//! subscriptions (graphql-transport-ws, and the older graphql-ws protocol for clients that only
//! speak it). The pages that use it, GraphiQL at `GET /graphql` among them, are the server's
//! console, which merges its routes beside these.
//!
//! The server answers on loopback without credentials, so the browser is the one client that
//! could be turned against it: a page on another site can send a simple cross-site POST, or
//! open a WebSocket, to `127.0.0.1`. Two checks close that. `POST /graphql` takes only
//! `application/json`, which a browser will not send cross-site without asking first (a CORS
//! preflight this server never grants); and a request that carries an `Origin` — browsers
//! always send one on WebSocket handshakes and cross-site POSTs — must come from the server's
//! own origin. (A page that rebinds its DNS name to the server passes that check, with its own
//! name in both headers: the server in front refuses names it does not answer to, before any
//! route.)
//!
//! A WebSocket outlives the request that opened it, so its caller is not taken once: the token
//! (from the handshake, or else `connection_init`) is checked again before every message the
//! client sends, in every resolver, and whenever the server says its token list changed; a
//! socket whose token no longer gives the same caller is closed (4401, or 4403 when it names
//! someone else). Sockets are bounded by `websockets_max`, subscriptions on one by
//! `subscriptions_per_connection_max`.

use std::sync::Arc;

use async_graphql::http::ALL_WEBSOCKET_PROTOCOLS;
use async_graphql::{Data, Response as GqlResponse};
use async_graphql_axum::{GraphQLProtocol, GraphQLResponse, GraphQLWebSocket};
use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use service::{Caller, Service, ServiceError};

use crate::error::to_server_error;
use crate::limits::SubscriptionSlots;
use crate::{Authenticator, Options, ResearchSchema, build_schema};

/// What the routes share.
#[derive(Clone)]
struct Http {
    schema: ResearchSchema,
    options: Arc<Options>,
    /// A permit per open WebSocket.
    websockets: Arc<tokio::sync::Semaphore>,
}

/// The routes of the GraphQL API, ready to merge into the server's router. A layer in front
/// of them may put the authenticated [`Caller`] into the request's extensions; without one,
/// writes are recorded as [`Options::anonymous_actor`].
pub fn router(service: Service, options: Options) -> Router {
    let schema = build_schema(service, options.clone());
    Router::new()
        .route("/graphql", axum::routing::post(post))
        .route("/graphql/ws", get(websocket))
        .with_state(Http {
            schema,
            websockets: Arc::new(tokio::sync::Semaphore::new(options.limits.websockets_max)),
            options: Arc::new(options),
        })
}

/// A GraphQL response that holds only `error`, with an HTTP status, for requests refused
/// before they reach the schema.
fn refuse(status: StatusCode, error: ServiceError) -> Response {
    let body = GqlResponse::from_errors(vec![to_server_error(error)]);
    (status, GraphQLResponse::from(body)).into_response()
}

/// The refusal of a request from a browser page of another origin.
fn foreign_origin(headers: &HeaderMap) -> Option<Response> {
    let origin = headers.get(header::ORIGIN)?;
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, authority)| authority.trim_end_matches('/'));
    match (origin_host, host) {
        (Some(origin_host), Some(host)) if origin_host.eq_ignore_ascii_case(host) => None,
        _ => Some(refuse(
            StatusCode::FORBIDDEN,
            ServiceError::Forbidden(format!(
                "requests from the origin {} are refused: only pages served by this server may call it",
                origin.to_str().unwrap_or("(not text)")
            )),
        )),
    }
}

fn caller_of(extensions: &axum::http::Extensions, options: &Options) -> Caller {
    extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(|| Caller::new(options.anonymous_actor.clone()))
        .deciding(service::research::event::DecidedBy::Person, "graphql")
}

/// `POST /graphql`: one query or mutation, as JSON.
async fn post(State(http): State<Http>, request: Request) -> Response {
    if let Some(refused) = foreign_origin(request.headers()) {
        return refused;
    }
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ServiceError::InvalidArgument {
                field: "content-type".into(),
                message: "send the request as application/json: {\"query\": …, \"variables\": …}"
                    .into(),
            },
        );
    }
    let caller = caller_of(request.extensions(), &http.options);
    let bytes_max = http.options.limits.request_bytes_max;
    let too_large = |actual: u64| {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            ServiceError::LimitExceeded {
                limit: "request_bytes_max".into(),
                max: bytes_max as u64,
                actual,
            },
        )
    };
    // A declared length over the limit is refused before anything is read.
    if let Some(declared) = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n > bytes_max as u64)
    {
        return too_large(declared);
    }
    let bytes = match axum::body::to_bytes(request.into_body(), bytes_max).await {
        Ok(bytes) => bytes,
        // An undeclared length is read up to the limit and no further.
        Err(_) => return too_large(bytes_max as u64 + 1),
    };
    // One request, as an object: the reader would take an array for the fields in order, and
    // answer a batch with a confusing error about an empty query.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return refuse(
            StatusCode::BAD_REQUEST,
            ServiceError::InvalidArgument {
                field: "body".into(),
                message: "not a GraphQL request: send one request as a JSON object, {\"query\": …, \"variables\": …}; batches are not served".into(),
            },
        );
    }
    let graphql_request: async_graphql::Request = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                ServiceError::InvalidArgument {
                    field: "body".into(),
                    message: format!("not a GraphQL request: {e}"),
                },
            );
        }
    };
    GraphQLResponse::from(http.schema.execute(graphql_request.data(caller)).await).into_response()
}

/// `GET /graphql/ws`: subscriptions (and queries and mutations) over one WebSocket.
async fn websocket(
    State(http): State<Http>,
    headers: HeaderMap,
    protocol: Result<GraphQLProtocol, StatusCode>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if let Some(refused) = foreign_origin(&headers) {
        return refused;
    }
    let not_a_websocket = |status, why: String| {
        refuse(
            status,
            ServiceError::InvalidArgument {
                field: "upgrade".into(),
                message: format!(
                    "/graphql/ws is a WebSocket speaking graphql-transport-ws (or graphql-ws): {why}"
                ),
            },
        )
    };
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return not_a_websocket(rejection.status(), rejection.body_text()),
    };
    let Ok(protocol) = protocol else {
        return not_a_websocket(
            StatusCode::BAD_REQUEST,
            "the handshake asks for neither in Sec-WebSocket-Protocol".into(),
        );
    };
    let websockets_max = http.options.limits.websockets_max;
    let Ok(slot) = http.websockets.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            ServiceError::LimitExceeded {
                limit: "graphql_websockets_max".into(),
                max: websockets_max as u64,
                actual: websockets_max as u64 + 1,
            },
        );
    };
    let bytes_max = http.options.limits.request_bytes_max;
    let schema = http.schema.clone();
    let options = http.options.clone();
    // The handshake's own token, which the server's access check already accepted; else the
    // connection_init payload names one (browsers cannot set headers on a WebSocket).
    let header_token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    upgrade
        .protocols(ALL_WEBSOCKET_PROTOCOLS)
        .max_message_size(bytes_max)
        .max_frame_size(bytes_max)
        .on_upgrade(move |socket| async move {
            serve_socket(socket, schema, protocol, options, header_token).await;
            drop(slot);
        })
}

/// Who a socket acts for: fixed at `connection_init`, and checked again on every message the
/// client sends and every change of the token list.
#[derive(Clone)]
pub(crate) struct Credentials {
    authenticator: Option<Authenticator>,
    anonymous: String,
    binding: Arc<std::sync::Mutex<Binding>>,
}

/// The socket's token, and the caller it gave at `connection_init` (none before it).
#[derive(Debug, Clone, Default)]
struct Binding {
    token: Option<String>,
    /// The caller's name and role, or none for the local caller.
    bound: Option<Option<(String, service::Role)>>,
}

impl Credentials {
    fn new(options: &Options, header_token: Option<String>) -> Self {
        Credentials {
            authenticator: options.authenticator.clone(),
            anonymous: options.anonymous_actor.clone(),
            binding: Arc::new(std::sync::Mutex::new(Binding {
                token: header_token,
                bound: None,
            })),
        }
    }

    fn binding(&self) -> std::sync::MutexGuard<'_, Binding> {
        self.binding.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The caller the token gives now.
    pub(crate) fn current(&self) -> Result<Caller, ServiceError> {
        self.resolve().map(|(caller, _)| caller)
    }

    fn identity(caller: &Caller, local: bool) -> Option<(String, service::Role)> {
        (!local).then(|| (caller.actor.clone(), caller.role))
    }

    /// Fixes the caller at `connection_init`, taking the payload's token when the handshake
    /// brought none.
    fn bind(&self, payload_token: Option<String>) -> Result<Caller, ServiceError> {
        {
            let mut binding = self.binding();
            if binding.token.is_none() {
                binding.token = payload_token;
            }
        }
        let (caller, local) = self.resolve()?;
        self.binding().bound = Some(Self::identity(&caller, local));
        Ok(caller)
    }

    fn resolve(&self) -> Result<(Caller, bool), ServiceError> {
        let Some(Authenticator { check, .. }) = &self.authenticator else {
            return Ok((Caller::new(self.anonymous.clone()), true));
        };
        let token = self.binding().token.clone();
        Ok(match check(token.as_deref())? {
            Some(caller) => (caller, false),
            None => (Caller::new(self.anonymous.clone()), true),
        })
    }

    /// Whether the caller fixed at `connection_init` still holds: the close code and reason
    /// when it does not (4401 when the token is no longer accepted, 4403 when it now names
    /// someone else). Before `connection_init` there is nothing to hold.
    fn still_holds(&self) -> Result<(), Close> {
        let Some(bound) = self.binding().bound.clone() else {
            return Ok(());
        };
        match self.resolve() {
            Ok((caller, local)) if Self::identity(&caller, local) == bound => Ok(()),
            Ok(_) => Err((4403, "the caller of this socket changed".into())),
            Err(e) => Err((4401, e.to_string())),
        }
    }
}

/// A close code and its reason.
type Close = (u16, String);

/// Why the reader refused a message: set once, read by the loop that closes the socket.
#[derive(Default)]
struct Refusal {
    notify: tokio::sync::Notify,
    reason: std::sync::Mutex<Option<Close>>,
}

impl Refusal {
    fn refuse(&self, why: Close) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.notify.notify_one();
    }

    fn take(&self) -> Option<Close> {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Runs one socket: graphql-transport-ws by the engine, between a reader that checks the
/// caller before handing on each message and a writer that closes the socket when the token
/// list changes under a caller who no longer holds.
async fn serve_socket(
    socket: axum::extract::ws::WebSocket,
    schema: ResearchSchema,
    protocol: GraphQLProtocol,
    options: Arc<Options>,
    header_token: Option<String>,
) {
    use async_graphql::futures_util::StreamExt as _;

    let credentials = Credentials::new(&options, header_token);
    let (to_client, from_client) = socket.split();
    let refusal = Arc::new(Refusal::default());
    let checked = {
        let credentials = credentials.clone();
        let refusal = refusal.clone();
        from_client.take_while(move |message| {
            use axum::extract::ws::Message;
            let pass = match message {
                Ok(Message::Text(_) | Message::Binary(_)) => match credentials.still_holds() {
                    Ok(()) => true,
                    Err(why) => {
                        refusal.refuse(why);
                        false
                    }
                },
                _ => true,
            };
            std::future::ready(pass)
        })
    };
    let (outgoing, outbox) = tokio::sync::mpsc::channel(16);
    let sink = async_graphql::futures_util::sink::unfold(
        outgoing,
        |outgoing, message: axum::extract::ws::Message| async move {
            outgoing
                .send(message)
                .await
                .map_err(|_| axum::Error::new("the socket closed"))?;
            Ok::<_, axum::Error>(outgoing)
        },
    );
    let subscriptions_max = options.limits.subscriptions_per_connection_max;
    let init_credentials = credentials.clone();
    let engine = GraphQLWebSocket::new_with_pair(sink, checked, schema, protocol)
        .on_connection_init(move |payload| async move {
            let credentials = init_credentials;
            let caller = credentials
                .bind(init_token(&payload))
                .map_err(to_server_error)?;
            // The reader and writer check the same token the engine's resolvers do.
            let mut data = Data::default();
            data.insert(caller);
            data.insert(credentials);
            data.insert(SubscriptionSlots::new(subscriptions_max));
            Ok(data)
        })
        .serve();
    let socket = Socket {
        to_client,
        outbox,
        credentials,
        refusal,
    };
    socket.run(engine, &options).await;
}

/// The writing half of a socket and what decides when it closes.
struct Socket {
    to_client: async_graphql::futures_util::stream::SplitSink<
        axum::extract::ws::WebSocket,
        axum::extract::ws::Message,
    >,
    /// What the engine sends the client.
    outbox: tokio::sync::mpsc::Receiver<axum::extract::ws::Message>,
    credentials: Credentials,
    refusal: Arc<Refusal>,
}

impl Socket {
    /// Drives `engine` and forwards what it sends until the socket ends, then closes it with
    /// the code and reason of a caller who no longer holds, if that is why it ended.
    async fn run(mut self, engine: impl Future<Output = ()>, options: &Options) {
        use async_graphql::futures_util::SinkExt as _;
        use axum::extract::ws::{CloseFrame, Message};

        let Some((code, why)) = self.forward(engine, options).await else {
            return;
        };
        tracing::info!(code, reason = %why, "closing a GraphQL WebSocket whose caller no longer holds");
        let reason: String = why.chars().take(100).collect();
        let _ = self
            .to_client
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
        let _ = self.to_client.flush().await;
    }

    /// Forwards what the engine sends until the client leaves, the reader refuses a message,
    /// the token list changes under a caller who no longer holds, or no `connection_init`
    /// came in time (graphql-transport-ws closes such a socket with 4408).
    async fn forward(
        &mut self,
        engine: impl Future<Output = ()>,
        options: &Options,
    ) -> Option<Close> {
        use async_graphql::futures_util::SinkExt as _;

        tokio::pin!(engine);
        let mut changes = options.authenticator.as_ref().map(|a| a.changes.clone());
        let mut engine_done = false;
        let init_deadline = tokio::time::sleep(std::time::Duration::from_secs(
            options.limits.connection_init_secs_max,
        ));
        tokio::pin!(init_deadline);
        let mut init_checked = false;
        loop {
            tokio::select! {
                () = &mut init_deadline, if !init_checked => {
                    init_checked = true;
                    if self.credentials.binding().bound.is_none() {
                        return Some((4408, "Connection initialisation timeout".to_owned()));
                    }
                }
                () = &mut engine, if !engine_done => engine_done = true,
                message = self.outbox.recv() => match message {
                    Some(message) => {
                        if self.to_client.send(message).await.is_err() {
                            return None;
                        }
                    }
                    // The engine ended: because the reader refused a message, or the client left.
                    None => return self.refusal.take(),
                },
                () = self.refusal.notify.notified() => return self.refusal.take(),
                changed = async {
                    match changes.as_mut() {
                        Some(changes) => changes.changed().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if changed.is_err() {
                        changes = None;
                        continue;
                    }
                    if let Err(why) = self.credentials.still_holds() {
                        return Some(why);
                    }
                }
            }
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` value.
fn bearer_token(value: &str) -> Option<String> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// The token in a `connection_init` payload: `{"Authorization": "Bearer TOKEN"}` (any case of
/// the key), as GraphQL WebSocket clients send headers there.
fn init_token(payload: &serde_json::Value) -> Option<String> {
    let object = payload.as_object()?;
    let value = object
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("authorization"))
        .and_then(|(_, value)| value.as_str())?;
    bearer_token(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        h
    }

    #[test]
    fn only_the_servers_own_origin_or_none_may_call() {
        assert!(foreign_origin(&headers(None, "127.0.0.1:7878")).is_none());
        assert!(
            foreign_origin(&headers(Some("http://127.0.0.1:7878"), "127.0.0.1:7878")).is_none()
        );
        assert!(
            foreign_origin(&headers(Some("http://127.0.0.1:7878/"), "127.0.0.1:7878")).is_none()
        );
        for bad in [
            "http://evil.example",
            "http://127.0.0.1:9999",
            "null",
            "http://127.0.0.1:7878.evil.example",
        ] {
            let refused = foreign_origin(&headers(Some(bad), "127.0.0.1:7878")).unwrap();
            assert_eq!(refused.status(), StatusCode::FORBIDDEN, "{bad}");
        }
    }
}
