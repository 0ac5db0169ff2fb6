//! The ledger: appends with optimistic concurrency, idempotency and group commit; reads;
//! subscriptions.
//!
//! One writer thread owns the write path. Appends queue for it; it takes every append waiting,
//! checks each (idempotency key first, then the expected version), chains and seals their events,
//! hands the whole group to storage for one durable write and one sync, and only then answers
//! each caller. Concurrent appends therefore share a sync (group commit) without any caller
//! seeing another's failure: a refused append is refused alone. The content blobs an append
//! carries go into the same write and are made durable by the same sync, outside the chain.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use ledger_proof::{
    Checkpoint, Cosignature, KeyRotation, Manifest, PublicKey, SignedManifest, SigningKey,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use crate::checkpoint_view::CheckpointView;
use crate::clock::{Clock, SystemClock};
use crate::envelope::{Digest, RecordedEvent, decode_stored, decode_stored_ref};
use crate::error::{AppendError, ReadError, SigningError};
use crate::keys::{KeyFiles, random_key};
use crate::limits::Limits;
use crate::storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use crate::storage::{
    Blob, ChainHead, CheckpointEntry, IdempotencyRecord, RawEvent, Storage, StorageError,
    content_hash,
};
use crate::subscribe::Subscription;
use crate::verify::Verified;

mod append;
mod follow;
mod recovery;
mod signing;
mod writer;

use append::request_bytes;
use writer::Writer;

pub use recovery::AcceptedLoss;
pub(crate) use signing::default_origin;

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
    /// The content blobs the events cite (the full texts behind them, named in their payloads
    /// by blake3 hash): made durable with the events, by the same sync, but outside the chain,
    /// so no event hash covers their bytes. A blob the ledger holds intact is not stored again.
    pub content: Vec<Vec<u8>>,
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
    /// The log's origin (the first line of its checkpoints, the name of its key), used when the
    /// first key is introduced; `None` makes one from that key's fingerprint. An existing log
    /// keeps the origin it was started with.
    pub origin: Option<String>,
    /// On a shared store, how often the writer reads what other ledgers committed when no
    /// notification woke it sooner (zero: only when woken, or before its own writes).
    pub follow_every: Duration,
    /// On a shared store, how often the writer looks whether the stored Merkle nodes stop
    /// short of the log, and stores them from there once they stopped short at the same size
    /// at two looks in a row (zero: never while it runs; an open still does).
    pub mend_every: Duration,
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
            origin: None,
            follow_every: follow::FOLLOW_EVERY,
            mend_every: writer::MEND_EVERY,
        }
    }
}

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
    /// The log's origin, once the writer has read it from the checkpoint log.
    pub(crate) origin: RwLock<String>,
    /// What the checks made when the ledger opened found wrong, besides storage's problems.
    pub(crate) open_problems: Mutex<Vec<String>>,
    /// How long a reader waits for the periodic checkpointer to cover what it asks about; none
    /// when nothing writes checkpoints periodically.
    pub(crate) checkpoint_wait: Option<Duration>,
    /// What the reads that serve checkpoints need of the checkpoint log, as of the entries it
    /// has seen ([`Core::checkpoint_view`]).
    checkpoint_view: Mutex<CheckpointView>,
}

impl Core {
    pub(crate) fn poison(&self, reason: String) {
        let mut poison = self.poison.lock().unwrap_or_else(|p| p.into_inner());
        if poison.is_none() {
            tracing::error!(%reason, "the ledger refuses further appends");
            *poison = Some(reason);
        }
    }

    /// Reads `read` of the checkpoint log as it stands: the entries appended since the view
    /// was last brought up to date (by this ledger, or on a shared store by another node) are
    /// read and taken in first, not the whole log.
    pub(crate) fn checkpoint_view<R>(
        &self,
        read: impl FnOnce(&CheckpointView) -> R,
    ) -> Result<R, StorageError> {
        let lock = || {
            self.checkpoint_view
                .lock()
                .unwrap_or_else(|p| p.into_inner())
        };
        // The store is read without the lock, so that readers on a shared store do not queue
        // behind each other's round trips.
        let from = lock().seen();
        let new = self.storage.checkpoint_entries_from(from)?;
        let mut view = lock();
        if !new.is_empty() {
            view.extend(from, new, || self.storage.checkpoint_entries())?;
        }
        Ok(read(&view))
    }

