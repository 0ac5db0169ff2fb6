//! The objects a task is made of, as GraphQL shows them: evidence, conflicts, the decision
//! matrix, conclusions, explanations and the why-graph.
//!
//! Each is built from the research domain's read models (`research::views`, the task state and
//! `projections::why`) with the SPEC §4 field names in camelCase. Every fact carries the event
//! that established it — `seq`, stream `version`, `hash`, `actor`, `recordedAt` — so a dashboard
//! can link each one to the audit trail and an auditor can check it in the ledger.

use std::sync::Arc;

use async_graphql::{ComplexObject, Context, ID, Json, SimpleObject};
use chrono::{DateTime, Utc};
use serde_json::Value;
use service::ServiceError;
use service::projections::{WhyGraph, WhyNode};
use service::research::event::{DecisionMatrixBuilt, ExplanationRecorded};
use service::research::ids::Cite as DomainCite;
use service::research::state::{
    ConclusionRecord, ConflictRecord, EvidenceRecord, Provenance as DomainProvenance,
};
use service::research::views::{ConflictView, EvidenceView};
use service::research::{Hash32, TaskState};

use crate::context;
use crate::enums::{
    EdgeKind, EvidenceStatus, HumanDecisionKind, HumanOutcome, RelevanceBasis, Side, SourceType,
    Stance, Tier, Verdict, VerdictRule,
};
use crate::error::blocking;
use crate::limits::STORAGE_READ_POINTS;

/// JSON of something serialisable; `null` if it cannot be (it always can: these are plain
/// data types).
pub(crate) fn json_of<T: serde::Serialize>(value: &T) -> Json<Value> {
    Json(serde_json::to_value(value).unwrap_or(Value::Null))
}

/// A reference to an event: where it is in the ledger and in its task's stream.
#[derive(SimpleObject, Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cite {
    /// Its position in the ledger.
    pub(crate) seq: u64,
    /// Its position in the task's stream.
    pub(crate) version: u64,
    /// Its hash (hex).
    pub(crate) hash: String,
}

impl From<&DomainCite> for Cite {
    fn from(cite: &DomainCite) -> Self {
        Cite {
            seq: cite.seq,
            version: cite.version,
            hash: cite.hash.to_hex(),
        }
    }
}

/// The event that established a fact, and who caused it when.
#[derive(SimpleObject, Debug, Clone, PartialEq, Eq)]
pub(crate) struct Provenance {
    /// Its position in the ledger.
    pub(crate) seq: u64,
    /// Its position in the task's stream.
    pub(crate) version: u64,
    /// Its hash (hex).
    pub(crate) hash: String,
    /// Who caused it.
    pub(crate) actor: String,
    /// When the ledger recorded it.
    pub(crate) recorded_at: DateTime<Utc>,
}

impl From<&DomainProvenance> for Provenance {
    fn from(p: &DomainProvenance) -> Self {
        Provenance {
            seq: p.cite.seq,
            version: p.cite.version,
            hash: p.cite.hash.to_hex(),
            actor: p.actor.clone(),
            recorded_at: p.recorded_at,
        }
    }
}

/// A sub-question: a scope evidence can answer.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct SubQuestion {
    /// Its id (`sq-N`).
    pub(crate) id: ID,
    /// Its text.
    pub(crate) text: String,
    /// The event that added it.
    pub(crate) added: Provenance,
}

/// Where a search result came from.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct FoundBy {
    /// The search.
    pub(crate) search_id: ID,
    /// The result's id at its source.
    pub(crate) result_id: String,
}

