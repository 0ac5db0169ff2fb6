//! The stored form of an event: a schema version, then the payload in postcard.
//!
//! Version 2 added what rule set `v2` records: optional parts of `task_opened` (its parameters),
//! `evidence_added` (relevance inputs), `conflicts_adjudicated` and `conclusion_issued` (what the
//! `v2` rules compared and derived). An event that carries none of them is still written as
//! version 1, byte for byte as before, so `v1` tasks keep their exact bytes; one that carries
//! them is written as version 2, with each of them present. Decoding checks that a version 2
//! payload is exactly what encoding its event gives, so each payload still has one encoding.
//!
//! Version 3 added who decided a conflict (`conflict_resolved`, `adjudication_appealed`: a
//! person or an assistant, and the client): a decision that names it is written as version 3,
//! one that does not (every decision written before) keeps its version 1 bytes. It also added
//! who may decide a task's conflicts (`task_opened`): a task that restricts it is written as
//! version 3, with its `v2` part as an option, present or not; one that does not keeps its
//! version 1 or 2 bytes.
//!
//! Version 4 added the cap on the query's part of `v2` relevance
//! ([`crate::rules::V2Parameters::query_cap`]), the last field of the `v2` parameters, which
//! `task_opened` and `conclusion_issued` carry in their rule set. An event whose rule set records
//! a cap is written as version 4: every payload in its current shape (`task_opened` with who may
//! decide as an option, present or not; `conclusion_issued` with its `v2` part present). One
//! whose rule set records none (every task opened before version 4) keeps its version 1, 2 or 3
//! bytes, in which the `v2` parameters end before the cap, and is scored without a cap. Version
//! 4 bytes without a cap, or that an older version could have held, are not canonical.
//!
//! The ledger keeps the kind beside the bytes, so the bytes hold only the payload and adding an
//! event kind never shifts the encoding of the others. postcard's wire format is specified and
//! stable; the leading version lets a later schema read what an earlier one wrote, by decoding
//! the old shape and upcasting it. Decoding treats the bytes as hostile: it never panics, never
//! allocates more than the input justifies, and refuses trailing bytes so that one payload has
//! exactly one encoding.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::event::{
    AdjudicationAppealed, ConclusionIssued, ConflictResolved, ConflictsAdjudicated,
    DecisionMatrixBuilt, Event, EvidenceAdded, EvidenceRetracted, EvidenceScreened,
    ExplanationRecorded, ExternalToolCalled, SearchRecorded, SubQuestionsExpanded,
    SynthesisRecorded, TaskClosed, TaskOpened,
};

/// The newest schema version `encode` writes (for events whose rule set records a query cap;
/// others are written in the oldest version that holds them). `decode` reads every version up to
/// this one.
pub const SCHEMA_VERSION: u16 = 4;

/// Why stored bytes could not be read as an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the version prefix. The record is truncated: treat the log as damaged.
    #[error("event bytes too short for the schema version")]
    TooShort,
    /// A version this build does not know, probably written by a newer one: upgrade to read it.
    #[error("unknown event schema version {version}")]
    UnknownSchemaVersion {
        /// The version found.
        version: u16,
    },
    /// A kind this build does not know: upgrade, or the kind was stored wrongly.
    #[error("unknown event kind `{kind}`")]
    UnknownKind {
        /// The kind given.
        kind: String,
    },
    /// The payload does not decode as its kind: the bytes are damaged or not of that kind.
    #[error("`{kind}` payload is malformed: {reason}")]
    Malformed {
        /// The kind.
        kind: &'static str,
        /// postcard's account of the failure.
        reason: String,
    },
    /// The payload decoded but bytes were left over: the record is not canonical.
    #[error("`{kind}` payload has {count} trailing bytes")]
    TrailingBytes {
        /// The kind.
        kind: &'static str,
        /// How many.
        count: usize,
    },
    /// A payload of version 2 or later that is not the one encoding of its event (it lacks a part
    /// of its version, or could have been written in an older one): the record is not canonical.
    #[error("`{kind}` payload is not in its canonical schema version")]
    NotCanonical {
        /// The kind.
        kind: &'static str,
    },
}

