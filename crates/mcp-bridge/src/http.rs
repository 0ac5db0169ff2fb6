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

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::bridge::{Bridge, BridgeOptions};

/// The MCP endpoint of the HTTP server, and the handle that ends its sessions and streams on
/// shutdown.
#[derive(Debug, Clone)]
pub struct HttpEndpoint {
    bridge: Bridge,
    stop: CancellationToken,
}

impl HttpEndpoint {
    /// An endpoint over `service`.
    pub fn new(service: service::Service, options: BridgeOptions) -> Self {
        HttpEndpoint {
            bridge: Bridge::new(service, options),
            stop: CancellationToken::new(),
        }
    }

    /// The tower service to mount at `/mcp`.
    pub fn service(&self) -> StreamableHttpService<Bridge, LocalSessionManager> {
        let options = self.bridge.options();
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(options.allowed_hosts.clone())
            .with_allowed_origins(options.allowed_origins.clone())
            .enforce_origin_validation()
            .with_max_request_body_bytes(options.request_body_bytes_max)
            .with_cancellation_token(self.stop.clone());
        let bridge = self.bridge.clone();
        StreamableHttpService::new(
            // Called for every new session (and every stateless request): shared service,
            // tools and tasks; subscriptions of its own.
            move || Ok(bridge.for_new_session()),
            Arc::new(LocalSessionManager::default()),
            config,
        )
    }

    /// Ends every session and open stream (subscriptions, progress) so a graceful shutdown
    /// does not wait on clients that keep a stream open.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}
