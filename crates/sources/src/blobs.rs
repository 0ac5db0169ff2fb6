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
//! (`DIR/.journal/<generation>.log`: records `"RLBJ" | length u32 LE | blake3 hash | bytes`),
//! writes the blob's file (to `DIR/.tmp/`, renamed into place, not synced), and returns once a
//! `fdatasync` of the journal covers its record. Concurrent puts share that sync: whichever
//! finds none running syncs the journal to its end and wakes every put it covered (group
//! commit), so the cost of making content durable is one sync per group, not two per blob (the
//! file and its folder, as it would be without the journal). When the journal passes
//! `journal_bytes_max` it is synced and set aside, a new one started, and a background thread
//! syncs the blob files it covers and their folders, then removes it. An open replays every
//! journal left (a crash, or a power loss before the files reached the disk): each intact
//! record whose file is missing or damaged is written again, the files are synced, and the
//! journals removed. A record cut short by a crash is one whose put never returned, and is
//! ignored. The journal holds a blob only until its file is synced, so content removed from
//! the store (a redaction) does not linger there.
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
    dir: PathBuf,
    temp_dir: PathBuf,
    options: BlobOptions,
    read_only: bool,
    /// None when read-only.
    journal: Option<Arc<Journal>>,
}

/// The bytes at the start of every journal record.
const RECORD_MAGIC: &[u8; 4] = b"RLBJ";
/// A record's header: magic, length, hash.
const RECORD_HEADER_LEN: usize = 4 + 4 + 32;

/// The journal that makes puts durable, one group sync at a time.
#[derive(Debug)]
struct Journal {
    dir: PathBuf,
    state: Mutex<JournalState>,
    synced: Condvar,
    /// `fdatasync`s of the journal so far.
    syncs: AtomicU64,
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
    /// Blobs whose records are in this journal, by hash: where their record ends.
    pending: HashMap<ContentHash, u64>,
    /// Files written for this journal's records, not synced.
    dirty: Vec<PathBuf>,
    /// Why the journal refuses writes, if it does.
    failed: Option<String>,
}

fn lock(m: &Mutex<JournalState>) -> MutexGuard<'_, JournalState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn journal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{generation:020}.log"))
}