    /// Fills a view that has read nothing yet from the checkpoint log as the open read it (its
    /// first entries, however many were appended since), so the first read does not parse the
    /// whole log again.
    pub(crate) fn seed_checkpoint_view(&self, entries: &[CheckpointEntry]) {
        let mut view = self
            .checkpoint_view
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if view.seen() == 0 && !entries.is_empty() {
            *view = CheckpointView::of(entries);
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
        /// The request's content, named by its hashes (computed by the caller's thread).
        content: Vec<Blob>,
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
    /// Keep a witness's cosignature of a checkpoint.
    Cosign {
        cosignature: Box<Cosignature>,
        reply: oneshot::Sender<Result<(), SigningError>>,
    },
    /// A checkpoint if the tree grew since the last one (the periodic timer).
    Tick,
    /// Read what other ledgers appended to a shared store (the follow timer).
    Follow,
    /// Read what other ledgers appended to a shared store, then answer.
    Sync { reply: oneshot::Sender<ChainHead> },
}

/// One queued append.
struct AppendJob {
    request: AppendRequest,
    content: Vec<Blob>,
    reply: oneshot::Sender<Result<Receipt, AppendError>>,
}

/// Takes `request`'s content and names each blob by its hash, within the limits on a blob and
/// on an append's content: hashed by the caller's thread, not the writer's.
fn content_of(request: &mut AppendRequest, limits: &Limits) -> Result<Vec<Blob>, AppendError> {
    let mut total = 0usize;
    std::mem::take(&mut request.content)
        .into_iter()
        .map(|bytes| {
            append::check_len("blob_bytes_max", limits.blob_bytes_max, bytes.len())?;
            total += bytes.len();
            append::check_len(
                "batch_content_bytes_max",
                limits.batch_content_bytes_max,
                total,
            )?;
            Ok(Blob::new(bytes))
        })
        .collect()
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
            Job::Cosign { .. } => f.write_str("Cosign"),
            Job::Tick => f.write_str("Tick"),
            Job::Follow => f.write_str("Follow"),
            Job::Sync { .. } => f.write_str("Sync"),
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

    /// Opens (creating its schema if needed) the ledger kept in the PostgreSQL database at
    /// `url`, signing with the key kept in `key_dir` (created there at first start unless
    /// `options.read_only`). The same checks as [`Ledger::open`] run before any write: a
    /// database whose head row, events and signed checkpoints disagree opens read-only. A
    /// read-only open of a database that holds no ledger reads it as an empty one and creates
    /// nothing there.
    pub fn open_postgres(
        url: &str,
        key_dir: &Path,
        options: LedgerOptions,
    ) -> Result<Ledger, StorageError> {
        // A database that holds no ledger yet reads, read-only, as an empty ledger (as a data
        // directory without one does), and a read-only open creates nothing in it.
        if options.read_only && crate::storage::postgres::schema_version(url)? == 0 {
            let key = KeyFiles::new(key_dir.to_path_buf()).load()?;
            let empty: Arc<dyn Storage> =
                Arc::new(crate::storage::memory::MemoryStorage::empty_read_only());
            return Ok(Ledger::start_checked(empty, options, key, None, None).0);
        }
        let storage = crate::storage::postgres::PostgresStorage::open(
            url,
            crate::storage::postgres::PostgresOptions {
                read_only: options.read_only,
                ..Default::default()
            },
        )?;
        let files = KeyFiles::new(key_dir.to_path_buf());
        let key = if options.read_only || storage.is_read_only() {
            files.load()?
        } else {
            Some(files.load_or_create()?)
        };
        let storage: Arc<dyn Storage> = Arc::new(storage);
        Ok(Ledger::start_checked(storage, options, key, Some(files), None).0)
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

    /// Appends, blocking until the events and their content are durable or refused. Not for
    /// use inside an async task: use [`Ledger::append_async`] there.
    pub fn append(&self, mut request: AppendRequest) -> Result<Receipt, AppendError> {
        let content = content_of(&mut request, self.limits())?;
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .blocking_send(Job::Append {
                request,
                content,
                reply,
            })
            .map_err(|_| AppendError::Closed)?;
        rx.blocking_recv().map_err(|_| AppendError::Closed)?
    }

    /// Appends, resolving when the events and their content are durable or refused.
    pub async fn append_async(&self, mut request: AppendRequest) -> Result<Receipt, AppendError> {
        let content = content_of(&mut request, self.limits())?;
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .send(Job::Append {
                request,
                content,
                reply,
            })
            .await
            .map_err(|_| AppendError::Closed)?;
        rx.await.map_err(|_| AppendError::Closed)?
    }

    /// The content blob named `hash`, checked against it: `None` when the ledger holds no such
    /// blob, [`ReadError::ContentDamaged`] when its stored bytes do not hash to its name
    /// (damaged or redacted bytes are never returned).
    pub fn blob(&self, hash: &Digest) -> Result<Option<Vec<u8>>, ReadError> {
        let Some(bytes) = self.core().storage.read_blob(hash)? else {
            return Ok(None);
        };
        let actual = content_hash(&bytes);
        if actual != *hash {
            return Err(ReadError::ContentDamaged {
                hash: *hash,
                actual,
            });
        }
        Ok(Some(bytes))
    }

    /// Whether the ledger holds a content blob named `hash` (its bytes unchecked).
    pub fn has_blob(&self, hash: &Digest) -> Result<bool, ReadError> {
        Ok(self.core().storage.has_blob(hash)?)
    }

    /// How many syncs storage's write path made since the ledger opened: one per group commit
    /// (and a few when a new segment file is started), whatever the group carried.
    pub fn storage_syncs(&self) -> u64 {
        self.core().storage.syncs()
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

    /// Keeps a witness's cosignature in the checkpoint log, once it verifies and cosigns a
    /// checkpoint the log holds. Blocking; use [`Ledger::record_cosignature_async`] inside an
    /// async task.
    pub fn record_cosignature(&self, cosignature: Cosignature) -> Result<(), SigningError> {
        let (reply, rx) = oneshot::channel();
        self.sender()
            .map_err(|_| SigningError::Closed)?
            .blocking_send(Job::Cosign {
                cosignature: Box::new(cosignature),
                reply,
            })
            .map_err(|_| SigningError::Closed)?;
        rx.blocking_recv().map_err(|_| SigningError::Closed)?
    }

    /// [`Ledger::record_cosignature`], for async callers.
    pub async fn record_cosignature_async(
        &self,
        cosignature: Cosignature,
    ) -> Result<(), SigningError> {
        let (reply, rx) = oneshot::channel();
        self.sender()
            .map_err(|_| SigningError::Closed)?
            .send(Job::Cosign {
                cosignature: Box::new(cosignature),
                reply,
            })
            .await
            .map_err(|_| SigningError::Closed)?;
        rx.await.map_err(|_| SigningError::Closed)?
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

    /// True when other ledgers may append to the same store (several nodes on one database).
    pub fn is_shared(&self) -> bool {
        self.core().storage.is_shared()
    }

    /// On a shared store, reads what other ledgers committed until now, and hands it to
    /// subscribers (the read models among them), before returning the head: a read after this
    /// sees every append acknowledged anywhere before the call. On a store of its own, the
    /// head. Blocking; not for use inside an async task.
    pub fn sync(&self) -> Result<ChainHead, AppendError> {
        if !self.is_shared() {
            return Ok(self.head());
        }
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .blocking_send(Job::Sync { reply })
            .map_err(|_| AppendError::Closed)?;
        rx.blocking_recv().map_err(|_| AppendError::Closed)
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
