//! The sled index's entries: how each kind of entry is keyed and encoded, the one tree that
//! holds them, and the batch a group commit writes into it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ledger_proof::PerfectNode;
use uuid::Uuid;

use super::index_tree::IndexTree;
use crate::envelope::Digest;
use crate::storage::merkle_entries::MerkleEntries;
pub(super) use crate::storage::merkle_entries::be_u64;
use crate::storage::{IdempotencyRecord, StorageError};

/// Where an event's stored bytes are: `seq | segment first seq | absolute offset | length`,
/// big-endian, 28 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Location {
    pub(super) seq: u64,
    pub(super) segment: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
}

impl Location {
    pub(super) fn encode(&self) -> [u8; 28] {
        let mut out = [0u8; 28];
        out[0..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..16].copy_from_slice(&self.segment.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Location, StorageError> {
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

/// Where a content blob's bytes are: `segment first seq | absolute offset | length`, big-endian,
/// 20 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ContentLocation {
    pub(super) segment: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
}

impl ContentLocation {
    pub(super) fn encode(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out[0..8].copy_from_slice(&self.segment.to_be_bytes());
        out[8..16].copy_from_slice(&self.offset.to_be_bytes());
        out[16..20].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<ContentLocation, StorageError> {
        if bytes.len() != 20 {
            return Err(StorageError::Index(format!(
                "content entry of {} bytes",
                bytes.len()
            )));
        }
        Ok(ContentLocation {
            segment: be_u64(&bytes[0..8]),
            offset: be_u64(&bytes[8..16]),
            len: u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]),
        })
    }
}

/// Where the log ends as far as the index knows: the resume point of the next open.
/// `next_seq | last_hash[32] | segment | next frame offset`, big-endian, 56 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tail {
    pub(super) next_seq: u64,
    pub(super) last_hash: Digest,
    pub(super) segment: u64,
    pub(super) offset: u64,
}

impl Tail {
    pub(super) fn encode(&self) -> [u8; 56] {
        let mut out = [0u8; 56];
        out[0..8].copy_from_slice(&self.next_seq.to_be_bytes());
        out[8..40].copy_from_slice(&self.last_hash.0);
        out[40..48].copy_from_slice(&self.segment.to_be_bytes());
        out[48..56].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Tail> {
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

/// The index's layout version. An index of any other version (or none) is dropped and rebuilt
/// from the log on open.
pub(super) const INDEX_FORMAT_VERSION: &[u8] = b"2";
/// The one sled tree that holds the index.
pub(super) const INDEX_TREE: &str = "index";
/// Trees of the first index layout, one per kind of entry; dropped when the index is rebuilt.
pub(super) const LEGACY_TREES: [&str; 8] = [
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
pub(super) mod prefix {
    /// frame first seq (BE) → segment (BE) ‖ frame offset (BE)
    pub(crate) const FRAME: u8 = b'f';
    /// stream ‖ 0x00 ‖ version (BE) → location; the last version of a stream is its head
    pub(crate) const STREAM: u8 = b's';
    /// event id → location
    pub(crate) const EVENT_ID: u8 = b'i';
    /// event hash → location
    pub(crate) const HASH: u8 = b'h';
    /// idempotency key → postcard(IdempotencyRecord)
    pub(crate) const KEY: u8 = b'k';
    /// tree size (BE) → the perfect subtrees completed by the leaves just below that size,
    /// see [`MerkleEntries`]
    pub(crate) const MERKLE: u8 = b'm';
    /// content hash → [`super::ContentLocation`] of the blob's latest copy in the log
    pub(crate) const CONTENT: u8 = b'c';
}

// The index's own state, under keys of their own that start with `_`.
pub(super) const META_TAIL: &[u8] = b"_tail";
pub(super) const META_MERKLE_SIZE: &[u8] = b"_merkle-size";
pub(super) const META_INDEX_FORMAT: &[u8] = b"_index-format";

/// `prefix ‖ rest`, the key of an index entry.
pub(super) fn key(prefix: u8, rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + rest.len());
    key.push(prefix);
    key.extend_from_slice(rest);
    key
}

/// A key above every key that starts with `prefix` (the index's keys are short).
pub(super) fn prefix_end(prefix: u8) -> [u8; 2] {
    [prefix, 0xff]
}

pub(super) fn frame_key(first_seq: u64) -> [u8; 9] {
    let mut key = [prefix::FRAME; 9];
    key[1..].copy_from_slice(&first_seq.to_be_bytes());
    key
}

pub(super) fn merkle_key(size: u64) -> [u8; 9] {
    let mut key = [prefix::MERKLE; 9];
    key[1..].copy_from_slice(&size.to_be_bytes());
    key
}

/// The sled index: one tree, its entries told apart by a one-byte key prefix ([`prefix`]).
///
/// One tree rather than one per kind of entry because sled seals and writes its log buffers at
/// every `apply_batch`: a group commit's entries, Merkle nodes and resume point go in as one
/// batch, atomically, at the cost of one such seal.
#[derive(Debug)]
pub(super) struct Index {
    /// The sled database, when the index lives on disk.
    pub(super) db: Option<sled::Db>,
    pub(super) tree: Arc<IndexTree>,
    /// Where the database is, when the index lives on disk.
    pub(super) path: Option<PathBuf>,
}

/// Entries written to the index since it opened past which closing it settles it
/// ([`Index::close`]): about the work of 50,000 events, a tenth of a second of replay.
pub(super) const SETTLE_AFTER_ENTRIES: u64 = 200_000;

pub(super) fn index_err(e: sled::Error) -> StorageError {
    StorageError::Index(e.to_string())
}

impl Index {
    /// An index in memory only, empty.
    pub(super) fn memory() -> Index {
        Index {
            db: None,
            tree: Arc::new(IndexTree::memory()),
            path: None,
        }
    }

    pub(super) fn open(path: &Path) -> Result<Index, StorageError> {
        let db = Index::open_db(path)?;
        let tree = db.open_tree(INDEX_TREE).map_err(index_err)?;
        Ok(Index {
            db: Some(db),
            tree: Arc::new(IndexTree::sled(tree)),
            path: Some(path.to_owned()),
        })
    }

    /// Closes the index. When much was written to it since it opened, the database is then
    /// opened and closed once more, and the time that took is returned.
    ///
    /// sled 0.34 writes the snapshot of its page table only when a database opens (its
    /// `snapshot_after_ops` does nothing in this release), so the next open replays from sled's
    /// own log every entry written since the last open: seconds of a restart after a million
    /// events. The open here does that replay when the ledger closes, while the ledger still
    /// holds its directory's lock, so that the next start does not. A crash leaves the replay
    /// to the next open, which is then as slow as before.
    pub(super) fn close(self) -> Result<Option<std::time::Duration>, StorageError> {
        let written = self.tree.written();
        let path = self.path.clone();
        if let Some(db) = &self.db {
            db.flush().map_err(index_err)?;
        }
        drop(self);
        match path {
            Some(path) if written >= SETTLE_AFTER_ENTRIES => {
                let started = std::time::Instant::now();
                drop(Index::open_db(&path)?);
                Ok(Some(started.elapsed()))
            }
            _ => Ok(None),
        }
    }

    fn open_db(path: &Path) -> Result<sled::Db, StorageError> {
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
        Ok(db)
    }

    /// Empties the index, drops the trees of an older layout, and marks it as of this layout.
    pub(super) fn reset(&self) -> Result<(), StorageError> {
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

    pub(super) fn tail(&self) -> Result<Option<Tail>, StorageError> {
        if self.tree.get(META_INDEX_FORMAT)?.as_deref() != Some(INDEX_FORMAT_VERSION) {
            return Ok(None);
        }
        Ok(self.tree.get(META_TAIL)?.and_then(|v| Tail::decode(&v)))
    }

    pub(super) fn get(&self, prefix: u8, rest: &[u8]) -> Result<Option<sled::IVec>, StorageError> {
        self.tree.get(&key(prefix, rest))
    }

    /// Writes sled's buffers out (not durably: the index is derived).
    pub(super) fn flush(&self) -> Result<(), StorageError> {
        match &self.db {
            Some(db) => db.flush().map(|_| ()).map_err(index_err),
            None => Ok(()),
        }
    }
}

pub(super) fn stream_key(stream: &str, version: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream.len() + 10);
    key.push(prefix::STREAM);
    key.extend_from_slice(stream.as_bytes());
    key.push(0);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

/// What the index learns of one event.
pub(super) struct IndexedEvent<'a> {
    pub(super) loc: Location,
    pub(super) stream: &'a str,
    pub(super) stream_version: u64,
    pub(super) event_id: Uuid,
    pub(super) hash: Digest,
}

/// Accumulates the index writes of one or more frames, applied as one atomic batch.
#[derive(Default)]
pub(super) struct IndexBatch {
    /// Keys and values in the order written; a later value for a key replaces an earlier.
    pub(super) entries: Vec<(sled::IVec, sled::IVec)>,
}

impl IndexBatch {
    pub(super) fn insert(&mut self, key: impl Into<sled::IVec>, value: impl Into<sled::IVec>) {
        self.entries.push((key.into(), value.into()));
    }

    pub(super) fn frame(&mut self, first_seq: u64, segment: u64, offset: u64) {
        let mut value = [0u8; 16];
        value[0..8].copy_from_slice(&segment.to_be_bytes());
        value[8..16].copy_from_slice(&offset.to_be_bytes());
        self.insert(&frame_key(first_seq)[..], &value[..]);
    }

    pub(super) fn event(&mut self, e: &IndexedEvent<'_>) {
        let loc = e.loc.encode();
        self.insert(stream_key(e.stream, e.stream_version), &loc[..]);
        self.insert(key(prefix::EVENT_ID, e.event_id.as_bytes()), &loc[..]);
        self.insert(key(prefix::HASH, &e.hash.0), &loc[..]);
    }

    /// A content blob's place; a later copy of the same blob (written because the earlier one
    /// was found damaged) replaces the earlier one's entry.
    pub(super) fn content(&mut self, hash: &Digest, loc: &ContentLocation) {
        self.insert(key(prefix::CONTENT, &hash.0), &loc.encode()[..]);
    }

    pub(super) fn key(&mut self, record: &IdempotencyRecord) {
        let value = postcard::to_stdvec(record).unwrap_or_default();
        self.insert(key(prefix::KEY, record.key.as_bytes()), value);
    }

    pub(super) fn merkle(&mut self, nodes: &[PerfectNode], size: u64) {
        for (key, value) in MerkleEntries::pack(nodes, size) {
            self.insert(&merkle_key(key)[..], value);
        }
        self.insert(META_MERKLE_SIZE, &size.to_be_bytes()[..]);
    }

    /// Adds the writes of a later batch after these.
    pub(super) fn append(&mut self, later: IndexBatch) {
        self.entries.extend(later.entries);
    }

    /// Writes everything gathered, with `tail` as the new resume point, in one batch: an index
    /// that survives a crash never claims more than it holds.
    pub(super) fn apply(mut self, tree: &IndexTree, tail: &Tail) -> Result<(), StorageError> {
        self.insert(META_TAIL, &tail.encode()[..]);
        tree.apply(self.entries, Vec::new())
    }
}

/// Whether sled failed to open because another handle still holds its file lock. sled wraps
/// the operating system's `WouldBlock` in an error of its own wording.
pub(super) fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, NewEvent};
    use sled::IVec;

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
                    content: Vec::new(),
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

    /// The newest of sled's snapshots of its page table in `dir`: the log position it covers.
    fn newest_snapshot(dir: &Path) -> Option<u64> {
        std::fs::read_dir(dir)
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok())
            .max()
    }

