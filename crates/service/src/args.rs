//! The arguments of every tool, as clients send them: the contract clients and auditors script
//! against (SPEC §5 and §10). Each type gives the tool's input schema and is read strictly: an
//! unknown argument is refused, not ignored, so a misspelt one never goes unnoticed.
//!
//! Every write tool also takes `expected_version` (refused with `session_conflict` when the task
//! is elsewhere) and `idempotency_key` (a retry with the same key and arguments returns the
//! original result, marked `replayed`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `research_open_task`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenTaskArgs {
    /// The research question.
    pub question: String,
    /// Constraints (scope, period, region, …).
    #[serde(default)]
    pub constraints: Vec<String>,
    /// `YYYY-MM-DD` the research is as of; today (UTC) when absent.
    #[serde(default)]
    pub research_date: Option<String>,
    /// `tool_constrained` (default): the steps in order; `agent_led`: free order.
    #[serde(default)]
    pub mode: Option<ModeArg>,
    /// Overrides (defaults): rule_set "v2" (or "v1"); weights {relevance 0.4,
    /// consistency 0.3, recency 0.2, diversity 0.1} (all four, sum 1); half_life_days 365;
    /// authority {SOURCE_TYPE: 0..1}; thresholds {authority_gap 0.15, recency_gap_days 30,
    /// consistency 0.667, confidence_floor 0.5, diversity_sources 3, sided_items_min 1,
    /// sided_relevance_min 0.3}; v2: relevance {query_weight 0.5, coverage_full 0.15,
    /// query_cap 2}, side_weight_ratio, undated_recency.
    #[serde(default)]
    #[schemars(schema_with = "rules_schema")]
    pub rules: Option<RulesArg>,
    /// `person`: only a person decides its conflicts (by elicitation, or a reviewer over
    /// HTTP/CLI); `anyone` (default): you too, recorded as yours.
    #[serde(default)]
    pub conflict_decisions: Option<ConflictDecisionsArg>,
    /// Refused unless the task is at this version (0 for a new task).
    #[serde(default)]
    pub expected_version: Option<u64>,
    /// Makes a retry safe: the same key and arguments return the original result.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The workflow mode of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModeArg {
    /// Every step through the tools in order.
    ToolConstrained,
    /// Free order.
    AgentLed,
}

/// Who may decide a task's conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConflictDecisionsArg {
    /// Only a person.
    Person,
    /// A person or an assistant, each decision recorded as whose it was.
    Anyone,
}

impl ConflictDecisionsArg {
    /// The restriction the task records: none for `anyone`.
    pub fn recorded(self) -> Option<research::event::ConflictDecisions> {
        match self {
            ConflictDecisionsArg::Person => Some(research::event::ConflictDecisions::Person),
            ConflictDecisionsArg::Anyone => None,
        }
    }
}

/// The schema of `rules` as tools list it: one object whose description names every field.
/// The whole structure is checked when a task opens, each mistake refused with the field it is
/// in; spelled out as nested schemas it would be a fifth of the tool list.
fn rules_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// The rule set and overrides of its parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RulesArg {
    /// `v1` or `v2` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_set: Option<String>,
    /// All four weights together; they must sum to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsArg>,
    /// Recency half-life in days (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub half_life_days: Option<f64>,
    /// Authority by source type, for the types to change.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub authority: BTreeMap<String, f64>,
    /// Thresholds to change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thresholds: Option<ThresholdsArg>,
    /// v2: relevance parameters to change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance: Option<RelevanceArg>,
    /// v2: recency when no item is dated, in [0, 1]; absent drops it and renormalises.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undated_recency: Option<f64>,
    /// v2: side weight multiple (≥ 1) that decides an open conflict; absent leaves it to a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_weight_ratio: Option<f64>,
}

/// Rule set v2's relevance parameters.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelevanceArg {
    /// Share of the query's coverage (0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_weight: Option<f64>,
    /// Coverage giving full relevance (0.15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_full: Option<f64>,
    /// Most the query's coverage counts, as a multiple of the question's, in [0, 1000] (2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_cap: Option<f64>,
}

