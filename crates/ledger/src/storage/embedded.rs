//! The embedded default backend: an append-only log of segment files is the record, and a sled
//! database indexes it.
//!
//! Why not keep the events in sled itself? sled 0.34's `flush()` ends in `sync_file_range`, which
//! does not make data durable, and its crash recovery has open reports of lost and corrupted
//! data. Here the durability of an acknowledged event rests only on `write` + `fdatasync` of a
//! file whose layout this crate defines ([`super::frame`]) and an operator can read without
//! sled; sled holds only what can be rebuilt from the log (stream, id and hash indexes, the
//! position of each frame, idempotency keys, the Merkle tree's nodes), in one tree written once
//! per group commit. A lost or damaged index is rebuilt on open; a lost index can never lose an
//! event.
//!
//! The index is written by a thread of its own once a frame is durable, so the append is
//! acknowledged without waiting for sled; every read that needs the index waits until it
//! covers the head of the log, so an acknowledged append is always found.
//!
//! Directory layout (inside the ledger's directory):
//!
//! ```text
//! LOCK                          held (flock) while open; names its holder
//! log/<first seq, 20 digits>.seg   segment files: header, then frames
//! index/                        sled: the derived index
//! recovered/                    bytes cut from a torn tail after a crash, kept for inspection
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;

use uuid::Uuid;

mod head_record;
mod index_tree;
mod recover;

use head_record::{HeadFile, HeadRecord};
use index_tree::IndexTree;

use super::frame::{
    self, FRAME_HEADER_LEN, FrameBody, FrameCommit, FrameDefect, SEGMENT_HEADER_LEN,
};
use ledger_proof::PerfectNode;

use super::{
    ChainHead, CheckpointEntry, Commit, IdempotencyRecord, PendingCut, RawEvent, Storage,
    StorageError, StorageProblem, TreeGrowth,
};
use crate::envelope::{Digest, EventRef, decode_stored};

/// Options for opening the embedded backend.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Size at which a new segment file is started.
    pub segment_bytes_max: u64,
    /// Written into the lock file so that a process that finds the directory locked can say who
    /// holds it (program, pid, address).
    pub lock_note: String,
    /// Open without changing a byte of the directory: no lock file is created, nothing is cut,
    /// the index is built in memory, and every append is refused.
    pub read_only: bool,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            segment_bytes_max: 256 * 1024 * 1024,
            lock_note: format!("research-ledger (pid {})", std::process::id()),
            read_only: false,
        }
    }
}

/// Where an event's stored bytes are: `seq | segment first seq | absolute offset | length`,
/// big-endian, 28 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Location {
    seq: u64,
    segment: u64,
    offset: u64,
    len: u32,
}

impl Location {
    fn encode(&self) -> [u8; 28] {
        let mut out = [0u8; 28];
        out[0..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..16].copy_from_slice(&self.segment.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Location, StorageError> {
        if bytes.len() != 28 {
            return Err(StorageError::Index(format!(
                "location entry of {} bytes",
                bytes.len()
            )));
        }
        Ok(Location {
            seq: be_u64(&bytes[0..8]),
            segment: be_u64(&bytes[8..16]),
            offset: be_u64(&bytes[16..24]),
            len: u32::from_be_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]),
        })
    }
}

/// Where the log ends as far as the index knows: the resume point of the next open.
/// `next_seq | last_hash[32] | segment | next frame offset`, big-endian, 56 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tail {
    next_seq: u64,
    last_hash: Digest,
    segment: u64,
    offset: u64,
}

impl Tail {
    fn encode(&self) -> [u8; 56] {
        let mut out = [0u8; 56];
        out[0..8].copy_from_slice(&self.next_seq.to_be_bytes());
        out[8..40].copy_from_slice(&self.last_hash.0);
        out[40..48].copy_from_slice(&self.segment.to_be_bytes());
        out[48..56].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Tail> {
        if bytes.len() != 56 {
            return None;
        }
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&bytes[8..40]);
        Some(Tail {
            next_seq: be_u64(&bytes[0..8]),
            last_hash: Digest(hash),
            segment: be_u64(&bytes[40..48]),
            offset: be_u64(&bytes[48..56]),
        })
    }
}

const CHECKPOINT_LOG: &str = "checkpoints.jsonl";
/// The index's layout version. An index of any other version (or none) is dropped and rebuilt
/// from the log on open.
const INDEX_FORMAT_VERSION: &[u8] = b"2";
/// The one sled tree that holds the index.
const INDEX_TREE: &str = "index";
/// Trees of the first index layout, one per kind of entry; dropped when the index is rebuilt.
const LEGACY_TREES: [&str; 8] = [
    "frames",
    "streams",
    "heads",
    "event_ids",
    "hashes",
    "idempotency",
    "meta",
    "merkle",
];

/// Key prefixes of the index tree, one byte each, so that every kind of entry has a key range
/// of its own and one `apply_batch` can write all of a group's entries at once.
mod prefix {
    /// frame first seq (BE) → segment (BE) ‖ frame offset (BE)
    pub(super) const FRAME: u8 = b'f';
    /// stream ‖ 0x00 ‖ version (BE) → location; the last version of a stream is its head
    pub(super) const STREAM: u8 = b's';
    /// event id → location
    pub(super) const EVENT_ID: u8 = b'i';
    /// event hash → location
    pub(super) const HASH: u8 = b'h';
    /// idempotency key → postcard(IdempotencyRecord)
    pub(super) const KEY: u8 = b'k';
    /// tree size (BE) → the perfect subtrees completed by the leaves just below that size,
    /// see [`super::MerkleEntries`]
    pub(super) const MERKLE: u8 = b'm';
}

// The index's own state, under keys of their own that start with `_`.
const META_TAIL: &[u8] = b"_tail";
const META_MERKLE_SIZE: &[u8] = b"_merkle-size";
const META_INDEX_FORMAT: &[u8] = b"_index-format";

/// `prefix ‖ rest`, the key of an index entry.
fn key(prefix: u8, rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + rest.len());
    key.push(prefix);
    key.extend_from_slice(rest);
    key
}

/// A key above every key that starts with `prefix` (the index's keys are short).
fn prefix_end(prefix: u8) -> [u8; 2] {
    [prefix, 0xff]
}

fn frame_key(first_seq: u64) -> [u8; 9] {
    let mut key = [prefix::FRAME; 9];
    key[1..].copy_from_slice(&first_seq.to_be_bytes());
    key
}

fn merkle_key(size: u64) -> [u8; 9] {
    let mut key = [prefix::MERKLE; 9];
    key[1..].copy_from_slice(&size.to_be_bytes());
    key
}

/// Leaves whose completed Merkle nodes share one index entry, at most: a bound on the size of
/// an entry (about 2 × 41 bytes a leaf) when the tree is rebuilt in long runs.
const MERKLE_ENTRY_LEAVES: u64 = 256;

/// Length of one stored Merkle node: `level u8 | index u64 BE | hash[32]`.
const MERKLE_NODE_LEN: usize = 41;

/// The Merkle nodes of a growth of the tree, packed into index entries.
///
/// A perfect subtree `(level, index)` is completed by exactly one leaf, the last it covers:
/// `L = (index + 1)·2^level − 1`. Nodes are stored in entries keyed by a tree size `k`, each
/// holding the nodes completed by leaves below `k` and not in an entry of a smaller key; so
/// node `(level, index)` is in the entry with the smallest key above `L`, found with one range
/// seek. A group commit of n events costs one entry (two when it crosses a multiple of
/// [`MERKLE_ENTRY_LEAVES`]) rather than about 2n.
struct MerkleEntries;

