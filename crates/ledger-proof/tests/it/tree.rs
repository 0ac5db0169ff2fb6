//! Roots and proofs from stored nodes, compared with the naive reference for every tree size up
//! to 300, every leaf index and every pair of sizes, with both hashers.

use std::cell::Cell;

use ledger_proof::{
    Digest, MemoryTree, MerkleHasher, MissingNode, NodeSource, ProveError, Sha256,
    consistency_path_len, consistency_proof, inclusion_path_len, inclusion_proof, root,
    verify_consistency, verify_inclusion,
};

use crate::common::{Blake3, Naive, leaf_data};

const SIZE_MAX: usize = 300;

fn tree_and_reference<H: MerkleHasher + Copy>(hasher: H) -> (MemoryTree<H>, Naive<H>) {
    let leaves = leaf_data(SIZE_MAX);
    let mut tree = MemoryTree::new(hasher);
    for leaf in &leaves {
        tree.push(leaf).unwrap();
    }
    (tree, Naive::new(hasher, leaves))
}

fn roots_and_inclusion_proofs_match_reference<H: MerkleHasher + Copy>(hasher: H) {
    let (tree, naive) = tree_and_reference(hasher);
    for n in 1..=SIZE_MAX {
        let size = n as u64;
        let root = tree.root_at(size).unwrap();
        assert_eq!(root, naive.mth(0, n), "root of size {n}");
        for i in 0..n {
            let proof = tree.inclusion_proof(i as u64, size).unwrap();
            assert_eq!(proof, naive.path(i, 0, n), "PATH({i}, D[{n}])");
            assert_eq!(inclusion_path_len(i as u64, size), Some(proof.len()));
            let leaf_hash = naive.mth(i, i + 1);
            assert_eq!(
                verify_inclusion(&hasher, i as u64, size, &leaf_hash, &proof, &root),
                Ok(()),
                "verify PATH({i}, D[{n}])"
            );
        }
    }
}

fn consistency_proofs_match_reference<H: MerkleHasher + Copy>(hasher: H) {
    let (tree, naive) = tree_and_reference(hasher);
    for n in 1..=SIZE_MAX {
        let second_root = naive.mth(0, n);
        for m in 1..=n {
            let proof = tree.consistency_proof(m as u64, n as u64).unwrap();
            assert_eq!(proof, naive.proof(m, n), "PROOF({m}, D[{n}])");
            assert_eq!(consistency_path_len(m as u64, n as u64), Some(proof.len()));
            assert_eq!(
                verify_consistency(
                    &hasher,
                    m as u64,
                    n as u64,
                    &naive.mth(0, m),
                    &second_root,
                    &proof
                ),
                Ok(()),
                "verify PROOF({m}, D[{n}])"
            );
        }
    }
}

#[test]
fn sha256_roots_and_inclusion_proofs_match_reference() {
    roots_and_inclusion_proofs_match_reference(Blake3);
}

#[test]
fn blake3_roots_and_inclusion_proofs_match_reference() {
    roots_and_inclusion_proofs_match_reference(Sha256);
}

#[test]
fn sha256_consistency_proofs_match_reference_for_every_pair() {
    consistency_proofs_match_reference(Blake3);
}

#[test]
fn blake3_consistency_proofs_match_reference_for_every_pair() {
    consistency_proofs_match_reference(Sha256);
}

#[test]
fn impossible_requests_are_refused() {
    let (tree, _) = tree_and_reference(Sha256);
    assert!(matches!(
        tree.inclusion_proof(5, 5),
        Err(ProveError::IndexOutOfRange { index: 5, size: 5 })
    ));
    assert!(matches!(
        tree.inclusion_proof(0, 0),
        Err(ProveError::IndexOutOfRange { index: 0, size: 0 })
    ));
    assert!(matches!(
        tree.consistency_proof(0, 5),
        Err(ProveError::EmptyFirstTree)
    ));
    assert!(matches!(
        tree.consistency_proof(6, 5),
        Err(ProveError::SizesOutOfOrder {
            first: 6,
            second: 5
        })
    ));
    assert_eq!(tree.consistency_proof(7, 7).unwrap(), Vec::<Digest>::new());
    assert_eq!(tree.root_at(0).unwrap(), Sha256.empty_root());
}