/// The four weights of the conclusion formula.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightsArg {
    /// Weight of mean relevance.
    pub relevance: f64,
    /// Weight of consistency.
    pub consistency: f64,
    /// Weight of mean recency.
    pub recency: f64,
    /// Weight of source diversity.
    pub diversity: f64,
}

/// Thresholds of the rule set.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsArg {
    /// Authority gap that decides a conflict (0.15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority_gap: Option<f64>,
    /// Publication gap in days that decides a conflict (30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recency_gap_days: Option<f64>,
    /// Consistency needed for a stance (2/3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<f64>,
    /// Confidence below which evidence is insufficient (0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence_floor: Option<f64>,
    /// Independent sources for full diversity (3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diversity_sources: Option<f64>,
    /// v2: items the winning side needs (1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sided_items_min: Option<u64>,
    /// v2: combined relevance the winning side needs (0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sided_relevance_min: Option<f64>,
}

/// Arguments every write tool on an existing task takes besides its own.
macro_rules! task_write_args {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The task.
            pub task_id: String,
            $($(#[$fmeta])* pub $field: $ty,)*
            /// Refused with `session_conflict` unless the task is at this version.
            #[serde(default)]
            pub expected_version: Option<u64>,
            /// Makes a retry safe: the same key and arguments return the original result.
            #[serde(default)]
            pub idempotency_key: Option<String>,
        }
    };
}

task_write_args!(
    /// `research_expand_subquestions`.
    ExpandSubquestionsArgs {
        /// The sub-questions to add, in order.
        pub sub_questions: Vec<String>,
    }
);

task_write_args!(
    /// `retrieval_search_evidence`.
    SearchEvidenceArgs {
        /// Default: the sub-question's text, else the task question.
        #[serde(default)]
        pub query: Option<String>,
        /// The sub-question id the results answer.
        #[serde(default)]
        pub sub_question: Option<String>,
        /// Default `corpus` (the embedded corpus).
        #[serde(default)]
        pub sources: Option<Vec<String>>,
        /// Most results per source (default 10).
        #[serde(default)]
        pub limit: Option<u32>,
        /// Show hits, add no candidates (corpus only).
        #[serde(default)]
        pub preview: Option<bool>,
        /// A preview's search_id: add its result_ids as candidates.
        #[serde(default)]
        pub from_search: Option<String>,
        /// With from_search: the hits to add.
        #[serde(default)]
        pub result_ids: Option<Vec<String>>,
    }
);

task_write_args!(
    /// `retrieval_add_evidence`: evidence the client found itself (origin `client`).
    AddEvidenceArgs {
        /// The publisher, or a URL (its host is used).
        pub source: String,
        /// Where it can be read.
        #[serde(default)]
        pub url: Option<String>,
        /// `YYYY-MM-DD`.
        pub publish_date: String,
        /// The date is a placeholder (v2 leaves it out of recency).
        #[serde(default)]
        pub publish_date_defaulted: Option<bool>,
        /// The kind of publisher.
        #[schemars(extend("enum" = ["primary_data", "government", "academic_paper", "institutional_report", "news_original", "news_reprint", "blog", "social", "other"]))]
        pub source_type: String,
        /// The full text.
        pub content: String,
        /// At most 800 characters; default cut from content.
        #[serde(default)]
        pub summary: Option<String>,
        /// Stance toward the main question, if already known.
        #[serde(default)]
        pub stance: Option<StanceArg>,
        /// In [0, 1]; computed by the rules when absent.
        #[serde(default)]
        pub relevance: Option<f64>,
        /// Citations, when known.
        #[serde(default)]
        pub citation_count: Option<u64>,
        /// The sub-question it answers, by id.
        #[serde(default)]
        pub sub_question: Option<String>,
    }
);

task_write_args!(
    /// `retrieval_retract_evidence`.
    RetractEvidenceArgs {
        /// The item.
        pub evidence_id: String,
        /// Why.
        pub reason: String,
    }
);

