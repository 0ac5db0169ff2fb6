//! The projector: it follows the ledger, folds every event into the live model, answers the
//! read models' queries, and keeps snapshots.
//!
//! Events reach it three ways, all idempotent, so they can be combined freely: the service's
//! write path calls [`Projector::catch_up_to`] (or [`Projector::apply`]) after each append, so
//! a client reads its own write at once; a background task runs [`Projector::follow`] over the
//! ledger's subscription, so writes made elsewhere show up too; and [`Projector::catch_up`]
//! brings it to the ledger's head on demand. An event before the projector's position is
//! skipped; one beyond it first pulls the gap from the ledger.
//!
//! When an event cannot be folded (a payload this build cannot read, a broken link) the
//! projector stops before it and records a [`Stall`]: folding past it would make every later
//! answer wrong, and waiters are told rather than left waiting.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ledger::{Digest, Ledger, Live, LiveEvents, ReadError, RecordedEvent};
use research::ids::ConclusionId;
use research::{Hash32, TaskState};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

use crate::audit::{self, AuditPage};
use crate::error::{
    ApplyError, FollowError, OpenError, QueryError, RebuildError, SnapshotError, Stall,
};
use crate::feed::{Feed, Folded};
use crate::hash::{ProjectionHash, ProjectionHasher};
use crate::index::{self, TaskPage, TaskQuery};
use crate::limits::Limits;
use crate::model::{Model, Source, fold_stream_to, lock};
use crate::snapshot::{Discarded, Found, Manifest, Pending, SnapshotReport, SnapshotStore, Valid};
use crate::why::{self, WhyGraph};

/// How to open a projector.
#[derive(Debug, Clone, Default)]
pub struct ProjectorOptions {
    /// Limits on queries and on work done at a time.
    pub limits: Limits,
    /// A directory of the projector's own for snapshots (e.g. `data/projections/`); none keeps
    /// no snapshots, and every open folds the whole ledger.
    pub snapshot_dir: Option<PathBuf>,
}

/// What became of one event handed to the projector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Applied {
    /// Folded into its task.
    Folded,
    /// Its stream is not a research task (no `task_opened` first); counted and skipped.
    NotATask,
    /// The projector had already passed it.
    AlreadyApplied,
    /// Its task's state already held it (restored from a snapshot taken after it).
    AlreadyFolded,
}

/// Where an open started from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpenStart {
    /// No snapshot directory was given: the whole ledger was folded.
    NoSnapshots,
    /// The snapshot directory was empty: the whole ledger was folded.
    Empty,
    /// Snapshots covering the events before `next_seq` were loaded, then the rest was folded.
    Snapshots {
        /// The first seq folded after loading.
        next_seq: u64,
        /// Tasks restored.
        tasks: u64,
    },
    /// The snapshots could not be used at all: the whole ledger was folded.
    FullRebuild {
        /// Why.
        reason: String,
    },
}

/// What happened when the projector opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenReport {
    /// Where folding started.
    pub start: OpenStart,
    /// What of the snapshot directory was found unusable and removed. States are checked when
    /// they are loaded, not at open: [`Projector::discarded`] lists those found since.
    pub discarded: Vec<Discarded>,
    /// Events folded after the snapshots (or from seq 0).
    pub events_caught_up: u64,
    /// The snapshots written at open, when the directory needed them.
    pub snapshot: Option<SnapshotReport>,
    /// Where folding stopped, if it could not reach the ledger's head.
    pub stall: Option<Stall>,
}

/// What a full rebuild found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildReport {
    /// The live projection's hash just before it was replaced.
    pub previous: ProjectionHash,
    /// The rebuilt projection's hash, at the same seq.
    pub rebuilt: ProjectionHash,
    /// Whether the two agree. They always should: a difference means the live model folded
    /// something differently from a fold from scratch.
    pub matched: bool,
    /// Events folded from seq 0.
    pub events_folded: u64,
    /// The snapshots written afterwards.
    pub snapshot: Option<SnapshotReport>,
}

/// Where a time-travel fold started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum TravelStart {
    /// The version asked for is the head: the live state, nothing folded.
    Live,
    /// A snapshot at this version, confirmed against the ledger.
    Snapshot {
        /// Its version.
        version: u64,
        /// The seq of its last event.
        seq: u64,
    },
    /// The task's first event.
    Scratch,
}

