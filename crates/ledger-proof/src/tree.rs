//! Tree roots and proofs computed from stored perfect-subtree hashes.
//!
//! The ledger keeps the hash of every *perfect* subtree it has completed: node `(level, index)`
//! covers the `2^level` leaves `[index·2^level, (index+1)·2^level)`, and level 0 holds the leaf
//! hashes. Those nodes never change once written, which is what an append-only store wants. A
//! tree of any size `n` is a sequence of such perfect subtrees (one per set bit of `n`), so its
//! root, and any RFC 9162 proof against it, can be assembled from a few stored nodes without
//! reading the leaves: a root costs at most 64 reads, a proof at most O(log² n).
//!
//! The proofs are exactly RFC 9162 §2.1.3.1 (`PATH`) and §2.1.4.1 (`PROOF`/`SUBPROOF`), written
//! as loops that walk down from the root.

use thiserror::Error;

use crate::{Digest, MerkleHasher};

/// Where perfect-subtree hashes are kept: storage in the ledger, memory in tests and tools.
pub trait NodeSource {
    /// Why a node could not be read.
    type Error;

    /// The hash of perfect subtree `(level, index)`, covering leaves
    /// `[index·2^level, (index+1)·2^level)`. Level 0 is the leaf hashes themselves.
    ///
    /// The algorithms here only ask for nodes that lie wholly inside the tree size they were
    /// given, so a source that has absorbed that many leaves has every node asked for.
    fn perfect_node(&self, level: u8, index: u64) -> Result<Digest, Self::Error>;
}

impl<S: NodeSource + ?Sized> NodeSource for &S {
    type Error = S::Error;

    fn perfect_node(&self, level: u8, index: u64) -> Result<Digest, Self::Error> {
        (**self).perfect_node(level, index)
    }
}

/// One perfect subtree hash, with its place in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerfectNode {
    /// Height above the leaves: 0 for a leaf hash.
    pub level: u8,
    /// Position among the nodes of the same level, from 0 at the left.
    pub index: u64,
    /// The subtree's root hash.
    pub hash: Digest,
}

/// Why a root or a proof could not be produced.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProveError<E> {
    /// The leaf index is not below the tree size: that tree has no such leaf. Ask for a proof
    /// against a larger (checkpointed) size, or check the index.
    #[error("leaf index {index} is not below tree size {size}")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The tree size asked for.
        size: u64,
    },
    /// A consistency proof was asked from a larger tree to a smaller one. Logs only grow, so
    /// swap the sizes or check where they came from.
    #[error("first size {first} is larger than second size {second}")]
    SizesOutOfOrder {
        /// The size that should be the older, smaller tree.
        first: u64,
        /// The size that should be the newer, larger tree.
        second: u64,
    },
    /// A consistency proof from the empty tree was asked for. Every log extends the empty one,
    /// so there is nothing to prove; RFC 9162 defines no such proof.
    #[error("no consistency proof starts from the empty tree")]
    EmptyFirstTree,
    /// The node source failed to return a node; the source's own error says why.
    #[error("reading a stored tree node failed")]
    Source(#[source] E),
}

/// The largest power of two strictly below `n`, for `n >= 2`: the size of the left subtree in
/// RFC 9162's split of a tree of `n` leaves.
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// The root of the `size` leaves starting at `begin`, from perfect nodes.
///
/// `begin` must be a multiple of the smallest power of two not below `size`, so that the range
/// is the left part of one perfect subtree; every range that RFC 9162's recursion visits is of
/// that shape. The range then splits exactly like RFC 9162's `MTH`: perfect nodes of decreasing
/// size, one per set bit of `size`, joined from the right.
fn range_root<H, S>(hasher: &H, source: &S, begin: u64, size: u64) -> Result<Digest, S::Error>
where
    H: MerkleHasher,
    S: NodeSource,
{
    let mut peaks = Vec::with_capacity(size.count_ones() as usize);
    let mut position = begin;
    for level in (0..64u8).rev() {
        if size & (1 << level) != 0 {
            peaks.push(source.perfect_node(level, position >> level)?);
            position += 1 << level;
        }
    }
    let mut peaks = peaks.into_iter().rev();
    let Some(mut root) = peaks.next() else {
        return Ok(hasher.empty_root());
    };
    for left in peaks {
        root = hasher.node(&left, &root);
    }
    Ok(root)
}