/// An evidence item with its scores and its status, `OVERRULED` included.
#[derive(SimpleObject, Debug, Clone)]
#[graphql(complex)]
pub(crate) struct Evidence {
    /// Its id (`ev-N`).
    pub(crate) evidence_id: ID,
    /// The source that returned it, or `client` when a client added it.
    pub(crate) origin: String,
    /// The publisher, normalised.
    pub(crate) source: String,
    /// Where it can be read.
    pub(crate) url: Option<String>,
    /// Publish date, `YYYY-MM-DD`.
    pub(crate) publish_date: String,
    /// Whether the publish date is a default supplied at ingest.
    pub(crate) publish_date_defaulted: bool,
    /// The kind of publisher.
    pub(crate) source_type: SourceType,
    /// Citations, when known.
    pub(crate) citation_count: Option<u64>,
    /// At most 800 characters.
    pub(crate) summary: String,
    /// blake3 of the full text (hex).
    pub(crate) content_hash: String,
    /// Relevance to the main question, in [0, 1].
    pub(crate) relevance: f64,
    /// How the relevance was obtained.
    pub(crate) relevance_basis: RelevanceBasis,
    /// Stance toward the main question, when known.
    pub(crate) stance: Option<Stance>,
    /// The sub-question it answers (its scope); none for the main question.
    pub(crate) sub_question: Option<ID>,
    /// Its status.
    pub(crate) status: EvidenceStatus,
    /// Authority of its source type under the task's rules.
    pub(crate) authority: f64,
    /// Reliability pre-score (orders candidates; not in the verdict).
    pub(crate) reliability: f64,
    /// `0.5 ^ (ageDays / halfLifeDays)`.
    pub(crate) recency: f64,
    /// Whole days from its publish date to the research date.
    pub(crate) age_days: i64,
    /// The search that found it.
    pub(crate) found_by: Option<FoundBy>,
    /// The reason of the screening in force.
    pub(crate) screening_reason: Option<String>,
    /// The reason of its retraction.
    pub(crate) retraction_reason: Option<String>,
    /// The event that added it.
    pub(crate) added: Provenance,
    /// The event that gave it its recorded status (its addition, last screening or retraction).
    pub(crate) status_set_by: Provenance,
    #[graphql(skip)]
    hash: Hash32,
}

impl Evidence {
    pub(crate) fn of(view: &EvidenceView, record: &EvidenceRecord) -> Self {
        Evidence {
            evidence_id: ID(view.item.evidence_id.to_string()),
            origin: view.item.origin.clone(),
            source: view.item.source.clone(),
            url: view.item.url.clone(),
            publish_date: view.item.publish_date.to_string(),
            publish_date_defaulted: view.item.publish_date_defaulted,
            source_type: view.item.source_type.into(),
            citation_count: view.item.citation_count,
            summary: view.item.summary.clone(),
            content_hash: view.item.content_hash.to_hex(),
            relevance: view.item.relevance,
            relevance_basis: view.item.relevance_basis.into(),
            stance: view.item.stance.map(Into::into),
            sub_question: view.item.sub_question.as_ref().map(|s| ID(s.to_string())),
            status: view.status.into(),
            authority: view.item.authority,
            reliability: view.item.reliability,
            recency: view.item.recency,
            age_days: view.item.age_days,
            found_by: view.item.found_by.as_ref().map(|f| FoundBy {
                search_id: ID(f.search_id.to_string()),
                result_id: f.result_id.clone(),
            }),
            screening_reason: view.screening_reason.clone(),
            retraction_reason: view.retraction_reason.clone(),
            added: Provenance::from(&record.provenance),
            status_set_by: Provenance::from(record.status_provenance()),
            hash: view.item.content_hash,
        }
    }
}

#[ComplexObject]
impl Evidence {
    /// The full text, read from the content store and checked against `contentHash`.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn content(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        let service = context::service(ctx)?.clone();
        let hash = self.hash;
        blocking(move || {
            let bytes = service
                .content(&hash)
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        })
        .await
    }
}

/// The values the tiers of an adjudication compared.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Compared {
    /// Highest authority among the supporting items.
    pub(crate) supports_authority: f64,
    /// Highest authority among the opposing items.
    pub(crate) opposes_authority: f64,
    /// The gap between the two.
    pub(crate) authority_gap: f64,
    /// Latest publish date among the supporting items.
    pub(crate) supports_latest: String,
    /// Latest publish date among the opposing items.
    pub(crate) opposes_latest: String,
    /// Days between the two latest dates.
    pub(crate) recency_gap_days: i64,
}