/// One screening decision.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreeningArg {
    /// The item.
    pub evidence_id: String,
    /// Adopt (true) or reject (false).
    pub adopt: bool,
    /// Toward the main question; needed to adopt an item that has none.
    #[serde(default)]
    pub stance: Option<StanceArg>,
    /// Another scope: a sub-question id, or null for the main question.
    #[serde(default, deserialize_with = "present_or_null")]
    #[schemars(with = "Option<String>")]
    pub sub_question: Option<Option<String>>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Tells an absent field (`None`) from one given as `null` (`Some(None)`).
fn present_or_null<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

task_write_args!(
    /// `synthesis_screen_evidence`.
    ScreenEvidenceArgs {
        /// One decision per item.
        #[serde(default)]
        pub decisions: Vec<ScreeningArg>,
        /// Rejects every other candidate of the task, with this reason.
        #[serde(default)]
        pub reject_remaining: Option<String>,
    }
);

task_write_args!(
    /// A write tool that takes no arguments of its own.
    TaskArgs {}
);

task_write_args!(
    /// `evaluation_resolve_conflict`: a person decides a pending conflict, or appeals an
    /// automatic adjudication.
    ResolveConflictArgs {
        /// The conflict.
        pub conflict_id: String,
        /// The side that wins, or `both_stand`.
        pub winner: WinnerArg,
        /// Why.
        pub reason: String,
    }
);

task_write_args!(
    /// `research_close_task`.
    CloseTaskArgs {
        /// Why.
        #[serde(default)]
        pub reason: Option<String>,
    }
);

task_write_args!(
    /// `research_run_pipeline`: the research steps as a background job.
    RunPipelineArgs {}
);

/// `research_job_status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobStatusArgs {
    /// From research_run_pipeline.
    pub job_id: String,
}

/// A read tool about one task.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskReadArgs {
    /// The task.
    pub task_id: String,
}

/// `retrieval_get_source_detail`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceDetailArgs {
    /// The task.
    pub task_id: String,
    /// The item.
    pub evidence_id: String,
    /// First character (default: just before the passage).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Characters (default 2000, at most 8000).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// A tool that takes no arguments.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// A stance toward the main question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StanceArg {
    /// It supports the claim the question asks about.
    Supports,
    /// It opposes it.
    Opposes,
    /// It takes no side.
    Neutral,
}

/// The outcome of a human decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WinnerArg {
    /// The supporting side wins.
    Supports,
    /// The opposing side wins.
    Opposes,
    /// Neither side is overruled.
    BothStand,
}

impl From<StanceArg> for research::rules::Stance {
    fn from(s: StanceArg) -> Self {
        match s {
            StanceArg::Supports => research::rules::Stance::Supports,
            StanceArg::Opposes => research::rules::Stance::Opposes,
            StanceArg::Neutral => research::rules::Stance::Neutral,
        }
    }
}

impl From<WinnerArg> for research::event::HumanOutcome {
    fn from(w: WinnerArg) -> Self {
        match w {
            WinnerArg::Supports => research::event::HumanOutcome::Supports,
            WinnerArg::Opposes => research::event::HumanOutcome::Opposes,
            WinnerArg::BothStand => research::event::HumanOutcome::BothStand,
        }
    }
}

impl From<ModeArg> for research::rules::Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::ToolConstrained => research::rules::Mode::ToolConstrained,
            ModeArg::AgentLed => research::rules::Mode::AgentLed,
        }
    }
}

pub use crate::tools::parse_for_tool;

/// `retrieval_list_candidates`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListCandidatesArgs {
    /// The task.
    pub task_id: String,
    /// Default `candidate`.
    #[serde(default)]
    #[schemars(extend("enum" = ["candidate", "adopted", "rejected", "retracted", "overruled", "all"]))]
    pub status: Option<String>,
    /// A sub-question id, or `main`.
    #[serde(default)]
    pub scope: Option<String>,
    /// Per page (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// A `next_cursor` given.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Default `compact`.
    #[serde(default)]
    #[schemars(extend("enum" = ["compact", "full"]))]
    pub detail: Option<String>,
}