/// The root of the tree of the first `size` leaves (RFC 9162 `MTH(D[size])`).
///
/// The empty tree's root is the hash of the empty string. Reads one node per set bit of `size`.
pub fn root<H, S>(hasher: &H, source: &S, size: u64) -> Result<Digest, ProveError<S::Error>>
where
    H: MerkleHasher,
    S: NodeSource,
{
    range_root(hasher, source, 0, size).map_err(ProveError::Source)
}

/// The audit path of leaf `index` in the tree of the first `size` leaves (RFC 9162 §2.1.3.1
/// `PATH(index, D[size])`), ordered from the leaf's sibling up to the child of the root.
pub fn inclusion_proof<H, S>(
    hasher: &H,
    source: &S,
    index: u64,
    size: u64,
) -> Result<Vec<Digest>, ProveError<S::Error>>
where
    H: MerkleHasher,
    S: NodeSource,
{
    if index >= size {
        return Err(ProveError::IndexOutOfRange { index, size });
    }
    // Walk down from the root. The current subtree covers `[begin, begin + width)`; RFC 9162
    // splits it at `k`, the leaf lies on one side, and the other side's root joins the path.
    let mut path = Vec::new();
    let (mut begin, mut width) = (0u64, size);
    while width > 1 {
        let k = split(width);
        let level = k.trailing_zeros() as u8;
        if index - begin < k {
            path.push(
                range_root(hasher, source, begin + k, width - k).map_err(ProveError::Source)?,
            );
            width = k;
        } else {
            path.push(
                source
                    .perfect_node(level, begin >> level)
                    .map_err(ProveError::Source)?,
            );
            begin += k;
            width -= k;
        }
    }
    // RFC 9162 lists the path from the leaf upwards; the walk collected it from the root down.
    path.reverse();
    Ok(path)
}

/// The consistency proof from the tree of the first `first` leaves to the tree of the first
/// `second` leaves (RFC 9162 §2.1.4.1 `PROOF(first, D[second])`), ordered as the RFC orders it.
///
/// Equal sizes give the empty proof. A first size of 0 is refused: RFC 9162 defines proofs only
/// from a non-empty tree.
pub fn consistency_proof<H, S>(
    hasher: &H,
    source: &S,
    first: u64,
    second: u64,
) -> Result<Vec<Digest>, ProveError<S::Error>>
where
    H: MerkleHasher,
    S: NodeSource,
{
    if first == 0 {
        return Err(ProveError::EmptyFirstTree);
    }
    if first > second {
        return Err(ProveError::SizesOutOfOrder { first, second });
    }
    // `SUBPROOF(m, D[begin..begin+width], complete)`, unrolled: `m` counts the old tree's leaves
    // inside the current subtree, and `complete` stays true while the current subtree is the
    // old tree's own left edge, whose root the verifier already holds.
    let mut path = Vec::new();
    let (mut begin, mut width, mut m, mut complete) = (0u64, second, first, true);
    while m != width {
        let k = split(width);
        let level = k.trailing_zeros() as u8;
        if m <= k {
            path.push(
                range_root(hasher, source, begin + k, width - k).map_err(ProveError::Source)?,
            );
            width = k;
        } else {
            path.push(
                source
                    .perfect_node(level, begin >> level)
                    .map_err(ProveError::Source)?,
            );
            begin += k;
            width -= k;
            m -= k;
            complete = false;
        }
    }
    if !complete {
        path.push(range_root(hasher, source, begin, width).map_err(ProveError::Source)?);
    }
    path.reverse();
    Ok(path)
}
