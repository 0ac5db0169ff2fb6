//! What auditors run: replaying a task and re-deriving every score, adjudication and conclusion
//! from the events it cites; explaining a verdict without writing anything; export bundles and
//! their offline check.

use ledger::bundle::{self, Bundle, BundleCheck, BundleFailure, BundleReport, ExportSpec, Scope};
use ledger::ledger_proof::{ConsistencyProofFile, InclusionProofFile, PublicKey};
use ledger::{Digest, ProofError, RecordedEvent, VerifyReport};
use research::{Event, TaskState};
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
        Ok(event) => crate::content::cited(&event)
            .map(|hash| Digest(hash.0))
            .into_iter()
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The kinds whose values are derived by the rules and so re-derived on replay (an added
/// item's reliability, authority and recency included; its relevance is recorded, never
/// recomputed, except a `v2` topicality, re-derived from the inputs recorded with it).
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

/// A task replayed from its events in version order, every derived value re-derived from the
/// state before the event that records it: the replay audit, run the same way over the events
/// of a data directory ([`Service::replay_check`]) and over those of an export bundle
/// ([`bundle_task_events`]).
#[derive(Debug, Default)]
pub struct Replay {
    state: TaskState,
    events: u64,
    rederived: u64,
    disagreement: Option<Disagreement>,
    /// An event's payload did not decode: nothing after it can be folded.
    stopped: bool,
}

impl Replay {
    /// Nothing replayed yet.
    pub fn new() -> Self {
        Replay::default()
    }

    /// Folds the task's next event, after re-deriving what it records while nothing has
    /// disagreed yet.
    pub fn feed(&mut self, recorded: &RecordedEvent) {
        self.feed_with_content(recorded, &|_| None);
    }

    /// [`Replay::feed`], also checking what rule set `v2` relevance rests on beyond the event:
    /// whether the item's full text holds each recorded term, against the text `content` gives
    /// for a content hash (none when it is not at hand, as in a bundle without content).
    pub fn feed_with_content(
        &mut self,
        recorded: &RecordedEvent,
        content: &dyn Fn(&research::Hash32) -> Option<Vec<u8>>,
    ) {
        if self.stopped {
            return;
        }
        self.events += 1;
        let event = match research::decode(&recorded.kind, &recorded.payload) {
            Ok(event) => event,
            Err(e) => {
                self.disagreement.get_or_insert(Disagreement {
                    seq: recorded.seq,
                    version: recorded.stream_version,
                    kind: recorded.kind.clone(),
                    hash: recorded.hash,
                    detail: format!("the payload does not decode: {e}"),
                });
                self.stopped = true;
                return;
            }
        };
        if self.disagreement.is_none() {
            match research::recheck(&self.state, &event).and_then(|()| terms_found(&event, content))
            {
                Ok(()) => {
                    if DERIVED_KINDS.contains(&recorded.kind.as_str()) {
                        self.rederived += 1;
                    }
                }
                Err(d) => {
                    self.disagreement = Some(Disagreement {
                        seq: recorded.seq,
                        version: recorded.stream_version,
                        kind: recorded.kind.clone(),
                        hash: recorded.hash,
                        detail: d.to_string(),
                    });
                }
            }
        }
        research::evolve(&mut self.state, &event, &projections::event_meta(recorded));
    }

    /// The state replayed so far.
    pub fn state(&self) -> &TaskState {
        &self.state
    }

    /// The outcome for `task_id`, given whether the replayed state is the one the live read
    /// model holds; a task with no event does not exist.
    pub fn finish(
        self,
        task_id: &str,
        matches_live_state: bool,
    ) -> Result<ReplayCheck, ServiceError> {
        if self.events == 0 {
            return Err(ServiceError::NotFound {
                resource: "task",
                id: task_id.to_owned(),
            });
        }
        Ok(ReplayCheck {
            task_id: task_id.to_owned(),
            events: self.events,
            rederived: self.rederived,
            disagreement: self.disagreement,
            matches_live_state,
        })
    }
}

/// Whether each term a `v2` relevance records as found (or not) in the item's text is so in the
/// text the content store holds, tokenized as the corpus tokenizes; nothing to check without
/// the text or without recorded inputs.
fn terms_found(
    event: &Event,
    content: &dyn Fn(&research::Hash32) -> Option<Vec<u8>>,
) -> Result<(), research::Discrepancy> {
    let Event::EvidenceAdded(added) = event else {
        return Ok(());
    };
    let Some(inputs) = &added.relevance_inputs else {
        return Ok(());
    };
    let Some(bytes) = content(&added.content_hash) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&bytes);
    let in_text: std::collections::HashSet<String> = sources::tokenize(&text).into_iter().collect();
    for (i, term) in inputs.terms.iter().enumerate() {
        let found = in_text.contains(&term.term);
        if found != term.found {
            return Err(research::Discrepancy {
                kind: "evidence_added",
                field: format!("relevance_inputs.terms[{i}].found"),
                recorded: term.found.to_string(),
                derived: format!("{found} (`{}` in the content)", term.term),
            });
        }
    }
    Ok(())
}