/// A task's state at a version, and how much work it took.
#[derive(Debug, Clone)]
pub struct TimeTravel {
    /// The state after the task's first `version` events.
    pub state: Arc<TaskState>,
    /// Where folding started.
    pub start: TravelStart,
    /// Events read from the ledger and folded.
    pub events_folded: u64,
}

/// The projector's position, for health checks and metrics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectorStatus {
    /// The next seq to fold.
    pub next_seq: u64,
    /// Events in the ledger not yet folded.
    pub lag: u64,
    /// Research tasks held.
    pub tasks: u64,
    /// Task states held in memory (at most `task_states_cached_max`).
    pub states_held: u64,
    /// Events skipped because their stream is not a research task.
    pub other_events: u64,
    /// `next_seq` at the last snapshot.
    pub snapshot_seq: u64,
    /// Where folding stopped, if it did.
    pub stall: Option<Stall>,
}

/// What waiters watch.
#[derive(Debug, Clone)]
struct Progress {
    next_seq: u64,
    stall: Option<Stall>,
}

#[derive(Debug)]
struct Inner {
    ledger: Ledger,
    limits: Limits,
    store: Option<Arc<SnapshotStore>>,
    source: Arc<Source>,
    model: RwLock<Model>,
    progress: watch::Sender<Progress>,
    /// The events the ledger's writer hands out as it appends them: what the write path folds,
    /// so that it never reads back what it just wrote.
    live: Mutex<LiveEvents>,
    /// Every event once folded, for [`Projector::feed`].
    folded: broadcast::Sender<Folded>,
    /// Serialises snapshot rounds and rebuilds, which both rewrite the store.
    rounds: Mutex<()>,
    report: OpenReport,
}

/// The read models of one ledger. Cheap to clone; every clone is a handle on the same model.
#[derive(Debug, Clone)]
pub struct Projector {
    inner: Arc<Inner>,
}

impl Projector {
    /// Opens the projector over `ledger`: loads and checks the snapshots (when a directory is
    /// given), repairs or rebuilds whatever they do not cover, and folds up to the ledger's
    /// head. An event that cannot be folded does not fail the open: the projector stops before
    /// it and the report says where ([`OpenReport::stall`]).
    pub fn open(ledger: Ledger, options: ProjectorOptions) -> Result<Projector, OpenError> {
        let ProjectorOptions {
            limits,
            snapshot_dir,
        } = options;
        // Taken before anything is folded, so that no event appended from here on is missed;
        // what it holds of events folded meanwhile is skipped by seq.
        let live = ledger.live_events();
        let (store, wiped) = match &snapshot_dir {
            None => (None, None),
            Some(dir) => {
                let (store, wiped) = SnapshotStore::open(dir, limits.snapshot_cache_bytes_max)?;
                (Some(Arc::new(store)), wiped)
            }
        };
        let source = Arc::new(Source::new(&ledger, store.clone(), &limits));
        let Loaded {
            model,
            start,
            discarded,
            write_snapshot,
        } = match &store {
            None => Loaded {
                model: Model::new(Arc::clone(&source), limits.task_states_cached_max),
                start: OpenStart::NoSnapshots,
                discarded: Vec::new(),
                write_snapshot: false,
            },
            Some(store) => load(store, wiped, &ledger, &source, &limits)?,
        };
        let (progress, _) = watch::channel(Progress {
            next_seq: model.next_seq,
            stall: None,
        });
        let (folded, _) = broadcast::channel(
            limits
                .feed_buffer_events
                .clamp(1, crate::limits::FEED_BUFFER_EVENTS_MAX),
        );
        let mut projector = Projector {
            inner: Arc::new(Inner {
                ledger,
                limits,
                store,
                source,
                model: RwLock::new(model),
                progress,
                live: Mutex::new(live),
                folded,
                rounds: Mutex::new(()),
                report: OpenReport {
                    start,
                    discarded,
                    events_caught_up: 0,
                    snapshot: None,
                    stall: None,
                },
            }),
        };
        projector.catch_up_at_open(write_snapshot)?;
        Ok(projector)
    }

