//! The Merkle tree as the ledger serves it: checkpoints, key chain, and proofs against
//! checkpointed tree sizes, assembled from the perfect-subtree hashes storage keeps.

use ledger_proof::{
    Checkpoint, ConsistencyProofFile, Cosignature, Digest, InclusionProofFile, KeyRotation,
    NodeSource, PublicKey, Sha256, Tile, VerifierKey,
};

use crate::error::{ProofError, ReadError};
use crate::ledger::Ledger;
use crate::storage::{CheckpointEntry, Storage, StorageError};

/// Stored perfect-subtree hashes, as the proof algorithms read them.
pub(crate) struct StoredNodes<'a>(pub(crate) &'a dyn Storage);

impl NodeSource for StoredNodes<'_> {
    type Error = StorageError;

    fn perfect_node(&self, level: u8, index: u64) -> Result<Digest, StorageError> {
        self.0.merkle_node(level, index)?.ok_or_else(|| {
            StorageError::Index(format!("Merkle node ({level}, {index}) is missing"))
        })
    }
}

fn tree_error(e: ledger_proof::ProveError<StorageError>) -> ProofError {
    match e {
        ledger_proof::ProveError::Source(e) => ProofError::Read(ReadError::Storage(e)),
        other => ProofError::Invalid(other.to_string()),
    }
}

/// A page of the signed checkpoints ([`Ledger::checkpoint_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointPage {
    /// The page, oldest first.
    pub checkpoints: Vec<PagedCheckpoint>,
    /// How many signed checkpoints count in all.
    pub total: u64,
}

/// A signed checkpoint of a [`CheckpointPage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedCheckpoint {
    /// Its entry number in the checkpoint log, from 1: the cursor of the page before it.
    pub entry: u64,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// The witness cosignatures the log keeps of it.
    pub cosignatures: Vec<Cosignature>,
}

impl Ledger {
    /// Every entry of the checkpoint log: keys introduced, checkpoints, rotations.
    pub fn checkpoint_entries(&self) -> Result<Vec<CheckpointEntry>, ReadError> {
        Ok(self.core().storage.checkpoint_entries()?)
    }

