//! The ledger: appends with optimistic concurrency, idempotency and group commit; reads;
//! subscriptions.
//!
//! One writer thread owns the write path. Appends queue for it; it takes every append waiting,
//! checks each (idempotency key first, then the expected version), chains and seals their events,
//! hands the whole group to storage for one durable write and one sync, and only then answers
//! each caller. Concurrent appends therefore share a sync (group commit) without any caller
//! seeing another's failure: a refused append is refused alone.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ledger_proof::{
    Blake3, Checkpoint, Frontier, KeyRotation, Manifest, PublicKey, SignedManifest, SigningKey,
    Timestamp,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use crate::clock::{Clock, IdGenerator, SystemClock, idempotent_event_id};
use crate::envelope::{Digest, Envelope, RecordedEvent, decode_stored, decode_stored_ref};
use crate::error::{AppendError, ReadError, SigningError};
use crate::keys::{KeyFiles, random_key};
use crate::limits::Limits;
use crate::storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use crate::storage::{
    ChainHead, CheckpointEntry, Commit, IdempotencyRecord, RawEvent, SealedEvent, Storage,
    StorageError, TreeGrowth,
};
use crate::subscribe::Subscription;
use crate::tree::StoredNodes;
use crate::verify::Verified;

mod recovery;

pub use recovery::AcceptedLoss;

/// Which version the caller expects a stream to be at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// Append whatever the version.
    Any,
    /// Append only if the stream is exactly at this version (0: the stream must be new).
    Exact(u64),
}

/// What an event names as its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Causation {
    /// An event already in the ledger, by hash.
    Event(Digest),
    /// An earlier event of the same append, by its index in it.
    InBatch(u32),
}

/// An event to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// Its kind.
    pub kind: String,
    /// Its encoded payload.
    pub payload: Vec<u8>,
    /// What it was derived from.
    pub causation: Vec<Causation>,
}

/// An idempotency key and the fingerprint of the command that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// The key as the client sent it.
    pub key: String,
    /// Fingerprint of the command: its name, its arguments other than the expected version and
    /// the key, and the actor. The same key with another fingerprint is refused.
    pub fingerprint: Digest,
}

/// One append: events for one stream, written all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendRequest {
    /// The stream.
    pub stream: String,
    /// The version the caller expects the stream to be at.
    pub expected: ExpectedVersion,
    /// Who is appending.
    pub actor: String,
    /// The events, at least one.
    pub events: Vec<NewEvent>,
    /// The command's idempotency key, if it carries one.
    pub idempotency: Option<Idempotency>,
}

/// One event an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptEvent {
    /// Its seq.
    pub seq: u64,
    /// Its stream version.
    pub stream_version: u64,
    /// Its id.
    pub event_id: Uuid,
    /// Its hash.
    pub hash: Digest,
}

/// What an append wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// The stream.
    pub stream: String,
    /// The stream's version after the append.
    pub stream_version: u64,
    /// The events written, in order.
    pub events: Vec<ReceiptEvent>,
    /// True when this is the receipt of an earlier append with the same idempotency key and
    /// command: nothing new was written.
    pub replayed: bool,
}

/// How to open a ledger.
#[derive(Debug, Clone)]
pub struct LedgerOptions {
    /// Limits on what the ledger accepts.
    pub limits: Limits,
    /// The clock that stamps `recorded_at`.
    pub clock: Arc<dyn Clock>,
    /// A seed for event ids, for reproducible tests; `None` draws one from the system.
    pub id_seed: Option<u64>,
    /// What the lock file says about the process holding the ledger open.
    pub lock_note: Option<String>,
    /// Write a checkpoint when the tree has grown by this many events since the last one.
    pub checkpoint_every_events: Option<u64>,
    /// Write a checkpoint this often when the tree has grown since the last one.
    pub checkpoint_interval: Option<Duration>,
    /// The signing key of a ledger over storage that has no directory of its own (tests); a
    /// ledger opened on a directory keeps its key there.
    pub signing_key: Option<Arc<SigningKey>>,
    /// Open without changing a byte of the directory: no key, index or checkpoint is written,
    /// nothing is cut, and every append is refused. For audits, of read-only copies too.
    pub read_only: bool,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            limits: Limits::default(),
            clock: Arc::new(SystemClock),
            id_seed: None,
            lock_note: None,
            checkpoint_every_events: Some(10_000),
            checkpoint_interval: Some(Duration::from_secs(1)),
            signing_key: None,
            read_only: false,
        }
    }
}

/// How much longer than one interval of the periodic checkpointer a reader waits for it: the
/// writer may be busy with a group when the timer fires.
const CHECKPOINT_WAIT_SLACK: Duration = Duration::from_millis(500);

/// What the writer thread and the handles share.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) limits: Limits,
    poison: Mutex<Option<String>>,
    pub(crate) events: broadcast::Sender<Arc<RecordedEvent>>,
    pub(crate) verified: Mutex<Verified>,
    /// The key that signs checkpoints now, and why signing is impossible if it is.
    pub(crate) signer: RwLock<Result<PublicKey, String>>,
    /// What the checks made when the ledger opened found wrong, besides storage's problems.
    pub(crate) open_problems: Mutex<Vec<String>>,
    /// How long a reader waits for the periodic checkpointer to cover what it asks about; none
    /// when nothing writes checkpoints periodically.
    pub(crate) checkpoint_wait: Option<Duration>,
}

impl Core {
    pub(crate) fn poison(&self, reason: String) {
        let mut poison = self.poison.lock().unwrap_or_else(|p| p.into_inner());
        if poison.is_none() {
            tracing::error!(%reason, "the ledger refuses further appends");
            *poison = Some(reason);
        }
    }