/// A task's state folded from its events (in version order, as a verified bundle holds them):
/// after its first `at` events, or all of them. Errors as [`Service::state_at`] gives them: no
/// event is no task, and a version beyond the last is refused.
pub fn fold_events<'a>(
    task_id: &str,
    events: impl IntoIterator<Item = &'a RecordedEvent>,
    at: Option<u64>,
) -> Result<TaskState, ServiceError> {
    let mut state = TaskState::new();
    let mut head = 0;
    for recorded in events {
        head = recorded.stream_version;
        if at.is_some_and(|at| recorded.stream_version > at) {
            continue;
        }
        let event = research::decode(&recorded.kind, &recorded.payload).map_err(|e| {
            ServiceError::Unavailable(format!(
                "seq {}: the payload does not decode: {e}",
                recorded.seq
            ))
        })?;
        research::evolve(&mut state, &event, &projections::event_meta(recorded));
    }
    if head == 0 {
        return Err(ServiceError::NotFound {
            resource: "task",
            id: task_id.to_owned(),
        });
    }
    if let Some(requested) = at.filter(|at| *at > head) {
        return Err(projections::QueryError::VersionBeyondHead {
            task_id: task_id.to_owned(),
            requested,
            head,
        }
        .into());
    }
    Ok(state)
}

/// The events of `task_id` in a bundle, decoded from their stored bytes, in order. Check the
/// bundle first ([`verify_bundle_text`]): this reads what it holds, and trusts it.
pub fn bundle_task_events(
    bundle: &Bundle,
    task_id: &str,
) -> Result<Vec<RecordedEvent>, ServiceError> {
    let mut events = Vec::new();
    for held in &bundle.events {
        let event = ledger::envelope::decode_stored(&held.stored.0).map_err(|e| {
            ServiceError::Unavailable(format!(
                "seq {} of the bundle does not decode: {e}",
                held.seq
            ))
        })?;
        if event.stream == task_id {
            events.push(event);
        }
    }
    Ok(events)
}

/// The explanation of the current verdict of a task as `state` holds it: the one recorded, or
/// else one derived now and not recorded (reading never writes). `None` when the task has no
/// conclusion.
pub fn explain_state(state: &TaskState) -> Result<Option<(String, bool)>, ServiceError> {
    let Some(current) = state.current_conclusion() else {
        return Ok(None);
    };
    if let Some(recorded) = state.explanation_of(&current.issued.conclusion_id) {
        return Ok(Some((recorded.event.markdown(), true)));
    }
    let context = research::CommandContext::new(chrono::Utc::now());
    let decided = research::decide(state, &research::Command::ExplainReasoning, &context)?;
    let markdown = decided.iter().find_map(|e| match &e.event {
        Event::ExplanationRecorded(x) => Some(x.markdown()),
        _ => None,
    });
    Ok(markdown.map(|m| (m, false)))
}

/// A proof error as the service reports it; `field` names the argument a nonsensical request
/// is blamed on.
fn proof_error(error: ProofError, field: &str) -> ServiceError {
    match error {
        ProofError::NotCovered { seq, latest_size } => ServiceError::NotFound {
            resource: "checkpoint",
            id: format!("covering seq {seq} (the latest covers {latest_size} events)"),
        },
        ProofError::NotCheckpointed(size) => ServiceError::NotFound {
            resource: "checkpoint",
            id: format!("of tree size {size}"),
        },
        ProofError::Invalid(message) => ServiceError::invalid(field, message),
        other => ServiceError::unavailable(other),
    }
}

