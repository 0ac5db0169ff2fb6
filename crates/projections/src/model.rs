//! The live model: an index entry for every task, a bounded cache of task states, and the
//! position in the ledger the projection has reached.
//!
//! The model folds the ledger strictly in seq order and checks each event's `prev_hash` against
//! the hash of the event before it, so a projection can never silently skip or reorder an event.
//! A stream becomes a task when its first event is `task_opened`; streams that are not research
//! tasks (external tool calls recorded outside any task) are counted and otherwise ignored.
//!
//! What stays in memory is bounded as the ledger grows: every task keeps only its index entry
//! (what the task index lists and filters by, a few hundred bytes), and at most
//! `task_states_cached_max` full states are held, the least recently used going first. A state
//! that is not held is loaded when it is needed — from the newest snapshot at or below the
//! task's version that the ledger confirms, folded forward along the task's own stream — so
//! evicting one costs a later load, never a wrong answer. A state evicted before its changes
//! were snapshotted is written to the snapshot store as it goes, so the next load is one read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, NaiveDate, Utc};
use ledger::{Digest, Ledger, RecordedEvent};
use research::rules::{Mode, Verdict};
use research::{EventMeta, Hash32, TaskState, TaskStatus};
use serde::{Deserialize, Serialize};

use crate::error::{ApplyError, QueryError};
use crate::hash::state_hash;
use crate::projector::Applied;
use crate::snapshot::{Discarded, Pending, SnapshotStore};

/// The kind a research task's first event has.
const TASK_OPENED: &str = "task_opened";

/// What the task index shows of a task and filters it by, kept for every task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) question: String,
    pub(crate) constraints: Vec<String>,
    pub(crate) status: TaskStatus,
    pub(crate) stance: Option<Verdict>,
    pub(crate) confidence: Option<f64>,
    pub(crate) mode: Mode,
    pub(crate) research_date: NaiveDate,
    pub(crate) opened_at: DateTime<Utc>,
    /// Whether a search of the task asked the embedded corpus.
    pub(crate) corpus_searched: bool,
}

impl Summary {
    /// The summary of a state; none before the task is opened.
    pub(crate) fn of(state: &TaskState) -> Option<Summary> {
        let task = state.task()?;
        let conclusion = state.current_conclusion();
        Some(Summary {
            question: task.question.clone(),
            constraints: task.constraints.clone(),
            status: state.status()?,
            stance: conclusion.map(|c| c.issued.stance),
            confidence: conclusion.map(|c| c.issued.confidence),
            mode: task.mode,
            research_date: task.research_date,
            opened_at: task.opened.recorded_at,
            corpus_searched: state
                .searches()
                .iter()
                .any(|s| s.event.sources.iter().any(|source| source == "corpus")),
        })
    }
}

/// One task of the model: its index entry. Its state lives in the [`StateCache`].
#[derive(Debug, Clone)]
pub(crate) struct TaskEntry {
    /// What the index lists.
    pub(crate) summary: Summary,
    /// The task's stream version.
    pub(crate) version: u64,
    /// Seq of the task's first event: the index orders tasks by it, so the order never changes.
    pub(crate) first_seq: u64,
    /// Seq of the task's last event folded.
    pub(crate) last_seq: u64,
    /// Hash of that event.
    pub(crate) last_hash: Digest,
    /// When the ledger recorded that event.
    pub(crate) updated_at: DateTime<Utc>,
    /// Question and constraints, normalised for the index's text filter.
    pub(crate) search_text: String,
    /// Version of the newest state snapshot written of this task (0: none).
    pub(crate) snapshot_version: u64,
    /// Version this entry had when it was last written to the snapshot store (0: never).
    pub(crate) recorded_version: u64,
    /// The state hash, when known at this version.
    pub(crate) hash: Option<Hash32>,
}

