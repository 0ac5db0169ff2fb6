//! The right edge of a growing tree, enough to append leaves and know the root without reading
//! anything back.
//!
//! A tree of `n` leaves is a row of perfect subtrees, one per set bit of `n` (a "compact range"
//! of `[0, n)`). Keeping just their roots, at most 64 digests, is enough to append the next leaf:
//! the new leaf merges with every peak of equal height, the way a carry runs through a binary
//! counter. Each merge completes a perfect subtree that will never change again; the frontier
//! reports each one so that the ledger can store it for later proofs.

use thiserror::Error;

use crate::tree::{NodeSource, PerfectNode};
use crate::{Digest, MerkleHasher};

/// The roots of the perfect subtrees along the right edge of a tree, indexed by height.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// `peaks[level]` holds a root exactly when bit `level` of `size` is set.
    peaks: [Option<Digest>; 64],
}

/// Why a leaf could not be appended.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrontierError {
    /// The tree already holds `u64::MAX` leaves, the most a 64-bit size can count.
    #[error("the tree is full: it holds u64::MAX leaves")]
    Full,
}

impl Default for Frontier {
    fn default() -> Self {
        Self::new()
    }
}

impl Frontier {
    /// The frontier of the empty tree.
    pub fn new() -> Self {
        Self {
            size: 0,
            peaks: [None; 64],
        }
    }

    /// Rebuilds the frontier of the first `size` leaves from stored perfect nodes, one read per
    /// set bit of `size`: how the ledger picks up appending after a restart.
    pub fn load<S: NodeSource>(source: &S, size: u64) -> Result<Self, S::Error> {
        let mut frontier = Self::new();
        let mut position = 0u64;
        for level in (0..64u8).rev() {
            if size & (1 << level) != 0 {
                frontier.peaks[usize::from(level)] =
                    Some(source.perfect_node(level, position >> level)?);
                position += 1 << level;
            }
        }
        frontier.size = size;
        Ok(frontier)
    }

    /// The number of leaves absorbed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The right-edge perfect subtrees, largest (leftmost) first.
    pub fn peaks(&self) -> Vec<PerfectNode> {
        let mut peaks = Vec::with_capacity(self.size.count_ones() as usize);
        let mut position = 0u64;
        for level in (0..64u8).rev() {
            if let Some(hash) = self.peaks[usize::from(level)] {
                peaks.push(PerfectNode {
                    level,
                    index: position >> level,
                    hash,
                });
                position += 1 << level;
            }
        }
        peaks
    }

    /// Appends one entry, hashing it as a leaf (`H(0x00 ‖ data)`); see [`Frontier::push_leaf_hash`].
    pub fn push<H: MerkleHasher>(
        &mut self,
        hasher: &H,
        data: &[u8],
    ) -> Result<Vec<PerfectNode>, FrontierError> {
        self.push_leaf_hash(hasher, hasher.leaf(data))
    }

    /// Appends one leaf hash and returns the perfect subtrees it completed, lowest first: the
    /// leaf itself at level 0, then one node per merge. Stored, they are everything a
    /// [`NodeSource`] must hold.
    pub fn push_leaf_hash<H: MerkleHasher>(
        &mut self,
        hasher: &H,
        leaf_hash: Digest,
    ) -> Result<Vec<PerfectNode>, FrontierError> {
        let mut completed = Vec::with_capacity(2);
        self.push_leaf_hash_into(hasher, leaf_hash, &mut completed)?;
        Ok(completed)
    }

    /// Appends one entry, hashing it as a leaf, and adds the perfect subtrees it completed to
    /// `completed`: [`Frontier::push`] for callers that gather the nodes of many leaves, or
    /// that reuse one buffer to absorb a long run of leaves without allocating for each.
    pub fn push_into<H: MerkleHasher>(
        &mut self,
        hasher: &H,
        data: &[u8],
        completed: &mut Vec<PerfectNode>,
    ) -> Result<(), FrontierError> {
        self.push_leaf_hash_into(hasher, hasher.leaf(data), completed)
    }

    fn push_leaf_hash_into<H: MerkleHasher>(
        &mut self,
        hasher: &H,
        leaf_hash: Digest,
        completed: &mut Vec<PerfectNode>,
    ) -> Result<(), FrontierError> {
        let index = self.size;
        let size = index.checked_add(1).ok_or(FrontierError::Full)?;
        completed.push(PerfectNode {
            level: 0,
            index,
            hash: leaf_hash,
        });
        let mut hash = leaf_hash;
        let mut level = 0u8;
        // A carry: while a peak of the same height waits on the left, the two make a perfect
        // subtree one level up. Since `index < u64::MAX`, the carry stops below level 64.
        while let Some(left) = self
            .peaks
            .get_mut(usize::from(level))
            .and_then(Option::take)
        {
            hash = hasher.node(&left, &hash);
            level += 1;
            completed.push(PerfectNode {
                level,
                index: index >> level,
                hash,
            });
        }
        if let Some(slot) = self.peaks.get_mut(usize::from(level)) {
            *slot = Some(hash);
        }
        self.size = size;
        Ok(())
    }

    /// The root of the tree absorbed so far (RFC 9162 `MTH`): the peaks joined from the right.
    pub fn root<H: MerkleHasher>(&self, hasher: &H) -> Digest {
        let mut root: Option<Digest> = None;
        for peak in self.peaks.iter().flatten() {
            root = Some(match root {
                None => *peak,
                Some(right) => hasher.node(peak, &right),
            });
        }
        root.unwrap_or_else(|| hasher.empty_root())
    }
}
