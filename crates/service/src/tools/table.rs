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
    Call, ToolDef, ToolOutput, ToolSpec, check, evaluation, evidence, parse, search, task,
};
use crate::args::*;
use crate::error::ServiceError;
use crate::tokens::Role;

/// A handler: what a call of the tool does with its parsed arguments.
type Run<A> = fn(&mut Call<'_>, A) -> Result<ToolOutput, ServiceError>;

fn define<A: DeserializeOwned + JsonSchema + 'static>(
    tool: Tool,
    read_only: bool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: Run<A>,
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
        check: check::<A>,
        run: Box::new(move |call| {
            let arguments = parse::<A>(call.arguments)?;
            run(call, arguments)
        }),
    }
}

/// A tool that writes to the ledger: it needs the writer role.
fn write<A: DeserializeOwned + JsonSchema + 'static>(
    tool: Tool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: Run<A>,
) -> ToolDef {
    define(tool, false, title, description, output_schema, run)
}

/// A tool that changes nothing: read-only and idempotent, open to auditors.
fn read<A: DeserializeOwned + JsonSchema + 'static>(
    tool: Tool,
    title: &str,
    description: &str,
    output_schema: Value,
    run: Run<A>,
) -> ToolDef {
    define(tool, true, title, description, output_schema, run)
}

impl ToolDef {
    fn for_role(mut self, role: Role) -> Self {
        self.spec.role = role;
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
        "Call first, once per research question: opens a task and returns its task_id. Every later tool takes that task_id. Give constraints, a research date and rule overrides here; they are recorded and cannot change later.",
        write_output(&[
            ("question", json!({"type": "string"})),
            ("research_date", json!({"type": "string"})),
            ("mode", json!({"type": "string"})),
            ("rules", obj()),
        ]),
        task::open,
    )
}

fn research_expand_subquestions(tool: Tool) -> ToolDef {
    write::<ExpandSubquestionsArgs>(
        tool,
        "Add sub-questions",
        "Call when the question splits into parts that evidence answers separately; each sub-question gets an id (sq-N) to scope searches and evidence. Conflicts are only adjudicated within one scope.",
        write_output(&[("sub_questions", arr())]),
        task::expand_subquestions,
    )
}

fn retrieval_search_evidence(tool: Tool) -> ToolDef {
    write::<SearchEvidenceArgs>(
        tool,
        "Search for evidence",
        "Call to find evidence: searches the sources (the embedded corpus by default) and adds new results to the task as candidates, scored by the service (relevance, reliability, recency). Candidates must then be screened with synthesis_screen_evidence.",
        write_output(&[
            ("search_id", json!({"type": "string"})),
            ("query", json!({"type": "string"})),
            (
                "sources",
                json!({"type": "array", "items": {"type": "string"}}),
            ),
            ("index_state", json!({"type": "string"})),
            ("candidates", arr()),
        ]),
        search::search_evidence,
    )
}

fn retrieval_add_evidence(tool: Tool) -> ToolDef {
    write::<AddEvidenceArgs>(
        tool,
        "Add evidence you found",
        "Call when you have evidence the sources did not return (origin client): give its full text, source, type and date. The service scores it; a client-given relevance is recorded as such, and the conclusion reports the share of client evidence.",
        write_output(&[
            ("evidence_id", json!({"type": "string"})),
            ("evidence", obj()),
        ]),
        evidence::add,
    )
}

fn retrieval_get_source_detail(tool: Tool) -> ToolDef {
    read::<SourceDetailArgs>(
        tool,
        "Read an evidence item in full",
        "Call when a summary is not enough: returns the item's full text from the content store and its hash.",
        output(
            true,
            &[
                ("evidence", obj()),
                ("content", json!({"type": "string"})),
                ("content_hash", json!({"type": "string"})),
            ],
        ),
        evidence::source_detail,
    )
}

fn retrieval_retract_evidence(tool: Tool) -> ToolDef {
    write::<RetractEvidenceArgs>(
        tool,
        "Retract an evidence item",
        "Call when an item turns out to be wrong or unusable (withdrawn, duplicated, misattributed): it leaves the verdict, with the reason, and nothing is deleted.",
        write_output(&[("evidence", obj())]),
        evidence::retract,
    )
}

fn synthesis_screen_evidence(tool: Tool) -> ToolDef {
    write::<ScreenEvidenceArgs>(
        tool,
        "Screen candidates",
        "Call after searching or adding evidence: adopt or reject each candidate, giving its stance toward the main question (supports, opposes, neutral) to adopt it. Every candidate must be screened before conflict resolution.",
        write_output(&[
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
        "Call after screening, any time, to group the adopted evidence into viewpoints by scope and stance. Optional.",
        write_output(&[("synthesis", obj())]),
        evaluation::synthesis,
    )
}

fn evaluation_conflict_resolution(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Resolve conflicts by the rules",
        "Call after the last change to the evidence: within each scope where adopted items support and oppose, the rules decide by authority, then recency, or leave the conflict pending for a person with a divergence summary.",
        write_output(&[("conflicts", arr())]),
        evaluation::conflict_resolution,
    )
}

fn evaluation_resolve_conflict(tool: Tool) -> ToolDef {
    write::<ResolveConflictArgs>(
        tool,
        "Decide a conflict as a person",
        "Call when a conflict is pending (a person decides the winning side, or that both stand) or to appeal an automatic adjudication; give the reason. Needs the reviewer role when tokens are in use.",
        write_output(&[("conflict", obj())]),
        evaluation::resolve_conflict,
    )
    .for_role(Role::Reviewer)
}

fn evaluation_build_decision_matrix(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Build the decision matrix",
        "Call after conflict resolution and any human decisions: a row per item with authority, reliability, relevance, recency, stance and status, and aggregates per stance.",
        write_output(&[("matrix", obj())]),
        evaluation::decision_matrix,
    )
}

