//! Mutations: the same commands as the tools, through the same service call.
//!
//! Each mutation turns its typed arguments into the tool's JSON arguments and calls
//! [`Service::call_tool_async`], so a command's idempotency fingerprint, its guards and its
//! events are the same whichever front end sent it: a retry with the same `idempotencyKey`
//! returns the original result marked `replayed`, whether the first try came through GraphQL or
//! MCP. Absent arguments are left out of the JSON rather than sent as `null`, so the
//! fingerprint of a command does not depend on how a client spells "not given".
//!
//! Human decisions on conflicts are two mutations over the one tool
//! `evaluation_resolve_conflict`: `resolveConflict` for a conflict the rules left pending,
//! `appealAdjudication` for one they decided by authority or recency. Each refuses the other's
//! conflicts, so a reviewer never overturns a rule's decision by mistake.

use async_graphql::{Context, ID, InputObject, Json, MaybeUndefined, Object, SimpleObject};
use serde_json::{Map, Value, json};
use service::research::Tool;
use service::research::event::Tier as DomainTier;
use service::research::ids::ConflictId;
use service::{ServiceError, ToolOutput};

use crate::context;
use crate::enums::{HumanOutcome, Mode, SourceType, Stance};
use crate::error::{blocking, to_gql};
use crate::limits::STORAGE_READ_POINTS;
use crate::task::StateView;

/// What a write did.
#[derive(SimpleObject, Debug, Clone)]
#[graphql(complex)]
pub(crate) struct WriteResult {
    /// The task.
    task_id: ID,
    /// The task's version after the write: pass it as `expectedVersion` to the next one.
    session_version: u64,
    /// True when this is the original result of an earlier call with the same idempotency
    /// key; nothing new was written.
    replayed: bool,
    /// The tool's structured result, the same object the tool returns.
    result: Json<Value>,
    /// A line for people.
    text: String,
}

#[async_graphql::ComplexObject]
impl WriteResult {
    /// The task as this write left it (its state at `sessionVersion`).
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn state(&self, ctx: &Context<'_>) -> async_graphql::Result<StateView> {
        let service = context::service(ctx)?.clone();
        let task_id = self.task_id.0.clone();
        let version = self.session_version;
        let state = blocking(move || service.state_at(&task_id, Some(version))).await?;
        Ok(StateView::new(self.task_id.0.clone(), state))
    }
}

impl WriteResult {
    fn of(output: ToolOutput) -> async_graphql::Result<Self> {
        let structured = output.structured;
        let task_id = structured.get("task_id").and_then(Value::as_str);
        let version = structured.get("session_version").and_then(Value::as_u64);
        let (Some(task_id), Some(session_version)) = (task_id, version) else {
            return Err(to_gql(ServiceError::Unavailable(
                "a write's result names no task or version".into(),
            )));
        };
        Ok(WriteResult {
            task_id: ID(task_id.to_owned()),
            session_version,
            replayed: structured
                .get("replayed")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            text: output.text,
            result: Json(structured),
        })
    }
}

impl HumanOutcome {
    fn name(self) -> &'static str {
        service::research::event::HumanOutcome::from(self).name()
    }
}

/// The four weights of the confidence formula; they must sum to 1.
#[derive(InputObject, Debug, Clone, Copy)]
pub(crate) struct WeightsInput {
    /// Weight of mean relevance.
    relevance: f64,
    /// Weight of consistency.
    consistency: f64,
    /// Weight of mean recency.
    recency: f64,
    /// Weight of source diversity.
    diversity: f64,
}

/// The authority of one source type.
#[derive(InputObject, Debug, Clone, Copy)]
pub(crate) struct AuthorityInput {
    /// The source type.
    source_type: SourceType,
    /// Its authority, in [0, 1].
    value: f64,
}

/// Thresholds to change.
#[derive(InputObject, Debug, Clone, Copy, Default)]
pub(crate) struct ThresholdsInput {
    /// Authority gap that decides a conflict (0.15).
    authority_gap: Option<f64>,
    /// Publication gap in days that decides a conflict (30).
    recency_gap_days: Option<f64>,
    /// Consistency needed for a stance (2/3).
    consistency: Option<f64>,
    /// Confidence below which evidence is insufficient (0.5).
    confidence_floor: Option<f64>,
    /// Independent sources for full diversity (3).
    diversity_sources: Option<f64>,
    /// Rule set v2: items the winning side needs (1).
    sided_items_min: Option<i64>,
    /// Rule set v2: combined relevance the winning side needs (0.3).
    sided_relevance_min: Option<f64>,
}

