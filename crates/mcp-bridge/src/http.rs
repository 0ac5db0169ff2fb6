//! Streamable HTTP: the endpoint the server mounts at `/mcp`.
//!
//! One endpoint serves both eras. A 2025-11-25 client's `initialize` opens a session (the
//! `Mcp-Session-Id` header), with its own resource subscriptions; a 2026-07-28 request carries
//! its protocol version and capabilities in `_meta` and is served without a session.
//!
//! Two checks stand before any request reaches the bridge. `Host` must name this machine
//! (`localhost`, `127.0.0.1`, `::1`, any port): a web page that rebinds its own DNS name to
//! 127.0.0.1 cannot reach the server. A request from a browser carries `Origin`, which must be
//! a loopback origin (`http://localhost:*`, `http://127.0.0.1:*`, `http://[::1]:*`); requests
//! without `Origin` — every non-browser client — pass. Both lists are in [`BridgeOptions`].
//!
//! Every refusal is a JSON-RPC error. The SDK answers some in plain text (a body it cannot
//! read, a wrong `Content-Type`, an unknown session); [`check_post`] refuses bodies before the
//! SDK sees them, with the code JSON-RPC gives each fault, and [`refusal_of_text`] turns the
//! SDK's other plain-text answers into JSON-RPC. The server that mounts the endpoint applies
//! both.

use std::sync::Arc;

use http::StatusCode;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorCode, GetMeta, JsonRpcError, JsonRpcMessage,
    RequestId,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::bridge::{Bridge, BridgeOptions};

/// The MCP endpoint of the HTTP server, and the handles that end its streams and sessions on
/// shutdown.
///
/// A shutdown comes in two steps. First [`HttpEndpoint::end_streams`]: the streams that have
/// no end of their own (a session's `GET` event stream, a `subscriptions/listen`) end, so that
/// they do not hold the shutdown open, while every request in flight is still answered. Then,
/// once nothing is in flight, [`HttpEndpoint::stop`] ends the sessions.
#[derive(Debug, Clone)]
pub struct HttpEndpoint {
    bridge: Bridge,
    stop: CancellationToken,
    streams_end: CancellationToken,
    sessions: Arc<LocalSessionManager>,
}

impl HttpEndpoint {
    /// An endpoint over `service`.
    pub fn new(service: service::Service, options: BridgeOptions) -> Self {
        HttpEndpoint {
            bridge: Bridge::new(service, options),
            stop: CancellationToken::new(),
            streams_end: CancellationToken::new(),
            sessions: Arc::new(LocalSessionManager::default()),
        }
    }

    /// Sessions open now: the server refuses an `initialize` past
    /// [`BridgeOptions::sessions_max`] with this count.
    pub async fn session_count(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }

    /// Whether the session `id` is open.
    pub async fn has_session(&self, id: &str) -> bool {
        self.sessions
            .sessions
            .read()
            .await
            .keys()
            .any(|key| key.as_ref() == id)
    }

    /// The options the endpoint was made with.
    pub fn options(&self) -> &BridgeOptions {
        self.bridge.options()
    }

    /// The tower service to mount at `/mcp`.
    pub fn service(&self) -> StreamableHttpService<Bridge, LocalSessionManager> {
        let options = self.bridge.options();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(options.allowed_hosts.clone())
            .with_allowed_origins(options.allowed_origins.clone())
            .enforce_origin_validation()
            .with_max_request_body_bytes(options.request_body_bytes_max)
            // A 2026-07-28 request whose handler sends nothing before its result is answered
            // with that result as JSON, not an event stream of one event; one that reports
            // progress or asks the client first is still streamed.
            .with_json_response(true)
            .with_cancellation_token(self.stop.clone());
        let bridge = self.bridge.clone();
        StreamableHttpService::new(
            // Called for every new session (and every stateless request): shared service,
            // tools and tasks; subscriptions of its own.
            move || Ok(bridge.for_new_session()),
            self.sessions.clone(),
            config,
        )
    }

