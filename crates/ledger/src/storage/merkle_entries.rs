//! The Merkle tree's perfect subtrees packed into entries keyed by tree size, as both the
//! embedded index (its `m` entries) and the PostgreSQL backend (`ledger_merkle_groups`) store
//! them: how a growth of the tree is packed, and how one node is found in its entry.

use ledger_proof::PerfectNode;

use crate::envelope::Digest;
use crate::storage::StorageError;

/// Leaves whose completed Merkle nodes share one entry, at most: a bound on the size of an
/// entry (about 2 × 41 bytes a leaf) when the tree is rebuilt in long runs.
pub(crate) const MERKLE_ENTRY_LEAVES: u64 = 256;

/// Length of one stored Merkle node: `level u8 | index u64 BE | hash[32]`.
pub(crate) const MERKLE_NODE_LEN: usize = 41;

/// The Merkle nodes of a growth of the tree, packed into entries.
///
/// A perfect subtree `(level, index)` is completed by exactly one leaf, the last it covers:
/// `L = (index + 1)·2^level − 1`. Nodes are stored in entries keyed by a tree size `k`, each
/// holding the nodes completed by leaves below `k` and not in an entry of a smaller key; so
/// node `(level, index)` is in the entry with the smallest key above `L` (at least
/// `(index + 1)·2^level`), found with one range seek. A group commit of n events costs one
/// entry (two when it crosses a multiple of [`MERKLE_ENTRY_LEAVES`]) rather than about 2n.
///
/// The rule holds for entries of several growths that overlap (the PostgreSQL backend's
/// group commits and another node's rebuild of the same leaves), whichever of two entries
/// under a key is kept, as long as every growth starts at 0 or at a stored key, as it does
/// when it starts where a stored growth ended (the PostgreSQL backend, where a growth on
/// another node may start after a clear of the nodes, keeps the longer and reads on past the
/// first entry): an entry keyed K then holds the nodes completed
/// from a stored key P (its growth's previous key) up to K, and for the smallest stored key K
/// at or above a node's end e, P < K gives P < e, so the node's completing leaf e − 1 is in
/// the entry.
pub(crate) struct MerkleEntries;

impl MerkleEntries {
    /// The leaf that completes node `(level, index)`, if there can be one.
    pub(crate) fn completing_leaf(level: u8, index: u64) -> Option<u64> {
        index
            .checked_add(1)?
            .checked_mul(1u64.checked_shl(u32::from(level))?)?
            .checked_sub(1)
    }

    /// `(key, value)` of the entries holding `nodes`, completed by the leaves that grew the
    /// tree to `size`, in the order the leaves completed them.
    pub(crate) fn pack(nodes: &[PerfectNode], size: u64) -> Vec<(u64, Vec<u8>)> {
        let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
        for node in nodes {
            let leaf = Self::completing_leaf(node.level, node.index).unwrap_or(u64::MAX);
            let key = (leaf / MERKLE_ENTRY_LEAVES + 1)
                .saturating_mul(MERKLE_ENTRY_LEAVES)
                .min(size);
            if entries.last().is_none_or(|(k, _)| *k != key) {
                entries.push((key, Vec::with_capacity(2 * MERKLE_NODE_LEN)));
            }
            if let Some((_, value)) = entries.last_mut() {
                value.push(node.level);
                value.extend_from_slice(&node.index.to_be_bytes());
                value.extend_from_slice(&node.hash.0);
            }
        }
        entries
    }

    /// Where a node sorts in an entry: by the leaf that completed it, then by level, which is
    /// the order the frontier reports nodes in.
    pub(crate) fn order(node: &[u8]) -> (u64, u8) {
        let (level, index) = (node[0], be_u64(&node[1..9]));
        (
            Self::completing_leaf(level, index).unwrap_or(u64::MAX),
            level,
        )
    }

