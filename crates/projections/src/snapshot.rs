//! Snapshots of task states, kept in a sled database in a directory of their own.
//!
//! Why sled rather than files: a snapshot round writes many tasks and a manifest, and they must
//! change together; sled applies a batch atomically, orders keys so that "the newest snapshot of
//! a task at or below version v" is one range lookup, and is already part of the build. Its weak
//! durability (`flush` is not an `fsync`) does not matter here: snapshots are derived data, and
//! everything read back is checked against the ledger, so a lost or torn snapshot costs a
//! rebuild of what it covered, never a wrong answer.
//!
//! Layout, one tree:
//!
//! - `format` → the format this build writes, which names [`research::STATE_FORMAT_VERSION`];
//!   any other value means every snapshot is of another shape and the directory is rebuilt.
//! - `manifest` → `{next_seq, last_hash, tasks}`: the entries hold every task as of the
//!   ledger's first `next_seq` events, the last of which has hash `last_hash`.
//! - `e ‖ len(task) u16 ‖ task` → the task's index entry as of the manifest: what the task
//!   index lists of it, its version, first and last seq, last hash, and its state hash. Written
//!   in the same atomic batch as the manifest, so that an open reads the index of every task
//!   without reading a single state.
//! - `s ‖ len(task) u16 ‖ task ‖ version u64` (big endian) → one snapshot of a task at a stream
//!   version: the state's canonical bytes, their hash, and the seq and hash of the task's event
//!   at that version. Written with the manifest, or alone when a state leaves the bounded cache
//!   of the read models before the next round.
//!
//! A snapshot is used only when its bytes hash to the recorded state hash, decode to a state of
//! the recorded version, and the ledger's event at the recorded seq has the recorded hash and is
//! that version of that task. Anything else is discarded and reported. States are loaded, and
//! so checked, when a task is first needed, not at open: an open of a large ledger reads the
//! manifest, checks it against the ledger, and reads the entries.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use ledger::{Digest, Ledger};
use research::TaskState;
use serde::{Deserialize, Serialize};

use research::Hash32;

use crate::error::SnapshotError;
use crate::hash::bytes_hash;
use crate::model::{Summary, TaskEntry, search_text};

const FORMAT_KEY: &[u8] = b"format";
const MANIFEST_KEY: &[u8] = b"manifest";
const SNAPSHOT_TAG: u8 = b's';
const ENTRY_TAG: u8 = b'e';

/// The format this build writes and reads.
fn format_mark() -> Vec<u8> {
    format!(
        "research-ledger/projections/snapshots/v2 task-state/{}",
        research::STATE_FORMAT_VERSION
    )
    .into_bytes()
}

/// What a snapshot round covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    /// The snapshots hold every task as of the events before this seq.
    pub(crate) next_seq: u64,
    /// The hash of the event at `next_seq - 1`, zero when `next_seq` is 0.
    pub(crate) last_hash: [u8; 32],
    /// How many tasks existed then; fewer found means some were lost.
    pub(crate) tasks: u64,
}

/// One stored snapshot. Field order is the encoding: never reorder.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    task_id: String,
    version: u64,
    last_seq: u64,
    last_hash: [u8; 32],
    state_hash: [u8; 32],
    state: Vec<u8>,
}

/// One stored index entry. Field order is the encoding: never reorder.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EntryRecord {
    task_id: String,
    version: u64,
    first_seq: u64,
    last_seq: u64,
    last_hash: [u8; 32],
    updated_at_micros: i64,
    state_hash: Option<[u8; 32]>,
    summary: Summary,
}

impl EntryRecord {
    fn of(task_id: &str, entry: &TaskEntry) -> Self {
        EntryRecord {
            task_id: task_id.to_owned(),
            version: entry.version,
            first_seq: entry.first_seq,
            last_seq: entry.last_seq,
            last_hash: entry.last_hash.0,
            updated_at_micros: entry.updated_at.timestamp_micros(),
            state_hash: entry.hash.map(|h| h.0),
            summary: entry.summary.clone(),
        }
    }

