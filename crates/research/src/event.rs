//! The event vocabulary of a research task, in the past tense.
//!
//! Events are facts: once recorded they are never rewritten, and everything the service shows is
//! folded from them. Derived events (adjudications, matrices, conclusions, syntheses,
//! explanations) carry every value they derived, so an auditor can read a verdict without
//! recomputing it and a replay can recompute it to check it.
//!
//! The JSON form (`serde_json`) is the view for people and auditors: internally tagged by
//! `type`. The stored form is [`crate::codec`]: the payload alone, in postcard, behind a schema
//! version, with the kind kept by the ledger beside it.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::ids::{
    Cite, ConclusionId, ConflictId, EvidenceId, ExplanationId, Hash32, MatrixId, SearchId,
    SubQuestionId, SynthesisId,
};
use crate::rules::{
    Components, Mode, RelevanceInputs, RuleSet, SourceType, Stance, Verdict, VerdictRule, Weights,
};

/// The origin of evidence a client added itself rather than a source returning it.
pub const ORIGIN_CLIENT: &str = "client";

/// Everything that can happen to a research task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The task was opened.
    TaskOpened(TaskOpened),
    /// Sub-questions were added.
    SubQuestionsExpanded(SubQuestionsExpanded),
    /// A search ran; its new results follow as `evidence_added`.
    SearchRecorded(SearchRecorded),
    /// An evidence item entered the task as a candidate.
    EvidenceAdded(EvidenceAdded),
    /// A candidate was adopted or rejected (or a screening was revised).
    EvidenceScreened(EvidenceScreened),
    /// An item was withdrawn.
    EvidenceRetracted(EvidenceRetracted),
    /// Adopted evidence was grouped into viewpoints.
    SynthesisRecorded(SynthesisRecorded),
    /// The conflict rules ran over every scope.
    ConflictsAdjudicated(ConflictsAdjudicated),
    /// A person decided a pending conflict.
    ConflictResolved(ConflictResolved),
    /// A person overturned (or confirmed) an automatic adjudication.
    AdjudicationAppealed(AdjudicationAppealed),
    /// The decision matrix was built.
    DecisionMatrixBuilt(DecisionMatrixBuilt),
    /// A conclusion was issued.
    ConclusionIssued(ConclusionIssued),
    /// A conclusion was explained.
    ExplanationRecorded(ExplanationRecorded),
    /// An external tool was called on the task's behalf.
    ExternalToolCalled(ExternalToolCalled),
    /// The task was closed.
    TaskClosed(TaskClosed),
}

/// Every event kind, as [`Event::kind`] names them.
pub const EVENT_KINDS: [&str; 15] = [
    "task_opened",
    "sub_questions_expanded",
    "search_recorded",
    "evidence_added",
    "evidence_screened",
    "evidence_retracted",
    "synthesis_recorded",
    "conflicts_adjudicated",
    "conflict_resolved",
    "adjudication_appealed",
    "decision_matrix_built",
    "conclusion_issued",
    "explanation_recorded",
    "external_tool_called",
    "task_closed",
];

impl Event {
    /// The stable snake_case kind the ledger stores beside the payload.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TaskOpened(_) => "task_opened",
            Event::SubQuestionsExpanded(_) => "sub_questions_expanded",
            Event::SearchRecorded(_) => "search_recorded",
            Event::EvidenceAdded(_) => "evidence_added",
            Event::EvidenceScreened(_) => "evidence_screened",
            Event::EvidenceRetracted(_) => "evidence_retracted",
            Event::SynthesisRecorded(_) => "synthesis_recorded",
            Event::ConflictsAdjudicated(_) => "conflicts_adjudicated",
            Event::ConflictResolved(_) => "conflict_resolved",
            Event::AdjudicationAppealed(_) => "adjudication_appealed",
            Event::DecisionMatrixBuilt(_) => "decision_matrix_built",
            Event::ConclusionIssued(_) => "conclusion_issued",
            Event::ExplanationRecorded(_) => "explanation_recorded",
            Event::ExternalToolCalled(_) => "external_tool_called",
            Event::TaskClosed(_) => "task_closed",
        }
    }

    /// Whether the event is derived by the rules from the state before it, so a replay can
    /// re-derive it (see [`crate::recheck`]).
    pub fn is_derived(&self) -> bool {
        matches!(
            self,
            Event::ConflictsAdjudicated(_)
                | Event::DecisionMatrixBuilt(_)
                | Event::ConclusionIssued(_)
                | Event::SynthesisRecorded(_)
                | Event::ExplanationRecorded(_)
        )
    }
}