/// An item taking part in a conflict.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Participant {
    /// The item.
    pub(crate) evidence_id: ID,
    /// Its side.
    pub(crate) side: Side,
    /// Its source.
    pub(crate) source: String,
    /// Its publish date.
    pub(crate) publish_date: String,
    /// Its authority.
    pub(crate) authority: f64,
}

/// A decision on a conflict, a person's or an assistant's.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct HumanDecision {
    /// A resolution of a pending conflict, or an appeal of an automatic adjudication.
    pub(crate) kind: HumanDecisionKind,
    /// The decision.
    pub(crate) outcome: HumanOutcome,
    /// Why.
    pub(crate) reason: String,
    /// Who decided.
    pub(crate) actor: String,
    /// `person` or `assistant`; null for decisions recorded before the ledger told them apart.
    pub(crate) decided_by: Option<String>,
    /// The client the decision came through (`rest`, `graphql`, `cli`, an MCP client's name).
    pub(crate) decided_via: Option<String>,
    /// Whether its conflict was superseded by a fresh adjudication, so it no longer applies.
    pub(crate) superseded: bool,
    /// The event that recorded it.
    pub(crate) decided: Provenance,
}

impl HumanDecision {
    fn of(
        h: &service::research::views::HumanDecisionView,
        recorded: &service::research::state::HumanDecision,
    ) -> Self {
        HumanDecision {
            kind: h.kind.into(),
            outcome: h.outcome.into(),
            reason: h.reason.clone(),
            actor: h.actor.clone(),
            decided_by: h.decided_by.map(|d| d.name().to_owned()),
            decided_via: h.decided_via.clone(),
            superseded: h.superseded,
            decided: Provenance::from(&recorded.provenance),
        }
    }
}

/// One item of a divergence summary.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct DivergenceItem {
    /// The item.
    pub(crate) evidence_id: ID,
    /// Its source.
    pub(crate) source: String,
    /// Its source type.
    pub(crate) source_type: SourceType,
    /// Its publish date.
    pub(crate) publish_date: String,
    /// Its authority.
    pub(crate) authority: f64,
    /// Its summary.
    pub(crate) summary: String,
}

/// What a person needs to decide a pending conflict.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Divergence {
    /// The sub-question's text, when the scope is one.
    pub(crate) scope_text: Option<String>,
    /// The supporting items.
    pub(crate) supports: Vec<DivergenceItem>,
    /// The opposing items.
    pub(crate) opposes: Vec<DivergenceItem>,
}

/// One adjudication of a scope, what the rules said and what people decided since.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Conflict {
    /// Its id (`cf-N`).
    pub(crate) conflict_id: ID,
    /// Its scope: a sub-question, or none for the main question.
    pub(crate) scope: Option<ID>,
    /// `AUTHORITY`, `RECENCY`, `PENDING`, or `HUMAN` once a person decided it.
    pub(crate) tier: Tier,
    /// The winning side in force; none while pending or when both stand.
    pub(crate) winner: Option<Side>,
    /// The human decision in force (`BOTH_STAND` explains a null winner).
    pub(crate) resolution: Option<HumanOutcome>,
    /// The tier the rules gave it: `PENDING` ones are decided with `resolveConflict`,
    /// `AUTHORITY` and `RECENCY` ones appealed with `appealAdjudication`.
    pub(crate) automatic_tier: Tier,
    /// The winner the rules gave it.
    pub(crate) automatic_winner: Option<Side>,
    /// What the tiers compared.
    pub(crate) compared: Compared,
    /// The items on both sides.
    pub(crate) participants: Vec<Participant>,
    /// The adjudication that replaced it after its scope's evidence changed.
    pub(crate) superseded_by: Option<ID>,
    /// Whether its scope stopped having items on both sides.
    pub(crate) dissolved: bool,
    /// Whether it is in force.
    pub(crate) current: bool,
    /// Every human decision on it, oldest first.
    pub(crate) human_decisions: Vec<HumanDecision>,
    /// Both sides' items, sources, dates and summaries, while it waits for a person.
    pub(crate) divergence: Option<Divergence>,
    /// The event of the adjudication.
    pub(crate) adjudicated: Provenance,
}

