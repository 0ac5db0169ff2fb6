//! The content blob store: every evidence text, kept whole under its blake3 hash.
//!
//! An evidence event records only a summary and the content hash (SPEC §4); the full text lives
//! here and is read on demand. The service writes the blob first and appends the event that
//! cites it only after [`BlobStore::put`] returned, so a durable event never cites a blob that a
//! crash could lose.
//!
//! Layout: `DIR/ab/cdef…`, the first two hex digits of the hash naming a folder and the other
//! 62 the file, so no folder grows past 1/256 of the store. Every read re-hashes the bytes, so a
//! damaged or altered blob is reported, never returned.
//!
//! **Durability is grouped.** A put appends the blob to the store's journal
//! (`DIR/.journal/<generation>.log`: records `"RLBJ" | length u32 LE | blake3 hash | bytes`) and
//! returns once a `fdatasync` of the journal covers its record. Concurrent puts share that
//! sync: whichever finds none running syncs the journal to its end and wakes every put it
//! covered (group commit), so making content durable costs one sync per group, and a put
//! creates no file. When the journal passes `journal_bytes_max` it is synced and set aside, a
//! new one started, and a background thread writes the file of each blob it holds (to
//! `DIR/.tmp/`, renamed into place), syncs the files and their folders, then removes it. Until
//! then reads find the blob in its journal, and so does a read-only open, which reads the
//! journals it finds. An open replays every journal left (a crash, or a power loss before the
//! files reached the disk): the file of each intact record that is missing or damaged is
//! written, the files are synced, and the journals removed; a clean shutdown does the same
//! ([`BlobStore::checkpoint`]). A record cut short by a crash is one whose put never returned,
//! and is ignored. The journal holds a blob only until its file is synced, so content removed
//! from the store (a redaction) does not linger there.
//!
//! [`ContentStore`] is what the service holds: [`BlobStore`] is its embedded implementation,
//! [`PostgresBlobStore`] keeps the blobs in a table of a shared database instead, durable once
//! the insert's commit returned.

mod postgres;

pub use postgres::PostgresBlobStore;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use research::Hash32;

/// blake3 of a full evidence text; the name of its blob.
pub type ContentHash = Hash32;

/// The content hash of `bytes`.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    Hash32(*blake3::hash(bytes).as_bytes())
}

/// Bounds of the blob store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// Largest blob accepted or returned (bytes). 1 MiB by default: an evidence text, not a data
    /// set.
    pub content_bytes_max: u64,
    /// Age after which a leftover temporary file of an interrupted write is removed when the
    /// store opens (seconds). Far longer than any write takes, so a write in progress elsewhere
    /// is never disturbed.
    pub stale_temp_secs_max: u64,
    /// Size past which the journal is set aside and its blobs' files synced in the background
    /// (bytes). It bounds what an open after a crash replays.
    pub journal_bytes_max: u64,
}

impl Default for BlobOptions {
    fn default() -> Self {
        Self {
            content_bytes_max: 1024 * 1024,
            stale_temp_secs_max: 3_600,
            journal_bytes_max: 8 * 1024 * 1024,
        }
    }
}

/// Why a blob could not be stored or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// The content is larger than the store accepts. Shorten it, or raise `content_bytes_max`.
    #[error("content of {bytes} bytes exceeds content_bytes_max ({limit} bytes)")]
    TooLarge {
        /// Size of the content.
        bytes: u64,
        /// The limit in force.
        limit: u64,
    },
    /// No blob has this hash. The event citing it refers to content this store never received.
    #[error("no blob {0}")]
    NotFound(ContentHash),
    /// The stored bytes do not hash to their name: the file was altered or damaged. It is never
    /// returned; restore it from a backup or an export bundle, or `put` the original again.
    #[error("blob {expected} is damaged: its bytes hash to {actual}")]
    Damaged {
        /// The hash the blob is stored under.
        expected: ContentHash,
        /// The hash of the bytes found.
        actual: ContentHash,
    },
    /// The store was opened read-only (an audit): nothing can be stored.
    #[error("the content store was opened read-only")]
    ReadOnly,
    /// A write or sync of the journal failed earlier, so what it holds is unknown: the store
    /// refuses every further put. Restart; the next open replays what is intact.
    #[error("the content store refuses writes: {0}")]
    Failed(String),
    /// The database holding the blobs failed or refused; what was being done and what it said.
    #[error("content store database, {op}: {detail}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// What the server or the connection said.
        detail: String,
    },
    /// The file system failed.
    #[error("blob store I/O at {path}: {source}")]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