/// The task was opened.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TaskOpened {
    /// The task's id, chosen by the caller; also its stream in the ledger.
    pub task_id: String,
    /// The main question.
    pub question: String,
    /// Constraints on the research, as given.
    pub constraints: Vec<String>,
    /// The date the research is done as of (UTC); recency counts from it.
    pub research_date: NaiveDate,
    /// How strictly the workflow is enforced.
    pub mode: Mode,
    /// The full parameter set, recorded verbatim.
    pub rules: RuleSet,
    /// Who may decide the task's conflicts: absent, anyone the role allows (a person or an
    /// assistant, each decision recorded as whose it was); [`ConflictDecisions::Person`], only a
    /// person. A part of schema version 3, left out of the JSON view when absent.
    #[serde(default)]
    pub conflict_decisions: Option<ConflictDecisions>,
}

/// Who may decide a task's conflicts, when the task restricts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictDecisions {
    /// Only a person: a decision an assistant sends is refused
    /// (`person_decision_required`); a person decides through an MCP elicitation, or with a
    /// reviewer's token over HTTP, GraphQL or the command line.
    Person,
}

impl ConflictDecisions {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            ConflictDecisions::Person => "person",
        }
    }
}

/// A sub-question and its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubQuestion {
    /// Its id, the scope of evidence that answers it.
    pub id: SubQuestionId,
    /// Its text.
    pub text: String,
}

/// Sub-questions were added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubQuestionsExpanded {
    /// The new sub-questions, in the order given.
    pub sub_questions: Vec<SubQuestion>,
}

/// One result of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchHit {
    /// The result's id at its source (a document id, a URL).
    pub result_id: String,
    /// The source that returned it.
    pub origin: String,
    /// The score the source gave it.
    pub raw_score: f64,
    /// The score normalised to [0, 1] by the retrieval side.
    pub normalised_score: f64,
    /// The evidence item it became, or the one it was folded into.
    pub evidence_id: EvidenceId,
    /// Whether its content was already in the task, so no item was added.
    pub folded: bool,
}

/// A search ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRecorded {
    /// Its id.
    pub search_id: SearchId,
    /// The query as sent.
    pub query: String,
    /// The sources asked.
    pub sources: Vec<String>,
    /// Identifies the index state the scores come from, since scores drift as a corpus grows.
    pub index_state: String,
    /// Every result, in rank order.
    pub results: Vec<SearchHit>,
}

/// How an item's relevance was obtained. It is recorded and never recomputed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RelevanceBasis {
    /// The source scored it.
    ScoredBySource,
    /// The client gave it.
    GivenByClient,
    /// IDF-weighted coverage of the question's terms ([`crate::rules::idf_coverage`]).
    IdfCoverage,
    /// `v2` topicality ([`crate::rules::v2::topical_relevance`]) from the inputs recorded with
    /// the item, so a replay re-derives it.
    Topicality,
}

/// Where a search result came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundBy {
    /// The search.
    pub search_id: SearchId,
    /// The result's id at its source.
    pub result_id: String,
}

