//! Checking inclusion and consistency proofs: the part of the ledger an auditor runs.
//!
//! The two checks follow RFC 9162 §2.1.3.2 and §2.1.4.2 step by step, so that this file can be
//! read next to the RFC. Each check first compares the proof's length with the one length the
//! RFC's recursion produces for those sizes; a truncated or padded proof is named as such
//! instead of surfacing as a mismatched root.
//!
//! What a proof does not say: the tree size it is checked against comes from the caller. A path
//! for some size can also fit a neighbouring size whose tree has the same shape along that path,
//! so a size is only as trustworthy as the signed checkpoint that states it together with its
//! root. Proof files therefore always carry their checkpoints (see [`crate::proof_file`]).

use thiserror::Error;

use crate::{Digest, MerkleHasher};

/// Why an inclusion proof was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InclusionError {
    /// The leaf index is not below the tree size: a tree of that size has no such leaf, so the
    /// proof claims something impossible.
    #[error("leaf index {leaf_index} is not below tree size {tree_size}")]
    IndexOutOfRange {
        /// Leaf index the proof names.
        leaf_index: u64,
        /// Tree size it is checked against.
        tree_size: u64,
    },
    /// The path has the wrong number of hashes for this leaf index and tree size: it was cut
    /// short, padded, or made for another position or size. Nothing about the leaf is shown.
    #[error(
        "an inclusion path for this index and size has {expected} hashes, this one has {found}"
    )]
    PathLength {
        /// Length RFC 9162 prescribes for this index and size.
        expected: usize,
        /// Length of the path given.
        found: usize,
    },
    /// Hashing the leaf up the path gives a different root: the leaf is not at that index of
    /// the tree with that root, or the leaf, the path or the root was altered.
    #[error("the path leads to root {computed}, not to {expected}")]
    RootMismatch {
        /// Root recomputed from the leaf and the path.
        computed: Digest,
        /// Root the proof was checked against.
        expected: Digest,
    },
}

/// Why a consistency proof was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConsistencyError {
    /// The first tree is empty. Every log extends the empty log, so there is nothing to check;
    /// RFC 9162 defines no proof for it and this verifier accepts none rather than a vacuous one.
    #[error("no consistency proof starts from the empty tree")]
    EmptyFirstTree,
    /// The second tree is smaller than the first: as stated, the log shrank, which an
    /// append-only log never does. The sizes are swapped or the later log lost entries.
    #[error("second size {second_size} is smaller than first size {first_size}")]
    SizesOutOfOrder {
        /// Size of the earlier tree.
        first_size: u64,
        /// Size of the later tree.
        second_size: u64,
    },
    /// Two different roots for the same tree size: the log was rewritten (forked) between the
    /// two tree heads, or one of the roots was altered.
    #[error("the same tree size {tree_size} has two roots, {first_root} and {second_root}")]
    SameSizeDifferentRoots {
        /// The size both roots claim.
        tree_size: u64,
        /// The first root.
        first_root: Digest,
        /// The second root.
        second_root: Digest,
    },
    /// The proof has the wrong number of hashes for these two sizes: it was cut short, padded,
    /// or made for other sizes.
    #[error("a consistency proof for these sizes has {expected} hashes, this one has {found}")]
    PathLength {
        /// Length RFC 9162 prescribes for these sizes.
        expected: usize,
        /// Length of the proof given.
        found: usize,
    },
    /// The proof does not rebuild the first root: it does not describe the earlier tree, so
    /// nothing ties that tree to the later one. The proof or the first root was altered.
    #[error("the proof rebuilds first root {computed}, not {expected}")]
    FirstRootMismatch {
        /// First root rebuilt from the proof.
        computed: Digest,
        /// First root the proof was checked against.
        expected: Digest,
    },
    /// The proof rebuilds the first root but not the second: the later tree is not the earlier
    /// tree with entries appended (history was changed), or the proof or the second root was
    /// altered. When the first size is a power of two, RFC 9162 starts the rebuild from the
    /// first root itself, so an altered first root is reported here as well.
    #[error("the proof rebuilds second root {computed}, not {expected}")]
    SecondRootMismatch {
        /// Second root rebuilt from the proof.
        computed: Digest,
        /// Second root the proof was checked against.
        expected: Digest,
    },
}

