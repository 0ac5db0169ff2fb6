//! The tools: their names, descriptions, schemas and annotations, and what calling each does.
//!
//! This is the contract every front end exposes the same way: the MCP bridge lists these tools
//! and calls them, `GET /v1/tools/list` and `POST /v1/tools/call` answer with the same shapes.
//! Names are `domain_action` with an underscore (clients such as Claude Desktop refuse a server
//! whose tool names do not match `^[a-zA-Z0-9_-]{1,64}$`). Every result is a JSON object with
//! `task_id` and `session_version` (and `replayed` for writes), plus a short text for people.

use research::TaskState;
use research::command::{
    AddEvidence, CloseTask, Command, EvidenceInput, ExpandSubQuestions, OpenTask, RecordSearch,
    ResolveConflict, RetractEvidence, ScopeChoice, ScreenEvidence, ScreeningInput, SearchCandidate,
};
use research::event::{Event, RelevanceBasis, ScreeningDecision};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::args::*;
use crate::error::ServiceError;
use crate::service::{Caller, Service, Target, WriteOptions, Written};
use crate::tokens::Role;

/// One tool as clients see it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// A short title.
    pub title: String,
    /// When to call it.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// JSON Schema of its structured result.
    pub output_schema: Value,
    /// It changes nothing.
    pub read_only: bool,
    /// Calling it twice with the same arguments has the effect of calling it once.
    pub idempotent: bool,
    /// It reaches beyond the ledger and the corpus (a registered external tool).
    pub open_world: bool,
}

/// How far a long tool call has got, for front ends that report progress (MCP progress
/// notifications): a search reports once per source.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    /// Units done.
    pub progress: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// What is happening, for people.
    pub message: String,
}

/// A tool's result: the structured object (the single source of truth) and a short text.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The structured result.
    pub structured: Value,
    /// A line or two for people.
    pub text: String,
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

/// Every built-in tool, in a stable order.
pub fn tool_specs() -> Vec<ToolSpec> {
    built_in_tools().to_vec()
}

/// The built-in tools, made once: their schemas are generated from types and never change,
/// and every call's role check and dispatch reads them.
pub fn built_in_tools() -> &'static [ToolSpec] {
    static SPECS: std::sync::OnceLock<Vec<ToolSpec>> = std::sync::OnceLock::new();
    SPECS.get_or_init(make_tool_specs)
}

