//! The embedded default backend: an append-only log of segment files is the record, and a sled
//! database indexes it.
//!
//! Why not keep the events in sled itself? sled 0.34's `flush()` ends in `sync_file_range`, which
//! does not make data durable, and its crash recovery has open reports of lost and corrupted
//! data. Here the durability of an acknowledged event rests only on `write` + `fdatasync` of a
//! file whose layout this crate defines ([`super::frame`]) and an operator can read without
//! sled; sled holds only what can be rebuilt from the log (stream, id and hash indexes, the
//! position of each frame, idempotency keys). A lost or damaged index is rebuilt on open;
//! a lost index can never lose an event.
//!
//! Directory layout (inside the ledger's directory):
//!
//! ```text
//! LOCK                          held (flock) while open; names its holder
//! log/<first seq, 20 digits>.seg   segment files: header, then frames
//! index/                        sled: the derived index
//! recovered/                    bytes cut from a torn tail after a crash, kept for inspection
//! ```

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use uuid::Uuid;

use super::frame::{
    self, FRAME_HEADER_LEN, FrameBody, FrameCommit, FrameDefect, SEGMENT_HEADER_LEN,
};
use ledger_proof::PerfectNode;

use super::{
    ChainHead, CheckpointEntry, Commit, IdempotencyRecord, RawEvent, Storage, StorageError,
    StorageProblem,
};
use crate::chain::{ChainBreak, ChainChecker};
use crate::envelope::{Digest, RecordedEvent, decode_stored};

/// Options for opening the embedded backend.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Size at which a new segment file is started.
    pub segment_bytes_max: u64,
    /// Written into the lock file so that a process that finds the directory locked can say who
    /// holds it (program, pid, address).
    pub lock_note: String,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            segment_bytes_max: 256 * 1024 * 1024,
            lock_note: format!("research-ledger (pid {})", std::process::id()),
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

const META_TAIL: &[u8] = b"tail";
const META_MERKLE_SIZE: &[u8] = b"merkle-size";
const CHECKPOINT_LOG: &str = "checkpoints.jsonl";
const INDEX_FORMAT: &[u8] = b"index-format";
const INDEX_FORMAT_VERSION: &[u8] = b"1";

/// The sled trees of the index.
#[derive(Debug)]
struct Index {
    db: sled::Db,
    /// frame first seq (BE) → segment (BE) ‖ frame offset (BE)
    frames: sled::Tree,
    /// stream ‖ 0x00 ‖ version (BE) → location
    streams: sled::Tree,
    /// stream → version (BE)
    heads: sled::Tree,
    /// event id → location
    ids: sled::Tree,
    /// hash → location
    hashes: sled::Tree,
    /// idempotency key → postcard(IdempotencyRecord)
    keys: sled::Tree,
    /// resume point and format version
    meta: sled::Tree,
    /// level ‖ index (BE) → perfect-subtree hash
    merkle: sled::Tree,
}

fn index_err(e: sled::Error) -> StorageError {
    StorageError::Index(e.to_string())
}

impl Index {
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
        let tree = |name: &str| db.open_tree(name).map_err(index_err);
        Ok(Index {
            frames: tree("frames")?,
            streams: tree("streams")?,
            heads: tree("heads")?,
            ids: tree("event_ids")?,
            hashes: tree("hashes")?,
            keys: tree("idempotency")?,
            meta: tree("meta")?,
            merkle: tree("merkle")?,
            db,
        })
    }

    fn clear(&self) -> Result<(), StorageError> {
        for tree in [
            &self.frames,
            &self.streams,
            &self.heads,
            &self.ids,
            &self.hashes,
            &self.keys,
            &self.meta,
            &self.merkle,
        ] {
            tree.clear().map_err(index_err)?;
        }
        Ok(())
    }

    fn tail(&self) -> Result<Option<Tail>, StorageError> {
        if self.meta.get(INDEX_FORMAT).map_err(index_err)?.as_deref() != Some(INDEX_FORMAT_VERSION)
        {
            return Ok(None);
        }
        Ok(self
            .meta
            .get(META_TAIL)
            .map_err(index_err)?
            .and_then(|v| Tail::decode(&v)))
    }
}

