//! The table of built-in tools: for each, its title, its description (when a model should call
//! it), the JSON Schemas of its arguments and of its result, the role it needs, and its handler.
//!
//! Input schemas are generated from the argument types the handlers read, so a schema cannot
//! drift from what a call accepts.

use research::Tool;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{
    Call, ToolDef, ToolFuture, ToolOutput, ToolSpec, check, detail, evaluation, evidence, parse,
    search, task,
};
use crate::args::*;
use crate::error::ServiceError;
use crate::tokens::Role;

/// A handler: what a call of the tool does with its parsed arguments, done before it returns.
type Run<A> = fn(&mut Call<'_>, A) -> Result<ToolOutput, ServiceError>;

/// An async handler: what a call of the tool does with its parsed arguments, resolving when it
/// is done (a write, once its append is durable).
type RunAsync<A> = for<'c, 'a> fn(&'c mut Call<'a>, A) -> ToolFuture<'c>;

/// How an entry runs its calls.
enum Handle<A> {
    Now(Run<A>),
    Async(RunAsync<A>),
}

fn define<A: DeserializeOwned + JsonSchema + Send + 'static>(
    tool: Tool,
    read_only: bool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: Handle<A>,
) -> ToolDef {
    ToolDef {
        tool,
        spec: ToolSpec {
            name: tool.name().to_owned(),
            title: title.to_owned(),
            description: description.to_owned(),
            input_schema: schema_of::<A>(),
            output_schema,
            read_only,
            idempotent: read_only,
            open_world: false,
            role: if read_only {
                Role::Auditor
            } else {
                Role::Writer
            },
        },
        inline: false,
        check: check::<A>,
        run: match run {
            Handle::Now(run) => Box::new(move |call| {
                let result = parse::<A>(call.arguments).and_then(|a| run(call, a));
                Box::pin(std::future::ready(result))
            }),
            Handle::Async(run) => Box::new(move |call| match parse::<A>(call.arguments) {
                Ok(arguments) => run(call, arguments),
                Err(e) => Box::pin(std::future::ready(Err(e))),
            }),
        },
    }
}

/// A tool that writes to the ledger: it needs the writer role.
fn write<A: DeserializeOwned + JsonSchema + Send + 'static>(
    tool: Tool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: Run<A>,
) -> ToolDef {
    define(
        tool,
        false,
        title,
        description,
        output_schema,
        Handle::Now(run),
    )
}

/// A tool that writes to its task's state and waits on nothing but the append: its calls
/// await the append rather than hold a thread through it, and run inline when the state is in
/// memory ([`ToolDef`]'s `inline`).
fn write_async<A: DeserializeOwned + JsonSchema + Send + 'static>(
    tool: Tool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: RunAsync<A>,
) -> ToolDef {
    ToolDef {
        inline: true,
        ..define(
            tool,
            false,
            title,
            description,
            output_schema,
            Handle::Async(run),
        )
    }
}

/// A tool that changes nothing: read-only and idempotent, open to auditors.
fn read<A: DeserializeOwned + JsonSchema + Send + 'static>(
    tool: Tool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: Run<A>,
) -> ToolDef {
    define(
        tool,
        true,
        title,
        description,
        output_schema,
        Handle::Now(run),
    )
}

impl ToolDef {
    fn for_role(mut self, role: Role) -> Self {
        self.spec.role = role;
        self
    }

    /// Marks a tool that reads nothing but its task's state ([`ToolDef`]'s `inline`).
    fn reading_state_alone(mut self) -> Self {
        self.inline = true;
        self
    }
}

/// The entry of each built-in tool: one function per tool below, in the order clients list
/// them.
pub(super) fn entry(tool: Tool) -> ToolDef {
    match tool {
        Tool::ResearchOpenTask => research_open_task(tool),
        Tool::ResearchExpandSubquestions => research_expand_subquestions(tool),
        Tool::RetrievalSearchEvidence => retrieval_search_evidence(tool),
        Tool::RetrievalAddEvidence => retrieval_add_evidence(tool),
        Tool::RetrievalGetSourceDetail => retrieval_get_source_detail(tool),
        Tool::RetrievalListCandidates => retrieval_list_candidates(tool),
        Tool::RetrievalRetractEvidence => retrieval_retract_evidence(tool),
        Tool::SynthesisScreenEvidence => synthesis_screen_evidence(tool),
        Tool::SynthesisResearchSynthesis => synthesis_research_synthesis(tool),
        Tool::EvaluationConflictResolution => evaluation_conflict_resolution(tool),
        Tool::EvaluationResolveConflict => evaluation_resolve_conflict(tool),
        Tool::EvaluationBuildDecisionMatrix => evaluation_build_decision_matrix(tool),
        Tool::EvaluationGenerateConclusion => evaluation_generate_conclusion(tool),
        Tool::EvaluationExplainReasoning => evaluation_explain_reasoning(tool),
        Tool::ResearchSummarizeState => research_summarize_state(tool),
        Tool::ResearchCloseTask => research_close_task(tool),
        Tool::ResearchRunPipeline => research_run_pipeline(tool),
        Tool::ResearchJobStatus => research_job_status(tool),
        Tool::AuditVerify => audit_verify(tool),
    }
}