/// Number of bits needed to write `x` (0 for 0).
fn bit_length(x: u64) -> usize {
    (64 - x.leading_zeros()) as usize
}

/// The number of set bits of `x` above its lowest `bits` bits. `bits` can be 64 when the sizes
/// differ in the top bit, where a plain `x >> 64` would overflow.
fn ones_above(x: u64, bits: usize) -> usize {
    u32::try_from(bits)
        .ok()
        .and_then(|bits| x.checked_shr(bits))
        .map_or(0, |high| high.count_ones() as usize)
}

/// The number of hashes in the RFC 9162 audit path of `leaf_index` in a tree of `tree_size`
/// leaves, or `None` when the index is not below the size.
///
/// Below the level where the leaf's path leaves the right edge of the tree, every level gives
/// one sibling; above it, only the levels where the right edge has a left neighbour do.
pub fn inclusion_path_len(leaf_index: u64, tree_size: u64) -> Option<usize> {
    if leaf_index >= tree_size {
        return None;
    }
    let inner = bit_length(leaf_index ^ (tree_size - 1));
    Some(inner + ones_above(leaf_index, inner))
}

/// The number of hashes in the RFC 9162 consistency proof from `first_size` to `second_size`
/// leaves, or `None` unless `0 < first_size <= second_size`.
///
/// The proof is the audit path, in the larger tree, of the highest perfect subtree at the right
/// edge of the smaller tree, plus that subtree's own root unless it is the whole smaller tree
/// (the verifier already holds that root).
pub fn consistency_path_len(first_size: u64, second_size: u64) -> Option<usize> {
    if first_size == 0 || first_size > second_size {
        return None;
    }
    if first_size == second_size {
        return Some(0);
    }
    let level = first_size.trailing_zeros();
    let node = (first_size - 1) >> level;
    let last = (second_size - 1) >> level;
    let inner = bit_length(node ^ last);
    Some(inner + ones_above(node, inner) + usize::from(node != 0))
}

