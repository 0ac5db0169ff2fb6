//! What a client can ask of a task: one command per MCP tool that writes (SPEC §5), plus what
//! `decide` returns.
//!
//! Commands carry input as clients send it: dates and source types are text, so the domain can
//! refuse a bad one with the field it came in. Time and ids are never invented here: `now`
//! arrives in the [`CommandContext`], the task id in [`OpenTask`], and every other id is derived
//! from the state.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::{Event, HumanOutcome, RelevanceBasis, ScreeningDecision};
use crate::ids::Hash32;
use crate::limits::Limits;
use crate::refusal::Tool;
use crate::rules::{Mode, RelevanceInputs, RulesOverride, Stance};

/// Everything non-deterministic a decision needs, supplied by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandContext {
    /// The time the command is decided at; defaults the research date and bounds future dates.
    pub now: DateTime<Utc>,
    /// The bounds to enforce.
    pub limits: Limits,
}

impl CommandContext {
    /// A context at `now` with the default limits.
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            now,
            limits: Limits::default(),
        }
    }
}

/// What an event was derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// An event already in the ledger, by hash.
    Event([u8; 32]),
    /// An earlier event of the same returned batch, by index; the ledger resolves it to a hash.
    InBatch(u32),
}

/// An event `decide` wants appended, with what it was derived from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// The event.
    pub event: Event,
    /// Its causes, without duplicates.
    pub causation: Vec<Cause>,
}

/// A command to a research task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(
    clippy::large_enum_variant,
    reason = "a command lives for one decision; boxing `open_task`, with its rule overrides, would only move the same bytes to the heap"
)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// `research_open_task`.
    OpenTask(OpenTask),
    /// `research_expand_subquestions`.
    ExpandSubQuestions(ExpandSubQuestions),
    /// `retrieval_search_evidence`: a search the retrieval side ran, with its scored results.
    RecordSearch(RecordSearch),
    /// `retrieval_add_evidence`: evidence the client brings itself.
    AddEvidence(AddEvidence),
    /// `retrieval_retract_evidence`.
    RetractEvidence(RetractEvidence),
    /// `synthesis_screen_evidence`.
    ScreenEvidence(ScreenEvidence),
    /// `synthesis_research_synthesis`.
    RecordSynthesis,
    /// `evaluation_conflict_resolution`: run the conflict rules.
    RunConflictResolution,
    /// `evaluation_resolve_conflict`: a person decides a conflict (a resolution when it is
    /// pending, an appeal when it was decided automatically).
    ResolveConflict(ResolveConflict),
    /// `evaluation_build_decision_matrix`.
    BuildDecisionMatrix,
    /// `evaluation_generate_conclusion`.
    GenerateConclusion,
    /// `evaluation_explain_reasoning`: explain the current conclusion.
    ExplainReasoning,
    /// A call of a registered external tool, recorded in the task.
    RecordExternalToolCall(RecordExternalToolCall),
    /// `research_close_task`.
    CloseTask(CloseTask),
}

impl Command {
    /// The MCP tool this command serves; none for external tool calls, whose tools are
    /// registered at run time.
    pub fn tool(&self) -> Option<Tool> {
        Some(match self {
            Command::OpenTask(_) => Tool::ResearchOpenTask,
            Command::ExpandSubQuestions(_) => Tool::ResearchExpandSubquestions,
            Command::RecordSearch(_) => Tool::RetrievalSearchEvidence,
            Command::AddEvidence(_) => Tool::RetrievalAddEvidence,
            Command::RetractEvidence(_) => Tool::RetrievalRetractEvidence,
            Command::ScreenEvidence(_) => Tool::SynthesisScreenEvidence,
            Command::RecordSynthesis => Tool::SynthesisResearchSynthesis,
            Command::RunConflictResolution => Tool::EvaluationConflictResolution,
            Command::ResolveConflict(_) => Tool::EvaluationResolveConflict,
            Command::BuildDecisionMatrix => Tool::EvaluationBuildDecisionMatrix,
            Command::GenerateConclusion => Tool::EvaluationGenerateConclusion,
            Command::ExplainReasoning => Tool::EvaluationExplainReasoning,
            Command::CloseTask(_) => Tool::ResearchCloseTask,
            Command::RecordExternalToolCall(_) => return None,
        })
    }
}

