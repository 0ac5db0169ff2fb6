//! The Merkle tree's perfect subtrees as the index stores them: packed into entries keyed by
//! tree size, found with one seek, and the cache of entries read lately.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use ledger_proof::PerfectNode;

use super::index::{META_MERKLE_SIZE, be_u64, merkle_key, prefix, prefix_end};
use super::{EmbeddedStorage, IndexBatch};
use crate::envelope::Digest;
use crate::storage::StorageError;

/// Leaves whose completed Merkle nodes share one index entry, at most: a bound on the size of
/// an entry (about 2 × 41 bytes a leaf) when the tree is rebuilt in long runs.
pub(super) const MERKLE_ENTRY_LEAVES: u64 = 256;

/// Length of one stored Merkle node: `level u8 | index u64 BE | hash[32]`.
pub(super) const MERKLE_NODE_LEN: usize = 41;

/// The Merkle nodes of a growth of the tree, packed into index entries.
///
/// A perfect subtree `(level, index)` is completed by exactly one leaf, the last it covers:
/// `L = (index + 1)·2^level − 1`. Nodes are stored in entries keyed by a tree size `k`, each
/// holding the nodes completed by leaves below `k` and not in an entry of a smaller key; so
/// node `(level, index)` is in the entry with the smallest key above `L`, found with one range
/// seek. A group commit of n events costs one entry (two when it crosses a multiple of
/// [`MERKLE_ENTRY_LEAVES`]) rather than about 2n.
pub(super) struct MerkleEntries;

impl MerkleEntries {
    /// The leaf that completes node `(level, index)`, if there can be one.
    pub(super) fn completing_leaf(level: u8, index: u64) -> Option<u64> {
        index
            .checked_add(1)?
            .checked_mul(1u64.checked_shl(u32::from(level))?)?
            .checked_sub(1)
    }