/// A content-addressed store of evidence texts: what the service writes every evidence text
/// to before it appends the event that cites it, and reads them back from.
pub trait ContentStore: Send + Sync + std::fmt::Debug {
    /// Stores `bytes` and returns their hash once they are durable. A blob already stored
    /// intact is not rewritten; a damaged one is replaced by the good bytes.
    fn put(&self, bytes: &[u8]) -> Result<ContentHash, BlobError>;
    /// The bytes of the blob `hash`, checked against the hash.
    fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError>;
    /// Whether a blob named `hash` exists (its bytes unchecked).
    fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError>;
    /// Makes everything stored durable where that is deferred: what a clean shutdown does.
    fn checkpoint(&self) -> Result<(), BlobError>;
    /// Why the store refuses puts, if it does.
    fn failure(&self) -> Option<String>;
    /// The bounds in force.
    fn options(&self) -> &BlobOptions;
}

impl ContentStore for BlobStore {
    fn put(&self, bytes: &[u8]) -> Result<ContentHash, BlobError> {
        BlobStore::put(self, bytes)
    }
    fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        BlobStore::get(self, hash)
    }
    fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError> {
        BlobStore::contains(self, hash)
    }
    fn checkpoint(&self) -> Result<(), BlobError> {
        BlobStore::checkpoint(self)
    }
    fn failure(&self) -> Option<String> {
        BlobStore::failure(self)
    }
    fn options(&self) -> &BlobOptions {
        BlobStore::options(self)
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BlobError + '_ {
    move |source| BlobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A content-addressed store of evidence texts in one folder.
#[derive(Debug)]
pub struct BlobStore {
    layout: Arc<Layout>,
    options: BlobOptions,
    read_only: bool,
    /// None when read-only.
    journal: Option<Arc<Journal>>,
    /// Read-only: the intact records of the journals found at open, whose files may not be
    /// written yet.
    found: Vec<Arc<JournalRecords>>,
}

/// Where a store keeps its files.
#[derive(Debug)]
struct Layout {
    dir: PathBuf,
    temp_dir: PathBuf,
    content_bytes_max: u64,
}

/// The bytes at the start of every journal record.
const RECORD_MAGIC: &[u8; 4] = b"RLBJ";
/// A record's header: magic, length, hash.
const RECORD_HEADER_LEN: usize = 4 + 4 + 32;

/// Where a blob's bytes lie in its journal.
#[derive(Debug, Clone, Copy)]
struct Record {
    /// Where the bytes start (past the record's header).
    offset: u64,
    len: u64,
}

impl Record {
    /// Where the record ends.
    fn end(self) -> u64 {
        self.offset + self.len
    }
}

/// A journal's file and the records it holds.
#[derive(Debug)]
struct JournalRecords {
    path: PathBuf,
    file: Arc<File>,
    records: HashMap<ContentHash, Record>,
}

/// A blob found in a journal: the file to read it from, where, and, when its record is in the
/// journal in use, the generation and end a put waits for.
struct Journaled {
    file: Arc<File>,
    path: PathBuf,
    record: Record,
    current: Option<u64>,
}

/// The journal that makes puts durable, one group sync at a time, and holds each blob until
/// its file is written.
#[derive(Debug)]
struct Journal {
    dir: PathBuf,
    layout: Arc<Layout>,
    state: Mutex<JournalState>,
    synced: Condvar,
    /// `fdatasync`s of the journal so far.
    syncs: AtomicU64,
    /// Journals set aside whose blobs' files are not yet written and synced: reads find those
    /// blobs here meanwhile.
    aside: Arc<Mutex<Vec<Arc<JournalRecords>>>>,
    /// Background checkpoints of journals set aside, joined before the store checkpoints or
    /// goes away, so that none outlives it.
    checkpoints: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct JournalState {
    generation: u64,
    file: Arc<File>,
    path: PathBuf,
    /// Bytes written.
    end: u64,
    /// Bytes known durable.
    synced: u64,
    /// Whether a sync is running.
    syncing: bool,
    /// The blobs whose records are in this journal.
    records: HashMap<ContentHash, Record>,
    /// Why the journal refuses writes, if it does.
    failed: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{generation:020}.log"))
}

/// The journals in `dir`, oldest first.
fn journals_in(dir: &Path) -> Result<Vec<(u64, PathBuf)>, BlobError> {
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let path = entry.path();
        let generation = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(generation) = generation {
            found.push((generation, path));
        }
    }
    found.sort();
    Ok(found)
}

/// The intact records of a journal's bytes, in order. A record cut short, or whose bytes do
/// not hash to its name, ends them: it, and anything after it, belongs to a put that never
/// returned.
fn intact_records(bytes: &[u8]) -> Vec<(ContentHash, Record)> {
    let mut records = Vec::new();
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + RECORD_HEADER_LEN) {
        if &header[..4] != RECORD_MAGIC {
            break;
        }
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&header[8..40]);
        let hash = Hash32(hash);
        let start = at + RECORD_HEADER_LEN;
        let Some(content) = bytes.get(start..start + len) else {
            break;
        };
        if content_hash(content) != hash {
            break;
        }
        records.push((
            hash,
            Record {
                offset: start as u64,
                len: len as u64,
            },
        ));
        at = start + len;
    }
    records
}