fn stream_key(stream: &str, version: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream.len() + 9);
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

/// Accumulates the index writes of one or more frames, applied as one batch per tree.
#[derive(Default)]
struct IndexBatch {
    frames: sled::Batch,
    streams: sled::Batch,
    heads: BTreeMap<String, u64>,
    ids: sled::Batch,
    hashes: sled::Batch,
    keys: sled::Batch,
}

impl IndexBatch {
    fn frame(&mut self, first_seq: u64, segment: u64, offset: u64) {
        let mut value = [0u8; 16];
        value[0..8].copy_from_slice(&segment.to_be_bytes());
        value[8..16].copy_from_slice(&offset.to_be_bytes());
        self.frames.insert(&first_seq.to_be_bytes(), &value);
    }

    fn event(&mut self, e: &IndexedEvent<'_>) {
        let loc = e.loc.encode();
        self.streams
            .insert(stream_key(e.stream, e.stream_version), &loc);
        self.heads.insert(e.stream.to_owned(), e.stream_version);
        self.ids.insert(e.event_id.as_bytes(), &loc);
        self.hashes.insert(&e.hash.0, &loc);
    }

    fn key(&mut self, record: &IdempotencyRecord) {
        let value = postcard::to_stdvec(record).unwrap_or_default();
        self.keys.insert(record.key.as_bytes(), value);
    }

    fn apply(self, index: &Index, tail: &Tail) -> Result<(), StorageError> {
        let mut heads = sled::Batch::default();
        for (stream, version) in self.heads {
            heads.insert(stream.as_bytes(), &version.to_be_bytes());
        }
        index.frames.apply_batch(self.frames).map_err(index_err)?;
        index.streams.apply_batch(self.streams).map_err(index_err)?;
        index.ids.apply_batch(self.ids).map_err(index_err)?;
        index.hashes.apply_batch(self.hashes).map_err(index_err)?;
        index.keys.apply_batch(self.keys).map_err(index_err)?;
        index.heads.apply_batch(heads).map_err(index_err)?;
        // The tail goes last, so an index that survives a crash never claims more than it holds.
        index
            .meta
            .insert(META_TAIL, &tail.encode()[..])
            .map_err(index_err)?;
        Ok(())
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
}

/// The embedded backend. See the module documentation.
#[derive(Debug)]
pub struct EmbeddedStorage {
    log_dir: PathBuf,
    recovered_dir: PathBuf,
    // Held for as long as the storage is open: the flock is released when it is dropped.
    _lock: File,
    index: Index,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    writer: Mutex<Writer>,
    head: RwLock<ChainHead>,
    problems: Vec<StorageProblem>,
    recoveries: Vec<String>,
    segment_bytes_max: u64,
    checkpoints: Mutex<CheckpointLog>,
}

/// The checkpoint log: one JSON entry a line, each line synced before it counts.
#[derive(Debug)]
struct CheckpointLog {
    path: PathBuf,
    entries: Vec<CheckpointEntry>,
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

/// Takes the directory's lock file, or says who holds it.
fn take_lock(dir: &Path, note: &str) -> Result<File, StorageError> {
    let path = dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StorageError::io("open lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // The holder's note is advisory; an unreadable one still leaves a clear refusal.
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StorageError::Locked {
                path,
                holder: if holder.is_empty() {
                    "it did not say who it is".into()
                } else {
                    holder.to_owned()
                },
            });
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(StorageError::io("lock", &path, e));
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all_at(note.as_bytes(), 0))
        .map_err(|e| StorageError::io("write lock file", &path, e))?;
    Ok(file)
}

/// The outcome of reading frames forward from a position.
enum Scan {
    /// Reached the end of the log cleanly.
    End,
    /// Found a defect at `(segment, offset)`.
    Defect {
        segment: u64,
        offset: u64,
        seq: u64,
        detail: String,
        /// True when the defect is in a frame whose checksum held: damage, never a torn write.
        structural: bool,
    },
}

impl EmbeddedStorage {
    /// Opens (creating if needed) the backend in `dir`, recovering from a crash: a torn last
    /// frame is cut off (its bytes kept in `recovered/`), the index catches up with the log, and
    /// anything else found wrong is reported by [`Storage::problems`], which blocks appends.
    pub fn open(dir: &Path, options: EmbeddedOptions) -> Result<EmbeddedStorage, StorageError> {
        create_dir_durable(dir)?;
        let lock = take_lock(dir, &options.lock_note)?;
        let log_dir = dir.join("log");
        let recovered_dir = dir.join("recovered");
        create_dir_durable(&log_dir)?;
        create_dir_durable(&recovered_dir)?;
        let index = Index::open(&dir.join("index"))?;
        let checkpoint_path = dir.join(CHECKPOINT_LOG);

        let mut storage = EmbeddedStorage {
            log_dir,
            recovered_dir,
            _lock: lock,
            index,
            segments: RwLock::new(BTreeMap::new()),
            writer: Mutex::new(Writer {
                segment: 0,
                end: SEGMENT_HEADER_LEN,
                frames_in_segment: 0,
                failed: None,
            }),
            head: RwLock::new(ChainHead::default()),
            problems: Vec::new(),
            recoveries: Vec::new(),
            segment_bytes_max: options.segment_bytes_max.max(SEGMENT_HEADER_LEN + 1024),
            checkpoints: Mutex::new(CheckpointLog {
                path: checkpoint_path,
                entries: Vec::new(),
            }),
        };
        storage.load_segments()?;
        storage.recover()?;
        storage.load_checkpoints()?;
        Ok(storage)
    }