    /// `(key, value)` of the entries holding `nodes`, completed by the leaves that grew the
    /// tree to `size`, in the order the leaves completed them.
    pub(super) fn pack(nodes: &[PerfectNode], size: u64) -> Vec<(u64, Vec<u8>)> {
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
    pub(super) fn order(node: &[u8]) -> (u64, u8) {
        let (level, index) = (node[0], be_u64(&node[1..9]));
        (
            Self::completing_leaf(level, index).unwrap_or(u64::MAX),
            level,
        )
    }

    /// The hash of node `(level, index)` in an entry's value, if the entry holds it: a binary
    /// search, the nodes being in completion order.
    pub(super) fn find(
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
    pub(super) fn first_leaf(value: &[u8]) -> Option<u64> {
        let node = value.get(..MERKLE_NODE_LEN)?;
        (node[0] == 0).then(|| be_u64(&node[1..9]))
    }
}

/// Merkle entries read lately, so that the nodes near the root, which every proof needs, and
/// the neighbours of a leaf, which share its entry, are read from sled once: entry key →
/// (first leaf it covers, value). Entries never change once written, so a cached one stays
/// true until the nodes are dropped for a rebuild.
#[derive(Debug, Default)]
pub(super) struct MerkleCache {
    pub(super) entries: BTreeMap<u64, (u64, sled::IVec)>,
}

/// Entries the cache holds at most (a few kilobytes each); when full it starts over.
pub(super) const MERKLE_CACHE_ENTRIES: usize = 1024;

impl MerkleCache {
    /// The cached entry that holds the nodes completed by `leaf`, if any.
    pub(super) fn covering(&self, leaf: u64) -> Option<&sled::IVec> {
        let (_, (first, value)) = self.entries.range(leaf.checked_add(1)?..).next()?;
        (*first <= leaf).then_some(value)
    }

    pub(super) fn keep(&mut self, key: u64, value: sled::IVec) {
        let Some(first) = MerkleEntries::first_leaf(&value) else {
            return;
        };
        if self.entries.len() >= MERKLE_CACHE_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(key, (first, value));
    }
}

impl EmbeddedStorage {
    /// Stores the nodes a growth of the tree to `size` completed.
    pub(super) fn put_stored_merkle_nodes(
        &self,
        nodes: &[PerfectNode],
        size: u64,
    ) -> Result<(), StorageError> {
        // After the queued jobs, which may carry Merkle nodes of their own.
        self.index_caught_up()?;
        let mut batch = IndexBatch::default();
        batch.merkle(nodes, size);
        self.index.tree.apply(batch.entries, Vec::new())
    }

    /// Drops every stored node, for a rebuild of the tree.
    pub(super) fn clear_stored_merkle_nodes(&self) -> Result<(), StorageError> {
        self.index_caught_up()?;
        *self.merkle_cache.lock().unwrap_or_else(|p| p.into_inner()) = MerkleCache::default();
        let mut removes = Vec::new();
        self.index.tree.visit(
            &[prefix::MERKLE],
            &prefix_end(prefix::MERKLE),
            false,
            &mut |key, _| {
                removes.push(key.clone());
                Ok(ControlFlow::Continue(()))
            },
        )?;
        self.index.tree.apply(
            vec![(META_MERKLE_SIZE.into(), (&0u64.to_be_bytes()[..]).into())],
            removes,
        )
    }

    /// The stored hash of perfect subtree `(level, index)`, from the cache or one seek.
    pub(super) fn stored_merkle_node(
        &self,
        level: u8,
        index: u64,
    ) -> Result<Option<Digest>, StorageError> {
        self.index_caught_up()?;
        let Some(leaf) = MerkleEntries::completing_leaf(level, index) else {
            return Ok(None);
        };
        let Some(above) = leaf.checked_add(1) else {
            return Ok(None);
        };
        {
            let cache = self.merkle_cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(value) = cache.covering(leaf) {
                return MerkleEntries::find(value, level, index);
            }
        }
        let entry = self
            .index
            .tree
            .first_in(&merkle_key(above), &merkle_key(u64::MAX), false)?;
        match entry {
            None => Ok(None),
            Some((key, value)) => {
                let found = MerkleEntries::find(&value, level, index);
                self.merkle_cache
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .keep(be_u64(&key[1..]), value);
                found
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ledger_proof::{Frontier, MemoryTree, NodeSource, Sha256};

    use super::*;

    /// Grows a tree in groups of the given sizes, packs each group's nodes as an append does,
    /// and finds every perfect subtree of the final tree the way `merkle_node` does.
    #[test]
    fn every_merkle_node_is_found_in_its_entry() {
        let groups = [1u64, 1, 2, 23, 32, 1, 700, 5, 255, 256, 257, 3];
        let mut frontier = Frontier::new();
        let mut reference = MemoryTree::new(Sha256);
        let mut entries: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        let mut leaf = 0u64;
        for n in groups {
            let mut nodes = Vec::new();
            for _ in 0..n {
                let data = leaf.to_le_bytes();
                frontier
                    .push_into(&Sha256, &data, &mut nodes)
                    .expect("grows");
                reference.push(&data).expect("grows");
                leaf += 1;
            }
            for (key, value) in MerkleEntries::pack(&nodes, frontier.size()) {
                assert!(
                    entries.insert(key, value).is_none(),
                    "entry {key} written twice"
                );
                assert!(key <= frontier.size());
            }
        }
        let mut cache = MerkleCache::default();
        for (key, value) in &entries {
            cache.keep(*key, sled::IVec::from(&value[..]));
        }
        assert_eq!(
            cache.entries.len(),
            entries.len(),
            "every entry starts with a leaf"
        );
        let size = frontier.size();
        for level in 0..12u8 {
            for index in 0..(size >> level) {
                let leaf = MerkleEntries::completing_leaf(level, index).expect("leaf");
                let (_, value) = entries.range(leaf + 1..).next().expect("an entry");
                assert_eq!(
                    cache.covering(leaf).map(|v| &v[..]),
                    Some(&value[..]),
                    "the cache serves leaf {leaf} from the entry sled would"
                );
                let found = MerkleEntries::find(value, level, index).expect("well formed");
                assert_eq!(
                    found,
                    Some(reference.perfect_node(level, index).expect("node")),
                    "node ({level}, {index})"
                );
            }
        }
        assert!(
            entries
                .values()
                .all(|v| v.len() as u64 <= 2 * MERKLE_ENTRY_LEAVES * MERKLE_NODE_LEN as u64),
            "an entry holds the nodes of at most {MERKLE_ENTRY_LEAVES} leaves"
        );
    }
}
