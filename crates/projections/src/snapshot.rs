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
//! - `manifest` → `{next_seq, last_hash, tasks}`: the snapshots hold every task as of the
//!   ledger's first `next_seq` events, the last of which has hash `last_hash`.
//! - `s ‖ len(task) u16 ‖ task ‖ version u64` (big endian) → one snapshot of a task at a stream
//!   version: the state's canonical bytes, their hash, and the seq and hash of the task's event
//!   at that version.
//!
//! A snapshot is used only when its bytes hash to the recorded state hash, decode to a state of
//! the recorded version, and the ledger's event at the recorded seq has the recorded hash and is
//! that version of that task. Anything else is discarded and reported.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use ledger::{Digest, Ledger};
use research::TaskState;
use serde::{Deserialize, Serialize};

use crate::error::SnapshotError;
use crate::hash::bytes_hash;

const FORMAT_KEY: &[u8] = b"format";
const MANIFEST_KEY: &[u8] = b"manifest";
const SNAPSHOT_TAG: u8 = b's';

/// The format this build writes and reads.
fn format_mark() -> Vec<u8> {
    format!(
        "research-ledger/projections/snapshots/v1 task-state/{}",
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
    pub(crate) last_hash: Digest,
    pub(crate) updated_at: DateTime<Utc>,
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
    /// Snapshots of the tasks as of `manifest.next_seq`.
    Snapshots {
        manifest: Manifest,
        /// Every task with a snapshot key, and its newest valid snapshot if it has one.
        tasks: Vec<(String, Option<Valid>)>,
        /// What was removed.
        discarded: Vec<Discarded>,
    },
}

/// The snapshot database.
#[derive(Debug)]
pub(crate) struct SnapshotStore {
    db: sled::Db,
    dir: PathBuf,
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
    let len = u16::try_from(task_id.len()).unwrap_or(u16::MAX);
    let mut key = Vec::with_capacity(3 + task_id.len() + 8);
    key.push(SNAPSHOT_TAG);
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
        let open = || {
            let config = sled::Config::new().path(dir).cache_capacity(cache_bytes);
            // The caller holds the ledger's lock, so a sled lock still held here belongs to a
            // projector of this process that is shutting down (sled lets go of its file lock
            // from a background thread): wait for it, briefly.
            let mut attempts = 0;
            loop {
                match config.open() {
                    Err(sled::Error::Io(e)) if is_lock_held(&e) && attempts < 250 => {
                        attempts += 1;
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    other => break other,
                }
            }
        };
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
                db,
                dir: dir.to_path_buf(),
            },
            wiped,
        ))
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads and checks what the directory holds. Unusable snapshots are removed.
    pub(crate) fn load(&self, ledger: &Ledger) -> Result<Found, SnapshotError> {
        let format = self.db.get(FORMAT_KEY).map_err(store_error("read"))?;
        let Some(format) = format else {
            return Ok(if self.db.is_empty() {
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
        let manifest = match self.db.get(MANIFEST_KEY).map_err(store_error("read"))? {
            None => return Ok(Found::Unusable("the manifest is missing".into())),
            Some(bytes) => match decode_exact::<Manifest>(&bytes) {
                Ok(manifest) => manifest,
                Err(e) => return Ok(Found::Unusable(format!("the manifest is damaged: {e}"))),
            },
        };
        if let Some(reason) = manifest_mismatch(ledger, &manifest)? {
            return Ok(Found::Unusable(reason));
        }

        let mut tasks: Vec<(String, Option<Valid>)> = Vec::new();
        let mut discarded = Vec::new();
        let mut doomed = Vec::new();
        // Newest first within each task, so the first snapshot that checks out is the one used
        // and only the ones newer than it need to be read.
        for item in self.db.scan_prefix([SNAPSHOT_TAG]).rev() {
            let (k, bytes) = item.map_err(store_error("read"))?;
            let Some((task_id, version)) = parse_key(&k) else {
                discarded.push(Discarded {
                    task_id: None,
                    version: None,
                    reason: "the key is not a snapshot key".into(),
                });
                doomed.push(k);
                continue;
            };
            let known = tasks.last().is_some_and(|(t, _)| *t == task_id);
            if known && tasks.last().is_some_and(|(_, v)| v.is_some()) {
                // An older snapshot of a task that already has a valid newer one.
                continue;
            }
            let checked = check(ledger, &task_id, version, &bytes)?.and_then(|valid| {
                if valid.last_seq >= manifest.next_seq {
                    Err(format!(
                        "it covers seq {}, beyond the manifest's {}",
                        valid.last_seq, manifest.next_seq
                    ))
                } else {
                    Ok(valid)
                }
            });
            let valid = match checked {
                Ok(valid) => Some(valid),
                Err(reason) => {
                    tracing::warn!(task = %task_id, version, %reason, "discarding a snapshot");
                    discarded.push(Discarded {
                        task_id: Some(task_id.clone()),
                        version: Some(version),
                        reason,
                    });
                    doomed.push(k);
                    None
                }
            };
            match tasks.last_mut() {
                Some((t, slot)) if *t == task_id => *slot = valid,
                _ => tasks.push((task_id, valid)),
            }
        }
        if !doomed.is_empty() {
            let mut batch = sled::Batch::default();
            for k in doomed {
                batch.remove(k);
            }
            self.db.apply_batch(batch).map_err(store_error("remove"))?;
        }
        tasks.reverse();
        Ok(Found::Snapshots {
            manifest,
            tasks,
            discarded,
        })
    }

    /// The newest valid snapshot of a task at or below `version`, for time travel. Invalid ones
    /// are skipped (and left for the next open to remove).
    pub(crate) fn at_or_below(
        &self,
        ledger: &Ledger,
        task_id: &str,
        version: u64,
    ) -> Result<Option<Valid>, SnapshotError> {
        for item in self.db.range(key(task_id, 0)..=key(task_id, version)).rev() {
            let (k, bytes) = item.map_err(store_error("read"))?;
            let Some((_, found)) = parse_key(&k) else {
                continue;
            };
            match check(ledger, task_id, found, &bytes)? {
                Ok(valid) => return Ok(Some(valid)),
                Err(reason) => {
                    tracing::warn!(task = %task_id, version = found, %reason, "skipping a snapshot");
                }
            }
        }
        Ok(None)
    }

    /// Writes snapshots of `pending` and a manifest saying they cover every event before
    /// `next_seq`, all in one atomic batch; keeps at most `keep` snapshots per task.
    pub(crate) fn write(
        &self,
        manifest: Manifest,
        pending: &[Pending],
        keep: usize,
    ) -> Result<SnapshotReport, SnapshotError> {
        let keep = keep.max(1);
        let mut batch = sled::Batch::default();
        batch.insert(FORMAT_KEY, format_mark());
        batch.insert(MANIFEST_KEY, postcard_bytes(&manifest));
        let mut pruned = 0u64;
        for p in pending {
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
            batch.insert(new_key.clone(), postcard_bytes(&record));
            let mut keys: Vec<sled::IVec> = Vec::new();
            for item in self.db.scan_prefix(prefix(&p.task_id)) {
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
        self.db.apply_batch(batch).map_err(store_error("write"))?;
        self.db.flush().map_err(store_error("flush"))?;
        Ok(SnapshotReport {
            next_seq: manifest.next_seq,
            tasks_written: pending.len() as u64,
            snapshots_pruned: pruned,
        })
    }

    /// Removes every snapshot and the manifest, before a full rebuild writes new ones.
    pub(crate) fn clear(&self) -> Result<(), SnapshotError> {
        self.db.clear().map_err(store_error("clear"))?;
        self.db.flush().map_err(store_error("flush"))?;
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
        last_hash: event.hash,
        updated_at: event.recorded_at,
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

    fn manifest(events: &[RecordedEvent]) -> Manifest {
        Manifest {
            next_seq: events.len() as u64,
            last_hash: events[events.len() - 1].hash.0,
            tasks: 1,
        }
    }

    #[test]
    fn a_snapshot_the_ledger_confirms_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, state, events) = one_task();
        let (store, wiped) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(wiped, None);
        store
            .write(manifest(&events), &[pending(&state, 1, events[1].hash)], 2)
            .unwrap();
        let found = store.at_or_below(&ledger, "t", 2).unwrap().unwrap();
        assert_eq!(found.version, 2);
        assert_eq!(found.state.canonical_bytes(), state.canonical_bytes());
        assert!(store.at_or_below(&ledger, "t", 1).unwrap().is_none());
        assert!(matches!(
            store.load(&ledger).unwrap(),
            Found::Snapshots { tasks, discarded, .. } if tasks.len() == 1 && tasks[0].1.is_some() && discarded.is_empty()
        ));
    }

    #[test]
    fn a_snapshot_the_ledger_does_not_confirm_is_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, state, events) = one_task();
        let (store, _) = SnapshotStore::open(dir.path(), 1 << 20).unwrap();
        // The recorded last hash is not the ledger's event at that seq.
        store
            .write(manifest(&events), &[pending(&state, 1, Digest([9; 32]))], 2)
            .unwrap();
        assert!(store.at_or_below(&ledger, "t", 2).unwrap().is_none());
        let loaded = store.load(&ledger).unwrap();
        let Found::Snapshots {
            tasks, discarded, ..
        } = loaded
        else {
            panic!("{loaded:?}");
        };
        assert_eq!(tasks.len(), 1);
        assert!(tasks[0].1.is_none());
        assert_eq!(discarded.len(), 1);
        assert!(discarded[0].reason.contains("hash"), "{:?}", discarded[0]);
        // Discarded means removed: a second load finds no snapshot of the task at all.
        assert!(matches!(
            store.load(&ledger).unwrap(),
            Found::Snapshots { tasks, discarded, .. } if tasks.is_empty() && discarded.is_empty()
        ));

        // The right hash at the wrong seq is no better.
        store
            .write(manifest(&events), &[pending(&state, 0, events[1].hash)], 2)
            .unwrap();
        let Found::Snapshots { discarded, .. } = store.load(&ledger).unwrap() else {
            panic!("the manifest is intact");
        };
        assert_eq!(discarded.len(), 1);
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
