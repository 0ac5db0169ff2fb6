//! A storage fake in memory that keeps what is live apart from what is durable and injects
//! faults from a seeded generator, for deterministic simulation tests.
//!
//! Commits become durable as a prefix of the log, as on a real disk: a failed sync may have
//! made any prefix of its group durable, and [`MemoryStorage::crash`] keeps exactly the durable
//! prefix, as a power cut would. The content blobs a group carries become durable with the
//! group's first commit (or, for blobs alone, with the group's sync), since they are written in
//! the same frame as the commits that cite them and made durable by the same sync.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ledger_proof::PerfectNode;
use uuid::Uuid;

use super::{
    Blob, ChainHead, CheckpointEntry, Commit, IdempotencyRecord, RawEvent, Storage, StorageError,
    StorageProblem, TreeGrowth, content_hash,
};
use crate::envelope::Digest;

/// How often each fault strikes, in parts per thousand of appends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// The write fails before anything is written.
    pub write_fails_per_mille: u32,
    /// The write happens but the sync fails: a random prefix of the group is durable.
    pub sync_fails_per_mille: u32,
    /// Everything is durable but the caller is told it failed (a crash after the sync).
    pub ack_lost_per_mille: u32,
}

/// A small, fast, seeded generator (SplitMix64): the same seed always gives the same faults.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Debug)]
struct State {
    /// Every commit written, durable or not, in order.
    log: Vec<Commit>,
    /// How many commits of `log` are durable.
    durable: usize,
    /// Every content blob written, durable or not, in order; a later copy of a hash replaces
    /// an earlier one.
    blobs: Vec<Blob>,
    /// How many blobs of `blobs` are durable.
    blobs_durable: usize,
    /// Syncs made: one per group written.
    syncs: u64,
    faults: Faults,
    rng: SplitMix64,
    failed: Option<&'static str>,
    /// Derived: lost on a crash, rebuilt by the ledger.
    merkle: HashMap<(u8, u64), Digest>,
    merkle_size: u64,
    /// Written durably at once.
    checkpoints: Vec<CheckpointEntry>,
}

/// The in-memory fake. See the module documentation.
#[derive(Debug)]
pub struct MemoryStorage {
    state: Mutex<State>,
    read_only: bool,
}

impl MemoryStorage {
    /// An empty store with the given faults, seeded.
    pub fn new(faults: Faults, seed: u64) -> Self {
        MemoryStorage {
            state: Mutex::new(State {
                log: Vec::new(),
                durable: 0,
                blobs: Vec::new(),
                blobs_durable: 0,
                syncs: 0,
                faults,
                rng: SplitMix64::new(seed),
                failed: None,
                merkle: HashMap::new(),
                merkle_size: 0,
                checkpoints: Vec::new(),
            }),
            read_only: false,
        }
    }

    /// An empty store that refuses every append: what a read-only open of a place that holds
    /// no ledger yet reads.
    pub fn empty_read_only() -> Self {
        let store = MemoryStorage {
            read_only: true,
            ..MemoryStorage::new(Faults::default(), 0)
        };
        store.state().failed = Some("opened read-only over storage that holds no ledger");
        store
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a power cut leaves: a new store holding only the durable commits, with the same
    /// faults and the generator where it stood.
    pub fn crash(&self) -> MemoryStorage {
        let state = self.state();
        MemoryStorage {
            state: Mutex::new(State {
                log: state.log[..state.durable].to_vec(),
                durable: state.durable,
                blobs: state.blobs[..state.blobs_durable].to_vec(),
                blobs_durable: state.blobs_durable,
                syncs: 0,
                faults: state.faults,
                rng: state.rng.clone(),
                failed: None,
                merkle: HashMap::new(),
                merkle_size: 0,
                checkpoints: state.checkpoints.clone(),
            }),
            read_only: self.read_only,
        }
    }

    /// Changes the faults from now on.
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// The number of durable events.
    pub fn durable_size(&self) -> u64 {
        let state = self.state();
        state.log[..state.durable]
            .iter()
            .map(|c| c.events.len() as u64)
            .sum()
    }

    /// The durable content blobs: what a power cut would leave.
    pub fn durable_blobs(&self) -> Vec<Blob> {
        let state = self.state();
        state.blobs[..state.blobs_durable].to_vec()
    }

    /// Overwrites the stored bytes of blob `hash` with `bytes`, as damage or a redaction would.
    pub fn overwrite_blob(&self, hash: &Digest, bytes: &[u8]) {
        let mut state = self.state();
        for blob in state.blobs.iter_mut().filter(|b| b.hash == *hash) {
            blob.bytes = Arc::from(bytes);
        }
    }

    /// The latest copy of blob `hash`.
    fn blob<'s>(state: &'s State, hash: &Digest) -> Option<&'s Blob> {
        state.blobs.iter().rev().find(|b| b.hash == *hash)
    }

    /// The blobs of `content` a write stores: each once, and not those already held intact.
    fn fresh(state: &State, content: &[Blob]) -> Vec<Blob> {
        let mut fresh: Vec<Blob> = Vec::new();
        for blob in content {
            let held =
                Self::blob(state, &blob.hash).is_some_and(|b| content_hash(&b.bytes) == b.hash);
            if !held && !fresh.iter().any(|f| f.hash == blob.hash) {
                fresh.push(blob.clone());
            }
        }
        fresh
    }

    fn events(state: &State) -> impl Iterator<Item = (&Commit, &super::SealedEvent)> {
        state
            .log
            .iter()
            .flat_map(|c| c.events.iter().map(move |e| (c, e)))
    }
}