#[test]
fn nodes_beyond_the_stored_tree_are_reported_missing() {
    let (tree, _) = tree_and_reference(Sha256);
    let beyond = SIZE_MAX as u64 + 1;
    assert!(matches!(
        tree.root_at(beyond),
        Err(ProveError::Source(MissingNode { level: 0, .. }))
    ));
    assert!(matches!(
        tree.inclusion_proof(0, beyond),
        Err(ProveError::Source(MissingNode { .. }))
    ));
}

/// A tree whose leaves are all the same, so that perfect node `(l, i)` is the same hash for
/// every `i` and any size up to `u64::MAX` can be served without storing anything. It counts
/// the nodes read.
struct UniformTree {
    levels: Vec<Digest>,
    reads: Cell<u64>,
}

impl UniformTree {
    fn new() -> Self {
        let mut levels = vec![Sha256.leaf(b"the same event")];
        for level in 1..64 {
            let below = levels[level - 1];
            levels.push(Sha256.node(&below, &below));
        }
        Self {
            levels,
            reads: Cell::new(0),
        }
    }

    fn take_reads(&self) -> u64 {
        self.reads.replace(0)
    }
}

impl NodeSource for UniformTree {
    type Error = std::convert::Infallible;

    fn perfect_node(&self, level: u8, index: u64) -> Result<Digest, Self::Error> {
        // The node must lie inside a 64-bit tree, or the caller asked for something absurd.
        let first_leaf = index.checked_mul(1u64 << level).unwrap();
        first_leaf.checked_add((1u64 << level) - 1).unwrap();
        self.reads.set(self.reads.get() + 1);
        Ok(self.levels[usize::from(level)])
    }
}

fn bit_length(x: u64) -> u64 {
    u64::from(64 - x.leading_zeros())
}

#[test]
fn huge_trees_need_few_node_reads_and_their_proofs_verify() {
    let source = UniformTree::new();
    let leaf = source.levels[0];
    let sizes = [
        1,
        2,
        3,
        1 << 20,
        (1 << 20) + 1,
        1_000_000_007,
        (1 << 40) - 1,
        1 << 63,
        u64::MAX - 1,
        u64::MAX,
    ];
    for size in sizes {
        let height = bit_length(size - 1) + 1;
        let tree_root = root(&Sha256, &source, size).unwrap();
        assert_eq!(
            source.take_reads(),
            u64::from(size.count_ones()),
            "root({size})"
        );

        for index in [0, size / 3, size / 2, size - 1] {
            let path = inclusion_proof(&Sha256, &source, index, size).unwrap();
            let reads = source.take_reads();
            assert!(
                reads <= height * height,
                "PATH({index}, {size}) read {reads} nodes"
            );
            assert_eq!(
                verify_inclusion(&Sha256, index, size, &leaf, &path, &tree_root),
                Ok(())
            );
        }
        for first in [1, size / 3, size / 2, size - 1, size] {
            if first == 0 {
                continue;
            }
            let first_root = root(&Sha256, &source, first).unwrap();
            source.take_reads();
            let path = consistency_proof(&Sha256, &source, first, size).unwrap();
            let reads = source.take_reads();
            assert!(
                reads <= height * height,
                "PROOF({first}, {size}) read {reads} nodes"
            );
            assert_eq!(
                verify_consistency(&Sha256, first, size, &first_root, &tree_root, &path),
                Ok(())
            );
        }
    }
}

#[test]
fn proofs_in_perfect_trees_read_one_node_per_level() {
    let source = UniformTree::new();
    for level in 1..=63u32 {
        let size = 1u64 << level;
        inclusion_proof(&Sha256, &source, size / 2, size).unwrap();
        assert_eq!(source.take_reads(), u64::from(level));
    }
}
