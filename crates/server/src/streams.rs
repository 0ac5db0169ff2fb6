//! MCP sessions and event streams hold to the caller that opened them.
//!
//! A session (`Mcp-Session-Id`) is bound to the token of its `initialize`: a request naming
//! the session with another token, or with none where one opened it, is answered as if the
//! session did not exist, so a session id that leaks grants nothing. An event stream (every
//! `text/event-stream` response: a session's `GET`, a request's progress) ends as soon as the
//! token it was opened with no longer gives the same caller — revoked, or, for a stream opened
//! without a token, the first token made — checked on every change of the token list.
//! Sessions are also counted: an `initialize` past `mcp_sessions_max` is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, header};
use tokio::sync::watch;

use crate::auth::Auth;

/// Who a stream acts for: a token's holder (name and role) or the local caller.
pub(crate) type Identity = Option<(String, service::Role)>;

/// The bearer token of a request, if it sent one (the access check already accepted it).
pub(crate) fn token_of(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    crate::auth::bearer_text(value).ok().map(str::to_owned)
}

/// Who `token` gives now, or none when it is refused.
fn identity(auth: &Auth, token: Option<&str>) -> Option<Identity> {
    match auth.caller_of_token(token) {
        Ok(Some(caller)) => Some(Some((caller.actor, caller.role))),
        Ok(None) => Some(None),
        Err(_) => None,
    }
}

/// The owner of each MCP session: a fingerprint of the token that opened it ("" for none).
#[derive(Debug, Default)]
pub(crate) struct SessionOwners {
    owners: Mutex<HashMap<String, String>>,
}

/// A token as a session remembers it: its hash, never the token.
fn fingerprint(token: Option<&str>) -> String {
    token.map_or_else(String::new, |t| {
        blake3::hash(t.as_bytes()).to_hex().to_string()
    })
}

impl SessionOwners {
    /// Records that `token` opened session `id`. Sessions the endpoint no longer has are
    /// forgotten here first, so the map stays as small as the sessions open.
    pub(crate) async fn opened(
        &self,
        id: &str,
        token: Option<&str>,
        endpoint: &mcp_bridge::HttpEndpoint,
    ) {
        let known: Vec<String> = self.lock().keys().cloned().collect();
        let mut gone = Vec::new();
        for session in known {
            if !endpoint.has_session(&session).await {
                gone.push(session);
            }
        }
        let mut owners = self.lock();
        for session in gone {
            owners.remove(&session);
        }
        owners.insert(id.to_owned(), fingerprint(token));
    }

    /// Whether a request with `token` may use session `id`: the token that opened it, or a
    /// session this server did not see opened (the endpoint refuses those itself).
    pub(crate) fn may_use(&self, id: &str, token: Option<&str>) -> bool {
        self.lock()
            .get(id)
            .is_none_or(|owner| *owner == fingerprint(token))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `body`, ended as soon as `token` no longer gives the caller it gave when the stream
/// opened. Checked whenever the token list changes (within a second of the file changing).
pub(crate) fn revocable(body: Body, auth: Arc<Auth>, token: Option<String>) -> Body {
    use futures_util::StreamExt as _;

    let Some(opened) = identity(&auth, token.as_deref()) else {
        return body;
    };
    let mut changes: watch::Receiver<u64> = auth.watch();
    let revoked = async move {
        loop {
            if changes.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            if identity(&auth, token.as_deref()) != Some(opened.clone()) {
                tracing::info!("ending an event stream whose caller no longer holds");
                return;
            }
        }
    };
    Body::from_stream(body.into_data_stream().take_until(Box::pin(revoked)))
}

/// `body`, ended once `stopping` resolves (at once if it already has): a stream without an
/// end of its own must not hold a graceful shutdown open.
pub(crate) fn until_stopping(
    body: Body,
    stopping: impl std::future::Future<Output = ()> + Send + 'static,
) -> Body {
    use futures_util::StreamExt as _;

    Body::from_stream(body.into_data_stream().take_until(Box::pin(stopping)))
}