/// Open a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenTask {
    /// The id, chosen by the caller: letters, digits, `_`, `-`, `.`, starting with a letter or
    /// digit, so it fits in resource URIs.
    pub task_id: String,
    /// The main question.
    pub question: String,
    /// Constraints on the research.
    #[serde(default)]
    pub constraints: Vec<String>,
    /// `YYYY-MM-DD`; defaults to the UTC date of `now`.
    #[serde(default)]
    pub research_date: Option<String>,
    /// Workflow mode; `tool_constrained` by default.
    #[serde(default)]
    pub mode: Mode,
    /// The rule set and overrides of its parameters; `v1` with its defaults when absent.
    #[serde(default)]
    pub rules: Option<RulesOverride>,
    /// Who may decide the task's conflicts: anyone the role allows when absent.
    #[serde(default)]
    pub conflict_decisions: Option<crate::event::ConflictDecisions>,
}

/// Add sub-questions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpandSubQuestions {
    /// Their texts, in order.
    pub sub_questions: Vec<String>,
}

/// The fields of an evidence item as a source or client supplies them (SPEC §4 names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceInput {
    /// The publisher as given; may be a URL; absent to use the URL's host.
    #[serde(default)]
    pub source: Option<String>,
    /// Where it can be read.
    #[serde(default)]
    pub url: Option<String>,
    /// `YYYY-MM-DD` or an RFC 3339 timestamp.
    pub publish_date: String,
    /// Whether the date is a default supplied at ingest.
    #[serde(default)]
    pub publish_date_defaulted: bool,
    /// One of the source types of the rule set.
    pub source_type: String,
    /// Citations, when known.
    #[serde(default)]
    pub citation_count: Option<u64>,
    /// At most 800 characters.
    pub summary: String,
    /// blake3 of the full text.
    pub content_hash: Hash32,
    /// In [0, 1].
    pub relevance: f64,
    /// How the relevance was obtained.
    pub relevance_basis: RelevanceBasis,
    /// With basis `topicality` (rule set `v2`): what the relevance is computed from. The domain
    /// computes it again and refuses a `relevance` that does not follow from them.
    #[serde(default)]
    pub relevance_inputs: Option<RelevanceInputs>,
    /// Stance toward the main question, when known.
    #[serde(default)]
    pub stance: Option<Stance>,
    /// The sub-question it answers, by id.
    #[serde(default)]
    pub sub_question: Option<String>,
}

/// One result of a search, fetched and scored by the retrieval side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchCandidate {
    /// The result's id at its source.
    pub result_id: String,
    /// The source that returned it; one of the sources asked.
    pub origin: String,
    /// The source's own score.
    pub raw_score: f64,
    /// The score normalised to [0, 1].
    pub normalised_score: f64,
    /// The item's fields.
    pub evidence: EvidenceInput,
}

/// Record a search and add its new results as candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordSearch {
    /// The query as sent.
    pub query: String,
    /// The sources asked.
    pub sources: Vec<String>,
    /// Identifies the index state the scores come from.
    pub index_state: String,
    /// The results in rank order.
    pub results: Vec<SearchCandidate>,
}

/// Add evidence the client found itself (origin `client`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddEvidence {
    /// The items.
    pub items: Vec<EvidenceInput>,
}

/// Withdraw an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractEvidence {
    /// The item.
    pub evidence_id: String,
    /// Why; required.
    pub reason: String,
}

/// One screening decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreeningInput {
    /// The item.
    pub evidence_id: String,
    /// Adopt or reject.
    pub decision: ScreeningDecision,
    /// The stance, required to adopt an item that was added without one.
    #[serde(default)]
    pub stance: Option<Stance>,
    /// Where the item's scope goes: kept, or moved to a sub-question or the main question.
    #[serde(default)]
    pub sub_question: ScopeChoice,
    /// Why; may be empty.
    #[serde(default)]
    pub reason: String,
}

/// The scope a screening gives an item.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeChoice {
    /// Keep the scope it has.
    #[default]
    Keep,
    /// It answers the main question.
    MainQuestion,
    /// It answers this sub-question, by id.
    SubQuestion(String),
}

/// Screen a batch of items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenEvidence {
    /// The decisions, each for a different item.
    pub decisions: Vec<ScreeningInput>,
}

/// A person decides a conflict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveConflict {
    /// The conflict.
    pub conflict_id: String,
    /// The winning side, or both stand.
    pub winner: HumanOutcome,
    /// Why; required.
    pub reason: String,
    /// Who decides: a person or an assistant, and through which client.
    pub decided_by: Option<crate::event::Decider>,
}

/// Record a call of an external tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordExternalToolCall {
    /// The tool's registered name.
    pub tool: String,
    /// Its contract version.
    pub contract_version: String,
    /// Hash of the arguments sent.
    pub arguments_hash: Hash32,
    /// Hash of the reply, when there was one.
    #[serde(default)]
    pub reply_hash: Option<Hash32>,
    /// What went wrong, when it failed.
    #[serde(default)]
    pub error: Option<String>,
}

/// Close the task.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseTask {
    /// Why, optionally.
    #[serde(default)]
    pub reason: Option<String>,
}