    /// The entry it records, as a newly opened model holds it: recorded and, as far as the
    /// store knows, snapshotted at its version (a load finds the newest snapshot there is).
    fn entry(self) -> Result<(String, TaskEntry), String> {
        let updated_at = DateTime::<Utc>::from_timestamp_micros(self.updated_at_micros)
            .ok_or_else(|| format!("the entry of {} has no valid time", self.task_id))?;
        if self.version == 0 || self.last_seq < self.first_seq {
            return Err(format!(
                "the entry of {} is inconsistent: version {}, seqs {}..{}",
                self.task_id, self.version, self.first_seq, self.last_seq
            ));
        }
        let entry = TaskEntry {
            search_text: search_text(&self.summary.question, &self.summary.constraints),
            summary: self.summary,
            version: self.version,
            first_seq: self.first_seq,
            last_seq: self.last_seq,
            last_hash: Digest(self.last_hash),
            updated_at,
            snapshot_version: self.version,
            recorded_version: self.version,
            hash: self.state_hash.map(Hash32),
        };
        Ok((self.task_id, entry))
    }
}

/// A task's state to write.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) task_id: String,
    pub(crate) version: u64,
    pub(crate) last_seq: u64,
    pub(crate) last_hash: Digest,
    pub(crate) state: std::sync::Arc<TaskState>,
}

/// A snapshot that passed every check.
#[derive(Debug)]
pub(crate) struct Valid {
    pub(crate) state: TaskState,
    pub(crate) version: u64,
    pub(crate) last_seq: u64,
}

/// A snapshot that was found unusable and removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discarded {
    /// The task, when the key could be read.
    pub task_id: Option<String>,
    /// The version, when the key could be read.
    pub version: Option<u64>,
    /// Why it was discarded.
    pub reason: String,
}

/// What a snapshot round wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotReport {
    /// The snapshots cover every event before this seq.
    pub next_seq: u64,
    /// Tasks whose state was written (those that changed since their last snapshot).
    pub tasks_written: u64,
    /// Older snapshots removed to keep `snapshots_per_task_max`.
    pub snapshots_pruned: u64,
}

/// What the directory held when it was opened.
#[derive(Debug)]
pub(crate) enum Found {
    /// Nothing: a new directory.
    Empty,
    /// Nothing usable; the reason says why.
    Unusable(String),
    /// The index entry of every task as of `manifest.next_seq`.
    Entries {
        manifest: Manifest,
        /// Every task's entry.
        entries: Vec<(String, TaskEntry)>,
    },
}

/// The snapshot database.
#[derive(Debug)]
pub(crate) struct SnapshotStore {
    /// Taken only when the store is dropped.
    db: Option<sled::Db>,
    dir: PathBuf,
    cache_bytes: u64,
    /// Bytes written since the database opened: what its next open replays from sled's log.
    written: AtomicU64,
    /// Past this many bytes written, dropping the store settles it.
    settle_after_bytes: u64,
}

/// Bytes written to the snapshot database since it opened past which dropping the store
/// settles it (see [`SnapshotStore`]'s `Drop`): about a tenth of a second of replay.
const SETTLE_AFTER_BYTES: u64 = 32 * 1024 * 1024;

impl Drop for SnapshotStore {
    /// Closes the database and, when much was written to it since it opened, opens and closes
    /// it once more. sled 0.34 writes the snapshot of its page table only when a database
    /// opens, so the next open replays from sled's log everything written since the last one:
    /// a second of a restart after a million events. Done here, on the way out, while the
    /// ledger's lock is still held, the next start does not pay it; after a crash it does.
    fn drop(&mut self) {
        let Some(db) = self.db.take() else {
            return;
        };
        if let Err(e) = db.flush() {
            tracing::warn!(error = %e, "the snapshot database was not flushed on close");
        }
        drop(db);
        if *self.written.get_mut() < self.settle_after_bytes {
            return;
        }
        let started = std::time::Instant::now();
        match open_db(&self.dir, self.cache_bytes) {
            Ok(db) => {
                drop(db);
                tracing::info!(
                    ms = started.elapsed().as_millis() as u64,
                    "the read models' snapshots were settled on close, so the next open need not replay them"
                );
            }
            Err(e) => tracing::warn!(error = %e, "the snapshot database was not settled on close"),
        }
    }
}