/// An evidence item entered the task as a candidate.
///
/// This is also the item's shape in every view (see [`crate::views::EvidenceView`]): the
/// fields are named as in SPEC §4 and serialise under those names. The stored event is encoded
/// by [`crate::codec`], not through this type's `Serialize` ([`crate::v2_part`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct EvidenceAdded {
    /// Its id.
    pub evidence_id: EvidenceId,
    /// The source that returned it, or `client`.
    pub origin: String,
    /// The publisher, normalised (trimmed, lower case, or the URL's host without `www.`).
    pub source: String,
    /// Where it can be read.
    pub url: Option<String>,
    /// When it was published.
    pub publish_date: NaiveDate,
    /// Whether the publish date is a default supplied at ingest rather than the item's own.
    pub publish_date_defaulted: bool,
    /// Kind of publisher.
    pub source_type: SourceType,
    /// Citations, when known.
    pub citation_count: Option<u64>,
    /// A summary of at most 800 characters.
    pub summary: String,
    /// blake3 of the full text, kept in the content store.
    pub content_hash: Hash32,
    /// Relevance to the main question, in [0, 1].
    pub relevance: f64,
    /// How the relevance was obtained.
    pub relevance_basis: RelevanceBasis,
    /// Stance toward the main question, when known at adding.
    pub stance: Option<Stance>,
    /// The sub-question it answers (its scope); none for the main question.
    pub sub_question: Option<SubQuestionId>,
    /// The search that found it, when one did.
    pub found_by: Option<FoundBy>,
    /// Authority of its source type under the task's rules.
    pub authority: f64,
    /// Reliability pre-score.
    pub reliability: f64,
    /// Whole days from its publish date to the research date, at least 0.
    pub age_days: i64,
    /// `0.5 ^ (age_days / half_life_days)`. Under `v2` an item whose date is a default takes no
    /// part in recency, whatever this says.
    pub recency: f64,
    /// What `v2` topicality was computed from, when the relevance basis is `topicality`. Absent
    /// otherwise, and then the event is stored in schema version 1 exactly as before.
    #[serde(default)]
    pub relevance_inputs: Option<RelevanceInputs>,
}

/// Adopt or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScreeningDecision {
    /// The item enters the verdict.
    Adopt,
    /// The item stays out.
    Reject,
}

/// A candidate was screened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceScreened {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Adopt or reject.
    pub decision: ScreeningDecision,
    /// The item's stance from now on (given at screening, or kept from adding).
    pub stance: Option<Stance>,
    /// The item's scope from now on: the sub-question it answers, none for the main question
    /// (given at screening, or kept). A screener who reads an item often sees better than the
    /// search that found it which sub-question it answers.
    pub sub_question: Option<SubQuestionId>,
    /// Why, as the screener put it (may be empty).
    pub reason: String,
}

/// An item was withdrawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceRetracted {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Why.
    pub reason: String,
}

/// A group of adopted items of one scope and stance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Viewpoint {
    /// The sub-question, or none for the main question.
    pub scope: Option<SubQuestionId>,
    /// The stance the items share.
    pub stance: Stance,
    /// The items, in the order they were added.
    pub evidence_ids: Vec<EvidenceId>,
    /// Those of them currently on the losing side of their scope's adjudication.
    pub overruled_ids: Vec<EvidenceId>,
    /// Their distinct sources, in order of first appearance.
    pub sources: Vec<String>,
    /// Mean relevance of the items, summed in the order they were added.
    pub mean_relevance: f64,
    /// Highest authority among them.
    pub max_authority: f64,
    /// The most relevant item (the earliest on ties), whose summary leads the viewpoint.
    pub lead_evidence_id: EvidenceId,
}

/// Adopted evidence was grouped into viewpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthesisRecorded {
    /// Its id.
    pub synthesis_id: SynthesisId,
    /// Viewpoints: by scope (main question first, then sub-questions in order), then by stance
    /// (supports, opposes, neutral).
    pub viewpoints: Vec<Viewpoint>,
}

/// A side of a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The items that support.
    Supports,
    /// The items that oppose.
    Opposes,
}

impl Side {
    /// The stance of the side's items.
    pub fn stance(self) -> Stance {
        match self {
            Side::Supports => Stance::Supports,
            Side::Opposes => Stance::Opposes,
        }
    }

    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Supports => Side::Opposes,
            Side::Opposes => Side::Supports,
        }
    }

    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        self.stance().name()
    }
}

/// How a conflict was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// The authority gap reached its threshold.
    Authority,
    /// Else the gap between the latest publish dates reached its threshold.
    Recency,
    /// Else it waits for a person.
    Pending,
    /// A person decided it.
    Human,
    /// `v2`, when enabled: authority and recency left it open and one side's weight reached the
    /// set multiple of the other's.
    Weight,
}

impl Tier {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Authority => "authority",
            Tier::Recency => "recency",
            Tier::Pending => "pending",
            Tier::Human => "human",
            Tier::Weight => "weight",
        }
    }
}

/// An item taking part in a conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Participant {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Its side.
    pub side: Side,
    /// Its source.
    pub source: String,
    /// Its publish date.
    pub publish_date: NaiveDate,
    /// Its authority.
    pub authority: f64,
}