impl Service {
    /// Replays a task from its events and re-derives every score, adjudication, matrix,
    /// synthesis, conclusion and explanation from the state before it, bit for bit.
    pub fn replay_check(&self, task_id: &str) -> Result<ReplayCheck, ServiceError> {
        let mut replay = Replay::new();
        let content = |hash: &research::Hash32| self.content(hash).ok();
        let mut from = 1;
        loop {
            let chunk = self
                .ledger()
                .read_stream(task_id, from, 4096)
                .map_err(ServiceError::unavailable)?;
            if chunk.is_empty() {
                break;
            }
            from += chunk.len() as u64;
            for recorded in &chunk {
                replay.feed_with_content(recorded, &content);
            }
        }
        let live = match self.projector().task_hash(task_id) {
            Ok(live) => Some(live),
            Err(projections::QueryError::TaskNotFound { .. }) => None,
            Err(other) => return Err(other.into()),
        };
        let matches = live.is_some_and(|live| projections::state_hash(replay.state()) == live);
        replay.finish(task_id, matches)
    }

    /// The explanation of a task's current verdict ([`explain_state`] of its state now).
    pub fn explanation(&self, task_id: &str) -> Result<Option<(String, bool)>, ServiceError> {
        explain_state(&*self.state(task_id)?)
    }

    /// A task's version and the hash of its state in the live read model, read together, for
    /// an auditor who replays the task elsewhere to compare with
    /// ([`projections::state_hash`]).
    pub fn task_head(&self, task_id: &str) -> Result<(u64, research::Hash32), ServiceError> {
        Ok(self.projector().task_head(task_id)?)
    }

    /// Verifies the whole ledger from its first event, however much was verified before.
    pub fn verify_from_scratch(&self, progress: &mut dyn FnMut(u64, u64)) -> VerifyReport {
        let report = self.ledger().verify_from_scratch(progress);
        if !report.is_intact() {
            self.count_failed_verification();
        }
        report
    }

    /// A proof that the event at `seq` is in the tree of the checkpoint of `tree_size`, or of
    /// the latest; when none covers the event yet and no size was named, this waits for the
    /// periodic checkpointer (at most one interval of it). It never writes a checkpoint.
    pub fn prove_inclusion(
        &self,
        seq: u64,
        tree_size: Option<u64>,
    ) -> Result<InclusionProofFile, ServiceError> {
        self.ledger()
            .inclusion_proof_covering(seq, tree_size)
            .map_err(|e| proof_error(e, "seq"))
    }

    /// A proof that the tree of the checkpoint of size `second` extends the one of size
    /// `first`. Without `second`, against today's ledger: the latest checkpoint, once the
    /// periodic checkpointer has covered the head (waiting at most one interval of it).
    pub fn prove_consistency(
        &self,
        first: u64,
        second: Option<u64>,
    ) -> Result<ConsistencyProofFile, ServiceError> {
        let ledger = self.ledger();
        match second {
            Some(second) => ledger.consistency_proof(first, second),
            None => ledger.consistency_to_today(first),
        }
        .map_err(|e| proof_error(e, "first"))
    }

    /// An export bundle of some tasks or all.
    pub fn export(&self, scope: Scope, without_content: bool) -> Result<Bundle, ServiceError> {
        let content = |hash: &Digest| -> Result<Vec<u8>, String> {
            self.content(&research::Hash32(hash.0))
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
                other => ServiceError::unavailable(other),
            })
    }
}

/// Checks a bundle's text offline, against `trusted` or else the first key inside it.
pub fn verify_bundle_text(
    text: &str,
    bytes_max: usize,
    trusted: Option<PublicKey>,
) -> Result<(Bundle, BundleReport), BundleFailure> {
    verify_bundle_witnessed(text, bytes_max, trusted, Vec::new())
}

/// [`verify_bundle_text`], requiring besides a cosignature of the bundle's checkpoint by each
/// of `witnesses`.
pub fn verify_bundle_witnessed(
    text: &str,
    bytes_max: usize,
    trusted: Option<PublicKey>,
    witnesses: Vec<ledger::ledger_proof::VerifierKey>,
) -> Result<(Bundle, BundleReport), BundleFailure> {
    bundle::verify_bundle_text(
        text,
        bytes_max,
        &BundleCheck {
            trusted_key: trusted,
            witnesses,
            payload_view: &payload_view,
            cited_content: &cited_content,
        },
    )
}