    /// Ends every session, and with it whatever the SDK still serves: requests it is handling
    /// included. For the end of a shutdown, once no request is in flight.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Ends the streams without an end of their own — a session's `GET` event stream, a
    /// `subscriptions/listen` — and those opened from now on, so a graceful shutdown does not
    /// wait on clients that keep one open. Requests in flight are left to finish: the server
    /// applies this to the responses it marks [`CheckedPost::standing`] and to every `GET`.
    pub fn end_streams(&self) {
        self.streams_end.cancel();
    }

    /// Resolves once the streams without an end of their own are to end (at once when they
    /// already are).
    pub fn streams_ended(&self) -> impl Future<Output = ()> + Send + 'static {
        self.streams_end.clone().cancelled_owned()
    }
}

/// A request to the endpoint refused before the SDK serves it: the HTTP status, and the body, a
/// JSON-RPC error response.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON-RPC error response.
    pub body: Value,
}

impl Refusal {
    fn new(status: StatusCode, id: Option<RequestId>, error: McpError) -> Self {
        let body = serde_json::to_value(JsonRpcError::new(id, error)).unwrap_or_else(
            |e| json!({"jsonrpc": "2.0", "error": {"code": -32603, "message": e.to_string()}}),
        );
        Refusal { status, body }
    }
}

/// The structured error (SPEC §10) a JSON-RPC refusal carries as its `data`.
fn invalid(field: &str, message: &str) -> Value {
    json!({"error": "invalid_argument", "field": field, "message": message})
}

/// Checks the body of a `POST` as the SDK will read it. Refuses, with HTTP 400, a body that is
/// not JSON — or not UTF-8, or nested deeper than JSON is read here — (`-32700`, parse
/// error); JSON that is not one JSON-RPC message, batches included (`-32600`, invalid request);
/// and a request or notification for a method MCP defines with params the SDK cannot read
/// (`-32602`, invalid params), which the SDK would take for an unknown method. Which methods MCP
/// defines depends on the request's era: the protocol version in its `_meta`, or else
/// `protocol_version`, the request's `MCP-Protocol-Version` header.
///
/// Answers whether the message is an `initialize` request, which opens a session, so that the
/// caller need not read the body again to know.
pub fn check_post(body: &[u8], protocol_version: Option<&str>) -> Result<CheckedPost, Refusal> {
    let refuse = |id, error: McpError| {
        let status = if error.code == ErrorCode::METHOD_NOT_FOUND {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::BAD_REQUEST
        };
        Err(Refusal::new(status, id, error))
    };
    let message = match serde_json::from_slice::<ClientJsonRpcMessage>(body) {
        Ok(message) => message,
        Err(read) => {
            let value = match serde_json::from_slice::<Value>(body) {
                Ok(value) => value,
                Err(e) => {
                    let why = format!("the body is not JSON: {e}");
                    return refuse(
                        None,
                        McpError::parse_error(why.clone(), Some(invalid("body", &why))),
                    );
                }
            };
            let version = value
                .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
                .and_then(Value::as_str)
                .or(protocol_version);
            let era_2026 = crate::error::is_2026_era(version);
            return refuse(
                request_id(&value),
                not_a_message(&value, &read.to_string(), era_2026),
            );
        }
    };
    let initialize = matches!(
        &message,
        JsonRpcMessage::Request(request)
            if matches!(request.request, ClientRequest::InitializeRequest(_))
    );
    if let JsonRpcMessage::Request(request) = &message
        && let ClientRequest::CustomRequest(custom) = &request.request
    {
        let version = custom.get_meta().protocol_version();
        let version = version.as_ref().map(|v| v.as_str()).or(protocol_version);
        let error =
            crate::error::unread_request(&custom.method, crate::error::is_2026_era(version));
        // An unknown method is the handler's to answer (method not found), in its era's way.
        if error.code == ErrorCode::INVALID_PARAMS {
            return refuse(Some(request.id.clone()), error);
        }
    }
    let standing = matches!(
        &message,
        JsonRpcMessage::Request(request)
            if matches!(request.request, ClientRequest::SubscriptionsListenRequest(_))
    );
    Ok(CheckedPost {
        initialize,
        standing,
    })
}

