//! The storage trait the ledger writes through, and the types that cross it.
//!
//! The trait is shaped for more than one backend. The embedded default keeps an append-only log
//! of its own on disk with sled as its index ([`embedded`]); a fake in memory separates what is
//! live from what is durable and injects faults ([`memory`]); the PostgreSQL backend
//! ([`postgres`]) keeps the same log in tables of a database:
//!
//! - [`Storage::append`] receives fully formed commits whose sequence numbers, stream versions
//!   and hashes were computed against [`Storage::head`]. A backend shared between processes
//!   makes the append conditional on that head and on each stream's version (in SQL: one
//!   transaction, unique `(seq)` and `(stream, version)`), and answers
//!   [`StorageError::HeadMoved`] when another writer got there first. Such a backend also
//!   lets the writer hold the head ([`Storage::hold_head`]): under that lock no other writer
//!   appends, so the writer reads what the others committed, plans its group on the true head
//!   and writes it through the hold — every group that gets the lock is written.
//! - With the commits come the Merkle nodes they complete ([`TreeGrowth`]), computed by the
//!   ledger before the write: a SQL backend stores them in the same transaction, the embedded
//!   one in the same index batch.
//! - With them come the content blobs their events cite ([`Blob`]), made durable by the same
//!   write (the embedded backend's frame, a SQL backend's transaction) but kept outside the
//!   chain: no event hash covers a blob's bytes, only its name, so a blob can later be
//!   overwritten (redacted) without breaking verification. A backend stores a blob once: one it
//!   already holds intact is not written again, one it holds damaged is.
//! - Readers tail by sequence number ([`Storage::read_range`], or [`Storage::visit_range`] to
//!   read without a copy of each event); in-process notification is an optimisation on top,
//!   never the only way to learn of new events.

pub mod embedded;
mod entry_de;
pub mod frame;
pub mod memory;
mod merkle_entries;
pub mod postgres;
#[cfg(test)]
mod tamper_tests;

use std::fmt;
use std::io;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use ledger_proof::{
    Checkpoint, Cosignature, KeyRotation, PerfectNode, PublicKey, RecoveryAction,
    RecoveryStatement, Timestamp,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::envelope::Digest;

/// What [`Storage::append_signed_entry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignedAppend {
    /// The entry was appended; the log holds `entries` entries with it (as far as this writer
    /// knows: at least that many).
    Appended {
        /// Entries in the log, the new one included.
        entries: u64,
    },
    /// An entry past the ones the writer had seen changed the log's key: nothing was written.
    KeyChanged,
}

/// One entry of the checkpoint log, which is kept apart from the events so that writing a
/// checkpoint never changes a seq.
///
/// Read by hand (`entry_de`): the same objects the derived reader takes, without copying each
/// entry's fields first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum CheckpointEntry {
    /// A signing key that starts a chain of keys: the ledger's first key, or a key started
    /// after an import without the previous key, which breaks the chain (and says so).
    KeyIntroduced {
        /// The key.
        public_key: PublicKey,
        /// The tree size when it was introduced.
        tree_size: u64,
        /// When.
        time: Timestamp,
        /// Why: the first key, or the reason the chain breaks here.
        reason: String,
        /// The log's origin: the first line of its checkpoints and the name of its key.
        origin: String,
    },
    /// A signed checkpoint.
    Checkpoint(Checkpoint),
    /// A key rotation, signed by the old key.
    Rotation(KeyRotation),
    /// What recovery did to the log (a torn write cut, a loss accepted), signed.
    Recovery(RecoveryStatement),
    /// A witness's cosignature of one of the log's checkpoints.
    Cosignature(Cosignature),
}

impl CheckpointEntry {
    /// The tree size the entry signs a root for, if it signs one.
    pub fn signed_size(&self) -> Option<u64> {
        match self {
            CheckpointEntry::KeyIntroduced { .. } => None,
            CheckpointEntry::Checkpoint(c) => Some(c.tree_size),
            CheckpointEntry::Rotation(r) => Some(r.tree_size),
            CheckpointEntry::Recovery(r) => Some(r.tree_size),
            CheckpointEntry::Cosignature(c) => Some(c.tree_size),
        }
    }