fn make_tool_specs() -> Vec<ToolSpec> {
    let write =
        |name: &str, title: &str, description: &str, input_schema, output_schema| ToolSpec {
            name: name.to_owned(),
            title: title.to_owned(),
            description: description.to_owned(),
            input_schema,
            output_schema,
            read_only: false,
            idempotent: false,
            open_world: false,
        };
    let read = |name: &str, title: &str, description: &str, input_schema, output_schema| ToolSpec {
        name: name.to_owned(),
        title: title.to_owned(),
        description: description.to_owned(),
        input_schema,
        output_schema,
        read_only: true,
        idempotent: true,
        open_world: false,
    };
    vec![
        write(
            "research_open_task",
            "Open a research task",
            "Call first, once per research question: opens a task and returns its task_id. Every later tool takes that task_id. Give constraints, a research date and rule overrides here; they are recorded and cannot change later.",
            schema_of::<OpenTaskArgs>(),
            write_output(&[
                ("question", json!({"type": "string"})),
                ("research_date", json!({"type": "string"})),
                ("mode", json!({"type": "string"})),
                ("rules", obj()),
            ]),
        ),
        write(
            "research_expand_subquestions",
            "Add sub-questions",
            "Call when the question splits into parts that evidence answers separately; each sub-question gets an id (sq-N) to scope searches and evidence. Conflicts are only adjudicated within one scope.",
            schema_of::<ExpandSubquestionsArgs>(),
            write_output(&[("sub_questions", arr())]),
        ),
        write(
            "retrieval_search_evidence",
            "Search for evidence",
            "Call to find evidence: searches the sources (the embedded corpus by default) and adds new results to the task as candidates, scored by the service (relevance, reliability, recency). Candidates must then be screened with synthesis_screen_evidence.",
            schema_of::<SearchEvidenceArgs>(),
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
        ),
        write(
            "retrieval_add_evidence",
            "Add evidence you found",
            "Call when you have evidence the sources did not return (origin client): give its full text, source, type and date. The service scores it; a client-given relevance is recorded as such, and the conclusion reports the share of client evidence.",
            schema_of::<AddEvidenceArgs>(),
            write_output(&[
                ("evidence_id", json!({"type": "string"})),
                ("evidence", obj()),
            ]),
        ),
        read(
            "retrieval_get_source_detail",
            "Read an evidence item in full",
            "Call when a summary is not enough: returns the item's full text from the content store and its hash.",
            schema_of::<SourceDetailArgs>(),
            output(
                true,
                &[
                    ("evidence", obj()),
                    ("content", json!({"type": "string"})),
                    ("content_hash", json!({"type": "string"})),
                ],
            ),
        ),
        write(
            "retrieval_retract_evidence",
            "Retract an evidence item",
            "Call when an item turns out to be wrong or unusable (withdrawn, duplicated, misattributed): it leaves the verdict, with the reason, and nothing is deleted.",
            schema_of::<RetractEvidenceArgs>(),
            write_output(&[("evidence", obj())]),
        ),
        write(
            "synthesis_screen_evidence",
            "Screen candidates",
            "Call after searching or adding evidence: adopt or reject each candidate, giving its stance toward the main question (supports, opposes, neutral) to adopt it. Every candidate must be screened before conflict resolution.",
            schema_of::<ScreenEvidenceArgs>(),
            write_output(&[
                ("screened", arr()),
                ("candidates_remaining", json!({"type": "integer"})),
            ]),
        ),
        write(
            "synthesis_research_synthesis",
            "Synthesise viewpoints",
            "Call after screening, any time, to group the adopted evidence into viewpoints by scope and stance. Optional.",
            schema_of::<TaskArgs>(),
            write_output(&[("synthesis", obj())]),
        ),
        write(
            "evaluation_conflict_resolution",
            "Resolve conflicts by the rules",
            "Call after the last change to the evidence: within each scope where adopted items support and oppose, the rules decide by authority, then recency, or leave the conflict pending for a person with a divergence summary.",
            schema_of::<TaskArgs>(),
            write_output(&[("conflicts", arr())]),
        ),
        write(
            "evaluation_resolve_conflict",
            "Decide a conflict as a person",
            "Call when a conflict is pending (a person decides the winning side, or that both stand) or to appeal an automatic adjudication; give the reason. Needs the reviewer role when tokens are in use.",
            schema_of::<ResolveConflictArgs>(),
            write_output(&[("conflict", obj())]),
        ),
        write(
            "evaluation_build_decision_matrix",
            "Build the decision matrix",
            "Call after conflict resolution and any human decisions: a row per item with authority, reliability, relevance, recency, stance and status, and aggregates per stance.",
            schema_of::<TaskArgs>(),
            write_output(&[("matrix", obj())]),
        ),
        write(
            "evaluation_generate_conclusion",
            "Issue the verdict",
            "Call after the decision matrix: the service computes the verdict and its confidence from the recorded evidence by the task's rule set and returns the conclusion card, the single source of truth. Only evidence in the ledger counts.",
            schema_of::<TaskArgs>(),
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
        ),
        write(
            "evaluation_explain_reasoning",
            "Explain the verdict",
            "Call after a conclusion: records and returns why the verdict is what it is, every line citing the ledger events (seq and hash) it rests on.",
            schema_of::<TaskArgs>(),
            write_output(&[
                ("explanation", obj()),
                ("markdown", json!({"type": "string"})),
            ]),
        ),
        read(
            "research_summarize_state",
            "Summarise a task",
            "Call to get a compact view of a task for your context window: status, counts, pending steps, conflicts and the current verdict.",
            schema_of::<TaskReadArgs>(),
            output(true, &[("summary", obj()), ("pending_actions", arr())]),
        ),
        write(
            "research_close_task",
            "Close a task",
            "Call when the research is finished: nothing can be written to the task afterwards.",
            schema_of::<CloseTaskArgs>(),
            write_output(&[("status", json!({"type": "string"}))]),
        ),
        write(
            "research_run_pipeline",
            "Run the research pipeline",
            "Call to let the service carry a task through its steps in the background: 1 plan (the sub-questions as given), 2 retrieve (each source, for each scope), 3 screen, 4 resolve conflicts, 5 synthesise, 6 build the matrix, 7 conclude, 8 explain. Returns a job_id at once; poll research_job_status. The job stops at step 3 when candidates need your judgement: screen them with synthesis_screen_evidence, then call this again, and it resumes from what the ledger holds.",
            schema_of::<RunPipelineArgs>(),
            job_output(),
        ),
        read(
            "research_job_status",
            "Read a pipeline job",
            "Call to follow a job started by research_run_pipeline: its status (running, waiting, completed, failed, interrupted), the step it is at, as in \"step 2/8: retrieving evidence 2/3\", the steps done, and the pending actions when it waits for your judgement.",
            schema_of::<JobStatusArgs>(),
            job_output(),
        ),
        read(
            "audit_verify",
            "Verify the ledger",
            "Call to check that the ledger was never rewritten: the hash chain, the Merkle tree against every signed checkpoint, and every signature. Checks what was appended since the last verification.",
            schema_of::<NoArgs>(),
            output(
                false,
                &[
                    ("intact", json!({"type": "boolean"})),
                    ("size", json!({"type": "integer"})),
                    ("root", json!({"type": "string"})),
                ],
            ),
        ),
    ]
}

/// Reads a tool's arguments strictly, naming the argument at fault.
pub(crate) fn parse<T: DeserializeOwned>(arguments: &Value) -> Result<T, ServiceError> {
    let arguments = if arguments.is_null() {
        json!({})
    } else {
        arguments.clone()
    };
    serde_path_to_error::deserialize(arguments).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // A missing or unknown argument is named in the message; a value of the wrong type is
        // where the path ends (`question`, `decisions[0].adopt`).
        let field = match message.split('`').nth(1) {
            Some(name) if message.contains("field `") => name.to_owned(),
            _ if path != "." => path,
            _ => "arguments".to_owned(),
        };
        ServiceError::InvalidArgument { field, message }
    })
}

fn guard(expected_version: Option<u64>, idempotency_key: &Option<String>) -> WriteOptions {
    WriteOptions {
        expected_version,
        idempotency_key: idempotency_key.clone(),
    }
}

fn base(written: &Written) -> serde_json::Map<String, Value> {
    let mut map = serde_json::Map::new();
    map.insert("task_id".into(), json!(written.task_id));
    map.insert("session_version".into(), json!(written.session_version));
    map.insert("replayed".into(), json!(written.replayed));
    map
}

fn done(map: serde_json::Map<String, Value>, text: String) -> ToolOutput {
    ToolOutput {
        structured: Value::Object(map),
        text,
    }
}

