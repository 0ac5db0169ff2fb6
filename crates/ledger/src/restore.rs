//! Restoring a ledger from a whole-ledger export bundle.
//!
//! The events are written back with the very bytes they were exported with, so every hash, the
//! tree and every checkpoint hold again; the idempotency keys come back with them, and the
//! content blobs the bundle holds are written first, so that no event is ever stored before
//! the content it cites. The signing
//! key is not in a bundle: given the key that signed last, the restored ledger goes on signing
//! with it; without it, a new key starts, and the checkpoint log says plainly that the chain of
//! keys breaks there.

use std::path::Path;
use std::sync::Arc;

use std::collections::{BTreeMap, HashMap};

use ledger_proof::{Frontier, PerfectNode, Sha256, SigningKey, Timestamp};

use crate::bundle::{Bundle, BundleEvent, Scope};
use crate::envelope::{Digest, decode_stored};
use crate::key_history::KeyHistory;
use crate::keys::{KeyFiles, random_key};
use crate::ledger::{Ledger, LedgerOptions};
use crate::storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use crate::storage::{
    Blob, CheckpointEntry, Commit, IdempotencyRecord, SealedEvent, Storage, StorageError,
    TreeGrowth,
};

/// Why a restore was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// Only a bundle of the whole ledger can be restored.
    #[error("only a whole-ledger bundle (export --all) can be restored")]
    NotWholeLedger,
    /// The target already holds a ledger.
    #[error("{0} already holds a ledger; restore into an empty data directory")]
    NotEmpty(String),
    /// The bundle's events are not a whole chain (it should have been verified first).
    #[error("the bundle's events are not a whole chain: {0}")]
    Broken(String),
    /// The key given is not the key the bundle's checkpoint log names as current.
    #[error("the key given ({given}) is not the ledger's current signing key ({current})")]
    WrongKey {
        /// Fingerprint of the key given.
        given: String,
        /// Fingerprint of the current key.
        current: String,
    },
    /// Writing failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Events written.
    pub events: u64,
    /// Idempotency keys restored.
    pub idempotency_keys: u64,
    /// Entries of the checkpoint log restored.
    pub checkpoint_entries: u64,
    /// Content blobs restored.
    pub content: u64,
    /// Set when no key was given: the chain of keys breaks at the restored ledger.
    pub key_chain_break: Option<String>,
}

impl Ledger {
    /// Whether `bundle` may be restored with `key`: only a whole-ledger bundle may, and only
    /// with the key its checkpoint log names as current (or none, which starts a new key).
    /// The restores check this before they open or write anything, so a refused restore
    /// leaves nothing behind; a caller that makes the ledger's directory itself calls it
    /// before making it.
    pub fn check_restore(bundle: &Bundle, key: Option<&SigningKey>) -> Result<(), RestoreError> {
        if bundle.scope != Scope::All {
            return Err(RestoreError::NotWholeLedger);
        }
        let current = KeyHistory::of(&bundle.checkpoint_log).current();
        if let (Some(key), Some(current)) = (key, current)
            && key.public_key() != current
        {
            return Err(RestoreError::WrongKey {
                given: key.fingerprint().to_string(),
                current: current.fingerprint().to_string(),
            });
        }
        Ok(())
    }

    /// Restores the ledger of `bundle` (which the caller has verified) into `dir`, which must
    /// not hold a ledger yet. `key` is the signing key backed up with the old ledger, if any.
    pub fn restore(
        dir: &Path,
        bundle: &Bundle,
        key: Option<SigningKey>,
        options: LedgerOptions,
    ) -> Result<(Ledger, RestoreReport), RestoreError> {
        Ledger::check_restore(bundle, key.as_ref())?;
        let files = KeyFiles::new(dir.join("keys"));
        if dir.join("keys").exists() {
            return Err(RestoreError::NotEmpty(dir.display().to_string()));
        }
        let storage = EmbeddedStorage::open(
            dir,
            EmbeddedOptions {
                segment_bytes_max: options.limits.segment_bytes_max,
                lock_note: options
                    .lock_note
                    .clone()
                    .unwrap_or_else(|| EmbeddedOptions::default().lock_note),
                read_only: false,
            },
        )?;
        Ledger::restore_into(
            Arc::new(storage),
            &dir.display().to_string(),
            files,
            bundle,
            key,
            options,
        )
    }

