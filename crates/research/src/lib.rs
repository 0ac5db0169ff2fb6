//! The pure research domain of research-ledger: the event vocabulary of a research task, its
//! state and `evolve`, rule sets `v1` and `v2`, and `decide`, which holds every business rule.
//!
//! This crate does no I/O, reads no clock and draws no random numbers: time arrives in
//! [`CommandContext`], ids are derived from the state, and every number is computed the same
//! way on every platform. That is what lets an auditor replay a task and re-derive each score,
//! adjudication and conclusion bit for bit ([`recheck`]).
//!
//! The flow: a front end builds a [`Command`]; [`decide`] checks it against the [`TaskState`]
//! and returns [`NewEvent`]s or a [`Refusal`]; the ledger appends them (encoded by
//! [`encode`]) and hands each back with its [`EventMeta`] to [`evolve`].

pub mod codec;
pub mod command;
mod decide;
mod derive;
pub mod event;
pub mod ids;
pub mod limits;
pub mod recheck;
pub mod refusal;
pub mod rules;
pub mod state;
pub mod text;
pub mod tool;
mod v2_part;
pub mod views;
mod workflow;

pub use codec::{DecodeError, SCHEMA_VERSION, decode, encode};
pub use command::{Cause, Command, CommandContext, NewEvent};
pub use decide::decide;
pub use event::Event;
pub use ids::{Cite, EventMeta, Hash32};
pub use limits::Limits;
pub use recheck::{Discrepancy, recheck};
pub use refusal::{PendingAction, Refusal, Tool};
pub use rules::RuleSet;
pub use state::{STATE_FORMAT_VERSION, TaskState, TaskStatus, evolve};
pub use workflow::next_actions;