    /// The root the entry signs for [`CheckpointEntry::signed_size`].
    pub fn signed_root(&self) -> Option<Digest> {
        match self {
            CheckpointEntry::KeyIntroduced { .. } => None,
            CheckpointEntry::Checkpoint(c) => Some(c.root),
            CheckpointEntry::Rotation(r) => Some(r.root),
            CheckpointEntry::Recovery(r) => Some(r.root),
            CheckpointEntry::Cosignature(c) => Some(c.root),
        }
    }
}

/// How an entry of the checkpoint log stands once the accepted losses after it are taken into
/// account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// The entry is compared with the log.
    Counts,
    /// It signs a tree larger than a later accepted loss kept: it describes history that was
    /// given up, and is only checked for its signature. `by` is the 0-based index of the
    /// statement.
    Superseded {
        /// The statement that gave the history up.
        by: usize,
    },
    /// A later accepted loss declared it void: it is not checked at all.
    Disowned {
        /// The statement that declared it void.
        by: usize,
    },
}

/// The standing of every entry of a checkpoint log (see [`Standing`]).
pub fn standings(entries: &[CheckpointEntry]) -> Vec<Standing> {
    standings_from(entries, 1)
}

/// [`standings`] of entries of the checkpoint log numbered from `first` (1 for the first
/// entry): the entries after them cannot change how they stand, so this is how they stand in
/// the whole log when `entries` runs to its end. `by` indexes `entries`.
pub(crate) fn standings_from(entries: &[CheckpointEntry], first: u64) -> Vec<Standing> {
    let mut out = vec![Standing::Counts; entries.len()];
    for (j, entry) in entries.iter().enumerate() {
        let CheckpointEntry::Recovery(statement) = entry else {
            continue;
        };
        if statement.action != RecoveryAction::LossAccepted {
            continue;
        }
        for (i, earlier) in entries.iter().enumerate().take(j) {
            if out[i] != Standing::Counts {
                continue;
            }
            if statement.disowned_entries.contains(&(first + i as u64)) {
                out[i] = Standing::Disowned { by: j };
            } else if earlier
                .signed_size()
                .is_some_and(|size| size > statement.tree_size)
            {
                out[i] = Standing::Superseded { by: j };
            }
        }
    }
    out
}

/// The signed checkpoints among `entries` that count, each with its index in `entries`, given
/// how each entry stands ([`standings`]).
pub(crate) fn counting_checkpoints<'a>(
    entries: &'a [CheckpointEntry],
    standing: &'a [Standing],
) -> impl DoubleEndedIterator<Item = (usize, &'a Checkpoint)> + 'a {
    entries
        .iter()
        .zip(standing)
        .enumerate()
        .filter_map(|(i, (e, s))| match e {
            CheckpointEntry::Checkpoint(c) if *s == Standing::Counts => Some((i, c)),
            _ => None,
        })
}

/// The largest tree size that counting entries of the checkpoint log sign, with the entry's
/// index: the log held at least that many events.
pub fn signed_claim(entries: &[CheckpointEntry]) -> Option<(u64, usize)> {
    let standing = standings(entries);
    entries
        .iter()
        .enumerate()
        .filter(|(i, _)| standing[*i] == Standing::Counts)
        .filter_map(|(i, e)| e.signed_size().map(|size| (size, i)))
        .max_by_key(|(size, i)| (*size, std::cmp::Reverse(*i)))
}

/// The head of the global chain: how many events there are and the hash of the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainHead {
    /// Number of events; the next event's seq.
    pub size: u64,
    /// Hash of the event at `size - 1`, or zero when empty.
    pub last_hash: Digest,
}