fn research_open_task(tool: Tool) -> ToolDef {
    write::<OpenTaskArgs>(
        tool,
        "Open a research task",
        "Call first, once per question: opens a task, returns its task_id. Constraints, date and rules are fixed here.",
        output(&[
            ("question", json!({"type": "string"})),
            ("research_date", json!({"type": "string"})),
            (
                "mode",
                json!({"type": "string", "enum": ["tool_constrained", "agent_led"]}),
            ),
            ("rules", obj()),
        ]),
        task::open,
    )
}

fn research_expand_subquestions(tool: Tool) -> ToolDef {
    write::<ExpandSubquestionsArgs>(
        tool,
        "Add sub-questions",
        "Call when the question splits into parts: each gets an id (sq-N) scoping searches, evidence and conflicts.",
        output(&[("sub_questions", arr())]),
        task::expand_subquestions,
    )
}

fn retrieval_search_evidence(tool: Tool) -> ToolDef {
    write::<SearchEvidenceArgs>(
        tool,
        "Search for evidence",
        "Call to find evidence: searches the sources (corpus by default); new hits become candidates, scored by the service, to screen with synthesis_screen_evidence. preview records and shows hits only; from_search adds those you pick.",
        output(&[
            ("search_id", json!({"type": "string"})),
            ("query", json!({"type": "string"})),
            (
                "sources",
                json!({"type": "array", "items": {"type": "string"}}),
            ),
            ("index_state", json!({"type": "string"})),
            ("candidates", arr()),
            ("hits", arr()),
        ]),
        search::search_evidence,
    )
}

fn retrieval_add_evidence(tool: Tool) -> ToolDef {
    write_async::<AddEvidenceArgs>(
        tool,
        "Add evidence you found",
        "Call with evidence the sources did not return (full text, source, type, date). The service scores it; the conclusion reports such evidence's share.",
        output(&[
            ("evidence_id", json!({"type": "string"})),
            ("evidence", obj()),
        ]),
        evidence::add,
    )
}

fn retrieval_get_source_detail(tool: Tool) -> ToolDef {
    read::<SourceDetailArgs>(
        tool,
        "Read an evidence item",
        "Call when a summary is not enough: the title, the text around the passage (paged by offset), its hash, and why it scored its relevance.",
        output(&[
            ("content", json!({"type": "string"})),
            ("next_offset", json!({"type": "integer"})),
            ("relevance_explained", obj()),
        ]),
        detail::source_detail,
    )
}

fn retrieval_list_candidates(tool: Tool) -> ToolDef {
    read::<ListCandidatesArgs>(
        tool,
        "List a task's items",
        "Call to list a task's candidates (or other items), compact, a page at a time.",
        output(&[
            ("total", json!({"type": "integer"})),
            ("items", arr()),
            ("next_cursor", json!({"type": "string"})),
        ]),
        evidence::list_candidates,
    )
    .reading_state_alone()
}

fn retrieval_retract_evidence(tool: Tool) -> ToolDef {
    write_async::<RetractEvidenceArgs>(
        tool,
        "Retract an evidence item",
        "Call when an item proves wrong or unusable: it leaves the verdict with the reason; nothing is deleted.",
        output(&[
            ("evidence_id", json!({"type": "string"})),
            ("status", json!({"type": "string", "enum": ["retracted"]})),
        ]),
        evidence::retract,
    )
}

fn synthesis_screen_evidence(tool: Tool) -> ToolDef {
    write_async::<ScreenEvidenceArgs>(
        tool,
        "Screen candidates",
        "Call after a search: adopt each candidate with its stance toward the main question, or reject it; all are screened before conflicts.",
        output(&[
            ("screened", arr()),
            ("candidates_remaining", json!({"type": "integer"})),
        ]),
        evidence::screen,
    )
}

fn synthesis_research_synthesis(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Synthesise viewpoints",
        "Call after screening, if useful: groups adopted evidence into viewpoints by scope and stance.",
        output(&[("synthesis", obj())]),
        evaluation::synthesis,
    )
}

fn evaluation_conflict_resolution(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Resolve conflicts by the rules",
        "Call after the last change to the evidence: where adopted items disagree in a scope, the rules decide by authority, then recency, or leave it pending.",
        output(&[("conflicts", arr())]),
        evaluation::conflict_resolution,
    )
}

