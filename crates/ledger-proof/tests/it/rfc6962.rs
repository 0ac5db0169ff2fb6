//! The published RFC 6962 test vectors, checked with the SHA-256 hasher.
//!
//! Source: the certificate-transparency reference test data for an eight-leaf tree, as published
//! in transparency-dev/merkle, `proof/verify_test.go` (variables `leaves`, `roots`,
//! `inclusionProofs`, `consistencyProofs`), which carries them over from the certificate
//! transparency project's `merkle_tree_test`. Leaf numbers there are 1-based; here they are
//! converted to 0-based leaf indices.

use ledger_proof::{
    Digest, Frontier, MemoryTree, MerkleHasher, verify_consistency, verify_inclusion,
};

use crate::common::Naive;
use ledger_proof::Sha256;

/// The eight leaf inputs.
const LEAVES: [&str; 8] = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
];

/// The roots of the trees of the first 1, 2, …, 8 leaves.
const ROOTS: [&str; 8] = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

/// SHA-256 of the empty string: the root of the empty tree.
const EMPTY_ROOT: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// (0-based leaf index, tree size, audit path).
const INCLUSION: [(u64, u64, &[&str]); 5] = [
    (0, 1, &[]),
    (
        0,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        &[
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        3,
        &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
    ),
    (
        1,
        5,
        &[
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
];

/// (first size, second size, consistency proof).
const CONSISTENCY: [(u64, u64, &[&str]); 5] = [
    (1, 1, &[]),
    (
        1,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        &[
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
];

fn d(text: &str) -> Digest {
    text.parse().unwrap()
}

fn path(texts: &[&str]) -> Vec<Digest> {
    texts.iter().map(|t| d(t)).collect()
}

fn leaves() -> Vec<Vec<u8>> {
    LEAVES.iter().map(|l| hex::decode(l).unwrap()).collect()
}

fn vector_tree() -> MemoryTree<Sha256> {
    let mut tree = MemoryTree::new(Sha256);
    for leaf in leaves() {
        tree.push(&leaf).unwrap();
    }
    tree
}

#[test]
fn empty_tree_root_is_the_hash_of_nothing() {
    assert_eq!(Sha256.empty_root(), d(EMPTY_ROOT));
    assert_eq!(vector_tree().root_at(0).unwrap(), d(EMPTY_ROOT));
    assert_eq!(Frontier::new().root(&Sha256), d(EMPTY_ROOT));
}

#[test]
fn roots_of_every_size_match_the_vectors() {
    let tree = vector_tree();
    let naive = Naive::new(Sha256, leaves());
    let mut frontier = Frontier::new();
    for (size, expected) in (1u64..).zip(ROOTS) {
        frontier
            .push(&Sha256, &leaves()[size as usize - 1])
            .unwrap();
        assert_eq!(
            tree.root_at(size).unwrap(),
            d(expected),
            "stored nodes, size {size}"
        );
        assert_eq!(frontier.root(&Sha256), d(expected), "frontier, size {size}");
        assert_eq!(
            naive.mth(0, size as usize),
            d(expected),
            "naive, size {size}"
        );
    }
}

#[test]
fn every_inclusion_vector_is_generated_and_verifies() {
    let tree = vector_tree();
    let all = leaves();
    for (index, size, expected) in INCLUSION {
        let expected = path(expected);
        assert_eq!(
            tree.inclusion_proof(index, size).unwrap(),
            expected,
            "PATH({index}, D[{size}])"
        );
        let leaf_hash = Sha256.leaf(&all[index as usize]);
        let root = d(ROOTS[size as usize - 1]);
        assert_eq!(
            verify_inclusion(&Sha256, index, size, &leaf_hash, &expected, &root),
            Ok(())
        );
    }
}

#[test]
fn every_consistency_vector_is_generated_and_verifies() {
    let tree = vector_tree();
    for (first, second, expected) in CONSISTENCY {
        let expected = path(expected);
        assert_eq!(
            tree.consistency_proof(first, second).unwrap(),
            expected,
            "PROOF({first}, D[{second}])"
        );
        let first_root = d(ROOTS[first as usize - 1]);
        let second_root = d(ROOTS[second as usize - 1]);
        assert_eq!(
            verify_consistency(&Sha256, first, second, &first_root, &second_root, &expected),
            Ok(())
        );
    }
}