    /// The hash of node `(level, index)` in an entry's value, if the entry holds it: a binary
    /// search, the nodes being in completion order.
    pub(crate) fn find(
        value: &[u8],
        level: u8,
        index: u64,
    ) -> Result<Option<Digest>, StorageError> {
        if !value.len().is_multiple_of(MERKLE_NODE_LEN) {
            return Err(StorageError::Index(format!(
                "Merkle entry of {} bytes",
                value.len()
            )));
        }
        let Some(leaf) = Self::completing_leaf(level, index) else {
            return Ok(None);
        };
        let node = |i: usize| &value[i * MERKLE_NODE_LEN..(i + 1) * MERKLE_NODE_LEN];
        let (mut low, mut high) = (0usize, value.len() / MERKLE_NODE_LEN);
        while low < high {
            let mid = low + (high - low) / 2;
            match Self::order(node(mid)).cmp(&(leaf, level)) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => {
                    let found = node(mid);
                    if be_u64(&found[1..9]) != index {
                        return Ok(None);
                    }
                    let mut hash = [0u8; 32];
                    hash.copy_from_slice(&found[9..]);
                    return Ok(Some(Digest(hash)));
                }
            }
        }
        Ok(None)
    }

    /// The first leaf an entry covers: every leaf completes its own level-0 node first, so an
    /// entry starts with the level-0 node of its first leaf.
    pub(crate) fn first_leaf(value: &[u8]) -> Option<u64> {
        let node = value.get(..MERKLE_NODE_LEN)?;
        (node[0] == 0).then(|| be_u64(&node[1..9]))
    }
}