impl JournalRecords {
    /// Reads a journal left by a run, to read its blobs without changing it.
    fn read(path: PathBuf) -> Result<JournalRecords, BlobError> {
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        let file = File::open(&path).map_err(io_at(&path))?;
        Ok(JournalRecords {
            file: Arc::new(file),
            records: intact_records(&bytes).into_iter().collect(),
            path,
        })
    }
}

impl Journal {
    /// Opens the journal folder: writes the files of every blob the journals earlier runs left
    /// hold, syncs them and removes those journals, then starts a new journal.
    fn open(layout: &Arc<Layout>) -> Result<Journal, BlobError> {
        let dir = layout.dir.join(".journal");
        create_dir_durably(&dir)?;
        let left = journals_in(&dir)?;
        for (_, path) in &left {
            let journal = match JournalRecords::read(path.clone()) {
                Ok(journal) => journal,
                // Removed meanwhile by the checkpoint that covered it: nothing left to replay.
                Err(BlobError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    continue;
                }
                Err(e) => return Err(e),
            };
            let written = layout.write_out(&journal)?;
            sync_files(&written)?;
        }
        for (_, path) in &left {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_at(path)(e)),
            }
        }
        let generation = left.last().map_or(0, |(g, _)| g + 1);
        let (file, path) = create_journal(&dir, generation)?;
        Ok(Journal {
            dir,
            layout: Arc::clone(layout),
            state: Mutex::new(JournalState {
                generation,
                file: Arc::new(file),
                path,
                end: 0,
                synced: 0,
                syncing: false,
                records: HashMap::new(),
                failed: None,
            }),
            synced: Condvar::new(),
            syncs: AtomicU64::new(0),
            aside: Arc::new(Mutex::new(Vec::new())),
            checkpoints: Mutex::new(Vec::new()),
        })
    }

    /// Appends a blob's record; returns the journal generation and where the record ends.
    fn append(&self, hash: &ContentHash, bytes: &[u8]) -> Result<(u64, u64), BlobError> {
        let mut state = lock(&self.state);
        if let Some(reason) = &state.failed {
            return Err(BlobError::Failed(reason.clone()));
        }
        if let Some(record) = state.records.get(hash) {
            return Ok((state.generation, record.end()));
        }
        let mut record = Vec::with_capacity(RECORD_HEADER_LEN + bytes.len());
        record.extend_from_slice(RECORD_MAGIC);
        record.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
        record.extend_from_slice(&hash.0);
        record.extend_from_slice(bytes);
        let at = state.end;
        // Appended under the lock, so records never interleave.
        if let Err(e) = (&*state.file).write_all(&record) {
            let reason = format!(
                "a write to the journal {} failed: {e}",
                state.path.display()
            );
            state.failed = Some(reason.clone());
            return Err(BlobError::Failed(reason));
        }
        state.end = at + record.len() as u64;
        let placed = Record {
            offset: at + RECORD_HEADER_LEN as u64,
            len: bytes.len() as u64,
        };
        state.records.insert(*hash, placed);
        Ok((state.generation, placed.end()))
    }

    /// The blob `hash` if a journal holds it: the one in use, or one set aside whose files are
    /// not yet all written.
    fn find(&self, hash: &ContentHash) -> Option<Journaled> {
        {
            let state = lock(&self.state);
            if let Some(record) = state.records.get(hash) {
                return Some(Journaled {
                    file: Arc::clone(&state.file),
                    path: state.path.clone(),
                    record: *record,
                    current: Some(state.generation),
                });
            }
        }
        // A journal set aside is put on this list before it leaves the one in use, and taken
        // off only once its files are durable: a blob that left the first is found here or in
        // its file.
        find_in(&lock(&self.aside), hash)
    }

    /// Returns once the journal is durable up to `end` of `generation`: syncing it if no sync
    /// is running, waiting for the running one otherwise.
    fn wait_durable(&self, generation: u64, end: u64) -> Result<(), BlobError> {
        let mut state = lock(&self.state);
        loop {
            if let Some(reason) = &state.failed {
                return Err(BlobError::Failed(reason.clone()));
            }
            // A journal set aside was synced whole first.
            if state.generation > generation || state.synced >= end {
                return Ok(());
            }
            if state.syncing {
                state = self.synced.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            state.syncing = true;
            let target = state.end;
            let file = Arc::clone(&state.file);
            let path = state.path.clone();
            drop(state);
            let synced = file.sync_data();
            self.syncs.fetch_add(1, Ordering::Relaxed);
            state = lock(&self.state);
            state.syncing = false;
            match synced {
                Ok(()) if state.generation == generation => {
                    state.synced = state.synced.max(target);
                }
                Ok(()) => {}
                Err(e) => {
                    state.failed = Some(format!(
                        "a sync of the journal {} failed: {e}",
                        path.display()
                    ));
                }
            }
            self.synced.notify_all();
        }
    }

    /// Sets the journal aside when it has grown past `max`: synced whole, replaced by a new
    /// one; its blobs' files are then written and synced in the background and it is removed.
    fn rotate_if_full(&self, max: u64) {
        let mut state = lock(&self.state);
        if state.end < max || state.failed.is_some() {
            return;
        }
        if let Err(e) = state.file.sync_data() {
            state.failed = Some(format!(
                "a sync of the journal {} failed: {e}",
                state.path.display()
            ));
            self.synced.notify_all();
            return;
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let generation = state.generation + 1;
        let (file, path) = match create_journal(&self.dir, generation) {
            Ok(created) => created,
            Err(e) => {
                // The full journal stays in use: nothing is lost, it only grows further.
                tracing::warn!(error = %e, "a new content journal could not be started");
                return;
            }
        };
        let old = Arc::new(JournalRecords {
            path: std::mem::replace(&mut state.path, path),
            file: std::mem::replace(&mut state.file, Arc::new(file)),
            records: std::mem::take(&mut state.records),
        });
        lock(&self.aside).push(Arc::clone(&old));
        state.generation = generation;
        state.end = 0;
        state.synced = 0;
        self.synced.notify_all();
        drop(state);
        let (layout, aside) = (Arc::clone(&self.layout), Arc::clone(&self.aside));
        let spawned = std::thread::Builder::new()
            .name("blob-journal-checkpoint".into())
            .spawn(move || {
                if let Err(e) = retire(&layout, &old, &aside) {
                    tracing::warn!(error = %e, journal = %old.path.display(), "blob files were not written; the next checkpoint or open does it from their journal");
                }
            });
        match spawned {
            Ok(handle) => {
                let mut running = lock(&self.checkpoints);
                running.retain(|h| !h.is_finished());
                running.push(handle);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the content journal's checkpoint did not start; the next checkpoint or open does it");
            }
        }
    }

    /// Waits for the background checkpoints started so far.
    fn join_checkpoints(&self) {
        let running: Vec<_> = std::mem::take(&mut *lock(&self.checkpoints));
        for handle in running {
            let _ = handle.join();
        }
    }

    /// Writes and syncs every blob's file, removes the journals set aside and empties the one
    /// in use.
    fn checkpoint_now(&self) -> Result<(), BlobError> {
        self.join_checkpoints();
        let left: Vec<_> = lock(&self.aside).clone();
        for journal in &left {
            retire(&self.layout, journal, &self.aside)?;
        }
        let mut state = lock(&self.state);
        if state.failed.is_some() || state.end == 0 {
            return Ok(());
        }
        let current = JournalRecords {
            path: state.path.clone(),
            file: Arc::clone(&state.file),
            records: std::mem::take(&mut state.records),
        };
        let written = self.layout.write_out(&current);
        if let Err(e) = written.and_then(|paths| sync_files(&paths)) {
            state.records = current.records;
            return Err(e);
        }
        state.file.set_len(0).map_err(io_at(&state.path))?;
        state.file.sync_all().map_err(io_at(&state.path))?;
        state.end = 0;
        state.synced = 0;
        self.synced.notify_all();
        Ok(())
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.join_checkpoints();
    }
}

/// The blob `hash` in one of `journals`.
fn find_in(journals: &[Arc<JournalRecords>], hash: &ContentHash) -> Option<Journaled> {
    journals.iter().find_map(|journal| {
        journal.records.get(hash).map(|record| Journaled {
            file: Arc::clone(&journal.file),
            path: journal.path.clone(),
            record: *record,
            current: None,
        })
    })
}

/// Writes and syncs the files of a journal set aside, removes it, and takes it off `aside`.
fn retire(
    layout: &Layout,
    journal: &Arc<JournalRecords>,
    aside: &Mutex<Vec<Arc<JournalRecords>>>,
) -> Result<(), BlobError> {
    let written = layout.write_out(journal)?;
    sync_files(&written)?;
    match fs::remove_file(&journal.path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_at(&journal.path)(e)),
    }
    lock(aside).retain(|j| !Arc::ptr_eq(j, journal));
    Ok(())
}