impl TaskEntry {
    /// An entry for a state folded or loaded at its head.
    pub(crate) fn of_state(
        state: &TaskState,
        last_seq: u64,
        last_hash: Digest,
        updated_at: DateTime<Utc>,
    ) -> Option<Self> {
        let summary = Summary::of(state)?;
        let first_seq = state.task().map_or(last_seq, |t| t.opened.cite.seq);
        Some(TaskEntry {
            search_text: search_text(&summary.question, &summary.constraints),
            summary,
            version: state.version(),
            first_seq,
            last_seq,
            last_hash,
            updated_at,
            snapshot_version: 0,
            recorded_version: 0,
            hash: None,
        })
    }

    /// Takes in the state after the event at `event` was folded into it.
    fn advance(&mut self, state: &TaskState, event: &RecordedEvent) {
        if let Some(summary) = Summary::of(state) {
            self.summary = summary;
        }
        self.version = state.version();
        self.last_seq = event.seq;
        self.last_hash = event.hash;
        self.updated_at = event.recorded_at;
        self.hash = None;
    }

    /// Whether the state moved on since its newest snapshot.
    pub(crate) fn is_dirty(&self) -> bool {
        self.version != self.snapshot_version
    }

    /// Whether the entry moved on since it was last written to the snapshot store.
    pub(crate) fn is_unrecorded(&self) -> bool {
        self.version != self.recorded_version
    }
}

/// The least recently used task states, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct StateCache {
    capacity: usize,
    tick: u64,
    states: HashMap<String, (Arc<TaskState>, u64)>,
    by_use: BTreeMap<u64, String>,
}

impl StateCache {
    pub(crate) fn new(capacity: usize) -> Self {
        StateCache {
            capacity: capacity.max(1),
            tick: 0,
            states: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    fn touch(&mut self, task_id: &str) -> Option<&mut Arc<TaskState>> {
        self.tick += 1;
        let tick = self.tick;
        let (state, used) = self.states.get_mut(task_id)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, task_id.to_owned());
        Some(state)
    }

    /// The state of a task, if held; it becomes the most recently used.
    pub(crate) fn get(&mut self, task_id: &str) -> Option<Arc<TaskState>> {
        self.touch(task_id).map(|s| Arc::clone(s))
    }

    /// Takes a task's state out of the cache, for a fold to change it and put it back.
    fn take(&mut self, task_id: &str) -> Option<Arc<TaskState>> {
        let (state, used) = self.states.remove(task_id)?;
        self.by_use.remove(&used);
        Some(state)
    }

    /// Holds `state` as the most recently used; returns the states evicted to make room.
    pub(crate) fn put(
        &mut self,
        task_id: &str,
        state: Arc<TaskState>,
    ) -> Vec<(String, Arc<TaskState>)> {
        if let Some(slot) = self.touch(task_id) {
            *slot = state;
            return Vec::new();
        }
        self.states
            .insert(task_id.to_owned(), (state, self.tick + 1));
        self.tick += 1;
        self.by_use.insert(self.tick, task_id.to_owned());
        let mut evicted = Vec::new();
        while self.states.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((state, _)) = self.states.remove(&oldest) {
                evicted.push((oldest, state));
            }
        }
        evicted
    }

    /// How many states are held.
    pub(crate) fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether a task's state is held.
    pub(crate) fn holds(&self, task_id: &str) -> bool {
        self.states.contains_key(task_id)
    }
}

/// Where states that are not in memory come from: the ledger, and the snapshots it confirms.
#[derive(Debug)]
pub(crate) struct Source {
    pub(crate) ledger: Ledger,
    /// The snapshot store, when states may be loaded from it and written back to it.
    pub(crate) store: Option<Arc<SnapshotStore>>,
    /// Snapshots kept per task.
    pub(crate) keep: usize,
    /// Events read from the ledger at a time.
    pub(crate) batch: usize,
    /// Snapshots found unusable when a state was loaded.
    pub(crate) discarded: Mutex<Vec<Discarded>>,
}

