//! Altered proofs, sizes, indices and roots are refused.
//!
//! The alterations are the ones the certificate transparency verifier tests apply (a flipped
//! bit in each path hash, a path cut short or padded at either end, a neighbouring index or
//! size, a wrong leaf or root), run over every proof of every tree up to 40 leaves.

use ledger_proof::{
    ConsistencyError, Digest, InclusionError, MemoryTree, MerkleHasher, Sha256, verify_consistency,
    verify_inclusion,
};

use crate::common::{Blake3, flip, leaf_data};

const SIZE_MAX: u64 = 40;

fn tree<H: MerkleHasher>(hasher: H) -> MemoryTree<H> {
    let mut tree = MemoryTree::new(hasher);
    // Twice as many leaves as the trees examined, so that doubled sizes have roots too.
    for leaf in leaf_data(2 * SIZE_MAX as usize + 2) {
        tree.push(&leaf).unwrap();
    }
    tree
}

fn inclusion_alterations_are_refused<H: MerkleHasher>(hasher: H) {
    let tree = tree(&hasher);
    let data = leaf_data(2 * SIZE_MAX as usize + 2);
    let other = hasher.leaf(b"not a leaf of this tree");
    for size in 1..=SIZE_MAX {
        let root = tree.root_at(size).unwrap();
        for index in 0..size {
            let leaf = hasher.leaf(&data[index as usize]);
            let path = tree.inclusion_proof(index, size).unwrap();
            let check = |index: u64, size: u64, leaf: &Digest, path: &[Digest], root: &Digest| {
                verify_inclusion(&hasher, index, size, leaf, path, root)
            };
            assert_eq!(check(index, size, &leaf, &path, &root), Ok(()));

            // Each path hash altered.
            for position in 0..path.len() {
                let mut altered = path.clone();
                altered[position] = flip(&altered[position], position % 32, 3);
                assert!(matches!(
                    check(index, size, &leaf, &altered, &root),
                    Err(InclusionError::RootMismatch { .. })
                ));
            }
            // Cut short or padded at either end.
            let mut variants: Vec<Vec<Digest>> = Vec::new();
            if !path.is_empty() {
                variants.push(path[..path.len() - 1].to_vec());
                variants.push(path[1..].to_vec());
            }
            for extra in [root, Digest([0; 32]), leaf] {
                variants.push([path.as_slice(), &[extra]].concat());
                variants.push([&[extra], path.as_slice()].concat());
            }
            for variant in variants {
                assert!(matches!(
                    check(index, size, &leaf, &variant, &root),
                    Err(InclusionError::PathLength { .. })
                ));
            }
            // Another index of the same tree.
            for wrong in [index.wrapping_sub(1), index + 1, index ^ 2, index ^ 1] {
                if wrong != index && wrong < size {
                    assert!(
                        check(wrong, size, &leaf, &path, &root).is_err(),
                        "index {wrong} accepted for PATH({index}, {size})"
                    );
                }
            }
            // Another size, checked against that size's own root.
            for wrong in [size - 1, size + 1, size * 2, size / 2] {
                if wrong != size && wrong > index {
                    let wrong_root = tree.root_at(wrong).unwrap();
                    assert!(
                        check(index, wrong, &leaf, &path, &wrong_root).is_err(),
                        "size {wrong} accepted for PATH({index}, {size})"
                    );
                }
            }
            // Index beyond the tree.
            assert!(matches!(
                check(size, size, &leaf, &path, &root),
                Err(InclusionError::IndexOutOfRange { .. })
            ));
            // Another leaf, another root.
            assert!(matches!(
                check(index, size, &other, &path, &root),
                Err(InclusionError::RootMismatch { .. })
            ));
            for wrong_root in [flip(&root, 31, 0), hasher.empty_root(), leaf] {
                if wrong_root != root {
                    assert!(matches!(
                        check(index, size, &leaf, &path, &wrong_root),
                        Err(InclusionError::RootMismatch { .. })
                    ));
                }
            }
        }
    }
}