    /// Reads the checkpoint log. A last line without its newline, or that does not parse, was
    /// being written when the process stopped: it is cut and kept in `recovered/`. A bad line
    /// before the last is damage.
    fn load_checkpoints(&mut self) -> Result<(), StorageError> {
        let path = self
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .path
            .clone();
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StorageError::io("read", &path, e)),
        };
        let mut entries = Vec::new();
        let mut at = 0usize;
        let mut cut: Option<usize> = None;
        while at < bytes.len() {
            let end = bytes[at..].iter().position(|b| *b == b'\n').map(|i| at + i);
            let line = &bytes[at..end.unwrap_or(bytes.len())];
            let parsed = serde_json::from_slice::<CheckpointEntry>(line);
            match (parsed, end) {
                (Ok(entry), Some(end)) => {
                    entries.push(entry);
                    at = end + 1;
                }
                (_, None) => {
                    cut = Some(at);
                    break;
                }
                (Err(e), Some(end)) if end + 1 == bytes.len() => {
                    tracing::warn!(error = %e, "the last checkpoint entry does not parse");
                    cut = Some(at);
                    break;
                }
                (Err(e), Some(_)) => {
                    self.problems.push(StorageProblem {
                        seq: None,
                        detail: format!(
                            "checkpoint log entry {} does not parse: {e}",
                            entries.len() + 1
                        ),
                    });
                    break;
                }
            }
        }
        if let Some(at) = cut {
            let kept = self
                .recovered_dir
                .join(format!("{CHECKPOINT_LOG}.{at}.torn"));
            fs::write(&kept, &bytes[at..])
                .and_then(|()| File::open(&kept)?.sync_all())
                .map_err(|e| StorageError::io("write", &kept, e))?;
            sync_dir(&self.recovered_dir)?;
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| StorageError::io("open", &path, e))?;
            file.set_len(at as u64)
                .and_then(|()| file.sync_all())
                .map_err(|e| StorageError::io("truncate", &path, e))?;
            self.recoveries.push(format!(
                "cut a torn checkpoint entry of {} bytes; kept in {}",
                bytes.len() - at,
                kept.display()
            ));
        }
        self.checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries = entries;
        Ok(())
    }

    /// What recovery did when the backend opened (torn tails cut), for the operator's log.
    pub fn recoveries(&self) -> &[String] {
        &self.recoveries
    }

    /// Opens every segment file, in seq order. A last segment whose header never reached the
    /// disk was created by a roll-over that crashed before any frame went into it: it is
    /// removed. Any other bad header is a problem.
    fn load_segments(&mut self) -> Result<(), StorageError> {
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        let entries =
            fs::read_dir(&self.log_dir).map_err(|e| StorageError::io("list", &self.log_dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("list", &self.log_dir, e))?;
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".seg") else {
                continue;
            };
            match stem.parse::<u64>() {
                Ok(first) if stem.len() == 20 => found.push((first, path)),
                _ => self.problems.push(StorageProblem {
                    seq: None,
                    detail: format!("unexpected file {} in the log directory", path.display()),
                }),
            }
        }
        found.sort();
        let count = found.len();
        let mut segments = BTreeMap::new();
        for (i, (first, path)) in found.into_iter().enumerate() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| StorageError::io("open segment", &path, e))?;
            let len = file
                .metadata()
                .map_err(|e| StorageError::io("stat segment", &path, e))?
                .len();
            let mut header = vec![0u8; SEGMENT_HEADER_LEN.min(len) as usize];
            file.read_exact_at(&mut header, 0)
                .map_err(|e| StorageError::io("read segment header", &path, e))?;
            match frame::decode_segment_header(&header) {
                Ok(first_in_header) if first_in_header == first => {
                    segments.insert(
                        first,
                        Arc::new(Segment {
                            first_seq: first,
                            path,
                            file,
                        }),
                    );
                }
                Ok(other) => self.problems.push(StorageProblem {
                    seq: Some(first),
                    detail: format!("segment {} says it starts at seq {other}", path.display()),
                }),
                Err(_) if i + 1 == count && len <= SEGMENT_HEADER_LEN => {
                    drop(file);
                    fs::remove_file(&path)
                        .map_err(|e| StorageError::io("remove torn segment", &path, e))?;
                    sync_dir(&self.log_dir)?;
                    self.recoveries.push(format!(
                        "removed segment {} whose header was never completed",
                        path.display()
                    ));
                }
                Err(detail) => self.problems.push(StorageProblem {
                    seq: Some(first),
                    detail: format!("segment {}: {detail}", path.display()),
                }),
            }
        }
        *self.segments.write().unwrap_or_else(|p| p.into_inner()) = segments;
        Ok(())
    }

    /// Brings the index up to the end of the log and cuts a torn tail.
    fn recover(&mut self) -> Result<(), StorageError> {
        // An index of another format (or none) is discarded and rebuilt from the log.
        let recorded = self.index.tail()?;
        if recorded.is_none() {
            self.index.clear()?;
            self.index
                .meta
                .insert(INDEX_FORMAT, INDEX_FORMAT_VERSION)
                .map_err(index_err)?;
        }
        let first_segment = self.segments_snapshot().keys().next().copied();
        let Some(first_segment) = first_segment else {
            if recorded.is_some_and(|t| t.next_seq > 0) {
                self.problems.push(StorageProblem {
                    seq: Some(0),
                    detail: "the index knows of events but the log has no segment".into(),
                });
            }
            return Ok(());
        };
        if first_segment != 0 {
            self.problems.push(StorageProblem {
                seq: Some(0),
                detail: format!("the first segment starts at seq {first_segment}, not 0"),
            });
            return Ok(());
        }
        // Resume from the index's tail when it is consistent with the log; rebuild otherwise.
        let start = match recorded {
            Some(tail) if self.tail_is_plausible(&tail) => tail,
            _ => {
                self.index.clear()?;
                self.index
                    .meta
                    .insert(INDEX_FORMAT, INDEX_FORMAT_VERSION)
                    .map_err(index_err)?;
                Tail {
                    next_seq: 0,
                    last_hash: Digest::ZERO,
                    segment: 0,
                    offset: SEGMENT_HEADER_LEN,
                }
            }
        };
        let (tail, outcome) = self.scan_and_index(start)?;
        // The index records only what was durable in the log, so a log that now ends before
        // the index's record of it has lost acknowledged events at its end.
        if let Some(recorded) = recorded
            && recorded.next_seq > tail.next_seq
            && matches!(outcome, Scan::End)
        {
            self.problems.push(StorageProblem {
                seq: Some(tail.next_seq),
                detail: format!(
                    "the log ends at seq {} but held {} events when last indexed: events were removed from its end",
                    tail.next_seq, recorded.next_seq
                ),
            });
        }
        *self.head.write().unwrap_or_else(|p| p.into_inner()) = ChainHead {
            size: tail.next_seq,
            last_hash: tail.last_hash,
        };
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        writer.segment = tail.segment;
        writer.end = tail.offset;
        writer.frames_in_segment = u64::from(tail.offset > SEGMENT_HEADER_LEN);
        drop(writer);
        if let Scan::Defect {
            segment,
            offset,
            seq,
            detail,
            structural,
        } = outcome
        {
            let segments = self.segments_snapshot();
            let is_last = segments.keys().next_back() == Some(&segment);
            let later_frame = !structural && is_last && self.valid_frame_after(segment, offset)?;
            if !structural && is_last && !later_frame {
                self.cut_torn_tail(segment, offset, &detail)?;
            } else {
                self.problems.push(StorageProblem {
                    seq: Some(seq),
                    detail: format!(
                        "segment {segment:020}, byte {offset}: {detail}{}",
                        if later_frame {
                            " (intact frames follow, so this is damage, not a torn write)"
                        } else {
                            ""
                        }
                    ),
                });
            }
        } else {
            // Segments after the tail's segment that the scan never reached would mean a gap.
            let segments = self.segments_snapshot();
            if let Some((&last, _)) = segments.iter().next_back()
                && last > tail.segment
            {
                self.problems.push(StorageProblem {
                    seq: Some(tail.next_seq),
                    detail: format!("segment {last:020} follows the end of the log"),
                });
            }
        }
        Ok(())
    }

    fn tail_is_plausible(&self, tail: &Tail) -> bool {
        let segments = self.segments_snapshot();
        match segments.get(&tail.segment) {
            Some(seg) => seg
                .file
                .metadata()
                .map(|m| m.len() >= tail.offset)
                .unwrap_or(false),
            None => false,
        }
    }

    fn segments_snapshot(&self) -> BTreeMap<u64, Arc<Segment>> {
        self.segments
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads and indexes frames from `start` to the end of the log, checking each frame's
    /// checksum and structure and each event's seq, chain link and stream version. Stops at the
    /// first defect; the frame holding it is not indexed.
    fn scan_and_index(&self, start: Tail) -> Result<(Tail, Scan), StorageError> {
        let segments = self.segments_snapshot();
        let mut tail = start;
        let mut checker = ChainChecker::new(start.next_seq, start.last_hash);
        let mut batch = IndexBatch::default();
        let mut pending = 0usize;
        let mut outcome = Scan::End;
        'segments: for (&first, seg) in segments.range(start.segment..) {
            if first != tail.segment {
                // Moving on to the next segment: it must begin exactly where the last ended.
                if first != tail.next_seq {
                    outcome = Scan::Defect {
                        segment: first,
                        offset: 0,
                        seq: tail.next_seq,
                        detail: format!(
                            "segment starts at seq {first} but the log before it ends at {}",
                            tail.next_seq
                        ),
                        structural: true,
                    };
                    break;
                }
                tail.segment = first;
                tail.offset = SEGMENT_HEADER_LEN;
            }
            let len = seg
                .file
                .metadata()
                .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
                .len();
            while tail.offset < len {
                let frame = match read_frame(seg, tail.offset, len)? {
                    Ok(frame) => frame,
                    Err(defect) => {
                        let seq = match defect {
                            FrameDefect::BadBody(Some(seq)) => seq,
                            _ => tail.next_seq,
                        };
                        outcome = Scan::Defect {
                            segment: first,
                            offset: tail.offset,
                            seq,
                            detail: defect_text(&defect),
                            structural: matches!(defect, FrameDefect::Malformed(_)),
                        };
                        break 'segments;
                    }
                };
                let mut base =
                    |stream: &str| self.stream_version(stream).map_err(|e| e.to_string());
                let mut events = Vec::with_capacity(frame.body.events.len());
                let mut scratch = checker.clone();
                for (offset, n) in &frame.body.events {
                    match scratch.check(&frame.bytes[*offset..offset + n], &mut base) {
                        Ok(event) => events.push(event),
                        Err(ChainBreak { seq, problem }) => {
                            outcome = Scan::Defect {
                                segment: first,
                                offset: tail.offset,
                                seq,
                                detail: problem,
                                structural: true,
                            };
                            break 'segments;
                        }
                    }
                }
                if frame.body.first_seq != tail.next_seq {
                    outcome = Scan::Defect {
                        segment: first,
                        offset: tail.offset,
                        seq: tail.next_seq,
                        detail: format!(
                            "frame says it starts at seq {} where seq {} is next",
                            frame.body.first_seq, tail.next_seq
                        ),
                        structural: true,
                    };
                    break 'segments;
                }
                checker = scratch;
                batch.frame(frame.body.first_seq, first, tail.offset);
                for (i, e) in events.iter().enumerate() {
                    let (offset, len) = frame.body.events[i];
                    batch.event(&IndexedEvent {
                        loc: Location {
                            seq: e.seq,
                            segment: first,
                            offset: tail.offset + FRAME_HEADER_LEN + offset as u64,
                            len: len as u32,
                        },
                        stream: &e.stream,
                        stream_version: e.stream_version,
                        event_id: e.event_id,
                        hash: e.hash,
                    });
                }
                for record in idempotency_records(&frame.body, &events) {
                    batch.key(&record);
                }
                tail.next_seq = checker.next_seq;
                tail.last_hash = checker.last_hash;
                tail.offset += FRAME_HEADER_LEN + u64::from(frame.header_body_len);
                pending += events.len();
                if pending >= 8192 {
                    std::mem::take(&mut batch).apply(&self.index, &tail)?;
                    pending = 0;
                }
            }
        }
        batch.apply(&self.index, &tail)?;
        Ok((tail, outcome))
    }

    /// True when a frame with a valid header and body checksum starts anywhere after `offset`.
    fn valid_frame_after(&self, segment: u64, offset: u64) -> Result<bool, StorageError> {
        let segments = self.segments_snapshot();
        let Some(seg) = segments.get(&segment) else {
            return Ok(false);
        };
        let len = seg
            .file
            .metadata()
            .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
            .len();
        let mut bytes = vec![0u8; len as usize];
        seg.file
            .read_exact_at(&mut bytes, 0)
            .map_err(|e| StorageError::io("read segment", &seg.path, e))?;
        let mut at = offset as usize + 1;
        while at + FRAME_HEADER_LEN as usize <= bytes.len() {
            if &bytes[at..at + 4] == frame::FRAME_MAGIC && read_frame(seg, at as u64, len)?.is_ok()
            {
                return Ok(true);
            }
            at += 1;
        }
        Ok(false)
    }

    /// Moves the bytes of a torn last frame to `recovered/` and truncates the segment there.
    /// They were never acknowledged: an append is acknowledged only after its frame is synced,
    /// and a frame is written only after every frame before it was synced.
    fn cut_torn_tail(
        &mut self,
        segment: u64,
        offset: u64,
        detail: &str,
    ) -> Result<(), StorageError> {
        let segments = self.segments_snapshot();
        let Some(seg) = segments.get(&segment) else {
            return Ok(());
        };
        let len = seg
            .file
            .metadata()
            .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
            .len();
        let mut torn = vec![0u8; (len - offset) as usize];
        seg.file
            .read_exact_at(&mut torn, offset)
            .map_err(|e| StorageError::io("read torn tail", &seg.path, e))?;
        let kept = self
            .recovered_dir
            .join(format!("{segment:020}.seg.{offset}.torn"));
        let mut out = File::create(&kept).map_err(|e| StorageError::io("create", &kept, e))?;
        out.write_all(&torn)
            .and_then(|()| out.sync_all())
            .map_err(|e| StorageError::io("write", &kept, e))?;
        sync_dir(&self.recovered_dir)?;
        seg.file
            .set_len(offset)
            .and_then(|()| seg.file.sync_all())
            .map_err(|e| StorageError::io("truncate torn tail", &seg.path, e))?;
        let note = format!(
            "cut a torn write of {} bytes at byte {offset} of segment {segment:020} ({detail}); kept in {}",
            torn.len(),
            kept.display()
        );
        tracing::warn!("{note}");
        self.recoveries.push(note);
        Ok(())
    }

    fn location(&self, seq: u64) -> Result<Option<(Arc<Segment>, u64)>, StorageError> {
        let Some(entry) = self
            .index
            .frames
            .range(..=seq.to_be_bytes())
            .next_back()
            .transpose()
            .map_err(index_err)?
        else {
            return Ok(None);
        };
        let value = entry.1;
        if value.len() != 16 {
            return Err(StorageError::Index("frame entry of the wrong size".into()));
        }
        let segment = be_u64(&value[0..8]);
        let offset = be_u64(&value[8..16]);
        let segments = self.segments_snapshot();
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

    fn write_frame(&self, commits: &[Commit]) -> Result<(), StorageError> {
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reason) = &writer.failed {
            return Err(StorageError::Failed(reason.clone()));
        }
        let result = self.write_frame_locked(&mut writer, commits);
        if let Err(e) = &result {
            writer.failed = Some(e.to_string());
        }
        result
    }

    fn write_frame_locked(
        &self,
        writer: &mut Writer,
        commits: &[Commit],
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
                None => self.stream_version(&commit.stream)?,
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
        let last_hash = commits
            .iter()
            .flat_map(|c| c.events.last())
            .last()
            .map(|e| e.hash)
            .unwrap_or(head.last_hash);
        let tail = Tail {
            next_seq: expected,
            last_hash,
            segment: seg.first_seq,
            offset: writer.end,
        };
        batch.apply(&self.index, &tail)?;
        *self.head.write().unwrap_or_else(|p| p.into_inner()) = ChainHead {
            size: expected,
            last_hash,
        };
        Ok(())
    }
}

