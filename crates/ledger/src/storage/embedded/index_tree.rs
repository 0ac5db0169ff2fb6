//! The ordered map the index lives in: sled's tree on disk, or a map in memory.
//!
//! A ledger opened to be written keeps its index in sled, where it survives a restart. A ledger
//! opened read-only (an audit of a backup, a read-only copy) or one that refuses writes because
//! its log holds less than a durable record says, keeps it in memory instead, built by a scan of
//! the log: such an open must not change a byte of the data directory, and sled writes to its
//! files as soon as it opens them.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use sled::IVec;

use crate::storage::StorageError;

fn index_err(e: sled::Error) -> StorageError {
    StorageError::Index(e.to_string())
}

/// What [`IndexTree::visit`] calls for each entry: `Break` to stop.
pub(super) type Visitor<'a> = dyn FnMut(&IVec, &IVec) -> Result<ControlFlow<()>, StorageError> + 'a;

/// An ordered map of byte strings, on disk or in memory.
#[derive(Debug)]
pub(super) enum IndexTree {
    /// sled's tree, and how many entries were written to it since it was opened.
    Sled {
        /// The tree.
        tree: sled::Tree,
        /// Entries inserted or removed since the tree was opened: what the next open of the
        /// database replays, unless it is settled first (see `Index::settle`).
        written: AtomicU64,
        /// Set by a test: every later batch fails, as sled's would on a failing disk.
        #[cfg(test)]
        refuse_batches: std::sync::atomic::AtomicBool,
    },
    /// A map kept only as long as the process runs.
    Memory(RwLock<BTreeMap<IVec, IVec>>),
}

impl IndexTree {
    /// An empty map in memory.
    pub(super) fn memory() -> IndexTree {
        IndexTree::Memory(RwLock::new(BTreeMap::new()))
    }

