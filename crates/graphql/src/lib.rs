//! The GraphQL API of research-ledger, for dashboards and auditors.
//!
//! Queries read tasks (the index a page at a time, a task at its head or at any earlier
//! version, its evidence, conflicts, decision matrix, conclusions with their history, its
//! explanation, why-graph and audit trail) and the ledger (size, root, signed checkpoints,
//! public key, the verification report, inclusion and consistency proofs, single events).
//! Mutations are the same commands as the tools, with `expectedVersion` and `idempotencyKey`,
//! plus the human decisions on conflicts. Subscriptions deliver every new event, and every
//! conclusion as it is issued, over WebSocket.
//!
//! Like every front end, this one only calls [`service::Service`]: writes go through
//! `call_tool_async`, the one write path with its guards; reads go to the read models and the
//! ledger's read API. The schema's SDL is kept in `schema.graphql` beside this crate's
//! manifest, and a test fails when it is out of date.
//!
//! Invariants, as absences: nothing here writes to the ledger except through the service's
//! tools; no error leaves without its SPEC §10 code (`error.rs` is the one place they are made);
//! no query runs past the depth, complexity and page limits (`limits.rs`).

mod context;
mod enums;
mod error;
mod http;
mod ledger;
mod limits;
mod mutation;
mod page;
mod query;
mod subscription;
mod task;
mod views;

use std::sync::Arc;

use async_graphql::Schema;
use service::{Caller, Service, ServiceError};

pub use http::router;
pub use limits::Limits;
pub use mutation::Mutation;
pub use query::Query;
pub use subscription::Subscription;

/// The schema, with its roots.
pub type ResearchSchema = Schema<Query, Mutation, Subscription>;

/// How the API is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The limits on requests.
    pub limits: Limits,
    /// The actor recorded for writes whose request carries no authenticated caller.
    pub anonymous_actor: String,
    /// How a WebSocket authenticates (from its handshake's `Authorization` header, or else
    /// its `connection_init` payload) and checks its caller again on every message and every
    /// change of the token list; without one, a socket is an anonymous local caller.
    pub authenticator: Option<Authenticator>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            limits: Limits::default(),
            anonymous_actor: "local".to_owned(),
            authenticator: None,
        }
    }
}

/// The check of a token (or of its absence): `Ok(Some)` names the caller, `Ok(None)` is a
/// local caller where the server needs no token, `Err` refuses.
pub type AuthenticateFn =
    dyn Fn(Option<&str>) -> Result<Option<Caller>, ServiceError> + Send + Sync;

/// The server's token check, handed to the WebSocket endpoint.
#[derive(Clone)]
pub struct Authenticator {
    /// The check.
    pub check: Arc<AuthenticateFn>,
    /// Changes each time the token list may have changed: open sockets check their caller
    /// again, and close when it no longer holds.
    pub changes: tokio::sync::watch::Receiver<u64>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator")
    }
}

impl PartialEq for Authenticator {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.check, &other.check)
    }
}

impl Eq for Authenticator {}

/// The schema over `service`.
pub fn build_schema(service: Service, options: Options) -> ResearchSchema {
    let guard = limits::Guard {
        limits: options.limits.clone(),
    };
    Schema::build(Query, Mutation, Subscription)
        .data(service)
        .data(options)
        .extension(guard)
        .finish()
}

/// The schema in SDL, as checked in at `crates/graphql/schema.graphql`.
pub fn sdl() -> String {
    Schema::build(Query, Mutation, Subscription).finish().sdl()
}

#[cfg(test)]
mod tests;