/// Rule set v2's relevance parameters to change.
#[derive(InputObject, Debug, Clone, Copy, Default)]
pub(crate) struct RelevanceInput {
    /// Share of the finding query's coverage (0.5).
    query_weight: Option<f64>,
    /// Coverage giving full relevance (0.15).
    coverage_full: Option<f64>,
    /// Most the query's coverage counts, as a multiple of the question's (2).
    query_cap: Option<f64>,
}

/// The rule set and overrides of its parameters, validated and recorded with the task.
#[derive(InputObject, Debug, Clone, Default)]
pub(crate) struct RulesInput {
    /// `v1` or `v2` (the default).
    rule_set: Option<String>,
    /// Rule set v2: relevance parameters to change.
    relevance: Option<RelevanceInput>,
    /// Rule set v2: recency when no item used is dated; absent drops it and renormalises.
    undated_recency: Option<f64>,
    /// Rule set v2: side weight multiple that decides an open conflict; absent leaves it to a
    /// person.
    side_weight_ratio: Option<f64>,
    /// All four weights together.
    weights: Option<WeightsInput>,
    /// Recency half-life in days (> 0).
    half_life_days: Option<f64>,
    /// Authority by source type, for the types to change.
    authority: Option<Vec<AuthorityInput>>,
    /// Thresholds to change.
    thresholds: Option<ThresholdsInput>,
}

/// A new research task.
#[derive(InputObject, Debug, Clone)]
pub(crate) struct OpenTaskInput {
    /// The research question.
    question: String,
    /// Constraints on the research (scope, period, region, …).
    constraints: Option<Vec<String>>,
    /// The date the research is as of, `YYYY-MM-DD`; today (UTC) when absent.
    research_date: Option<String>,
    /// `TOOL_CONSTRAINED` (default) or `AGENT_LED`.
    mode: Option<Mode>,
    /// The rule set (v2 when absent) and overrides of its parameters.
    rules: Option<RulesInput>,
}

/// What to search for.
#[derive(InputObject, Debug, Clone, Default)]
pub(crate) struct SearchEvidenceInput {
    /// The query; the sub-question's text, or else the task question, when absent.
    query: Option<String>,
    /// The sub-question the results answer (their scope).
    sub_question: Option<ID>,
    /// Sources to ask; the embedded corpus when absent.
    sources: Option<Vec<String>>,
    /// Most results per source.
    limit: Option<u32>,
}

/// Evidence the client found itself (origin `client`).
#[derive(InputObject, Debug, Clone)]
pub(crate) struct AddEvidenceInput {
    /// The publisher, or a URL (its host is used).
    source: String,
    /// Where it can be read.
    url: Option<String>,
    /// `YYYY-MM-DD`.
    publish_date: String,
    /// The kind of publisher.
    source_type: SourceType,
    /// The full text; kept in the content store, cited by its hash.
    content: String,
    /// At most 800 characters; cut from the content at a sentence end when absent.
    summary: Option<String>,
    /// Stance toward the main question, if already known.
    stance: Option<Stance>,
    /// Relevance in [0, 1]; computed by the task's rule set when absent.
    relevance: Option<f64>,
    /// Citations, when known.
    citation_count: Option<i64>,
    /// The sub-question it answers.
    sub_question: Option<ID>,
}

/// One screening decision.
#[derive(InputObject, Debug, Clone)]
pub(crate) struct ScreeningInput {
    /// The item.
    evidence_id: ID,
    /// Adopt (true) or reject (false).
    adopt: bool,
    /// Stance toward the main question; needed to adopt an item added without one.
    stance: Option<Stance>,
    /// The scope the item answers when reading it shows another than its search's: a
    /// sub-question id, or `null` for the main question; absent keeps the item's scope.
    sub_question: MaybeUndefined<ID>,
    /// Why.
    reason: Option<String>,
}

/// Builds a tool's JSON arguments, leaving out what was not given.
#[derive(Default)]
struct Arguments(Map<String, Value>);

impl Arguments {
    fn task(task_id: &ID) -> Self {
        let mut out = Arguments::default();
        out.0.insert("task_id".into(), json!(task_id.0));
        out
    }

