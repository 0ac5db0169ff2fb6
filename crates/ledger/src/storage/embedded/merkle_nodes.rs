//! The Merkle tree's perfect subtrees as the index stores them: packed into entries keyed by
//! tree size ([`MerkleEntries`]), found with one seek, and the cache of entries read lately.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use ledger_proof::PerfectNode;

use super::index::{META_MERKLE_SIZE, be_u64, merkle_key, prefix, prefix_end};
use super::{EmbeddedStorage, IndexBatch};
use crate::envelope::Digest;
use crate::storage::StorageError;
use crate::storage::merkle_entries::MerkleEntries;

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
    use crate::storage::merkle_entries::{MERKLE_ENTRY_LEAVES, MERKLE_NODE_LEN};

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