fn evaluation_generate_conclusion(tool: Tool) -> ToolDef {
    write::<TaskArgs>(
        tool,
        "Issue the verdict",
        "Call after the decision matrix: the service computes the verdict and its confidence from the recorded evidence by the task's rule set and returns the conclusion card, the single source of truth. Only evidence in the ledger counts.",
        write_output(&[
            ("conclusion_id", json!({"type": "string"})),
            ("stance", json!({"type": "string"})),
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
        "Call after a conclusion: records and returns why the verdict is what it is, every line citing the ledger events (seq and hash) it rests on.",
        write_output(&[
            ("explanation", obj()),
            ("markdown", json!({"type": "string"})),
        ]),
        evaluation::explain,
    )
}

fn research_summarize_state(tool: Tool) -> ToolDef {
    read::<TaskReadArgs>(
        tool,
        "Summarise a task",
        "Call to get a compact view of a task for your context window: status, counts, pending steps, conflicts and the current verdict.",
        output(true, &[("summary", obj()), ("pending_actions", arr())]),
        task::summarize,
    )
}

fn research_close_task(tool: Tool) -> ToolDef {
    write::<CloseTaskArgs>(
        tool,
        "Close a task",
        "Call when the research is finished: nothing can be written to the task afterwards.",
        write_output(&[("status", json!({"type": "string"}))]),
        task::close,
    )
}

fn research_run_pipeline(tool: Tool) -> ToolDef {
    write::<RunPipelineArgs>(
        tool,
        "Run the research pipeline",
        "Call to let the service carry a task through its steps in the background: 1 plan (the sub-questions as given), 2 retrieve (each source, for each scope), 3 screen, 4 resolve conflicts, 5 synthesise, 6 build the matrix, 7 conclude, 8 explain. Returns a job_id at once; poll research_job_status. The job stops at step 3 when candidates need your judgement: screen them with synthesis_screen_evidence, then call this again, and it resumes from what the ledger holds.",
        job_output(),
        task::run_pipeline,
    )
}

fn research_job_status(tool: Tool) -> ToolDef {
    read::<JobStatusArgs>(
        tool,
        "Read a pipeline job",
        "Call to follow a job started by research_run_pipeline: its status (running, waiting, completed, failed, interrupted), the step it is at, as in \"step 2/8: retrieving evidence 2/3\", the steps done, and the pending actions when it waits for your judgement.",
        job_output(),
        task::job_status,
    )
}

fn audit_verify(tool: Tool) -> ToolDef {
    read::<NoArgs>(
        tool,
        "Verify the ledger",
        "Call to check that the ledger was never rewritten: the hash chain, the Merkle tree against every signed checkpoint, and every signature. Checks what was appended since the last verification.",
        output(
            false,
            &[
                ("intact", json!({"type": "boolean"})),
                ("size", json!({"type": "integer"})),
                ("root", json!({"type": "string"})),
            ],
        ),
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
    value
}

/// An output schema: an object with `task_id`, `session_version` and the given properties.
fn output(task: bool, properties: &[(&str, Value)]) -> Value {
    let mut props = serde_json::Map::new();
    let mut required = Vec::new();
    if task {
        props.insert("task_id".into(), json!({"type": "string"}));
        props.insert(
            "session_version".into(),
            json!({"type": "integer", "minimum": 0}),
        );
        required.push(json!("task_id"));
        required.push(json!("session_version"));
    }
    for (name, schema) in properties {
        props.insert((*name).to_owned(), schema.clone());
        required.push(json!(name));
    }
    json!({"type": "object", "properties": props, "required": required})
}

fn obj() -> Value {
    json!({"type": "object"})
}

fn arr() -> Value {
    json!({"type": "array", "items": {"type": "object"}})
}

fn write_output(properties: &[(&str, Value)]) -> Value {
    let mut all = vec![("replayed", json!({"type": "boolean"}))];
    all.extend(properties.iter().cloned());
    output(true, &all)
}

/// The structured result of the job tools: the job as it stands.
fn job_output() -> Value {
    let status = json!({
        "type": "string",
        "enum": ["running", "waiting", "completed", "failed", "interrupted"],
    });
    write_output(&[
        ("job_id", json!({"type": "string"})),
        ("status", status),
        (
            "step",
            json!({"type": "integer", "minimum": 1, "maximum": 8}),
        ),
        ("steps_total", json!({"type": "integer"})),
        ("step_name", json!({"type": "string"})),
        ("progress", json!({"type": "string"})),
        ("steps", arr()),
        ("pending_actions", arr()),
    ])
}