fn consistency_alterations_are_refused<H: MerkleHasher>(hasher: H) {
    let tree = tree(&hasher);
    for second in 2..=SIZE_MAX {
        let second_root = tree.root_at(second).unwrap();
        for first in 1..second {
            let first_root = tree.root_at(first).unwrap();
            let path = tree.consistency_proof(first, second).unwrap();
            let check = |first: u64, second: u64, r1: &Digest, r2: &Digest, path: &[Digest]| {
                verify_consistency(&hasher, first, second, r1, r2, path)
            };
            assert_eq!(
                check(first, second, &first_root, &second_root, &path),
                Ok(())
            );

            // Each proof hash altered.
            for position in 0..path.len() {
                let mut altered = path.clone();
                altered[position] = flip(&altered[position], 0, 4);
                assert!(matches!(
                    check(first, second, &first_root, &second_root, &altered),
                    Err(ConsistencyError::FirstRootMismatch { .. }
                        | ConsistencyError::SecondRootMismatch { .. })
                ));
            }
            // Empty, cut short, or padded at either end.
            let mut variants = vec![Vec::new(), path[..path.len() - 1].to_vec()];
            for extra in [first_root, second_root, path[0], Digest([0; 32])] {
                variants.push([path.as_slice(), &[extra]].concat());
                variants.push([&[extra], path.as_slice()].concat());
            }
            for variant in variants {
                assert!(matches!(
                    check(first, second, &first_root, &second_root, &variant),
                    Err(ConsistencyError::PathLength { .. })
                ));
            }
            // Other sizes, each checked against its own root.
            for wrong in [first - 1, first + 1, first ^ 2, first * 2] {
                if wrong != first && wrong != 0 && wrong <= second {
                    let wrong_root = tree.root_at(wrong).unwrap();
                    assert!(
                        check(wrong, second, &wrong_root, &second_root, &path).is_err(),
                        "first size {wrong} accepted for PROOF({first}, {second})"
                    );
                }
            }
            for wrong in [second - 1, second + 1, second * 2, second / 2] {
                if wrong != second && wrong >= first {
                    let wrong_root = tree.root_at(wrong).unwrap();
                    assert!(
                        check(first, wrong, &first_root, &wrong_root, &path).is_err(),
                        "second size {wrong} accepted for PROOF({first}, {second})"
                    );
                }
            }
            // Wrong or swapped roots. A first tree of power-of-two size is rebuilt from its own
            // root, so an altered first root then shows in the second root.
            assert!(matches!(
                check(first, second, &flip(&first_root, 5, 5), &second_root, &path),
                Err(ConsistencyError::FirstRootMismatch { .. }
                    | ConsistencyError::SecondRootMismatch { .. })
            ));
            assert!(matches!(
                check(first, second, &first_root, &flip(&second_root, 5, 5), &path),
                Err(ConsistencyError::SecondRootMismatch { .. })
            ));
            assert!(check(first, second, &second_root, &first_root, &path).is_err());
            // The log shrinking.
            assert!(matches!(
                check(second, first, &second_root, &first_root, &path),
                Err(ConsistencyError::SizesOutOfOrder { .. })
            ));
        }
    }
}

#[test]
fn sha256_inclusion_alterations_are_refused() {
    inclusion_alterations_are_refused(Blake3);
}

#[test]
fn blake3_inclusion_alterations_are_refused() {
    inclusion_alterations_are_refused(Sha256);
}

#[test]
fn sha256_consistency_alterations_are_refused() {
    consistency_alterations_are_refused(Blake3);
}

#[test]
fn blake3_consistency_alterations_are_refused() {
    consistency_alterations_are_refused(Sha256);
}

#[test]
fn consistency_edge_cases_are_decided() {
    let tree = tree(Sha256);
    let root5 = tree.root_at(5).unwrap();
    let root6 = tree.root_at(6).unwrap();
    // Equal sizes: the empty proof and the same root.
    assert_eq!(
        verify_consistency(&Sha256, 5, 5, &root5, &root5, &[]),
        Ok(())
    );
    assert!(matches!(
        verify_consistency(&Sha256, 5, 5, &root5, &root6, &[]),
        Err(ConsistencyError::SameSizeDifferentRoots { tree_size: 5, .. })
    ));
    assert!(matches!(
        verify_consistency(&Sha256, 5, 5, &root5, &root5, &[root5]),
        Err(ConsistencyError::PathLength {
            expected: 0,
            found: 1
        })
    ));
    // From the empty tree: refused, whatever the proof.
    let empty = Sha256.empty_root();
    for path in [vec![], vec![root5]] {
        assert!(matches!(
            verify_consistency(&Sha256, 0, 5, &empty, &root5, &path),
            Err(ConsistencyError::EmptyFirstTree)
        ));
    }
    assert!(matches!(
        verify_consistency(&Sha256, 0, 0, &empty, &empty, &[]),
        Err(ConsistencyError::EmptyFirstTree)
    ));
    // Shrinking.
    assert!(matches!(
        verify_consistency(&Sha256, 6, 5, &root6, &root5, &[]),
        Err(ConsistencyError::SizesOutOfOrder {
            first_size: 6,
            second_size: 5
        })
    ));
}

#[test]
fn inclusion_in_the_empty_tree_is_refused() {
    let empty = Sha256.empty_root();
    assert!(matches!(
        verify_inclusion(&Sha256, 0, 0, &empty, &[], &empty),
        Err(InclusionError::IndexOutOfRange {
            leaf_index: 0,
            tree_size: 0
        })
    ));
}

/// A proof states no size of its own: a path can fit a neighbouring size whose tree has the
/// same shape along it. It then leads to the root of its own size, which is why a size is
/// accepted only together with a signed root for it.
#[test]
fn a_path_fits_only_sizes_with_the_same_root() {
    let tree = tree(Sha256);
    let leaf = Sha256.leaf(&leaf_data(1)[0]);
    let path = tree.inclusion_proof(0, 4).unwrap();
    let root4 = tree.root_at(4).unwrap();
    // PATH(0, D[4]) has the shape of a path in a tree of 3 leaves, and still leads to root 4.
    assert_eq!(
        verify_inclusion(&Sha256, 0, 3, &leaf, &path, &root4),
        Ok(())
    );
    assert!(matches!(
        verify_inclusion(&Sha256, 0, 3, &leaf, &path, &tree.root_at(3).unwrap()),
        Err(InclusionError::RootMismatch { .. })
    ));
}