fn evaluation_resolve_conflict(tool: Tool) -> ToolDef {
    write::<ResolveConflictArgs>(
        tool,
        "Decide a conflict as a person",
        "Call to decide a pending conflict (a side wins, or both stand) or to appeal an automatic adjudication, with the reason. Ask the user first: a decision you send is recorded as the assistant's.",
        output(&[("conflict", obj())]),
        evaluation::resolve_conflict,
    )
    .for_role(Role::Reviewer)
}

fn evaluation_build_decision_matrix(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Build the decision matrix",
        "Call after conflicts are settled: a row per item (authority, reliability, relevance, recency, stance, status) and totals per stance.",
        output(&[("matrix", obj())]),
        evaluation::decision_matrix,
    )
}

fn evaluation_generate_conclusion(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Issue the verdict",
        "Call after the matrix: the service computes verdict and confidence from the recorded evidence by the task's rules; returns the conclusion card.",
        output(&[
            ("conclusion_id", json!({"type": "string"})),
            (
                "stance",
                json!({"type": "string", "enum": ["supportive", "opposing", "uncertain", "evidence_insufficient"]}),
            ),
            ("confidence", json!({"type": "number"})),
            ("components", obj()),
            ("evidence", arr()),
            ("adjudications", arr()),
            ("rules", obj()),
            ("client_share", json!({"type": "number"})),
            ("stale", json!({"type": "boolean"})),
            ("markdown", json!({"type": "string"})),
        ]),
        evaluation::conclusion,
    )
}

fn evaluation_explain_reasoning(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Explain the verdict",
        "Call after a conclusion: why the verdict is what it is, each line citing the events it rests on.",
        output(&[
            ("explanation_id", json!({"type": "string"})),
            ("conclusion_id", json!({"type": "string"})),
            ("markdown", json!({"type": "string"})),
        ]),
        evaluation::explain,
    )
}

fn research_summarize_state(tool: Tool) -> ToolDef {
    read::<TaskReadArgs>(
        tool,
        "Summarise a task",
        "Call for a compact view of a task: status, counts, next steps, conflicts and the verdict.",
        output(&[("summary", obj()), ("pending_actions", arr())]),
        task::summarize,
    )
    .reading_state_alone()
}

fn research_close_task(tool: Tool) -> ToolDef {
    write::<CloseTaskArgs>(
        tool,
        "Close a task",
        "Call when the research is done: nothing more can be written to it.",
        output(&[("status", json!({"type": "string"}))]),
        task::close,
    )
}

fn research_run_pipeline(tool: Tool) -> ToolDef {
    write::<RunPipelineArgs>(
        tool,
        "Run the research pipeline",
        "Call to run a task's steps in the background (plan, retrieve, screen, conflicts, synthesis, matrix, conclusion, explanation); returns a job_id to follow with research_job_status. It stops at screening for you; screen, then call again.",
        job_output(),
        task::run_pipeline,
    )
}

fn research_job_status(tool: Tool) -> ToolDef {
    read::<JobStatusArgs>(
        tool,
        "Read a pipeline job",
        "Call to follow a pipeline job: status, step (\"step 2/8: retrieving evidence 2/3\"), steps done, what it waits for.",
        job_output(),
        task::job_status,
    )
}

fn audit_verify(tool: Tool) -> ToolDef {
    read::<NoArgs>(
        tool,
        "Verify the ledger",
        "Call to check the ledger was never rewritten: hash chain, Merkle tree against each signed checkpoint, signatures.",
        output(&[
            ("intact", json!({"type": "boolean"})),
            ("size", json!({"type": "integer"})),
            ("root", json!({"type": "string"})),
        ]),
        task::verify,
    )
}

fn schema_of<T: JsonSchema>() -> Value {
    let mut value = serde_json::to_value(schemars::schema_for!(T))
        .unwrap_or_else(|_| json!({"type": "object"}));
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
    }
    super::compact::compact(value)
}

/// An output schema: an object with the given properties. The fields every result about a
/// task carries (`task_id`, `session_version`, `replayed`) are described once, in the server's
/// instructions ([`super::compact::SHARED_RESULTS`]); a result holds more than its schema
/// names, as JSON Schema allows.
fn output(properties: &[(&str, Value)]) -> Value {
    let props: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| ((*name).to_owned(), schema.clone()))
        .collect();
    json!({"type": "object", "properties": props})
}

fn obj() -> Value {
    json!({"type": "object"})
}

fn arr() -> Value {
    json!({"type": "array"})
}

/// The structured result of the job tools: the job as it stands.
fn job_output() -> Value {
    let status = json!({
        "type": "string",
        "enum": ["running", "waiting", "completed", "failed", "interrupted"],
    });
    output(&[
        ("job_id", json!({"type": "string"})),
        ("status", status),
        ("step", json!({"type": "integer"})),
        ("progress", json!({"type": "string"})),
        ("pending_actions", arr()),
    ])
}