    /// Folds what the ledger holds beyond the state loaded, then writes a snapshot when the
    /// open asked for one, and completes the open's report. A failure to read storage is the
    /// ledger's, and opening cannot go on without it; an event that does not fold is recorded
    /// as a stall and the projector opens anyway.
    fn catch_up_at_open(&mut self, write_snapshot: bool) -> Result<(), OpenError> {
        let before = self.next_seq();
        match self.advance(u64::MAX) {
            Err(ApplyError::Read(e))
                if !matches!(
                    e,
                    ReadError::Damaged { .. }
                        | ReadError::Storage(ledger::StorageError::Corrupt { .. })
                ) =>
            {
                return Err(OpenError::Read(e));
            }
            Ok(_) | Err(_) => {}
        }
        let caught_up = self.next_seq() - before;
        let stall = self.stall();
        let snapshot = self.snapshot_at_open(write_snapshot);
        // Nothing else holds the Arc yet, so the report can still be completed in place.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.report.events_caught_up = caught_up;
            inner.report.stall = stall;
            inner.report.snapshot = snapshot;
        }
        Ok(())
    }

    /// The snapshots an open writes: when the directory needs them, or one is due.
    fn snapshot_at_open(&self, needed: bool) -> Option<SnapshotReport> {
        let due = {
            let every = self.inner.limits.snapshot_every_events;
            let model = self.read();
            every > 0 && model.next_seq.saturating_sub(model.snapshot_seq) >= every
        };
        if !(needed || due) || self.inner.store.is_none() {
            return None;
        }
        match self.snapshot() {
            Ok(report) => Some(report),
            Err(e) => {
                tracing::warn!(error = %e, "could not write snapshots at open");
                None
            }
        }
    }

    /// What happened when the projector opened.
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.report
    }

    /// The ledger it follows.
    pub fn ledger(&self) -> &Ledger {
        &self.inner.ledger
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    fn read(&self) -> RwLockReadGuard<'_, Model> {
        // A panic while folding is a bug in `evolve`; the model it leaves is still the best
        // answer there is, and a rebuild replaces it.
        self.inner.model.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Model> {
        self.inner.model.write().unwrap_or_else(|p| p.into_inner())
    }

    fn rounds(&self) -> MutexGuard<'_, ()> {
        self.inner.rounds.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ----- position -----

    /// The seq of the next event to fold: every event before it is visible.
    pub fn next_seq(&self) -> u64 {
        self.read().next_seq
    }

    /// The seq of the last event folded; none before the first.
    pub fn caught_up_to(&self) -> Option<u64> {
        self.next_seq().checked_sub(1)
    }

    /// Events in the ledger not yet folded.
    pub fn lag(&self) -> u64 {
        self.inner
            .ledger
            .head()
            .size
            .saturating_sub(self.next_seq())
    }

    /// Where folding stopped, if it did.
    pub fn stall(&self) -> Option<Stall> {
        self.inner.progress.borrow().stall.clone()
    }

    /// The projector's position, for health checks and metrics.
    pub fn status(&self) -> ProjectorStatus {
        let (next_seq, tasks, states_held, other_events, snapshot_seq) = {
            let model = self.read();
            (
                model.next_seq,
                model.tasks.len() as u64,
                model.states_held() as u64,
                model.other_events,
                model.snapshot_seq,
            )
        };
        ProjectorStatus {
            next_seq,
            lag: self.inner.ledger.head().size.saturating_sub(next_seq),
            tasks,
            states_held,
            other_events,
            snapshot_seq,
            stall: self.stall(),
        }
    }

    /// Waits until the event at `seq` is visible (read-your-writes), or returns the stall that
    /// keeps it from ever becoming visible. Something must be folding meanwhile —
    /// [`Projector::follow`], or the write path — or use [`Projector::catch_up_to`], which pulls
    /// from the ledger itself. Callers bound the wait with their own timeout.
    pub async fn wait_for(&self, seq: u64) -> Result<(), Stall> {
        let mut progress = self.inner.progress.subscribe();
        loop {
            {
                let now = progress.borrow_and_update();
                if now.next_seq > seq {
                    return Ok(());
                }
                if let Some(stall) = &now.stall
                    && stall.seq <= seq
                {
                    return Err(stall.clone());
                }
            }
            if progress.changed().await.is_err() {
                return Err(Stall {
                    seq,
                    reason: "the projector was dropped".into(),
                });
            }
        }
    }

    // ----- folding -----

    /// Folds one event, as the service's write path or a subscriber hands it over. Events the
    /// projector has passed are skipped; when `event` lies beyond its position the gap is read
    /// from the ledger first, so events may arrive out of order (concurrent appends).
    pub fn apply(&self, event: &RecordedEvent) -> Result<Applied, ApplyError> {
        if event.seq < self.next_seq() {
            return Ok(Applied::AlreadyApplied);
        }
        if let Some(before) = event.seq.checked_sub(1) {
            self.advance(before)?;
        }
        let result = {
            let mut model = self.write();
            let result = model.apply(event);
            if matches!(result, Ok(ref a) if *a != Applied::AlreadyApplied) {
                self.announce(|| Arc::new(event.clone()));
            }
            (result, model.next_seq)
        };
        match result {
            (Ok(applied), next_seq) => {
                self.publish(next_seq);
                Ok(applied)
            }
            (Err(e), _) => Err(self.stalled(e)),
        }
    }

    /// Folds every event up to and including `seq` that the ledger holds, reading them from
    /// the ledger. Returns how many events were folded.
    pub fn catch_up_to(&self, seq: u64) -> Result<u64, ApplyError> {
        self.advance(seq)
    }

    /// Folds every event up to and including `seq` from the events the ledger's writer handed
    /// out as it appended them: the write path's read-your-writes call after an append, which
    /// reads nothing back. Only events it did not see (more were appended than its buffer
    /// holds, or before the projector opened) are read from the ledger. Returns how many
    /// events were folded.
    pub fn fold_appended(&self, seq: u64) -> Result<u64, ApplyError> {
        if self.next_seq() > seq {
            return Ok(0);
        }
        let mut live = lock(&self.inner.live);
        let mut folded = 0;
        let mut taken: Vec<Arc<RecordedEvent>> = Vec::new();
        loop {
            // Whoever held the handover before may have folded this far already.
            let next = self.next_seq();
            if next > seq {
                break;
            }
            taken.clear();
            let mut missed = false;
            while taken.len() < self.inner.limits.catch_up_batch_events.max(1) {
                match live.try_next() {
                    Live::Event(event) if event.seq < next => {}
                    Live::Event(event) => {
                        let last = event.seq;
                        taken.push(event);
                        if last >= seq {
                            break;
                        }
                    }
                    // Missed, empty (the events were taken by an earlier handover that has not
                    // folded them yet, or came before the projector opened), or closed.
                    _ => {
                        missed = true;
                        break;
                    }
                }
            }
            if let Some(first) = taken.first()
                && first.seq > next
            {
                // Events went past unseen: read those from the ledger.
                folded += self.advance(first.seq - 1)?;
            }
            if !taken.is_empty() {
                folded += self.fold_batch(&taken)?;
            }
            if missed && self.next_seq() <= seq {
                folded += self.advance(seq)?;
                break;
            }
        }
        Ok(folded)
    }

    /// Folds events in seq order under one hold of the write lock.
    fn fold_batch(&self, events: &[Arc<RecordedEvent>]) -> Result<u64, ApplyError> {
        let mut folded = 0;
        let (result, next_seq) = {
            let mut model = self.write();
            let mut result = Ok(());
            for event in events {
                if event.seq < model.next_seq {
                    continue;
                }
                match model.apply(event) {
                    Ok(_) => {
                        folded += 1;
                        self.announce(|| Arc::clone(event));
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            (result, model.next_seq)
        };
        self.publish(next_seq);
        result.map_err(|e| self.stalled(e))?;
        Ok(folded)
    }

    /// Tells the feed's subscribers of an event just folded. Called with the write lock held,
    /// so they hear of events in seq order.
    fn announce(&self, event: impl FnOnce() -> Arc<RecordedEvent>) {
        if self.inner.folded.receiver_count() > 0 {
            // No subscriber left by now is not an error.
            let _ = self.inner.folded.send(Folded::Event(event()));
        }
    }

    /// Every event from `from_seq` on, each delivered only once the projection has folded it:
    /// a subscriber told of an event reads its effect on the read models at once. What it
    /// missed, or what came before it subscribed, it reads from the ledger, never past what
    /// was folded.
    pub fn feed(&self, from_seq: u64) -> Feed {
        Feed::new(self.clone(), self.inner.folded.subscribe(), from_seq)
    }

    /// Folds everything the ledger holds, then takes a snapshot if one is due. Returns how many
    /// events were folded.
    pub fn catch_up(&self) -> Result<u64, ApplyError> {
        let folded = self.advance(u64::MAX)?;
        self.snapshot_if_due();
        Ok(folded)
    }

    /// Follows the ledger: folds each event as it is appended, taking snapshots when due. Runs
    /// until something stops it and returns what did; drop the future to stop it (nothing is
    /// lost: the next call resumes from the projector's position). Folding and snapshots are
    /// short blocking steps.
    pub async fn follow(&self) -> FollowError {
        let mut subscription = self.inner.ledger.subscribe(self.next_seq());
        loop {
            let event = match subscription.next().await {
                Ok(event) => event,
                Err(e) => return e.into(),
            };
            if let Err(e) = self.apply(&event) {
                return e.into();
            }
            self.snapshot_if_due();
        }
    }

    /// Reads and folds events until `target` (inclusive) or the ledger's head, holding the
    /// write lock for one batch at a time.
    fn advance(&self, target: u64) -> Result<u64, ApplyError> {
        let batch = self.inner.limits.catch_up_batch_events.max(1) as u64;
        let mut folded = 0;
        loop {
            let next = self.next_seq();
            if next > target {
                break;
            }
            let want = (target - next).saturating_add(1).min(batch) as usize;
            let events = self
                .inner
                .ledger
                .read_range(next, want)
                .map_err(|e| self.stalled(e.into()))?;
            if events.is_empty() {
                break;
            }
            let (result, next_seq) = {
                let mut model = self.write();
                let mut result = Ok(());
                for event in events.iter().filter(|e| e.seq <= target) {
                    match model.apply(event) {
                        Ok(Applied::AlreadyApplied) => {}
                        Ok(_) => {
                            folded += 1;
                            self.announce(|| Arc::new(event.clone()));
                        }
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                (result, model.next_seq)
            };
            self.publish(next_seq);
            result.map_err(|e| self.stalled(e))?;
        }
        Ok(folded)
    }

    /// Tells waiters how far the projection has come; clears a stall it has passed.
    fn publish(&self, next_seq: u64) {
        self.inner.progress.send_if_modified(|p| {
            let mut changed = false;
            if next_seq > p.next_seq {
                p.next_seq = next_seq;
                changed = true;
            }
            if p.stall.as_ref().is_some_and(|s| s.seq < next_seq) {
                p.stall = None;
                changed = true;
            }
            changed
        });
    }

    /// Records where folding stopped, when the error names an event.
    fn stalled(&self, error: ApplyError) -> ApplyError {
        if let Some(seq) = error.seq() {
            tracing::error!(seq, error = %error, "the projection stops before this event");
            let stall = Stall {
                seq,
                reason: error.to_string(),
            };
            if self.inner.folded.receiver_count() > 0 {
                let _ = self.inner.folded.send(Folded::Stalled(stall.clone()));
            }
            self.inner.progress.send_modify(|p| p.stall = Some(stall));
        }
        error
    }

    // ----- snapshots and rebuilds -----

    /// Writes a snapshot of every task that changed since its last one, and a manifest saying
    /// they cover every event folded so far.
    pub fn snapshot(&self) -> Result<SnapshotReport, SnapshotError> {
        let _round = self.rounds();
        self.snapshot_round()
    }

    fn snapshot_round(&self) -> Result<SnapshotReport, SnapshotError> {
        let store = self.inner.store.as_ref().ok_or(SnapshotError::NoStore)?;
        let (manifest, entries, states) = {
            let model = self.read();
            let mut entries = Vec::new();
            let mut states = Vec::new();
            for (task_id, entry) in model.tasks.iter().filter(|(_, e)| e.is_unrecorded()) {
                let mut entry = entry.clone();
                if entry.is_dirty() {
                    // A state that left the cache is loaded again: from its newest snapshot,
                    // folded forward.
                    match model.state(task_id) {
                        Ok(Some(state)) => {
                            if entry.hash.is_none() {
                                entry.hash = Some(crate::hash::state_hash(&state));
                            }
                            states.push(Pending {
                                task_id: task_id.clone(),
                                version: entry.version,
                                last_seq: entry.last_seq,
                                last_hash: entry.last_hash,
                                state,
                            });
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, task = %task_id, "a state is left out of the snapshot round");
                        }
                    }
                }
                entries.push((task_id.clone(), entry));
            }
            let manifest = Manifest {
                next_seq: model.next_seq,
                last_hash: model.last_hash.0,
                tasks: model.tasks.len() as u64,
            };
            (manifest, entries, states)
        };
        // Encoding and writing happen outside the lock: folding goes on meanwhile, and what
        // it adds is simply not in this round.
        let report = store.write(
            manifest,
            &entries,
            &states,
            self.inner.limits.snapshots_per_task_max,
        )?;
        let mut model = self.write();
        for p in &states {
            if let Some(entry) = model.tasks.get_mut(&p.task_id)
                && entry.snapshot_version < p.version
            {
                entry.snapshot_version = p.version;
            }
        }
        for (task_id, written) in &entries {
            if let Some(entry) = model.tasks.get_mut(task_id)
                && entry.recorded_version < written.version
            {
                entry.recorded_version = written.version;
                if entry.version == written.version && entry.hash.is_none() {
                    entry.hash = written.hash;
                }
            }
        }
        model.snapshot_seq = model.snapshot_seq.max(manifest.next_seq);
        Ok(report)
    }

    fn snapshot_if_due(&self) {
        let every = self.inner.limits.snapshot_every_events;
        if every == 0 || self.inner.store.is_none() {
            return;
        }
        let due = {
            let model = self.read();
            model.next_seq.saturating_sub(model.snapshot_seq) >= every
        };
        if due && let Err(e) = self.snapshot() {
            tracing::warn!(error = %e, "the periodic snapshot was not written");
        }
    }

    /// Folds the whole ledger from seq 0 into a fresh model, compares it with the live one at
    /// the same seq, puts it live, and replaces every snapshot with its states. The live model
    /// keeps serving until the fresh one is ready.
    pub fn rebuild(&self) -> Result<RebuildReport, RebuildError> {
        let _round = self.rounds();
        let ledger = &self.inner.ledger;
        let batch = self.inner.limits.catch_up_batch_events;
        // From scratch: no state of the fresh model comes from a snapshot.
        let scratch = Arc::new(Source::new(ledger, None, &self.inner.limits));
        let mut fresh = Model::new(scratch, self.inner.limits.task_states_cached_max);
        let mut events_folded = fold_model(ledger, &mut fresh, u64::MAX, batch)?;
        let (previous, rebuilt, next_seq) = {
            let mut live = self.write();
            // Bring both to the same seq, so their hashes are comparable.
            let target = live.next_seq.max(fresh.next_seq);
            fold_model(ledger, &mut live, target, batch)?;
            events_folded += fold_model(ledger, &mut fresh, target, batch)?;
            let previous = projection_hash(&live);
            let rebuilt = projection_hash(&fresh);
            // The fresh model loads what it does not hold as the live one did.
            fresh.source = Arc::clone(&self.inner.source);
            *live = fresh;
            (previous, rebuilt, live.next_seq)
        };
        self.publish(next_seq);
        if previous != rebuilt {
            tracing::error!(
                ?previous,
                ?rebuilt,
                "the rebuilt projection differs from the live one"
            );
        }
        let snapshot = match &self.inner.store {
            None => None,
            Some(store) => {
                store.clear()?;
                Some(self.snapshot_round()?)
            }
        };
        Ok(RebuildReport {
            matched: previous == rebuilt,
            previous,
            rebuilt,
            events_folded,
            snapshot,
        })
    }

    // ----- queries -----

    /// A task's state at the head of what the projection has folded.
    pub fn state(&self, task_id: &str) -> Result<Arc<TaskState>, QueryError> {
        self.read()
            .state(task_id)?
            .ok_or_else(|| not_found(task_id))
    }

    /// Whether a task's state is held in memory, so that [`Projector::state`] reads neither
    /// a snapshot nor the ledger for it.
    pub fn holds_state(&self, task_id: &str) -> bool {
        self.read().holds_state(task_id)
    }

    /// A task's session version: its stream version.
    pub fn session_version(&self, task_id: &str) -> Result<u64, QueryError> {
        self.read()
            .tasks
            .get(task_id)
            .map(|e| e.version)
            .ok_or_else(|| not_found(task_id))
    }

    /// Snapshots found unusable when a state was loaded, since the projector opened; each was
    /// removed, and its task's state rebuilt from an older one or from the ledger.
    pub fn discarded(&self) -> Vec<Discarded> {
        lock(&self.inner.source.discarded).clone()
    }

    /// A task's state after its first `version` events (0 gives the state before any).
    pub fn state_at(&self, task_id: &str, version: u64) -> Result<Arc<TaskState>, QueryError> {
        Ok(self.time_travel(task_id, version)?.state)
    }

    /// [`Projector::state_at`], saying where the fold started and how much it folded: from the
    /// newest snapshot at or below `version` that the ledger confirms, else from the first
    /// event.
    pub fn time_travel(&self, task_id: &str, version: u64) -> Result<TimeTravel, QueryError> {
        let head = self.session_version(task_id)?;
        if version > head {
            return Err(QueryError::VersionBeyondHead {
                task_id: task_id.to_owned(),
                requested: version,
                head,
            });
        }
        if version == head {
            // The head may have moved on since it was read: the state is taken at the version
            // asked for, or folded to it below.
            let live = self.state(task_id)?;
            if live.version() == version {
                return Ok(TimeTravel {
                    state: live,
                    start: TravelStart::Live,
                    events_folded: 0,
                });
            }
        }
        let snapshot = match &self.inner.store {
            Some(store) if version > 0 => {
                match store.at_or_below(&self.inner.ledger, task_id, version) {
                    Ok((valid, discarded)) => {
                        lock(&self.inner.source.discarded).extend(discarded);
                        valid
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "time travel goes without snapshots");
                        None
                    }
                }
            }
            _ => None,
        };
        let (mut state, start) = match snapshot {
            Some(Valid {
                state,
                version,
                last_seq,
                ..
            }) => (
                state,
                TravelStart::Snapshot {
                    version,
                    seq: last_seq,
                },
            ),
            None => (TaskState::new(), TravelStart::Scratch),
        };
        let events_folded = fold_stream_to(
            &self.inner.ledger,
            task_id,
            &mut state,
            version,
            self.inner.limits.catch_up_batch_events,
        )?;
        Ok(TimeTravel {
            state: Arc::new(state),
            start,
            events_folded,
        })
    }

    /// The deterministic hash of a task's state at its head.
    pub fn task_hash(&self, task_id: &str) -> Result<Hash32, QueryError> {
        self.task_head(task_id).map(|(_, hash)| hash)
    }

    /// A task's version and state hash at its head, read together: what an auditor who
    /// folded the task's events elsewhere compares their state with.
    pub fn task_head(&self, task_id: &str) -> Result<(u64, Hash32), QueryError> {
        let model = self.read();
        let version = model
            .tasks
            .get(task_id)
            .map(|e| e.version)
            .ok_or_else(|| not_found(task_id))?;
        let hash = model.hash(task_id)?.ok_or_else(|| not_found(task_id))?;
        Ok((version, hash))
    }

    /// The hash of the whole projection: every task's state hash, in id order, at the
    /// projection's position. Loads every state not held in memory, one at a time: a check,
    /// not a query to serve often.
    pub fn projection_hash(&self) -> ProjectionHash {
        projection_hash(&self.read())
    }

    /// Every task a search of which asked the embedded corpus, in the order they were opened:
    /// what a check that the corpus is still there needs to read, without reading the ledger.
    pub fn tasks_that_searched_the_corpus(&self) -> Vec<String> {
        let model = self.read();
        model
            .order
            .values()
            .filter(|id| {
                model
                    .tasks
                    .get(*id)
                    .is_some_and(|e| e.summary.corpus_searched)
            })
            .cloned()
            .collect()
    }

    /// A page of the task index.
    pub fn tasks(&self, query: &TaskQuery) -> Result<TaskPage, QueryError> {
        index::page(&self.read(), query, &self.inner.limits)
    }

    /// A page of a task's audit trail, from stream version `from_version` (1-based) on, read
    /// from the ledger as it stands now.
    pub fn audit_trail(
        &self,
        task_id: &str,
        from_version: u64,
        limit: Option<usize>,
    ) -> Result<AuditPage, QueryError> {
        audit::page(
            &self.inner.ledger,
            task_id,
            from_version,
            limit,
            &self.inner.limits,
        )
    }

    /// The why-graph of a conclusion (the current one when `conclusion_id` is none), built
    /// from the task as it stood when the conclusion was issued.
    pub fn why_graph(
        &self,
        task_id: &str,
        conclusion_id: Option<&ConclusionId>,
    ) -> Result<WhyGraph, QueryError> {
        let head = self.state(task_id)?;
        let record = match conclusion_id {
            Some(id) => head.conclusion(id),
            None => head.current_conclusion(),
        };
        let Some(record) = record else {
            return Err(QueryError::ConclusionNotFound {
                task_id: task_id.to_owned(),
                conclusion_id: conclusion_id.map(|c| c.to_string()),
            });
        };
        let then = self.state_at(task_id, record.provenance.cite.version)?;
        why::build(
            task_id,
            &then,
            &head,
            &record.issued.conclusion_id,
            &self.inner.limits,
        )
    }
}

fn not_found(task_id: &str) -> QueryError {
    QueryError::TaskNotFound {
        task_id: task_id.to_owned(),
    }
}

fn projection_hash(model: &Model) -> ProjectionHash {
    let mut hasher = ProjectionHasher::new(model.next_seq);
    for task_id in model.tasks.keys() {
        match model.hash(task_id) {
            Ok(Some(hash)) => hasher.add(task_id, &hash),
            Ok(None) => {}
            Err(e) => {
                // A state that cannot be loaded hashes as nothing: the hash then differs from
                // any projection that holds it, which is what a comparison must show.
                tracing::warn!(error = %e, task = %task_id, "a task's state is left out of the projection hash");
                hasher.add(task_id, &Hash32([0; 32]));
            }
        }
    }
    hasher.finish()
}

/// Folds ledger events into `model` from its position up to `target` (exclusive) or the
/// ledger's head, without any lock: for models that are not live yet.
fn fold_model(
    ledger: &Ledger,
    model: &mut Model,
    target: u64,
    batch: usize,
) -> Result<u64, ApplyError> {
    let mut folded = 0;
    while model.next_seq < target {
        let want = (target - model.next_seq).min(batch.max(1) as u64) as usize;
        let events = ledger.read_range(model.next_seq, want)?;
        if events.is_empty() {
            break;
        }
        for event in &events {
            model.apply(event)?;
            folded += 1;
        }
    }
    Ok(folded)
}

/// What the snapshot directory gave an opening projector.
struct Loaded {
    model: Model,
    start: OpenStart,
    discarded: Vec<Discarded>,
    /// Whether the directory needs writing at once: it was empty or unusable.
    write_snapshot: bool,
}

/// Loads the manifest and the entries; falls back to an empty model (a full fold) when they
/// cannot describe the ledger.
fn load(
    store: &SnapshotStore,
    wiped: Option<String>,
    ledger: &Ledger,
    source: &Arc<Source>,
    limits: &Limits,
) -> Result<Loaded, OpenError> {
    let discarded: Vec<Discarded> = wiped
        .into_iter()
        .map(|reason| Discarded {
            task_id: None,
            version: None,
            reason,
        })
        .collect();
    let empty = || Model::new(Arc::clone(source), limits.task_states_cached_max);
    match store.load(ledger)? {
        Found::Empty => Ok(Loaded {
            model: empty(),
            start: OpenStart::Empty,
            discarded,
            write_snapshot: true,
        }),
        Found::Unusable(reason) => {
            tracing::warn!(dir = %store.dir().display(), %reason, "snapshots unusable; folding the whole ledger");
            store.clear()?;
            Ok(Loaded {
                model: empty(),
                start: OpenStart::FullRebuild { reason },
                discarded,
                write_snapshot: true,
            })
        }
        Found::Entries { manifest, entries } => {
            let mut model = empty();
            model.next_seq = manifest.next_seq;
            model.last_hash = Digest(manifest.last_hash);
            model.snapshot_seq = manifest.next_seq;
            for (task_id, entry) in entries {
                model.insert(task_id, entry);
            }
            Ok(Loaded {
                model,
                start: OpenStart::Snapshots {
                    next_seq: manifest.next_seq,
                    tasks: manifest.tasks,
                },
                write_snapshot: !discarded.is_empty(),
                discarded,
            })
        }
    }
}