impl Conflict {
    pub(crate) fn of(view: &ConflictView, record: &ConflictRecord, state: &TaskState) -> Self {
        let c = &view.compared;
        let divergence = if record.is_pending() {
            state.divergence(&view.conflict_id).map(|d| {
                let items = |items: &[service::research::views::DivergenceItem]| {
                    items
                        .iter()
                        .map(|i| DivergenceItem {
                            evidence_id: ID(i.evidence_id.to_string()),
                            source: i.source.clone(),
                            source_type: i.source_type.into(),
                            publish_date: i.publish_date.to_string(),
                            authority: i.authority,
                            summary: i.summary.clone(),
                        })
                        .collect()
                };
                Divergence {
                    scope_text: d.scope_text.clone(),
                    supports: items(&d.supports),
                    opposes: items(&d.opposes),
                }
            })
        } else {
            None
        };
        Conflict {
            conflict_id: ID(view.conflict_id.to_string()),
            scope: view.scope.as_ref().map(|s| ID(s.to_string())),
            tier: view.tier.into(),
            winner: view.winner.map(Into::into),
            resolution: view.resolution.map(Into::into),
            automatic_tier: record.adjudication.tier.into(),
            automatic_winner: record.adjudication.winner.map(Into::into),
            compared: Compared {
                supports_authority: c.supports_authority,
                opposes_authority: c.opposes_authority,
                authority_gap: c.authority_gap,
                supports_latest: c.supports_latest.to_string(),
                opposes_latest: c.opposes_latest.to_string(),
                recency_gap_days: c.recency_gap_days,
            },
            participants: view
                .participants
                .iter()
                .map(|p| Participant {
                    evidence_id: ID(p.evidence_id.to_string()),
                    side: p.side.into(),
                    source: p.source.clone(),
                    publish_date: p.publish_date.to_string(),
                    authority: p.authority,
                })
                .collect(),
            superseded_by: view.superseded_by.as_ref().map(|s| ID(s.to_string())),
            dissolved: view.dissolved,
            current: view.current,
            human_decisions: view
                .human_decisions
                .iter()
                .zip(&record.human)
                .map(|(h, recorded)| HumanDecision::of(h, recorded))
                .collect(),
            divergence,
            adjudicated: Provenance::from(&record.provenance),
        }
    }
}

/// A row of the decision matrix.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct MatrixRow {
    /// The item.
    pub(crate) evidence_id: ID,
    /// Its source.
    pub(crate) source: String,
    /// Its source type.
    pub(crate) source_type: SourceType,
    /// Its authority.
    pub(crate) authority: f64,
    /// Its reliability pre-score.
    pub(crate) reliability: f64,
    /// Its relevance.
    pub(crate) relevance: f64,
    /// Its recency.
    pub(crate) recency: f64,
    /// Its stance, when known.
    pub(crate) stance: Option<Stance>,
    /// Its status when the matrix was built.
    pub(crate) status: EvidenceStatus,
}

/// Aggregates over the items of one stance a conclusion would use.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct StanceAggregate {
    /// The stance.
    pub(crate) stance: Stance,
    /// How many items.
    pub(crate) items: u64,
    /// How many distinct sources.
    pub(crate) distinct_sources: u64,
    /// Mean relevance (0 with no items).
    pub(crate) mean_relevance: f64,
    /// Mean recency (0 with no items).
    pub(crate) mean_recency: f64,
    /// Mean reliability (0 with no items).
    pub(crate) mean_reliability: f64,
    /// Highest authority (0 with no items).
    pub(crate) max_authority: f64,
}

