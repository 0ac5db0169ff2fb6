//! A stream of updates for subscribers: one per event appended, in order, each sent only once
//! the read models have folded it — the one mechanism behind MCP resource subscriptions and
//! GraphQL subscriptions alike, so a subscriber that reads what it was told of sees the change.

use ledger::Digest;
use projections::{Feed, FeedError};
use serde::Serialize;

use crate::error::ServiceError;
use crate::service::Service;

/// One event appended to the ledger and folded into the read models, as subscribers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Update {
    /// The event's seq.
    pub seq: u64,
    /// The task (stream) it belongs to.
    pub task_id: String,
    /// The task's version after it (the session version).
    pub session_version: u64,
    /// Its kind, e.g. `conclusion_issued`.
    pub kind: String,
    /// Who caused it.
    pub actor: String,
    /// When it was recorded.
    pub recorded_at: chrono::DateTime<chrono::Utc>,
    /// Its hash.
    pub hash: Digest,
}

/// Every event from a seq on, each once the read models hold it: first those already folded,
/// then each new one. A slow subscriber catches up from storage and misses nothing.
#[derive(Debug)]
pub struct Updates {
    feed: Feed,
}

impl Updates {
    /// The next update, waiting for it if need be.
    pub async fn next(&mut self) -> Result<Update, ServiceError> {
        let event = self.feed.next().await.map_err(|e| match e {
            FeedError::Stalled(stall) => ServiceError::unavailable(format!(
                "the read models stopped before seq {}: {}",
                stall.seq, stall.reason
            )),
            other => ServiceError::unavailable(other),
        })?;
        Ok(Update {
            seq: event.seq,
            task_id: event.stream.clone(),
            session_version: event.stream_version,
            kind: event.kind.clone(),
            actor: event.actor.clone(),
            recorded_at: event.recorded_at,
            hash: event.hash,
        })
    }

    /// The seq of the next update.
    pub fn next_seq(&self) -> u64 {
        self.feed.next_seq()
    }
}

impl Service {
    /// Updates from `from_seq` on (the ledger's size for only new ones).
    pub fn updates(&self, from_seq: u64) -> Updates {
        Updates {
            feed: self.projector().feed(from_seq),
        }
    }
}