/// Whether an event carries any part that only schema version 2 can hold.
fn has_v2_parts(event: &Event) -> bool {
    match event {
        Event::TaskOpened(p) => p.rules.v2.is_some(),
        Event::EvidenceAdded(p) => p.relevance_inputs.is_some(),
        Event::ConflictsAdjudicated(p) => p.adjudications.iter().any(|a| a.v2.is_some()),
        Event::ConclusionIssued(p) => p.v2.is_some() || p.rules.v2.is_some(),
        _ => false,
    }
}

/// Whether an event carries a part only schema version 3 can hold: who decided a conflict.
fn has_v3_parts(event: &Event) -> bool {
    match event {
        Event::TaskOpened(p) => p.conflict_decisions.is_some(),
        Event::ConflictResolved(p) => p.decided_by.is_some(),
        Event::AdjudicationAppealed(p) => p.decided_by.is_some(),
        _ => false,
    }
}

/// Whether an event carries a part only schema version 4 can hold: a rule set whose `v2`
/// parameters record a query cap.
fn has_v4_parts(event: &Event) -> bool {
    let capped = |rules: &crate::rules::RuleSet| rules.v2.is_some_and(|p| p.query_cap.is_some());
    match event {
        Event::TaskOpened(p) => capped(&p.rules),
        Event::ConclusionIssued(p) => capped(&p.rules),
        _ => false,
    }
}

/// Encodes an event for storage: the schema version (two bytes, little endian), then the
/// payload in postcard.
pub fn encode(event: &Event) -> Vec<u8> {
    if has_v4_parts(event) {
        let mut out = 4u16.to_le_bytes().to_vec();
        encode_current(&mut out, event);
        return out;
    }
    // Below version 4 no rule set records a cap: the `v2` parameters end before it.
    if has_v3_parts(event) {
        let mut out = 3u16.to_le_bytes().to_vec();
        match event {
            Event::TaskOpened(p) => append(&mut out, &v3::TaskOpened::from(p)),
            other => encode_current(&mut out, other),
        }
        return out;
    }
    if has_v2_parts(event) {
        let mut out = 2u16.to_le_bytes().to_vec();
        match event {
            // Version 2 ends `task_opened` before the part version 3 added.
            Event::TaskOpened(p) => append(&mut out, &v2::TaskOpened::from(p)),
            Event::ConclusionIssued(p) => append(&mut out, &v2::ConclusionIssued::from(p)),
            other => encode_current(&mut out, other),
        }
        return out;
    }
    // Without `v2` parts, the payloads `v2` extended are written in their version 1 shape, so
    // a `v1` task's bytes are what they were before `v2` existed.
    let mut out = 1u16.to_le_bytes().to_vec();
    match event {
        Event::TaskOpened(p) => append(&mut out, &v1::TaskOpened::from(p)),
        Event::EvidenceAdded(p) => append(&mut out, &v1::EvidenceAdded::from(p)),
        Event::ConflictsAdjudicated(p) => append(&mut out, &v1::ConflictsAdjudicated::from(p)),
        Event::ConclusionIssued(p) => append(&mut out, &v1::ConclusionIssued::from(p)),
        Event::ConflictResolved(p) => append(&mut out, &v1::ConflictResolved::from(p)),
        Event::AdjudicationAppealed(p) => append(&mut out, &v1::AdjudicationAppealed::from(p)),
        other => encode_current(&mut out, other),
    }
    out
}

/// The payload in its current shape.
fn encode_current(out: &mut Vec<u8>, event: &Event) {
    match event {
        Event::TaskOpened(p) => append(out, p),
        Event::SubQuestionsExpanded(p) => append(out, p),
        Event::SearchRecorded(p) => append(out, p),
        Event::EvidenceAdded(p) => append(out, p),
        Event::EvidenceScreened(p) => append(out, p),
        Event::EvidenceRetracted(p) => append(out, p),
        Event::SynthesisRecorded(p) => append(out, p),
        Event::ConflictsAdjudicated(p) => append(out, p),
        Event::ConflictResolved(p) => append(out, p),
        Event::AdjudicationAppealed(p) => append(out, p),
        Event::DecisionMatrixBuilt(p) => append(out, p),
        Event::ConclusionIssued(p) => append(out, p),
        Event::ExplanationRecorded(p) => append(out, p),
        Event::ExternalToolCalled(p) => append(out, p),
        Event::TaskClosed(p) => append(out, p),
    }
}