    pub(crate) fn poisoned(&self) -> Option<String> {
        self.poison
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Decodes events read from storage, checking each is the event its position says.
    pub(crate) fn decode(&self, raw: &RawEvent) -> Result<RecordedEvent, ReadError> {
        let event = decode_stored(&raw.bytes).map_err(|e| {
            self.poison(format!(
                "a read found the event at seq {} damaged: {e}",
                raw.seq
            ));
            ReadError::Damaged {
                seq: raw.seq,
                detail: e.to_string(),
            }
        })?;
        if event.seq != raw.seq {
            return Err(ReadError::Damaged {
                seq: raw.seq,
                detail: format!("the event stored here says it is seq {}", event.seq),
            });
        }
        Ok(event)
    }

    /// The hash of the event at `seq`, checked as [`Core::decode`] checks an event (its stored
    /// hash is the hash of its bytes, and it says it is at `seq`) but without copying or
    /// decoding what the hash does not need: what a proof of inclusion is given.
    pub(crate) fn event_hash(&self, seq: u64) -> Result<Option<Digest>, ReadError> {
        let mut found = None;
        self.storage.visit_range(seq, 1, &mut |at, bytes| {
            if at != seq {
                // The log has no event at `seq` where the index said it would be.
                return ControlFlow::Break(());
            }
            found = Some(match decode_stored_ref(bytes) {
                Ok(event) if event.seq == at => Ok(event.hash),
                Ok(event) => Err(ReadError::Damaged {
                    seq: at,
                    detail: format!("the event stored here says it is seq {}", event.seq),
                }),
                Err(e) => Err(ReadError::Damaged {
                    seq: at,
                    detail: e.to_string(),
                }),
            });
            ControlFlow::Break(())
        })?;
        found.transpose()
    }

    pub(crate) fn read_range(
        &self,
        from_seq: u64,
        max: usize,
    ) -> Result<Vec<RecordedEvent>, ReadError> {
        let max = max.min(self.limits.read_events_max);
        let raw = match self.storage.read_range(from_seq, max) {
            // The events before the damage read as they are; the damage is found by the read
            // that starts at it.
            Err(StorageError::Corrupt { seq: Some(bad), .. }) if bad > from_seq => self
                .storage
                .read_range(from_seq, ((bad - from_seq) as usize).min(max))
                .map_err(|e| self.damage_found(e))?,
            other => other.map_err(|e| self.damage_found(e))?,
        };
        raw.iter().map(|r| self.decode(r)).collect()
    }

    /// A read that finds stored bytes damaged stops every later write: the damage was missed
    /// when the ledger opened (it checks what it indexes then, not every event it indexed
    /// before), and writing on would bury it.
    pub(crate) fn damage_found(&self, e: StorageError) -> StorageError {
        if let StorageError::Corrupt { seq, detail } = &e {
            self.poison(format!(
                "a read found the log damaged{}: {detail}",
                seq.map(|s| format!(" at seq {s}")).unwrap_or_default()
            ));
        }
        e
    }
}

/// What the writer thread is asked to do.
enum Job {
    Append {
        request: AppendRequest,
        reply: oneshot::Sender<Result<Receipt, AppendError>>,
    },
    Checkpoint {
        reply: oneshot::Sender<Result<Checkpoint, SigningError>>,
    },
    Rotate {
        reply: oneshot::Sender<Result<KeyRotation, SigningError>>,
    },
    SignManifest {
        manifest: Box<Manifest>,
        reply: oneshot::Sender<Result<SignedManifest, SigningError>>,
    },
    /// A checkpoint if the tree grew since the last one (the periodic timer).
    Tick,
}

/// One queued append.
struct AppendJob {
    request: AppendRequest,
    reply: oneshot::Sender<Result<Receipt, AppendError>>,
}

/// The ledger. Cheap to clone; every clone is a handle on the same log.
#[derive(Debug, Clone)]
pub struct Ledger {
    handle: Arc<Handle>,
}

#[derive(Debug)]
struct Handle {
    core: Arc<Core>,
    queue: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Dropping it stops the periodic checkpoint timer.
    timer_stop: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    timer: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Handle {
    fn shutdown(&self) {
        self.timer_stop
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(timer) = self.timer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = timer.join();
        }
        // Closing the queue lets the writer finish what is queued and stop.
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = writer.join();
        }
        if let Err(e) = self.core.storage.checkpoint_index() {
            tracing::warn!(error = %e, "could not persist the index on shutdown; the next open rebuilds it");
        }
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Append { request, .. } => write!(f, "Append({})", request.stream),
            Job::Checkpoint { .. } => f.write_str("Checkpoint"),
            Job::Rotate { .. } => f.write_str("Rotate"),
            Job::SignManifest { .. } => f.write_str("SignManifest"),
            Job::Tick => f.write_str("Tick"),
        }
    }
}

impl Ledger {
    /// Opens (creating if needed) the embedded ledger in `dir`.
    ///
    /// The ledger checks, before it takes any write, that its log holds everything a durable
    /// record says it held, and that every signed entry of the checkpoint log verifies and
    /// agrees with the log. If not, it opens read-only: reads and verification work, every
    /// append is refused with the reason ([`Ledger::poisoned`]), and nothing in the directory
    /// changes until an operator accepts the loss ([`Ledger::accept_loss`]).
    pub fn open(dir: &Path, options: LedgerOptions) -> Result<Ledger, StorageError> {
        Ok(Ledger::open_embedded(dir, options, None)?.0)
    }

