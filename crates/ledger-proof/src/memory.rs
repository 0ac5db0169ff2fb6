//! A whole tree held in memory: every perfect node, appended as leaves arrive.
//!
//! It is the in-memory counterpart of the ledger's stored nodes: tools that rebuild a tree from
//! an exported bundle, and tests, use it to produce roots and proofs without storage.

use thiserror::Error;

use crate::frontier::{Frontier, FrontierError};
use crate::tree::{self, NodeSource, ProveError};
use crate::{Digest, MerkleHasher};

/// A Merkle tree whose perfect nodes all live in memory (about two digests per leaf).
#[derive(Debug, Clone)]
pub struct MemoryTree<H> {
    hasher: H,
    frontier: Frontier,
    /// `levels[l][i]` is perfect node `(l, i)`.
    levels: Vec<Vec<Digest>>,
}

/// A perfect node that the tree does not hold: it lies beyond the leaves appended so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("no perfect node ({level}, {index}) in a tree of {size} leaves")]
pub struct MissingNode {
    /// Level asked for.
    pub level: u8,
    /// Index asked for.
    pub index: u64,
    /// Leaves the tree held.
    pub size: u64,
}

impl<H: MerkleHasher> MemoryTree<H> {
    /// An empty tree using `hasher`.
    pub fn new(hasher: H) -> Self {
        Self {
            hasher,
            frontier: Frontier::new(),
            levels: Vec::new(),
        }
    }

    /// Appends one entry (hashed as a leaf) and returns its leaf index.
    pub fn push(&mut self, data: &[u8]) -> Result<u64, FrontierError> {
        let leaf_hash = self.hasher.leaf(data);
        self.push_leaf_hash(leaf_hash)
    }

    /// Appends one leaf hash and returns its leaf index.
    pub fn push_leaf_hash(&mut self, leaf_hash: Digest) -> Result<u64, FrontierError> {
        let index = self.frontier.size();
        for node in self.frontier.push_leaf_hash(&self.hasher, leaf_hash)? {
            let level = usize::from(node.level);
            if self.levels.len() <= level {
                self.levels.resize_with(level + 1, Vec::new);
            }
            // Nodes of one level complete left to right, so each lands at its own index.
            self.levels[level].push(node.hash);
        }
        Ok(index)
    }

    /// The number of leaves.
    pub fn size(&self) -> u64 {
        self.frontier.size()
    }

    /// The root of the whole tree.
    pub fn root(&self) -> Digest {
        self.frontier.root(&self.hasher)
    }

    /// The root of the tree of the first `size` leaves.
    pub fn root_at(&self, size: u64) -> Result<Digest, ProveError<MissingNode>> {
        tree::root(&self.hasher, self, size)
    }

    /// The audit path of leaf `index` in the tree of the first `size` leaves.
    pub fn inclusion_proof(
        &self,
        index: u64,
        size: u64,
    ) -> Result<Vec<Digest>, ProveError<MissingNode>> {
        tree::inclusion_proof(&self.hasher, self, index, size)
    }

    /// The consistency proof from the first `first` leaves to the first `second` leaves.
    pub fn consistency_proof(
        &self,
        first: u64,
        second: u64,
    ) -> Result<Vec<Digest>, ProveError<MissingNode>> {
        tree::consistency_proof(&self.hasher, self, first, second)
    }
}

impl<H> NodeSource for MemoryTree<H> {
    type Error = MissingNode;

    fn perfect_node(&self, level: u8, index: u64) -> Result<Digest, MissingNode> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.levels.get(usize::from(level))?.get(i))
            .copied()
            .ok_or(MissingNode {
                level,
                index,
                size: self.frontier.size(),
            })
    }
}