/// The idempotency records a checked frame carries.
fn idempotency_records(body: &FrameBody, events: &[RecordedEvent]) -> Vec<IdempotencyRecord> {
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
                stream: last.stream.clone(),
                first_seq: body.first_seq + at as u64,
                event_count: commit.event_count,
                stream_version: last.stream_version,
            });
        }
        at += n;
    }
    out
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

    fn append(&self, commits: &[Commit]) -> Result<(), StorageError> {
        self.write_frame(commits)
    }

    fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, StorageError> {
        let size = self.head().size;
        let mut out = Vec::new();
        if from_seq >= size || max == 0 {
            return Ok(out);
        }
        let Some((mut seg, mut offset)) = self.location(from_seq)? else {
            return Err(StorageError::Index(format!(
                "no frame holds seq {from_seq}"
            )));
        };
        let mut seq_of_frame: Option<u64> = None;
        loop {
            // Stop once everything asked for is read, or at the head: what lies beyond it may
            // be a frame the writer is writing right now, whose bytes are not all there yet.
            if out.len() >= max || seq_of_frame.is_some_and(|next| next >= size) {
                break;
            }
            let len = seg
                .file
                .metadata()
                .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
                .len();
            if offset >= len {
                let next = self
                    .segments_snapshot()
                    .range(seg.first_seq + 1..)
                    .next()
                    .map(|(_, s)| Arc::clone(s));
                match next {
                    Some(next) => {
                        seg = next;
                        offset = SEGMENT_HEADER_LEN;
                        continue;
                    }
                    None => break,
                }
            }
            let frame = match read_frame(&seg, offset, len)? {
                Ok(frame) => frame,
                Err(defect) => {
                    let located = match defect {
                        FrameDefect::BadBody(Some(seq)) => Some(seq),
                        _ => None,
                    };
                    return Err(StorageError::Corrupt {
                        seq: located.or(seq_of_frame).or(Some(from_seq)),
                        detail: format!(
                            "{} at byte {offset} of {}",
                            defect_text(&defect),
                            seg.path.display()
                        ),
                    });
                }
            };
            let first = frame.body.first_seq;
            for (i, (at, n)) in frame.body.events.iter().enumerate() {
                let seq = first + i as u64;
                if seq < from_seq {
                    continue;
                }
                if seq >= size || out.len() >= max {
                    return Ok(out);
                }
                out.push(RawEvent {
                    seq,
                    bytes: frame.bytes[*at..at + n].into(),
                });
            }
            seq_of_frame = Some(first + frame.body.events.len() as u64);
            offset += FRAME_HEADER_LEN + u64::from(frame.header_body_len);
        }
        Ok(out)
    }

    fn stream_version(&self, stream: &str) -> Result<u64, StorageError> {
        Ok(self
            .index
            .heads
            .get(stream.as_bytes())
            .map_err(index_err)?
            .map(|v| be_u64(&v))
            .unwrap_or(0))
    }

    fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RawEvent>, StorageError> {
        let size = self.head().size;
        let start = stream_key(stream, from_version.max(1));
        let end = stream_key(stream, u64::MAX);
        let mut out = Vec::new();
        for entry in self.index.streams.range(start..=end) {
            if out.len() >= max {
                break;
            }
            let (_, value) = entry.map_err(index_err)?;
            let loc = Location::decode(&value)?;
            if loc.seq >= size {
                break;
            }
            out.push(self.read_at(&loc)?);
        }
        Ok(out)
    }

    fn find_event_id(&self, id: Uuid) -> Result<Option<RawEvent>, StorageError> {
        let value = self.index.ids.get(id.as_bytes()).map_err(index_err)?;
        self.read_located(value)
    }

    fn find_hash(&self, hash: &Digest) -> Result<Option<RawEvent>, StorageError> {
        let value = self.index.hashes.get(hash.0).map_err(index_err)?;
        self.read_located(value)
    }

    fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        match self.index.keys.get(key.as_bytes()).map_err(index_err)? {
            None => Ok(None),
            Some(v) => postcard::from_bytes(&v)
                .map(Some)
                .map_err(|e| StorageError::Index(format!("idempotency record: {e}"))),
        }
    }

    fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, StorageError> {
        let mut out = Vec::new();
        for entry in self.index.keys.iter() {
            let (_, value) = entry.map_err(index_err)?;
            let record: IdempotencyRecord = postcard::from_bytes(&value)
                .map_err(|e| StorageError::Index(format!("idempotency record: {e}")))?;
            if record.first_seq < self.head().size {
                out.push(record);
            }
        }
        out.sort_by_key(|r| r.first_seq);
        Ok(out)
    }

    fn problems(&self) -> Vec<StorageProblem> {
        self.problems.clone()
    }

    fn checkpoint_index(&self) -> Result<(), StorageError> {
        self.index.db.flush().map(|_| ()).map_err(index_err)
    }

    fn merkle_size(&self) -> Result<u64, StorageError> {
        let stored = self
            .index
            .meta
            .get(META_MERKLE_SIZE)
            .map_err(index_err)?
            .map(|v| be_u64(&v))
            .unwrap_or(0);
        Ok(stored.min(self.head().size))
    }

    fn put_merkle_nodes(&self, nodes: &[PerfectNode], size: u64) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for node in nodes {
            let mut key = [0u8; 9];
            key[0] = node.level;
            key[1..].copy_from_slice(&node.index.to_be_bytes());
            batch.insert(&key[..], &node.hash.0[..]);
        }
        self.index.merkle.apply_batch(batch).map_err(index_err)?;
        self.index
            .meta
            .insert(META_MERKLE_SIZE, &size.to_be_bytes()[..])
            .map_err(index_err)?;
        Ok(())
    }

    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        let mut key = [0u8; 9];
        key[0] = level;
        key[1..].copy_from_slice(&index.to_be_bytes());
        match self.index.merkle.get(key).map_err(index_err)? {
            None => Ok(None),
            Some(v) if v.len() == 32 => {
                let mut hash = [0u8; 32];
                hash.copy_from_slice(&v);
                Ok(Some(Digest(hash)))
            }
            Some(_) => Err(StorageError::Index("Merkle node of the wrong size".into())),
        }
    }

    fn append_checkpoint_entry(&self, entry: &CheckpointEntry) -> Result<(), StorageError> {
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
        Ok(())
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

impl Drop for EmbeddedStorage {
    fn drop(&mut self) {
        // Best effort: a missed flush only means more catch-up on the next open.
        let _ = self.index.db.flush();
    }
}

/// Whether sled failed to open because another handle still holds its file lock. sled wraps
/// the operating system's `WouldBlock` in an error of its own wording.
fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}
