//! The embedded default backend: an append-only log of segment files is the record, and a sled
//! database indexes it.
//!
//! Why not keep the events in sled itself? sled 0.34's `flush()` ends in `sync_file_range`, which
//! does not make data durable, and its crash recovery has open reports of lost and corrupted
//! data. Here the durability of an acknowledged event rests only on `write` + `fdatasync` of a
//! file whose layout this crate defines ([`super::frame`]) and an operator can read without
//! sled; sled holds only what can be rebuilt from the log (stream, id and hash indexes, the
//! position of each frame and of each content blob, idempotency keys, the Merkle tree's
//! nodes), in one tree written once per group commit. A lost or damaged index is rebuilt on
//! open; a lost index can never lose an event or a blob.
//!
//! Content blobs travel in the frame of the group commit whose events cite them, after the
//! frame's body and outside its checksum, so one `fdatasync` makes a write's events and its
//! content durable together, and a blob's bytes can be overwritten (redacted) without breaking
//! any checksum of the chain.
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
use std::fs::File;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use uuid::Uuid;

mod cursor;
mod head_record;
mod index;
mod index_tree;
mod indexer;
mod merkle_nodes;
mod recover;
mod scan;
mod write;

use cursor::{FrameCursor, defect_text, idempotency_records, read_frame};
use head_record::HeadFile;
use index::{
    ContentLocation, Index, IndexBatch, IndexedEvent, Location, META_MERKLE_SIZE, Tail, be_u64,
    frame_key, prefix, prefix_end, stream_key,
};
use indexer::IndexProgress;
use merkle_nodes::MerkleCache;
use write::Writer;

use ledger_proof::PerfectNode;

use super::{
    Blob, ChainHead, CheckpointEntry, Commit, IdempotencyRecord, PendingCut, RawEvent, Storage,
    StorageError, StorageProblem, TreeGrowth,
};
use crate::durable::{create_dir_durable, sync_dir};
use crate::envelope::Digest;

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

const CHECKPOINT_LOG: &str = "checkpoints.jsonl";

#[derive(Debug)]
struct Segment {
    first_seq: u64,
    /// Its format version: only a segment of version 2 may hold content frames.
    version: u32,
    path: PathBuf,
    file: File,
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
    /// A last segment file found on open with no complete header, left out of the log: what
    /// becomes of it is decided once the open knows whether anything was lost.
    headless_segment: Option<PathBuf>,
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
    /// The content blobs of frames written but perhaps not yet indexed, with the number of the
    /// frame that wrote them: reads and the writer's check for a blob held already find them
    /// here until the indexer has covered that frame.
    content_pending: Mutex<HashMap<Digest, (ContentLocation, u64)>>,
    /// Syncs the write path made since the backend opened.
    syncs: AtomicU64,
}

/// The checkpoint log: one JSON entry a line, each line synced before it counts.
///
/// Its entries stay in the file: what is kept in memory is where each one is (16 bytes an
/// entry) and the last one. A ledger written all day gains an entry a second, and the reads
/// that serve checkpoints keep what they need of it themselves (`CheckpointView`), so a read of
/// entries is of those past some point — most often none — or of all of them, rarely.
#[derive(Debug)]
struct CheckpointLog {
    path: PathBuf,
    /// Where each entry's line is in the file: its offset and its length, newline included.
    spans: Vec<(u64, u64)>,
    /// The last entry.
    last: Option<CheckpointEntry>,
    /// Bytes of the file the entries take.
    bytes: u64,
    /// The entries as the open parsed them, until the first read of the whole log takes them
    /// (the ledger's checks on open make it): an open parses the log once, and memory keeps
    /// them no longer than that.
    opened: Option<Vec<CheckpointEntry>>,
}

impl CheckpointLog {
    fn new(path: PathBuf) -> CheckpointLog {
        CheckpointLog {
            path,
            spans: Vec::new(),
            last: None,
            bytes: 0,
            opened: None,
        }
    }
}

fn segment_path(log_dir: &Path, first_seq: u64) -> PathBuf {
    log_dir.join(format!("{first_seq:020}.seg"))
}

