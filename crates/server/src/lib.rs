//! The HTTP app of research-ledger: the REST view of the tools, GraphQL, the MCP endpoint,
//! exports, tokens, what the CLI's `--server` mode needs and the web console, behind one set of
//! layers (request log, `Host` allow-list, access check, limits).
//!
//! [`app`] builds the whole router from a [`service::Service`] and [`AppOptions`]; the binary
//! serves it on its own connection loop, and tests drive it in process.

pub mod auth;
pub mod console;
pub mod hosts;
pub mod tokens_api;

mod app;
mod export;
mod remote_api;
mod rest;
mod streams;
mod transparency;

pub use app::{AppOptions, HttpLimits, app, app_with_mcp};
