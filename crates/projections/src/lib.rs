//! Read models of research-ledger, rebuilt from the ledger and never trusted over it.
//!
//! The ledger is the record; everything here is derived from it and can be thrown away and
//! rebuilt. A [`Projector`] follows the ledger event by event — fed by the service after each
//! append ([`Projector::apply`], [`Projector::catch_up_to`]) or following it on its own
//! ([`Projector::follow`]) — and folds each task's events with [`research::evolve`] into a live
//! [`research::TaskState`]. From that it answers:
//!
//! - the state of a task at its head, or at any earlier stream version (time travel), and its
//!   session version;
//! - the task index, filtered by status, by the stance of the current conclusion and by text,
//!   with cursor pagination ([`index`]);
//! - a task's audit trail, its events exactly as the ledger holds them ([`audit`]);
//! - the why-graph of a conclusion ([`why`]);
//! - deterministic state hashes, per task and over the whole projection, so a rebuild can be
//!   compared with the live state ([`hash`]).
//!
//! Memory stays bounded as the ledger grows: every task keeps an index entry, and at most
//! `task_states_cached_max` full states are held; the others are loaded when needed.
//! Snapshots of task states and of the index are kept in a directory of their own
//! ([`snapshot`]); an open reads the index and checks it against the ledger, each state is
//! checked when it is loaded, and whatever does not match is discarded and rebuilt.
//!
//! Subscribers follow the [`Feed`]: every event, in order, delivered only once it is folded,
//! so what a subscriber is told of is already in what it reads.
//!
//! Invariants, as absences: nothing here writes to the ledger; nothing here decides anything
//! (the rules live in `research`); a read model never answers from a snapshot the ledger does
//! not confirm.

pub mod audit;
pub mod error;
mod feed;
pub mod hash;
pub mod index;
pub mod limits;
mod model;
mod projector;
pub mod snapshot;
pub mod why;

pub use audit::{AuditEntry, AuditPage};
pub use error::{
    ApplyError, FollowError, OpenError, QueryError, RebuildError, SnapshotError, Stall,
};
pub use feed::{Feed, FeedError};
pub use hash::{ProjectionHash, state_hash};
pub use index::{TaskListing, TaskPage, TaskQuery};
pub use limits::Limits;
pub use model::meta as event_meta;
pub use projector::{
    Applied, OpenReport, OpenStart, Projector, ProjectorOptions, ProjectorStatus, RebuildReport,
    TimeTravel, TravelStart,
};
pub use snapshot::{Discarded, SnapshotReport};
pub use why::{Component, EdgeKind, NodeDetail, Superseded, WhyEdge, WhyGraph, WhyNode};