    /// sled's tree `tree`, nothing written to it yet.
    pub(super) fn sled(tree: sled::Tree) -> IndexTree {
        IndexTree::Sled {
            tree,
            written: AtomicU64::new(0),
            #[cfg(test)]
            refuse_batches: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes every later batch written to sled fail, as a failing disk would.
    #[cfg(test)]
    pub(super) fn refuse_batches(&self) {
        if let IndexTree::Sled { refuse_batches, .. } = self {
            refuse_batches.store(true, Ordering::SeqCst);
        }
    }

    /// The failure a test asked sled's batches to have, if it did.
    #[cfg(test)]
    fn injected_failure(&self) -> Result<(), StorageError> {
        match self {
            IndexTree::Sled { refuse_batches, .. } if refuse_batches.load(Ordering::SeqCst) => Err(
                StorageError::Index("sled refused the batch: injected fault".into()),
            ),
            _ => Ok(()),
        }
    }

    #[cfg(not(test))]
    fn injected_failure(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// Entries written to sled since the tree was opened (none in memory).
    pub(super) fn written(&self) -> u64 {
        match self {
            IndexTree::Sled { written, .. } => written.load(Ordering::Relaxed),
            IndexTree::Memory(_) => 0,
        }
    }

    /// True when nothing of the map reaches the disk.
    pub(super) fn is_memory(&self) -> bool {
        matches!(self, IndexTree::Memory(_))
    }

    fn map(&self) -> Option<std::sync::RwLockReadGuard<'_, BTreeMap<IVec, IVec>>> {
        match self {
            IndexTree::Memory(map) => Some(map.read().unwrap_or_else(|p| p.into_inner())),
            IndexTree::Sled { .. } => None,
        }
    }

    pub(super) fn get(&self, key: &[u8]) -> Result<Option<IVec>, StorageError> {
        match self {
            IndexTree::Sled { tree, .. } => tree.get(key).map_err(index_err),
            IndexTree::Memory(_) => Ok(self.map().and_then(|m| m.get(key).cloned())),
        }
    }

    /// Calls `visit` with each entry whose key is in `low..=high`, in key order (or reversed),
    /// until it answers `Break`.
    pub(super) fn visit(
        &self,
        low: &[u8],
        high: &[u8],
        reversed: bool,
        visit: &mut Visitor<'_>,
    ) -> Result<(), StorageError> {
        match self {
            IndexTree::Sled { tree, .. } => {
                let range = tree.range(low..=high);
                let mut step = |entry: sled::Result<(IVec, IVec)>| -> Result<bool, StorageError> {
                    let (key, value) = entry.map_err(index_err)?;
                    Ok(visit(&key, &value)?.is_break())
                };
                if reversed {
                    for entry in range.rev() {
                        if step(entry)? {
                            break;
                        }
                    }
                } else {
                    for entry in range {
                        if step(entry)? {
                            break;
                        }
                    }
                }
                Ok(())
            }
            IndexTree::Memory(_) => {
                let Some(map) = self.map() else {
                    return Ok(());
                };
                let range = map.range::<[u8], _>((Bound::Included(low), Bound::Included(high)));
                if reversed {
                    for (key, value) in range.rev() {
                        if visit(key, value)?.is_break() {
                            break;
                        }
                    }
                } else {
                    for (key, value) in range {
                        if visit(key, value)?.is_break() {
                            break;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// The first entry (or the last, `reversed`) whose key is in `low..=high`.
    pub(super) fn first_in(
        &self,
        low: &[u8],
        high: &[u8],
        reversed: bool,
    ) -> Result<Option<(IVec, IVec)>, StorageError> {
        let mut found = None;
        self.visit(low, high, reversed, &mut |key, value| {
            found = Some((key.clone(), value.clone()));
            Ok(ControlFlow::Break(()))
        })?;
        Ok(found)
    }

    /// Writes `inserts`, then removes `removes`, atomically.
    pub(super) fn apply(
        &self,
        inserts: Vec<(IVec, IVec)>,
        removes: Vec<IVec>,
    ) -> Result<(), StorageError> {
        match self {
            IndexTree::Sled { tree, written, .. } => {
                self.injected_failure()?;
                let count = (inserts.len() + removes.len()) as u64;
                let mut batch = sled::Batch::default();
                for (key, value) in inserts {
                    batch.insert(key, value);
                }
                for key in removes {
                    batch.remove(key);
                }
                tree.apply_batch(batch).map_err(index_err)?;
                written.fetch_add(count, Ordering::Relaxed);
                Ok(())
            }
            IndexTree::Memory(map) => {
                let mut map = map.write().unwrap_or_else(|p| p.into_inner());
                for (key, value) in inserts {
                    map.insert(key, value);
                }
                for key in removes {
                    map.remove(&key);
                }
                Ok(())
            }
        }
    }

    /// Removes every entry.
    pub(super) fn clear(&self) -> Result<(), StorageError> {
        match self {
            IndexTree::Sled { tree, .. } => tree.clear().map_err(index_err),
            IndexTree::Memory(map) => {
                map.write().unwrap_or_else(|p| p.into_inner()).clear();
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tree: &IndexTree) {
        let entries: Vec<(IVec, IVec)> = [b"a1", b"a2", b"b1", b"b3"]
            .iter()
            .map(|k| (IVec::from(&k[..]), IVec::from(&k[1..])))
            .collect();
        tree.apply(entries, vec![IVec::from(&b"b1"[..])]).unwrap();
        assert_eq!(tree.get(b"a2").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(tree.get(b"b1").unwrap(), None);
        let mut seen = Vec::new();
        tree.visit(b"a", b"b9", true, &mut |k, _| {
            seen.push(k.to_vec());
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
        assert_eq!(seen, vec![b"b3".to_vec(), b"a2".to_vec(), b"a1".to_vec()]);
        let first = tree.first_in(b"a2", b"b9", false).unwrap().unwrap();
        assert_eq!(&*first.0, b"a2");
        let last = tree.first_in(b"a0", b"a9", true).unwrap().unwrap();
        assert_eq!(&*last.0, b"a2");
        tree.clear().unwrap();
        assert_eq!(tree.first_in(b"", b"zz", false).unwrap(), None);
    }

    #[test]
    fn memory_and_sled_maps_answer_alike() {
        check(&IndexTree::memory());
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        check(&IndexTree::sled(db.open_tree("t").unwrap()));
    }
}