impl MerkleEntries {
    /// The leaf that completes node `(level, index)`, if there can be one.
    fn completing_leaf(level: u8, index: u64) -> Option<u64> {
        index
            .checked_add(1)?
            .checked_mul(1u64.checked_shl(u32::from(level))?)?
            .checked_sub(1)
    }

    /// `(key, value)` of the entries holding `nodes`, completed by the leaves that grew the
    /// tree to `size`, in the order the leaves completed them.
    fn pack(nodes: &[PerfectNode], size: u64) -> Vec<(u64, Vec<u8>)> {
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
        for node in nodes {
            let leaf = Self::completing_leaf(node.level, node.index).unwrap_or(u64::MAX);
            let key = (leaf / MERKLE_ENTRY_LEAVES + 1)
                .saturating_mul(MERKLE_ENTRY_LEAVES)
                .min(size);
            if entries.last().is_none_or(|(k, _)| *k != key) {
                entries.push((key, Vec::with_capacity(2 * MERKLE_NODE_LEN)));
            }
            if let Some((_, value)) = entries.last_mut() {
                value.push(node.level);
                value.extend_from_slice(&node.index.to_be_bytes());
                value.extend_from_slice(&node.hash.0);
            }
        }
        entries
    }

    /// Where a node sorts in an entry: by the leaf that completed it, then by level, which is
    /// the order the frontier reports nodes in.
    fn order(node: &[u8]) -> (u64, u8) {
        let (level, index) = (node[0], be_u64(&node[1..9]));
        (
            Self::completing_leaf(level, index).unwrap_or(u64::MAX),
            level,
        )
    }

    /// The hash of node `(level, index)` in an entry's value, if the entry holds it: a binary
    /// search, the nodes being in completion order.
    fn find(value: &[u8], level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        if !value.len().is_multiple_of(MERKLE_NODE_LEN) {
            return Err(StorageError::Index(format!(
                "Merkle entry of {} bytes",
                value.len()
            )));
        }
        let Some(leaf) = Self::completing_leaf(level, index) else {
            return Ok(None);
        };
        let node = |i: usize| &value[i * MERKLE_NODE_LEN..(i + 1) * MERKLE_NODE_LEN];
        let (mut low, mut high) = (0usize, value.len() / MERKLE_NODE_LEN);
        while low < high {
            let mid = low + (high - low) / 2;
            match Self::order(node(mid)).cmp(&(leaf, level)) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => {
                    let found = node(mid);
                    if be_u64(&found[1..9]) != index {
                        return Ok(None);
                    }
                    let mut hash = [0u8; 32];
                    hash.copy_from_slice(&found[9..]);
                    return Ok(Some(Digest(hash)));
                }
            }
        }
        Ok(None)
    }

    /// The first leaf an entry covers: every leaf completes its own level-0 node first, so an
    /// entry starts with the level-0 node of its first leaf.
    fn first_leaf(value: &[u8]) -> Option<u64> {
        let node = value.get(..MERKLE_NODE_LEN)?;
        (node[0] == 0).then(|| be_u64(&node[1..9]))
    }
}

/// Merkle entries read lately, so that the nodes near the root, which every proof needs, and
/// the neighbours of a leaf, which share its entry, are read from sled once: entry key →
/// (first leaf it covers, value). Entries never change once written, so a cached one stays
/// true until the nodes are dropped for a rebuild.
#[derive(Debug, Default)]
struct MerkleCache {
    entries: BTreeMap<u64, (u64, sled::IVec)>,
}

/// Entries the cache holds at most (a few kilobytes each); when full it starts over.
const MERKLE_CACHE_ENTRIES: usize = 1024;

impl MerkleCache {
    /// The cached entry that holds the nodes completed by `leaf`, if any.
    fn covering(&self, leaf: u64) -> Option<&sled::IVec> {
        let (_, (first, value)) = self.entries.range(leaf.checked_add(1)?..).next()?;
        (*first <= leaf).then_some(value)
    }

    fn keep(&mut self, key: u64, value: sled::IVec) {
        let Some(first) = MerkleEntries::first_leaf(&value) else {
            return;
        };
        if self.entries.len() >= MERKLE_CACHE_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, (first, value));
    }
}

/// The sled index: one tree, its entries told apart by a one-byte key prefix ([`prefix`]).
///
/// One tree rather than one per kind of entry because sled seals and writes its log buffers at
/// every `apply_batch`: a group commit's entries, Merkle nodes and resume point go in as one
/// batch, atomically, at the cost of one such seal.
#[derive(Debug)]
struct Index {
    /// The sled database, when the index lives on disk.
    db: Option<sled::Db>,
    tree: Arc<IndexTree>,
}

fn index_err(e: sled::Error) -> StorageError {
    StorageError::Index(e.to_string())
}

impl Index {
    /// An index in memory only, empty.
    fn memory() -> Index {
        Index {
            db: None,
            tree: Arc::new(IndexTree::memory()),
        }
    }

    fn open(path: &Path) -> Result<Index, StorageError> {
        let config = sled::Config::new()
            .path(path)
            .cache_capacity(64 * 1024 * 1024)
            .flush_every_ms(Some(1000));
        // The caller holds the ledger's own lock, so a sled lock still held can only belong to
        // an instance in this process that is shutting down (sled releases its file lock
        // from a background thread): wait for it, briefly.
        let mut attempts = 0;
        let db = loop {
            match config.open() {
                Ok(db) => break db,
                Err(sled::Error::Io(e)) if is_lock_held(&e) && attempts < 250 => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(index_err(e)),
            }
        };
        let tree = db.open_tree(INDEX_TREE).map_err(index_err)?;
        Ok(Index {
            db: Some(db),
            tree: Arc::new(IndexTree::Sled(tree)),
        })
    }

    /// Empties the index, drops the trees of an older layout, and marks it as of this layout.
    fn reset(&self) -> Result<(), StorageError> {
        self.tree.clear()?;
        if let Some(db) = &self.db {
            for name in LEGACY_TREES {
                db.drop_tree(name).map_err(index_err)?;
            }
        }
        self.tree.apply(
            vec![(META_INDEX_FORMAT.into(), INDEX_FORMAT_VERSION.into())],
            Vec::new(),
        )
    }

    fn tail(&self) -> Result<Option<Tail>, StorageError> {
        if self.tree.get(META_INDEX_FORMAT)?.as_deref() != Some(INDEX_FORMAT_VERSION) {
            return Ok(None);
        }
        Ok(self.tree.get(META_TAIL)?.and_then(|v| Tail::decode(&v)))
    }

    fn get(&self, prefix: u8, rest: &[u8]) -> Result<Option<sled::IVec>, StorageError> {
        self.tree.get(&key(prefix, rest))
    }

    /// Writes sled's buffers out (not durably: the index is derived).
    fn flush(&self) -> Result<(), StorageError> {
        match &self.db {
            Some(db) => db.flush().map(|_| ()).map_err(index_err),
            None => Ok(()),
        }
    }
}

fn stream_key(stream: &str, version: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream.len() + 10);
    key.push(prefix::STREAM);
    key.extend_from_slice(stream.as_bytes());
    key.push(0);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

/// What the index learns of one event.
struct IndexedEvent<'a> {
    loc: Location,
    stream: &'a str,
    stream_version: u64,
    event_id: Uuid,
    hash: Digest,
}

/// Accumulates the index writes of one or more frames, applied as one atomic batch.
#[derive(Default)]
struct IndexBatch {
    /// Keys and values in the order written; a later value for a key replaces an earlier.
    entries: Vec<(sled::IVec, sled::IVec)>,
}

impl IndexBatch {
    fn insert(&mut self, key: impl Into<sled::IVec>, value: impl Into<sled::IVec>) {
        self.entries.push((key.into(), value.into()));
    }

