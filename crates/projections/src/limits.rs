//! Bounds on what one query may ask for and on the work the projector does at a time, each named
//! with its unit last.
//!
//! Page sizes bound the memory and time of one answer; batch sizes bound how long the projector
//! holds its write lock, so readers are never stalled behind a long catch-up.

use serde::{Deserialize, Serialize};

/// The smallest `snapshot_cache_bytes_max` the snapshot database (sled) works with. A smaller
/// value is raised to it.
pub const SNAPSHOT_CACHE_BYTES_MIN: u64 = 256;

/// The most events `feed_buffer_events` may buffer: the buffer is allocated whole when the
/// projector starts, so a larger value would be memory taken at once. A larger value is lowered
/// to it.
pub const FEED_BUFFER_EVENTS_MAX: usize = 1 << 20;

/// The projector's limits. `Limits::default()` holds the product's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Tasks in one page of the index when the caller names no limit.
    pub page_tasks_default: usize,
    /// Most tasks in one page of the index.
    pub page_tasks_max: usize,
    /// Events in one page of an audit trail when the caller names no limit.
    pub page_events_default: usize,
    /// Most events in one page of an audit trail.
    pub page_events_max: usize,
    /// Longest text filter of the index (characters).
    pub text_filter_chars_max: usize,
    /// Most nodes in one why-graph. A conclusion's evidence is bounded by the research limits;
    /// human decisions and superseded adjudications are not, so the graph is bounded here.
    pub why_graph_nodes_max: usize,
    /// Events read from the ledger and folded under one hold of the write lock.
    pub catch_up_batch_events: usize,
    /// Take a snapshot when this many events were applied since the last one (while following
    /// or catching up); 0 never snapshots on its own.
    pub snapshot_every_events: u64,
    /// Snapshots kept per task; the oldest go first. More of them make time travel to old
    /// versions cheaper, at the cost of disk.
    pub snapshots_per_task_max: usize,
    /// Memory the snapshot database may use to cache pages. Snapshots are written far more
    /// often than read, so a small cache costs little; sled's own default is 1 GiB. At least
    /// [`SNAPSHOT_CACHE_BYTES_MIN`].
    pub snapshot_cache_bytes_max: u64,
    /// Task states held in memory, the least recently used going first; every task keeps
    /// only its index entry besides. A state not held is loaded from its newest snapshot and
    /// the ledger when it is next read or written, so this bounds memory, not what is served.
    pub task_states_cached_max: usize,
    /// Folded events buffered for subscribers of the feed; one that falls further behind
    /// reads what it missed from the ledger. At most [`FEED_BUFFER_EVENTS_MAX`].
    pub feed_buffer_events: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            page_tasks_default: 20,
            page_tasks_max: 100,
            page_events_default: 100,
            page_events_max: 500,
            text_filter_chars_max: 200,
            why_graph_nodes_max: 2_000,
            catch_up_batch_events: 512,
            snapshot_every_events: 10_000,
            snapshots_per_task_max: 4,
            snapshot_cache_bytes_max: 16 * 1024 * 1024,
            task_states_cached_max: 2_048,
            feed_buffer_events: 4_096,
        }
    }
}
