//! The MCP server of research-ledger, over stdio and Streamable HTTP, for both protocol eras
//! (2025-11-25 with `initialize` and sessions; stateless 2026-07-28 with `server/discover`).
//!
//! The bridge is a front end and nothing more: every tool call, resource read and prompt goes
//! through [`service::Service`], so the rules, the guards on writes and the error contract are
//! the service's. What the bridge adds is the protocol: the tools of the service's contract
//! with their schemas and annotations, the ledger's read models as resources (with templates,
//! subscriptions and completion of task ids), three prompts, progress notifications, and MCP
//! tasks for pipeline runs. The actor of every event is the caller: the client's name.
//!
//! Errors are mapped in exactly one place per kind of request: a tool call that reaches the
//! service answers with a tool result (`isError` and the structured error of SPEC §10); only
//! an unknown tool, prompt or resource is a protocol error.

mod bridge;
mod elicitation;
mod error;
mod http;
mod logging;
mod prompts;
mod resources;
mod subscriptions;
mod tools;

pub use bridge::{Bridge, BridgeOptions};
pub use error::BridgeError;
pub use http::{CheckedPost, HttpEndpoint, Refusal, check_post, refusal_of_text};
pub use resources::{RESOURCE_TEMPLATES, ResourceUri};

use rmcp::ServiceExt;

/// Serves MCP on this process's stdin and stdout until the client closes stdin. Only protocol
/// messages go to stdout; the caller keeps logs on stderr. A message (one line) longer than
/// [`BridgeOptions::request_body_bytes_max`], the bound on a request over HTTP, is read no
/// further and dropped with an error in the log; the next line is served.
pub async fn serve_stdio(
    service: service::Service,
    options: BridgeOptions,
) -> Result<(), BridgeError> {
    let transport = rmcp::transport::async_rw::AsyncRwTransport::<rmcp::RoleServer, _, _>::new(
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .with_max_line_length(options.request_body_bytes_max);
    let running = Bridge::new(service, options)
        .serve(transport)
        .await
        .map_err(|e| BridgeError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| BridgeError::Stopped(e.to_string()))?;
    Ok(())
}
