//! The writer thread: it owns the write path, gathers every waiting append into one group
//! commit, and keeps the right edge of the Merkle tree over what it wrote.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ledger_proof::{Frontier, Sha256, SigningKey, Timestamp};
use tokio::sync::{broadcast, mpsc};

use super::{AcceptedLoss, AppendJob, Core, Handle, Job, Ledger, LedgerOptions, request_bytes};
use crate::checkpoint_view::CheckpointView;
use crate::clock::{Clock, IdGenerator};
use crate::error::SigningError;
use crate::keys::KeyFiles;
use crate::storage::{ChainHead, CheckpointEntry, Storage, StorageError};
use crate::tree::StoredNodes;
use crate::verify::Verified;

/// How much longer than one interval of the periodic checkpointer a reader waits for it: the
/// writer may be busy with a group when the timer fires.
pub(super) const CHECKPOINT_WAIT_SLACK: Duration = Duration::from_millis(500);

/// Events read at a time when the stored Merkle tree is grown from the log.
const GROW_BATCH_EVENTS: usize = 8192;

/// How often a writer on a shared store looks by default whether the stored Merkle nodes stop
/// short of the log ([`Writer::mend_tree_if_due`]).
pub(super) const MEND_EVERY: Duration = Duration::from_secs(1);

impl Core {
    /// The shared state of a ledger over `storage`, poisoned at once if storage found a problem
    /// when it opened (or refuses writes because it was asked to).
    fn open(storage: &Arc<dyn Storage>, options: &LedgerOptions) -> Arc<Core> {
        let limits = options.limits.clone();
        let (events, _) = broadcast::channel(
            limits
                .subscription_buffer_events
                .clamp(1, crate::limits::SUBSCRIPTION_BUFFER_EVENTS_MAX),
        );
        let core = Arc::new(Core {
            storage: Arc::clone(storage),
            limits,
            poison: Mutex::new(None),
            events,
            verified: Mutex::new(Verified::default()),
            signer: RwLock::new(Err("no signing key".into())),
            origin: RwLock::new(String::new()),
            open_problems: Mutex::new(Vec::new()),
            checkpoint_wait: match options.checkpoint_interval {
                Some(every) if !every.is_zero() && !storage.is_read_only() => {
                    Some(every + CHECKPOINT_WAIT_SLACK)
                }
                _ => None,
            },
            checkpoint_view: Mutex::new(CheckpointView::default()),
        });
        if let Some(problem) = storage.problems().first() {
            core.poison(format!(
                "the ledger found a problem when it opened{}: {}",
                problem
                    .seq
                    .map(|s| format!(" at seq {s}"))
                    .unwrap_or_default(),
                problem.detail
            ));
        } else if storage.is_read_only() {
            // Asked for: not an error to log.
            *core.poison.lock().unwrap_or_else(|p| p.into_inner()) =
                Some("the ledger was opened read-only".into());
        }
        core
    }
}

/// The writer's timer: a checkpoint tick every `checkpoint` and, on a shared store, a follow
/// tick every `follow`, until the returned sender is dropped.
fn writer_timer(
    checkpoint: Option<Duration>,
    follow: Option<Duration>,
    ticks: mpsc::Sender<Job>,
) -> (
    std::sync::mpsc::Sender<()>,
    Option<std::thread::JoinHandle<()>>,
) {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let timer = std::thread::Builder::new()
        .name("ledger-timer".into())
        .spawn(move || {
            let start = std::time::Instant::now();
            let mut next_checkpoint = checkpoint.map(|every| start + every);
            let mut next_follow = follow.map(|every| start + every);
            loop {
                let Some(due) = next_checkpoint.into_iter().chain(next_follow).min() else {
                    return;
                };
                let wait = due.saturating_duration_since(std::time::Instant::now());
                if !matches!(
                    stop_rx.recv_timeout(wait),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                ) {
                    return;
                }
                let now = std::time::Instant::now();
                // A full queue means the writer is busy; the next tick will do.
                if let (Some(at), Some(every)) = (next_follow, follow)
                    && at <= now
                {
                    let _ = ticks.try_send(Job::Follow);
                    next_follow = Some(now + every);
                }
                if let (Some(at), Some(every)) = (next_checkpoint, checkpoint)
                    && at <= now
                {
                    let _ = ticks.try_send(Job::Tick);
                    next_checkpoint = Some(now + every);
                }
            }
        })
        .ok();
    (stop_tx, timer)
}

