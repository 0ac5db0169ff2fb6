//! The one `Host` allow-list, checked before anything else on every route.
//!
//! A web page can rebind its own DNS name to this machine's address: its requests then reach
//! the server with the page's `Origin` and a `Host` that both name the attacker's site, so a
//! check of `Origin` against `Host` passes. What the attacker cannot choose is a name the
//! server knows: the loopback names (`localhost`, `127.0.0.1`, `[::1]`, any port) and the
//! names given with `--allowed-host`. A request whose `Host` (or, in HTTP/2, authority) is
//! none of them is refused with `forbidden` before it is authenticated, limited or routed.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use service::ServiceError;

use crate::rest::ApiError;

/// The names this server answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAllowList {
    /// Lower-case names, each `host` (any port) or `host:port`; IPv6 addresses in brackets.
    allowed: Vec<String>,
}

/// Names a page on another site cannot make its own.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl HostAllowList {
    /// The loopback names and `extra` (`host` or `host:port`, as `--allowed-host` takes them).
    pub fn new(extra: &[String]) -> Self {
        let mut allowed: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        for name in extra {
            let name = normalise(name.trim());
            if !name.is_empty() && !allowed.contains(&name) {
                allowed.push(name);
            }
        }
        HostAllowList { allowed }
    }

    /// The names given besides the loopback ones, as the MCP endpoint's own list wants them:
    /// without brackets or ports.
    pub fn names(&self) -> Vec<String> {
        self.allowed
            .iter()
            .map(|n| {
                let (host, _) = split_port(n);
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned()
            })
            .collect()
    }

    /// Whether a request naming `authority` (a `Host` header's value) is for this server.
    pub fn allows(&self, authority: &str) -> bool {
        let authority = normalise(authority.trim());
        let (host, port) = split_port(&authority);
        if host.is_empty() {
            return false;
        }
        self.allowed.iter().any(|rule| {
            let (rule_host, rule_port) = split_port(rule);
            rule_host == host && (rule_port.is_none() || rule_port == port)
        })
    }
}

/// Lower case, a bare IPv6 address put in brackets, and a trailing dot of a fully qualified
/// name dropped (`example.org.` is `example.org`).
fn normalise(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    if !lower.starts_with('[') && lower.matches(':').count() > 1 {
        return format!("[{lower}]");
    }
    let (host, port) = split_port(&lower);
    let host = host.strip_suffix('.').unwrap_or(host);
    match port {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// `host` and the port after it, if any: `[::1]:80` → (`[::1]`, `80`).
fn split_port(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => {
                let rest = &authority[end + 1..];
                (&authority[..=end], rest.strip_prefix(':'))
            }
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

/// The middleware: refuses a request for a name the server does not answer to.
pub async fn layer(
    State(hosts): State<Arc<HostAllowList>>,
    request: Request,
    next: Next,
) -> Response {
    let named = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    match named {
        Some(host) if hosts.allows(&host) => next.run(request).await,
        named => {
            let shown: String = named
                .as_deref()
                .unwrap_or("(none)")
                .chars()
                .take(100)
                .collect();
            let error = ServiceError::Forbidden(format!(
                "this server does not answer to the host {shown:?}: it answers to loopback names and to the names given with --allowed-host"
            ));
            // `/mcp` answers every refusal in JSON-RPC, this one too.
            if request.uri().path() == "/mcp" {
                let body = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": null,
                    "error": {"code": -32600, "message": error.to_string(), "data": error.to_json()},
                });
                return (StatusCode::FORBIDDEN, axum::Json(body)).into_response();
            }
            ApiError::http(StatusCode::FORBIDDEN, error).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_given_names_pass_and_nothing_else() {
        let hosts =
            HostAllowList::new(&["Ledger.Example.org".into(), "api.example.net:8443".into()]);
        for ok in [
            "localhost",
            "localhost:7878",
            "127.0.0.1:1",
            "[::1]:7878",
            "[::1]",
            "LOCALHOST:80",
            "ledger.example.org",
            "ledger.example.org.:443",
            "api.example.net:8443",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for bad in [
            "attacker.example:7878",
            "localhost.attacker.example",
            "127.0.0.1.nip.io:7878",
            "api.example.net",
            "api.example.net:443",
            "",
            ":7878",
            "[::2]:7878",
            "example.org",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
        assert!(HostAllowList::new(&["::1".into()]).allows("[::1]:9"));
    }
}