/// What [`check_post`] read of a body the SDK can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedPost {
    /// Whether the message is an `initialize` request.
    pub initialize: bool,
    /// Whether the request is answered with a stream that has no end of its own
    /// (`subscriptions/listen`), rather than with its result.
    pub standing: bool,
}

/// The id of a message that could not be read, when the id itself can be.
fn request_id(value: &Value) -> Option<RequestId> {
    serde_json::from_value(value.get("id")?.clone()).ok()
}

/// Why valid JSON is not a message the server reads.
fn not_a_message(value: &Value, read: &str, era_2026: bool) -> McpError {
    let invalid_request =
        |why: String| McpError::invalid_request(why.clone(), Some(invalid("body", &why)));
    let Some(object) = value.as_object() else {
        return invalid_request(if value.is_array() {
            "a batch is not served: send one JSON-RPC message as a JSON object".into()
        } else {
            "a JSON-RPC message is a JSON object".into()
        });
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid_request("a JSON-RPC message has \"jsonrpc\": \"2.0\"".into());
    }
    if object
        .get("id")
        .is_some_and(|id| !(id.is_string() || id.is_i64()))
    {
        return invalid_request("the id of a JSON-RPC request is a string or an integer".into());
    }
    match object.get("method") {
        Some(Value::String(method)) if object.contains_key("id") => {
            crate::error::unread_request(method, era_2026)
        }
        // A notification of a method MCP does not define is read whatever its params: one that
        // could not be read is one MCP defines, with params it does not take.
        Some(Value::String(method)) => {
            let why = format!("the params of {method} are not what the notification takes");
            McpError::invalid_params(why.clone(), Some(invalid("params", &why)))
        }
        Some(_) => invalid_request("the method of a JSON-RPC request is a string".into()),
        None => invalid_request(format!(
            "not a JSON-RPC request, notification or response: {read}"
        )),
    }
}