    fn frame(&mut self, first_seq: u64, segment: u64, offset: u64) {
        let mut value = [0u8; 16];
        value[0..8].copy_from_slice(&segment.to_be_bytes());
        value[8..16].copy_from_slice(&offset.to_be_bytes());
        self.insert(&frame_key(first_seq)[..], &value[..]);
    }

    fn event(&mut self, e: &IndexedEvent<'_>) {
        let loc = e.loc.encode();
        self.insert(stream_key(e.stream, e.stream_version), &loc[..]);
        self.insert(key(prefix::EVENT_ID, e.event_id.as_bytes()), &loc[..]);
        self.insert(key(prefix::HASH, &e.hash.0), &loc[..]);
    }

    fn key(&mut self, record: &IdempotencyRecord) {
        let value = postcard::to_stdvec(record).unwrap_or_default();
        self.insert(key(prefix::KEY, record.key.as_bytes()), value);
    }

    fn merkle(&mut self, nodes: &[PerfectNode], size: u64) {
        for (key, value) in MerkleEntries::pack(nodes, size) {
            self.insert(&merkle_key(key)[..], value);
        }
        self.insert(META_MERKLE_SIZE, &size.to_be_bytes()[..]);
    }

    /// Adds the writes of a later batch after these.
    fn append(&mut self, later: IndexBatch) {
        self.entries.extend(later.entries);
    }

    /// Writes everything gathered, with `tail` as the new resume point, in one batch: an index
    /// that survives a crash never claims more than it holds.
    fn apply(mut self, tree: &IndexTree, tail: &Tail) -> Result<(), StorageError> {
        self.insert(META_TAIL, &tail.encode()[..]);
        tree.apply(self.entries, Vec::new())
    }
}

/// One group commit's index writes, on their way to sled, and where the log ends after it.
struct IndexJob {
    batch: IndexBatch,
    tail: Tail,
}

/// Group commits whose frames are durable but not yet indexed, at most: past it, the writer
/// waits for the indexer, so that the index never falls far behind the log.
const INDEX_QUEUE_JOBS: usize = 4;

/// How far the index has caught up with the log, shared by the backend and its indexer thread.
#[derive(Debug, Default)]
struct IndexProgress {
    state: Mutex<IndexState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct IndexState {
    /// Events the index covers.
    indexed: u64,
    /// Why the index stopped following the log, if it did: a batch could not be written.
    failed: Option<String>,
}

impl IndexProgress {
    fn lock(&self) -> std::sync::MutexGuard<'_, IndexState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The indexer thread: writes the index of each group commit after its frame is durable, off
/// the path that acknowledges appends, and merges whatever jobs wait into one sled batch.
fn run_indexer(
    tree: Arc<IndexTree>,
    progress: Arc<IndexProgress>,
    jobs: Receiver<IndexJob>,
    head_sync: Option<(PathBuf, File)>,
) {
    /// However the thread ends, a reader still waiting for it is told rather than left waiting.
    struct Stopped<'a>(&'a IndexProgress);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            let mut state = self.0.lock();
            if state.failed.is_none() {
                state.failed = Some("the indexer has stopped".into());
            }
            drop(state);
            self.0.changed.notify_all();
        }
    }
    let _stopped = Stopped(&progress);
    let mut last_head_sync = std::time::Instant::now();
    while let Ok(IndexJob {
        mut batch,
        mut tail,
    }) = jobs.recv()
    {
        while let Ok(later) = jobs.try_recv() {
            batch.append(later.batch);
            tail = later.tail;
        }
        let written = batch.apply(&tree, &tail);
        // The head record was written (not synced) when the frames were acknowledged; syncing
        // it here, off the acknowledgement's path, bounds how far a power loss can set it back.
        if let Some((path, file)) = &head_sync
            && last_head_sync.elapsed()
                >= std::time::Duration::from_millis(head_record::HEAD_SYNC_EVERY_MS)
        {
            if let Err(e) = file.sync_data() {
                tracing::warn!(error = %e, path = %path.display(), "the head record could not be synced");
            }
            last_head_sync = std::time::Instant::now();
        }
        let mut state = progress.lock();
        match written {
            Ok(()) => state.indexed = tail.next_seq,
            Err(e) => {
                state.failed = Some(format!(
                    "the index could not be written at seq {}: {e}",
                    state.indexed
                ));
            }
        }
        let failed = state.failed.is_some();
        drop(state);
        progress.changed.notify_all();
        if failed {
            // Dropping the queue refuses every later frame: the log must not run ahead of an
            // index that cannot follow it.
            return;
        }
    }
}

#[derive(Debug)]
struct Segment {
    first_seq: u64,
    path: PathBuf,
    file: File,
}

#[derive(Debug)]
struct Writer {
    /// First seq of the segment being written.
    segment: u64,
    /// Where the next frame goes in it.
    end: u64,
    /// Frames in the active segment; a segment is never left empty by a roll-over.
    frames_in_segment: u64,
    /// Set by a failed write or sync: the file's state is then unknown, so nothing more is
    /// written until the ledger is reopened and recovery has looked at the tail.
    failed: Option<String>,
    /// The version of every stream this backend wrote to or looked up since it opened, as its
    /// log holds it: the check of each commit's base version before a frame is written asks
    /// this, not the index, which may still be catching up. A stream missing here was never
    /// written since the backend opened, so the index holds all of it.
    versions: HashMap<String, u64>,
    /// Where each durable frame's index writes go: the indexer thread.
    queue: Option<SyncSender<IndexJob>>,
}

/// The embedded backend. See the module documentation.
#[derive(Debug)]
pub struct EmbeddedStorage {
    log_dir: PathBuf,
    recovered_dir: PathBuf,
    // Held for as long as the storage is open: the flock is released when it is dropped. A
    // read-only open of a directory it may not write holds none.
    _lock: Option<File>,
    index: Index,
    /// The index on disk, left untouched while the backend refuses to write and reads through
    /// an index built in memory instead.
    set_aside: Option<Index>,
    /// Asked to open read-only: nothing at all is written, not even the checkpoint log.
    opened_read_only: bool,
    /// Opened read-only, or refusing to write because of `problems`.
    read_only: bool,
    /// The head record, when the backend writes.
    head_file: Mutex<Option<HeadFile>>,
    /// A torn write found on open that awaits its cut.
    pending_cut: Mutex<Option<PendingCut>>,
    /// Where the part of the log that checked out ends: what an accepted loss keeps.
    kept: Tail,
    /// The largest size a durable record said the log had when it opened.
    claimed: u64,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    writer: Mutex<Writer>,
    head: RwLock<ChainHead>,
    problems: Vec<StorageProblem>,
    recoveries: Vec<String>,
    segment_bytes_max: u64,
    checkpoints: Mutex<CheckpointLog>,
    /// How far the index has caught up with the log.
    progress: Arc<IndexProgress>,
    merkle_cache: Mutex<MerkleCache>,
    indexer: Mutex<Option<JoinHandle<()>>>,
}

/// The checkpoint log: one JSON entry a line, each line synced before it counts.
#[derive(Debug)]
struct CheckpointLog {
    path: PathBuf,
    entries: Vec<CheckpointEntry>,
    /// Bytes of the file the entries take.
    bytes: u64,
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(b)
}

/// Creates a directory (and its parents) and makes its entry durable in its parent.
fn create_dir_durable(path: &Path) -> Result<(), StorageError> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        create_dir_durable(parent)?;
    }
    fs::create_dir(path)
        .or_else(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(|e| StorageError::io("create directory", path, e))?;
    if let Some(parent) = path.parent() {
        sync_dir(if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        })?;
    }
    Ok(())
}

/// `fsync` on a directory, so that entries created in it survive power loss.
fn sync_dir(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io("sync directory", path, e))
}

fn segment_path(log_dir: &Path, first_seq: u64) -> PathBuf {
    log_dir.join(format!("{first_seq:020}.seg"))
}

