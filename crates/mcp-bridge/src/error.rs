//! The bridge's own errors, and the one mapping from the service's errors to protocol errors
//! for requests that are not tool calls (tool calls answer with tool results instead).

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolRequestMethod, CancelTaskMethod, CompleteRequestMethod, ConstString,
    DiscoverRequestMethod, ErrorCode, GetPromptRequestMethod, GetSkillRequestMethod, GetTaskMethod,
    InitializeResultMethod, ListPromptsRequestMethod, ListResourceTemplatesRequestMethod,
    ListResourcesRequestMethod, ListSkillsRequestMethod, ListToolsRequestMethod, PingRequestMethod,
    ProtocolVersion, ReadResourceDirectoryRequestMethod, ReadResourceRequestMethod,
    SetLevelRequestMethod, SubscribeRequestMethod, SubscriptionsListenRequestMethod,
    UnsubscribeRequestMethod, UpdateTaskMethod,
};
use serde_json::json;
use service::ServiceError;

/// Why the bridge could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The transport failed before the first exchange (stdin closed, the client spoke
    /// something else).
    #[error("the MCP server did not start: {0}")]
    Start(String),
    /// The server's task ended abnormally.
    #[error("the MCP server stopped: {0}")]
    Stopped(String),
}

/// A resource that does not exist: `-32002` for 2025-era clients, `-32602` from 2026-07-28
/// (the SDK rewrites the code for the newer era).
pub(crate) fn resource_not_found(uri: &str, why: impl std::fmt::Display) -> McpError {
    // The URI is the client's: repeated only in part, so the answer does not grow with it.
    let uri = service::echoed(uri);
    McpError::resource_not_found(
        format!("no resource {uri}: {why}"),
        Some(json!({ "uri": uri })),
    )
}

/// A resource read that failed in the service.
pub(crate) fn resource_error(uri: &str, e: &ServiceError) -> McpError {
    match e {
        ServiceError::NotFound { .. } | ServiceError::InvalidArgument { .. } => {
            resource_not_found(uri, e)
        }
        ServiceError::LimitExceeded { .. } => {
            McpError::invalid_params(e.to_string(), Some(e.to_json()))
        }
        _ => internal(e),
    }
}

/// A failure of the service behind a protocol request that is not the client's fault.
pub(crate) fn internal(e: &ServiceError) -> McpError {
    McpError::internal_error(e.to_string(), Some(e.to_json()))
}

/// A prompt asked for with arguments the service refuses.
pub(crate) fn prompt_error(e: &ServiceError) -> McpError {
    match e {
        ServiceError::NotFound { .. }
        | ServiceError::InvalidArgument { .. }
        | ServiceError::LimitExceeded { .. } => {
            McpError::invalid_params(e.to_string(), Some(e.to_json()))
        }
        _ => internal(e),
    }
}

/// The requests a client may send that the SDK reads into their own types. A request for one of
/// these methods that reaches the server as a custom request is one whose params the SDK could
/// not read.
const CLIENT_METHODS: [&str; 21] = [
    PingRequestMethod::VALUE,
    InitializeResultMethod::VALUE,
    DiscoverRequestMethod::VALUE,
    CompleteRequestMethod::VALUE,
    SetLevelRequestMethod::VALUE,
    GetPromptRequestMethod::VALUE,
    ListPromptsRequestMethod::VALUE,
    ListResourcesRequestMethod::VALUE,
    ListResourceTemplatesRequestMethod::VALUE,
    ReadResourceRequestMethod::VALUE,
    SubscriptionsListenRequestMethod::VALUE,
    SubscribeRequestMethod::VALUE,
    UnsubscribeRequestMethod::VALUE,
    CallToolRequestMethod::VALUE,
    ListToolsRequestMethod::VALUE,
    GetTaskMethod::VALUE,
    UpdateTaskMethod::VALUE,
    CancelTaskMethod::VALUE,
    ListSkillsRequestMethod::VALUE,
    GetSkillRequestMethod::VALUE,
    ReadResourceDirectoryRequestMethod::VALUE,
];

/// Methods 2026-07-28 removed: in that era a server has no such method.
const REMOVED_IN_2026: [&str; 5] = [
    InitializeResultMethod::VALUE,
    PingRequestMethod::VALUE,
    SetLevelRequestMethod::VALUE,
    SubscribeRequestMethod::VALUE,
    UnsubscribeRequestMethod::VALUE,
];

/// Methods 2026-07-28 added: before it a server has no such method.
const ADDED_IN_2026: [&str; 1] = [SubscriptionsListenRequestMethod::VALUE];

/// Whether a request naming `version` (in its `_meta`, its header or its session) is of the
/// 2026-07-28 era or later; dated versions compare as text.
pub(crate) fn is_2026_era(version: Option<&str>) -> bool {
    version.is_some_and(|v| v >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The answer to a request the SDK could not read into a known request: `-32602` (invalid
/// params) when the method is one MCP defines in the request's era (`era_2026`), so its params
/// were wrong; `-32601` (method not found) otherwise.
pub(crate) fn unread_request(method: &str, era_2026: bool) -> McpError {
    let defined = CLIENT_METHODS.contains(&method)
        && if era_2026 {
            !REMOVED_IN_2026.contains(&method)
        } else {
            !ADDED_IN_2026.contains(&method)
        };
    if defined {
        McpError::invalid_params(
            format!("the params of {method} are not what the method takes"),
            Some(json!({
                "error": "invalid_argument",
                "field": "params",
                "message": format!("the params of {method} do not match its schema"),
            })),
        )
    } else {
        McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("no method {method} on this server"),
            None,
        )
    }
}