/// What wakes the writer besides appends: the checkpoint timer, and on a shared store the
/// store's notifications of other ledgers' appends and the follow timer, their fallback.
/// Answers the timer's stop and thread, if it runs.
#[allow(clippy::type_complexity)]
fn wake_ups(
    storage: &Arc<dyn Storage>,
    options: &LedgerOptions,
    tx: &mpsc::Sender<Job>,
) -> (
    Option<std::sync::mpsc::Sender<()>>,
    Option<std::thread::JoinHandle<()>>,
) {
    let writes = !storage.is_read_only();
    let checkpoint = options
        .checkpoint_interval
        .filter(|every| !every.is_zero() && writes);
    let follow = Some(options.follow_every)
        .filter(|every| !every.is_zero() && storage.is_shared() && writes);
    if storage.is_shared() && writes {
        // Weak: the writer stops when the last handle lets go of the queue, whatever the
        // store still holds.
        let queue = tx.downgrade();
        storage.watch(Arc::new(move || {
            if let Some(queue) = queue.upgrade() {
                // A full queue means the writer is busy: a group of its own that finds the
                // head moved follows, and so does the poll.
                let _ = queue.try_send(Job::Follow);
            }
        }));
    }
    if checkpoint.is_none() && follow.is_none() {
        return (None, None);
    }
    let (stop, timer) = writer_timer(checkpoint, follow, tx.clone());
    (Some(stop), timer)
}

impl Ledger {
    pub(super) fn start_checked(
        storage: Arc<dyn Storage>,
        options: LedgerOptions,
        key: Option<SigningKey>,
        files: Option<KeyFiles>,
        accept_loss: Option<&str>,
    ) -> (Ledger, Option<Result<AcceptedLoss, String>>) {
        let limits = options.limits.clone();
        let core = Core::open(&storage, &options);
        let (tx, rx) = mpsc::channel(
            limits
                .append_queue_max
                .clamp(1, crate::limits::APPEND_QUEUE_MAX),
        );
        let mut writer = Writer::new(&core, &storage, &options, files);
        writer.open_log = Some(Arc::default());
        if let Err(e) = writer.catch_up_tree() {
            core.poison(format!(
                "the Merkle tree could not be brought up to date: {e}"
            ));
        }
        if let Err(e) = writer.recall_last_time() {
            core.poison(format!("the time of the last event could not be read: {e}"));
        }
        writer.set_up_key(key);
        if writer.shared && writer.key.is_none() && writer.leads {
            // A node that cannot sign leaves the checkpoints to one that can.
            writer.leads = false;
            storage.resign_checkpoint_lead();
        }
        let accepted = writer.check_on_open(accept_loss);
        if let Some(log) = writer.open_log.take() {
            core.seed_checkpoint_view(&log);
        }
        let thread = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || writer.run(rx));
        let writer = match thread {
            Ok(handle) => Some(handle),
            Err(e) => {
                core.poison(format!("could not start the writer thread: {e}"));
                None
            }
        };
        let (timer_stop, timer) = wake_ups(&storage, &options, &tx);
        let ledger = Ledger {
            handle: Arc::new(Handle {
                core,
                queue: Mutex::new(Some(tx)),
                writer: Mutex::new(writer),
                timer_stop: Mutex::new(timer_stop),
                timer: Mutex::new(timer),
            }),
        };
        (ledger, accepted)
    }
}

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) core: Arc<Core>,
    pub(super) head: ChainHead,
    /// Stream versions already looked up or written; storage is asked only once per stream.
    pub(super) versions: HashMap<String, u64>,
    pub(super) ids: IdGenerator,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) last_time: Option<DateTime<Utc>>,
    /// The right edge of the Merkle tree over every event written.
    pub(super) frontier: Frontier,
    /// The key that signs checkpoints, when it is the one the checkpoint log names.
    pub(super) key: Option<SigningKey>,
    pub(super) files: Option<KeyFiles>,
    /// Size and time of the last checkpoint or rotation.
    pub(super) last_signed: Option<(u64, Timestamp)>,
    /// Entries of the checkpoint log this writer has read or written: it knows which key the
    /// log names up to there, and a signed entry is appended only if none after changed it.
    pub(super) entries_seen: u64,
    /// The key last read from the key folder after this one's was retired: the folder is
    /// read again at each interval, and a key is tried again only once it changed.
    pub(super) tried_key: Option<ledger_proof::PublicKey>,
    pub(super) checkpoint_every_events: Option<u64>,
    /// The key found on disk, whether or not the checkpoint log names it: what signs the
    /// acceptance of a loss that took the checkpoint log with it.
    pub(super) unadopted: Option<SigningKey>,
    /// The log's origin: the first line of its checkpoints, the name of its key.
    pub(super) origin: String,
    /// The origin the operator configured, used when the first key is introduced.
    pub(super) configured_origin: Option<String>,
    /// Other ledgers may append to the same store: follow them, retry on a moved head.
    pub(super) shared: bool,
    /// On a shared store, another ledger wrote since this one last planned a group: plan the
    /// next under the append lock rather than try it on this writer's head first.
    pub(super) contended: bool,
    /// Another ledger committed since this one last read or wrote on the store's head: follow
    /// once no append is waiting.
    pub(super) follow_due: bool,
    /// This ledger writes the periodic checkpoints (on a shared store, one ledger at a time).
    pub(super) leads: bool,
    /// On a shared store: how often to look whether the stored Merkle nodes stop short of the
    /// log (zero: never), when to look next, and the stored size found short at the last look.
    pub(super) mend_every: Duration,
    pub(super) mend_due: Instant,
    pub(super) mend_seen: Option<u64>,
    /// The checkpoint log as the checks on open read it, kept only while the ledger opens:
    /// read once, then only the entries appended since.
    pub(super) open_log: Option<Arc<Vec<CheckpointEntry>>>,
}