fn append<T: Serialize>(out: &mut Vec<u8>, payload: &T) {
    // postcard fails only on a full fixed buffer (a Vec grows), a sequence of unknown length
    // (every collection here knows its length) or an error raised by a `Serialize` impl (none of
    // the payload types raises one), so this cannot fail for event payloads.
    let bytes = postcard::to_stdvec(payload);
    debug_assert!(bytes.is_ok(), "event payloads always encode");
    if let Ok(bytes) = bytes {
        out.extend_from_slice(&bytes);
    }
}

/// Decodes stored bytes of the given kind, upcasting older schema versions to the current event.
pub fn decode(kind: &str, bytes: &[u8]) -> Result<Event, DecodeError> {
    let (prefix, body) = match bytes.split_first_chunk::<2>() {
        Some(split) => split,
        None => return Err(DecodeError::TooShort),
    };
    let version = u16::from_le_bytes(*prefix);
    match version {
        1 => decode_v1(kind, body),
        2 => {
            let event = match kind {
                "task_opened" => {
                    Event::TaskOpened(payload::<v2::TaskOpened>("task_opened", body)?.into())
                }
                "conclusion_issued" => Event::ConclusionIssued(
                    payload::<v2::ConclusionIssued>("conclusion_issued", body)?.into(),
                ),
                _ => decode_current(kind, body)?,
            };
            // Every `v2` part present, and nothing that version 1 could have held alone.
            let canonical = has_v2_parts(&event)
                && match &event {
                    Event::TaskOpened(_) | Event::EvidenceAdded(_) => true,
                    Event::ConflictsAdjudicated(p) => {
                        p.adjudications.iter().all(|a| a.v2.is_some())
                    }
                    Event::ConclusionIssued(p) => p.v2.is_some() && p.rules.v2.is_some(),
                    _ => false,
                }
                && encode(&event) == bytes;
            if !canonical {
                return Err(DecodeError::NotCanonical { kind: event.kind() });
            }
            Ok(event)
        }
        3 => {
            let event = match kind {
                "task_opened" => {
                    Event::TaskOpened(payload::<v3::TaskOpened>("task_opened", body)?.into())
                }
                _ => decode_current(kind, body)?,
            };
            // Who decided present: nothing else is written as version 3.
            if !(has_v3_parts(&event) && encode(&event) == bytes) {
                return Err(DecodeError::NotCanonical { kind: event.kind() });
            }
            Ok(event)
        }
        4 => {
            let event = decode_current(kind, body)?;
            // A cap recorded, and a conclusion's `v2` part with it: nothing else is version 4.
            let canonical = has_v4_parts(&event)
                && match &event {
                    Event::ConclusionIssued(p) => p.v2.is_some(),
                    _ => true,
                }
                && encode(&event) == bytes;
            if !canonical {
                return Err(DecodeError::NotCanonical { kind: event.kind() });
            }
            Ok(event)
        }
        version => Err(DecodeError::UnknownSchemaVersion { version }),
    }
}

/// Version 1: the payloads whose shape version 2 extended decode in their version 1 shape and
/// are upcast with the `v2` parts absent; the others decode as they are.
fn decode_v1(kind: &str, body: &[u8]) -> Result<Event, DecodeError> {
    Ok(match kind {
        "task_opened" => Event::TaskOpened(payload::<v1::TaskOpened>("task_opened", body)?.into()),
        "evidence_added" => {
            Event::EvidenceAdded(payload::<v1::EvidenceAdded>("evidence_added", body)?.into())
        }
        "conflicts_adjudicated" => Event::ConflictsAdjudicated(
            payload::<v1::ConflictsAdjudicated>("conflicts_adjudicated", body)?.into(),
        ),
        "conclusion_issued" => Event::ConclusionIssued(
            payload::<v1::ConclusionIssued>("conclusion_issued", body)?.into(),
        ),
        "conflict_resolved" => Event::ConflictResolved(
            payload::<v1::ConflictResolved>("conflict_resolved", body)?.into(),
        ),
        "adjudication_appealed" => Event::AdjudicationAppealed(
            payload::<v1::AdjudicationAppealed>("adjudication_appealed", body)?.into(),
        ),
        _ => decode_current(kind, body)?,
    })
}