/// An event ready to be written: its stored bytes and what indexes need to find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedEvent {
    /// Global position.
    pub seq: u64,
    /// Position in its stream, from 1.
    pub stream_version: u64,
    /// The event id.
    pub event_id: Uuid,
    /// The hash of the event before it.
    pub prev_hash: Digest,
    /// The chain hash (also the last 32 stored bytes).
    pub hash: Digest,
    /// The stored bytes: `body ‖ hash`.
    pub bytes: Arc<[u8]>,
}

/// blake3 of a content blob's bytes: its name.
pub fn content_hash(bytes: &[u8]) -> Digest {
    Digest(*blake3::hash(bytes).as_bytes())
}

/// A content blob an append carries: bytes its events cite by hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    /// blake3 of `bytes` ([`content_hash`]).
    pub hash: Digest,
    /// The bytes.
    pub bytes: Arc<[u8]>,
}

impl Blob {
    /// A blob of `bytes`, named by their hash.
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Blob {
        let bytes = bytes.into();
        Blob {
            hash: content_hash(&bytes),
            bytes,
        }
    }
}

/// What an idempotency key committed: enough to rebuild the original receipt.
///
/// An export bundle carries these as JSON objects, which have no other field. The embedded
/// backend keeps them as postcard (positional: field names are not written) and PostgreSQL as
/// columns, so refusing unknown fields changes only what a bundle may hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyRecord {
    /// The key as the client sent it.
    pub key: String,
    /// Fingerprint of the command that first used the key.
    pub fingerprint: Digest,
    /// The stream the command wrote to.
    pub stream: String,
    /// Seq of the first event the command wrote.
    pub first_seq: u64,
    /// How many events it wrote (consecutive seqs).
    pub event_count: u32,
    /// The stream version after the command.
    pub stream_version: u64,
}

/// One append: all of its events are written, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The stream appended to.
    pub stream: String,
    /// The stream's version before this commit; the backend checks it again.
    pub base_version: u64,
    /// The events, with consecutive seqs and stream versions.
    pub events: Vec<SealedEvent>,
    /// Present when the command carried an idempotency key.
    pub idempotency: Option<IdempotencyRecord>,
}

/// How the Merkle tree grows with one append: the perfect subtrees its events complete and the
/// number of leaves after them. The nodes are derived from the event hashes, so a backend may
/// lose them in a crash (the ledger recomputes what is missing on open); a backend that can
/// stores them in the same write as the index entries of the commits, so that a proof or a
/// verification that follows an acknowledgement finds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeGrowth {
    /// The perfect subtrees completed, each stored once.
    pub nodes: Vec<PerfectNode>,
    /// Leaves the tree holds once the commits are in.
    pub size: u64,
}

/// An event's stored bytes and the seq at which storage holds them. The ledger decodes the
/// bytes and checks that they agree with the position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    /// The seq at which storage found the bytes.
    pub seq: u64,
    /// The stored bytes.
    pub bytes: Arc<[u8]>,
}

/// Something the backend found wrong with what it holds when it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageProblem {
    /// The first seq affected, when it is known.
    pub seq: Option<u64>,
    /// What is wrong, for an operator.
    pub detail: String,
}

/// A torn write found at the end of the log on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCut {
    /// The events the log keeps: the torn frame would have started at this seq.
    pub tree_size: u64,
    /// Where: the segment (its first seq) and the byte the torn frame starts at.
    pub segment: u64,
    /// The byte of the segment the torn bytes start at.
    pub offset: u64,
    /// How many bytes are torn.
    pub bytes: u64,
    /// blake3 of the torn bytes.
    pub hash: Digest,
    /// What is wrong with them.
    pub detail: String,
}