impl Source {
    /// States from `ledger` and, when given, the snapshots in `store`.
    pub(crate) fn new(
        ledger: &Ledger,
        store: Option<Arc<SnapshotStore>>,
        limits: &crate::limits::Limits,
    ) -> Self {
        Source {
            ledger: ledger.clone(),
            store,
            keep: limits.snapshots_per_task_max,
            batch: limits.catch_up_batch_events.max(1),
            discarded: Mutex::new(Vec::new()),
        }
    }

    /// The state of a task at `entry.version`: from the newest snapshot at or below it that the
    /// ledger confirms, folded forward along the task's stream; from its first event when there
    /// is none.
    pub(crate) fn load(&self, task_id: &str, version: u64) -> Result<TaskState, QueryError> {
        let snapshot = match &self.store {
            Some(store) if version > 0 => match store.at_or_below(&self.ledger, task_id, version) {
                Ok((valid, discarded)) => {
                    if !discarded.is_empty() {
                        lock(&self.discarded).extend(discarded);
                    }
                    valid
                }
                Err(e) => {
                    tracing::warn!(error = %e, task = task_id, "a state is loaded without snapshots");
                    None
                }
            },
            _ => None,
        };
        let mut state = snapshot.map_or_else(TaskState::new, |v| v.state);
        fold_stream_to(&self.ledger, task_id, &mut state, version, self.batch)?;
        Ok(state)
    }

    /// Writes the state of an evicted task whose changes were not snapshotted yet, so that the
    /// next load of it is one read. Returns whether it was written.
    fn write_back(&self, task_id: &str, entry: &TaskEntry, state: &Arc<TaskState>) -> bool {
        let Some(store) = &self.store else {
            return false;
        };
        if state.version() != entry.version {
            return false;
        }
        let pending = Pending {
            task_id: task_id.to_owned(),
            version: entry.version,
            last_seq: entry.last_seq,
            last_hash: entry.last_hash,
            state: Arc::clone(state),
        };
        match store.write_states(std::slice::from_ref(&pending), self.keep) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, task = task_id, "an evicted state was not written back");
                false
            }
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Folds a task's events after `state.version()` up to `version`, reading its stream.
pub(crate) fn fold_stream_to(
    ledger: &Ledger,
    task_id: &str,
    state: &mut TaskState,
    version: u64,
    batch: usize,
) -> Result<u64, QueryError> {
    let mut folded = 0;
    while state.version() < version {
        let from = state.version() + 1;
        let want = usize::try_from(version - state.version())
            .unwrap_or(usize::MAX)
            .min(batch.max(1));
        let events = ledger.read_stream(task_id, from, want)?;
        if events.is_empty() {
            return Err(QueryError::Damaged {
                seq: None,
                detail: format!("the ledger holds no version {from} of {task_id}"),
            });
        }
        for event in events.iter().take_while(|e| e.stream_version <= version) {
            let decoded = decode(event).map_err(|e| QueryError::Damaged {
                seq: Some(event.seq),
                detail: e.to_string(),
            })?;
            research::evolve(state, &decoded, &meta(event));
            folded += 1;
        }
    }
    Ok(folded)
}

/// Decodes an event's payload as a research event.
pub(crate) fn decode(event: &RecordedEvent) -> Result<research::Event, ApplyError> {
    research::decode(&event.kind, &event.payload).map_err(|error| ApplyError::Undecodable {
        seq: event.seq,
        kind: event.kind.chars().take(64).collect(),
        error,
    })
}

/// What `evolve` learns about an event from its envelope.
pub fn meta(event: &RecordedEvent) -> EventMeta {
    EventMeta {
        seq: event.seq,
        stream_version: event.stream_version,
        hash: event.hash.0,
        recorded_at: event.recorded_at,
        actor: event.actor.clone(),
    }
}

/// Lower-cased, whitespace-collapsed text, so the filter matches regardless of case and spacing.
/// Chinese has no case and is matched as written; it is cut nowhere, since matching is by
/// substring over whole characters.
pub(crate) fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// Question and constraints, each normalised, one per line: a needle (which holds no line
/// break once normalised) can match within one of them but never across two.
pub(crate) fn search_text(question: &str, constraints: &[String]) -> String {
    let mut out = normalise(question);
    for constraint in constraints {
        out.push('\n');
        out.push_str(&normalise(constraint));
    }
    out
}