/// The values the tiers compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// Highest authority among the supporting items.
    pub supports_authority: f64,
    /// Highest authority among the opposing items.
    pub opposes_authority: f64,
    /// `|supports_authority − opposes_authority|`.
    pub authority_gap: f64,
    /// Latest publish date among the supporting items.
    pub supports_latest: NaiveDate,
    /// Latest publish date among the opposing items.
    pub opposes_latest: NaiveDate,
    /// Days between the two latest dates.
    pub recency_gap_days: i64,
}

/// The automatic adjudication of one scope.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Adjudication {
    /// Its id.
    pub conflict_id: ConflictId,
    /// The scope: a sub-question, or none for the main question.
    pub scope: Option<SubQuestionId>,
    /// The earlier adjudication of the same scope it replaces.
    pub supersedes: Option<ConflictId>,
    /// Every adopted, unretracted item of the scope that takes a side, in the order added.
    pub participants: Vec<Participant>,
    /// `authority`, `recency` or `pending`.
    pub tier: Tier,
    /// The winning side; none while pending.
    pub winner: Option<Side>,
    /// What the tiers compared.
    pub compared: Compared,
    /// What `v2`'s tiers compared besides; absent under `v1`.
    #[serde(default)]
    pub v2: Option<ComparedV2>,
}

/// What `v2`'s tiers compare that `v1`'s do not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparedV2 {
    /// Participants whose publish date is a default: left out of the recency tier.
    pub undated: Vec<EvidenceId>,
    /// Latest given (not defaulted) publish date among the supporting items.
    pub supports_latest_dated: Option<NaiveDate>,
    /// Latest given publish date among the opposing items.
    pub opposes_latest_dated: Option<NaiveDate>,
    /// Σ authority · relevance over the supporting items, in the order added.
    pub supports_weight: f64,
    /// Σ authority · relevance over the opposing items.
    pub opposes_weight: f64,
}

/// The conflict rules ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConflictsAdjudicated {
    /// Scopes adjudicated afresh: new conflicts, or ones whose items changed.
    pub adjudications: Vec<Adjudication>,
    /// Conflicts whose scope no longer has items on both sides.
    pub dissolved: Vec<ConflictId>,
    /// Conflicts whose items did not change; they stand as they were, human decisions included.
    pub unchanged: Vec<ConflictId>,
}

/// What a person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HumanOutcome {
    /// The supporting side wins.
    Supports,
    /// The opposing side wins.
    Opposes,
    /// Neither side is overruled.
    BothStand,
}

impl HumanOutcome {
    /// The winning side, none when both stand.
    pub fn winner(self) -> Option<Side> {
        match self {
            HumanOutcome::Supports => Some(Side::Supports),
            HumanOutcome::Opposes => Some(Side::Opposes),
            HumanOutcome::BothStand => None,
        }
    }

    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            HumanOutcome::Supports => "supports",
            HumanOutcome::Opposes => "opposes",
            HumanOutcome::BothStand => "both_stand",
        }
    }
}

/// Whether a decision on a conflict was a person's or an assistant's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// A person: a reviewer over HTTP or GraphQL, the command line, or an answer to an MCP
    /// elicitation.
    Person,
    /// An assistant that called the tool through MCP.
    Assistant,
}

impl DecidedBy {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            DecidedBy::Person => "person",
            DecidedBy::Assistant => "assistant",
        }
    }
}

/// Who made a decision on a conflict, and through which client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decider {
    /// A person or an assistant.
    pub by: DecidedBy,
    /// The client it came through (`rest`, `graphql`, `cli`, an MCP client's name).
    pub via: String,
}

/// A decision on a pending conflict.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ConflictResolved {
    /// The conflict.
    pub conflict_id: ConflictId,
    /// The decision.
    pub outcome: HumanOutcome,
    /// Why.
    pub reason: String,
    /// An earlier human decision on the same conflict that this one replaces.
    pub previous_outcome: Option<HumanOutcome>,
    /// Who decided (schema version 3; absent in what earlier versions wrote, which did not
    /// tell a person from an assistant). Left out of the JSON view when absent.
    #[serde(default)]
    pub decided_by: Option<Decider>,
}