/// Syncs files and, once each, the folders that hold them.
fn sync_files(paths: &[PathBuf]) -> Result<(), BlobError> {
    let mut folders: Vec<&Path> = Vec::new();
    for path in paths {
        File::open(path)
            .and_then(|f| f.sync_all())
            .map_err(io_at(path))?;
        if let Some(folder) = path.parent()
            && !folders.contains(&folder)
        {
            folders.push(folder);
        }
    }
    for folder in folders {
        sync_dir(folder)?;
    }
    Ok(())
}

/// A new, empty journal of `generation`, its name durable.
fn create_journal(dir: &Path, generation: u64) -> Result<(File, PathBuf), BlobError> {
    let path = journal_path(dir, generation);
    // Read too: blobs are read from the journal until their files are written.
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_at(&path))?;
    file.set_len(0).map_err(io_at(&path))?;
    sync_dir(dir)?;
    Ok((file, path))
}

/// Distinguishes temporary files of concurrent writes within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Layout {
    fn path_of(&self, hash: &ContentHash) -> PathBuf {
        let hex = hash.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Writes the file of every blob `journal` holds whose file is missing or damaged, and
    /// answers the files of all its blobs, none yet synced.
    fn write_out(&self, journal: &JournalRecords) -> Result<Vec<PathBuf>, BlobError> {
        let mut records: Vec<(&ContentHash, &Record)> = journal.records.iter().collect();
        records.sort_by_key(|(_, r)| r.offset);
        let mut written = Vec::with_capacity(records.len());
        for (hash, record) in records {
            let path = self.path_of(hash);
            match self.read_verified(hash, &path) {
                Ok(_) => {}
                Err(
                    BlobError::NotFound(_) | BlobError::Damaged { .. } | BlobError::TooLarge { .. },
                ) => {
                    let bytes = read_record(&journal.file, &journal.path, hash, *record, u64::MAX)?;
                    create_dir_durably(shard_of(&path)?)?;
                    self.write_file(hash, &bytes, &path)?;
                }
                Err(other) => return Err(other),
            }
            written.push(path);
        }
        Ok(written)
    }

    /// Writes a blob's file: to a temporary file, renamed into place, so that a reader finds
    /// the whole blob under its name or none. Not synced here.
    fn write_file(&self, hash: &ContentHash, bytes: &[u8], path: &Path) -> Result<(), BlobError> {
        let temp = self.temp_dir.join(format!(
            "{}.{}.{}",
            hash.to_hex(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written =
            write_new(&temp, bytes).and_then(|()| fs::rename(&temp, path).map_err(io_at(path)));
        if written.is_err() {
            // Best effort: the temporary file is garbage either way and is swept at open.
            let _ = fs::remove_file(&temp);
        }
        written
    }

    fn read_verified(&self, hash: &ContentHash, path: &Path) -> Result<Vec<u8>, BlobError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::NotFound(*hash));
            }
            Err(e) => return Err(io_at(path)(e)),
        };
        let limit = self.content_bytes_max;
        let mut bytes = Vec::new();
        // One byte past the limit tells an oversized file from one exactly at the limit without
        // reading an arbitrarily large file into memory.
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_at(path))?;
        if bytes.len() as u64 > limit {
            let size = fs::metadata(path).map_err(io_at(path))?.len();
            return Err(BlobError::TooLarge { bytes: size, limit });
        }
        checked(hash, bytes)
    }
}