/// The big-endian `u64` at the start of `bytes` (at least 8 bytes long).
pub(crate) fn be_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ledger_proof::{Frontier, MemoryTree, NodeSource, Sha256};
    use proptest::prelude::*;

    use super::*;

    /// A tree of `size` leaves: the nodes each leaf completes, in the order the frontier
    /// reports them (what a growth over that leaf stores), and the tree to check them against.
    fn grown(size: u64) -> (Vec<Vec<PerfectNode>>, MemoryTree<Sha256>) {
        let mut frontier = Frontier::new();
        let mut reference = MemoryTree::new(Sha256);
        let mut by_leaf = Vec::new();
        for leaf in 0..size {
            let data = leaf.to_le_bytes();
            let mut nodes = Vec::new();
            frontier
                .push_into(&Sha256, &data, &mut nodes)
                .expect("grows");
            reference.push(&data).expect("grows");
            by_leaf.push(nodes);
        }
        (by_leaf, reference)
    }

    /// The nodes a growth of the tree from `from` leaves to `to` completes.
    fn growth(by_leaf: &[Vec<PerfectNode>], from: u64, to: u64) -> Vec<PerfectNode> {
        by_leaf[from as usize..to as usize].concat()
    }

    /// Looks node `(level, index)` up as both backends do: the entry with the smallest key at
    /// or above the node's end, `(index + 1)·2^level`.
    fn look_up(entries: &BTreeMap<u64, Vec<u8>>, level: u8, index: u64) -> Option<Digest> {
        let end = MerkleEntries::completing_leaf(level, index)? + 1;
        let (_, value) = entries.range(end..).next()?;
        MerkleEntries::find(value, level, index).expect("well formed")
    }

    /// Every perfect subtree of the first `size` leaves is found, with its hash.
    fn assert_all_found(
        entries: &BTreeMap<u64, Vec<u8>>,
        reference: &MemoryTree<Sha256>,
        size: u64,
    ) {
        for level in 0..=u8::try_from(64 - size.leading_zeros()).expect("a level") {
            for index in 0..(size >> level) {
                assert_eq!(
                    look_up(entries, level, index),
                    Some(reference.perfect_node(level, index).expect("node")),
                    "node ({level}, {index}) of a tree of {size}"
                );
            }
        }
    }

    /// The bytes of an entry are the embedded index's on-disk format (and the rows of
    /// `ledger_merkle_groups`): `level | index (8, big-endian) | hash (32)` a node, in the order
    /// given, keyed by the size the growth reached or the next multiple of 256 leaves.
    #[test]
    fn the_packed_bytes_and_keys_are_the_stored_format() {
        let node = |level: u8, index: u64, fill: u8| PerfectNode {
            level,
            index,
            hash: Digest([fill; 32]),
        };
        // Leaf 255 completes (0, 255) … (8, 0); leaf 256 completes (0, 256).
        let nodes = [node(0, 255, 0xaa), node(8, 0, 0xbb), node(0, 256, 0xcc)];
        let entries = MerkleEntries::pack(&nodes, 257);
        let keys: Vec<u64> = entries.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, [256, 257]);
        let mut first = vec![0u8, 0, 0, 0, 0, 0, 0, 0, 0xff];
        first.extend([0xaa; 32]);
        first.extend([8u8, 0, 0, 0, 0, 0, 0, 0, 0]);
        first.extend([0xbb; 32]);
        assert_eq!(entries[0].1, first);
        let mut second = vec![0u8, 0, 0, 0, 0, 0, 0, 1, 0];
        second.extend([0xcc; 32]);
        assert_eq!(entries[1].1, second);
        assert_eq!(MerkleEntries::first_leaf(&entries[0].1), Some(255));
        assert_eq!(MerkleEntries::first_leaf(&entries[1].1), Some(256));
    }

    #[test]
    fn a_group_of_one_leaf_is_one_entry_keyed_by_the_size_it_reached() {
        let (by_leaf, reference) = grown(256);
        // Leaf 255 completes nine nodes, (0, 255) up to the root of 256 leaves.
        let nodes = growth(&by_leaf, 255, 256);
        assert_eq!(nodes.len(), 9);
        let entries = MerkleEntries::pack(&nodes, 256);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, 256);
        assert_eq!(entries[0].1.len(), 9 * MERKLE_NODE_LEN);
        for level in 0..=8u8 {
            let index = 255 >> level;
            assert_eq!(
                MerkleEntries::find(&entries[0].1, level, index).expect("well formed"),
                Some(reference.perfect_node(level, index).expect("node"))
            );
        }
        // A leaf in the middle of a run of 256: keyed by the size it brings the tree to.
        let (by_leaf, _) = grown(42);
        let entries = MerkleEntries::pack(&growth(&by_leaf, 41, 42), 42);
        assert_eq!(entries.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [42]);
    }

    #[test]
    fn a_group_crossing_a_multiple_of_256_leaves_is_split_there() {
        let size = 300;
        let (by_leaf, reference) = grown(size + 300);
        let mut entries = BTreeMap::new();
        for (from, to) in [(0, 250), (250, size), (size, 2 * size)] {
            for (key, value) in MerkleEntries::pack(&growth(&by_leaf, from, to), to) {
                assert!(entries.insert(key, value).is_none(), "entry {key} twice");
            }
        }
        let keys: Vec<u64> = entries.keys().copied().collect();
        assert_eq!(keys, [250, 256, 300, 512, 600]);
        let firsts: Vec<Option<u64>> = entries
            .values()
            .map(|v| MerkleEntries::first_leaf(v))
            .collect();
        assert_eq!(
            firsts,
            [Some(0), Some(250), Some(256), Some(300), Some(512)]
        );
        // The root of 256 leaves is completed by leaf 255, so it is in the entry keyed 256.
        assert_eq!(
            MerkleEntries::find(&entries[&256], 8, 0).expect("well formed"),
            Some(reference.perfect_node(8, 0).expect("node"))
        );
        assert_all_found(&entries, &reference, 2 * size);
    }

    /// The encoding of one node, as `pack` writes it.
    fn encoded(node: &PerfectNode) -> Vec<u8> {
        let mut bytes = vec![node.level];
        bytes.extend_from_slice(&node.index.to_be_bytes());
        bytes.extend_from_slice(&node.hash.0);
        bytes
    }

    /// Entries keyed each by the one end its nodes share (`(index + 1)·2^level`), nodes by
    /// level — the shape PostgreSQL's schema migration 4 gives the nodes it moves — followed by
    /// entries packed as appends pack them, are all found by the one lookup rule.
    #[test]
    fn nodes_keyed_by_their_end_and_then_packed_by_groups_are_all_found() {
        let groups = [
            (true, 300u64),
            (false, 1),
            (false, 37),
            (false, 256),
            (false, 9),
        ];
        let size = groups.iter().map(|(_, n)| n).sum();
        let (by_leaf, reference) = grown(size);
        let mut entries: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut from = 0;
        for (moved, n) in groups {
            let to = from + n;
            let nodes = growth(&by_leaf, from, to);
            if moved {
                for node in &nodes {
                    let end =
                        MerkleEntries::completing_leaf(node.level, node.index).expect("a leaf") + 1;
                    entries.entry(end).or_default().extend(encoded(node));
                }
            } else {
                for (key, value) in MerkleEntries::pack(&nodes, to) {
                    assert!(entries.insert(key, value).is_none(), "entry {key} twice");
                }
            }
            from = to;
        }
        assert_all_found(&entries, &reference, size);
    }

    #[test]
    fn an_entry_of_a_length_no_node_has_is_an_error_and_an_absent_node_is_none() {
        let node = PerfectNode {
            level: 1,
            index: 3,
            hash: Digest([7; 32]),
        };
        let value = encoded(&node);
        assert_eq!(
            MerkleEntries::find(&value, 1, 3).expect("well formed"),
            Some(Digest([7; 32]))
        );
        assert_eq!(
            MerkleEntries::find(&value, 0, 7).expect("well formed"),
            None
        );
        assert_eq!(
            MerkleEntries::find(&value, 2, 1).expect("well formed"),
            None
        );
        assert!(MerkleEntries::find(&value[..40], 1, 3).is_err());
        assert_eq!(MerkleEntries::find(&[], 1, 3).expect("empty"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// A tree grown in groups of any sizes, each packed as an append packs it: every
        /// perfect subtree is found, with its hash, and no entry holds more than 256 leaves.
        #[test]
        fn every_node_is_found_whatever_the_groups(
            groups in prop::collection::vec(1u64..400, 1..12),
        ) {
            let size: u64 = groups.iter().sum();
            let (by_leaf, reference) = grown(size);
            let mut entries = BTreeMap::new();
            let mut from = 0;
            for n in groups {
                for (key, value) in MerkleEntries::pack(&growth(&by_leaf, from, from + n), from + n) {
                    let first = MerkleEntries::first_leaf(&value).expect("starts with a leaf");
                    prop_assert!(key - first <= MERKLE_ENTRY_LEAVES);
                    prop_assert!(entries.insert(key, value).is_none(), "entry {} twice", key);
                }
                from += n;
            }
            assert_all_found(&entries, &reference, size);
        }

        /// Entries written by several growths that overlap — a writer's group commits, and
        /// another node rebuilding the same leaves from where the stored tree ended — where an
        /// entry already stored under a key is kept and the later one dropped (`ON CONFLICT DO
        /// NOTHING`): every node is still found by the one rule.
        ///
        /// Why: an entry keyed K written by a growth holds every node completed by the leaves
        /// from the growth's previous key (its own previous entry's key, or the size the
        /// growth started from) up to K. That previous key P is itself a stored key, or 0: a
        /// growth starts where a stored growth ended, whose last entry is keyed by the size
        /// it reached, and an entry dropped on a conflict leaves the one already under its
        /// key. For a node ending at e, let K be the smallest stored key >= e; P < K is a
        /// stored key or 0, so P < e, and the node's completing leaf e - 1 lies in [P, K):
        /// the entry K holds it. Entries of other growths keyed between P and K cannot
        /// exist, K being the smallest at or above e, and those below e do not matter.
        #[test]
        fn every_node_is_found_when_growths_overlap(
            growths in prop::collection::vec((any::<prop::sample::Index>(), 1u64..600), 1..10),
        ) {
            let limit = 2000u64;
            let (by_leaf, reference) = grown(limit);
            let mut entries: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            let mut size = 0u64;
            for (start, n) in growths {
                // From 0 or a stored key, as a growth starts where a stored tree ended.
                let starts: Vec<u64> = std::iter::once(0).chain(entries.keys().copied()).collect();
                let from = starts[start.index(starts.len())];
                let to = (from + n).min(limit);
                if to <= from {
                    continue;
                }
                for (key, value) in MerkleEntries::pack(&growth(&by_leaf, from, to), to) {
                    entries.entry(key).or_insert(value);
                }
                size = size.max(to);
            }
            assert_all_found(&entries, &reference, size);
        }
    }
}