    fn put(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.to_owned(), value.into());
        self
    }

    fn maybe(self, key: &str, value: Option<impl Into<Value>>) -> Self {
        match value {
            Some(v) => self.put(key, v),
            None => self,
        }
    }

    fn guard(self, expected_version: Option<i64>, idempotency_key: Option<String>) -> Self {
        self.maybe("expected_version", expected_version)
            .maybe("idempotency_key", idempotency_key)
    }

    fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

fn stance_name(stance: Stance) -> &'static str {
    service::research::rules::Stance::from(stance).name()
}

fn rules_json(rules: RulesInput) -> Value {
    let mut out = Map::new();
    if let Some(w) = rules.weights {
        out.insert(
            "weights".into(),
            json!({"relevance": w.relevance, "consistency": w.consistency, "recency": w.recency, "diversity": w.diversity}),
        );
    }
    if let Some(days) = rules.half_life_days {
        out.insert("half_life_days".into(), json!(days));
    }
    if let Some(authority) = rules.authority {
        let table: Map<String, Value> = authority
            .iter()
            .map(|a| {
                let name = service::research::rules::SourceType::from(a.source_type).name();
                (name.to_owned(), json!(a.value))
            })
            .collect();
        out.insert("authority".into(), Value::Object(table));
    }
    if let Some(t) = rules.thresholds {
        let fields = Arguments::default()
            .maybe("authority_gap", t.authority_gap)
            .maybe("recency_gap_days", t.recency_gap_days)
            .maybe("consistency", t.consistency)
            .maybe("confidence_floor", t.confidence_floor)
            .maybe("diversity_sources", t.diversity_sources)
            .maybe("sided_items_min", t.sided_items_min)
            .maybe("sided_relevance_min", t.sided_relevance_min);
        out.insert("thresholds".into(), fields.into_value());
    }
    if let Some(name) = rules.rule_set {
        out.insert("rule_set".into(), json!(name));
    }
    if let Some(r) = rules.relevance {
        let fields = Arguments::default()
            .maybe("query_weight", r.query_weight)
            .maybe("coverage_full", r.coverage_full)
            .maybe("query_cap", r.query_cap);
        out.insert("relevance".into(), fields.into_value());
    }
    if let Some(value) = rules.undated_recency {
        out.insert("undated_recency".into(), json!(value));
    }
    if let Some(ratio) = rules.side_weight_ratio {
        out.insert("side_weight_ratio".into(), json!(ratio));
    }
    Value::Object(out)
}

/// Calls a tool as the caller of this request.
async fn call(
    ctx: &Context<'_>,
    tool: Tool,
    arguments: Arguments,
) -> async_graphql::Result<WriteResult> {
    let service = context::service(ctx)?;
    let caller = context::caller(ctx)?;
    let output = service
        .call_tool_async(caller, tool.name().to_owned(), arguments.into_value())
        .await
        .map_err(to_gql)?;
    WriteResult::of(output)
}

/// Which human decision a mutation records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Resolution,
    Appeal,
}

/// Refuses a resolution of a conflict the rules decided, and an appeal of one they left
/// pending. The tier the rules gave an adjudication never changes (a fresh adjudication is a
/// new conflict), so the check cannot go stale before the write. An unknown conflict is left
/// for the write to report.
fn check_decision(
    ctx: &Context<'_>,
    task_id: &ID,
    conflict_id: &ID,
    decision: Decision,
) -> async_graphql::Result<()> {
    let state = context::service(ctx)?.state(task_id).map_err(to_gql)?;
    let Some(record) = state.conflict(&ConflictId::new(conflict_id.0.clone())) else {
        return Ok(());
    };
    let tier = record.adjudication.tier;
    let refusal = match (decision, tier) {
        (Decision::Resolution, DomainTier::Pending) => None,
        (Decision::Resolution, _) => Some(format!(
            "{} was adjudicated by the rules ({} tier), so it is not pending: overturn it with appealAdjudication",
            conflict_id.0,
            tier.name()
        )),
        (Decision::Appeal, DomainTier::Authority | DomainTier::Recency | DomainTier::Weight) => {
            None
        }
        (Decision::Appeal, _) => Some(format!(
            "{} was left pending by the rules, so there is no automatic adjudication to appeal: decide it with resolveConflict",
            conflict_id.0
        )),
    };
    match refusal {
        None => Ok(()),
        Some(message) => Err(to_gql(ServiceError::InvalidArgument {
            field: "conflictId".into(),
            message,
        })),
    }
}