/// Opens the sled database in `dir`. The caller holds the ledger's lock, so a sled lock still
/// held here belongs to a store of this process that is closing (sled lets go of its file lock
/// from a background thread): wait for it, briefly.
fn open_db(dir: &Path, cache_bytes: u64) -> sled::Result<sled::Db> {
    let cache_bytes = cache_bytes.max(crate::limits::SNAPSHOT_CACHE_BYTES_MIN);
    let config = sled::Config::new().path(dir).cache_capacity(cache_bytes);
    let mut attempts = 0;
    loop {
        match config.open() {
            Err(sled::Error::Io(e)) if is_lock_held(&e) && attempts < 250 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

fn store_error(op: &'static str) -> impl Fn(sled::Error) -> SnapshotError {
    move |e| SnapshotError::Store {
        op,
        detail: e.to_string(),
    }
}

fn key(task_id: &str, version: u64) -> Vec<u8> {
    let mut key = prefix(task_id);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

/// The key prefix of every snapshot of one task. The length prefix keeps one task's keys from
/// running into another's whose id extends it.
fn prefix(task_id: &str) -> Vec<u8> {
    tagged(SNAPSHOT_TAG, task_id)
}

/// The key of a task's index entry.
fn entry_key(task_id: &str) -> Vec<u8> {
    tagged(ENTRY_TAG, task_id)
}

fn tagged(tag: u8, task_id: &str) -> Vec<u8> {
    let len = u16::try_from(task_id.len()).unwrap_or(u16::MAX);
    let mut key = Vec::with_capacity(3 + task_id.len() + 8);
    key.push(tag);
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(task_id.as_bytes());
    key
}

/// Reads a snapshot key back into its task and version.
fn parse_key(key: &[u8]) -> Option<(String, u64)> {
    let (&tag, rest) = key.split_first()?;
    if tag != SNAPSHOT_TAG {
        return None;
    }
    let (len, rest) = rest.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    if rest.len() != len + 8 {
        return None;
    }
    let (task, version) = rest.split_at(len);
    let task = std::str::from_utf8(task).ok()?.to_owned();
    let version = u64::from_be_bytes(version.try_into().ok()?);
    Some((task, version))
}

fn decode_exact<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, rest) = postcard::take_from_bytes::<T>(bytes).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(value)
}

impl SnapshotStore {
    /// Opens (creating if needed) the database in `dir`, which must be the projector's own. A
    /// database sled reports as corrupt is derived data: it is removed and started afresh.
    pub(crate) fn open(
        dir: &Path,
        cache_bytes: u64,
    ) -> Result<(SnapshotStore, Option<String>), SnapshotError> {
        let open = || open_db(dir, cache_bytes);
        let (db, wiped) = match open() {
            Ok(db) => (db, None),
            Err(sled::Error::Corruption { .. }) => {
                tracing::warn!(dir = %dir.display(), "the snapshot database is corrupt; starting it afresh");
                std::fs::remove_dir_all(dir).map_err(|e| SnapshotError::Store {
                    op: "remove a corrupt database",
                    detail: e.to_string(),
                })?;
                let db = open().map_err(store_error("open"))?;
                (db, Some("sled reported the database corrupt".to_string()))
            }
            Err(e) => return Err(store_error("open")(e)),
        };
        Ok((
            SnapshotStore {
                db: Some(db),
                dir: dir.to_path_buf(),
                cache_bytes,
                written: AtomicU64::new(0),
                settle_after_bytes: SETTLE_AFTER_BYTES,
            },
            wiped,
        ))
    }

    fn db(&self) -> Result<&sled::Db, SnapshotError> {
        self.db.as_ref().ok_or(SnapshotError::Store {
            op: "use",
            detail: "the snapshot database is closed".into(),
        })
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads what the directory holds: the manifest, checked against the ledger, and every
    /// task's index entry. States are not read here; [`SnapshotStore::at_or_below`] reads and
    /// checks one when it is needed.
    pub(crate) fn load(&self, ledger: &Ledger) -> Result<Found, SnapshotError> {
        let format = self.db()?.get(FORMAT_KEY).map_err(store_error("read"))?;
        let Some(format) = format else {
            return Ok(if self.db()?.is_empty() {
                Found::Empty
            } else {
                Found::Unusable("the directory holds no format mark".into())
            });
        };
        if *format != *format_mark() {
            return Ok(Found::Unusable(format!(
                "the snapshots are of format {:?}; this build reads {:?}",
                String::from_utf8_lossy(&format),
                String::from_utf8_lossy(&format_mark())
            )));
        }
        let manifest = match self.db()?.get(MANIFEST_KEY).map_err(store_error("read"))? {
            None => return Ok(Found::Unusable("the manifest is missing".into())),
            Some(bytes) => match decode_exact::<Manifest>(&bytes) {
                Ok(manifest) => manifest,
                Err(e) => return Ok(Found::Unusable(format!("the manifest is damaged: {e}"))),
            },
        };
        if let Some(reason) = manifest_mismatch(ledger, &manifest)? {
            return Ok(Found::Unusable(reason));
        }
        let mut entries = Vec::with_capacity(usize::try_from(manifest.tasks).unwrap_or(0));
        for item in self.db()?.scan_prefix([ENTRY_TAG]) {
            let (_, bytes) = item.map_err(store_error("read"))?;
            let entry = decode_exact::<EntryRecord>(&bytes).and_then(EntryRecord::entry);
            match entry {
                Ok((task_id, entry)) if entry.last_seq < manifest.next_seq => {
                    entries.push((task_id, entry));
                }
                Ok((task_id, entry)) => {
                    return Ok(Found::Unusable(format!(
                        "the entry of {task_id} covers seq {}, beyond the manifest's {}",
                        entry.last_seq, manifest.next_seq
                    )));
                }
                Err(e) => return Ok(Found::Unusable(format!("an entry is damaged: {e}"))),
            }
        }
        if entries.len() as u64 != manifest.tasks {
            return Ok(Found::Unusable(format!(
                "the manifest names {} tasks; entries of {} were found",
                manifest.tasks,
                entries.len()
            )));
        }
        Ok(Found::Entries { manifest, entries })
    }

    /// The newest valid snapshot of a task at or below `version`, and the newer ones found
    /// unusable on the way, which are removed.
    pub(crate) fn at_or_below(
        &self,
        ledger: &Ledger,
        task_id: &str,
        version: u64,
    ) -> Result<(Option<Valid>, Vec<Discarded>), SnapshotError> {
        let mut discarded = Vec::new();
        let mut found_valid = None;
        for item in self
            .db()?
            .range(key(task_id, 0)..=key(task_id, version))
            .rev()
        {
            let (k, bytes) = item.map_err(store_error("read"))?;
            let Some((_, found)) = parse_key(&k) else {
                continue;
            };
            match check(ledger, task_id, found, &bytes)? {
                Ok(valid) => {
                    found_valid = Some(valid);
                    break;
                }
                Err(reason) => {
                    tracing::warn!(task = %task_id, version = found, %reason, "discarding a snapshot");
                    if let Err(e) = self.db()?.remove(&k) {
                        tracing::warn!(error = %e, "an unusable snapshot was not removed");
                    }
                    discarded.push(Discarded {
                        task_id: Some(task_id.to_owned()),
                        version: Some(found),
                        reason,
                    });
                }
            }
        }
        Ok((found_valid, discarded))
    }

    /// Writes the index entries and states of a snapshot round and a manifest saying they
    /// cover every event before `next_seq`, all in one atomic batch; keeps at most `keep`
    /// snapshots per task.
    pub(crate) fn write(
        &self,
        manifest: Manifest,
        entries: &[(String, TaskEntry)],
        states: &[Pending],
        keep: usize,
    ) -> Result<SnapshotReport, SnapshotError> {
        let mut batch = sled::Batch::default();
        let manifest_bytes = postcard_bytes(&manifest);
        let mut bytes = manifest_bytes.len() as u64;
        batch.insert(FORMAT_KEY, format_mark());
        batch.insert(MANIFEST_KEY, manifest_bytes);
        for (task_id, entry) in entries {
            let record = postcard_bytes(&EntryRecord::of(task_id, entry));
            bytes += record.len() as u64;
            batch.insert(entry_key(task_id), record);
        }
        let (pruned, states_bytes) = self.add_states(&mut batch, states, keep)?;
        self.apply(batch, bytes + states_bytes)?;
        self.db()?.flush().map_err(store_error("flush"))?;
        Ok(SnapshotReport {
            next_seq: manifest.next_seq,
            tasks_written: entries.len() as u64,
            snapshots_pruned: pruned,
        })
    }

    /// Writes states alone, between rounds: those that leave the bounded cache before their
    /// changes were snapshotted. Not flushed: a lost one costs a longer load, never a wrong one.
    pub(crate) fn write_states(
        &self,
        states: &[Pending],
        keep: usize,
    ) -> Result<(), SnapshotError> {
        let mut batch = sled::Batch::default();
        let (_, bytes) = self.add_states(&mut batch, states, keep)?;
        self.apply(batch, bytes)
    }

    /// Writes `batch` of `bytes`, counted towards what the next open would replay.
    fn apply(&self, batch: sled::Batch, bytes: u64) -> Result<(), SnapshotError> {
        self.db()?
            .apply_batch(batch)
            .map_err(store_error("write"))?;
        self.written.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Adds `states` to `batch`, and the removal of each task's snapshots beyond the newest
    /// `keep`; answers how many were removed and how many bytes were added.
    fn add_states(
        &self,
        batch: &mut sled::Batch,
        states: &[Pending],
        keep: usize,
    ) -> Result<(u64, u64), SnapshotError> {
        let keep = keep.max(1);
        let mut pruned = 0u64;
        let mut bytes = 0u64;
        for p in states {
            let state = p.state.canonical_bytes();
            let record = Record {
                task_id: p.task_id.clone(),
                version: p.version,
                last_seq: p.last_seq,
                last_hash: p.last_hash.0,
                state_hash: bytes_hash(&state).0,
                state,
            };
            let new_key = key(&p.task_id, p.version);
            let record = postcard_bytes(&record);
            bytes += record.len() as u64;
            batch.insert(new_key.clone(), record);
            let mut keys: Vec<sled::IVec> = Vec::new();
            for item in self.db()?.scan_prefix(prefix(&p.task_id)) {
                let (k, _) = item.map_err(store_error("read"))?;
                if *k != *new_key {
                    keys.push(k);
                }
            }
            // Keys sort by version; the new snapshot is the newest and is kept.
            let excess = (keys.len() + 1).saturating_sub(keep);
            for k in keys.into_iter().take(excess) {
                batch.remove(k);
                pruned += 1;
            }
        }
        Ok((pruned, bytes))
    }

    /// Removes every snapshot and the manifest, before a full rebuild writes new ones.
    pub(crate) fn clear(&self) -> Result<(), SnapshotError> {
        self.db()?.clear().map_err(store_error("clear"))?;
        self.db()?.flush().map_err(store_error("flush"))?;
        Ok(())
    }
}

fn postcard_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Plain integers, byte arrays, strings and byte vectors always encode into a Vec.
    postcard::to_stdvec(value).unwrap_or_default()
}

/// Why the manifest does not describe a prefix of this ledger, if it does not.
fn manifest_mismatch(
    ledger: &Ledger,
    manifest: &Manifest,
) -> Result<Option<String>, SnapshotError> {
    let head = ledger.head();
    if manifest.next_seq > head.size {
        return Ok(Some(format!(
            "the snapshots cover {} events; the ledger holds {}",
            manifest.next_seq, head.size
        )));
    }
    let Some(last) = manifest.next_seq.checked_sub(1) else {
        return Ok((manifest.last_hash != [0; 32])
            .then(|| "the manifest covers no event but names a hash".to_string()));
    };
    let event = ledger.get(last).map_err(|e| SnapshotError::Store {
        op: "read the ledger",
        detail: e.to_string(),
    })?;
    Ok(match event {
        Some(event) if event.hash.0 == manifest.last_hash => None,
        Some(event) => Some(format!(
            "the snapshots were taken of another ledger: seq {last} has hash {}, the manifest names {}",
            event.hash,
            Digest(manifest.last_hash)
        )),
        None => Some(format!("the ledger has no event at seq {last}")),
    })
}

/// Checks one stored snapshot against itself and the ledger. The outer error is a failure to
/// read the ledger; the inner one says why the snapshot is unusable.
fn check(
    ledger: &Ledger,
    task_id: &str,
    version: u64,
    bytes: &[u8],
) -> Result<Result<Valid, String>, SnapshotError> {
    let record = match decode_exact::<Record>(bytes) {
        Ok(record) => record,
        Err(e) => return Ok(Err(format!("the record does not decode: {e}"))),
    };
    if record.task_id != task_id || record.version != version {
        return Ok(Err(format!(
            "the record is of {} version {}, stored under {task_id} version {version}",
            record.task_id, record.version
        )));
    }
    let state = match decode_exact::<TaskState>(&record.state) {
        Ok(state) => state,
        Err(e) => return Ok(Err(format!("the state does not decode: {e}"))),
    };
    // Hashing the state re-encoded, not the stored bytes, also proves the bytes round-trip.
    if bytes_hash(&state.canonical_bytes()).0 != record.state_hash {
        return Ok(Err("the state does not match its recorded hash".into()));
    }
    if state.version() != version || state.task().is_none() {
        return Ok(Err(format!(
            "the state is at version {}, not {version}",
            state.version()
        )));
    }
    let event = ledger
        .get(record.last_seq)
        .map_err(|e| SnapshotError::Store {
            op: "read the ledger",
            detail: e.to_string(),
        })?;
    let Some(event) = event else {
        return Ok(Err(format!(
            "the ledger has no event at seq {}",
            record.last_seq
        )));
    };
    if event.hash.0 != record.last_hash {
        return Ok(Err(format!(
            "the ledger's event at seq {} has hash {}, the snapshot names {}",
            record.last_seq,
            event.hash,
            Digest(record.last_hash)
        )));
    }
    if event.stream != task_id || event.stream_version != version {
        return Ok(Err(format!(
            "the ledger's event at seq {} is {} version {}",
            record.last_seq, event.stream, event.stream_version
        )));
    }
    Ok(Ok(Valid {
        state,
        version,
        last_seq: record.last_seq,
    }))
}

/// Whether sled failed to open because another handle still holds its file lock. sled wraps
/// the operating system's `WouldBlock` in an error of its own wording.
fn is_lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ledger::storage::memory::{Faults, MemoryStorage};
    use ledger::{AppendRequest, ExpectedVersion, LedgerOptions, NewEvent, RecordedEvent};
    use research::event::{TaskClosed, TaskOpened};
    use research::rules::{Mode, RuleSet};

    use super::*;
    use crate::model::meta;

    /// A ledger holding one task of two events, the task's state, and its events.
    fn one_task() -> (Ledger, TaskState, Vec<RecordedEvent>) {
        let ledger = Ledger::with_storage(
            Arc::new(MemoryStorage::new(Faults::default(), 1)),
            LedgerOptions {
                checkpoint_interval: None,
                ..LedgerOptions::default()
            },
        );
        let opened = research::Event::TaskOpened(TaskOpened {
            task_id: "t".into(),
            question: "Q?".into(),
            constraints: vec![],
            research_date: chrono::NaiveDate::from_ymd_opt(2025, 6, 30).unwrap(),
            mode: Mode::AgentLed,
            rules: RuleSet::v1(),
            conflict_decisions: None,
        });
        let closed = research::Event::TaskClosed(TaskClosed { reason: None });
        let events = [opened, closed]
            .iter()
            .map(|e| NewEvent {
                kind: e.kind().into(),
                payload: research::encode(e),
                causation: vec![],
            })
            .collect();
        ledger
            .append(AppendRequest {
                stream: "t".into(),
                expected: ExpectedVersion::Exact(0),
                actor: "alice".into(),
                events,
                idempotency: None,
                content: Vec::new(),
            })
            .unwrap();
        let recorded = ledger.read_range(0, 2).unwrap();
        let mut state = TaskState::new();
        for e in &recorded {
            research::evolve(
                &mut state,
                &research::decode(&e.kind, &e.payload).unwrap(),
                &meta(e),
            );
        }
        (ledger, state, recorded)
    }

    fn pending(state: &TaskState, last_seq: u64, last_hash: Digest) -> Pending {
        Pending {
            task_id: "t".into(),
            version: state.version(),
            last_seq,
            last_hash,
            state: Arc::new(state.clone()),
        }
    }

    fn entry(state: &TaskState, events: &[RecordedEvent]) -> (String, TaskEntry) {
        let last = &events[events.len() - 1];
        let entry = TaskEntry::of_state(state, last.seq, last.hash, last.recorded_at).unwrap();
        ("t".into(), entry)
    }

    fn manifest(events: &[RecordedEvent]) -> Manifest {
        Manifest {
            next_seq: events.len() as u64,
            last_hash: events[events.len() - 1].hash.0,
            tasks: 1,
        }
    }

    /// The newest of sled's snapshots of its page table in `dir`: the log position it covers.
    fn newest_sled_snapshot(dir: &Path) -> Option<u64> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok())
            .max()
    }

    /// sled snapshots its page table only when a database opens, so a dropped store that took
    /// more than its bound opens the database once more on the way out; one that took less,
    /// or nothing, leaves it as it was.
    #[test]
    fn dropping_a_store_that_took_much_leaves_a_sled_snapshot_covering_it() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, state, events) = one_task();
        let write = |settle_after_bytes: u64| {
            let (mut store, _) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
            store.settle_after_bytes = settle_after_bytes;
            let opened = newest_sled_snapshot(dir.path());
            store
                .write(
                    manifest(&events),
                    &[entry(&state, &events)],
                    &[pending(&state, 1, events[1].hash)],
                    2,
                )
                .unwrap();
            assert!(store.written.load(Ordering::Relaxed) > 0);
            drop(store);
            (opened, newest_sled_snapshot(dir.path()))
        };
        let (opened, closed) = write(u64::MAX);
        assert_eq!(opened, closed, "below the bound: no second open");
        let (opened, closed) = write(1);
        assert!(closed > opened, "settled: {opened:?} then {closed:?}");
        let (store, _) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
        let found = store.load(&ledger).unwrap();
        assert!(matches!(found, Found::Entries { .. }), "{found:?}");
    }

    #[test]
    fn a_snapshot_the_ledger_confirms_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, state, events) = one_task();
        let (store, wiped) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(wiped, None);
        store
            .write(
                manifest(&events),
                &[entry(&state, &events)],
                &[pending(&state, 1, events[1].hash)],
                2,
            )
            .unwrap();
        let (found, discarded) = store.at_or_below(&ledger, "t", 2).unwrap();
        let found = found.unwrap();
        assert!(discarded.is_empty());
        assert_eq!(found.version, 2);
        assert_eq!(found.state.canonical_bytes(), state.canonical_bytes());
        assert!(store.at_or_below(&ledger, "t", 1).unwrap().0.is_none());
        let loaded = store.load(&ledger).unwrap();
        let Found::Entries { entries, .. } = loaded else {
            panic!("{loaded:?}");
        };
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, "t");
        assert_eq!(entries[0].1.version, 2);
        assert_eq!(entries[0].1.last_hash, events[1].hash);
        assert_eq!(entries[0].1.summary.question, "Q?");
    }

    #[test]
    fn a_snapshot_the_ledger_does_not_confirm_is_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, state, events) = one_task();
        let (store, _) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
        // The recorded last hash is not the ledger's event at that seq.
        store
            .write_states(&[pending(&state, 1, Digest([9; 32]))], 2)
            .unwrap();
        let (found, discarded) = store.at_or_below(&ledger, "t", 2).unwrap();
        assert!(found.is_none());
        assert_eq!(discarded.len(), 1);
        assert!(discarded[0].reason.contains("hash"), "{:?}", discarded[0]);
        // Discarded means removed: a second look finds no snapshot of the task at all.
        assert!(matches!(
            store.at_or_below(&ledger, "t", 2).unwrap(),
            (None, d) if d.is_empty()
        ));

        // The right hash at the wrong seq is no better.
        store
            .write_states(&[pending(&state, 0, events[1].hash)], 2)
            .unwrap();
        let (found, discarded) = store.at_or_below(&ledger, "t", 2).unwrap();
        assert!(found.is_none());
        assert_eq!(discarded.len(), 1);
    }

    #[test]
    fn entries_that_do_not_add_up_to_the_manifest_are_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, state, events) = one_task();
        let (store, _) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
        // The manifest names one task, but no entry was written.
        store.write(manifest(&events), &[], &[], 2).unwrap();
        let loaded = store.load(&ledger).unwrap();
        assert!(
            matches!(&loaded, Found::Unusable(reason) if reason.contains("1 tasks")),
            "{loaded:?}"
        );
        // An entry that claims to cover events past the manifest is no better.
        let mut short = manifest(&events);
        short.next_seq = 1;
        short.last_hash = events[0].hash.0;
        store
            .write(short, &[entry(&state, &events)], &[], 2)
            .unwrap();
        let loaded = store.load(&ledger).unwrap();
        assert!(
            matches!(&loaded, Found::Unusable(reason) if reason.contains("beyond")),
            "{loaded:?}"
        );
    }

    #[test]
    fn keys_round_trip_and_sort_by_task_then_version() {
        assert_eq!(parse_key(&key("t-1", 7)), Some(("t-1".into(), 7)));
        assert!(key("t", 9) < key("t", 10));
        // One task's keys never fall inside another's range.
        let range = key("t", 0)..=key("t", u64::MAX);
        assert!(!range.contains(&key("tt", 1)));
        assert!(!range.contains(&key("t", 1)[..5].to_vec()));
        assert_eq!(parse_key(b"manifest"), None);
        assert_eq!(parse_key(&key("t", 1)[..6]), None);
    }
}