    fn open_embedded(
        dir: &Path,
        options: LedgerOptions,
        accept_loss: Option<&str>,
    ) -> Result<(Ledger, Option<Result<AcceptedLoss, String>>), StorageError> {
        let mut embedded = EmbeddedOptions {
            segment_bytes_max: options.limits.segment_bytes_max,
            read_only: options.read_only,
            lock_note: format!("research-ledger (pid {})", std::process::id()),
        };
        if let Some(note) = &options.lock_note {
            embedded.lock_note = note.clone();
        }
        let storage = EmbeddedStorage::open(dir, embedded)?;
        for note in storage.recoveries() {
            tracing::warn!(%note, "recovered on open");
        }
        let files = KeyFiles::new(dir.join("keys"));
        let key = if storage.is_read_only() {
            files.load()?
        } else {
            Some(files.load_or_create()?)
        };
        let storage: Arc<dyn Storage> = Arc::new(storage);
        Ok(Ledger::start_checked(
            storage,
            options,
            key,
            Some(files),
            accept_loss,
        ))
    }

    /// A ledger over any storage backend. Its signing key is `options.signing_key`, or a new
    /// one kept only in memory.
    pub fn with_storage(storage: Arc<dyn Storage>, options: LedgerOptions) -> Ledger {
        let key = match &options.signing_key {
            Some(key) => Ok(SigningKey::from_secret_bytes(&key.to_secret_bytes())),
            None => random_key(),
        };
        match key {
            Ok(key) => Ledger::start(storage, options, Some(key), None),
            Err(e) => {
                let ledger = Ledger::start(
                    storage,
                    options,
                    Some(SigningKey::from_secret_bytes(&[0; 32])),
                    None,
                );
                *ledger
                    .core()
                    .signer
                    .write()
                    .unwrap_or_else(|p| p.into_inner()) = Err(e.to_string());
                ledger
            }
        }
    }

    pub(crate) fn start(
        storage: Arc<dyn Storage>,
        options: LedgerOptions,
        key: Option<SigningKey>,
        files: Option<KeyFiles>,
    ) -> Ledger {
        Ledger::start_checked(storage, options, key, files, None).0
    }

