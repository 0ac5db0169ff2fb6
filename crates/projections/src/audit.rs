//! A task's audit trail: its events exactly as the ledger holds them, a page at a time by stream
//! version, each with the payload decoded into the research crate's JSON view.
//!
//! The trail is read from the ledger, not from the projection, so it is always complete up to
//! the ledger's head and shows every field an auditor needs to check a link of the chain
//! (`hash`, `prev_hash`) or find what an event was derived from (`causation`). An event whose
//! payload this build cannot read is shown with the reason instead of a payload, never hidden.

use chrono::{DateTime, Utc};
use ledger::{Ledger, RecordedEvent};
use research::Hash32;
use serde::{Deserialize, Serialize};

use crate::error::QueryError;
use crate::limits::Limits;

/// One event of a task's trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the ledger.
    pub seq: u64,
    /// Position in the task's stream.
    pub stream_version: u64,
    /// The event's id.
    pub event_id: String,
    /// Its kind.
    pub kind: String,
    /// Who caused it.
    pub actor: String,
    /// When the ledger recorded it.
    pub recorded_at: DateTime<Utc>,
    /// Its chain hash.
    pub hash: Hash32,
    /// The hash of the event before it in the ledger.
    pub prev_hash: Hash32,
    /// Hashes of the events it was derived from.
    pub causation: Vec<Hash32>,
    /// The payload in the research crate's JSON view (tagged by `type`); none when it does
    /// not decode.
    pub payload: Option<serde_json::Value>,
    /// Why the payload does not decode, when it does not.
    pub payload_error: Option<String>,
}

/// A page of a task's trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    /// The task.
    pub task_id: String,
    /// The task's version in the ledger when the page was read.
    pub head_version: u64,
    /// The events, in stream order.
    pub events: Vec<AuditEntry>,
    /// The version the next page starts at; none when this page reaches the head.
    pub next_version: Option<u64>,
}

impl AuditEntry {
    fn of(event: &RecordedEvent) -> Self {
        let (payload, payload_error) = match research::decode(&event.kind, &event.payload) {
            Ok(decoded) => match serde_json::to_value(&decoded) {
                Ok(value) => (Some(value), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Err(e) => (None, Some(e.to_string())),
        };
        AuditEntry {
            seq: event.seq,
            stream_version: event.stream_version,
            event_id: event.event_id.to_string(),
            kind: event.kind.clone(),
            actor: event.actor.clone(),
            recorded_at: event.recorded_at,
            hash: Hash32(event.hash.0),
            prev_hash: Hash32(event.prev_hash.0),
            causation: event.causation.iter().map(|d| Hash32(d.0)).collect(),
            payload,
            payload_error,
        }
    }
}

/// Reads a page of the trail.
pub(crate) fn page(
    ledger: &Ledger,
    task_id: &str,
    from_version: u64,
    limit: Option<usize>,
    limits: &Limits,
) -> Result<AuditPage, QueryError> {
    let limit = limit.unwrap_or(limits.page_events_default);
    if limit == 0 {
        return Err(QueryError::InvalidArgument {
            field: "limit",
            message: "must be at least 1".into(),
        });
    }
    if limit > limits.page_events_max {
        return Err(QueryError::LimitExceeded {
            limit: "page_events_max",
            max: limits.page_events_max as u64,
            requested: limit as u64,
        });
    }
    if from_version == 0 {
        return Err(QueryError::InvalidArgument {
            field: "from_version",
            message: "stream versions start at 1".into(),
        });
    }
    let head_version = ledger.stream_version(task_id)?;
    if head_version == 0 {
        return Err(QueryError::TaskNotFound {
            task_id: task_id.to_owned(),
        });
    }
    // The page just after the head is empty, so a client paging by `next_version` ends cleanly;
    // anything further is a version that does not exist.
    if from_version > head_version + 1 {
        return Err(QueryError::VersionBeyondHead {
            task_id: task_id.to_owned(),
            requested: from_version,
            head: head_version,
        });
    }
    let events = ledger.read_stream(task_id, from_version, limit)?;
    let events: Vec<AuditEntry> = events
        .iter()
        .filter(|e| e.stream_version <= head_version)
        .map(AuditEntry::of)
        .collect();
    let next = from_version + events.len() as u64;
    Ok(AuditPage {
        task_id: task_id.to_owned(),
        head_version,
        events,
        next_version: (next <= head_version).then_some(next),
    })
}
