//! A stream of updates for subscribers: one per event appended, in order, for MCP resource
//! subscriptions and GraphQL subscriptions alike.

use ledger::{Digest, Subscription};
use serde::Serialize;

use crate::error::ServiceError;
use crate::service::Service;

/// One event appended to the ledger, as subscribers see it.
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

/// Every event from a seq on: first those already in the ledger, then each new one. A slow
/// subscriber catches up from storage and misses nothing.
#[derive(Debug)]
pub struct Updates {
    subscription: Subscription,
}

impl Updates {
    /// The next update, waiting for it if need be.
    pub async fn next(&mut self) -> Result<Update, ServiceError> {
        let event = self
            .subscription
            .next()
            .await
            .map_err(ServiceError::unavailable)?;
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
        self.subscription.next_seq()
    }
}

impl Service {
    /// Updates from `from_seq` on (the ledger's size for only new ones).
    pub fn updates(&self, from_seq: u64) -> Updates {
        Updates {
            subscription: self.ledger().subscribe(from_seq),
        }
    }
}