    fn start_checked(
        storage: Arc<dyn Storage>,
        options: LedgerOptions,
        key: Option<SigningKey>,
        files: Option<KeyFiles>,
        accept_loss: Option<&str>,
    ) -> (Ledger, Option<Result<AcceptedLoss, String>>) {
        let limits = options.limits.clone();
        let (events, _) = broadcast::channel(limits.subscription_buffer_events.max(1));
        let core = Arc::new(Core {
            storage: Arc::clone(&storage),
            limits: limits.clone(),
            poison: Mutex::new(None),
            events,
            verified: Mutex::new(Verified::default()),
            signer: RwLock::new(Err("no signing key".into())),
            open_problems: Mutex::new(Vec::new()),
            checkpoint_wait: match options.checkpoint_interval {
                Some(every) if !every.is_zero() && !storage.is_read_only() => {
                    Some(every + CHECKPOINT_WAIT_SLACK)
                }
                _ => None,
            },
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
        let (tx, rx) = mpsc::channel(limits.append_queue_max.max(1));
        let mut writer = Writer {
            core: Arc::clone(&core),
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
            checkpoint_every_events: options.checkpoint_every_events,
            unadopted: None,
        };
        if let Err(e) = writer.catch_up_tree() {
            core.poison(format!(
                "the Merkle tree could not be brought up to date: {e}"
            ));
        }
        writer.set_up_key(key);
        let accepted = writer.check_on_open(accept_loss);
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
        let (timer_stop, timer) = match options.checkpoint_interval {
            Some(every) if !every.is_zero() && !storage.is_read_only() => {
                let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
                let ticks = tx.clone();
                let timer = std::thread::Builder::new()
                    .name("ledger-checkpoint-timer".into())
                    .spawn(move || {
                        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                            stop_rx.recv_timeout(every)
                        {
                            // A full queue means the writer is busy; the next tick will do.
                            let _ = ticks.try_send(Job::Tick);
                        }
                    })
                    .ok();
                (Some(stop_tx), timer)
            }
            _ => (None, None),
        };
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

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.handle.core
    }

    fn sender(&self) -> Result<mpsc::Sender<Job>, AppendError> {
        self.handle
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(AppendError::Closed)
    }

    /// Appends, blocking until the events are durable or refused. Not for use inside an async
    /// task: use [`Ledger::append_async`] there.
    pub fn append(&self, request: AppendRequest) -> Result<Receipt, AppendError> {
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .blocking_send(Job::Append { request, reply })
            .map_err(|_| AppendError::Closed)?;
        rx.blocking_recv().map_err(|_| AppendError::Closed)?
    }

    /// Appends, resolving when the events are durable or refused.
    pub async fn append_async(&self, request: AppendRequest) -> Result<Receipt, AppendError> {
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .send(Job::Append { request, reply })
            .await
            .map_err(|_| AppendError::Closed)?;
        rx.await.map_err(|_| AppendError::Closed)?
    }

    /// Writes a signed checkpoint of the tree as it stands now. Blocking; not for use inside
    /// an async task (use [`Ledger::checkpoint_async`]).
    pub fn checkpoint(&self) -> Result<Checkpoint, SigningError> {
        let (reply, rx) = oneshot::channel();
        self.sender()
            .map_err(|_| SigningError::Closed)?
            .blocking_send(Job::Checkpoint { reply })
            .map_err(|_| SigningError::Closed)?;
        rx.blocking_recv().map_err(|_| SigningError::Closed)?
    }

    /// Writes a signed checkpoint of the tree as it stands now.
    pub async fn checkpoint_async(&self) -> Result<Checkpoint, SigningError> {
        let (reply, rx) = oneshot::channel();
        self.sender()
            .map_err(|_| SigningError::Closed)?
            .send(Job::Checkpoint { reply })
            .await
            .map_err(|_| SigningError::Closed)?;
        rx.await.map_err(|_| SigningError::Closed)?
    }

    /// Signs an export bundle's manifest with the current key.
    pub fn sign_manifest(&self, manifest: Manifest) -> Result<SignedManifest, SigningError> {
        let (reply, rx) = oneshot::channel();
        self.sender()
            .map_err(|_| SigningError::Closed)?
            .blocking_send(Job::SignManifest {
                manifest: Box::new(manifest),
                reply,
            })
            .map_err(|_| SigningError::Closed)?;
        rx.blocking_recv().map_err(|_| SigningError::Closed)?
    }

    /// What an idempotency key committed, if it was used: a front end checks it before
    /// deciding a command, so that a retry of a command that succeeded is answered with its
    /// original events even when the same command would now be refused.
    pub fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, ReadError> {
        Ok(self.core().storage.idempotency(key)?)
    }

    /// Every idempotency record, ordered by the seq of the commit it names.
    pub fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, ReadError> {
        Ok(self.core().storage.idempotency_records()?)
    }

    /// Replaces the signing key: a statement signed by the old key introduces the new one.
    pub fn rotate_key(&self) -> Result<KeyRotation, SigningError> {
        let (reply, rx) = oneshot::channel();
        self.sender()
            .map_err(|_| SigningError::Closed)?
            .blocking_send(Job::Rotate { reply })
            .map_err(|_| SigningError::Closed)?;
        rx.blocking_recv().map_err(|_| SigningError::Closed)?
    }

    /// The head of the chain.
    pub fn head(&self) -> ChainHead {
        self.core().storage.head()
    }

    /// Why the ledger refuses appends, if it does: a problem found when it opened, a failed
    /// write, sync or verification, an index that stopped following the log, or a read-only
    /// open.
    pub fn poisoned(&self) -> Option<String> {
        self.core()
            .poisoned()
            .or_else(|| self.core().storage.failure())
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.core().limits
    }

    /// Up to `max` events (capped by `read_events_max`) from `from_seq` on.
    pub fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RecordedEvent>, ReadError> {
        self.core().read_range(from_seq, max)
    }

    /// Up to `max` events' stored bytes from `from_seq` on, undecoded, as the log holds them.
    pub fn read_raw_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, ReadError> {
        Ok(self
            .core()
            .storage
            .read_range(from_seq, max.min(self.core().limits.read_events_max))?)
    }

    /// The event at `seq`, if there is one.
    pub fn get(&self, seq: u64) -> Result<Option<RecordedEvent>, ReadError> {
        Ok(self.read_range(seq, 1)?.into_iter().find(|e| e.seq == seq))
    }

    /// Up to `max` events of `stream` from version `from_version` (1-based) on.
    pub fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RecordedEvent>, ReadError> {
        let core = self.core();
        let raw =
            core.storage
                .read_stream(stream, from_version, max.min(core.limits.read_events_max))?;
        let mut out = Vec::with_capacity(raw.len());
        for (expected, r) in (from_version.max(1)..).zip(raw.iter()) {
            let event = core.decode(r)?;
            if event.stream != stream || event.stream_version != expected {
                return Err(ReadError::Damaged {
                    seq: r.seq,
                    detail: format!(
                        "the stream index says {stream} version {expected}, the event is {} version {}",
                        event.stream, event.stream_version
                    ),
                });
            }
            out.push(event);
        }
        Ok(out)
    }

    /// The current version of `stream` (0 when it has no events).
    pub fn stream_version(&self, stream: &str) -> Result<u64, ReadError> {
        Ok(self.core().storage.stream_version(stream)?)
    }

    /// The event with this id.
    pub fn find_event_id(&self, id: Uuid) -> Result<Option<RecordedEvent>, ReadError> {
        let core = self.core();
        match core.storage.find_event_id(id)? {
            None => Ok(None),
            Some(raw) => {
                let event = core.decode(&raw)?;
                if event.event_id != id {
                    return Err(ReadError::Damaged {
                        seq: raw.seq,
                        detail: format!("the id index says {id}, the event is {}", event.event_id),
                    });
                }
                Ok(Some(event))
            }
        }
    }

    /// The event with this hash.
    pub fn find_hash(&self, hash: &Digest) -> Result<Option<RecordedEvent>, ReadError> {
        let core = self.core();
        match core.storage.find_hash(hash)? {
            None => Ok(None),
            Some(raw) => {
                let event = core.decode(&raw)?;
                if event.hash != *hash {
                    return Err(ReadError::Damaged {
                        seq: raw.seq,
                        detail: format!("the hash index says {hash}, the event is {}", event.hash),
                    });
                }
                Ok(Some(event))
            }
        }
    }

    /// Every event from `from_seq` on, in order: first those already stored, then each new one
    /// as it is appended. A subscriber that falls behind the live buffer catches up from
    /// storage, so none is ever skipped.
    pub fn subscribe(&self, from_seq: u64) -> Subscription {
        Subscription::new(Arc::clone(self.core()), from_seq)
    }

    /// Stops accepting appends, lets queued ones finish, and persists the index.
    pub fn shutdown(&self) {
        self.handle.shutdown();
    }
}

/// The writer thread's state.
struct Writer {
    core: Arc<Core>,
    head: ChainHead,
    /// Stream versions already looked up or written; storage is asked only once per stream.
    versions: HashMap<String, u64>,
    ids: IdGenerator,
    clock: Arc<dyn Clock>,
    last_time: Option<DateTime<Utc>>,
    /// The right edge of the Merkle tree over every event written.
    frontier: Frontier,
    /// The key that signs checkpoints, when it is the one the checkpoint log names.
    key: Option<SigningKey>,
    files: Option<KeyFiles>,
    /// Size and time of the last checkpoint or rotation.
    last_signed: Option<(u64, Timestamp)>,
    checkpoint_every_events: Option<u64>,
    /// The key found on disk, whether or not the checkpoint log names it: what signs the
    /// acceptance of a loss that took the checkpoint log with it.
    unadopted: Option<SigningKey>,
}

/// What becomes of one queued append within a group.
enum Plan {
    /// Answered without writing.
    Done(Result<Receipt, AppendError>),
    /// Written as the group's commit at this index; `replayed` when it is a retry of that
    /// commit within the same group.
    Commit { index: usize, replayed: bool },
}

/// The commits of one group commit, and what they change if the write succeeds.
#[derive(Default)]
struct Group {
    commits: Vec<Commit>,
    recorded: Vec<Vec<RecordedEvent>>,
    versions: HashMap<String, u64>,
    keys: HashMap<String, (Digest, usize)>,
    hashes: HashMap<Digest, ()>,
    head: ChainHead,
    events: usize,
}

impl Writer {
    fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        let limits = self.core.limits.clone();
        let mut next: Option<Job> = None;
        loop {
            let Some(job) = next.take().or_else(|| rx.blocking_recv()) else {
                break;
            };
            let (request, reply) = match job {
                Job::Append { request, reply } => (request, reply),
                other => {
                    self.run_other(other);
                    continue;
                }
            };
            let mut events = request.events.len();
            let mut bytes = request_bytes(&request);
            let mut jobs = vec![AppendJob { request, reply }];
            // Take every append already waiting, up to one group's worth: this is the group
            // commit. Appends that arrive during the sync below form the next group; any other
            // job waits until this group is written.
            while events < limits.group_events_max && bytes < limits.group_bytes_max {
                match rx.try_recv() {
                    Ok(Job::Append { request, reply }) => {
                        events += request.events.len();
                        bytes += request_bytes(&request);
                        jobs.push(AppendJob { request, reply });
                    }
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

    fn run_other(&mut self, job: Job) {
        match job {
            Job::Append { .. } => {}
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
            Job::Tick => {
                if self
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
    fn catch_up_tree(&mut self) -> Result<(), String> {
        let storage = Arc::clone(&self.core.storage);
        let stored = storage.merkle_size().map_err(|e| e.to_string())?;
        self.frontier = match Frontier::load(&StoredNodes(&*storage), stored) {
            Ok(frontier) => frontier,
            Err(e) => {
                tracing::warn!(error = %e, "rebuilding the Merkle tree from the first event");
                // Nodes are stored once each, so what is left of the old ones goes first.
                storage.clear_merkle_nodes().map_err(|e| e.to_string())?;
                Frontier::new()
            }
        };
        let head = self.head.size;
        while self.frontier.size() < head {
            let events = self
                .core
                .storage
                .read_range(self.frontier.size(), 8192)
                .map_err(|e| e.to_string())?;
            if events.is_empty() {
                return Err(format!(
                    "the log ends at {} before its head",
                    self.frontier.size()
                ));
            }
            let hashes: Vec<Digest> = events
                .iter()
                .map(|raw| {
                    crate::envelope::split_stored(&raw.bytes)
                        .map(|(_, hash)| hash)
                        .map_err(|e| format!("seq {}: {e}", raw.seq))
                })
                .collect::<Result<_, _>>()?;
            self.grow_tree(&hashes).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Adds event hashes as leaves and stores the perfect subtrees they complete.
    fn grow_tree(&mut self, hashes: &[Digest]) -> Result<(), StorageError> {
        let mut nodes = Vec::with_capacity(hashes.len() * 2);
        for hash in hashes {
            let completed = self
                .frontier
                .push(&Blake3, hash.as_bytes())
                .map_err(|e| StorageError::Failed(format!("Merkle tree: {e}")))?;
            nodes.extend(completed);
        }
        self.core
            .storage
            .put_merkle_nodes(&nodes, self.frontier.size())
    }

    /// Makes sure `key` is the key the checkpoint log names as current (introducing it if the
    /// log is empty, finishing a rotation a crash interrupted), or records why not.
    fn set_up_key(&mut self, key: Option<SigningKey>) {
        let Some(key) = key else {
            *self.core.signer.write().unwrap_or_else(|p| p.into_inner()) =
                Err("there is no signing key in the data directory".into());
            return;
        };
        self.unadopted = Some(SigningKey::from_secret_bytes(&key.to_secret_bytes()));
        let outcome = self.adopt_key(key);
        let mut signer = self.core.signer.write().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(key) => {
                *signer = Ok(key.public_key());
                self.key = Some(key);
            }
            Err(reason) => {
                tracing::error!(%reason, "checkpoints cannot be signed");
                *signer = Err(reason);
            }
        }
    }

    fn adopt_key(&mut self, key: SigningKey) -> Result<SigningKey, String> {
        let entries = self
            .core
            .storage
            .checkpoint_entries()
            .map_err(|e| e.to_string())?;
        let mut current: Option<PublicKey> = None;
        for entry in &entries {
            match entry {
                CheckpointEntry::KeyIntroduced {
                    public_key,
                    tree_size,
                    time,
                    ..
                } => {
                    current = Some(*public_key);
                    self.last_signed = Some((*tree_size, *time));
                }
                CheckpointEntry::Checkpoint(c) => self.last_signed = Some((c.tree_size, c.time)),
                CheckpointEntry::Recovery(r) => self.last_signed = Some((r.tree_size, r.time)),
                CheckpointEntry::Rotation(r) => {
                    current = Some(r.new_public_key);
                    self.last_signed = Some((r.tree_size, r.time));
                }
            }
        }
        let staged = match &self.files {
            Some(files) => files.staged().map_err(|e| e.to_string())?,
            None => None,
        };
        match current {
            None if self.core.storage.is_read_only() => Err(
                "the checkpoint log names no signing key, and the ledger may not write one".into(),
            ),
            None => {
                let time = self.signing_time()?;
                let entry = CheckpointEntry::KeyIntroduced {
                    public_key: key.public_key(),
                    tree_size: self.frontier.size(),
                    time,
                    reason: "the ledger's first signing key".into(),
                };
                self.core
                    .storage
                    .append_checkpoint_entry(&entry)
                    .map_err(|e| e.to_string())?;
                self.last_signed = Some((self.frontier.size(), time));
                Ok(key)
            }
            Some(current) if current == key.public_key() => {
                // A key staged by a rotation that never happened; left alone by an open that
                // may not write.
                if let Some(files) = &self.files
                    && !self.core.storage.is_read_only()
                {
                    files.discard_staged().map_err(|e| e.to_string())?;
                }
                Ok(key)
            }
            Some(current) => match (staged, &self.files) {
                (Some(staged), Some(files)) if staged.public_key() == current => {
                    // A rotation was recorded but the crash came before the new key replaced
                    // the old: finish it.
                    files.commit_staged().map_err(|e| e.to_string())?;
                    Ok(staged)
                }
                _ => Err(format!(
                    "the signing key on disk ({}) is not the key the checkpoint log names ({})",
                    key.fingerprint(),
                    current.fingerprint()
                )),
            },
        }
    }

    /// The time for a checkpoint or rotation: now, to the second, never before the last one.
    fn signing_time(&self) -> Result<Timestamp, String> {
        let now = Timestamp::from_datetime(self.clock.now()).map_err(|e| e.to_string())?;
        Ok(match self.last_signed {
            Some((_, last)) if last > now => last,
            _ => now,
        })
    }

    fn write_checkpoint(&mut self) -> Result<Checkpoint, SigningError> {
        if let Some(reason) = self.core.poisoned() {
            return Err(SigningError::Poisoned(reason));
        }
        let key = self.key.as_ref().ok_or_else(|| {
            SigningError::NoKey(
                self.core
                    .signer
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
                    .err()
                    .unwrap_or_default(),
            )
        })?;
        let time = self.signing_time().map_err(SigningError::Time)?;
        let size = self.frontier.size();
        let checkpoint = Checkpoint::sign(key, size, self.frontier.root(&Blake3), time);
        if let Err(e) = self
            .core
            .storage
            .append_checkpoint_entry(&CheckpointEntry::Checkpoint(checkpoint.clone()))
        {
            let e = Arc::new(e);
            self.core
                .poison(format!("a checkpoint could not be written: {e}"));
            return Err(SigningError::Storage(e));
        }
        self.last_signed = Some((size, time));
        Ok(checkpoint)
    }

    fn rotate(&mut self) -> Result<KeyRotation, SigningError> {
        if let Some(reason) = self.core.poisoned() {
            return Err(SigningError::Poisoned(reason));
        }
        let Some(old) = self.key.take() else {
            return Err(SigningError::NoKey("there is no key to rotate from".into()));
        };
        let result = self.rotate_from(&old);
        match result {
            Ok((statement, new)) => {
                *self.core.signer.write().unwrap_or_else(|p| p.into_inner()) = Ok(new.public_key());
                self.key = Some(new);
                self.last_signed = Some((statement.tree_size, statement.time));
                Ok(statement)
            }
            Err(e) => {
                self.key = Some(old);
                Err(e)
            }
        }
    }

    fn rotate_from(&mut self, old: &SigningKey) -> Result<(KeyRotation, SigningKey), SigningError> {
        let new = random_key().map_err(|e| SigningError::Storage(Arc::new(e)))?;
        if let Some(files) = &self.files {
            files
                .stage(&new)
                .map_err(|e| SigningError::Storage(Arc::new(e)))?;
        }
        let time = self.signing_time().map_err(SigningError::Time)?;
        let statement = KeyRotation::sign(
            old,
            new.public_key(),
            self.frontier.size(),
            self.frontier.root(&Blake3),
            time,
        );
        if let Err(e) = self
            .core
            .storage
            .append_checkpoint_entry(&CheckpointEntry::Rotation(statement.clone()))
        {
            let e = Arc::new(e);
            self.core
                .poison(format!("a key rotation could not be written: {e}"));
            return Err(SigningError::Storage(e));
        }
        if let Some(files) = &self.files
            && let Err(e) = files.commit_staged()
        {
            // The statement is durable; the next open finishes the rename. Until then,
            // nothing signs.
            let e = Arc::new(e);
            self.core
                .poison(format!("the rotated key could not be put in place: {e}"));
            return Err(SigningError::Storage(e));
        }
        Ok((statement, new))
    }

    /// The time for a group: the clock, but never earlier than the previous group's, so
    /// `recorded_at` never decreases along the log.
    fn tick(&mut self) -> DateTime<Utc> {
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

    fn process(&mut self, jobs: Vec<AppendJob>) {
        if let Some(reason) = self.core.poisoned() {
            for job in jobs {
                let _ = job.reply.send(Err(AppendError::Poisoned(reason.clone())));
            }
            return;
        }
        let now = self.tick();
        let mut group = Group {
            head: self.head,
            ..Group::default()
        };
        let mut waiting = Vec::with_capacity(jobs.len());
        for job in jobs {
            let plan = self.plan(job.request, now, &mut group);
            waiting.push((job.reply, plan));
        }
        if group.commits.is_empty() {
            for (reply, plan) in waiting {
                if let Plan::Done(result) = plan {
                    let _ = reply.send(result);
                }
            }
            return;
        }
        // The Merkle nodes the group completes are computed before the write, on a copy of the
        // frontier, so that storage indexes them with the events in one write; the copy
        // replaces the frontier only once the write succeeded.
        let mut frontier = self.frontier.clone();
        let mut nodes = Vec::with_capacity(group.events * 2);
        let grown = group
            .recorded
            .iter()
            .flatten()
            .try_for_each(|e| frontier.push_into(&Blake3, e.hash.as_bytes(), &mut nodes));
        // Nothing is written when the tree cannot grow (it holds u64::MAX leaves): the log
        // could never again be checked against a signed root.
        let written = match grown {
            Ok(()) => self
                .core
                .storage
                .append(
                    &group.commits,
                    &TreeGrowth {
                        nodes,
                        size: frontier.size(),
                    },
                )
                .map_err(|e| {
                    let reason =
                        format!("a write to storage failed, so its outcome is unknown: {e}");
                    (reason, e)
                }),
            Err(e) => {
                let reason = format!("the Merkle tree cannot take more events: {e}");
                Err((reason.clone(), StorageError::Failed(reason)))
            }
        };
        match written {
            Ok(()) => {
                self.head = group.head;
                self.frontier = frontier;
                self.versions.extend(group.versions.drain());
                let receipts: Vec<Receipt> = group
                    .commits
                    .iter()
                    .map(|c| Receipt {
                        stream: c.stream.clone(),
                        stream_version: c.base_version + c.events.len() as u64,
                        events: c
                            .events
                            .iter()
                            .map(|e| ReceiptEvent {
                                seq: e.seq,
                                stream_version: e.stream_version,
                                event_id: e.event_id,
                                hash: e.hash,
                            })
                            .collect(),
                        replayed: false,
                    })
                    .collect();
                for event in group.recorded.into_iter().flatten() {
                    // No subscriber is not an error.
                    let _ = self.core.events.send(Arc::new(event));
                }
                for (reply, plan) in waiting {
                    let result = match plan {
                        Plan::Done(result) => result,
                        Plan::Commit { index, replayed } => receipts.get(index).cloned().map_or(
                            Err(AppendError::Closed),
                            |mut r| {
                                r.replayed = replayed;
                                Ok(r)
                            },
                        ),
                    };
                    let _ = reply.send(result);
                }
                if let Some(every) = self.checkpoint_every_events
                    && self.frontier.size() - self.last_signed.map_or(0, |(size, _)| size) >= every
                    && let Err(e) = self.write_checkpoint()
                {
                    tracing::warn!(error = %e, "the periodic checkpoint was not written");
                }
            }
            Err((reason, e)) => {
                let e = Arc::new(e);
                self.core.poison(reason);
                for (reply, plan) in waiting {
                    let result = match plan {
                        Plan::Done(result) => result,
                        Plan::Commit { .. } => Err(AppendError::Storage(Arc::clone(&e))),
                    };
                    let _ = reply.send(result);
                }
            }
        }
    }

    fn current_version(&mut self, group: &Group, stream: &str) -> Result<u64, StorageError> {
        if let Some(v) = group.versions.get(stream) {
            return Ok(*v);
        }
        if let Some(v) = self.versions.get(stream) {
            return Ok(*v);
        }
        let v = self.core.storage.stream_version(stream)?;
        self.versions.insert(stream.to_owned(), v);
        Ok(v)
    }

    fn plan(&mut self, request: AppendRequest, now: DateTime<Utc>, group: &mut Group) -> Plan {
        if let Err(e) = validate(&request, &self.core.limits) {
            return Plan::Done(Err(e));
        }
        let limits = self.core.limits.clone();
        if group.events + request.events.len()
            > limits.group_events_max.max(limits.batch_events_max)
        {
            // Cannot happen with the group size checks in `run`; refuse rather than overfill.
            return Plan::Done(Err(AppendError::LimitExceeded {
                limit: "group_events_max",
                max: limits.group_events_max as u64,
                actual: (group.events + request.events.len()) as u64,
            }));
        }
        // The idempotency key is checked before the version: a retry of a command that
        // succeeded must get its original receipt even though the stream has moved on.
        if let Some(idem) = &request.idempotency {
            if let Some((fingerprint, index)) = group.keys.get(&idem.key) {
                return if *fingerprint == idem.fingerprint {
                    Plan::Commit {
                        index: *index,
                        replayed: true,
                    }
                } else {
                    Plan::Done(Err(AppendError::IdempotencyKeyReused {
                        key: idem.key.clone(),
                    }))
                };
            }
            match self.core.storage.idempotency(&idem.key) {
                Err(e) => return Plan::Done(Err(AppendError::Storage(Arc::new(e)))),
                Ok(Some(record)) => {
                    return Plan::Done(if record.fingerprint == idem.fingerprint {
                        self.replay(&record)
                    } else {
                        Err(AppendError::IdempotencyKeyReused {
                            key: idem.key.clone(),
                        })
                    });
                }
                Ok(None) => {}
            }
        }
        let current = match self.current_version(group, &request.stream) {
            Ok(v) => v,
            Err(e) => return Plan::Done(Err(AppendError::Storage(Arc::new(e)))),
        };
        if let ExpectedVersion::Exact(expected) = request.expected
            && expected != current
        {
            return Plan::Done(Err(AppendError::VersionConflict {
                stream: request.stream,
                expected,
                current,
            }));
        }

        let mut head = group.head;
        let mut sealed: Vec<SealedEvent> = Vec::with_capacity(request.events.len());
        let mut recorded: Vec<RecordedEvent> = Vec::with_capacity(request.events.len());
        let mut total_bytes = 0usize;
        let count = request.events.len();
        for (i, event) in request.events.into_iter().enumerate() {
            let mut causation = Vec::with_capacity(event.causation.len());
            for cause in &event.causation {
                match cause {
                    Causation::InBatch(j) => match recorded.get(*j as usize) {
                        Some(earlier) if (*j as usize) < i => causation.push(earlier.hash),
                        _ => {
                            return Plan::Done(Err(AppendError::Invalid(format!(
                                "event {i} names event {j} of its batch as a cause; only earlier events can be"
                            ))));
                        }
                    },
                    Causation::Event(hash) => {
                        let known = group.hashes.contains_key(hash)
                            || match self.core.storage.find_hash(hash) {
                                Ok(found) => found.is_some(),
                                Err(e) => {
                                    return Plan::Done(Err(AppendError::Storage(Arc::new(e))));
                                }
                            };
                        if !known {
                            return Plan::Done(Err(AppendError::Invalid(format!(
                                "event {i} names {hash} as a cause, which is not in the ledger"
                            ))));
                        }
                        causation.push(*hash);
                    }
                }
            }
            let event_id = match &request.idempotency {
                Some(idem) => idempotent_event_id(&idem.key, i as u32),
                None => self.ids.v7(now),
            };
            let envelope = Envelope {
                seq: head.size,
                stream: request.stream.clone(),
                stream_version: current + 1 + i as u64,
                event_id,
                kind: event.kind,
                recorded_at: now,
                actor: request.actor.clone(),
                causation,
                payload: event.payload,
                prev_hash: head.last_hash,
            };
            let (bytes, hash) = envelope.seal();
            if bytes.len() > limits.event_bytes_max {
                return Plan::Done(Err(AppendError::LimitExceeded {
                    limit: "event_bytes_max",
                    max: limits.event_bytes_max as u64,
                    actual: bytes.len() as u64,
                }));
            }
            total_bytes += bytes.len();
            if total_bytes > limits.batch_bytes_max {
                return Plan::Done(Err(AppendError::LimitExceeded {
                    limit: "batch_bytes_max",
                    max: limits.batch_bytes_max as u64,
                    actual: total_bytes as u64,
                }));
            }
            sealed.push(SealedEvent {
                seq: envelope.seq,
                stream_version: envelope.stream_version,
                event_id,
                prev_hash: envelope.prev_hash,
                hash,
                bytes: bytes.into(),
            });
            head = ChainHead {
                size: head.size + 1,
                last_hash: hash,
            };
            recorded.push(RecordedEvent { envelope, hash });
        }

        let first_seq = group.head.size;
        group.head = head;
        group.events += count;
        group
            .versions
            .insert(request.stream.clone(), current + count as u64);
        for event in &recorded {
            group.hashes.insert(event.hash, ());
        }
        let index = group.commits.len();
        let idempotency = request.idempotency.map(|idem| {
            group
                .keys
                .insert(idem.key.clone(), (idem.fingerprint, index));
            IdempotencyRecord {
                key: idem.key,
                fingerprint: idem.fingerprint,
                stream: request.stream.clone(),
                first_seq,
                event_count: count as u32,
                stream_version: current + count as u64,
            }
        });
        group.commits.push(Commit {
            stream: request.stream,
            base_version: current,
            events: sealed,
            idempotency,
        });
        group.recorded.push(recorded);
        Plan::Commit {
            index,
            replayed: false,
        }
    }

    /// The original receipt of a command, rebuilt from the events it wrote.
    fn replay(&self, record: &IdempotencyRecord) -> Result<Receipt, AppendError> {
        let read =
            |e: ReadError| AppendError::Invalid(format!("cannot read the original append: {e}"));
        let events = self
            .core
            .read_range(record.first_seq, record.event_count as usize)
            .map_err(read)?;
        if events.len() != record.event_count as usize
            || events.iter().any(|e| e.stream != record.stream)
        {
            return Err(AppendError::Invalid(format!(
                "the events of idempotency key {:?} are not where its record says",
                record.key
            )));
        }
        Ok(Receipt {
            stream: record.stream.clone(),
            stream_version: record.stream_version,
            events: events
                .iter()
                .map(|e| ReceiptEvent {
                    seq: e.seq,
                    stream_version: e.stream_version,
                    event_id: e.event_id,
                    hash: e.hash,
                })
                .collect(),
            replayed: true,
        })
    }
}

fn request_bytes(request: &AppendRequest) -> usize {
    request
        .events
        .iter()
        .map(|e| e.payload.len() + e.kind.len() + e.causation.len() * 32 + 128)
        .sum::<usize>()
        + request.stream.len()
        + request.actor.len()
}

fn check_len(limit: &'static str, max: usize, actual: usize) -> Result<(), AppendError> {
    if actual > max {
        return Err(AppendError::LimitExceeded {
            limit,
            max: max as u64,
            actual: actual as u64,
        });
    }
    Ok(())
}

/// Checks a request against the limits and the format's rules before anything is computed.
fn validate(request: &AppendRequest, limits: &Limits) -> Result<(), AppendError> {
    if request.stream.is_empty() {
        return Err(AppendError::Invalid("the stream id is empty".into()));
    }
    check_len(
        "stream_id_bytes_max",
        limits.stream_id_bytes_max,
        request.stream.len(),
    )?;
    if request.stream.chars().any(char::is_control) {
        return Err(AppendError::Invalid(
            "the stream id contains control characters".into(),
        ));
    }
    check_len(
        "actor_bytes_max",
        limits.actor_bytes_max,
        request.actor.len(),
    )?;
    if request.events.is_empty() {
        return Err(AppendError::Invalid(
            "an append needs at least one event".into(),
        ));
    }
    check_len(
        "batch_events_max",
        limits.batch_events_max,
        request.events.len(),
    )?;
    for event in &request.events {
        if event.kind.is_empty() {
            return Err(AppendError::Invalid("an event kind is empty".into()));
        }
        check_len("kind_bytes_max", limits.kind_bytes_max, event.kind.len())?;
        check_len(
            "causation_links_max",
            limits.causation_links_max,
            event.causation.len(),
        )?;
        check_len(
            "event_bytes_max",
            limits.event_bytes_max,
            event.payload.len(),
        )?;
    }
    if let Some(idem) = &request.idempotency {
        if idem.key.is_empty() {
            return Err(AppendError::Invalid("the idempotency key is empty".into()));
        }
        check_len(
            "idempotency_key_bytes_max",
            limits.idempotency_key_bytes_max.min(u16::MAX as usize),
            idem.key.len(),
        )?;
    }
    Ok(())
}
