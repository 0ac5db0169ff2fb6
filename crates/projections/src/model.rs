//! The live model: every task's state at the head of what the projection has folded, and the
//! position in the ledger it has reached.
//!
//! The model folds the ledger strictly in seq order and checks each event's `prev_hash` against
//! the hash of the event before it, so a projection can never silently skip or reorder an event.
//! A stream becomes a task when its first event is `task_opened`; streams that are not research
//! tasks (external tool calls recorded outside any task) are counted and otherwise ignored.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use ledger::{Digest, RecordedEvent};
use research::{EventMeta, Hash32, TaskState};

use crate::error::ApplyError;
use crate::hash::state_hash;
use crate::projector::Applied;

/// The kind a research task's first event has.
const TASK_OPENED: &str = "task_opened";

/// One task of the model.
#[derive(Debug)]
pub(crate) struct TaskEntry {
    /// The state at the task's head. Shared with readers; a fold clones it only while a reader
    /// still holds the previous version.
    pub(crate) state: Arc<TaskState>,
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
    /// Version of the newest snapshot written of this task (0: none).
    pub(crate) snapshot_version: u64,
    /// The state hash, computed when first asked for after a fold.
    hash: OnceLock<Hash32>,
}

impl TaskEntry {
    /// An entry for a state loaded from a snapshot or folded elsewhere.
    pub(crate) fn new(
        state: TaskState,
        last_seq: u64,
        last_hash: Digest,
        updated_at: DateTime<Utc>,
        snapshot_version: u64,
    ) -> Self {
        let (first_seq, search_text) = match state.task() {
            Some(task) => (
                task.opened.cite.seq,
                search_text(&task.question, &task.constraints),
            ),
            None => (last_seq, String::new()),
        };
        TaskEntry {
            state: Arc::new(state),
            first_seq,
            last_seq,
            last_hash,
            updated_at,
            search_text,
            snapshot_version,
            hash: OnceLock::new(),
        }
    }

    /// The task's stream version.
    pub(crate) fn version(&self) -> u64 {
        self.state.version()
    }

    /// Whether the state moved on since its newest snapshot.
    pub(crate) fn is_dirty(&self) -> bool {
        self.state.version() != self.snapshot_version
    }

    /// The deterministic hash of the state.
    pub(crate) fn hash(&self) -> Hash32 {
        *self.hash.get_or_init(|| state_hash(&self.state))
    }

    /// Folds the task's next event. Events the state already holds are skipped, so folding is
    /// idempotent; an event that skips a version is refused.
    pub(crate) fn fold(&mut self, event: &RecordedEvent) -> Result<Applied, ApplyError> {
        let version = self.state.version();
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
        research::evolve(Arc::make_mut(&mut self.state), &decoded, &meta(event));
        self.last_seq = event.seq;
        self.last_hash = event.hash;
        self.updated_at = event.recorded_at;
        self.hash = OnceLock::new();
        Ok(Applied::Folded)
    }
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
fn search_text(question: &str, constraints: &[String]) -> String {
    let mut out = normalise(question);
    for constraint in constraints {
        out.push('\n');
        out.push_str(&normalise(constraint));
    }
    out
}

/// Every task the projection has folded, and where in the ledger it stands.
#[derive(Debug, Default)]
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
}

impl Model {
    /// An empty model at seq 0.
    pub(crate) fn new() -> Self {
        Model::default()
    }

    /// Adds a task loaded from a snapshot or repaired from its stream.
    pub(crate) fn insert(&mut self, task_id: String, entry: TaskEntry) {
        self.order.insert(entry.first_seq, task_id.clone());
        self.tasks.insert(task_id, entry);
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
        if let Some(entry) = self.tasks.get_mut(&event.stream) {
            return entry.fold(event);
        }
        if event.stream_version != 1 || event.kind != TASK_OPENED {
            // A stream whose first event is not `task_opened` is not a research task; and a
            // later event of a stream the model does not hold belongs to such a stream, since
            // every task opened before `next_seq` is in the model.
            self.other_events += 1;
            return Ok(Applied::NotATask);
        }
        let decoded = decode(event)?;
        let mut state = TaskState::new();
        research::evolve(&mut state, &decoded, &meta(event));
        let entry = TaskEntry::new(state, event.seq, event.hash, event.recorded_at, 0);
        self.insert(event.stream.clone(), entry);
        Ok(Applied::Folded)
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
}