/// Hashes `leaf_hash` up an inclusion path and returns the root it leads to
/// (RFC 9162 §2.1.3.2, steps 1–4).
pub fn root_from_inclusion_proof<H: MerkleHasher>(
    hasher: &H,
    leaf_index: u64,
    tree_size: u64,
    leaf_hash: &Digest,
    path: &[Digest],
) -> Result<Digest, InclusionError> {
    // Step 1: the index must name a leaf of the tree.
    let Some(expected) = inclusion_path_len(leaf_index, tree_size) else {
        return Err(InclusionError::IndexOutOfRange {
            leaf_index,
            tree_size,
        });
    };
    let path_length = InclusionError::PathLength {
        expected,
        found: path.len(),
    };
    if path.len() != expected {
        return Err(path_length);
    }
    // Step 2: `fn_` is the node's index at the current level, `sn` the index of the last node.
    let (mut fn_, mut sn) = (leaf_index, tree_size - 1);
    // Step 3.
    let mut r = *leaf_hash;
    // Step 4.
    for p in path {
        // 4a: a path longer than the tree is tall. The length check above already rules it
        // out; the RFC's own guard stays so the loop is correct on its own.
        if sn == 0 {
            return Err(path_length);
        }
        // 4b: `p` is a left sibling. Either the node is a right child, or it is the last node
        // of its level: having no right sibling, it rises unchanged (the shifts skip those
        // levels) and `p` is the left sibling of the ancestor it becomes.
        if fn_ & 1 == 1 || fn_ == sn {
            r = hasher.node(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = hasher.node(&r, p);
        }
        // 4c.
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 5, first half: the path must have reached the top of the tree.
    if sn != 0 {
        return Err(path_length);
    }
    Ok(r)
}

/// Checks that `leaf_hash` is leaf `leaf_index` of the tree of `tree_size` leaves whose root is
/// `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion<H: MerkleHasher>(
    hasher: &H,
    leaf_index: u64,
    tree_size: u64,
    leaf_hash: &Digest,
    path: &[Digest],
    root: &Digest,
) -> Result<(), InclusionError> {
    let computed = root_from_inclusion_proof(hasher, leaf_index, tree_size, leaf_hash, path)?;
    // Step 5, second half.
    if computed != *root {
        return Err(InclusionError::RootMismatch {
            computed,
            expected: *root,
        });
    }
    Ok(())
}

/// Checks that the tree of `second_size` leaves with root `second_root` extends the tree of
/// `first_size` leaves with root `first_root` (RFC 9162 §2.1.4.2).
///
/// Edge cases, decided here because the RFC states its algorithm for `0 < first < second`:
/// a first size of 0 is refused ([`ConsistencyError::EmptyFirstTree`]); equal sizes need an
/// empty proof and equal roots.
pub fn verify_consistency<H: MerkleHasher>(
    hasher: &H,
    first_size: u64,
    second_size: u64,
    first_root: &Digest,
    second_root: &Digest,
    path: &[Digest],
) -> Result<(), ConsistencyError> {
    if first_size == 0 {
        return Err(ConsistencyError::EmptyFirstTree);
    }
    if first_size > second_size {
        return Err(ConsistencyError::SizesOutOfOrder {
            first_size,
            second_size,
        });
    }
    let Some(expected) = consistency_path_len(first_size, second_size) else {
        return Err(ConsistencyError::SizesOutOfOrder {
            first_size,
            second_size,
        });
    };
    let path_length = ConsistencyError::PathLength {
        expected,
        found: path.len(),
    };
    if path.len() != expected {
        return Err(path_length);
    }
    if first_size == second_size {
        if first_root != second_root {
            return Err(ConsistencyError::SameSizeDifferentRoots {
                tree_size: first_size,
                first_root: *first_root,
                second_root: *second_root,
            });
        }
        return Ok(());
    }
    let Some((fr, sr)) = consistency_roots(hasher, first_size, second_size, first_root, path)
    else {
        return Err(path_length);
    };
    if fr != *first_root {
        return Err(ConsistencyError::FirstRootMismatch {
            computed: fr,
            expected: *first_root,
        });
    }
    if sr != *second_root {
        return Err(ConsistencyError::SecondRootMismatch {
            computed: sr,
            expected: *second_root,
        });
    }
    Ok(())
}

/// The roots of the first and the second tree that `path` rebuilds from the first tree's
/// right edge (RFC 9162 §2.1.4.2, steps 1 to 7, for `0 < first_size < second_size`), or `None`
/// when the path has too few or too many nodes for the two sizes.
fn consistency_roots<H: MerkleHasher>(
    hasher: &H,
    first_size: u64,
    second_size: u64,
    first_root: &Digest,
    path: &[Digest],
) -> Option<(Digest, Digest)> {
    // Step 1: an empty proof cannot connect two different sizes.
    let (head, tail) = path.split_first()?;
    // Step 2: when the first tree is a perfect subtree of the second, the proof omits its root,
    // which the verifier holds: put it back in front.
    let (start, rest) = if first_size.is_power_of_two() {
        (first_root, path)
    } else {
        (head, tail)
    };
    // Step 3.
    let (mut fn_, mut sn) = (first_size - 1, second_size - 1);
    // Step 4: climb to the highest perfect subtree on the first tree's right edge.
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 5: `fr` rebuilds the first root, `sr` the second.
    let (mut fr, mut sr) = (*start, *start);
    // Step 6.
    for c in rest {
        if sn == 0 {
            return None;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            // A left sibling: part of both trees.
            fr = hasher.node(c, &fr);
            sr = hasher.node(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            // A right sibling: appended after the first tree, so only in the second.
            sr = hasher.node(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    // Step 7.
    (sn == 0).then_some((fr, sr))
}