impl EmbeddedStorage {
    /// Starts the indexer thread, once recovery has brought the index up to the log.
    fn start_indexer(&mut self) -> Result<(), StorageError> {
        self.progress.lock().indexed = self.head().size;
        let (queue, jobs) = std::sync::mpsc::sync_channel(INDEX_QUEUE_JOBS);
        let tree = Arc::clone(&self.index.tree);
        let progress = Arc::clone(&self.progress);
        let head_sync = match &*self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(head) => Some(head.sync_handle()?),
            None => None,
        };
        let thread = std::thread::Builder::new()
            .name("ledger-indexer".into())
            .spawn(move || run_indexer(tree, progress, jobs, head_sync))
            .map_err(|e| StorageError::io("start the indexer thread", &self.log_dir, e))?;
        *self.indexer.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).queue = Some(queue);
        Ok(())
    }

    /// Why the index stopped following the log, if it did.
    fn index_failure(&self) -> Option<String> {
        self.progress.lock().failed.clone()
    }

    /// Waits until the index covers the first `size` events (at most the time the indexer takes
    /// for the groups queued before them), so that whatever an acknowledged append wrote can be
    /// found by stream, id or hash as soon as the acknowledgement is given.
    fn wait_indexed(&self, size: u64) -> Result<(), StorageError> {
        let mut state = self.progress.lock();
        loop {
            if state.indexed >= size {
                return Ok(());
            }
            if let Some(reason) = &state.failed {
                return Err(StorageError::Index(reason.clone()));
            }
            state = self
                .progress
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until the index covers every event appended so far.
    fn index_caught_up(&self) -> Result<u64, StorageError> {
        let size = self.head().size;
        self.wait_indexed(size)?;
        Ok(size)
    }

    /// Stops the indexer once it has written every queued job.
    fn stop_indexer(&self) {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .queue
            .take();
        if let Some(thread) = self
            .indexer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = thread.join();
        }
    }

    fn segments_snapshot(&self) -> BTreeMap<u64, Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The last version of `stream` that the index holds below seq `below`: the stream's
    /// head, read from its last entries.
    fn indexed_version(&self, stream: &str, below: u64) -> Result<u64, StorageError> {
        let first = stream_key(stream, 0);
        let last = stream_key(stream, u64::MAX);
        let mut version = 0;
        self.index
            .tree
            .visit(&first, &last, true, &mut |key, value| {
                if Location::decode(value)?.seq < below {
                    version = be_u64(&key[key.len() - 8..]);
                    return Ok(ControlFlow::Break(()));
                }
                Ok(ControlFlow::Continue(()))
            })?;
        Ok(version)
    }

    /// The segment and offset of the frame that holds `seq`.
    fn location(
        &self,
        segments: &BTreeMap<u64, Arc<Segment>>,
        seq: u64,
    ) -> Result<Option<(Arc<Segment>, u64)>, StorageError> {
        let Some(entry) = self
            .index
            .tree
            .first_in(&frame_key(0), &frame_key(seq), true)?
        else {
            return Ok(None);
        };
        let value = entry.1;
        if value.len() != 16 {
            return Err(StorageError::Index("frame entry of the wrong size".into()));
        }
        let segment = be_u64(&value[0..8]);
        let offset = be_u64(&value[8..16]);
        let seg = segments.get(&segment).cloned().ok_or_else(|| {
            StorageError::Index(format!(
                "frame at seq {seq} names missing segment {segment}"
            ))
        })?;
        Ok(Some((seg, offset)))
    }

    fn read_at(&self, loc: &Location) -> Result<RawEvent, StorageError> {
        let segments = self.segments_snapshot();
        let seg = segments.get(&loc.segment).ok_or_else(|| {
            StorageError::Index(format!(
                "seq {} names missing segment {}",
                loc.seq, loc.segment
            ))
        })?;
        let mut bytes = vec![0u8; loc.len as usize];
        seg.file
            .read_exact_at(&mut bytes, loc.offset)
            .map_err(|e| StorageError::io("read event", &seg.path, e))?;
        Ok(RawEvent {
            seq: loc.seq,
            bytes: bytes.into(),
        })
    }

    fn read_located(&self, value: Option<sled::IVec>) -> Result<Option<RawEvent>, StorageError> {
        match value {
            None => Ok(None),
            Some(v) => {
                let loc = Location::decode(&v)?;
                if loc.seq >= self.head().size {
                    return Ok(None);
                }
                self.read_at(&loc).map(Some)
            }
        }
    }

    /// Starts a new segment at `first_seq`: header written and synced, directory entry synced,
    /// before any frame goes into it.
    fn roll_segment(&self, writer: &mut Writer, first_seq: u64) -> Result<(), StorageError> {
        let path = segment_path(&self.log_dir, first_seq);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| StorageError::io("create segment", &path, e))?;
        file.write_all_at(&frame::encode_segment_header(first_seq), 0)
            .and_then(|()| file.sync_all())
            .map_err(|e| StorageError::io("write segment header", &path, e))?;
        sync_dir(&self.log_dir)?;
        self.segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                first_seq,
                Arc::new(Segment {
                    first_seq,
                    path,
                    file,
                }),
            );
        writer.segment = first_seq;
        writer.end = SEGMENT_HEADER_LEN;
        writer.frames_in_segment = 0;
        Ok(())
    }

    fn write_frame(&self, commits: &[Commit], tree: &TreeGrowth) -> Result<(), StorageError> {
        // A panic while the writer was held left the log's end in an unknown state, as a
        // failed write does: nothing more is written (fail closed, not on).
        let mut writer = match self.writer.lock() {
            Ok(writer) => writer,
            Err(poisoned) => {
                let mut writer = poisoned.into_inner();
                let reason = writer.failed.get_or_insert_with(|| {
                    "a write panicked while it held the log's writer; what it left is unknown, so nothing more is written".into()
                });
                return Err(StorageError::Failed(reason.clone()));
            }
        };
        if let Some(reason) = &writer.failed {
            return Err(StorageError::Failed(reason.clone()));
        }
        // Nothing is written past an index that stopped following the log.
        if let Some(reason) = self.index_failure() {
            return Err(StorageError::Index(reason));
        }
        // A new frame would overwrite a torn write that is not yet recorded and kept aside.
        if let Some(cut) = &*self.pending_cut.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(StorageError::Failed(format!(
                "a torn write of {} bytes at the end of the log awaits its cut",
                cut.bytes
            )));
        }
        let result = self.write_frame_locked(&mut writer, commits, tree);
        if let Err(e) = &result {
            writer.failed = Some(e.to_string());
        }
        result
    }

    fn write_frame_locked(
        &self,
        writer: &mut Writer,
        commits: &[Commit],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        let head = self.head();
        let Some(first_seq) = commits
            .first()
            .and_then(|c| c.events.first())
            .map(|e| e.seq)
        else {
            return Ok(());
        };
        // Check the links once more before they become permanent: seqs, chain and versions.
        let mut expected = head.size;
        let mut prev = head.last_hash;
        let mut versions: BTreeMap<&str, u64> = BTreeMap::new();
        for commit in commits {
            let mut version = match versions.get(commit.stream.as_str()) {
                Some(v) => *v,
                None => match writer.versions.get(&commit.stream) {
                    Some(v) => *v,
                    None => self.indexed_version(&commit.stream, head.size)?,
                },
            };
            let broken = |seq: u64, detail: String| StorageError::Corrupt {
                seq: Some(seq),
                detail,
            };
            if version != commit.base_version {
                return Err(broken(
                    expected,
                    format!(
                        "append to {} at version {} when it is at {version}",
                        commit.stream, commit.base_version
                    ),
                ));
            }
            for event in &commit.events {
                if event.seq != expected || event.prev_hash != prev {
                    return Err(broken(
                        event.seq,
                        format!(
                            "append of seq {} does not continue the chain at {expected}",
                            event.seq
                        ),
                    ));
                }
                if event.stream_version != version + 1 {
                    return Err(broken(
                        event.seq,
                        format!(
                            "stream version {} does not follow {version}",
                            event.stream_version
                        ),
                    ));
                }
                version = event.stream_version;
                prev = event.hash;
                expected += 1;
            }
            versions.insert(&commit.stream, version);
        }
        let frame_commits: Vec<FrameCommit> = commits
            .iter()
            .map(|c| FrameCommit {
                event_count: c.events.len() as u32,
                idempotency: c
                    .idempotency
                    .as_ref()
                    .map(|r| (r.key.clone(), r.fingerprint)),
            })
            .collect();
        let events: Vec<&[u8]> = commits
            .iter()
            .flat_map(|c| c.events.iter().map(|e| &*e.bytes))
            .collect();
        let (body, offsets) = frame::encode_frame_body(first_seq, &frame_commits, &events)
            .map_err(|detail| StorageError::Corrupt {
                seq: Some(first_seq),
                detail,
            })?;
        let header = frame::encode_frame_header(&body).map_err(|detail| StorageError::Corrupt {
            seq: Some(first_seq),
            detail,
        })?;
        let frame_len = FRAME_HEADER_LEN + body.len() as u64;
        if self.segments_snapshot().is_empty() {
            self.roll_segment(writer, 0)?;
        } else if writer.frames_in_segment > 0 && writer.end + frame_len > self.segment_bytes_max {
            self.roll_segment(writer, first_seq)?;
        }
        let segments = self.segments_snapshot();
        let seg = segments
            .get(&writer.segment)
            .ok_or_else(|| StorageError::Failed("the active segment is not open".into()))?;
        let mut bytes = Vec::with_capacity(frame_len as usize);
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&body);
        seg.file
            .write_all_at(&bytes, writer.end)
            .map_err(|e| StorageError::io("write frame", &seg.path, e))?;
        seg.file
            .sync_data()
            .map_err(|e| StorageError::io("sync segment", &seg.path, e))?;
        let frame_offset = writer.end;
        writer.end += frame_len;
        writer.frames_in_segment += 1;
        let last_hash = commits
            .iter()
            .flat_map(|c| c.events.last())
            .last()
            .map(|e| e.hash)
            .unwrap_or(head.last_hash);
        // Before anyone is told the append succeeded: the head record covers it, so a log found
        // shorter at the next open is known to have lost it.
        if let Some(head_file) = &mut *self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            let record = HeadRecord {
                next_seq: expected,
                last_hash,
                ..head_file.record()
            };
            head_file.write(record)?;
        }
        for (stream, version) in versions {
            match writer.versions.get_mut(stream) {
                Some(v) => *v = version,
                None => {
                    writer.versions.insert(stream.to_owned(), version);
                }
            }
        }

        // Durable. Now index it; a crash from here on is repaired by the next open's catch-up.
        let mut batch = IndexBatch::default();
        batch.frame(first_seq, seg.first_seq, frame_offset);
        let mut i = 0usize;
        for commit in commits {
            for event in &commit.events {
                batch.event(&IndexedEvent {
                    loc: Location {
                        seq: event.seq,
                        segment: seg.first_seq,
                        offset: frame_offset + FRAME_HEADER_LEN + offsets[i] as u64,
                        len: event.bytes.len() as u32,
                    },
                    stream: &commit.stream,
                    stream_version: event.stream_version,
                    event_id: event.event_id,
                    hash: event.hash,
                });
                i += 1;
            }
            if let Some(record) = &commit.idempotency {
                batch.key(record);
            }
        }
        let tail = Tail {
            next_seq: expected,
            last_hash,
            segment: seg.first_seq,
            offset: writer.end,
        };
        batch.merkle(&tree.nodes, tree.size);
        // The frame is durable: the append is, and can be acknowledged. The index follows on
        // the indexer thread; a read that needs it waits until it covers this head.
        *self.head.write().unwrap_or_else(|p| p.into_inner()) = ChainHead {
            size: expected,
            last_hash,
        };
        let queue = writer
            .queue
            .as_ref()
            .ok_or_else(|| StorageError::Failed("the indexer has stopped".into()))?;
        queue
            .send(IndexJob { batch, tail })
            .map_err(|_| match self.index_failure() {
                Some(reason) => StorageError::Index(reason),
                None => StorageError::Failed("the indexer has stopped".into()),
            })
    }
}

