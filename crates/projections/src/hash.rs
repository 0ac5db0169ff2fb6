//! Deterministic hashes of task states and of the whole projection.
//!
//! Two projections that folded the same events hold states with the same canonical bytes, so
//! their hashes agree; a rebuild from the ledger can be compared with the live projection, and a
//! snapshot can be checked against the hash it was written with. Each hash is domain-separated so
//! it can never be mistaken for an event hash or a Merkle node.

use research::{Hash32, TaskState};
use serde::{Deserialize, Serialize};

const TASK_DOMAIN: &[u8] = b"research-ledger/projections/task-state/v1";
const PROJECTION_DOMAIN: &[u8] = b"research-ledger/projections/projection/v1";

/// `blake3("research-ledger/projections/task-state/v1" ‖ canonical bytes of the state)`.
pub fn state_hash(state: &TaskState) -> Hash32 {
    bytes_hash(&state.canonical_bytes())
}

/// The hash of a state already encoded canonically.
pub(crate) fn bytes_hash(canonical: &[u8]) -> Hash32 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(TASK_DOMAIN);
    hasher.update(canonical);
    Hash32(*hasher.finalize().as_bytes())
}

/// The hash of a whole projection at one point of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectionHash {
    /// The seq of the next event to fold: the projection covers every event before it.
    pub next_seq: u64,
    /// How many tasks it holds.
    pub tasks: u64,
    /// `blake3(domain ‖ next_seq ‖ for each task in id order: len ‖ id ‖ state hash)`.
    pub hash: Hash32,
}

/// Accumulates task hashes, in task id order, into a [`ProjectionHash`].
pub(crate) struct ProjectionHasher {
    hasher: blake3::Hasher,
    next_seq: u64,
    tasks: u64,
}

impl ProjectionHasher {
    pub(crate) fn new(next_seq: u64) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(PROJECTION_DOMAIN);
        hasher.update(&next_seq.to_be_bytes());
        ProjectionHasher {
            hasher,
            next_seq,
            tasks: 0,
        }
    }

    /// Adds one task; callers add tasks in ascending id order.
    pub(crate) fn add(&mut self, task_id: &str, hash: &Hash32) {
        // The length prefix keeps ("ab", "c…") and ("a", "bc…") apart.
        self.hasher.update(&(task_id.len() as u64).to_be_bytes());
        self.hasher.update(task_id.as_bytes());
        self.hasher.update(&hash.0);
        self.tasks += 1;
    }

    pub(crate) fn finish(self) -> ProjectionHash {
        ProjectionHash {
            next_seq: self.next_seq,
            tasks: self.tasks,
            hash: Hash32(*self.hasher.finalize().as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_state_has_a_fixed_hash_apart_from_a_plain_blake3() {
        let empty = TaskState::new();
        assert_eq!(state_hash(&empty), state_hash(&TaskState::new()));
        let plain = blake3::hash(&empty.canonical_bytes());
        assert_ne!(state_hash(&empty).0, *plain.as_bytes());
    }

    #[test]
    fn the_projection_hash_depends_on_ids_order_and_position() {
        let h = Hash32([7; 32]);
        let hash_of = |next_seq: u64, tasks: &[&str]| {
            let mut p = ProjectionHasher::new(next_seq);
            for t in tasks {
                p.add(t, &h);
            }
            p.finish()
        };
        assert_eq!(hash_of(3, &["a", "b"]), hash_of(3, &["a", "b"]));
        assert_ne!(hash_of(3, &["a", "b"]).hash, hash_of(4, &["a", "b"]).hash);
        assert_ne!(hash_of(3, &["a", "b"]).hash, hash_of(3, &["ab"]).hash);
        assert_ne!(hash_of(3, &["a", "b"]).hash, hash_of(3, &["b", "a"]).hash);
        assert_eq!(hash_of(3, &["a", "b"]).tasks, 2);
    }
}