impl Storage for MemoryStorage {
    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn head(&self) -> ChainHead {
        let state = self.state();
        let size = Self::events(&state).count() as u64;
        let last_hash = Self::events(&state)
            .last()
            .map(|(_, e)| e.hash)
            .unwrap_or(Digest::ZERO);
        ChainHead { size, last_hash }
    }

    fn append(
        &self,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        let mut state = self.state();
        if let Some(reason) = state.failed {
            return Err(StorageError::Failed(reason.into()));
        }
        let roll = state.rng.below(1000) as u32;
        let f = state.faults;
        if roll < f.write_fails_per_mille {
            state.failed = Some("write failed");
            return Err(StorageError::Injected("write failed"));
        }
        let fresh = Self::fresh(&state, content);
        state.log.extend(commits.iter().cloned());
        state.blobs.extend(fresh);
        state.syncs += 1;
        if roll < f.write_fails_per_mille + f.sync_fails_per_mille {
            let k = state.rng.below(commits.len() as u64 + 1) as usize;
            state.durable += k;
            // The blobs share the frame, and so the fate, of the group's first commit.
            if k > 0 || (commits.is_empty() && state.rng.below(2) == 1) {
                state.blobs_durable = state.blobs.len();
            }
            state.failed = Some("sync failed");
            return Err(StorageError::Injected("sync failed"));
        }
        state.durable = state.log.len();
        state.blobs_durable = state.blobs.len();
        for node in &tree.nodes {
            state.merkle.insert((node.level, node.index), node.hash);
        }
        state.merkle_size = tree.size;
        if roll < f.write_fails_per_mille + f.sync_fails_per_mille + f.ack_lost_per_mille {
            state.failed = Some("acknowledgement lost");
            return Err(StorageError::Injected("acknowledgement lost"));
        }
        Ok(())
    }

    fn read_blob(&self, hash: &Digest) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(Self::blob(&self.state(), hash).map(|b| b.bytes.to_vec()))
    }

    fn has_blob(&self, hash: &Digest) -> Result<bool, StorageError> {
        Ok(Self::blob(&self.state(), hash).is_some())
    }

    fn syncs(&self) -> u64 {
        self.state().syncs
    }

    fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, StorageError> {
        let state = self.state();
        Ok(Self::events(&state)
            .filter(|(_, e)| e.seq >= from_seq)
            .take(max)
            .map(|(_, e)| RawEvent {
                seq: e.seq,
                bytes: e.bytes.clone(),
            })
            .collect())
    }

    fn stream_version(&self, stream: &str) -> Result<u64, StorageError> {
        let state = self.state();
        Ok(Self::events(&state)
            .filter(|(c, _)| c.stream == stream)
            .map(|(_, e)| e.stream_version)
            .last()
            .unwrap_or(0))
    }

    fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RawEvent>, StorageError> {
        let state = self.state();
        Ok(Self::events(&state)
            .filter(|(c, e)| c.stream == stream && e.stream_version >= from_version)
            .take(max)
            .map(|(_, e)| RawEvent {
                seq: e.seq,
                bytes: e.bytes.clone(),
            })
            .collect())
    }

    fn find_event_id(&self, id: Uuid) -> Result<Option<RawEvent>, StorageError> {
        let state = self.state();
        Ok(Self::events(&state)
            .find(|(_, e)| e.event_id == id)
            .map(|(_, e)| RawEvent {
                seq: e.seq,
                bytes: e.bytes.clone(),
            }))
    }

    fn find_hash(&self, hash: &Digest) -> Result<Option<RawEvent>, StorageError> {
        let state = self.state();
        Ok(Self::events(&state)
            .find(|(_, e)| e.hash == *hash)
            .map(|(_, e)| RawEvent {
                seq: e.seq,
                bytes: e.bytes.clone(),
            }))
    }

    fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        let state = self.state();
        Ok(state
            .log
            .iter()
            .filter_map(|c| c.idempotency.as_ref())
            .find(|r| r.key == key)
            .cloned())
    }

    fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, StorageError> {
        let state = self.state();
        Ok(state
            .log
            .iter()
            .filter_map(|c| c.idempotency.clone())
            .collect())
    }

    fn problems(&self) -> Vec<StorageProblem> {
        Vec::new()
    }

    fn checkpoint_index(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn merkle_size(&self) -> Result<u64, StorageError> {
        let size = self.head().size;
        Ok(self.state().merkle_size.min(size))
    }

    fn put_merkle_nodes(&self, nodes: &[PerfectNode], size: u64) -> Result<(), StorageError> {
        let mut state = self.state();
        for node in nodes {
            state.merkle.insert((node.level, node.index), node.hash);
        }
        state.merkle_size = size;
        Ok(())
    }

    fn clear_merkle_nodes(&self) -> Result<(), StorageError> {
        let mut state = self.state();
        state.merkle.clear();
        state.merkle_size = 0;
        Ok(())
    }

    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        Ok(self.state().merkle.get(&(level, index)).copied())
    }

    fn append_checkpoint_entry(&self, entry: &CheckpointEntry) -> Result<(), StorageError> {
        self.state().checkpoints.push(entry.clone());
        Ok(())
    }

    fn checkpoint_entries(&self) -> Result<Vec<CheckpointEntry>, StorageError> {
        Ok(self.state().checkpoints.clone())
    }

    fn checkpoint_entries_from(&self, from: u64) -> Result<Vec<CheckpointEntry>, StorageError> {
        let state = self.state();
        let from = usize::try_from(from)
            .unwrap_or(usize::MAX)
            .min(state.checkpoints.len());
        Ok(state.checkpoints[from..].to_vec())
    }
}
