//! Who is calling: bearer tokens in front of every route but `/health` and the console's pages
//! (`/`, `/console/…` and GraphiQL at `GET /graphql`), which hold no data.
//!
//! The token list is `DATA_DIR/tokens.json` ([`service::tokens`]); the server re-reads it when
//! it changes, so `research-ledger token add|revoke` take effect on the next request. Three
//! modes follow from the list and the address:
//!
//! - open mode (no token ever made, or `research-ledger token open-mode` since the last one
//!   was revoked), loopback address: requests need no token and act as local callers with
//!   every right (the address is the boundary);
//! - tokens in force: every request carries `Authorization: Bearer TOKEN`; its holder's name
//!   is the actor of what the request writes, and its role bounds what it may do (checked by
//!   the service, tool by tool);
//! - no token in force but not open mode (every token was revoked), or open mode beyond
//!   loopback: the server refuses every request until a token is added, rather than fall back
//!   to serving everyone unauthenticated.
//!
//! A GraphQL WebSocket may instead authenticate in its `connection_init` payload, as browser
//! clients cannot set headers on a WebSocket handshake. Streams that outlive a request (GraphQL
//! WebSockets, MCP sessions and their event streams) check their caller again on every
//! operation and whenever the token list changes: [`Auth::watch`] tells them, within
//! [`TOKEN_POLL`] of the file changing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use service::tokens::{TokenStore, TokenTable};
use service::{Caller, ServiceError};

/// The access check the server puts in front of its routes.
#[derive(Debug)]
pub struct Auth {
    store: TokenStore,
    table: Mutex<TokenTable>,
    loopback: bool,
    /// The table's generation, for streams that must check their caller again when it changes.
    changes: tokio::sync::watch::Sender<u64>,
}

/// How often the token file is checked for changes while nothing asks: open streams learn of
/// a revocation (or of the first token) within this.
pub const TOKEN_POLL: Duration = Duration::from_millis(250);

/// Paths anyone may read: the liveness check of supervisors and load balancers.
const OPEN_PATHS: [&str; 1] = ["/health"];

/// The one path that may authenticate after the request: its WebSocket's `connection_init`.
const LATE_AUTH_PATH: &str = "/graphql/ws";

impl Auth {
    /// The check over `store` for a server listening on a loopback address or not.
    pub fn new(store: TokenStore, loopback: bool) -> Self {
        Auth {
            store,
            table: Mutex::new(TokenTable::default()),
            loopback,
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Told the table's generation each time the token file was read again.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Checks the token file every [`TOKEN_POLL`], so that streams hear of changes even when
    /// no request comes. Runs until aborted.
    pub fn poll(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let auth = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TOKEN_POLL);
            loop {
                tick.tick().await;
                let auth = auth.clone();
                // A stat (and a read when it changed): blocking file work.
                let _ = tokio::task::spawn_blocking(move || drop(auth.table())).await;
            }
        })
    }

    /// Re-reads the token file if it changed; a file that cannot be read keeps the tokens last
    /// read (and says so), so a half-edited file never opens the server.
    fn table(&self) -> std::sync::MutexGuard<'_, TokenTable> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        match table.refresh(&self.store) {
            Ok(true) => {
                self.changes.send_replace(table.generation());
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "the token file cannot be read; keeping the tokens read before");
            }
        }
        table
    }

    /// The token file.
    pub fn store(&self) -> &TokenStore {
        &self.store
    }

    /// The caller of a request that presents `token`, or none: `Ok(None)` for a local caller
    /// (no tokens in force, loopback), `Ok(Some)` for a token's holder.
    pub fn caller_of_token(&self, token: Option<&str>) -> Result<Option<Caller>, ServiceError> {
        let table = self.table();
        match token {
            Some(token) => match table.holder(token) {
                Some((name, role)) => Ok(Some(Caller::with_role(name, role))),
                None => Err(ServiceError::Unauthenticated(
                    "the access token is not known or was revoked".into(),
                )),
            },
            None if table.is_open() && self.loopback => Ok(None),
            None if table.is_open() => Err(ServiceError::Unauthenticated(
                "no access token is in force, and this server listens beyond loopback: it serves no one until `research-ledger token add` makes one".into(),
            )),
            None if table.is_empty() => Err(ServiceError::Unauthenticated(
                "every access token was revoked: this server serves no one until `research-ledger token add` makes one (`research-ledger token open-mode` on the data directory returns it to serving loopback without tokens)".into(),
            )),
            None => Err(ServiceError::Unauthenticated(
                "this server needs an access token: send Authorization: Bearer TOKEN".into(),
            )),
        }
    }

    /// The caller of a request, from its `Authorization` header.
    fn caller_of(&self, request: &Request) -> Result<Option<Caller>, ServiceError> {
        let presented = match request.headers().get(header::AUTHORIZATION) {
            None => None,
            Some(value) => Some(bearer(value)?),
        };
        // The WebSocket may authenticate in its connection_init payload instead.
        if presented.is_none() && request.uri().path() == LATE_AUTH_PATH {
            return Ok(None);
        }
        self.caller_of_token(presented)
    }
}

/// The token in an `Authorization: Bearer TOKEN` header (or the same text elsewhere).
pub fn bearer_text(text: &str) -> Result<&str, ServiceError> {
    let malformed =
        || ServiceError::Unauthenticated("the Authorization header is not `Bearer TOKEN`".into());
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(token)
}

/// The token in an `Authorization: Bearer TOKEN` header.
fn bearer(value: &HeaderValue) -> Result<&str, ServiceError> {
    let text = value.to_str().map_err(|_| {
        ServiceError::Unauthenticated("the Authorization header is not `Bearer TOKEN`".into())
    })?;
    bearer_text(text)
}

/// The refusal of a request without valid credentials: 401 with the structured error, and
/// the challenge HTTP asks for.
pub fn unauthenticated(error: ServiceError) -> Response {
    let mut response = crate::rest::ApiError::from(error).into_response();
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"research-ledger\""),
    );
    response
}

/// The middleware: puts the caller into the request's extensions, where every front end reads
/// it (the MCP bridge through the request parts rmcp hands it).
pub async fn layer(State(auth): State<Arc<Auth>>, mut request: Request, next: Next) -> Response {
    // The console's pages and GraphiQL, served on `GET` and holding no data: a browser cannot
    // send a bearer token to load a page, and the requests the page makes carry the token its
    // reader signed in with.
    let page = matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    ) && crate::console::is_page(request.uri().path());
    if OPEN_PATHS.contains(&request.uri().path()) || page {
        return next.run(request).await;
    }
    match auth.caller_of(&request) {
        Ok(Some(caller)) => {
            request.extensions_mut().insert(caller.clone());
            let mut response = next.run(request).await;
            // For the request log.
            response.extensions_mut().insert(caller);
            response
        }
        Ok(None) => next.run(request).await,
        Err(e) => unauthenticated(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_header_with_a_token_is_read() {
        let ok = HeaderValue::from_static("Bearer rl_abc");
        assert_eq!(bearer(&ok).unwrap(), "rl_abc");
        let lower = HeaderValue::from_static("bearer   rl_abc ");
        assert_eq!(bearer(&lower).unwrap(), "rl_abc");
        for bad in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer ", "rl_abc", ""] {
            let value = HeaderValue::from_str(bad).unwrap();
            assert!(bearer(&value).is_err(), "{bad:?}");
        }
    }
}