/// A person appealed an automatic adjudication.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AdjudicationAppealed {
    /// The conflict.
    pub conflict_id: ConflictId,
    /// The automatic tier appealed against.
    pub overturned_tier: Tier,
    /// The automatic winner appealed against.
    pub overturned_winner: Option<Side>,
    /// The decision.
    pub outcome: HumanOutcome,
    /// Why.
    pub reason: String,
    /// An earlier human decision on the same conflict that this one replaces.
    pub previous_outcome: Option<HumanOutcome>,
    /// Who decided (schema version 3; absent in what earlier versions wrote). Left out of the
    /// JSON view when absent.
    #[serde(default)]
    pub decided_by: Option<Decider>,
}

/// An item's status: recorded (`candidate`, `adopted`, `rejected`, `retracted`) or derived
/// (`overruled`: adopted, but on the losing side of its scope's current adjudication).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceStatus {
    /// Not screened yet.
    Candidate,
    /// Screened in.
    Adopted,
    /// Screened out.
    Rejected,
    /// Withdrawn.
    Retracted,
    /// Adopted but losing its scope's conflict.
    Overruled,
}

impl EvidenceStatus {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            EvidenceStatus::Candidate => "candidate",
            EvidenceStatus::Adopted => "adopted",
            EvidenceStatus::Rejected => "rejected",
            EvidenceStatus::Retracted => "retracted",
            EvidenceStatus::Overruled => "overruled",
        }
    }
}

/// A row of the decision matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRow {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Its source.
    pub source: String,
    /// Its source type.
    pub source_type: SourceType,
    /// Its authority.
    pub authority: f64,
    /// Its reliability pre-score.
    pub reliability: f64,
    /// Its relevance.
    pub relevance: f64,
    /// Its recency.
    pub recency: f64,
    /// Its stance, when known.
    pub stance: Option<Stance>,
    /// Its status when the matrix was built.
    pub status: EvidenceStatus,
}

/// Aggregates over the items a conclusion would use (adopted, not overruled) of one stance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StanceAggregate {
    /// The stance.
    pub stance: Stance,
    /// How many items.
    pub items: u64,
    /// How many distinct sources.
    pub distinct_sources: u64,
    /// Mean relevance (0 with no items).
    pub mean_relevance: f64,
    /// Mean recency (0 with no items).
    pub mean_recency: f64,
    /// Mean reliability (0 with no items).
    pub mean_reliability: f64,
    /// Highest authority (0 with no items).
    pub max_authority: f64,
}

/// The decision matrix was built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionMatrixBuilt {
    /// Its id.
    pub matrix_id: MatrixId,
    /// A row per item, in the order added.
    pub rows: Vec<MatrixRow>,
    /// Supports, opposes, neutral.
    pub aggregates: Vec<StanceAggregate>,
}

/// An item a conclusion used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsedEvidence {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Its content hash, so the text it rested on can be checked.
    pub content_hash: Hash32,
    /// Its stance.
    pub stance: Stance,
    /// Its source.
    pub source: String,
    /// Who brought it in: a source's name or `client`.
    pub origin: String,
}

/// An adjudication a conclusion took into account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsedAdjudication {
    /// The conflict.
    pub conflict_id: ConflictId,
    /// Its tier then (`human` once a person decided).
    pub tier: Tier,
    /// Its winner then.
    pub winner: Option<Side>,
    /// The human decision in force, if any.
    pub resolution: Option<HumanOutcome>,
}

/// Items of each stance a conclusion used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StanceCounts {
    /// Supporting items.
    pub supports: u64,
    /// Opposing items.
    pub opposes: u64,
    /// Neutral items.
    pub neutral: u64,
}

/// A conclusion was issued.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ConclusionIssued {
    /// Its id.
    pub conclusion_id: ConclusionId,
    /// The verdict.
    pub stance: Verdict,
    /// The clause of the stance rule that gave it.
    pub rule: VerdictRule,
    /// `0.4·relevance + 0.3·consistency + 0.2·recency + 0.1·diversity` (with the task's weights).
    pub confidence: f64,
    /// The components, unrounded.
    pub components: Components,
    /// Items used, by stance.
    pub counts: StanceCounts,
    /// Distinct sources among the items used.
    pub distinct_sources: u64,
    /// The items used: adopted, not overruled, not retracted.
    pub evidence: Vec<UsedEvidence>,
    /// Every adjudication in force.
    pub adjudications: Vec<UsedAdjudication>,
    /// The rule set applied.
    pub rules: RuleSet,
    /// Share of the items used that clients added rather than sources returned.
    pub client_share: f64,
    /// The conclusion this one supersedes.
    pub supersedes: Option<ConclusionId>,
    /// What `v2` derived besides; absent under `v1`.
    #[serde(default)]
    pub v2: Option<ConclusionV2>,
}