/// The current shape of every payload.
fn decode_current(kind: &str, body: &[u8]) -> Result<Event, DecodeError> {
    Ok(match kind {
        "task_opened" => Event::TaskOpened(payload::<TaskOpened>("task_opened", body)?),
        "sub_questions_expanded" => Event::SubQuestionsExpanded(payload::<SubQuestionsExpanded>(
            "sub_questions_expanded",
            body,
        )?),
        "search_recorded" => {
            Event::SearchRecorded(payload::<SearchRecorded>("search_recorded", body)?)
        }
        "evidence_added" => Event::EvidenceAdded(payload::<EvidenceAdded>("evidence_added", body)?),
        "evidence_screened" => {
            Event::EvidenceScreened(payload::<EvidenceScreened>("evidence_screened", body)?)
        }
        "evidence_retracted" => {
            Event::EvidenceRetracted(payload::<EvidenceRetracted>("evidence_retracted", body)?)
        }
        "synthesis_recorded" => {
            Event::SynthesisRecorded(payload::<SynthesisRecorded>("synthesis_recorded", body)?)
        }
        "conflicts_adjudicated" => Event::ConflictsAdjudicated(payload::<ConflictsAdjudicated>(
            "conflicts_adjudicated",
            body,
        )?),
        "conflict_resolved" => {
            Event::ConflictResolved(payload::<ConflictResolved>("conflict_resolved", body)?)
        }
        "adjudication_appealed" => Event::AdjudicationAppealed(payload::<AdjudicationAppealed>(
            "adjudication_appealed",
            body,
        )?),
        "decision_matrix_built" => Event::DecisionMatrixBuilt(payload::<DecisionMatrixBuilt>(
            "decision_matrix_built",
            body,
        )?),
        "conclusion_issued" => {
            Event::ConclusionIssued(payload::<ConclusionIssued>("conclusion_issued", body)?)
        }
        "explanation_recorded" => Event::ExplanationRecorded(payload::<ExplanationRecorded>(
            "explanation_recorded",
            body,
        )?),
        "external_tool_called" => {
            Event::ExternalToolCalled(payload::<ExternalToolCalled>("external_tool_called", body)?)
        }
        "task_closed" => Event::TaskClosed(payload::<TaskClosed>("task_closed", body)?),
        other => {
            return Err(DecodeError::UnknownKind {
                kind: other.chars().take(64).collect(),
            });
        }
    })
}

fn payload<T: DeserializeOwned>(kind: &'static str, body: &[u8]) -> Result<T, DecodeError> {
    let (value, rest) =
        postcard::take_from_bytes::<T>(body).map_err(|e| DecodeError::Malformed {
            kind,
            reason: e.to_string(),
        })?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes {
            kind,
            count: rest.len(),
        });
    }
    Ok(value)
}

/// The shapes before version 4 added the query cap: the `v2` parameters ending before it, in the
/// rule set of `task_opened` (version 3 shape here, with who may decide) and `conclusion_issued`
/// (in [`v2`]). Read from version 2 and 3 bytes and upcast with no cap, and written for rule sets
/// that record none.
mod v3 {
    use chrono::NaiveDate;
    use serde::{Deserialize, Serialize};

    use crate::event::{self, ConflictDecisions};
    use crate::rules::{self, AuthorityTable, Mode, Thresholds, Weights};

    /// `V2Parameters` before the query cap.
    #[derive(Serialize, Deserialize)]
    pub(super) struct V2Parameters {
        query_weight: f64,
        coverage_full: f64,
        sided_items_min: u64,
        sided_relevance_min: f64,
        undated_recency: Option<f64>,
        side_weight_ratio: Option<f64>,
    }

    /// `RuleSet` whose `v2` parameters end before the query cap.
    #[derive(Serialize, Deserialize)]
    pub(super) struct RuleSet {
        id: String,
        weights: Weights,
        half_life_days: f64,
        authority: AuthorityTable,
        thresholds: Thresholds,
        v2: Option<V2Parameters>,
    }

