//! The one façade every front end of research-ledger calls.
//!
//! Front ends (the MCP bridge, GraphQL, the REST view, the command line) never touch the ledger,
//! the domain or the read models directly for writes: they call [`Service`], which checks the
//! idempotency key, then the expected version, asks `research::decide`, appends durably, and
//! lets the projection catch up so the caller reads its own write. Errors come back as one type,
//! [`ServiceError`], whose wire form ([`ServiceError::to_json`]) is the contract of SPEC §10.

mod admin;
pub mod args;
pub mod audit;
pub mod content;
mod error;
mod external;
mod jobs;
mod jobs_db;
mod metrics;
pub mod migration;
mod service;
pub mod shared;
mod shared_contracts;
pub mod tokens;
mod tools;
mod updates;

pub use error::{ServiceError, echoed};
pub use external::{TOOLS_STREAM, ToolHealth};
pub use jobs::{Job, JobLimits, JobStatus, JobsOpenError, STEPS, StepOutcome, StepRecord};
// Front ends name the types of what they read (tasks, events, proofs) through the service, so
// they depend on it alone.
pub use ledger;
pub use projections;
pub use research;
pub use service::{
    Caller, Layout, OpenError, Service, ServiceOptions, Target, WriteOptions, Written, fingerprint,
    open_similarity, push_contracts,
};
pub use shared_contracts::{ContractsError, PushError};
pub use tokens::Role;
pub use tools::{
    SHARED_ARGUMENTS, SHARED_RESULTS, ToolOutput, ToolProgress, ToolSpec, built_in_tools,
    compact_item, conflicts_in_force, role_for_tool, tool_specs,
};
pub use updates::{Update, Updates};