/// The idempotency records a checked frame carries.
fn idempotency_records(body: &FrameBody, events: &[EventRef<'_>]) -> Vec<IdempotencyRecord> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for commit in &body.commits {
        let n = commit.event_count as usize;
        if let (Some((key, fingerprint)), Some(last)) =
            (&commit.idempotency, events.get(at + n.saturating_sub(1)))
            && n > 0
        {
            out.push(IdempotencyRecord {
                key: key.clone(),
                fingerprint: *fingerprint,
                stream: last.stream.to_owned(),
                first_seq: body.first_seq + at as u64,
                event_count: commit.event_count,
                stream_version: last.stream_version,
            });
        }
        at += n;
    }
    out
}

/// The first read of a [`FrameCursor`]: a frame of a full group, for a point read...
const READ_AHEAD_MIN: usize = 16 * 1024;
/// ...and the largest, doubling from the first, for a scan of the log: large enough that the
/// system calls do not count, small enough that what was read is still in the processor's
/// cache when it is checked (1 MiB reads made verification slower).
const READ_AHEAD_MAX: usize = 256 * 1024;

/// Reads frames forward through the segments into one buffer, refilled by large reads: a scan
/// of the log costs one `pread` a megabyte rather than two a frame, no `stat`, and no copy of
/// an event unless the caller makes one.
struct FrameCursor {
    segments: BTreeMap<u64, Arc<Segment>>,
    seg: Arc<Segment>,
    /// Bytes of `seg` from byte `buf_at` on; `buf[..filled]` hold them.
    buf: Vec<u8>,
    buf_at: u64,
    filled: usize,
    /// Where the next frame starts in `seg`.
    offset: u64,
    read_ahead: usize,
    /// No frame is read that starts at or after this seq: the head when the read began. A
    /// frame past it may still be being written.
    end: u64,
    /// The last frame read: its body's decoded layout (vectors reused) and where the body
    /// starts in `buf`.
    body: FrameBody,
    body_at: usize,
    /// The seq that follows the last frame read, to say where damage lies.
    next_seq: Option<u64>,
}