    impl From<RuleSet> for rules::RuleSet {
        fn from(r: RuleSet) -> Self {
            rules::RuleSet {
                id: r.id,
                weights: r.weights,
                half_life_days: r.half_life_days,
                authority: r.authority,
                thresholds: r.thresholds,
                v2: r.v2.map(|p| rules::V2Parameters {
                    query_weight: p.query_weight,
                    coverage_full: p.coverage_full,
                    sided_items_min: p.sided_items_min,
                    sided_relevance_min: p.sided_relevance_min,
                    undated_recency: p.undated_recency,
                    side_weight_ratio: p.side_weight_ratio,
                    query_cap: None,
                }),
            }
        }
    }

    /// Only for a rule set that records no cap (`encode` writes the others as version 4).
    impl From<&rules::RuleSet> for RuleSet {
        fn from(r: &rules::RuleSet) -> Self {
            RuleSet {
                id: r.id.clone(),
                weights: r.weights,
                half_life_days: r.half_life_days,
                authority: r.authority,
                thresholds: r.thresholds,
                v2: r.v2.map(|p| V2Parameters {
                    query_weight: p.query_weight,
                    coverage_full: p.coverage_full,
                    sided_items_min: p.sided_items_min,
                    sided_relevance_min: p.sided_relevance_min,
                    undated_recency: p.undated_recency,
                    side_weight_ratio: p.side_weight_ratio,
                }),
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct TaskOpened {
        task_id: String,
        question: String,
        constraints: Vec<String>,
        research_date: NaiveDate,
        mode: Mode,
        rules: RuleSet,
        conflict_decisions: Option<ConflictDecisions>,
    }

    impl From<TaskOpened> for event::TaskOpened {
        fn from(t: TaskOpened) -> Self {
            event::TaskOpened {
                task_id: t.task_id,
                question: t.question,
                constraints: t.constraints,
                research_date: t.research_date,
                mode: t.mode,
                rules: t.rules.into(),
                conflict_decisions: t.conflict_decisions,
            }
        }
    }

    impl From<&event::TaskOpened> for TaskOpened {
        fn from(t: &event::TaskOpened) -> Self {
            TaskOpened {
                task_id: t.task_id.clone(),
                question: t.question.clone(),
                constraints: t.constraints.clone(),
                research_date: t.research_date,
                mode: t.mode,
                rules: (&t.rules).into(),
                conflict_decisions: t.conflict_decisions,
            }
        }
    }
}

/// The version 2 shapes: `task_opened` before version 3 added who may decide its conflicts, and
/// `conclusion_issued`, both with the rule set before version 4 added the query cap. Read from
/// version 2 bytes and upcast, and written for events of `v2` tasks that record neither.
mod v2 {
    use chrono::NaiveDate;
    use serde::{Deserialize, Serialize};

    use super::v3::RuleSet;
    use crate::event::{self, ConclusionV2, StanceCounts, UsedAdjudication, UsedEvidence};
    use crate::ids::ConclusionId;
    use crate::rules::{Components, Mode, Verdict, VerdictRule};

    #[derive(Serialize, Deserialize)]
    pub(super) struct ConclusionIssued {
        conclusion_id: ConclusionId,
        stance: Verdict,
        rule: VerdictRule,
        confidence: f64,
        components: Components,
        counts: StanceCounts,
        distinct_sources: u64,
        evidence: Vec<UsedEvidence>,
        adjudications: Vec<UsedAdjudication>,
        rules: RuleSet,
        client_share: f64,
        supersedes: Option<ConclusionId>,
        v2: Option<ConclusionV2>,
    }

    impl From<ConclusionIssued> for event::ConclusionIssued {
        fn from(c: ConclusionIssued) -> Self {
            event::ConclusionIssued {
                conclusion_id: c.conclusion_id,
                stance: c.stance,
                rule: c.rule,
                confidence: c.confidence,
                components: c.components,
                counts: c.counts,
                distinct_sources: c.distinct_sources,
                evidence: c.evidence,
                adjudications: c.adjudications,
                rules: c.rules.into(),
                client_share: c.client_share,
                supersedes: c.supersedes,
                v2: c.v2,
            }
        }
    }

    impl From<&event::ConclusionIssued> for ConclusionIssued {
        fn from(c: &event::ConclusionIssued) -> Self {
            ConclusionIssued {
                conclusion_id: c.conclusion_id.clone(),
                stance: c.stance,
                rule: c.rule,
                confidence: c.confidence,
                components: c.components,
                counts: c.counts,
                distinct_sources: c.distinct_sources,
                evidence: c.evidence.clone(),
                adjudications: c.adjudications.clone(),
                rules: (&c.rules).into(),
                client_share: c.client_share,
                supersedes: c.supersedes.clone(),
                v2: c.v2.clone(),
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct TaskOpened {
        task_id: String,
        question: String,
        constraints: Vec<String>,
        research_date: NaiveDate,
        mode: Mode,
        rules: RuleSet,
    }

    impl From<TaskOpened> for event::TaskOpened {
        fn from(t: TaskOpened) -> Self {
            event::TaskOpened {
                task_id: t.task_id,
                question: t.question,
                constraints: t.constraints,
                research_date: t.research_date,
                mode: t.mode,
                rules: t.rules.into(),
                conflict_decisions: None,
            }
        }
    }

    impl From<&event::TaskOpened> for TaskOpened {
        fn from(t: &event::TaskOpened) -> Self {
            TaskOpened {
                task_id: t.task_id.clone(),
                question: t.question.clone(),
                constraints: t.constraints.clone(),
                research_date: t.research_date,
                mode: t.mode,
                rules: (&t.rules).into(),
            }
        }
    }
}

/// The version 1 shapes of the payloads version 2 extended, field for field as they were: read
/// from version 1 bytes and upcast, and written for events without `v2` parts.
mod v1 {
    use chrono::NaiveDate;
    use serde::{Deserialize, Serialize};

    use crate::event::{self, Compared, FoundBy, Participant, RelevanceBasis};
    use crate::event::{StanceCounts, Tier, UsedAdjudication, UsedEvidence};
    use crate::ids::{ConclusionId, ConflictId, EvidenceId, Hash32, SubQuestionId};
    use crate::rules::{self, AuthorityTable, Components, Mode, SourceType, Stance, Thresholds};
    use crate::rules::{Verdict, VerdictRule, Weights};

    /// `conflict_resolved` before who decided was recorded.
    #[derive(Serialize, Deserialize)]
    pub(super) struct ConflictResolved {
        conflict_id: ConflictId,
        outcome: event::HumanOutcome,
        reason: String,
        previous_outcome: Option<event::HumanOutcome>,
    }

    impl From<ConflictResolved> for event::ConflictResolved {
        fn from(e: ConflictResolved) -> Self {
            event::ConflictResolved {
                conflict_id: e.conflict_id,
                outcome: e.outcome,
                reason: e.reason,
                previous_outcome: e.previous_outcome,
                decided_by: None,
            }
        }
    }

    impl From<&event::ConflictResolved> for ConflictResolved {
        fn from(e: &event::ConflictResolved) -> Self {
            ConflictResolved {
                conflict_id: e.conflict_id.clone(),
                outcome: e.outcome,
                reason: e.reason.clone(),
                previous_outcome: e.previous_outcome,
            }
        }
    }

    /// `adjudication_appealed` before who decided was recorded.
    #[derive(Serialize, Deserialize)]
    pub(super) struct AdjudicationAppealed {
        conflict_id: ConflictId,
        overturned_tier: Tier,
        overturned_winner: Option<event::Side>,
        outcome: event::HumanOutcome,
        reason: String,
        previous_outcome: Option<event::HumanOutcome>,
    }

    impl From<AdjudicationAppealed> for event::AdjudicationAppealed {
        fn from(e: AdjudicationAppealed) -> Self {
            event::AdjudicationAppealed {
                conflict_id: e.conflict_id,
                overturned_tier: e.overturned_tier,
                overturned_winner: e.overturned_winner,
                outcome: e.outcome,
                reason: e.reason,
                previous_outcome: e.previous_outcome,
                decided_by: None,
            }
        }
    }

    impl From<&event::AdjudicationAppealed> for AdjudicationAppealed {
        fn from(e: &event::AdjudicationAppealed) -> Self {
            AdjudicationAppealed {
                conflict_id: e.conflict_id.clone(),
                overturned_tier: e.overturned_tier,
                overturned_winner: e.overturned_winner,
                outcome: e.outcome,
                reason: e.reason.clone(),
                previous_outcome: e.previous_outcome,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct RuleSet {
        id: String,
        weights: Weights,
        half_life_days: f64,
        authority: AuthorityTable,
        thresholds: Thresholds,
    }

    impl From<RuleSet> for rules::RuleSet {
        fn from(r: RuleSet) -> Self {
            rules::RuleSet {
                id: r.id,
                weights: r.weights,
                half_life_days: r.half_life_days,
                authority: r.authority,
                thresholds: r.thresholds,
                v2: None,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct TaskOpened {
        task_id: String,
        question: String,
        constraints: Vec<String>,
        research_date: NaiveDate,
        mode: Mode,
        rules: RuleSet,
    }

    impl From<TaskOpened> for event::TaskOpened {
        fn from(t: TaskOpened) -> Self {
            event::TaskOpened {
                task_id: t.task_id,
                question: t.question,
                constraints: t.constraints,
                research_date: t.research_date,
                mode: t.mode,
                rules: t.rules.into(),
                conflict_decisions: None,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct EvidenceAdded {
        evidence_id: EvidenceId,
        origin: String,
        source: String,
        url: Option<String>,
        publish_date: NaiveDate,
        publish_date_defaulted: bool,
        source_type: SourceType,
        citation_count: Option<u64>,
        summary: String,
        content_hash: Hash32,
        relevance: f64,
        relevance_basis: RelevanceBasis,
        stance: Option<Stance>,
        sub_question: Option<SubQuestionId>,
        found_by: Option<FoundBy>,
        authority: f64,
        reliability: f64,
        age_days: i64,
        recency: f64,
    }

    impl From<EvidenceAdded> for event::EvidenceAdded {
        fn from(e: EvidenceAdded) -> Self {
            event::EvidenceAdded {
                evidence_id: e.evidence_id,
                origin: e.origin,
                source: e.source,
                url: e.url,
                publish_date: e.publish_date,
                publish_date_defaulted: e.publish_date_defaulted,
                source_type: e.source_type,
                citation_count: e.citation_count,
                summary: e.summary,
                content_hash: e.content_hash,
                relevance: e.relevance,
                relevance_basis: e.relevance_basis,
                stance: e.stance,
                sub_question: e.sub_question,
                found_by: e.found_by,
                authority: e.authority,
                reliability: e.reliability,
                age_days: e.age_days,
                recency: e.recency,
                relevance_inputs: None,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct Adjudication {
        conflict_id: ConflictId,
        scope: Option<SubQuestionId>,
        supersedes: Option<ConflictId>,
        participants: Vec<Participant>,
        tier: Tier,
        winner: Option<event::Side>,
        compared: Compared,
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct ConflictsAdjudicated {
        adjudications: Vec<Adjudication>,
        dissolved: Vec<ConflictId>,
        unchanged: Vec<ConflictId>,
    }

    impl From<ConflictsAdjudicated> for event::ConflictsAdjudicated {
        fn from(c: ConflictsAdjudicated) -> Self {
            event::ConflictsAdjudicated {
                adjudications: c
                    .adjudications
                    .into_iter()
                    .map(|a| event::Adjudication {
                        conflict_id: a.conflict_id,
                        scope: a.scope,
                        supersedes: a.supersedes,
                        participants: a.participants,
                        tier: a.tier,
                        winner: a.winner,
                        compared: a.compared,
                        v2: None,
                    })
                    .collect(),
                dissolved: c.dissolved,
                unchanged: c.unchanged,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(super) struct ConclusionIssued {
        conclusion_id: ConclusionId,
        stance: Verdict,
        rule: VerdictRule,
        confidence: f64,
        components: Components,
        counts: StanceCounts,
        distinct_sources: u64,
        evidence: Vec<UsedEvidence>,
        adjudications: Vec<UsedAdjudication>,
        rules: RuleSet,
        client_share: f64,
        supersedes: Option<ConclusionId>,
    }

    impl From<ConclusionIssued> for event::ConclusionIssued {
        fn from(c: ConclusionIssued) -> Self {
            event::ConclusionIssued {
                conclusion_id: c.conclusion_id,
                stance: c.stance,
                rule: c.rule,
                confidence: c.confidence,
                components: c.components,
                counts: c.counts,
                distinct_sources: c.distinct_sources,
                evidence: c.evidence,
                adjudications: c.adjudications,
                rules: c.rules.into(),
                client_share: c.client_share,
                supersedes: c.supersedes,
                v2: None,
            }
        }
    }

    impl From<&rules::RuleSet> for RuleSet {
        fn from(r: &rules::RuleSet) -> Self {
            RuleSet {
                id: r.id.clone(),
                weights: r.weights,
                half_life_days: r.half_life_days,
                authority: r.authority,
                thresholds: r.thresholds,
            }
        }
    }

    impl From<&event::TaskOpened> for TaskOpened {
        fn from(t: &event::TaskOpened) -> Self {
            TaskOpened {
                task_id: t.task_id.clone(),
                question: t.question.clone(),
                constraints: t.constraints.clone(),
                research_date: t.research_date,
                mode: t.mode,
                rules: (&t.rules).into(),
            }
        }
    }

    impl From<&event::EvidenceAdded> for EvidenceAdded {
        fn from(e: &event::EvidenceAdded) -> Self {
            EvidenceAdded {
                evidence_id: e.evidence_id.clone(),
                origin: e.origin.clone(),
                source: e.source.clone(),
                url: e.url.clone(),
                publish_date: e.publish_date,
                publish_date_defaulted: e.publish_date_defaulted,
                source_type: e.source_type,
                citation_count: e.citation_count,
                summary: e.summary.clone(),
                content_hash: e.content_hash,
                relevance: e.relevance,
                relevance_basis: e.relevance_basis,
                stance: e.stance,
                sub_question: e.sub_question.clone(),
                found_by: e.found_by.clone(),
                authority: e.authority,
                reliability: e.reliability,
                age_days: e.age_days,
                recency: e.recency,
            }
        }
    }

    impl From<&event::ConflictsAdjudicated> for ConflictsAdjudicated {
        fn from(c: &event::ConflictsAdjudicated) -> Self {
            ConflictsAdjudicated {
                adjudications: c
                    .adjudications
                    .iter()
                    .map(|a| Adjudication {
                        conflict_id: a.conflict_id.clone(),
                        scope: a.scope.clone(),
                        supersedes: a.supersedes.clone(),
                        participants: a.participants.clone(),
                        tier: a.tier,
                        winner: a.winner,
                        compared: a.compared.clone(),
                    })
                    .collect(),
                dissolved: c.dissolved.clone(),
                unchanged: c.unchanged.clone(),
            }
        }
    }

    impl From<&event::ConclusionIssued> for ConclusionIssued {
        fn from(c: &event::ConclusionIssued) -> Self {
            ConclusionIssued {
                conclusion_id: c.conclusion_id.clone(),
                stance: c.stance,
                rule: c.rule,
                confidence: c.confidence,
                components: c.components,
                counts: c.counts,
                distinct_sources: c.distinct_sources,
                evidence: c.evidence.clone(),
                adjudications: c.adjudications.clone(),
                rules: (&c.rules).into(),
                client_share: c.client_share,
                supersedes: c.supersedes.clone(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EVENT_KINDS, TaskClosed};

    #[test]
    fn encoding_starts_with_the_schema_version() {
        let event = Event::TaskClosed(TaskClosed {
            reason: Some("done".into()),
        });
        let bytes = encode(&event);
        assert_eq!(&bytes[..2], &[1, 0]);
        assert_eq!(decode("task_closed", &bytes), Ok(event));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert_eq!(decode("task_closed", &[1]), Err(DecodeError::TooShort));
        assert_eq!(
            decode("task_closed", &[9, 0, 0]),
            Err(DecodeError::UnknownSchemaVersion { version: 9 })
        );
        assert_eq!(
            decode("nonsense", &[1, 0, 0]),
            Err(DecodeError::UnknownKind {
                kind: "nonsense".into()
            })
        );
        assert_eq!(
            decode("task_closed", &[1, 0, 0, 7]),
            Err(DecodeError::TrailingBytes {
                kind: "task_closed",
                count: 1
            })
        );
        assert!(matches!(
            decode("task_closed", &[1, 0, 5]),
            Err(DecodeError::Malformed { .. })
        ));
        for kind in EVENT_KINDS {
            assert!(
                decode(kind, &[1, 0]).is_err(),
                "{kind} decoded from nothing"
            );
        }
    }
}
