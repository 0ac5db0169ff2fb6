//! The frontier that appends leaves: its root and the nodes it reports, against the reference.

use ledger_proof::{
    Frontier, FrontierError, MemoryTree, MerkleHasher, NodeSource, PerfectNode, Sha256,
};

use crate::common::{Blake3, Naive, leaf_data};

const SIZE_MAX: usize = 300;

fn frontier_matches_reference<H: MerkleHasher + Copy>(hasher: H) {
    let leaves = leaf_data(SIZE_MAX);
    let naive = Naive::new(hasher, leaves.clone());
    let mut frontier = Frontier::new();
    let mut stored = MemoryTree::new(hasher);
    assert_eq!(frontier.root(&hasher), hasher.empty_root());
    for (i, leaf) in leaves.iter().enumerate() {
        let completed = frontier.push(&hasher, leaf).unwrap();
        stored.push(leaf).unwrap();
        let size = i + 1;

        // The perfect subtrees that end exactly at the new leaf, lowest first.
        let mut expected = Vec::new();
        for level in 0..64u8 {
            let width = 1usize << level;
            if size % width != 0 {
                break;
            }
            let index = size / width - 1;
            expected.push(PerfectNode {
                level,
                index: index as u64,
                hash: naive.mth(index * width, size),
            });
        }
        assert_eq!(completed, expected, "nodes completed by leaf {i}");
        assert_eq!(frontier.size(), size as u64);
        assert_eq!(
            frontier.root(&hasher),
            naive.mth(0, size),
            "root of size {size}"
        );

        // Every node the frontier reported is what the store serves, and the frontier can be
        // rebuilt from the store alone.
        for node in &completed {
            assert_eq!(stored.perfect_node(node.level, node.index), Ok(node.hash));
        }
        assert_eq!(Frontier::load(&stored, size as u64).unwrap(), frontier);
        for peak in frontier.peaks() {
            let width = 1usize << peak.level;
            let begin = peak.index as usize * width;
            assert_eq!(peak.hash, naive.mth(begin, begin + width));
        }
    }
}

#[test]
fn sha256_frontier_matches_reference_at_every_size() {
    frontier_matches_reference(Blake3);
}

#[test]
fn blake3_frontier_matches_reference_at_every_size() {
    frontier_matches_reference(Sha256);
}

#[test]
fn peaks_follow_the_bits_of_the_size() {
    let mut frontier = Frontier::new();
    for leaf in leaf_data(13) {
        frontier.push(&Sha256, &leaf).unwrap();
    }
    let shape: Vec<(u8, u64)> = frontier
        .peaks()
        .iter()
        .map(|p| (p.level, p.index))
        .collect();
    // 13 = 8 + 4 + 1: leaves [0, 8), [8, 12) and [12, 13).
    assert_eq!(shape, vec![(3, 0), (2, 2), (0, 12)]);
}

/// Serves the same hash for every node, so a frontier of any size can be loaded.
struct Anything;

impl NodeSource for Anything {
    type Error = std::convert::Infallible;

    fn perfect_node(&self, _level: u8, _index: u64) -> Result<ledger_proof::Digest, Self::Error> {
        Ok(Sha256.leaf(b"anything"))
    }
}

#[test]
fn a_full_tree_refuses_another_leaf() {
    let mut frontier = Frontier::load(&Anything, u64::MAX - 1).unwrap();
    let completed = frontier.push(&Sha256, b"last").unwrap();
    // u64::MAX - 1 is even: the last leaf completes only itself.
    assert_eq!(completed.len(), 1);
    assert_eq!(frontier.size(), u64::MAX);
    assert_eq!(frontier.peaks().len(), 64);
    assert_eq!(
        frontier.push(&Sha256, b"one too many"),
        Err(FrontierError::Full)
    );
    assert_eq!(frontier.size(), u64::MAX);
}

#[test]
fn the_longest_carry_completes_sixty_three_levels() {
    let mut frontier = Frontier::load(&Anything, (1 << 63) - 1).unwrap();
    let completed = frontier.push(&Sha256, b"carry").unwrap();
    assert_eq!(completed.len(), 64);
    assert_eq!(completed.last().map(|n| (n.level, n.index)), Some((63, 0)));
    assert_eq!(frontier.peaks().len(), 1);
}

#[test]
fn pushing_into_a_buffer_reports_what_push_returns() {
    let mut one = Frontier::new();
    let mut other = Frontier::new();
    let mut gathered = Vec::new();
    let mut expected = Vec::new();
    for leaf in leaf_data(37) {
        expected.extend(one.push(&Sha256, &leaf).unwrap());
        other.push_into(&Sha256, &leaf, &mut gathered).unwrap();
    }
    assert_eq!(gathered, expected);
    assert_eq!(other, one);
    let mut full = Frontier::load(&Anything, u64::MAX).unwrap();
    let mut nothing = Vec::new();
    assert_eq!(
        full.push_into(&Sha256, b"one too many", &mut nothing),
        Err(FrontierError::Full)
    );
    assert!(nothing.is_empty(), "a refused leaf reports no node");
}