    /// Restores the ledger of `bundle` (which the caller has verified) into the PostgreSQL
    /// database at `url`, which must not hold a ledger yet, with the signing key kept in
    /// `key_dir` (which must not hold one).
    pub fn restore_postgres(
        url: &str,
        key_dir: &Path,
        bundle: &Bundle,
        key: Option<SigningKey>,
        options: LedgerOptions,
    ) -> Result<(Ledger, RestoreReport), RestoreError> {
        Ledger::check_restore(bundle, key.as_ref())?;
        if key_dir.exists() {
            return Err(RestoreError::NotEmpty(key_dir.display().to_string()));
        }
        let storage = crate::storage::postgres::PostgresStorage::open(
            url,
            crate::storage::postgres::PostgresOptions::default(),
        )?;
        Ledger::restore_into(
            Arc::new(storage),
            "the storage database",
            KeyFiles::new(key_dir.to_path_buf()),
            bundle,
            key,
            options,
        )
    }

    fn restore_into(
        storage: Arc<dyn Storage>,
        place: &str,
        files: KeyFiles,
        bundle: &Bundle,
        key: Option<SigningKey>,
        options: LedgerOptions,
    ) -> Result<(Ledger, RestoreReport), RestoreError> {
        // The bundle and the key were checked before the storage was opened.
        if storage.head().size > 0 || !storage.checkpoint_entries()?.is_empty() {
            return Err(RestoreError::NotEmpty(place.to_owned()));
        }
        let history = KeyHistory::of(&bundle.checkpoint_log);
        restore_content(&*storage, bundle, &options.limits)?;
        let written = restore_events(&*storage, bundle)?;
        for entry in &bundle.checkpoint_log {
            storage.append_checkpoint_entry(entry)?;
        }
        let (key, key_chain_break) = match key {
            Some(key) => (key, None),
            None => new_key(&*storage, bundle, &history, written)?,
        };
        files.write_new(&key)?;
        let report = RestoreReport {
            events: written,
            idempotency_keys: bundle.idempotency.len() as u64,
            checkpoint_entries: bundle.checkpoint_log.len() as u64,
            content: bundle.content.len() as u64,
            key_chain_break,
        };
        let ledger = Ledger::start(storage, options, Some(key), Some(files));
        Ok((ledger, report))
    }
}

/// Writes the bundle's content blobs before any event, in writes of at most one group's bytes.
/// Each must hash to the name the bundle gives it.
fn restore_content(
    storage: &dyn Storage,
    bundle: &Bundle,
    limits: &crate::Limits,
) -> Result<(), RestoreError> {
    let mut chunk: Vec<Blob> = Vec::new();
    let mut bytes = 0usize;
    for listed in &bundle.content {
        let blob = Blob::new(listed.bytes.0.clone());
        if blob.hash != listed.hash {
            return Err(RestoreError::Broken(format!(
                "content {} does not hash to its name",
                listed.hash
            )));
        }
        if !chunk.is_empty() && bytes + blob.bytes.len() > limits.group_bytes_max {
            storage.append(&[], &std::mem::take(&mut chunk), &TreeGrowth::default())?;
            bytes = 0;
        }
        bytes += blob.bytes.len();
        chunk.push(blob);
    }
    if !chunk.is_empty() {
        storage.append(&[], &chunk, &TreeGrowth::default())?;
    }
    Ok(())
}

/// Writes the bundle's events back as commits: a keyed commit exactly as its record says,
/// every other event on its own. Returns how many events were written.
fn restore_events(storage: &dyn Storage, bundle: &Bundle) -> Result<u64, RestoreError> {
    let mut keyed: BTreeMap<u64, IdempotencyRecord> = bundle
        .idempotency
        .iter()
        .map(|record| (record.first_seq, record.clone()))
        .collect();
    let mut rewrite = Rewrite::new(storage);
    let mut events = bundle.events.iter();
    while let Some(first) = events.next() {
        let record = keyed.remove(&first.seq);
        let count = record.as_ref().map_or(1, |r| r.event_count.max(1) as usize);
        let mut group = vec![first];
        for _ in 1..count {
            let next = events
                .next()
                .ok_or_else(|| RestoreError::Broken("a keyed commit is cut short".into()))?;
            group.push(next);
        }
        rewrite.commit(&group, record)?;
    }
    rewrite.flush()?;
    Ok(rewrite.written)
}