/// The decision matrix: a row per item, aggregates per stance.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct DecisionMatrix {
    /// Its id.
    pub(crate) matrix_id: ID,
    /// A row per item, in the order added.
    pub(crate) rows: Vec<MatrixRow>,
    /// Supports, opposes, neutral.
    pub(crate) aggregates: Vec<StanceAggregate>,
    /// The event that built it.
    pub(crate) built: Provenance,
}

impl DecisionMatrix {
    pub(crate) fn of(matrix: &DecisionMatrixBuilt, provenance: &DomainProvenance) -> Self {
        DecisionMatrix {
            matrix_id: ID(matrix.matrix_id.to_string()),
            rows: matrix
                .rows
                .iter()
                .map(|r| MatrixRow {
                    evidence_id: ID(r.evidence_id.to_string()),
                    source: r.source.clone(),
                    source_type: r.source_type.into(),
                    authority: r.authority,
                    reliability: r.reliability,
                    relevance: r.relevance,
                    recency: r.recency,
                    stance: r.stance.map(Into::into),
                    status: r.status.into(),
                })
                .collect(),
            aggregates: matrix
                .aggregates
                .iter()
                .map(|a| StanceAggregate {
                    stance: a.stance.into(),
                    items: a.items,
                    distinct_sources: a.distinct_sources,
                    mean_relevance: a.mean_relevance,
                    mean_recency: a.mean_recency,
                    mean_reliability: a.mean_reliability,
                    max_authority: a.max_authority,
                })
                .collect(),
            built: Provenance::from(provenance),
        }
    }
}

/// The four components of a confidence, unrounded.
#[derive(SimpleObject, Debug, Clone, Copy)]
pub(crate) struct Components {
    /// Mean relevance of the evidence used.
    pub(crate) relevance: f64,
    /// Share of the larger side among the items that take one.
    pub(crate) consistency: f64,
    /// Mean recency of the evidence used.
    pub(crate) recency: f64,
    /// Distinct sources over the number that gives full diversity, at most 1.
    pub(crate) diversity: f64,
}

/// An item a conclusion used.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct UsedEvidence {
    /// The item.
    pub(crate) evidence_id: ID,
    /// Its content hash, so the text the verdict rested on can be checked.
    pub(crate) content_hash: String,
    /// Its stance.
    pub(crate) stance: Stance,
    /// Its source.
    pub(crate) source: String,
    /// Who brought it in: a source's name or `client`.
    pub(crate) origin: String,
}

/// An adjudication in force when a conclusion was issued.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct UsedAdjudication {
    /// The conflict.
    pub(crate) conflict_id: ID,
    /// Its tier then.
    pub(crate) tier: Tier,
    /// Its winner then.
    pub(crate) winner: Option<Side>,
    /// The human decision in force then.
    pub(crate) resolution: Option<HumanOutcome>,
}

/// What made a conclusion stale: the first event after it that changed its inputs.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct StaleCause {
    /// The event kind.
    pub(crate) kind: String,
    /// What it concerned (an evidence or conflict id).
    pub(crate) subject: String,
    /// The event.
    pub(crate) event: Provenance,
}

/// A conclusion: the conclusion card, the single source of truth for a verdict, with its
/// history marks and the event that issued it.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Conclusion {
    /// Its id (`cl-N`).
    pub(crate) conclusion_id: ID,
    /// The verdict.
    pub(crate) stance: Verdict,
    /// The clause of the stance rule that gave it.
    pub(crate) rule: VerdictRule,
    /// The confidence, unrounded.
    pub(crate) confidence: f64,
    /// The components, unrounded.
    pub(crate) components: Components,
    /// Distinct sources among the items used.
    pub(crate) distinct_sources: u64,
    /// The items used: adopted, not overruled, not retracted.
    pub(crate) evidence: Vec<UsedEvidence>,
    /// Every adjudication in force when it was issued.
    pub(crate) adjudications: Vec<UsedAdjudication>,
    /// The rule set applied, every parameter.
    pub(crate) rules: Json<Value>,
    /// Share of the items used that clients added rather than sources returned.
    pub(crate) client_share: f64,
    /// Whether its inputs changed after it was issued.
    pub(crate) stale: bool,
    /// The first change, when it is stale.
    pub(crate) stale_cause: Option<StaleCause>,
    /// The conclusion it superseded.
    pub(crate) supersedes: Option<ID>,
    /// The conclusion that superseded it.
    pub(crate) superseded_by: Option<ID>,
    /// Whether it is the task's current conclusion (in the state it was read from).
    pub(crate) current: bool,
    /// The card as markdown.
    pub(crate) markdown: String,
    /// The event that issued it.
    pub(crate) issued: Provenance,
}