/// What a `v2` conclusion derives that a `v1` one does not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConclusionV2 {
    /// Items used whose publish date is given: the recency component is their mean.
    pub dated_items: u64,
    /// Items used whose publish date is a default: they take no part in recency.
    pub undated_items: u64,
    /// Whether recency was measured: some item used is dated, or a neutral value is set.
    pub recency_measured: bool,
    /// The weights applied: the task's, or without recency the other three renormalised.
    pub weights_applied: Weights,
    /// Relevance of the supporting items used, summed in the order added.
    pub supports_relevance: f64,
    /// Relevance of the opposing items used.
    pub opposes_relevance: f64,
}

/// A line of an explanation, with the events it rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplanationNode {
    /// Index of the parent line in the same explanation; none for the root.
    pub parent: Option<u32>,
    /// The line.
    pub text: String,
    /// The events it rests on.
    pub cites: Vec<Cite>,
}

/// A conclusion was explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplanationRecorded {
    /// Its id.
    pub explanation_id: ExplanationId,
    /// The conclusion explained.
    pub conclusion_id: ConclusionId,
    /// The lines as a tree: a flat list with parent indexes, parents first. A flat list keeps
    /// decoding free of recursion, so hostile bytes cannot exhaust the stack.
    pub nodes: Vec<ExplanationNode>,
}

impl ExplanationRecorded {
    /// The explanation as markdown, rendered from the tree by a fixed function: the root as a
    /// heading, the rest as a nested list, each line followed by the events it cites. The event
    /// stores only the tree so that large tasks stay within the ledger's event size bound.
    pub fn markdown(&self) -> String {
        crate::derive::explain::render_markdown(&self.nodes)
    }
}

/// An external tool was called on the task's behalf.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalToolCalled {
    /// The tool's registered name.
    pub tool: String,
    /// The contract version it was called under.
    pub contract_version: String,
    /// Hash of the arguments sent.
    pub arguments_hash: Hash32,
    /// Hash of the reply, when there was one.
    pub reply_hash: Option<Hash32>,
    /// What went wrong, when the call failed.
    pub error: Option<String>,
}

/// The task was closed; nothing can be written to it any more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskClosed {
    /// Why, if a reason was given.
    pub reason: Option<String>,
}

crate::v2_part::serialize_with_v2_part!(
    EvidenceAdded,
    "EvidenceAdded",
    [
        evidence_id,
        origin,
        source,
        url,
        publish_date,
        publish_date_defaulted,
        source_type,
        citation_count,
        summary,
        content_hash,
        relevance,
        relevance_basis,
        stance,
        sub_question,
        found_by,
        authority,
        reliability,
        age_days,
        recency
    ],
    relevance_inputs
);

crate::v2_part::serialize_with_v2_part!(
    Adjudication,
    "Adjudication",
    [
        conflict_id,
        scope,
        supersedes,
        participants,
        tier,
        winner,
        compared
    ],
    v2
);

crate::v2_part::serialize_with_v2_part!(
    ConclusionIssued,
    "ConclusionIssued",
    [
        conclusion_id,
        stance,
        rule,
        confidence,
        components,
        counts,
        distinct_sources,
        evidence,
        adjudications,
        rules,
        client_share,
        supersedes
    ],
    v2
);

crate::v2_part::serialize_with_v2_part!(
    TaskOpened,
    "TaskOpened",
    [task_id, question, constraints, research_date, mode, rules],
    conflict_decisions
);

crate::v2_part::serialize_with_v2_part!(
    ConflictResolved,
    "ConflictResolved",
    [conflict_id, outcome, reason, previous_outcome],
    decided_by
);

crate::v2_part::serialize_with_v2_part!(
    AdjudicationAppealed,
    "AdjudicationAppealed",
    [
        conflict_id,
        overturned_tier,
        overturned_winner,
        outcome,
        reason,
        previous_outcome
    ],
    decided_by
);