thread_local! {
    /// The read buffer of the last [`FrameCursor`] this thread dropped: a point read or a run of
    /// chunked reads allocates (and zeroes) it once, not once per call.
    static READ_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for FrameCursor {
    fn drop(&mut self) {
        // A buffer grown for an unusually large frame is let go rather than kept.
        if self.buf.len() <= READ_AHEAD_MAX {
            let buf = std::mem::take(&mut self.buf);
            READ_BUFFER.with(|b| b.set(buf));
        }
    }
}

impl FrameCursor {
    fn new(
        segments: BTreeMap<u64, Arc<Segment>>,
        seg: Arc<Segment>,
        offset: u64,
        end: u64,
        read_ahead: usize,
    ) -> FrameCursor {
        FrameCursor {
            segments,
            seg,
            buf: READ_BUFFER.with(|b| b.take()),
            buf_at: offset,
            filled: 0,
            offset,
            read_ahead: read_ahead.clamp(READ_AHEAD_MIN, READ_AHEAD_MAX),
            end,
            body: FrameBody {
                first_seq: 0,
                commits: Vec::new(),
                events: Vec::new(),
            },
            body_at: 0,
            next_seq: None,
        }
    }

    /// Makes `need` bytes of the segment from byte `at` on available in the buffer, as many as
    /// the file holds; returns how many are.
    fn fill(&mut self, at: u64, need: usize) -> Result<usize, StorageError> {
        let held_end = self.buf_at + self.filled as u64;
        if at >= self.buf_at && at + need as u64 <= held_end {
            return Ok(need);
        }
        // Keep what is held from `at` on and read after it.
        if at >= self.buf_at && at <= held_end {
            let from = (at - self.buf_at) as usize;
            self.buf.copy_within(from..self.filled, 0);
            self.filled -= from;
        } else {
            self.filled = 0;
        }
        self.buf_at = at;
        let want = need.max(self.read_ahead);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.filled < need {
            match self
                .seg
                .file
                .read_at(&mut self.buf[self.filled..want], at + self.filled as u64)
            {
                Ok(0) => break,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io("read segment", &self.seg.path, e)),
            }
        }
        self.read_ahead = (self.read_ahead * 2).min(READ_AHEAD_MAX);
        Ok(self.filled.min(need))
    }

    /// Reads the next frame, checked (header and body checksums, layout) into `body` and
    /// `body_at`. False at the end of the log, or when the next frame starts at `end`.
    fn next_frame(&mut self) -> Result<bool, StorageError> {
        loop {
            if self.next_seq.is_some_and(|next| next >= self.end) {
                return Ok(false);
            }
            let header_len = FRAME_HEADER_LEN as usize;
            let held = self.fill(self.offset, header_len)?;
            if held == 0 {
                // The end of this segment; the log goes on in the next, if there is one.
                let Some(next) = self
                    .segments
                    .range(self.seg.first_seq + 1..)
                    .next()
                    .map(|(_, s)| Arc::clone(s))
                else {
                    return Ok(false);
                };
                self.seg = next;
                self.offset = SEGMENT_HEADER_LEN;
                self.buf_at = SEGMENT_HEADER_LEN;
                self.filled = 0;
                continue;
            }
            let at = (self.offset - self.buf_at) as usize;
            if held < header_len {
                let defect = if self.buf[at..at + held].iter().all(|b| *b == 0) {
                    FrameDefect::Zeroed
                } else {
                    FrameDefect::BadHeader
                };
                return Err(self.damaged(&defect));
            }
            let mut header = [0u8; FRAME_HEADER_LEN as usize];
            header.copy_from_slice(&self.buf[at..at + header_len]);
            let header = match frame::decode_frame_header(&header) {
                Ok(header) => header,
                Err(defect) => return Err(self.damaged(&defect)),
            };
            let body_len = header.body_len as usize;
            let body_offset = self.offset + FRAME_HEADER_LEN;
            if self.fill(body_offset, body_len)? < body_len {
                return Err(self.damaged(&FrameDefect::BadBody(None)));
            }
            let start = (body_offset - self.buf_at) as usize;
            let body = &self.buf[start..start + body_len];
            if crc32fast::hash(body) != header.body_crc {
                let defect = FrameDefect::BadBody(first_damaged_event(body));
                return Err(self.damaged(&defect));
            }
            if let Err(detail) = frame::decode_frame_body_into(body, &mut self.body) {
                return Err(self.damaged(&FrameDefect::Malformed(detail)));
            }
            self.body_at = start;
            self.offset = body_offset + body_len as u64;
            self.next_seq = Some(self.body.first_seq + self.body.events.len() as u64);
            return Ok(true);
        }
    }

    /// The stored bytes of event `i` of the last frame read.
    fn event(&self, i: usize) -> Option<&[u8]> {
        let (at, n) = *self.body.events.get(i)?;
        self.buf.get(self.body_at + at..self.body_at + at + n)
    }

    /// The error for a damaged frame at the cursor: where, and the first seq it affects.
    fn damaged(&self, defect: &FrameDefect) -> StorageError {
        let located = match defect {
            FrameDefect::BadBody(Some(seq)) => Some(*seq),
            _ => None,
        };
        StorageError::Corrupt {
            seq: located.or(self.next_seq),
            detail: format!(
                "{} at byte {} of {}",
                defect_text(defect),
                self.offset,
                self.seg.path.display()
            ),
        }
    }
}

struct ReadFrame {
    header_body_len: u32,
    bytes: Vec<u8>,
    body: FrameBody,
}

fn defect_text(defect: &FrameDefect) -> String {
    match defect {
        FrameDefect::Zeroed => "zero bytes where a frame header should be".into(),
        FrameDefect::BadHeader => "frame header checksum mismatch".into(),
        FrameDefect::BadBody(Some(seq)) => {
            format!("frame body checksum mismatch; seq {seq} fails its own hash")
        }
        FrameDefect::BadBody(None) => "frame body checksum mismatch".into(),
        FrameDefect::Malformed(detail) => format!("malformed frame: {detail}"),
    }
}

/// In a body whose checksum failed but whose structure decodes, the seq of the first event whose
/// stored hash is not the hash of its bytes: where the damage is.
fn first_damaged_event(body: &[u8]) -> Option<u64> {
    let decoded = frame::decode_frame_body(body).ok()?;
    decoded
        .events
        .iter()
        .position(|(at, n)| decode_stored(&body[*at..at + n]).is_err())
        .map(|i| decoded.first_seq + i as u64)
}

/// Reads the frame at `offset` of a segment `len` bytes long. The outer error is I/O; the inner
/// one says what is wrong with the bytes.
fn read_frame(
    seg: &Segment,
    offset: u64,
    len: u64,
) -> Result<Result<ReadFrame, FrameDefect>, StorageError> {
    if len - offset < FRAME_HEADER_LEN {
        let mut rest = vec![0u8; (len - offset) as usize];
        seg.file
            .read_exact_at(&mut rest, offset)
            .map_err(|e| StorageError::io("read frame", &seg.path, e))?;
        return Ok(Err(if rest.iter().all(|b| *b == 0) {
            FrameDefect::Zeroed
        } else {
            FrameDefect::BadHeader
        }));
    }
    let mut header = [0u8; FRAME_HEADER_LEN as usize];
    seg.file
        .read_exact_at(&mut header, offset)
        .map_err(|e| StorageError::io("read frame header", &seg.path, e))?;
    let header = match frame::decode_frame_header(&header) {
        Ok(h) => h,
        Err(defect) => return Ok(Err(defect)),
    };
    if u64::from(header.body_len) > len - offset - FRAME_HEADER_LEN {
        return Ok(Err(FrameDefect::BadBody(None)));
    }
    let mut bytes = vec![0u8; header.body_len as usize];
    seg.file
        .read_exact_at(&mut bytes, offset + FRAME_HEADER_LEN)
        .map_err(|e| StorageError::io("read frame body", &seg.path, e))?;
    if crc32fast::hash(&bytes) != header.body_crc {
        return Ok(Err(FrameDefect::BadBody(first_damaged_event(&bytes))));
    }
    match frame::decode_frame_body(&bytes) {
        Ok(body) => Ok(Ok(ReadFrame {
            header_body_len: header.body_len,
            bytes,
            body,
        })),
        Err(detail) => Ok(Err(FrameDefect::Malformed(detail))),
    }
}

impl Storage for EmbeddedStorage {
    fn head(&self) -> ChainHead {
        *self.head.read().unwrap_or_else(|p| p.into_inner())
    }

    fn append(&self, commits: &[Commit], tree: &TreeGrowth) -> Result<(), StorageError> {
        self.write_frame(commits, tree)
    }

    fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, StorageError> {
        let mut out = Vec::new();
        self.visit_range(from_seq, max, &mut |seq, bytes| {
            out.push(RawEvent {
                seq,
                bytes: bytes.into(),
            });
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    fn visit_range(
        &self,
        from_seq: u64,
        max: usize,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<usize, StorageError> {
        let size = self.index_caught_up()?;
        if from_seq >= size || max == 0 {
            return Ok(0);
        }
        let segments = self.segments_snapshot();
        let Some((seg, offset)) = self.location(&segments, from_seq)? else {
            return Err(StorageError::Index(format!(
                "no frame holds seq {from_seq}"
            )));
        };
        // Read ahead about what `max` events of a few hundred bytes take, within bounds.
        let read_ahead = max.saturating_mul(512);
        let mut cursor = FrameCursor::new(segments, seg, offset, size, read_ahead);
        let mut visited = 0usize;
        let damaged_at = |e: StorageError| match e {
            StorageError::Corrupt { seq, detail } => StorageError::Corrupt {
                seq: seq.or(Some(from_seq)),
                detail,
            },
            other => other,
        };
        // The cursor reads no frame at or past the head (`size`): one there may be a frame the
        // writer is writing right now, whose bytes are not all there yet.
        while visited < max && cursor.next_frame().map_err(damaged_at)? {
            let first = cursor.body.first_seq;
            for i in 0..cursor.body.events.len() {
                let seq = first + i as u64;
                if seq < from_seq {
                    continue;
                }
                if seq >= size || visited >= max {
                    return Ok(visited);
                }
                let Some(bytes) = cursor.event(i) else {
                    return Err(StorageError::Corrupt {
                        seq: Some(seq),
                        detail: "an event lies outside its frame".into(),
                    });
                };
                visited += 1;
                if visit(seq, bytes).is_break() {
                    return Ok(visited);
                }
            }
        }
        Ok(visited)
    }

    fn stream_version(&self, stream: &str) -> Result<u64, StorageError> {
        // Not counting events the index already holds but the head of the log does not yet
        // cover (a group being written).
        let size = self.index_caught_up()?;
        self.indexed_version(stream, size)
    }

    fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RawEvent>, StorageError> {
        let size = self.index_caught_up()?;
        let start = stream_key(stream, from_version.max(1));
        let end = stream_key(stream, u64::MAX);
        let mut out = Vec::new();
        self.index
            .tree
            .visit(&start, &end, false, &mut |_, value| {
                if out.len() >= max {
                    return Ok(ControlFlow::Break(()));
                }
                let loc = Location::decode(value)?;
                if loc.seq >= size {
                    return Ok(ControlFlow::Break(()));
                }
                out.push(self.read_at(&loc)?);
                Ok(ControlFlow::Continue(()))
            })?;
        Ok(out)
    }

    fn find_event_id(&self, id: Uuid) -> Result<Option<RawEvent>, StorageError> {
        self.index_caught_up()?;
        let value = self.index.get(prefix::EVENT_ID, id.as_bytes())?;
        self.read_located(value)
    }

    fn find_hash(&self, hash: &Digest) -> Result<Option<RawEvent>, StorageError> {
        self.index_caught_up()?;
        let value = self.index.get(prefix::HASH, &hash.0)?;
        self.read_located(value)
    }

    fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        self.index_caught_up()?;
        match self.index.get(prefix::KEY, key.as_bytes())? {
            None => Ok(None),
            Some(v) => postcard::from_bytes(&v)
                .map(Some)
                .map_err(|e| StorageError::Index(format!("idempotency record: {e}"))),
        }
    }

    fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, StorageError> {
        let size = self.index_caught_up()?;
        let mut out = Vec::new();
        self.index.tree.visit(
            &[prefix::KEY],
            &prefix_end(prefix::KEY),
            false,
            &mut |_, value| {
                let record: IdempotencyRecord = postcard::from_bytes(value)
                    .map_err(|e| StorageError::Index(format!("idempotency record: {e}")))?;
                if record.first_seq < size {
                    out.push(record);
                }
                Ok(ControlFlow::Continue(()))
            },
        )?;
        out.sort_by_key(|r| r.first_seq);
        Ok(out)
    }

    fn problems(&self) -> Vec<StorageProblem> {
        self.problems.clone()
    }

    fn notes(&self) -> Vec<String> {
        self.recoveries.clone()
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn failure(&self) -> Option<String> {
        if self.read_only {
            return None;
        }
        self.index_failure().or_else(|| match self.writer.lock() {
            Ok(writer) => writer.failed.clone(),
            Err(poisoned) => Some(poisoned.into_inner().failed.clone().unwrap_or_else(|| {
                "a write panicked while it held the log's writer; nothing more is written".into()
            })),
        })
    }

    fn pending_cut(&self) -> Option<PendingCut> {
        self.pending_cut
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn cut_torn_tail(&self, statement: &CheckpointEntry) -> Result<String, StorageError> {
        self.cut_pending(statement)
    }

    fn accept_loss(&self, statements: &[CheckpointEntry]) -> Result<Vec<String>, StorageError> {
        self.accept_pending_loss(statements)
    }

    fn claimed_size(&self) -> u64 {
        self.claimed.max(self.head().size)
    }

    fn checkpoint_index(&self) -> Result<(), StorageError> {
        self.index_caught_up()?;
        self.index.flush()
    }

    fn merkle_size(&self) -> Result<u64, StorageError> {
        let size = self.index_caught_up()?;
        let stored = self
            .index
            .tree
            .get(META_MERKLE_SIZE)?
            .map(|v| be_u64(&v))
            .unwrap_or(0);
        Ok(stored.min(size))
    }

    fn put_merkle_nodes(&self, nodes: &[PerfectNode], size: u64) -> Result<(), StorageError> {
        // After the queued jobs, which may carry Merkle nodes of their own.
        self.index_caught_up()?;
        let mut batch = IndexBatch::default();
        batch.merkle(nodes, size);
        self.index.tree.apply(batch.entries, Vec::new())
    }

    fn clear_merkle_nodes(&self) -> Result<(), StorageError> {
        self.index_caught_up()?;
        *self.merkle_cache.lock().unwrap_or_else(|p| p.into_inner()) = MerkleCache::default();
        let mut removes = Vec::new();
        self.index.tree.visit(
            &[prefix::MERKLE],
            &prefix_end(prefix::MERKLE),
            false,
            &mut |key, _| {
                removes.push(key.clone());
                Ok(ControlFlow::Continue(()))
            },
        )?;
        self.index.tree.apply(
            vec![(META_MERKLE_SIZE.into(), (&0u64.to_be_bytes()[..]).into())],
            removes,
        )
    }

    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        self.index_caught_up()?;
        let Some(leaf) = MerkleEntries::completing_leaf(level, index) else {
            return Ok(None);
        };
        let Some(above) = leaf.checked_add(1) else {
            return Ok(None);
        };
        {
            let cache = self.merkle_cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(value) = cache.covering(leaf) {
                return MerkleEntries::find(value, level, index);
            }
        }
        let entry = self
            .index
            .tree
            .first_in(&merkle_key(above), &merkle_key(u64::MAX), false)?;
        match entry {
            None => Ok(None),
            Some((key, value)) => {
                let found = MerkleEntries::find(&value, level, index);
                self.merkle_cache
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .keep(be_u64(&key[1..]), value);
                found
            }
        }
    }

    fn append_checkpoint_entry(&self, entry: &CheckpointEntry) -> Result<(), StorageError> {
        if self.opened_read_only {
            return Err(StorageError::Failed(
                "the ledger was opened read-only".into(),
            ));
        }
        // While the backend refuses to write, only a statement of what recovery does may be
        // recorded: the evidence of a problem is never buried under new checkpoints.
        if self.read_only && !matches!(entry, CheckpointEntry::Recovery(_)) {
            return Err(StorageError::Failed(
                "the ledger refuses writes until its problems are resolved".into(),
            ));
        }
        self.append_checkpoint_line(entry)
    }

    fn checkpoint_entries(&self) -> Result<Vec<CheckpointEntry>, StorageError> {
        Ok(self
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .clone())
    }
}

impl EmbeddedStorage {
    /// Appends one entry to the checkpoint log: the line synced (and the directory, when the
    /// file is new) before it counts, then the head record's count of the log's bytes.
    fn append_checkpoint_line(&self, entry: &CheckpointEntry) -> Result<(), StorageError> {
        let mut log = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        let mut line = serde_json::to_vec(entry)
            .map_err(|e| StorageError::Index(format!("checkpoint entry: {e}")))?;
        line.push(b'\n');
        let created = !log.path.exists();
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log.path)
            .map_err(|e| StorageError::io("open", &log.path, e))?;
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|e| StorageError::io("write checkpoint", &log.path, e))?;
        if created && let Some(dir) = log.path.parent() {
            sync_dir(dir)?;
        }
        log.entries.push(entry.clone());
        log.bytes += line.len() as u64;
        if let Some(head_file) = &mut *self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            let record = HeadRecord {
                checkpoint_log_bytes: log.bytes,
                ..head_file.record()
            };
            head_file.write(record)?;
            head_file.sync()?;
        }
        Ok(())
    }
}

impl Drop for EmbeddedStorage {
    fn drop(&mut self) {
        self.stop_indexer();
        // Best effort: a missed flush only means more catch-up on the next open.
        let _ = self.index.flush();
        // The head record as the log closes: synced, so that even a power loss afterwards
        // leaves it covering every acknowledged event.
        if let Some(head_file) = &*self.head_file.lock().unwrap_or_else(|p| p.into_inner())
            && let Err(e) = head_file.sync()
        {
            tracing::warn!(error = %e, "the head record could not be synced on close");
        }
    }
}

/// Whether sled failed to open because another handle still holds its file lock. sled wraps
/// the operating system's `WouldBlock` in an error of its own wording.
fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ledger_proof::{Blake3, Frontier, MemoryTree, NodeSource};