/// The root of every mutation: the tools' commands.
///
/// Every one takes `expectedVersion` (refused with `SESSION_CONFLICT`, `currentVersion` and
/// `suggestedAction` when the task is at another version) and `idempotencyKey` (a retry with the
/// same key and arguments returns the original result, `replayed: true`; the same key with other
/// arguments is refused with `IDEMPOTENCY_KEY_REUSED`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Mutation;

/// The root of every mutation: the tools' commands.
///
/// Every one takes `expectedVersion` (refused with `SESSION_CONFLICT`, `currentVersion` and
/// `suggestedAction` when the task is at another version) and `idempotencyKey` (a retry with the
/// same key and arguments returns the original result, `replayed: true`; the same key with other
/// arguments is refused with `IDEMPOTENCY_KEY_REUSED`).
#[Object]
impl Mutation {
    /// Opens a research task (`research_open_task`): first, once per question.
    async fn open_task(
        &self,
        ctx: &Context<'_>,
        input: OpenTaskInput,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let mode = input
            .mode
            .map(|m| service::research::rules::Mode::from(m).name());
        let arguments = Arguments::default()
            .put("question", input.question)
            .maybe("constraints", input.constraints)
            .maybe("research_date", input.research_date)
            .maybe("mode", mode)
            .maybe("rules", input.rules.map(rules_json))
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::ResearchOpenTask, arguments).await
    }

    /// Adds sub-questions (`research_expand_subquestions`); each gets an id to scope evidence.
    async fn expand_sub_questions(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        sub_questions: Vec<String>,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id)
            .put("sub_questions", sub_questions)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::ResearchExpandSubquestions, arguments).await
    }

    /// Searches the sources and adds new results as candidates (`retrieval_search_evidence`).
    async fn search_evidence(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        input: Option<SearchEvidenceInput>,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let input = input.unwrap_or_default();
        let arguments = Arguments::task(&task_id)
            .maybe("query", input.query)
            .maybe("sub_question", input.sub_question.map(|s| s.0))
            .maybe("sources", input.sources)
            .maybe("limit", input.limit)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::RetrievalSearchEvidence, arguments).await
    }

    /// Adds evidence the client found itself (`retrieval_add_evidence`).
    async fn add_evidence(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        input: AddEvidenceInput,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let source_type = service::research::rules::SourceType::from(input.source_type).name();
        let arguments = Arguments::task(&task_id)
            .put("source", input.source)
            .maybe("url", input.url)
            .put("publish_date", input.publish_date)
            .put("source_type", source_type)
            .put("content", input.content)
            .maybe("summary", input.summary)
            .maybe("stance", input.stance.map(stance_name))
            .maybe("relevance", input.relevance)
            .maybe("citation_count", input.citation_count)
            .maybe("sub_question", input.sub_question.map(|s| s.0))
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::RetrievalAddEvidence, arguments).await
    }

    /// Retracts an item, with the reason (`retrieval_retract_evidence`); nothing is deleted.
    async fn retract_evidence(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        evidence_id: ID,
        reason: String,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id)
            .put("evidence_id", evidence_id.0)
            .put("reason", reason)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::RetrievalRetractEvidence, arguments).await
    }

    /// Adopts or rejects candidates (`synthesis_screen_evidence`).
    async fn screen_evidence(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        decisions: Vec<ScreeningInput>,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let decisions: Vec<Value> = decisions
            .into_iter()
            .map(|d| {
                let mut one = Arguments::default()
                    .put("evidence_id", d.evidence_id.0)
                    .put("adopt", d.adopt)
                    .maybe("stance", d.stance.map(stance_name))
                    .maybe("reason", d.reason);
                match d.sub_question {
                    MaybeUndefined::Undefined => {}
                    MaybeUndefined::Null => one = one.put("sub_question", Value::Null),
                    MaybeUndefined::Value(id) => one = one.put("sub_question", id.0),
                }
                one.into_value()
            })
            .collect();
        let arguments = Arguments::task(&task_id)
            .put("decisions", decisions)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::SynthesisScreenEvidence, arguments).await
    }

    /// Groups adopted evidence into viewpoints (`synthesis_research_synthesis`).
    async fn record_synthesis(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id).guard(expected_version, idempotency_key);
        call(ctx, Tool::SynthesisResearchSynthesis, arguments).await
    }

    /// Runs the conflict rules over every scope (`evaluation_conflict_resolution`).
    async fn run_conflict_resolution(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id).guard(expected_version, idempotency_key);
        call(ctx, Tool::EvaluationConflictResolution, arguments).await
    }

    /// A person decides a conflict the rules left pending: a winning side, or both stand.
    /// Refused for a conflict the rules decided (appeal that one).
    #[allow(clippy::too_many_arguments)]
    async fn resolve_conflict(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        conflict_id: ID,
        winner: HumanOutcome,
        reason: String,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        check_decision(ctx, &task_id, &conflict_id, Decision::Resolution)?;
        let arguments = Arguments::task(&task_id)
            .put("conflict_id", conflict_id.0)
            .put("winner", winner.name())
            .put("reason", reason)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::EvaluationResolveConflict, arguments).await
    }

    /// A person overturns (or confirms) a conflict the rules decided by authority or recency.
    /// Refused for a pending conflict (resolve that one).
    #[allow(clippy::too_many_arguments)]
    async fn appeal_adjudication(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        conflict_id: ID,
        winner: HumanOutcome,
        reason: String,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        check_decision(ctx, &task_id, &conflict_id, Decision::Appeal)?;
        let arguments = Arguments::task(&task_id)
            .put("conflict_id", conflict_id.0)
            .put("winner", winner.name())
            .put("reason", reason)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::EvaluationResolveConflict, arguments).await
    }

    /// Builds the decision matrix (`evaluation_build_decision_matrix`).
    async fn build_decision_matrix(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id).guard(expected_version, idempotency_key);
        call(ctx, Tool::EvaluationBuildDecisionMatrix, arguments).await
    }

    /// Issues the verdict by the task's rule set (`evaluation_generate_conclusion`).
    async fn generate_conclusion(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id).guard(expected_version, idempotency_key);
        call(ctx, Tool::EvaluationGenerateConclusion, arguments).await
    }

    /// Records why the verdict is what it is, every line citing ledger events
    /// (`evaluation_explain_reasoning`).
    async fn explain_reasoning(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id).guard(expected_version, idempotency_key);
        call(ctx, Tool::EvaluationExplainReasoning, arguments).await
    }

    /// Closes the task (`research_close_task`): nothing can be written to it afterwards.
    async fn close_task(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        reason: Option<String>,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id)
            .maybe("reason", reason)
            .guard(expected_version, idempotency_key);
        call(ctx, Tool::ResearchCloseTask, arguments).await
    }

    /// Starts the research pipeline on the task as a background job (`research_run_pipeline`)
    /// and returns at once; `result` holds the job (`job_id`, `status`, `progress`). Follow it
    /// with the `job` query. A job that stops for screening resumes when this is called again.
    async fn run_pipeline(
        &self,
        ctx: &Context<'_>,
        task_id: ID,
        expected_version: Option<i64>,
        idempotency_key: Option<String>,
    ) -> async_graphql::Result<WriteResult> {
        let arguments = Arguments::task(&task_id).guard(expected_version, idempotency_key);
        call(ctx, Tool::ResearchRunPipeline, arguments).await
    }
}

/// The tool each mutation calls; a test checks that every write tool has one.
#[cfg(test)]
pub(crate) const MUTATION_TOOLS: [(&str, Tool); 15] = [
    ("openTask", Tool::ResearchOpenTask),
    ("expandSubQuestions", Tool::ResearchExpandSubquestions),
    ("searchEvidence", Tool::RetrievalSearchEvidence),
    ("addEvidence", Tool::RetrievalAddEvidence),
    ("retractEvidence", Tool::RetrievalRetractEvidence),
    ("screenEvidence", Tool::SynthesisScreenEvidence),
    ("recordSynthesis", Tool::SynthesisResearchSynthesis),
    ("runConflictResolution", Tool::EvaluationConflictResolution),
    ("resolveConflict", Tool::EvaluationResolveConflict),
    ("appealAdjudication", Tool::EvaluationResolveConflict),
    ("buildDecisionMatrix", Tool::EvaluationBuildDecisionMatrix),
    ("generateConclusion", Tool::EvaluationGenerateConclusion),
    ("explainReasoning", Tool::EvaluationExplainReasoning),
    ("closeTask", Tool::ResearchCloseTask),
    ("runPipeline", Tool::ResearchRunPipeline),
];
