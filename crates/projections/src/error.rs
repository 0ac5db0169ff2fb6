//! Errors of the projector's operations, one enum per operation, each variant saying what the
//! caller should do.

use ledger::{Digest, ReadError, SubscriptionError};
use serde::{Deserialize, Serialize};

/// Why a query could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// No task has this id (or the projection has not seen it yet: to read a write just made,
    /// catch up to its seq first).
    #[error("no task {task_id}")]
    TaskNotFound {
        /// The id asked for.
        task_id: String,
    },
    /// The task has fewer events than the version asked for. Ask for `head` or less.
    #[error("task {task_id} is at version {head}; version {requested} does not exist yet")]
    VersionBeyondHead {
        /// The task.
        task_id: String,
        /// The version asked for.
        requested: u64,
        /// The task's version in the projection.
        head: u64,
    },
    /// The task has no conclusion with this id, or none at all when no id was given.
    #[error("task {task_id} has no conclusion {}", conclusion_id.as_deref().unwrap_or("yet"))]
    ConclusionNotFound {
        /// The task.
        task_id: String,
        /// The conclusion asked for; none when the current one was asked for.
        conclusion_id: Option<String>,
    },
    /// The cursor was not made by this projection's index. Start again without one.
    #[error("the cursor {cursor:?} is not valid")]
    InvalidCursor {
        /// The cursor as given.
        cursor: String,
    },
    /// An argument is out of its range.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The argument.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The query asks for more than a limit allows. Ask for less, or raise the limit.
    #[error("{limit} is {max}; the query asks for {requested}")]
    LimitExceeded {
        /// The limit's name, as in [`crate::Limits`].
        limit: &'static str,
        /// Its value.
        max: u64,
        /// What was asked for.
        requested: u64,
    },
    /// An event of the task could not be read as a research event; the ledger needs an
    /// operator (run `verify`), or a newer build wrote it.
    #[error("{}{detail}", seq.map(|s| format!("seq {s}: ")).unwrap_or_default())]
    Damaged {
        /// The event, when one is to blame.
        seq: Option<u64>,
        /// What is wrong.
        detail: String,
    },
    /// Reading the ledger failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Why the projector could not fold an event. It stops before the event and goes no further
/// until the cause is fixed: folding past it would make every later answer wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The event does not chain to the last one folded: the projection and the ledger disagree.
    /// Rebuild the projection; if that fails too, verify the ledger.
    #[error("seq {seq} names {found} as the previous hash; the projection folded {expected}")]
    ChainBroken {
        /// The event.
        seq: u64,
        /// The hash of the last event folded.
        expected: Digest,
        /// The `prev_hash` the event carries.
        found: Digest,
    },
    /// The event's stream version does not follow the task's version: the projection and the
    /// ledger disagree. Rebuild the projection.
    #[error("seq {seq} is version {found} of {stream}; the projection expected {expected}")]
    StreamGap {
        /// The event.
        seq: u64,
        /// Its stream.
        stream: String,
        /// The version that should come next.
        expected: u64,
        /// The version the event carries.
        found: u64,
    },
    /// The payload is not a research event this build can read: a newer build wrote it, or it
    /// is damaged. Upgrade, or verify the ledger.
    #[error("seq {seq} ({kind}) does not decode: {error}")]
    Undecodable {
        /// The event.
        seq: u64,
        /// Its kind.
        kind: String,
        /// Why.
        error: research::DecodeError,
    },
    /// The state of the event's task was not in memory and could not be rebuilt from the
    /// ledger's record of its stream: the stream is damaged. Verify the ledger.
    #[error("seq {seq}: the state of its task cannot be loaded: {detail}")]
    Unloadable {
        /// The event.
        seq: u64,
        /// Why.
        detail: String,
    },
    /// Reading the ledger failed; try again.
    #[error(transparent)]
    Read(#[from] ReadError),
}

impl ApplyError {
    /// The seq at which folding stopped.
    pub fn seq(&self) -> Option<u64> {
        match self {
            ApplyError::ChainBroken { seq, .. }
            | ApplyError::StreamGap { seq, .. }
            | ApplyError::Undecodable { seq, .. }
            | ApplyError::Unloadable { seq, .. } => Some(*seq),
            ApplyError::Read(ReadError::Damaged { seq, .. }) => Some(*seq),
            ApplyError::Read(_) => None,
        }
    }
}

/// Where and why the projector stopped folding, kept so that health checks and waiters can say
/// so instead of waiting forever.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stall {
    /// The first event it could not fold.
    pub seq: u64,
    /// Why.
    pub reason: String,
}

/// Why snapshots could not be written or read. Snapshots are derived data: the projection goes
/// on without them, and the next open rebuilds what it cannot read.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The snapshot store failed.
    #[error("snapshot store, {op}: {detail}")]
    Store {
        /// What was being done.
        op: &'static str,
        /// The store's account of the failure.
        detail: String,
    },
    /// This projector keeps no snapshots (it was opened without a directory).
    #[error("this projector keeps no snapshots")]
    NoStore,
}

/// Why a projector could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The snapshot directory could not be opened (held by another process, unreadable). Give
    /// the projector a directory of its own, or none.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Reading the ledger failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Why a rebuild did not complete. The projection that was live before it keeps serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// Folding stopped at an event; see [`ApplyError`].
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The rebuilt states could not be written as snapshots; the rebuilt projection is live
    /// nonetheless.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// Why following the ledger stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The ledger's subscription failed (reading storage, or the ledger shut down).
    #[error(transparent)]
    Subscription(#[from] SubscriptionError),
    /// Folding stopped at an event; see [`ApplyError`].
    #[error(transparent)]
    Apply(#[from] ApplyError),
}