impl Journal {
    /// Opens the journal folder: replays what earlier runs left, then starts a new journal.
    fn open(store: &BlobStore) -> Result<Journal, BlobError> {
        let dir = store.dir.join(".journal");
        create_dir_durably(&dir)?;
        let mut left: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_at(&dir))? {
            let entry = entry.map_err(io_at(&dir))?;
            let path = entry.path();
            let generation = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".log"))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(generation) = generation {
                left.push((generation, path));
            }
        }
        left.sort();
        let mut written = Vec::new();
        for (_, path) in &left {
            store.replay(path, &mut written)?;
        }
        sync_files(&written)?;
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
            state: Mutex::new(JournalState {
                generation,
                file: Arc::new(file),
                path,
                end: 0,
                synced: 0,
                syncing: false,
                pending: HashMap::new(),
                dirty: Vec::new(),
                failed: None,
            }),
            synced: Condvar::new(),
            syncs: AtomicU64::new(0),
            checkpoints: Mutex::new(Vec::new()),
        })
    }

    /// Appends a blob's record; returns the journal generation and where the record ends.
    fn append(
        &self,
        hash: &ContentHash,
        bytes: &[u8],
        path: &Path,
    ) -> Result<(u64, u64), BlobError> {
        let mut state = lock(&self.state);
        if let Some(reason) = &state.failed {
            return Err(BlobError::Failed(reason.clone()));
        }
        if let Some(end) = state.pending.get(hash) {
            return Ok((state.generation, *end));
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
        let end = state.end;
        state.pending.insert(*hash, end);
        state.dirty.push(path.to_path_buf());
        Ok((state.generation, end))
    }

    /// The generation and record end of a blob whose record is not yet known durable.
    fn pending(&self, hash: &ContentHash) -> Option<(u64, u64)> {
        let state = lock(&self.state);
        state.pending.get(hash).map(|end| (state.generation, *end))
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
    /// one; the files it covers are then synced in the background and it is removed.
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
        let old = std::mem::replace(&mut state.path, path);
        let dirty = std::mem::take(&mut state.dirty);
        state.file = Arc::new(file);
        state.generation = generation;
        state.end = 0;
        state.synced = 0;
        state.pending.clear();
        self.synced.notify_all();
        drop(state);
        let spawned = std::thread::Builder::new()
            .name("blob-journal-checkpoint".into())
            .spawn(move || checkpoint(&old, &dirty));
        match spawned {
            Ok(handle) => {
                let mut running = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
                running.retain(|h| !h.is_finished());
                running.push(handle);
            }
            Err(e) => {
                tracing::warn!(error = %e, "the content journal's checkpoint did not start; the next open replays it");
            }
        }
    }

    /// Waits for the background checkpoints started so far.
    fn join_checkpoints(&self) {
        let running: Vec<_> =
            std::mem::take(&mut *self.checkpoints.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in running {
            let _ = handle.join();
        }
    }

    /// Makes every blob file durable and removes the journal that covered them.
    fn checkpoint_now(&self) -> Result<(), BlobError> {
        self.join_checkpoints();
        let mut state = lock(&self.state);
        if state.failed.is_some() || state.end == 0 {
            return Ok(());
        }
        sync_files(&state.dirty)?;
        state.dirty.clear();
        state.file.set_len(0).map_err(io_at(&state.path))?;
        state.file.sync_all().map_err(io_at(&state.path))?;
        state.end = 0;
        state.synced = 0;
        state.pending.clear();
        self.synced.notify_all();
        Ok(())
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.join_checkpoints();
    }
}

/// Syncs the blob files of a journal set aside, then removes it.
fn checkpoint(journal: &Path, dirty: &[PathBuf]) {
    match sync_files(dirty) {
        Ok(()) => {
            if let Err(e) = fs::remove_file(journal) {
                tracing::warn!(error = %e, journal = %journal.display(), "a content journal was not removed; the next open replays it");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, journal = %journal.display(), "blob files were not synced; the next open replays their journal");
        }
    }
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
    let file = OpenOptions::new()
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

impl BlobStore {
    /// Opens the store in `dir`, creating it when absent, and removes temporary files that
    /// interrupted writes left more than `stale_temp_secs_max` ago.
    pub fn open(dir: impl Into<PathBuf>, options: BlobOptions) -> Result<Self, BlobError> {
        let dir = dir.into();
        create_dir_durably(&dir)?;
        let temp_dir = dir.join(".tmp");
        create_dir_durably(&temp_dir)?;
        let mut store = Self {
            dir,
            temp_dir,
            options,
            read_only: false,
            journal: None,
        };
        store.remove_stale_temp_files()?;
        store.journal = Some(Arc::new(Journal::open(&store)?));
        Ok(store)
    }

    /// Rewrites the blobs of a journal left by an earlier run whose files are missing or
    /// damaged, adding every file it names to `written`. A record cut short ends the replay of
    /// that journal: it, and anything after it, belongs to a put that never returned.
    fn replay(&self, journal: &Path, written: &mut Vec<PathBuf>) -> Result<(), BlobError> {
        let bytes = match fs::read(journal) {
            Ok(bytes) => bytes,
            // Removed meanwhile by the checkpoint that covered it: nothing left to replay.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_at(journal)(e)),
        };
        let mut at = 0usize;
        while let Some(header) = bytes.get(at..at + RECORD_HEADER_LEN) {
            if &header[..4] != RECORD_MAGIC {
                break;
            }
            let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
            let mut hash = [0u8; 32];
            hash.copy_from_slice(&header[8..40]);
            let hash = Hash32(hash);
            let Some(content) = bytes.get(at + RECORD_HEADER_LEN..at + RECORD_HEADER_LEN + len)
            else {
                break;
            };
            if content_hash(content) != hash {
                break;
            }
            at += RECORD_HEADER_LEN + len;
            let path = self.path_of(&hash);
            match self.read_verified(&hash, &path) {
                Ok(_) => {}
                Err(
                    BlobError::NotFound(_) | BlobError::Damaged { .. } | BlobError::TooLarge { .. },
                ) => {
                    create_dir_durably(self.shard_of(&path)?)?;
                    self.write_file(&hash, content, &path)?;
                }
                Err(other) => return Err(other),
            }
            written.push(path);
        }
        Ok(())
    }

    /// Opens the store in `dir` to read it, changing nothing there (a missing folder reads as
    /// an empty store): what an audit of a read-only copy needs.
    pub fn open_read_only(dir: impl Into<PathBuf>, options: BlobOptions) -> Self {
        let dir = dir.into();
        Self {
            temp_dir: dir.join(".tmp"),
            dir,
            options,
            read_only: true,
            journal: None,
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

    /// Makes every blob's file durable and empties the journal, so that the next open has
    /// nothing to replay: what a clean shutdown does.
    pub fn checkpoint(&self) -> Result<(), BlobError> {
        match &self.journal {
            Some(journal) => journal.checkpoint_now(),
            None => Ok(()),
        }
    }

    /// The folder of the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bounds in force.
    pub fn options(&self) -> &BlobOptions {
        &self.options
    }

    /// Where the blob of `hash` lives.
    pub fn path_of(&self, hash: &ContentHash) -> PathBuf {
        let hex = hash.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Stores `bytes` and returns their hash once they are on stable storage: their record in
    /// the journal synced (a sync shared with every put running at the same time) and their
    /// file in place. A blob already stored with intact bytes is not rewritten; a damaged one
    /// is replaced by the good bytes.
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
        let path = self.path_of(&hash);
        let shard = self.shard_of(&path)?;
        match self.read_verified(&hash, &path) {
            Ok(_) => {
                // Written, but perhaps by a put whose record is not yet durable: wait for it.
                if let Some((generation, end)) = journal.pending(&hash) {
                    journal.wait_durable(generation, end)?;
                }
                return Ok(hash);
            }
            Err(
                BlobError::NotFound(_) | BlobError::Damaged { .. } | BlobError::TooLarge { .. },
            ) => {}
            Err(other) => return Err(other),
        }
        create_dir_durably(shard)?;
        let (generation, end) = journal.append(&hash, bytes, &path)?;
        self.write_file(&hash, bytes, &path)?;
        journal.wait_durable(generation, end)?;
        journal.rotate_if_full(self.options.journal_bytes_max);
        Ok(hash)
    }

    /// Writes a blob's file: to a temporary file, renamed into place, so that a reader finds
    /// the whole blob under its name or none. Not synced: the journal made it durable.
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

    /// The bytes of the blob `hash`, checked against the hash.
    pub fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        self.read_verified(hash, &self.path_of(hash))
    }

    /// Whether a blob named `hash` exists. The bytes are not checked; [`BlobStore::get`] does.
    pub fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError> {
        let path = self.path_of(hash);
        match fs::metadata(&path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(BlobError::Io { path, source: e }),
        }
    }

    fn shard_of<'p>(&self, path: &'p Path) -> Result<&'p Path, BlobError> {
        path.parent().ok_or_else(|| BlobError::Io {
            path: path.to_path_buf(),
            source: io::Error::other("a blob path has no folder"),
        })
    }

    fn read_verified(&self, hash: &ContentHash, path: &Path) -> Result<Vec<u8>, BlobError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::NotFound(*hash));
            }
            Err(e) => return Err(io_at(path)(e)),
        };
        let limit = self.options.content_bytes_max;
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
        let actual = content_hash(&bytes);
        if actual != *hash {
            return Err(BlobError::Damaged {
                expected: *hash,
                actual,
            });
        }
        Ok(bytes)
    }

    fn remove_stale_temp_files(&self) -> Result<(), BlobError> {
        let max_age = Duration::from_secs(self.options.stale_temp_secs_max);
        let now = SystemTime::now();
        let entries = fs::read_dir(&self.temp_dir).map_err(io_at(&self.temp_dir))?;
        for entry in entries {
            let entry = entry.map_err(io_at(&self.temp_dir))?;
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