fn suffix(written: &Written) -> String {
    let replayed = if written.replayed { " (replayed)" } else { "" };
    format!(
        " Task {} is at version {}{replayed}.",
        written.task_id, written.session_version
    )
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn evidence_view(state: &TaskState, id: &str) -> Value {
    state
        .evidence_views()
        .into_iter()
        .find(|v| v.evidence_id.as_str() == id)
        .map(|v| to_json(&v))
        .unwrap_or(Value::Null)
}

/// The role a tool needs: reads for auditors, human decisions on conflicts for reviewers, every
/// other write for writers — registered tools included, since their calls are recorded.
pub fn role_for_tool(name: &str) -> Role {
    if name == "evaluation_resolve_conflict" {
        return Role::Reviewer;
    }
    match built_in_tools().iter().find(|t| t.name == name) {
        Some(spec) if spec.read_only => Role::Auditor,
        _ => Role::Writer,
    }
}

impl Service {
    /// Calls a built-in tool, blocking until it is done. Unknown names are `not_found` (the
    /// MCP bridge answers them as a protocol error before they get here).
    pub fn call_tool(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
    ) -> Result<ToolOutput, ServiceError> {
        self.call_tool_with_progress(caller, name, arguments, &mut |_| {})
    }

    /// Calls a tool, reporting progress on long calls (a search, per source).
    pub fn call_tool_with_progress(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
        progress: &mut dyn FnMut(ToolProgress),
    ) -> Result<ToolOutput, ServiceError> {
        let result = if self.has_tool(name) {
            caller
                .require(role_for_tool(name), &format!("the tool {name}"))
                .and_then(|()| self.dispatch(caller, name, arguments, progress))
        } else {
            self.dispatch(caller, name, arguments, progress)
        };
        let label = if self.has_tool(name) { name } else { "unknown" };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        self.inner.metrics.tool_call(label, outcome);
        result
    }

    fn dispatch(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
        progress: &mut dyn FnMut(ToolProgress),
    ) -> Result<ToolOutput, ServiceError> {
        if !matches!(arguments, Value::Object(_) | Value::Null) {
            return Err(ServiceError::invalid(
                "arguments",
                "the arguments must be a JSON object",
            ));
        }
        match name {
            "research_open_task" => self.open_task(caller, arguments),
            "research_expand_subquestions" => {
                let a: ExpandSubquestionsArgs = parse(arguments)?;
                let written = self.write(
                    caller,
                    name,
                    arguments,
                    Target::Existing(&a.task_id),
                    &guard(a.expected_version, &a.idempotency_key),
                    &mut |_| {
                        Ok(Command::ExpandSubQuestions(ExpandSubQuestions {
                            sub_questions: a.sub_questions.clone(),
                        }))
                    },
                )?;
                let added: Vec<Value> = written
                    .events
                    .iter()
                    .filter_map(|(_, _, e)| match e {
                        Event::SubQuestionsExpanded(x) => Some(
                            x.sub_questions
                                .iter()
                                .map(|q| json!({"id": q.id, "text": q.text}))
                                .collect::<Vec<_>>(),
                        ),
                        _ => None,
                    })
                    .flatten()
                    .collect();
                let mut map = base(&written);
                let text = format!("Added {} sub-question(s).{}", added.len(), suffix(&written));
                map.insert("sub_questions".into(), Value::Array(added));
                Ok(done(map, text))
            }
            "retrieval_search_evidence" => self.search_evidence(caller, arguments, progress),
            "research_run_pipeline" => self.run_pipeline_tool(caller, arguments),
            "research_job_status" => self.job_status_tool(arguments),
            "retrieval_add_evidence" => self.add_evidence(caller, arguments),
            "retrieval_get_source_detail" => {
                let a: SourceDetailArgs = parse(arguments)?;
                let state = self.state(&a.task_id)?;
                let item = state
                    .evidence_views()
                    .into_iter()
                    .find(|v| v.evidence_id.as_str() == a.evidence_id)
                    .ok_or_else(|| ServiceError::NotFound {
                        resource: "evidence",
                        id: a.evidence_id.clone(),
                    })?;
                let bytes = self
                    .blobs()
                    .get(&item.content_hash)
                    .map_err(ServiceError::unavailable)?;
                let content = String::from_utf8_lossy(&bytes).into_owned();
                let mut map = serde_json::Map::new();
                map.insert("task_id".into(), json!(a.task_id));
                map.insert("session_version".into(), json!(state.version()));
                map.insert("content_hash".into(), json!(hex_of(&item.content_hash)));
                map.insert("content".into(), json!(content));
                let text = format!(
                    "{} ({} characters of full text).",
                    a.evidence_id,
                    content.chars().count()
                );
                map.insert("evidence".into(), to_json(&item));
                Ok(done(map, text))
            }
            "retrieval_retract_evidence" => {
                let a: RetractEvidenceArgs = parse(arguments)?;
                let written = self.write(
                    caller,
                    name,
                    arguments,
                    Target::Existing(&a.task_id),
                    &guard(a.expected_version, &a.idempotency_key),
                    &mut |_| {
                        Ok(Command::RetractEvidence(RetractEvidence {
                            evidence_id: a.evidence_id.clone(),
                            reason: a.reason.clone(),
                        }))
                    },
                )?;
                let mut map = base(&written);
                map.insert(
                    "evidence".into(),
                    evidence_view(&written.state, &a.evidence_id),
                );
                let text = format!("Retracted {}.{}", a.evidence_id, suffix(&written));
                Ok(done(map, text))
            }
            "synthesis_screen_evidence" => {
                let a: ScreenEvidenceArgs = parse(arguments)?;
                let decisions: Vec<ScreeningInput> = a
                    .decisions
                    .iter()
                    .map(|d| ScreeningInput {
                        evidence_id: d.evidence_id.clone(),
                        decision: if d.adopt {
                            ScreeningDecision::Adopt
                        } else {
                            ScreeningDecision::Reject
                        },
                        stance: d.stance.map(Into::into),
                        sub_question: match &d.sub_question {
                            None => ScopeChoice::Keep,
                            Some(None) => ScopeChoice::MainQuestion,
                            Some(Some(id)) => ScopeChoice::SubQuestion(id.clone()),
                        },
                        reason: d.reason.clone().unwrap_or_default(),
                    })
                    .collect();
                let written = self.write(
                    caller,
                    name,
                    arguments,
                    Target::Existing(&a.task_id),
                    &guard(a.expected_version, &a.idempotency_key),
                    &mut |_| {
                        Ok(Command::ScreenEvidence(ScreenEvidence {
                            decisions: decisions.clone(),
                        }))
                    },
                )?;
                let screened: Vec<Value> = a
                    .decisions
                    .iter()
                    .map(|d| evidence_view(&written.state, &d.evidence_id))
                    .collect();
                let remaining = written
                    .state
                    .evidence_views()
                    .iter()
                    .filter(|v| matches!(v.status, research::event::EvidenceStatus::Candidate))
                    .count();
                let mut map = base(&written);
                let text = format!(
                    "Screened {} item(s); {remaining} candidate(s) left.{}",
                    screened.len(),
                    suffix(&written)
                );
                map.insert("screened".into(), Value::Array(screened));
                map.insert("candidates_remaining".into(), json!(remaining));
                Ok(done(map, text))
            }
            "synthesis_research_synthesis" => {
                let a: TaskArgs = parse(arguments)?;
                let written = self.simple(caller, name, arguments, &a, Command::RecordSynthesis)?;
                let mut map = base(&written);
                map.insert(
                    "synthesis".into(),
                    written
                        .state
                        .latest_synthesis()
                        .map(|s| to_json(&s.event))
                        .unwrap_or(Value::Null),
                );
                let text = format!("Recorded a synthesis.{}", suffix(&written));
                Ok(done(map, text))
            }
            "evaluation_conflict_resolution" => {
                let a: TaskArgs = parse(arguments)?;
                let written =
                    self.simple(caller, name, arguments, &a, Command::RunConflictResolution)?;
                let conflicts: Vec<_> = written
                    .state
                    .conflict_views()
                    .into_iter()
                    .filter(|c| c.current)
                    .collect();
                let pending = conflicts
                    .iter()
                    .filter(|c| matches!(c.tier, research::event::Tier::Pending))
                    .count();
                let mut list = Vec::with_capacity(conflicts.len());
                for c in &conflicts {
                    let mut v = to_json(c);
                    if matches!(c.tier, research::event::Tier::Pending)
                        && let (Value::Object(m), Some(d)) =
                            (&mut v, written.state.divergence(&c.conflict_id))
                    {
                        m.insert("divergence".into(), to_json(&d));
                    }
                    list.push(v);
                }
                let mut map = base(&written);
                let text = format!(
                    "{} conflict(s) in force, {pending} pending a human decision.{}",
                    conflicts.len(),
                    suffix(&written)
                );
                map.insert("conflicts".into(), Value::Array(list));
                Ok(done(map, text))
            }
            "evaluation_resolve_conflict" => {
                let a: ResolveConflictArgs = parse(arguments)?;
                let written = self.write(
                    caller,
                    name,
                    arguments,
                    Target::Existing(&a.task_id),
                    &guard(a.expected_version, &a.idempotency_key),
                    &mut |_| {
                        Ok(Command::ResolveConflict(ResolveConflict {
                            conflict_id: a.conflict_id.clone(),
                            winner: a.winner.into(),
                            reason: a.reason.clone(),
                        }))
                    },
                )?;
                let conflict = written
                    .state
                    .conflict_views()
                    .into_iter()
                    .find(|c| c.conflict_id.as_str() == a.conflict_id);
                let mut map = base(&written);
                map.insert(
                    "conflict".into(),
                    conflict.map(|c| to_json(&c)).unwrap_or(Value::Null),
                );
                let text = format!(
                    "Recorded the decision on {}.{}",
                    a.conflict_id,
                    suffix(&written)
                );
                Ok(done(map, text))
            }
            "evaluation_build_decision_matrix" => {
                let a: TaskArgs = parse(arguments)?;
                let written =
                    self.simple(caller, name, arguments, &a, Command::BuildDecisionMatrix)?;
                let mut map = base(&written);
                map.insert(
                    "matrix".into(),
                    written
                        .state
                        .latest_matrix()
                        .map(|m| to_json(&m.event))
                        .unwrap_or(Value::Null),
                );
                let text = format!("Built the decision matrix.{}", suffix(&written));
                Ok(done(map, text))
            }
            "evaluation_generate_conclusion" => {
                let a: TaskArgs = parse(arguments)?;
                let written =
                    self.simple(caller, name, arguments, &a, Command::GenerateConclusion)?;
                let issued = written.events.iter().rev().find_map(|(_, _, e)| match e {
                    Event::ConclusionIssued(c) => Some(c.conclusion_id.clone()),
                    _ => None,
                });
                let card = written
                    .state
                    .conclusion_card(issued.as_ref())
                    .ok_or_else(|| {
                        ServiceError::unavailable("a conclusion was issued but has no card")
                    })?;
                let text = format!(
                    "Verdict: {} (confidence {:.3}).{}",
                    card.stance.name(),
                    card.confidence,
                    suffix(&written)
                );
                let mut map = base(&written);
                if let Value::Object(card) = to_json(&card) {
                    map.extend(card);
                }
                Ok(done(map, text))
            }
            "evaluation_explain_reasoning" => {
                let a: TaskArgs = parse(arguments)?;
                let written =
                    self.simple(caller, name, arguments, &a, Command::ExplainReasoning)?;
                let explanation = written.state.current_explanation().ok_or_else(|| {
                    ServiceError::unavailable("an explanation was recorded but is not in the state")
                })?;
                let markdown = explanation.event.markdown();
                let mut map = base(&written);
                map.insert("explanation".into(), to_json(&explanation.event));
                map.insert("markdown".into(), json!(markdown));
                Ok(done(map, markdown))
            }
            "research_summarize_state" => {
                let a: TaskReadArgs = parse(arguments)?;
                let state = self.state(&a.task_id)?;
                let summary = state.summary().ok_or_else(|| ServiceError::NotFound {
                    resource: "task",
                    id: a.task_id.clone(),
                })?;
                let mut map = serde_json::Map::new();
                map.insert("task_id".into(), json!(a.task_id));
                map.insert("session_version".into(), json!(state.version()));
                map.insert(
                    "pending_actions".into(),
                    to_json(&research::next_actions(&state)),
                );
                map.insert("summary".into(), to_json(&summary));
                Ok(done(map, summary.text()))
            }
            "research_close_task" => {
                let a: CloseTaskArgs = parse(arguments)?;
                let written = self.write(
                    caller,
                    name,
                    arguments,
                    Target::Existing(&a.task_id),
                    &guard(a.expected_version, &a.idempotency_key),
                    &mut |_| {
                        Ok(Command::CloseTask(CloseTask {
                            reason: a.reason.clone(),
                        }))
                    },
                )?;
                let mut map = base(&written);
                map.insert("status".into(), json!("closed"));
                let text = format!("Closed.{}", suffix(&written));
                Ok(done(map, text))
            }
            "audit_verify" => {
                let _: NoArgs = parse(arguments)?;
                let report = self.verify();
                let intact = report.is_intact();
                let text = match &report.failure {
                    None => format!("Intact: {} events, root {}.", report.size, report.root),
                    Some(f) => format!("FAILED at seq {}: {}", f.seq, f.problem),
                };
                let mut map = serde_json::Map::new();
                map.insert("intact".into(), json!(intact));
                if let Value::Object(r) = to_json(&report) {
                    map.extend(r);
                }
                Ok(done(map, text))
            }
            other => {
                let registered = self.registry().get(other).cloned();
                if let Some(contract) = registered {
                    return self.call_external(caller, &contract, arguments);
                }
                let fallback = self.registry().fallback(other).map(str::to_owned);
                match fallback {
                    Some(to) if to != other => {
                        let mut out =
                            self.call_tool_with_progress(caller, &to, arguments, progress)?;
                        if let Value::Object(map) = &mut out.structured {
                            map.insert("fallback_from".into(), json!(other));
                        }
                        out.text =
                            format!("{other} is not a tool; {to} answered instead. {}", out.text);
                        Ok(out)
                    }
                    _ => Err(ServiceError::NotFound {
                        resource: "tool",
                        id: other.to_owned(),
                    }),
                }
            }
        }
    }

    /// Whether `name` is a tool this service can call: built in, registered, or sent to a
    /// fallback.
    pub fn has_tool(&self, name: &str) -> bool {
        built_in_tools().iter().any(|t| t.name == name)
            || self.registry().get(name).is_some()
            || self.registry().fallback(name).is_some()
    }

    /// Calls a tool from async code, on a blocking thread.
    pub async fn call_tool_async(
        &self,
        caller: Caller,
        name: String,
        arguments: Value,
    ) -> Result<ToolOutput, ServiceError> {
        self.call_tool_async_with_progress(caller, name, arguments, Box::new(|_| {}))
            .await
    }

    /// [`Service::call_tool_async`], telling `progress` (on the blocking thread) how a long
    /// call is getting on.
    pub async fn call_tool_async_with_progress(
        &self,
        caller: Caller,
        name: String,
        arguments: Value,
        mut progress: Box<dyn FnMut(ToolProgress) + Send>,
    ) -> Result<ToolOutput, ServiceError> {
        let service = self.clone();
        tokio::task::spawn_blocking(move || {
            service.call_tool_with_progress(&caller, &name, &arguments, &mut *progress)
        })
        .await
        .map_err(|e| ServiceError::unavailable(format!("the call stopped: {e}")))?
    }

    fn simple(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        a: &TaskArgs,
        command: Command,
    ) -> Result<Written, ServiceError> {
        self.write(
            caller,
            tool,
            arguments,
            Target::Existing(&a.task_id),
            &guard(a.expected_version, &a.idempotency_key),
            &mut |_| Ok(command.clone()),
        )
    }

    fn open_task(&self, caller: &Caller, arguments: &Value) -> Result<ToolOutput, ServiceError> {
        let a: OpenTaskArgs = parse(arguments)?;
        let mut rules: research::rules::RulesOverride = match &a.rules {
            None => Default::default(),
            Some(r) => serde_json::from_value(to_json(r))
                .map_err(|e| ServiceError::invalid("rules", e.to_string()))?,
        };
        // A client that names no rule set gets the current default; the domain would read the
        // absence as `v1`.
        if rules.rule_set.is_none() {
            rules.rule_set = Some(research::rules::RULE_SET_DEFAULT.to_owned());
        }
        let rules = Some(rules);
        let task_id = uuid_v7_like(self);
        let written = self.write(
            caller,
            "research_open_task",
            arguments,
            Target::New(&task_id),
            &guard(a.expected_version, &a.idempotency_key),
            &mut |_| {
                Ok(Command::OpenTask(OpenTask {
                    task_id: task_id.clone(),
                    question: a.question.clone(),
                    constraints: a.constraints.clone(),
                    research_date: a.research_date.clone(),
                    mode: a.mode.map(Into::into).unwrap_or_default(),
                    rules: rules.clone(),
                }))
            },
        )?;
        let task = written
            .state
            .task()
            .ok_or_else(|| ServiceError::unavailable("an opened task has no task record"))?;
        let mut map = base(&written);
        map.insert("question".into(), json!(task.question));
        map.insert(
            "research_date".into(),
            json!(task.research_date.to_string()),
        );
        map.insert("mode".into(), json!(task.mode.name()));
        map.insert("rules".into(), to_json(&task.rules));
        let text = format!(
            "Opened task {} for: {}.{}",
            written.task_id,
            task.question,
            suffix(&written)
        );
        Ok(done(map, text))
    }

    fn add_evidence(&self, caller: &Caller, arguments: &Value) -> Result<ToolOutput, ServiceError> {
        let a: AddEvidenceArgs = parse(arguments)?;
        let written = self.write(
            caller,
            "retrieval_add_evidence",
            arguments,
            Target::Existing(&a.task_id),
            &guard(a.expected_version, &a.idempotency_key),
            &mut |state| {
                let task = state.task().ok_or_else(|| ServiceError::NotFound {
                    resource: "task",
                    id: a.task_id.clone(),
                })?;
                // The content goes into the store, durably, before the event that cites it.
                let content_hash = self
                    .blobs()
                    .put(a.content.as_bytes())
                    .map_err(|e| match e {
                        sources::BlobError::TooLarge { bytes, limit } => {
                            ServiceError::LimitExceeded {
                                limit: "content_bytes_max".into(),
                                max: limit,
                                actual: bytes,
                            }
                        }
                        other => ServiceError::unavailable(other),
                    })?;
                let (relevance, relevance_basis, relevance_inputs) = match a.relevance {
                    Some(r) => (r, RelevanceBasis::GivenByClient, None),
                    None => self.computed_relevance(task, None, &a.content)?,
                };
                let summary = match &a.summary {
                    Some(s) => s.clone(),
                    None => sources::summarize(
                        &a.content,
                        usize::try_from(self.options().research.summary_chars_max)
                            .unwrap_or(usize::MAX),
                    ),
                };
                Ok(Command::AddEvidence(AddEvidence {
                    items: vec![EvidenceInput {
                        source: Some(a.source.clone()),
                        url: a.url.clone(),
                        publish_date: a.publish_date.clone(),
                        publish_date_defaulted: a.publish_date_defaulted.unwrap_or(false),
                        source_type: a.source_type.clone(),
                        citation_count: a.citation_count,
                        summary,
                        content_hash,
                        relevance,
                        relevance_basis,
                        relevance_inputs,
                        stance: a.stance.map(Into::into),
                        sub_question: a.sub_question.clone(),
                    }],
                }))
            },
        )?;
        let id = written
            .events
            .iter()
            .find_map(|(_, _, e)| match e {
                Event::EvidenceAdded(x) => Some(x.evidence_id.as_str().to_owned()),
                _ => None,
            })
            .ok_or_else(|| ServiceError::unavailable("evidence was added but no event says so"))?;
        let mut map = base(&written);
        map.insert("evidence".into(), evidence_view(&written.state, &id));
        let text = format!(
            "Added {id} as a candidate; screen it next.{}",
            suffix(&written)
        );
        map.insert("evidence_id".into(), json!(id));
        Ok(done(map, text))
    }

    /// The relevance the task's rule set computes for `text` when neither a source nor the
    /// client scored it: under `v1` IDF coverage of the question's terms; under `v2` topicality
    /// over the content terms of the question and of `query` (the search that found it), with
    /// the inputs to record.
    pub(crate) fn computed_relevance(
        &self,
        task: &research::state::TaskInfo,
        query: Option<&str>,
        text: &str,
    ) -> Result<
        (
            f64,
            RelevanceBasis,
            Option<research::rules::RelevanceInputs>,
        ),
        ServiceError,
    > {
        let Some(params) = &task.rules.v2 else {
            return Ok((
                self.coverage(&task.question, text)?,
                RelevanceBasis::IdfCoverage,
                None,
            ));
        };
        let (terms, from_question) = v2_terms(&task.question, query);
        let (docs, freqs) = self
            .corpus()
            .term_frequencies(&terms)
            .map_err(ServiceError::unavailable)?;
        let in_text: std::collections::HashSet<String> =
            sources::tokenize(text).into_iter().collect();
        let found: Vec<bool> = terms.iter().map(|t| in_text.contains(t)).collect();
        let inputs = v2_inputs(docs, &freqs, &found, &from_question, query);
        let relevance = research::rules::v2::topical_relevance(&inputs, params);
        Ok((relevance, RelevanceBasis::Topicality, Some(inputs)))
    }

    /// IDF coverage of the question's terms in `text`, over the corpus (SPEC §4); with an empty
    /// corpus every term weighs `ln 2`, which is plain coverage.
    pub(crate) fn coverage(&self, question: &str, text: &str) -> Result<f64, ServiceError> {
        let mut terms: Vec<String> = Vec::new();
        for t in sources::tokenize(question) {
            if !terms.contains(&t) {
                terms.push(t);
            }
        }
        let (docs, freqs) = self
            .corpus()
            .term_frequencies(&terms)
            .map_err(ServiceError::unavailable)?;
        let question_terms: Vec<research::rules::QuestionTerm<'_>> = freqs
            .iter()
            .map(|f| research::rules::QuestionTerm {
                term: &f.term,
                doc_freq: f.doc_freq,
            })
            .collect();
        let tokens = sources::tokenize(text);
        let text_terms: Vec<&str> = tokens.iter().map(String::as_str).collect();
        Ok(research::rules::idf_coverage(
            &question_terms,
            &text_terms,
            docs,
        ))
    }

    fn search_evidence(
        &self,
        caller: &Caller,
        arguments: &Value,
        progress: &mut dyn FnMut(ToolProgress),
    ) -> Result<ToolOutput, ServiceError> {
        let a: SearchEvidenceArgs = parse(arguments)?;
        let sources_asked = a
            .sources
            .clone()
            .unwrap_or_else(|| vec!["corpus".to_owned()]);
        if sources_asked.is_empty() {
            return Err(ServiceError::invalid("sources", "ask at least one source"));
        }
        let mut seen_sources = std::collections::BTreeSet::new();
        if let Some(repeated) = sources_asked
            .iter()
            .find(|s| !seen_sources.insert(s.as_str()))
        {
            return Err(ServiceError::invalid(
                "sources",
                format!("{repeated} is asked twice"),
            ));
        }
        let mut external = Vec::new();
        for source in &sources_asked {
            if source == "corpus" {
                if let Some(why) = self.corpus_missing() {
                    return Err(ServiceError::SourceFailed {
                        source_name: "corpus".into(),
                        message: why.to_owned(),
                    });
                }
                continue;
            }
            let contract = self.registry().get(source).cloned();
            match contract {
                Some(c) if sources::contracts::call::is_evidence_source(&c) => external.push(c),
                _ => {
                    let known: Vec<String> = std::iter::once("corpus".to_owned())
                        .chain(
                            self.registry()
                                .tools()
                                .values()
                                .filter(|c| sources::contracts::call::is_evidence_source(c))
                                .map(|c| c.name.clone()),
                        )
                        .collect();
                    return Err(ServiceError::invalid(
                        "sources",
                        format!(
                            "unknown source {source:?}; the sources are: {}",
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        let ask_corpus = sources_asked.iter().any(|s| s == "corpus");
        let limit_max = self.options().corpus.search_results_max as u32;
        let limit = a.limit.unwrap_or(self.options().search_results_default);
        if limit == 0 || limit > limit_max {
            return Err(ServiceError::LimitExceeded {
                limit: "search_results_max".into(),
                max: u64::from(limit_max),
                actual: u64::from(limit),
            });
        }
        let total = sources_asked.len() as u64;

        // External sources are asked first, each on its own: one that fails is reported and the
        // others still count. Their calls are recorded in the task as they happen.
        let mut external_candidates: Vec<SearchCandidate> = Vec::new();
        let mut failed_sources = Vec::new();
        let mut dropped_items = Vec::new();
        if !external.is_empty() {
            let state = self.state(&a.task_id)?;
            let query = search_query(&state, &a)?;
            for (i, contract) in external.iter().enumerate() {
                progress(ToolProgress {
                    progress: i as u64,
                    total: Some(total),
                    message: format!("asking {} ({}/{total})", contract.name, i + 1),
                });
                match self.search_external(
                    caller,
                    contract,
                    &state,
                    &query,
                    limit,
                    a.sub_question.as_ref(),
                ) {
                    Ok((candidates, dropped)) => {
                        external_candidates.extend(candidates);
                        dropped_items.extend(
                            dropped
                                .into_iter()
                                .map(|d| json!({"source": contract.name, "item": d})),
                        );
                    }
                    Err(e) => {
                        failed_sources.push(json!({"source": contract.name, "error": e.to_json()}))
                    }
                }
            }
            if !ask_corpus && external_candidates.is_empty() && !failed_sources.is_empty() {
                let first = &failed_sources[0];
                return Err(ServiceError::SourceFailed {
                    source_name: first["source"].as_str().unwrap_or_default().to_owned(),
                    message: first["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
        }
        if ask_corpus {
            progress(ToolProgress {
                progress: external.len() as u64,
                total: Some(total),
                message: format!("searching the corpus ({total}/{total})"),
            });
        }
        let written = self.write(
            caller,
            "retrieval_search_evidence",
            arguments,
            Target::Existing(&a.task_id),
            &guard(a.expected_version, &a.idempotency_key),
            &mut |state| {
                let task = state.task().ok_or_else(|| ServiceError::NotFound {
                    resource: "task",
                    id: a.task_id.clone(),
                })?;
                let query = search_query(state, &a)?;
                let mut results = external_candidates.clone();
                let mut index_state = String::new();
                if ask_corpus {
                    // `v1` weighs every term of the question; `v2` the content terms of the
                    // question and of the query.
                    let (terms, from_question) = if task.rules.is_v2() {
                        v2_terms(&task.question, Some(&query))
                    } else {
                        let mut terms: Vec<String> = Vec::new();
                        for t in sources::tokenize(&task.question) {
                            if !terms.contains(&t) {
                                terms.push(t);
                            }
                        }
                        let from_question = vec![true; terms.len()];
                        (terms, from_question)
                    };
                    let result = self
                        .corpus()
                        .search_with_rules(&query, limit as usize, &terms, &task.rules)
                        .map_err(|e| match e {
                            sources::SearchError::Corpus(inner) => ServiceError::SourceFailed {
                                source_name: "corpus".into(),
                                message: inner.to_string(),
                            },
                            other => ServiceError::invalid("query", other.to_string()),
                        })?;
                    index_state = result.index_state.id.clone();
                    for hit in result.candidates() {
                        let mut candidate = self.corpus_candidate(hit, a.sub_question.as_ref())?;
                        if let Some(params) = &task.rules.v2 {
                            let inputs = v2_inputs(
                                result.corpus_docs,
                                &result.question_terms,
                                &hit.terms_found,
                                &from_question,
                                Some(&query),
                            );
                            candidate.evidence.relevance =
                                research::rules::v2::topical_relevance(&inputs, params);
                            candidate.evidence.relevance_basis = RelevanceBasis::Topicality;
                            candidate.evidence.relevance_inputs = Some(inputs);
                        }
                        results.push(candidate);
                    }
                }
                // Candidates from every source by reliability pre-score; among equals, the
                // order each source gave.
                let reliability = |c: &SearchCandidate| {
                    let authority = c
                        .evidence
                        .source_type
                        .parse::<research::rules::SourceType>()
                        .map_or(0.0, |t| task.rules.authority_of(t));
                    research::rules::reliability(authority, c.evidence.citation_count)
                };
                results.sort_by(|x, y| reliability(y).total_cmp(&reliability(x)));
                Ok(Command::RecordSearch(RecordSearch {
                    query,
                    sources: sources_asked.clone(),
                    index_state,
                    results,
                }))
            },
        )?;
        let recorded = written.events.iter().find_map(|(_, _, e)| match e {
            Event::SearchRecorded(s) => Some(s.clone()),
            _ => None,
        });
        let Some(search) = recorded else {
            return Err(ServiceError::unavailable(
                "a search was recorded but no event says so",
            ));
        };
        let from_corpus = search
            .results
            .iter()
            .filter(|h| h.origin == "corpus")
            .count();
        progress(ToolProgress {
            progress: total,
            total: Some(total),
            message: search_summary(
                ask_corpus.then_some(from_corpus),
                search.results.len() - from_corpus,
                failed_sources.len(),
            ),
        });
        let views = written.state.evidence_views();
        let candidates: Vec<Value> = search
            .results
            .iter()
            .map(|hit| {
                let mut v = views
                    .iter()
                    .find(|e| e.evidence_id == hit.evidence_id)
                    .map(to_json)
                    .unwrap_or(Value::Null);
                if let Value::Object(m) = &mut v {
                    m.insert("result_id".into(), json!(hit.result_id));
                    m.insert("raw_score".into(), json!(hit.raw_score));
                    m.insert("normalised_score".into(), json!(hit.normalised_score));
                    m.insert("already_in_task".into(), json!(hit.folded));
                }
                v
            })
            .collect();
        let new = search.results.iter().filter(|h| !h.folded).count();
        let text = format!(
            "Found {} result(s) for {:?}; {new} new candidate(s) to screen.{}{}",
            candidates.len(),
            search.query,
            if failed_sources.is_empty() {
                String::new()
            } else {
                format!(" {} source(s) failed.", failed_sources.len())
            },
            suffix(&written)
        );
        let mut map = base(&written);
        map.insert("search_id".into(), json!(search.search_id));
        map.insert("query".into(), json!(search.query));
        map.insert("sources".into(), json!(search.sources));
        map.insert("index_state".into(), json!(search.index_state));
        map.insert("candidates".into(), Value::Array(candidates));
        map.insert("failed_sources".into(), Value::Array(failed_sources));
        if !dropped_items.is_empty() {
            map.insert("dropped_items".into(), Value::Array(dropped_items));
        }
        Ok(done(map, text))
    }

    /// A corpus hit as a search candidate, its full text stored first.
    fn corpus_candidate(
        &self,
        hit: &sources::SearchHit,
        sub_question: Option<&String>,
    ) -> Result<SearchCandidate, ServiceError> {
        let content = self
            .corpus()
            .content(&hit.content_hash)
            .map_err(ServiceError::unavailable)?
            .ok_or_else(|| ServiceError::SourceFailed {
                source_name: "corpus".into(),
                message: format!("document {} has no stored text", hit.id),
            })?;
        // Durable before the event that cites it.
        let stored = self
            .blobs()
            .put(content.as_bytes())
            .map_err(ServiceError::unavailable)?;
        if stored != hit.content_hash {
            return Err(ServiceError::SourceFailed {
                source_name: "corpus".into(),
                message: format!(
                    "document {} does not have the content hash it claims",
                    hit.id
                ),
            });
        }
        Ok(SearchCandidate {
            result_id: hit.id.clone(),
            origin: "corpus".into(),
            raw_score: hit.raw_score,
            normalised_score: hit.normalised_score,
            evidence: EvidenceInput {
                source: hit.source.clone(),
                url: hit.url.clone(),
                publish_date: hit.publish_date.to_string(),
                publish_date_defaulted: hit.defaulted.publish_date,
                source_type: hit.source_type.name().to_owned(),
                citation_count: hit.citation_count,
                summary: hit.summary.clone(),
                content_hash: hit.content_hash,
                relevance: hit.relevance,
                relevance_basis: RelevanceBasis::IdfCoverage,
                relevance_inputs: None,
                stance: None,
                sub_question: sub_question.cloned(),
            },
        })
    }
}

/// The terms `v2` relevance weighs: the question's content terms in the order first seen, then
/// the query's that the question lacks; and for each whether it is the question's.
fn v2_terms(question: &str, query: Option<&str>) -> (Vec<String>, Vec<bool>) {
    let mut terms = sources::content_terms(question);
    let mut from_question = vec![true; terms.len()];
    if let Some(query) = query {
        for term in sources::content_terms(query) {
            if !terms.contains(&term) {
                terms.push(term);
                from_question.push(false);
            }
        }
    }
    (terms, from_question)
}

/// The inputs of `v2` relevance from the corpus statistics of [`v2_terms`]' terms and whether
/// the text holds each.
fn v2_inputs(
    corpus_docs: u64,
    freqs: &[sources::TermFrequency],
    found: &[bool],
    from_question: &[bool],
    query: Option<&str>,
) -> research::rules::RelevanceInputs {
    let query_terms = query.map(sources::content_terms).unwrap_or_default();
    research::rules::RelevanceInputs {
        corpus_docs,
        terms: freqs
            .iter()
            .enumerate()
            .map(|(i, f)| research::rules::TermInput {
                term: f.term.clone(),
                doc_freq: f.doc_freq,
                in_question: from_question.get(i).copied().unwrap_or(false),
                in_query: query_terms.contains(&f.term),
                found: found.get(i).copied().unwrap_or(false),
            })
            .collect(),
    }
}

/// A search's query: the one given, else the sub-question's text, else the task's question.
fn search_query(state: &TaskState, a: &SearchEvidenceArgs) -> Result<String, ServiceError> {
    let task = state.task().ok_or_else(|| ServiceError::NotFound {
        resource: "task",
        id: a.task_id.clone(),
    })?;
    let sub_question_text = match &a.sub_question {
        None => None,
        Some(id) => Some(
            state
                .sub_questions()
                .iter()
                .find(|q| q.sub_question.id.as_str() == id)
                .map(|q| q.sub_question.text.clone())
                .ok_or_else(|| ServiceError::NotFound {
                    resource: "sub-question",
                    id: id.clone(),
                })?,
        ),
    };
    Ok(a.query
        .clone()
        .or(sub_question_text)
        .unwrap_or_else(|| task.question.clone()))
}

fn hex_of(hash: &research::Hash32) -> String {
    to_json(hash)
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default()
}

/// A new task id: a UUIDv7 from the service's clock and the system's randomness, so ids sort
/// by when tasks were opened and cannot be guessed.
fn uuid_v7_like(service: &Service) -> String {
    let now = service.inner.clock.now();
    let mut random = [0u8; 10];
    if getrandom::fill(&mut random).is_err() {
        // Without system randomness the id is still unique (time, process, a counter).
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let fallback = blake3::hash(format!("{now:?}/{}/{n}", std::process::id()).as_bytes());
        random.copy_from_slice(&fallback.as_bytes()[..10]);
    }
    let millis = u64::try_from(now.timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .to_string()
}

/// The last progress report of a search: what each kind of source gave, once it is recorded.
fn search_summary(corpus: Option<usize>, external: usize, failed: usize) -> String {
    let mut parts = Vec::new();
    if let Some(n) = corpus {
        parts.push(format!("corpus: {n} candidate(s)"));
    }
    if external > 0 || failed > 0 {
        parts.push(format!(
            "external sources: {external} candidate(s), {failed} failed"
        ));
    }
    parts.push("recorded".into());
    parts.join("; ")
}