impl Conclusion {
    pub(crate) fn of(record: &ConclusionRecord, state: &TaskState) -> Self {
        let issued = &record.issued;
        let current = state
            .current_conclusion()
            .is_some_and(|c| c.issued.conclusion_id == issued.conclusion_id);
        let markdown = state
            .conclusion_card(Some(&issued.conclusion_id))
            .map(|card| card.markdown)
            .unwrap_or_default();
        Conclusion {
            conclusion_id: ID(issued.conclusion_id.to_string()),
            stance: issued.stance.into(),
            rule: issued.rule.into(),
            confidence: issued.confidence,
            components: Components {
                relevance: issued.components.relevance,
                consistency: issued.components.consistency,
                recency: issued.components.recency,
                diversity: issued.components.diversity,
            },
            distinct_sources: issued.distinct_sources,
            evidence: issued
                .evidence
                .iter()
                .map(|e| UsedEvidence {
                    evidence_id: ID(e.evidence_id.to_string()),
                    content_hash: e.content_hash.to_hex(),
                    stance: e.stance.into(),
                    source: e.source.clone(),
                    origin: e.origin.clone(),
                })
                .collect(),
            adjudications: issued
                .adjudications
                .iter()
                .map(|a| UsedAdjudication {
                    conflict_id: ID(a.conflict_id.to_string()),
                    tier: a.tier.into(),
                    winner: a.winner.map(Into::into),
                    resolution: a.resolution.map(Into::into),
                })
                .collect(),
            rules: json_of(&issued.rules),
            client_share: issued.client_share,
            stale: record.stale_since.is_some(),
            stale_cause: record.stale_since.as_ref().map(|s| StaleCause {
                kind: s.kind.clone(),
                subject: s.subject.clone(),
                event: Provenance::from(&s.provenance),
            }),
            supersedes: issued.supersedes.as_ref().map(|c| ID(c.to_string())),
            superseded_by: record.superseded_by.as_ref().map(|c| ID(c.to_string())),
            current,
            markdown,
            issued: Provenance::from(&record.provenance),
        }
    }
}

/// A line of an explanation and the events it rests on.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct ExplanationLine {
    /// Its index in the explanation.
    pub(crate) index: u32,
    /// Index of the line it hangs under; none for the root.
    pub(crate) parent: Option<u32>,
    /// The line.
    pub(crate) text: String,
    /// The events it rests on.
    pub(crate) cites: Vec<Cite>,
}

/// A recorded explanation of a conclusion, every line citing ledger events.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Explanation {
    /// Its id.
    pub(crate) explanation_id: ID,
    /// The conclusion it explains.
    pub(crate) conclusion_id: ID,
    /// The lines as a tree: a flat list with parent indexes, parents first.
    pub(crate) lines: Vec<ExplanationLine>,
    /// The explanation as markdown.
    pub(crate) markdown: String,
    /// The event that recorded it.
    pub(crate) recorded: Provenance,
}

impl Explanation {
    pub(crate) fn of(explanation: &ExplanationRecorded, provenance: &DomainProvenance) -> Self {
        Explanation {
            explanation_id: ID(explanation.explanation_id.to_string()),
            conclusion_id: ID(explanation.conclusion_id.to_string()),
            lines: explanation
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| ExplanationLine {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    parent: n.parent,
                    text: n.text.clone(),
                    cites: n.cites.iter().map(Cite::from).collect(),
                })
                .collect(),
            markdown: explanation.markdown(),
            recorded: Provenance::from(provenance),
        }
    }
}