/// `bytes` if they hash to `hash`; [`BlobError::Damaged`] otherwise. Every read of a blob,
/// from whichever store, passes through here.
pub(crate) fn checked(hash: &ContentHash, bytes: Vec<u8>) -> Result<Vec<u8>, BlobError> {
    let actual = content_hash(&bytes);
    if actual != *hash {
        return Err(BlobError::Damaged {
            expected: *hash,
            actual,
        });
    }
    Ok(bytes)
}

/// A blob's bytes from its journal record, checked against its hash.
fn read_record(
    file: &File,
    path: &Path,
    hash: &ContentHash,
    record: Record,
    limit: u64,
) -> Result<Vec<u8>, BlobError> {
    if record.len > limit {
        return Err(BlobError::TooLarge {
            bytes: record.len,
            limit,
        });
    }
    let len = usize::try_from(record.len)
        .map_err(|_| BlobError::Failed("a record too large to read".into()))?;
    let mut bytes = vec![0u8; len];
    read_exact_at(file, &mut bytes, record.offset).map_err(io_at(path))?;
    checked(hash, bytes)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

fn shard_of(path: &Path) -> Result<&Path, BlobError> {
    path.parent().ok_or_else(|| BlobError::Io {
        path: path.to_path_buf(),
        source: io::Error::other("a blob path has no folder"),
    })
}

impl BlobStore {
    /// Opens the store in `dir`, creating it when absent, writes the files of the blobs the
    /// journals of earlier runs hold, and removes temporary files that interrupted writes left
    /// more than `stale_temp_secs_max` ago.
    pub fn open(dir: impl Into<PathBuf>, options: BlobOptions) -> Result<Self, BlobError> {
        let dir = dir.into();
        create_dir_durably(&dir)?;
        let temp_dir = dir.join(".tmp");
        create_dir_durably(&temp_dir)?;
        let layout = Arc::new(Layout {
            dir,
            temp_dir,
            content_bytes_max: options.content_bytes_max,
        });
        let mut store = Self {
            layout,
            options,
            read_only: false,
            journal: None,
            found: Vec::new(),
        };
        store.remove_stale_temp_files()?;
        store.journal = Some(Arc::new(Journal::open(&store.layout)?));
        Ok(store)
    }

    /// Opens the store in `dir` to read it, changing nothing there (a missing folder reads as
    /// an empty store): what an audit of a read-only copy needs. Blobs whose files are not
    /// written yet are read from the journals found, as they are when the store opens.
    pub fn open_read_only(dir: impl Into<PathBuf>, options: BlobOptions) -> Self {
        let dir = dir.into();
        let journals = dir.join(".journal");
        let mut found = Vec::new();
        match journals_in(&journals) {
            Ok(left) => {
                for (_, path) in left {
                    match JournalRecords::read(path) {
                        Ok(journal) => found.push(Arc::new(journal)),
                        Err(e) => {
                            tracing::warn!(error = %e, "a content journal could not be read; blobs only it holds will not be found");
                        }
                    }
                }
            }
            Err(BlobError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, "the content journals could not be listed; blobs only they hold will not be found");
            }
        }
        Self {
            layout: Arc::new(Layout {
                temp_dir: dir.join(".tmp"),
                dir,
                content_bytes_max: options.content_bytes_max,
            }),
            options,
            read_only: true,
            journal: None,
            found,
        }
    }

    /// Why the store refuses puts, if it does: a write or sync of its journal failed, so what
    /// it holds is unknown until the next open replays it.
    pub fn failure(&self) -> Option<String> {
        self.journal
            .as_ref()
            .and_then(|j| lock(&j.state).failed.clone())
    }

    /// How many times the journal was synced: what group commit shares among puts.
    pub fn journal_syncs(&self) -> u64 {
        self.journal
            .as_ref()
            .map_or(0, |j| j.syncs.load(Ordering::Relaxed))
    }

    /// Writes and syncs every blob's file and empties the journal, so that the next open has
    /// nothing to replay: what a clean shutdown does.
    pub fn checkpoint(&self) -> Result<(), BlobError> {
        match &self.journal {
            Some(journal) => journal.checkpoint_now(),
            None => Ok(()),
        }
    }

    /// The folder of the store.
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    /// The bounds in force.
    pub fn options(&self) -> &BlobOptions {
        &self.options
    }

    /// Where the blob of `hash` lives once its file is written.
    pub fn path_of(&self, hash: &ContentHash) -> PathBuf {
        self.layout.path_of(hash)
    }

    /// The blob `hash` if a journal holds it.
    fn journaled(&self, hash: &ContentHash) -> Option<Journaled> {
        match &self.journal {
            Some(journal) => journal.find(hash),
            None => find_in(&self.found, hash),
        }
    }

    /// Stores `bytes` and returns their hash once they are on stable storage: their record in
    /// the journal synced, a sync shared with every put running at the same time. The blob's
    /// file is written later, from the journal, when the journal is set aside or checkpointed
    /// (or at the next open after a crash); reads find the blob in the journal meanwhile. A blob
    /// already stored with intact bytes is not rewritten; a damaged one is replaced by the good
    /// bytes.
    pub fn put(&self, bytes: &[u8]) -> Result<ContentHash, BlobError> {
        let Some(journal) = self.journal.as_ref().filter(|_| !self.read_only) else {
            return Err(BlobError::ReadOnly);
        };
        let size = bytes.len() as u64;
        if size > self.options.content_bytes_max {
            return Err(BlobError::TooLarge {
                bytes: size,
                limit: self.options.content_bytes_max,
            });
        }
        let hash = content_hash(bytes);
        if let Some(found) = journal.find(&hash) {
            // Recorded, but perhaps by a put whose record is not yet durable: wait for it.
            if let Some(generation) = found.current {
                journal.wait_durable(generation, found.record.end())?;
            }
            return Ok(hash);
        }
        match self.layout.read_verified(&hash, &self.path_of(&hash)) {
            Ok(_) => return Ok(hash),
            Err(
                BlobError::NotFound(_) | BlobError::Damaged { .. } | BlobError::TooLarge { .. },
            ) => {}
            Err(other) => return Err(other),
        }
        let (generation, end) = journal.append(&hash, bytes)?;
        journal.wait_durable(generation, end)?;
        journal.rotate_if_full(self.options.journal_bytes_max);
        Ok(hash)
    }

    /// The bytes of the blob `hash`, checked against the hash: from the journal that holds it
    /// when its file is not written yet, else from its file.
    pub fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        if let Some(found) = self.journaled(hash) {
            // The journal in use or one set aside, whose path may be gone: the file is open.
            return read_record(
                &found.file,
                &found.path,
                hash,
                found.record,
                self.options.content_bytes_max,
            );
        }
        self.layout.read_verified(hash, &self.path_of(hash))
    }

    /// Whether a blob named `hash` exists. The bytes are not checked; [`BlobStore::get`] does.
    pub fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError> {
        if self.journaled(hash).is_some() {
            return Ok(true);
        }
        let path = self.path_of(hash);
        match fs::metadata(&path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(BlobError::Io { path, source: e }),
        }
    }

    fn remove_stale_temp_files(&self) -> Result<(), BlobError> {
        let max_age = Duration::from_secs(self.options.stale_temp_secs_max);
        let now = SystemTime::now();
        let temp_dir = &self.layout.temp_dir;
        let entries = fs::read_dir(temp_dir).map_err(io_at(temp_dir))?;
        for entry in entries {
            let entry = entry.map_err(io_at(temp_dir))?;
            let modified = entry.metadata().and_then(|m| m.modified());
            let stale = match modified {
                Ok(at) => now.duration_since(at).is_ok_and(|age| age > max_age),
                Err(_) => false,
            };
            if stale {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        Ok(())
    }
}

/// Writes `bytes` to a new file at `path`.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), BlobError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_at(path))?;
    file.write_all(bytes).map_err(io_at(path))
}

/// Creates `dir` (and its parents) when absent and makes the new name durable by syncing the
/// folder that holds it.
fn create_dir_durably(dir: &Path) -> Result<(), BlobError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_at(dir))?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Syncs a folder, so that names created in or renamed into it survive a power loss.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// The standard library cannot open a folder for syncing here; on such platforms a new name is
/// durable once the file system's journal is flushed, which this store cannot force.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), BlobError> {
    Ok(())
}
