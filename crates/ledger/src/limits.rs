//! Limits on everything the ledger accepts, each named with its unit last.
//!
//! Every limit exists so that one caller cannot make the ledger use unbounded memory or disk in
//! one call; each refusal names the limit it hit.

use serde::{Deserialize, Serialize};

use crate::storage::frame::SEGMENT_HEADER_LEN;

/// The smallest `segment_bytes_max` a log works with: a segment's header and room for its
/// frames. A smaller value is raised to it.
pub const SEGMENT_BYTES_MIN: u64 = SEGMENT_HEADER_LEN + 1024;

/// The most events `subscription_buffer_events` may buffer: the buffer is allocated whole when
/// the ledger opens, so a larger value would be memory taken at once. A larger value is lowered
/// to it.
pub const SUBSCRIPTION_BUFFER_EVENTS_MAX: usize = 1 << 20;

/// The most appends `append_queue_max` may let wait: the queue counts its room in a semaphore
/// that counts no further. A larger value is lowered to it.
pub const APPEND_QUEUE_MAX: usize = usize::MAX >> 3;

/// The limits the ledger enforces. `Limits::default()` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Largest stored event (envelope, payload and hash). 64 KiB keeps every event well below
    /// the size at which sled would move a value into a blob file of its own.
    pub event_bytes_max: usize,
    /// Most events in one append.
    pub batch_events_max: usize,
    /// Most stored bytes in one append.
    pub batch_bytes_max: usize,
    /// Largest content blob an append may carry (the full text an event cites).
    pub blob_bytes_max: usize,
    /// Most content bytes in one append.
    pub batch_content_bytes_max: usize,
    /// Longest stream id.
    pub stream_id_bytes_max: usize,
    /// Longest event kind.
    pub kind_bytes_max: usize,
    /// Longest actor name.
    pub actor_bytes_max: usize,
    /// Most causation links on one event.
    pub causation_links_max: usize,
    /// Longest idempotency key.
    pub idempotency_key_bytes_max: usize,
    /// Most events written by one group commit (one sync).
    pub group_events_max: usize,
    /// Most bytes written by one group commit (one sync), content blobs included.
    pub group_bytes_max: usize,
    /// Most appends waiting for the writer; beyond it `append` waits for room. At most
    /// [`APPEND_QUEUE_MAX`].
    pub append_queue_max: usize,
    /// Events buffered for live subscribers; a subscriber that falls further behind catches
    /// up from storage. At most [`SUBSCRIPTION_BUFFER_EVENTS_MAX`].
    pub subscription_buffer_events: usize,
    /// Most events returned by one read.
    pub read_events_max: usize,
    /// Size at which the log starts a new segment file; at least [`SEGMENT_BYTES_MIN`].
    pub segment_bytes_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            event_bytes_max: 64 * 1024,
            batch_events_max: 1024,
            batch_bytes_max: 4 * 1024 * 1024,
            blob_bytes_max: 1024 * 1024,
            batch_content_bytes_max: 128 * 1024 * 1024,
            stream_id_bytes_max: 128,
            kind_bytes_max: 64,
            actor_bytes_max: 256,
            causation_links_max: 256,
            idempotency_key_bytes_max: 256,
            group_events_max: 8192,
            group_bytes_max: 16 * 1024 * 1024,
            append_queue_max: 4096,
            subscription_buffer_events: 4096,
            read_events_max: 10_000,
            segment_bytes_max: 256 * 1024 * 1024,
        }
    }
}