/// A step the workflow expects next, and why.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct PendingAction {
    /// The tool to call (its MCP name; each has a mutation of the same meaning).
    pub(crate) tool: String,
    /// Why it is due.
    pub(crate) reason: String,
}

/// One fact of a why-graph and the event that established it.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct WhyGraphNode {
    /// Unique within the graph: `conclusion/cl-1`, `component/relevance`, `evidence/ev-3`,
    /// `conflict/cf-2`, `human/17`.
    pub(crate) id: ID,
    /// One line for people.
    pub(crate) label: String,
    /// `conclusion`, `component`, `evidence`, `conflict` or `human_decision`.
    pub(crate) kind: String,
    /// The event that established it.
    pub(crate) cite: Cite,
    /// Who caused that event.
    pub(crate) actor: String,
    /// When the ledger recorded it.
    pub(crate) recorded_at: DateTime<Utc>,
    /// Its values, by kind (the fields of `projections::NodeDetail`).
    pub(crate) detail: Json<Value>,
}

/// An edge of a why-graph, from what is explained to what explains it.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct WhyGraphEdge {
    /// The node explained.
    pub(crate) from: ID,
    /// The node that explains it.
    pub(crate) to: ID,
    /// How.
    pub(crate) kind: EdgeKind,
}

/// What a conclusion rests on: nodes and edges from it to its components, evidence,
/// adjudications and human decisions, as the task stood when it was issued.
#[derive(SimpleObject, Debug, Clone)]
#[graphql(name = "WhyGraph")]
pub(crate) struct WhyGraphView {
    /// The conclusion explained.
    pub(crate) conclusion_id: ID,
    /// The task's version when it was issued.
    pub(crate) as_of_version: u64,
    /// The id of the conclusion's node, where every walk starts.
    pub(crate) root: ID,
    /// The nodes; the conclusion's first.
    pub(crate) nodes: Vec<WhyGraphNode>,
    /// The edges.
    pub(crate) edges: Vec<WhyGraphEdge>,
}

fn why_node(node: &WhyNode) -> WhyGraphNode {
    let detail = serde_json::to_value(&node.detail).unwrap_or(Value::Null);
    let kind = detail
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    WhyGraphNode {
        id: ID(node.id.clone()),
        label: node.label.clone(),
        kind,
        cite: Cite::from(&node.cite),
        actor: node.actor.clone(),
        recorded_at: node.recorded_at,
        detail: Json(detail),
    }
}

impl From<&WhyGraph> for WhyGraphView {
    fn from(graph: &WhyGraph) -> Self {
        WhyGraphView {
            conclusion_id: ID(graph.conclusion_id.to_string()),
            as_of_version: graph.as_of_version,
            root: ID(graph.root.clone()),
            nodes: graph.nodes.iter().map(why_node).collect(),
            edges: graph
                .edges
                .iter()
                .map(|e| WhyGraphEdge {
                    from: ID(e.from.clone()),
                    to: ID(e.to.clone()),
                    kind: e.kind.into(),
                })
                .collect(),
        }
    }
}

/// Every evidence item of a state as GraphQL shows it, in the order added.
pub(crate) fn evidence_of(state: &TaskState) -> Vec<Evidence> {
    // Both lists are the state's items in the order added.
    state
        .evidence_views()
        .iter()
        .zip(state.evidence())
        .map(|(view, record)| Evidence::of(view, record))
        .collect()
}

/// Every conflict of a state as GraphQL shows it.
pub(crate) fn conflicts_of(state: &Arc<TaskState>, current_only: bool) -> Vec<Conflict> {
    state
        .conflict_views()
        .iter()
        .zip(state.conflicts())
        .filter(|(view, _)| !current_only || view.current)
        .map(|(view, record)| Conflict::of(view, record, state))
        .collect()
}