/// A failure of the storage backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// A file operation failed. After a failed write or sync the outcome of the append is
    /// unknown: reopen the ledger and retry with the same idempotency key to learn it.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On which file.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The index failed. It is derived from the log and is rebuilt when it cannot be trusted.
    #[error("index: {0}")]
    Index(String),
    /// Stored data is not what the format allows; an operator must look.
    #[error("stored data is damaged{}: {detail}", seq.map(|s| format!(" at seq {s}")).unwrap_or_default())]
    Corrupt {
        /// The first seq affected, when known.
        seq: Option<u64>,
        /// What is wrong.
        detail: String,
    },
    /// The database failed or refused a statement (PostgreSQL backend). After a failed commit
    /// the outcome of the append is unknown: reopen and retry with the same idempotency key.
    #[error("database: {op}: {detail}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// What the driver or the server said.
        detail: String,
    },
    /// Another process holds the data directory.
    #[error("the data directory {path} is in use by another process ({holder})")]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// What the holder wrote about itself (program, pid, address), if anything.
        holder: String,
    },
    /// Another writer appended first (shared backends only): reload the head and retry.
    #[error("another writer moved the head of the log")]
    HeadMoved,
    /// The backend refuses writes after an earlier failure.
    #[error("storage refuses writes after an earlier failure: {0}")]
    Failed(String),
    /// A fault injected by a test.
    #[error("injected fault: {0}")]
    Injected(&'static str),
}

impl StorageError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// The append lock of a shared store, held ([`Storage::hold_head`]).
pub trait HeldHead {
    /// The chain's head under the lock.
    fn head(&self) -> ChainHead;

    /// [`Storage::append`] under the lock, which the commit releases. Commits computed against
    /// another head than [`HeldHead::head`] are refused with [`StorageError::HeadMoved`],
    /// having written nothing.
    fn append(
        self: Box<Self>,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError>;
}

/// Where events are kept. All methods may be called from many threads; `append` is called by
/// one writer at a time.
pub trait Storage: Send + Sync + fmt::Debug {
    /// The head of the chain as of the last successful append.
    fn head(&self) -> ChainHead;