    use super::*;
    use crate::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, NewEvent};

    #[test]
    fn a_panic_while_the_writer_is_held_stops_every_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let storage = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = storage.writer.lock().unwrap();
            panic!("a bug while writing");
        }));
        assert!(panicked.is_err());
        let refused = storage.append(&[], &TreeGrowth::default());
        assert!(
            matches!(&refused, Err(StorageError::Failed(reason)) if reason.contains("panicked")),
            "{refused:?}"
        );
        assert!(storage.failure().is_some_and(|r| r.contains("panicked")));
    }

    /// sled lets go of its file lock from a thread of its own after the last handle drops.
    fn open_sled(path: &Path) -> sled::Db {
        for _ in 0..250 {
            match sled::open(path) {
                Ok(db) => return db,
                Err(sled::Error::Io(e)) if is_lock_held(&e) => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => panic!("sled: {e}"),
            }
        }
        panic!("sled's lock on {} was never released", path.display());
    }

    /// An index in the first layout — a sled tree per kind of entry, `index-format` 1 in
    /// `meta` — is dropped and rebuilt from the log on open, and the ledger reads and verifies
    /// as before.
    #[test]
    fn an_index_of_the_first_layout_is_rebuilt_from_the_log() {
        let dir = tempfile::tempdir().expect("dir");
        let ledger = Ledger::open(dir.path(), LedgerOptions::default()).expect("open");
        let mut receipts = Vec::new();
        for i in 0..40u32 {
            let receipt = ledger
                .append(AppendRequest {
                    stream: format!("task-{}", i % 4),
                    expected: ExpectedVersion::Any,
                    actor: "tester".into(),
                    events: vec![NewEvent {
                        kind: "noted".into(),
                        payload: i.to_le_bytes().to_vec(),
                        causation: vec![],
                    }],
                    idempotency: None,
                })
                .expect("append");
            receipts.push(receipt);
        }
        ledger.checkpoint().expect("checkpoint");
        let root = ledger.root_at(40).expect("root");
        ledger.shutdown();
        drop(ledger);

        // Make the index look like one the first layout wrote.
        let db = open_sled(&dir.path().join("index"));
        db.drop_tree(INDEX_TREE).expect("drop");
        for name in LEGACY_TREES {
            db.open_tree(name)
                .expect("tree")
                .insert(b"left over", b"by format 1")
                .expect("insert");
        }
        db.open_tree("meta")
            .expect("meta")
            .insert(b"index-format", b"1")
            .expect("insert");
        db.flush().expect("flush");
        drop(db);

        let ledger = Ledger::open(dir.path(), LedgerOptions::default()).expect("reopen");
        assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
        assert_eq!(ledger.head().size, 40);
        assert_eq!(ledger.root_at(40).expect("root"), root);
        for receipt in &receipts {
            let event = &receipt.events[0];
            let found = ledger
                .find_event_id(event.event_id)
                .expect("read")
                .expect("found by id");
            assert_eq!(found.hash, event.hash);
            assert!(ledger.find_hash(&event.hash).expect("read").is_some());
        }
        assert_eq!(ledger.stream_version("task-1").expect("version"), 10);
        assert_eq!(
            ledger.read_stream("task-2", 1, 100).expect("read").len(),
            10
        );
        assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
        ledger.shutdown();
        drop(ledger);

        let db = open_sled(&dir.path().join("index"));
        for name in LEGACY_TREES {
            assert!(
                !db.tree_names()
                    .iter()
                    .any(|t| t.as_ref() == name.as_bytes()),
                "tree {name} of the first layout is still there"
            );
        }
    }

    /// Grows a tree in groups of the given sizes, packs each group's nodes as an append does,
    /// and finds every perfect subtree of the final tree the way `merkle_node` does.
    #[test]
    fn every_merkle_node_is_found_in_its_entry() {
        let groups = [1u64, 1, 2, 23, 32, 1, 700, 5, 255, 256, 257, 3];
        let mut frontier = Frontier::new();
        let mut reference = MemoryTree::new(Blake3);
        let mut entries: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut leaf = 0u64;
        for n in groups {
            let mut nodes = Vec::new();
            for _ in 0..n {
                let data = leaf.to_le_bytes();
                frontier
                    .push_into(&Blake3, &data, &mut nodes)
                    .expect("grows");
                reference.push(&data).expect("grows");
                leaf += 1;
            }
            for (key, value) in MerkleEntries::pack(&nodes, frontier.size()) {
                assert!(
                    entries.insert(key, value).is_none(),
                    "entry {key} written twice"
                );
                assert!(key <= frontier.size());
            }
        }
        let mut cache = MerkleCache::default();
        for (key, value) in &entries {
            cache.keep(*key, sled::IVec::from(&value[..]));
        }
        assert_eq!(
            cache.entries.len(),
            entries.len(),
            "every entry starts with a leaf"
        );
        let size = frontier.size();
        for level in 0..12u8 {
            for index in 0..(size >> level) {
                let leaf = MerkleEntries::completing_leaf(level, index).expect("leaf");
                let (_, value) = entries.range(leaf + 1..).next().expect("an entry");
                assert_eq!(
                    cache.covering(leaf).map(|v| &v[..]),
                    Some(&value[..]),
                    "the cache serves leaf {leaf} from the entry sled would"
                );
                let found = MerkleEntries::find(value, level, index).expect("well formed");
                assert_eq!(
                    found,
                    Some(reference.perfect_node(level, index).expect("node")),
                    "node ({level}, {index})"
                );
            }
        }
        assert!(
            entries
                .values()
                .all(|v| v.len() as u64 <= 2 * MERKLE_ENTRY_LEAVES * MERKLE_NODE_LEN as u64),
            "an entry holds the nodes of at most {MERKLE_ENTRY_LEAVES} leaves"
        );
    }
}