    /// Every signed checkpoint of the log as it stands, oldest first: not those of history
    /// given up by an accepted loss.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, ReadError> {
        let entries = self.checkpoint_entries()?;
        let standing = crate::storage::standings(&entries);
        Ok(crate::storage::counting_checkpoints(&entries, &standing)
            .map(|(_, c)| c.clone())
            .collect())
    }

    /// A page of the signed checkpoints that count, for a reader who cannot take them all (a
    /// ledger written all day gains one a second): the newest `last` of those recorded before
    /// entry `before_entry` of the checkpoint log (1-based; all of them when none), oldest
    /// first, each with its entry number and the witness cosignatures the log keeps of it; and
    /// how many count in all.
    ///
    /// It reads the log from a little before the page to its end, since how an entry stands
    /// and the cosignatures of a checkpoint are in the entries after it: the newest page reads
    /// a few of them, whatever the length of the log.
    pub fn checkpoint_page(
        &self,
        last: usize,
        before_entry: Option<u64>,
    ) -> Result<CheckpointPage, ReadError> {
        let (seen, total) = self.core().checkpoint_view(|v| (v.seen(), v.counting()))?;
        let end = before_entry.map_or(seen, |before| before.saturating_sub(1).min(seen));
        let mut window = (last as u64).saturating_mul(4).saturating_add(64);
        loop {
            let from = end.saturating_sub(window);
            let entries = self.core().storage.checkpoint_entries_from(from)?;
            let page = page_of(&entries, from, end, last);
            if page.len() == last || from == 0 {
                return Ok(CheckpointPage {
                    checkpoints: page,
                    total,
                });
            }
            window = window.saturating_mul(4);
        }
    }

    /// How many signed checkpoints count (not those of history given up by an accepted loss).
    pub fn checkpoint_count(&self) -> Result<u64, ReadError> {
        Ok(self.core().checkpoint_view(|v| v.counting())?)
    }

    /// The latest signed checkpoint (not one of history given up by an accepted loss).
    pub fn latest_checkpoint(&self) -> Result<Option<Checkpoint>, ReadError> {
        Ok(self.core().checkpoint_view(|v| v.latest().cloned())?)
    }

    /// The latest signed checkpoint with the witness cosignatures the log keeps of it.
    pub fn latest_cosigned_checkpoint(
        &self,
    ) -> Result<Option<(Checkpoint, Vec<Cosignature>)>, ReadError> {
        Ok(self.core().checkpoint_view(|v| {
            v.latest()
                .map(|latest| (latest.clone(), v.cosignatures().to_vec()))
        })?)
    }

    /// The largest tree size `witness` cosigned, as the checkpoint log records: 0 when it
    /// cosigned none.
    pub fn last_cosigned_size(&self, witness: &VerifierKey) -> Result<u64, ReadError> {
        Ok(self.core().checkpoint_view(|v| v.last_cosigned(witness))?)
    }

    /// The rotation statements since the current chain of keys began.
    pub fn key_rotations(&self) -> Result<Vec<KeyRotation>, ReadError> {
        Ok(self.core().checkpoint_view(|v| v.rotations().to_vec())?)
    }

    /// The key that signs checkpoints now, or why none can.
    pub fn public_key(&self) -> Result<PublicKey, String> {
        self.core()
            .signer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The log's origin: the first line of its checkpoints and the name of its key.
    pub fn origin(&self) -> String {
        self.core()
            .origin
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The C2SP verifier key of the key that signs now: `origin+key ID+base64(0x01 ‖ key)`.
    pub fn verifier_key(&self) -> Result<VerifierKey, String> {
        let key = self.public_key()?;
        VerifierKey::ed25519(&self.origin(), key).map_err(|e| e.to_string())
    }

    /// Every witness cosignature the checkpoint log holds of `checkpoint`.
    pub fn cosignatures_of(&self, checkpoint: &Checkpoint) -> Result<Vec<Cosignature>, ReadError> {
        Ok(self
            .checkpoint_entries()?
            .into_iter()
            .filter_map(|e| match e {
                CheckpointEntry::Cosignature(c) if c.cosigns(checkpoint) => Some(c),
                _ => None,
            })
            .collect())
    }

    /// The latest checkpoint as a C2SP signed note: its body, the log's signature, and every
    /// witness cosignature the ledger keeps of it.
    pub fn checkpoint_note(&self) -> Result<Option<String>, ProofError> {
        let read = self.core().checkpoint_view(|v| {
            v.latest().map(|checkpoint| {
                (
                    checkpoint.clone(),
                    v.key_of(checkpoint),
                    v.cosignatures().to_vec(),
                )
            })
        });
        let Some((checkpoint, key, cosignatures)) = read.map_err(ReadError::from)? else {
            return Ok(None);
        };
        let key = key.ok_or_else(|| {
            ProofError::Invalid("the checkpoint's key is not in the chain".into())
        })?;
        let mut note = checkpoint
            .note(key)
            .map_err(|e| ProofError::Invalid(e.to_string()))?;
        for cosignature in cosignatures {
            note.signatures.push(cosignature.line());
        }
        Ok(Some(note.render()))
    }

    /// The bytes of a C2SP hash tile: its hashes, 32 bytes each, read from the stored perfect
    /// subtrees. `None` when the tree of the latest checkpoint does not hold every hash of it: a
    /// tile is served only once a signed checkpoint covers it, and never changes after.
    pub fn tile(&self, tile: &Tile) -> Result<Option<Vec<u8>>, ProofError> {
        let covered = self.latest_checkpoint()?.map_or(0, |c| c.tree_size);
        let span = 1u128 << (8 * u32::from(tile.level));
        let end = (u128::from(tile.index) * 256 + u128::from(tile.width)) * span;
        if end > u128::from(covered) {
            return Ok(None);
        }
        let nodes = StoredNodes(&*self.core().storage);
        let mut out = Vec::with_capacity(usize::from(tile.width) * 32);
        for i in 0..u64::from(tile.width) {
            let hash = nodes
                .perfect_node(tile.tree_level(), tile.first_node() + i)
                .map_err(|e| ProofError::Read(ReadError::Storage(e)))?;
            out.extend_from_slice(hash.as_bytes());
        }
        Ok(Some(out))
    }

    /// A C2SP entry bundle: the leaf data of a level-0 tile's leaves, each an event's 32-byte
    /// hash with its big-endian u16 length (32). `None` until a signed checkpoint covers it.
    pub fn tile_entries(&self, tile: &Tile) -> Result<Option<Vec<u8>>, ProofError> {
        let covered = self.latest_checkpoint()?.map_or(0, |c| c.tree_size);
        let first = tile.index * 256;
        let end = first + u64::from(tile.width);
        if tile.level != 0 || end > covered {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(usize::from(tile.width) * 34);
        for seq in first..end {
            let hash = self
                .core()
                .event_hash(seq)?
                .ok_or_else(|| ProofError::Invalid(format!("there is no event at seq {seq}")))?;
            out.extend_from_slice(&32u16.to_be_bytes());
            out.extend_from_slice(hash.as_bytes());
        }
        Ok(Some(out))
    }

    /// The RFC 9162 consistency path from the tree of `first` events to the tree of `second`,
    /// whether or not checkpoints sign those sizes: what a witness is sent beside a checkpoint.
    pub fn consistency_path(&self, first: u64, second: u64) -> Result<Vec<Digest>, ProofError> {
        if first > second || second > self.head().size {
            return Err(ProofError::Invalid(format!(
                "no consistency path from {first} to {second} events"
            )));
        }
        if first == 0 || first == second {
            return Ok(Vec::new());
        }
        ledger_proof::consistency_proof(&Sha256, &StoredNodes(&*self.core().storage), first, second)
            .map_err(tree_error)
    }

    /// The root of the tree of the first `size` events, from the stored nodes.
    pub fn root_at(&self, size: u64) -> Result<Digest, ProofError> {
        ledger_proof::root(&Sha256, &StoredNodes(&*self.core().storage), size).map_err(tree_error)
    }

    fn checkpoint_of_size(&self, size: u64) -> Result<Checkpoint, ProofError> {
        // Most often the latest: a proof to today's tree.
        if let Some(latest) = self.latest_checkpoint()?
            && latest.tree_size == size
        {
            return Ok(latest);
        }
        self.checkpoints()?
            .into_iter()
            .rev()
            .find(|c| c.tree_size == size)
            .ok_or(ProofError::NotCheckpointed(size))
    }

    /// A proof that the event at `seq` is in the tree of a checkpoint: the one of `tree_size`,
    /// or else the latest.
    pub fn inclusion_proof(
        &self,
        seq: u64,
        tree_size: Option<u64>,
    ) -> Result<InclusionProofFile, ProofError> {
        let checkpoint = match tree_size {
            Some(size) => self.checkpoint_of_size(size)?,
            None => {
                let latest = self.latest_checkpoint()?;
                match latest {
                    Some(c) if c.tree_size > seq => c,
                    other => {
                        return Err(ProofError::NotCovered {
                            seq,
                            latest_size: other.map_or(0, |c| c.tree_size),
                        });
                    }
                }
            }
        };
        if seq >= checkpoint.tree_size {
            return Err(ProofError::Invalid(format!(
                "seq {seq} is not in a tree of {} events",
                checkpoint.tree_size
            )));
        }
        let hash = self
            .core()
            .event_hash(seq)?
            .ok_or_else(|| ProofError::Invalid(format!("there is no event at seq {seq}")))?;
        let path = ledger_proof::inclusion_proof(
            &Sha256,
            &StoredNodes(&*self.core().storage),
            seq,
            checkpoint.tree_size,
        )
        .map_err(tree_error)?;
        Ok(InclusionProofFile::new(
            seq,
            hash,
            path,
            checkpoint,
            self.key_rotations()?,
        ))
    }

    /// [`Ledger::inclusion_proof`] against the latest checkpoint once it covers the event:
    /// when none does yet and no tree size was named, this waits for the periodic checkpointer
    /// (at most one interval of it). A reader never writes a checkpoint itself.
    pub fn inclusion_proof_covering(
        &self,
        seq: u64,
        tree_size: Option<u64>,
    ) -> Result<InclusionProofFile, ProofError> {
        if tree_size.is_none() && seq < self.head().size {
            self.await_checkpoint(seq + 1)?;
        }
        self.inclusion_proof(seq, tree_size)
    }

    /// [`Ledger::consistency_proof`] from the checkpoint of size `first` to today's ledger: the
    /// latest checkpoint, once the periodic checkpointer has covered the head (waiting at most
    /// one interval of it).
    pub fn consistency_to_today(&self, first: u64) -> Result<ConsistencyProofFile, ProofError> {
        let latest = self
            .await_checkpoint(self.head().size)?
            .ok_or(ProofError::NotCovered {
                seq: first,
                latest_size: 0,
            })?;
        self.consistency_proof(first, latest.tree_size)
    }

    /// The latest checkpoint, once it covers the first `size` events: while it does not, and
    /// the ledger writes checkpoints periodically, this waits for the next one (at most an
    /// interval of the checkpointer and a little more). Returns the latest either way.
    pub fn await_checkpoint(&self, size: u64) -> Result<Option<Checkpoint>, ReadError> {
        let deadline = self
            .core()
            .checkpoint_wait
            .map(|wait| std::time::Instant::now() + wait);
        loop {
            let latest = self.latest_checkpoint()?;
            let covered = latest.as_ref().is_some_and(|c| c.tree_size >= size);
            match deadline {
                Some(deadline)
                    if !covered
                        && std::time::Instant::now() < deadline
                        && self.poisoned().is_none() =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                _ => return Ok(latest),
            }
        }
    }

    /// A proof that the tree of the checkpoint of size `second` extends the one of size
    /// `first`.
    pub fn consistency_proof(
        &self,
        first: u64,
        second: u64,
    ) -> Result<ConsistencyProofFile, ProofError> {
        let first = self.checkpoint_of_size(first)?;
        let second = self.checkpoint_of_size(second)?;
        self.consistency_between(first, second)
    }

    /// A proof that the latest checkpoint extends `saved`, a checkpoint an auditor kept.
    pub fn consistency_since(&self, saved: Checkpoint) -> Result<ConsistencyProofFile, ProofError> {
        let latest = self.latest_checkpoint()?.ok_or(ProofError::NotCovered {
            seq: saved.tree_size,
            latest_size: 0,
        })?;
        self.consistency_between(saved, latest)
    }

    fn consistency_between(
        &self,
        first: Checkpoint,
        second: Checkpoint,
    ) -> Result<ConsistencyProofFile, ProofError> {
        if first.tree_size > second.tree_size {
            return Err(ProofError::Invalid(format!(
                "the first tree ({}) is larger than the second ({})",
                first.tree_size, second.tree_size
            )));
        }
        if first.tree_size == 0 {
            return Err(ProofError::Invalid(
                "an empty tree is consistent with every tree; there is nothing to prove".into(),
            ));
        }
        let path = ledger_proof::consistency_proof(
            &Sha256,
            &StoredNodes(&*self.core().storage),
            first.tree_size,
            second.tree_size,
        )
        .map_err(tree_error)?;
        Ok(ConsistencyProofFile::new(
            path,
            first,
            second,
            self.key_rotations()?,
        ))
    }
}

/// The newest `last` counting checkpoints among `entries` (the log's entries from index `from`
/// to its end) that lie before index `end`, oldest first, with their cosignatures.
fn page_of(entries: &[CheckpointEntry], from: u64, end: u64, last: usize) -> Vec<PagedCheckpoint> {
    let standing = crate::storage::standings_from(entries, from + 1);
    let before = usize::try_from(end.saturating_sub(from)).unwrap_or(usize::MAX);
    let counting: Vec<(usize, &Checkpoint)> =
        crate::storage::counting_checkpoints(entries, &standing)
            .take_while(|(i, _)| *i < before)
            .collect();
    let page = &counting[counting.len().saturating_sub(last)..];
    let mut out: Vec<PagedCheckpoint> = page
        .iter()
        .map(|(i, c)| PagedCheckpoint {
            entry: from + *i as u64 + 1,
            checkpoint: (*c).clone(),
            cosignatures: Vec::new(),
        })
        .collect();
    // A cosignature is recorded after the checkpoint it cosigns.
    let mut by_size: std::collections::HashMap<u64, Vec<usize>> = Default::default();
    for (at, p) in out.iter().enumerate() {
        by_size.entry(p.checkpoint.tree_size).or_default().push(at);
    }
    if let Some((first, _)) = page.first() {
        for entry in &entries[first + 1..] {
            let CheckpointEntry::Cosignature(c) = entry else {
                continue;
            };
            for &at in by_size.get(&c.tree_size).into_iter().flatten() {
                if c.cosigns(&out[at].checkpoint) {
                    out[at].cosignatures.push(c.clone());
                }
            }
        }
    }
    out
}