    /// Makes the commits durable, in order, each all or nothing, and indexes them together with
    /// `tree`, the Merkle nodes they complete. `content` are the blobs their events cite (or,
    /// with no commit, blobs stored on their own, as a restore does before the events): they
    /// are made durable by the same write, and a blob already held intact is not written again.
    /// Returns only when every byte needed to find and read them is on stable storage. Every
    /// read that follows finds them (by seq, stream, id and hash, their Merkle nodes, and each
    /// blob by its hash): a backend that indexes after returning makes such a read wait for its
    /// index. On error, a prefix of the commits may have been made durable; the ledger stops
    /// writing and reopens to learn which.
    fn append(
        &self,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError>;

    /// The bytes of the content blob named `hash` as stored, unchecked (the ledger checks them
    /// against the hash), or `None` when the backend holds no such blob.
    fn read_blob(&self, hash: &Digest) -> Result<Option<Vec<u8>>, StorageError>;

    /// Whether the backend holds a content blob named `hash` (its bytes unchecked).
    fn has_blob(&self, hash: &Digest) -> Result<bool, StorageError>;

    /// How many syncs (`fdatasync`, `fsync`, a durable commit) the backend's write path has
    /// made since it opened: what group commit shares among appends.
    fn syncs(&self) -> u64 {
        0
    }

    /// Up to `max` events from `from_seq` on, in storage order.
    fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, StorageError>;

    /// Calls `visit` with the stored bytes of up to `max` events from `from_seq` on, in storage
    /// order, until it answers `Break`; returns how many it was called for. The bytes are lent
    /// for the call only, so a backend can hand out its read buffer instead of a copy of each
    /// event: verification reads the whole log this way. The default reads through
    /// [`Storage::read_range`], a bounded number of events at a time.
    fn visit_range(
        &self,
        from_seq: u64,
        max: usize,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<usize, StorageError> {
        const CHUNK_EVENTS: usize = 1024;
        let mut visited = 0usize;
        while visited < max {
            let chunk =
                self.read_range(from_seq + visited as u64, CHUNK_EVENTS.min(max - visited))?;
            if chunk.is_empty() {
                break;
            }
            for event in &chunk {
                visited += 1;
                if visit(event.seq, &event.bytes).is_break() {
                    return Ok(visited);
                }
            }
        }
        Ok(visited)
    }

    /// The current version of a stream; 0 when it has no events.
    fn stream_version(&self, stream: &str) -> Result<u64, StorageError>;

    /// Up to `max` events of one stream from `from_version` (1-based) on.
    fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RawEvent>, StorageError>;

    /// The event with this id, if any.
    fn find_event_id(&self, id: Uuid) -> Result<Option<RawEvent>, StorageError>;

    /// The event with this hash, if any.
    fn find_hash(&self, hash: &Digest) -> Result<Option<RawEvent>, StorageError>;

    /// What an idempotency key committed, if it was used.
    fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StorageError>;

    /// Every idempotency record, ordered by the seq of the commit it names (for export).
    fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, StorageError>;

    /// Problems found when the backend opened. The ledger refuses appends while any exist.
    fn problems(&self) -> Vec<StorageProblem>;

    /// What recovery did or found when the backend opened that is not a problem (a torn write
    /// awaiting its cut, a torn checkpoint line cut), for the operator.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Why the backend stopped writing since it opened (a failed write or sync, an index that
    /// could not follow the log), if it did.
    fn failure(&self) -> Option<String> {
        None
    }

    /// True when the backend was opened read-only or refuses to write because of
    /// [`Storage::problems`]: nothing it does changes what is stored.
    fn is_read_only(&self) -> bool {
        false
    }

    /// A torn write at the end of the log that no durable record shows acknowledged, found on
    /// open: appends wait until [`Storage::cut_torn_tail`] has cut it.
    fn pending_cut(&self) -> Option<PendingCut> {
        None
    }

    /// Records `statement` (which says what is cut) in the checkpoint log, then moves the torn
    /// bytes aside and truncates the log before them. Returns where the bytes were kept.
    fn cut_torn_tail(&self, statement: &CheckpointEntry) -> Result<String, StorageError> {
        let _ = statement;
        Err(StorageError::Failed(
            "this backend has no torn write to cut".into(),
        ))
    }

    /// Records `statements` (an accepted loss, and the key that signs it if the checkpoint log
    /// lost its own) in the checkpoint log, then moves whatever the log holds past the part
    /// that checked out aside, and resets every durable record of the log's length to that
    /// part. The backend must be reopened afterwards. Returns what was moved where.
    fn accept_loss(&self, statements: &[CheckpointEntry]) -> Result<Vec<String>, StorageError> {
        let _ = statements;
        Err(StorageError::Failed(
            "this backend cannot accept a loss".into(),
        ))
    }

    /// The largest size any durable record said the log had when the backend opened (at
    /// least its size).
    fn claimed_size(&self) -> u64 {
        self.head().size
    }

    /// Persists derived state (indexes) so that the next open has less to rebuild. Acknowledged
    /// events are durable without it.
    fn checkpoint_index(&self) -> Result<(), StorageError>;

    /// How many leaves the stored Merkle nodes cover (never more than the log holds): every
    /// node completed by a leaf below it is stored. On a shared store it may stop short of the
    /// log when another node cleared the nodes to store them again, until a ledger stores
    /// them from there.
    fn merkle_size(&self) -> Result<u64, StorageError>;

    /// Stores perfect-subtree hashes of the Merkle tree, which now covers `size` leaves, when
    /// the tree is grown from the events (`nodes` in the order the growth completed them, the
    /// first being its first leaf's own). They are derived from the event hashes and may be
    /// rebuilt from them. The stored size becomes `size` if the growth started within it.
    fn put_merkle_nodes(&self, nodes: &[PerfectNode], size: u64) -> Result<(), StorageError>;

    /// Forgets every stored perfect-subtree hash, before the tree is rebuilt from the first
    /// event because the stored nodes could not be read.
    fn clear_merkle_nodes(&self) -> Result<(), StorageError>;

    /// The stored hash of perfect subtree `(level, index)`.
    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError>;

    /// Appends an entry to the checkpoint log, durably.
    fn append_checkpoint_entry(&self, entry: &CheckpointEntry) -> Result<(), StorageError>;

    /// Appends `entry`, the introduction of the log's first key, only if the checkpoint log is
    /// empty; answers whether it did. Of several ledgers starting together on a new shared
    /// store, the first to commit introduces its key and the others find it there, so a shared
    /// backend makes the check and the append one step. The default, for a store with one
    /// writer, reads the log and appends.
    fn append_first_key(&self, entry: &CheckpointEntry) -> Result<bool, StorageError> {
        if !self.checkpoint_entries()?.is_empty() {
            return Ok(false);
        }
        self.append_checkpoint_entry(entry)?;
        Ok(true)
    }

    /// Every entry of the checkpoint log, in order.
    fn checkpoint_entries(&self) -> Result<Vec<CheckpointEntry>, StorageError>;

    /// The entries of the checkpoint log past its first `from`, in order.
    fn checkpoint_entries_from(&self, from: u64) -> Result<Vec<CheckpointEntry>, StorageError> {
        let skip = usize::try_from(from).unwrap_or(usize::MAX);
        Ok(self.checkpoint_entries()?.into_iter().skip(skip).collect())
    }

    /// Appends `entry` (a checkpoint or a rotation, signed with the key the writer holds)
    /// unless an entry past the first `seen` of the log changed the key (a rotation, a key
    /// introduced): then nothing is written and the answer is [`SignedAppend::KeyChanged`]. A
    /// shared store makes the check and the append one step under the lock every append takes,
    /// so no ledger signs into the log with a key another one retired. The default, for a store
    /// with one writer (whose own rotations are the only ones), appends.
    fn append_signed_entry(
        &self,
        entry: &CheckpointEntry,
        seen: u64,
    ) -> Result<SignedAppend, StorageError> {
        self.append_checkpoint_entry(entry)?;
        Ok(SignedAppend::Appended { entries: seen + 1 })
    }

    /// Shared stores: lets go of the periodic checkpoints' lead, if this ledger holds it, so
    /// that a ledger able to sign takes it.
    fn resign_checkpoint_lead(&self) {}

    /// True when other ledgers may append to the same store (a shared database): the writer
    /// then follows what they commit, plans each group under [`Storage::hold_head`], and keeps
    /// writing after a failed write (whose outcome the next append learns, since it follows the
    /// store under the lock before it plans).
    fn is_shared(&self) -> bool {
        false
    }

    /// Shared stores: takes the lock that serialises appends of every writer and answers the
    /// chain's head under it. While the hold lives no other writer appends, and every event up
    /// to its head is readable ([`Storage::read_range`]). [`HeldHead::append`] writes commits
    /// computed against that head and releases the lock with its commit; a hold dropped
    /// unused releases it having written nothing. A store with one writer answers `None`.
    fn hold_head(&self) -> Result<Option<Box<dyn HeldHead + '_>>, StorageError> {
        Ok(None)
    }

    /// Tells the backend that the writer has read and checked the log up to `head`, appended by
    /// others: [`Storage::head`] says so from then on.
    fn followed(&self, head: ChainHead) {
        let _ = head;
    }

    /// Shared stores: calls `wake` whenever another ledger may have appended, so that the
    /// writer follows at once rather than at its next poll (which stays the fallback, since a
    /// store may miss telling). It may be called for nothing; it must return at once.
    fn watch(&self, wake: Arc<dyn Fn() + Send + Sync>) {
        let _ = wake;
    }

    /// True when this ledger is the one that writes the periodic checkpoints of a shared
    /// store (one at a time holds the lead); always true for a store of its own.
    fn checkpoint_leader(&self) -> bool {
        true
    }
}