/// Commits being written back: the chain and the streams' versions they must follow, and the
/// Merkle tree, which grows with the events and is stored with them, as appends store it.
struct Rewrite<'a> {
    storage: &'a dyn Storage,
    versions: HashMap<String, u64>,
    next_seq: u64,
    prev: Digest,
    frontier: Frontier,
    nodes: Vec<PerfectNode>,
    /// Commits not written yet.
    commits: Vec<Commit>,
    written: u64,
}

impl<'a> Rewrite<'a> {
    /// Commits written in one append.
    const COMMITS_PER_APPEND: usize = 1024;

    fn new(storage: &'a dyn Storage) -> Self {
        Rewrite {
            storage,
            versions: HashMap::new(),
            next_seq: 0,
            prev: Digest::ZERO,
            frontier: Frontier::new(),
            nodes: Vec::new(),
            commits: Vec::new(),
            written: 0,
        }
    }

    /// Adds the commit of `group`, which must follow the chain and stay on one stream.
    fn commit(
        &mut self,
        group: &[&BundleEvent],
        record: Option<IdempotencyRecord>,
    ) -> Result<(), RestoreError> {
        let mut sealed = Vec::with_capacity(group.len());
        let mut stream: Option<String> = None;
        let mut base = 0;
        for e in group {
            let event = decode_stored(&e.stored.0)
                .map_err(|err| RestoreError::Broken(format!("seq {}: {err}", e.seq)))?;
            if event.seq != self.next_seq || event.prev_hash != self.prev {
                return Err(RestoreError::Broken(format!(
                    "seq {} does not follow seq {}",
                    event.seq,
                    self.next_seq.wrapping_sub(1)
                )));
            }
            let version = self.versions.entry(event.stream.clone()).or_insert(0);
            match &stream {
                None => {
                    base = *version;
                    stream = Some(event.stream.clone());
                }
                Some(stream) if *stream != event.stream => {
                    return Err(RestoreError::Broken(format!(
                        "seq {}: a commit spans two streams",
                        event.seq
                    )));
                }
                Some(_) => {}
            }
            *version += 1;
            self.frontier
                .push_into(&Sha256, event.hash.as_bytes(), &mut self.nodes)
                .map_err(|err| RestoreError::Broken(format!("seq {}: {err}", event.seq)))?;
            sealed.push(SealedEvent {
                seq: event.seq,
                stream_version: event.stream_version,
                event_id: event.event_id,
                prev_hash: event.prev_hash,
                hash: event.hash,
                bytes: Arc::from(e.stored.0.clone()),
            });
            self.prev = event.hash;
            self.next_seq += 1;
        }
        self.commits.push(Commit {
            stream: stream.unwrap_or_default(),
            base_version: base,
            events: sealed,
            idempotency: record,
        });
        if self.commits.len() >= Self::COMMITS_PER_APPEND {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the commits gathered, with the tree's growth since the last append.
    fn flush(&mut self) -> Result<(), RestoreError> {
        if self.commits.is_empty() {
            return Ok(());
        }
        let growth = TreeGrowth {
            nodes: std::mem::take(&mut self.nodes),
            size: self.frontier.size(),
        };
        self.storage.append(&self.commits, &[], &growth)?;
        self.written += self
            .commits
            .iter()
            .map(|c| c.events.len() as u64)
            .sum::<u64>();
        self.commits.clear();
        Ok(())
    }
}

/// A new signing key for a ledger restored without its old one, introduced in the checkpoint
/// log with the reason the chain of keys breaks there.
fn new_key(
    storage: &dyn Storage,
    bundle: &Bundle,
    history: &KeyHistory,
    written: u64,
) -> Result<(SigningKey, Option<String>), RestoreError> {
    let key = random_key()?;
    let reason = format!(
        "restored from a bundle made at {} without the previous signing key: the chain of keys breaks here",
        bundle.created_at
    );
    let time = Timestamp::from_datetime(chrono::Utc::now())
        .map_err(|e| StorageError::Failed(e.to_string()))?;
    let time = history.last_signed.map_or(time, |(_, last)| last.max(time));
    // The log keeps its origin: it is the same log, signed by a new key.
    let origin = history.origin().map_or_else(
        || crate::ledger::default_origin(&key.public_key()),
        str::to_owned,
    );
    storage.append_checkpoint_entry(&CheckpointEntry::KeyIntroduced {
        public_key: key.public_key(),
        tree_size: written,
        time,
        reason: reason.clone(),
        origin,
    })?;
    Ok((key, Some(reason)))
}