    fn write_entries(index: &Index, count: u64) {
        let entries: Vec<(IVec, IVec)> = (0..count)
            .map(|i| {
                let key = key(prefix::HASH, blake3::hash(&i.to_le_bytes()).as_bytes());
                (IVec::from(key), IVec::from(&i.to_be_bytes()[..]))
            })
            .collect();
        index.tree.apply(entries, Vec::new()).expect("apply");
    }

    /// sled snapshots its page table only when a database opens, so whatever was written since
    /// is replayed by the next open. Closing an index that took many entries opens it once more,
    /// which writes a snapshot covering them; closing one that took few does not.
    #[test]
    fn closing_an_index_that_took_many_entries_leaves_a_snapshot_covering_them() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("index");
        let index = Index::open(&path).expect("open");
        write_entries(&index, 1_000);
        assert_eq!(
            index.close().expect("close"),
            None,
            "few entries: no second open"
        );
        let before = newest_snapshot(&path);

        let index = Index::open(&path).expect("open");
        let opened = newest_snapshot(&path);
        write_entries(&index, SETTLE_AFTER_ENTRIES);
        assert_eq!(
            newest_snapshot(&path),
            opened,
            "sled writes no snapshot while open"
        );
        assert!(index.close().expect("close").is_some(), "settled");
        let settled = newest_snapshot(&path);
        assert!(
            settled > opened && opened >= before,
            "a snapshot past the one written at open: {before:?} {opened:?} {settled:?}"
        );
        let index = Index::open(&path).expect("open");
        let hash = key(prefix::HASH, blake3::hash(&7u64.to_le_bytes()).as_bytes());
        assert_eq!(
            index.tree.get(&hash).expect("get").as_deref(),
            Some(&7u64.to_be_bytes()[..]),
            "and everything written is there"
        );
    }
}