impl EmbeddedStorage {
    /// The checkpoint log's entries past its first `from`, read from the file where the log
    /// says they are. The file only grows while the ledger is open, so each entry's line is
    /// where it was written.
    fn read_checkpoint_entries(&self, from: u64) -> Result<Vec<CheckpointEntry>, StorageError> {
        let (path, spans, parsed) = {
            let mut log = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
            // The first read of the whole log takes the entries the open parsed.
            let parsed = if from == 0 { log.opened.take() } else { None };
            let read_from = from + parsed.as_ref().map_or(0, |p| p.len() as u64);
            match usize::try_from(read_from)
                .ok()
                .and_then(|from| log.spans.get(from..))
            {
                Some(spans) if !spans.is_empty() => {
                    (log.path.clone(), spans.to_vec(), parsed.unwrap_or_default())
                }
                // Most often nothing is new: nothing is copied or read.
                _ => return Ok(parsed.unwrap_or_default()),
            }
        };
        let (Some(&(start, _)), Some(&(last, last_len))) = (spans.first(), spans.last()) else {
            return Ok(parsed);
        };
        let too_large = |_| StorageError::Failed("the checkpoint log is too large to read".into());
        let mut bytes = vec![0; usize::try_from(last + last_len - start).map_err(too_large)?];
        File::open(&path)
            .and_then(|file| file.read_exact_at(&mut bytes, start))
            .map_err(|e| StorageError::io("read", &path, e))?;
        let first_number = from + parsed.len() as u64 + 1;
        let mut entries = parsed;
        entries.reserve(spans.len());
        for (&(offset, len), number) in spans.iter().zip(first_number..) {
            let at = usize::try_from(offset - start).map_err(too_large)?;
            let line = bytes
                .get(at..at + usize::try_from(len).map_err(too_large)?)
                .unwrap_or_default();
            let entry = serde_json::from_slice(line.strip_suffix(b"\n").unwrap_or(line)).map_err(
                |e| StorageError::Corrupt {
                    seq: None,
                    detail: format!(
                        "entry {number} of the checkpoint log {} changed since the ledger opened: {e}",
                        path.display()
                    ),
                },
            )?;
            entries.push(entry);
        }
        Ok(entries)
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

    /// Where blob `hash` is: a frame not yet indexed, or the index. The map is asked first: an
    /// entry leaves it only once the index holds it.
    fn content_location(&self, hash: &Digest) -> Result<Option<ContentLocation>, StorageError> {
        let pending = self
            .content_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(hash)
            .map(|(loc, _)| *loc);
        if pending.is_some() {
            return Ok(pending);
        }
        self.index
            .get(prefix::CONTENT, &hash.0)?
            .map(|v| ContentLocation::decode(&v))
            .transpose()
    }

    /// The bytes at `loc`, as many as the segment holds (a segment cut short gives fewer).
    fn read_content(&self, loc: &ContentLocation) -> Result<Vec<u8>, StorageError> {
        let segments = self.segments_snapshot();
        let seg = segments.get(&loc.segment).ok_or_else(|| {
            StorageError::Index(format!("a blob names missing segment {}", loc.segment))
        })?;
        let mut bytes = vec![0u8; loc.len as usize];
        let mut filled = 0usize;
        while filled < bytes.len() {
            match seg
                .file
                .read_at(&mut bytes[filled..], loc.offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io("read content", &seg.path, e)),
            }
        }
        bytes.truncate(filled);
        Ok(bytes)
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
}

impl Storage for EmbeddedStorage {
    fn head(&self) -> ChainHead {
        *self.head.read().unwrap_or_else(|p| p.into_inner())
    }

    fn append(
        &self,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        self.write_frame(commits, content, tree)
    }

    fn read_blob(&self, hash: &Digest) -> Result<Option<Vec<u8>>, StorageError> {
        match self.content_location(hash)? {
            Some(loc) => self.read_content(&loc).map(Some),
            None => Ok(None),
        }
    }

    fn has_blob(&self, hash: &Digest) -> Result<bool, StorageError> {
        Ok(self.content_location(hash)?.is_some())
    }

    fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
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
        self.put_stored_merkle_nodes(nodes, size)
    }

    fn clear_merkle_nodes(&self) -> Result<(), StorageError> {
        self.clear_stored_merkle_nodes()
    }

    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        self.stored_merkle_node(level, index)
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
        self.read_checkpoint_entries(0)
    }

    fn checkpoint_entries_from(&self, from: u64) -> Result<Vec<CheckpointEntry>, StorageError> {
        self.read_checkpoint_entries(from)
    }
}

impl Drop for EmbeddedStorage {
    fn drop(&mut self) {
        self.stop_indexer();
        // Best effort: a missed flush or settling only means more work for the next open. An
        // index in memory (a read-only open, or one refusing writes) has nothing to settle, and
        // one set aside on disk is left exactly as it was.
        let index = std::mem::replace(&mut self.index, Index::memory());
        match index.close() {
            Ok(Some(took)) => tracing::info!(
                ms = took.as_millis() as u64,
                "the ledger's index was settled on close, so the next open need not replay it"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the ledger's index was not settled on close"),
        }
        // The head record as the log closes: synced, so that even a power loss afterwards
        // leaves it covering every acknowledged event.
        if let Some(head_file) = &*self.head_file.lock().unwrap_or_else(|p| p.into_inner())
            && let Err(e) = head_file.sync()
        {
            tracing::warn!(error = %e, "the head record could not be synced on close");
        }
    }
}
