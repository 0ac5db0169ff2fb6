//! What auditors run: replaying a task and re-deriving every score, adjudication and conclusion
//! from the events it cites; explaining a verdict without writing anything; export bundles and
//! their offline check.

use ledger::bundle::{self, Bundle, BundleCheck, BundleFailure, BundleReport, ExportSpec, Scope};
use ledger::ledger_proof::PublicKey;
use ledger::{Digest, RecordedEvent};
use research::{Event, EventMeta, TaskState};
use serde::Serialize;
use serde_json::Value;

use crate::error::ServiceError;
use crate::service::Service;

/// The decoded view of a research event's payload, for bundles and audit trails.
pub fn payload_view(event: &RecordedEvent) -> Result<Value, String> {
    let decoded = research::decode(&event.kind, &event.payload).map_err(|e| e.to_string())?;
    serde_json::to_value(&decoded).map_err(|e| e.to_string())
}

/// The content blobs a research event cites: the full text behind an evidence item.
pub fn cited_content(event: &RecordedEvent) -> Vec<Digest> {
    match research::decode(&event.kind, &event.payload) {
        Ok(Event::EvidenceAdded(e)) => vec![Digest(e.content_hash.0)],
        _ => Vec::new(),
    }
}

/// The envelope facts a fold needs.
pub fn meta_of(event: &RecordedEvent) -> EventMeta {
    EventMeta {
        seq: event.seq,
        stream_version: event.stream_version,
        hash: event.hash.0,
        recorded_at: event.recorded_at,
        actor: event.actor.clone(),
    }
}

/// The kinds whose values are derived by the rules and so re-derived on replay (an added
/// item's reliability, authority and recency included; its relevance is recorded, never
/// recomputed).
const DERIVED_KINDS: [&str; 6] = [
    "evidence_added",
    "conflicts_adjudicated",
    "decision_matrix_built",
    "synthesis_recorded",
    "conclusion_issued",
    "explanation_recorded",
];

/// A value an event records that its inputs do not give again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreement {
    /// The event.
    pub seq: u64,
    /// Its version in the task.
    pub version: u64,
    /// Its kind.
    pub kind: String,
    /// Its hash.
    pub hash: Digest,
    /// What differs.
    pub detail: String,
}

/// The outcome of replaying a task with every derived value re-derived.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayCheck {
    /// The task.
    pub task_id: String,
    /// Events replayed.
    pub events: u64,
    /// Events whose derived values were re-derived and compared.
    pub rederived: u64,
    /// The first event that disagrees, if any.
    pub disagreement: Option<Disagreement>,
    /// Whether the state folded from scratch is the state the live read model holds.
    pub matches_live_state: bool,
}

impl Service {
    /// Replays a task from its events and re-derives every score, adjudication, matrix,
    /// synthesis, conclusion and explanation from the state before it, bit for bit.
    pub fn replay_check(&self, task_id: &str) -> Result<ReplayCheck, ServiceError> {
        let mut state = TaskState::new();
        let mut events = 0u64;
        let mut rederived = 0u64;
        let mut disagreement = None;
        let mut from = 1;
        loop {
            let chunk = self
                .ledger()
                .read_stream(task_id, from, 4096)
                .map_err(ServiceError::internal)?;
            if chunk.is_empty() {
                break;
            }
            from += chunk.len() as u64;
            for recorded in &chunk {
                events += 1;
                let event = match research::decode(&recorded.kind, &recorded.payload) {
                    Ok(event) => event,
                    Err(e) => {
                        disagreement.get_or_insert(Disagreement {
                            seq: recorded.seq,
                            version: recorded.stream_version,
                            kind: recorded.kind.clone(),
                            hash: recorded.hash,
                            detail: format!("the payload does not decode: {e}"),
                        });
                        break;
                    }
                };
                if disagreement.is_none() {
                    match research::recheck(&state, &event) {
                        Ok(()) => {
                            if DERIVED_KINDS.contains(&recorded.kind.as_str()) {
                                rederived += 1;
                            }
                        }
                        Err(d) => {
                            disagreement = Some(Disagreement {
                                seq: recorded.seq,
                                version: recorded.stream_version,
                                kind: recorded.kind.clone(),
                                hash: recorded.hash,
                                detail: d.to_string(),
                            });
                        }
                    }
                }
                research::evolve(&mut state, &event, &meta_of(recorded));
            }
        }
        if events == 0 {
            return Err(ServiceError::NotFound {
                resource: "task",
                id: task_id.to_owned(),
            });
        }
        let live = self.projector().task_hash(task_id)?;
        Ok(ReplayCheck {
            task_id: task_id.to_owned(),
            events,
            rederived,
            disagreement,
            matches_live_state: projections::state_hash(&state) == live,
        })
    }

    /// The explanation of a task's current verdict: the one recorded, or else one derived now
    /// and not recorded (reading never writes). `None` when the task has no conclusion.
    pub fn explanation(&self, task_id: &str) -> Result<Option<(String, bool)>, ServiceError> {
        let state = self.state(task_id)?;
        let Some(current) = state.current_conclusion() else {
            return Ok(None);
        };
        if let Some(recorded) = state.explanation_of(&current.issued.conclusion_id) {
            return Ok(Some((recorded.event.markdown(), true)));
        }
        let context = research::CommandContext::new(chrono::Utc::now());
        let decided = research::decide(&state, &research::Command::ExplainReasoning, &context)?;
        let markdown = decided.iter().find_map(|e| match &e.event {
            Event::ExplanationRecorded(x) => Some(x.markdown()),
            _ => None,
        });
        Ok(markdown.map(|m| (m, false)))
    }

    /// An export bundle of some tasks or all.
    pub fn export(&self, scope: Scope, without_content: bool) -> Result<Bundle, ServiceError> {
        let blobs = self.blobs();
        let content = |hash: &Digest| -> Result<Vec<u8>, String> {
            blobs
                .get(&research::Hash32(hash.0))
                .map_err(|e| e.to_string())
        };
        self.ledger()
            .export(&ExportSpec {
                scope,
                without_content,
                payload_view: &payload_view,
                cited_content: &cited_content,
                content: &content,
            })
            .map_err(|e| match e {
                bundle::ExportError::UnknownTask(id) => ServiceError::NotFound {
                    resource: "task",
                    id,
                },
                other => ServiceError::internal(other),
            })
    }
}

/// Checks a bundle's text offline, against `trusted` or else the first key inside it.
pub fn verify_bundle_text(
    text: &str,
    bytes_max: usize,
    trusted: Option<PublicKey>,
) -> Result<(Bundle, BundleReport), BundleFailure> {
    bundle::verify_bundle_text(
        text,
        bytes_max,
        &BundleCheck {
            trusted_key: trusted,
            payload_view: &payload_view,
            cited_content: &cited_content,
        },
    )
}