impl Writer {
    /// A writer over `storage` at its head, its Merkle tree not yet brought up to date.
    fn new(
        core: &Arc<Core>,
        storage: &Arc<dyn Storage>,
        options: &LedgerOptions,
        files: Option<KeyFiles>,
    ) -> Writer {
        Writer {
            core: Arc::clone(core),
            head: storage.head(),
            versions: HashMap::new(),
            ids: match options.id_seed {
                Some(seed) => IdGenerator::seeded(seed),
                None => IdGenerator::from_entropy(),
            },
            clock: Arc::clone(&options.clock),
            last_time: None,
            frontier: Frontier::new(),
            key: None,
            files,
            last_signed: None,
            entries_seen: 0,
            tried_key: None,
            checkpoint_every_events: options.checkpoint_every_events,
            unadopted: None,
            origin: String::new(),
            configured_origin: options.origin.clone(),
            shared: storage.is_shared(),
            contended: false,
            follow_due: false,
            leads: storage.checkpoint_leader(),
            mend_every: options.mend_every,
            mend_due: Instant::now() + options.mend_every,
            mend_seen: None,
            open_log: None,
        }
    }

    /// The whole checkpoint log. While the ledger opens, each check reads it from the copy
    /// the first one read, with what was appended since: an open parses the log once.
    pub(super) fn checkpoint_log(&mut self) -> Result<Arc<Vec<CheckpointEntry>>, StorageError> {
        let storage = &self.core.storage;
        let Some(log) = &mut self.open_log else {
            return Ok(Arc::new(storage.checkpoint_entries()?));
        };
        let new = storage.checkpoint_entries_from(log.len() as u64)?;
        if !new.is_empty() {
            Arc::make_mut(log).extend(new);
        }
        Ok(Arc::clone(log))
    }

    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let limits = self.core.limits.clone();
        let mut next: Option<Job> = None;
        loop {
            self.mend_tree_if_due();
            let Some(job) = next.take().or_else(|| self.next_job(&mut rx)) else {
                break;
            };
            let (request, content, reply) = match job {
                Job::Append {
                    request,
                    content,
                    reply,
                } => (request, content, reply),
                // Appends waiting go first: a group that finds the head moved follows anyway,
                // and one written on an unmoved head shows there was nothing to follow.
                Job::Follow => {
                    self.follow_due = true;
                    continue;
                }
                other => {
                    self.run_other(other);
                    continue;
                }
            };
            let mut events = request.events.len();
            let mut bytes = request_bytes(&request, &content);
            let mut jobs = vec![AppendJob {
                request,
                content,
                reply,
            }];
            // Take every append already waiting, up to one group's worth: this is the group
            // commit. Appends that arrive during the sync below form the next group; any other
            // job waits until this group is written.
            while events < limits.group_events_max && bytes < limits.group_bytes_max {
                match rx.try_recv() {
                    Ok(Job::Append {
                        request,
                        content,
                        reply,
                    }) => {
                        events += request.events.len();
                        bytes += request_bytes(&request, &content);
                        jobs.push(AppendJob {
                            request,
                            content,
                            reply,
                        });
                    }
                    // This group learns what others appended, or that they appended nothing.
                    Ok(Job::Follow) => self.follow_due = true,
                    Ok(other) => {
                        next = Some(other);
                        break;
                    }
                    Err(_) => break,
                }
            }
            self.process(jobs);
        }
    }

    /// The next job, waiting for one; a follow that is due runs first if none is waiting.
    fn next_job(&mut self, rx: &mut mpsc::Receiver<Job>) -> Option<Job> {
        if let Ok(job) = rx.try_recv() {
            return Some(job);
        }
        if self.follow_due {
            self.follow_quietly();
        }
        rx.blocking_recv()
    }

    pub(super) fn run_other(&mut self, job: Job) {
        // A checkpoint or rotation on a shared store covers what every node committed so far.
        if self.shared && !matches!(job, Job::Append { .. } | Job::Cosign { .. }) {
            self.follow_quietly();
        }
        match job {
            Job::Append { .. } | Job::Follow => {}
            Job::Sync { reply } => {
                let _ = reply.send(self.head);
            }
            Job::Checkpoint { reply } => {
                let _ = reply.send(self.write_checkpoint());
            }
            Job::Rotate { reply } => {
                let _ = reply.send(self.rotate());
            }
            Job::SignManifest { manifest, reply } => {
                let signed = match &self.key {
                    None => Err(SigningError::NoKey("no usable signing key".into())),
                    Some(key) => (*manifest)
                        .sign(key)
                        .map_err(|e| SigningError::Manifest(e.to_string())),
                };
                let _ = reply.send(signed);
            }
            Job::Cosign { cosignature, reply } => {
                let _ = reply.send(self.keep_cosignature(*cosignature));
            }
            Job::Tick => {
                if self.shared {
                    // A node whose key another node retired learns it here, even when it does
                    // not lead, and takes the key the log names once the operator put it in
                    // place; until then it signs nothing and does not lead.
                    self.check_key();
                    self.leads = self.key.is_some() && self.core.storage.checkpoint_leader();
                }
                if self.leads
                    && self
                        .last_signed
                        .is_none_or(|(size, _)| self.frontier.size() > size)
                    && let Err(e) = self.write_checkpoint()
                {
                    tracing::warn!(error = %e, "the periodic checkpoint was not written");
                }
            }
        }
    }

    /// Brings the stored Merkle tree up to the head of the log, from wherever the stored nodes
    /// end; rebuilds it from the first event if they cannot be read.
    pub(super) fn catch_up_tree(&mut self) -> Result<(), String> {
        let storage = Arc::clone(&self.core.storage);
        let stored = storage.merkle_size().map_err(|e| e.to_string())?;
        let mut frontier = match Frontier::load(&StoredNodes(&*storage), stored) {
            Ok(frontier) => frontier,
            Err(e) => {
                tracing::warn!(error = %e, "rebuilding the Merkle tree from the first event");
                // Nodes are stored once each, so what is left of the old ones goes first.
                storage.clear_merkle_nodes().map_err(|e| e.to_string())?;
                Frontier::new()
            }
        };
        let head = self.head.size;
        while frontier.size() < head {
            self.grow_stored(&mut frontier, head)?;
        }
        self.frontier = frontier;
        Ok(())
    }

    /// Grows `frontier` by the events after it, up to `to` and at most one read's worth, and
    /// stores the nodes they complete.
    fn grow_stored(&self, frontier: &mut Frontier, to: u64) -> Result<(), String> {
        let from = frontier.size();
        let limit = usize::try_from(to.saturating_sub(from))
            .map_or(GROW_BATCH_EVENTS, |n| n.min(GROW_BATCH_EVENTS));
        let events = self
            .core
            .storage
            .read_range(from, limit)
            .map_err(|e| e.to_string())?;
        if events.is_empty() {
            return Err(format!("the log ends at {from} before {to}"));
        }
        let mut nodes = Vec::with_capacity(events.len() * 2);
        for raw in &events {
            let (_, hash) = crate::envelope::split_stored(&raw.bytes)
                .map_err(|e| format!("seq {}: {e}", raw.seq))?;
            frontier
                .push_into(&Sha256, hash.as_bytes(), &mut nodes)
                .map_err(|e| format!("Merkle tree: {e}"))?;
        }
        self.core
            .storage
            .put_merkle_nodes(&nodes, frontier.size())
            .map_err(|e| e.to_string())
    }

    /// On a shared store, at most once every `mend_every` ([`MEND_EVERY`] by default): when the stored Merkle nodes stop
    /// short of this writer's tree at the same size as at the last look, stores the nodes of
    /// one read's worth of events from there. The stored size stops short of the log only
    /// while a node that cleared the nodes stores them again (the nodes other nodes' groups
    /// complete meanwhile do not move it, their growth starting outside it), or after such a
    /// node stopped before it was done: the look before gives a node still at it time to move
    /// the size on itself.
    pub(super) fn mend_tree_if_due(&mut self) {
        if !self.shared || self.mend_every.is_zero() {
            return;
        }
        let now = Instant::now();
        if now < self.mend_due || self.core.poisoned().is_some() {
            return;
        }
        self.mend_due = now + self.mend_every;
        if let Err(e) = self.mend_tree() {
            // Said at a sixtieth of the looks; the next open rebuilds what it cannot read.
            self.mend_due = now + self.mend_every * 60;
            tracing::warn!(error = %e, "could not store the Merkle nodes the store lacks");
        }
    }

    fn mend_tree(&mut self) -> Result<(), String> {
        let storage = Arc::clone(&self.core.storage);
        let stored = storage.merkle_size().map_err(|e| e.to_string())?;
        let to = self.frontier.size();
        if stored >= to {
            self.mend_seen = None;
            return Ok(());
        }
        if self.mend_seen.replace(stored) != Some(stored) {
            // The first look at this size.
            return Ok(());
        }
        tracing::warn!(
            stored,
            size = to,
            "the stored Merkle nodes stop short of the log; storing them from there"
        );
        let mut frontier =
            Frontier::load(&StoredNodes(&*storage), stored).map_err(|e| e.to_string())?;
        self.grow_stored(&mut frontier, to)?;
        // Its own progress needs no second look.
        self.mend_seen = Some(frontier.size());
        Ok(())
    }

    /// Takes the time the last event of the log was recorded as the floor of the next group's,
    /// so that `recorded_at` never decreases along the log, whatever the clock says after a
    /// restart (a clock set back, another machine's, a restore).
    pub(super) fn recall_last_time(&mut self) -> Result<(), String> {
        let Some(last) = self.head.size.checked_sub(1) else {
            return Ok(());
        };
        let events = self
            .core
            .storage
            .read_range(last, 1)
            .map_err(|e| e.to_string())?;
        let Some(raw) = events.first() else {
            return Err(format!("the log ends before seq {last}"));
        };
        let event = crate::envelope::decode_stored(&raw.bytes).map_err(|e| e.to_string())?;
        if self.last_time.is_none_or(|t| t < event.recorded_at) {
            self.last_time = Some(event.recorded_at);
        }
        Ok(())
    }

    /// The time for a group: the clock, but never earlier than the previous group's, so
    /// `recorded_at` never decreases along the log.
    pub(super) fn tick(&mut self) -> DateTime<Utc> {
        // To the microsecond, the precision the envelope stores: the events handed to live
        // readers must be the events a read gives back.
        let now = self.clock.now();
        let now = DateTime::from_timestamp_micros(now.timestamp_micros()).unwrap_or(now);
        let now = match self.last_time {
            Some(last) if last > now => last,
            _ => now,
        };
        self.last_time = Some(now);
        now
    }
}