/// Every task the projection has folded, and where in the ledger it stands.
#[derive(Debug)]
pub(crate) struct Model {
    /// The seq of the next event to fold; every event before it has been folded.
    pub(crate) next_seq: u64,
    /// The hash of the event at `next_seq - 1` (zero before the first).
    pub(crate) last_hash: Digest,
    /// Tasks by id; ordered, so the projection hash needs no sort.
    pub(crate) tasks: BTreeMap<String, TaskEntry>,
    /// Task ids by the seq of their first event: the index's stable order.
    pub(crate) order: BTreeMap<u64, String>,
    /// `next_seq` when the last snapshot was written.
    pub(crate) snapshot_seq: u64,
    /// Events of streams that are not research tasks, skipped.
    pub(crate) other_events: u64,
    /// The states held in memory.
    pub(crate) states: Mutex<StateCache>,
    /// Where the others come from.
    pub(crate) source: Arc<Source>,
}

impl Model {
    /// An empty model at seq 0.
    pub(crate) fn new(source: Arc<Source>, states_max: usize) -> Self {
        Model {
            next_seq: 0,
            last_hash: Digest::default(),
            tasks: BTreeMap::new(),
            order: BTreeMap::new(),
            snapshot_seq: 0,
            other_events: 0,
            states: Mutex::new(StateCache::new(states_max)),
            source,
        }
    }

    /// Adds a task's entry, restored from the snapshot store.
    pub(crate) fn insert(&mut self, task_id: String, entry: TaskEntry) {
        self.order.insert(entry.first_seq, task_id.clone());
        self.tasks.insert(task_id, entry);
    }

    /// A task's state at the head of what the model folded, loading it when it is not held.
    pub(crate) fn state(&self, task_id: &str) -> Result<Option<Arc<TaskState>>, QueryError> {
        let Some(entry) = self.tasks.get(task_id) else {
            return Ok(None);
        };
        if let Some(state) = lock(&self.states).get(task_id) {
            return Ok(Some(state));
        }
        let state = Arc::new(self.source.load(task_id, entry.version)?);
        let evicted = lock(&self.states).put(task_id, Arc::clone(&state));
        // A read holds the model only to read it: evicted states that were not snapshotted
        // are written back by the next fold or snapshot round instead, loaded again if need be.
        drop(evicted);
        Ok(Some(state))
    }

    /// Whether a task's state is in memory: [`Model::state`] then reads nothing.
    pub(crate) fn holds_state(&self, task_id: &str) -> bool {
        lock(&self.states).holds(task_id)
    }

    /// The deterministic hash of a task's state at its head.
    pub(crate) fn hash(&self, task_id: &str) -> Result<Option<Hash32>, QueryError> {
        let Some(entry) = self.tasks.get(task_id) else {
            return Ok(None);
        };
        if let Some(hash) = entry.hash {
            return Ok(Some(hash));
        }
        Ok(self.state(task_id)?.map(|s| state_hash(&s)))
    }

    /// Folds the next event of the ledger. The caller has made sure `event.seq` is not beyond
    /// `next_seq`; earlier events are reported as already applied.
    pub(crate) fn apply(&mut self, event: &RecordedEvent) -> Result<Applied, ApplyError> {
        if event.seq < self.next_seq {
            return Ok(Applied::AlreadyApplied);
        }
        // The event must chain to the last one folded: checked again here, after reading,
        // though the ledger checked it before writing.
        if event.seq != self.next_seq || event.prev_hash != self.last_hash {
            return Err(ApplyError::ChainBroken {
                seq: event.seq,
                expected: self.last_hash,
                found: event.prev_hash,
            });
        }
        let applied = self.fold(event)?;
        self.next_seq = event.seq + 1;
        self.last_hash = event.hash;
        Ok(applied)
    }