/// The JSON-RPC error for a refusal the SDK answered with `status` and the plain text `text`
/// (a wrong `Content-Type` or `Accept`, an unknown session, a method the endpoint does not
/// take): `-32600` for the client's fault, `-32603` for the server's, with the text as its
/// message and the structured error as its data.
pub fn refusal_of_text(status: StatusCode, text: &str) -> Refusal {
    let message = if text.trim().is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text.trim().to_owned()
    };
    let code = match status {
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::PAYLOAD_TOO_LARGE => "limit_exceeded",
        // The SDK failed at its end before any tool ran: nothing was written.
        s if s.is_server_error() => "unavailable",
        _ => "invalid_argument",
    };
    let data = Some(json!({"error": code, "message": message}));
    let error = if status.is_server_error() {
        McpError::internal_error(message, data)
    } else {
        McpError::invalid_request(message, data)
    };
    Refusal::new(status, None, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &[u8]) -> (Option<i64>, Value) {
        match check_post(body, None) {
            Ok(_) => (None, Value::Null),
            Err(refusal) => {
                assert_eq!(refusal.status, StatusCode::BAD_REQUEST);
                (
                    refusal.body["error"]["code"].as_i64(),
                    refusal.body["id"].clone(),
                )
            }
        }
    }

    #[test]
    fn which_methods_are_defined_depends_on_the_era() {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        let request = |method: &str, params: Value| {
            json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params}).to_string()
        };
        // The status and code of a refusal, or none.
        let refused = |body: &str, version: Option<&str>| {
            check_post(body.as_bytes(), version)
                .err()
                .map(|r| (r.status.as_u16(), r.body["error"]["code"].clone()))
        };
        // Methods 2026-07-28 removed: of that era (by the request's `_meta`, or its header)
        // they are methods the server does not have, answered by the handler when the SDK
        // reads the request, and here when it cannot; of the earlier era, their params are
        // wrong.
        for method in [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "resources/unsubscribe",
        ] {
            let body = request(method, json!({"_meta": meta, "level": 7, "uri": 7}));
            assert_eq!(refused(&body, None), None, "{method}");
            let body = request(method, json!(7));
            assert_eq!(
                refused(&body, Some("2026-07-28")),
                Some((404, json!(-32601))),
                "{method}"
            );
            assert_eq!(
                refused(&body, Some("2025-11-25")),
                Some((400, json!(-32602))),
                "{method}"
            );
        }
        // A method 2026-07-28 added: the other way round.
        let body = request("subscriptions/listen", json!({"notifications": 7}));
        assert_eq!(refused(&body, Some("2025-11-25")), None);
        assert_eq!(
            refused(&body, Some("2026-07-28")),
            Some((400, json!(-32602)))
        );
        // No method the server has, in a message the SDK cannot read at all.
        let body = request("no/such", json!(5));
        assert_eq!(refused(&body, None), Some((404, json!(-32601))));
    }

    #[test]
    fn bodies_are_refused_with_the_code_json_rpc_gives_their_fault() {
        let ok = br#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
        assert_eq!(code(ok).0, None);
        let unknown = br#"{"jsonrpc": "2.0", "id": 1, "method": "no/such", "params": {"x": 1}}"#;
        assert_eq!(
            code(unknown).0,
            None,
            "the handler answers it: method not found"
        );
        let note = br#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#;
        assert_eq!(code(note).0, None);
        for body in [&b"{"[..], b"", b"{\"a\": \"\xff\"}", b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"] {
            assert_eq!(code(body), (Some(-32700), Value::Null), "{body:?}");
        }
        for body in [
            &br#"[]"#[..],
            br#"[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]"#,
            br#"7"#,
            br#"{"id": 1, "method": "ping"}"#,
            br#"{"jsonrpc": "2.0", "id": [1], "method": "ping"}"#,
            br#"{"jsonrpc": "2.0", "id": 1, "method": 7}"#,
            br#"{"jsonrpc": "2.0", "id": null, "method": "ping"}"#,
            br#"{"jsonrpc": "2.0", "hello": "world"}"#,
        ] {
            assert_eq!(
                code(body).0,
                Some(-32600),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        for body in [
            &br#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": 5}"#[..],
            br#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x", "arguments": 5}}"#,
            br#"{"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": 1}}"#,
        ] {
            assert_eq!(code(body), (Some(-32602), json!(4)), "{}", String::from_utf8_lossy(body));
        }
        let note = br#"{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": 7}"#;
        assert_eq!(code(note), (Some(-32602), Value::Null));
        let unknown = br#"{"jsonrpc": "2.0", "method": "notifications/other", "params": {"x": 7}}"#;
        assert_eq!(code(unknown).0, None, "the handler ignores it");
    }

    #[test]
    fn a_checked_body_says_whether_it_opens_a_session() {
        let initialize = br#"{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}"#;
        assert_eq!(check_post(initialize, None).map(|c| c.initialize), Ok(true));
        let list = br#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
        assert_eq!(check_post(list, None).map(|c| c.initialize), Ok(false));
        let note = br#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#;
        assert_eq!(check_post(note, None).map(|c| c.initialize), Ok(false));
        // Only a `subscriptions/listen` is answered with a stream that has no end of its own.
        let listen = br#"{"jsonrpc": "2.0", "id": 2, "method": "subscriptions/listen", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}, "notifications": {"resourceSubscriptions": ["ledger://head"]}}}"#;
        assert_eq!(check_post(listen, None).map(|c| c.standing), Ok(true));
        for body in [&initialize[..], &list[..], &note[..]] {
            assert_eq!(check_post(body, None).map(|c| c.standing), Ok(false));
        }
    }

    #[test]
    fn plain_text_refusals_become_json_rpc_errors() {
        let refusal = refusal_of_text(StatusCode::NOT_FOUND, "Not Found: Session not found");
        assert_eq!(refusal.status, StatusCode::NOT_FOUND);
        assert_eq!(refusal.body["jsonrpc"], "2.0");
        assert_eq!(refusal.body["error"]["code"], -32600);
        assert_eq!(
            refusal.body["error"]["message"],
            "Not Found: Session not found"
        );
        assert_eq!(refusal.body["error"]["data"]["error"], "not_found");
        let refusal = refusal_of_text(StatusCode::INTERNAL_SERVER_ERROR, "");
        assert_eq!(refusal.body["error"]["code"], -32603);
        assert_eq!(refusal.body["error"]["message"], "Internal Server Error");
    }
}