    /// Folds an event into its task, wherever it is in the ledger.
    pub(crate) fn fold(&mut self, event: &RecordedEvent) -> Result<Applied, ApplyError> {
        let Model {
            tasks,
            order,
            states,
            source,
            other_events,
            ..
        } = self;
        if let Some(entry) = tasks.get_mut(&event.stream) {
            let version = entry.version;
            if event.stream_version <= version {
                return Ok(Applied::AlreadyFolded);
            }
            if event.stream_version != version + 1 {
                return Err(ApplyError::StreamGap {
                    seq: event.seq,
                    stream: event.stream.clone(),
                    expected: version + 1,
                    found: event.stream_version,
                });
            }
            let decoded = decode(event)?;
            let held = lock(states).take(&event.stream);
            let mut state = match held {
                Some(state) => state,
                None => Arc::new(source.load(&event.stream, version).map_err(|e| match e {
                    QueryError::Read(e) => ApplyError::Read(e),
                    other => ApplyError::Unloadable {
                        seq: event.seq,
                        detail: other.to_string(),
                    },
                })?),
            };
            research::evolve(Arc::make_mut(&mut state), &decoded, &meta(event));
            entry.advance(&state, event);
            let evicted = lock(states).put(&event.stream, state);
            write_back(tasks, source, evicted);
            return Ok(Applied::Folded);
        }
        if event.stream_version != 1 || event.kind != TASK_OPENED {
            // A stream whose first event is not `task_opened` is not a research task; and a
            // later event of a stream the model does not hold belongs to such a stream, since
            // every task opened before `next_seq` is in the model.
            *other_events += 1;
            return Ok(Applied::NotATask);
        }
        let decoded = decode(event)?;
        let mut state = TaskState::new();
        research::evolve(&mut state, &decoded, &meta(event));
        let Some(entry) = TaskEntry::of_state(&state, event.seq, event.hash, event.recorded_at)
        else {
            *other_events += 1;
            return Ok(Applied::NotATask);
        };
        order.insert(entry.first_seq, event.stream.clone());
        tasks.insert(event.stream.clone(), entry);
        let evicted = lock(states).put(&event.stream, Arc::new(state));
        write_back(tasks, source, evicted);
        Ok(Applied::Folded)
    }

    /// How many states are held in memory.
    pub(crate) fn states_held(&self) -> usize {
        lock(&self.states).len()
    }
}

/// Writes back the evicted states whose changes were not snapshotted.
fn write_back(
    tasks: &mut BTreeMap<String, TaskEntry>,
    source: &Source,
    evicted: Vec<(String, Arc<TaskState>)>,
) {
    for (task_id, state) in evicted {
        if let Some(entry) = tasks.get_mut(&task_id)
            && entry.is_dirty()
            && source.write_back(&task_id, entry, &state)
        {
            entry.snapshot_version = entry.version;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalising_folds_case_and_spacing_and_keeps_chinese() {
        assert_eq!(normalise("  Lithium\tDEMAND  "), "lithium demand");
        assert_eq!(normalise("锂需求 增长"), "锂需求 增长");
        let text = search_text("Does X grow?", &["Public DATA only".into()]);
        assert_eq!(text, "does x grow?\npublic data only");
        assert!(!text.contains(&normalise("grow? public")));
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_and_evicts_the_oldest() {
        let mut cache = StateCache::new(2);
        let s = || Arc::new(TaskState::new());
        assert!(cache.put("a", s()).is_empty());
        assert!(cache.put("b", s()).is_empty());
        // Using `a` makes `b` the oldest.
        assert!(cache.get("a").is_some());
        let evicted = cache.put("c", s());
        assert_eq!(
            evicted
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert!(cache.get("b").is_none());
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert_eq!(cache.len(), 2);
        // Replacing a held state evicts nothing.
        assert!(cache.put("a", s()).is_empty());
        let taken = cache.take("a");
        assert!(taken.is_some() && cache.get("a").is_none());
        assert_eq!(cache.len(), 1);
    }
}
