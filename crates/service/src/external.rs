//! Registered external tools in the service: listed beside the built-in tools, called with their
//! contracts enforced, recorded in the ledger, and used as evidence sources by searches.
//!
//! Every call is recorded — tool, contract version, hashes of the arguments sent and of the reply
//! received, or what went wrong — in the task's stream when the call names a task, and in the
//! `tools` stream otherwise.

use std::sync::Arc;

use research::command::{Command, EvidenceInput, RecordExternalToolCall, SearchCandidate};
use research::event::{Event, ExternalToolCalled, RelevanceBasis};
use research::{Hash32, TaskState};
use serde::Serialize;
use serde_json::{Map, Value, json};
use sources::contracts::call::{self, TaskContext};
use sources::contracts::{CallError, Contract, ContractProblem, Field, FieldType, Registry};

use crate::content::Attachments;
use crate::error::ServiceError;
use crate::service::{Caller, Service, Target, WriteOptions, canonical_json};
use crate::tokens::Role;
use crate::tools::{ToolOutput, ToolSpec, tool_specs};

/// The stream that records calls of external tools made outside any task.
pub const TOOLS_STREAM: &str = "tools";

/// Longest error text recorded for a failed call.
const RECORDED_ERROR_CHARS_MAX: usize = 1000;

/// How one registered tool answered a health check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolHealth {
    /// The tool.
    pub tool: String,
    /// Whether its reply matched its contract.
    pub healthy: bool,
    /// What was wrong, or what came back.
    pub detail: String,
}

fn field_schema(field: &Field) -> Value {
    let mut schema = Map::new();
    schema.insert("type".into(), json!(field.kind.name()));
    if let Some(d) = &field.description {
        schema.insert("description".into(), json!(d));
    }
    if let Some(tag) = &field.semantic_tag {
        schema.insert("x-semantic-tag".into(), json!(tag));
    }
    if let Some(d) = &field.default {
        schema.insert("default".into(), d.clone());
    }
    if let Some(e) = &field.allowed {
        schema.insert("enum".into(), Value::Array(e.clone()));
    }
    let (low, high) = match field.kind {
        FieldType::String => ("minLength", "maxLength"),
        FieldType::Array => ("minItems", "maxItems"),
        _ => ("minimum", "maximum"),
    };
    if let Some(min) = field.min {
        schema.insert(low.into(), json!(min));
    }
    if let Some(max) = field.max {
        schema.insert(high.into(), json!(max));
    }
    if let Some(items) = &field.items {
        schema.insert("items".into(), field_schema(items));
    }
    if let Some(properties) = &field.properties {
        schema.insert(
            "properties".into(),
            Value::Object(
                properties
                    .iter()
                    .map(|(k, f)| (k.clone(), field_schema(f)))
                    .collect(),
            ),
        );
    }
    Value::Object(schema)
}

/// A registered tool as clients see it: the contract's fields, plus the optional `task_id` and
/// `expected_output_tags` every registered tool takes.
pub(crate) fn spec_of(contract: &Contract) -> ToolSpec {
    let mut properties: Map<String, Value> = contract
        .input_schema
        .iter()
        .map(|(k, f)| (k.clone(), field_schema(f)))
        .collect();
    properties.insert(
        "task_id".into(),
        json!({"type": "string", "description": "The task the call serves: {{tag}} arguments are filled from it and the call is recorded in it."}),
    );
    properties.insert(
        "expected_output_tags".into(),
        json!({"type": "array", "items": {"type": "string"}, "description": "Keep only the reply's fields with these semantic tags."}),
    );
    let required: Vec<&String> = contract
        .input_schema
        .iter()
        .filter(|(_, f)| f.default.is_none() && f.required != Some(false))
        .map(|(k, _)| k)
        .collect();
    let mut outputs: Map<String, Value> = contract
        .output_schema
        .iter()
        .map(|(k, f)| (k.clone(), field_schema(f)))
        .collect();
    outputs.insert("contract_version".into(), json!({"type": "string"}));
    outputs.insert("tool".into(), json!({"type": "string"}));
    ToolSpec {
        name: contract.name.clone(),
        title: contract.name.clone(),
        description: contract.description.clone(),
        input_schema: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        }),
        output_schema: json!({"type": "object", "properties": outputs, "required": ["tool", "contract_version"]}),
        read_only: false,
        idempotent: false,
        open_world: true,
        // Their calls are recorded in the ledger.
        role: crate::tokens::Role::Writer,
    }
}

fn hash_of(bytes: &[u8]) -> Hash32 {
    Hash32(*blake3::hash(bytes).as_bytes())
}

fn call_error(e: CallError) -> ServiceError {
    match e {
        CallError::InvalidArgument { field, message } => {
            ServiceError::InvalidArgument { field, message }
        }
        CallError::NotAllowed { endpoint } => ServiceError::Forbidden(format!(
            "{endpoint} is not on the allow-list of tool endpoints"
        )),
        CallError::Timeout { tool, timeout_ms } => {
            ServiceError::Timeout(format!("{tool} did not answer within {timeout_ms} ms"))
        }
        CallError::Failed { tool, message } => ServiceError::SourceFailed {
            source_name: tool,
            message,
        },
        CallError::ContractViolation { tool, detail } => {
            ServiceError::ContractViolation { tool, detail }
        }
        other => ServiceError::unavailable(other),
    }
}

/// What a task gives a call to fill `{{tag}}` arguments from.
pub(crate) fn context_of(state: &TaskState) -> Option<TaskContext> {
    let task = state.task()?;
    let last = state.searches().last();
    Some(TaskContext {
        question: task.question.clone(),
        constraints: task.constraints.clone(),
        research_date: task.research_date.to_string(),
        sub_questions: state
            .sub_questions()
            .iter()
            .map(|q| q.sub_question.text.clone())
            .collect(),
        search_query: None,
        result_limit: None,
        last_result_ids: last
            .map(|s| {
                s.event
                    .results
                    .iter()
                    .map(|r| r.result_id.clone())
                    .collect()
            })
            .unwrap_or_default(),
    })
}

impl Service {
    /// Every tool: the built-in ones, then the registered ones.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let mut out = tool_specs();
        out.extend(self.registered_tools());
        out
    }

    /// The registered tools, in name order (the built-in ones are
    /// [`crate::built_in_tools`]).
    pub fn registered_tools(&self) -> Vec<ToolSpec> {
        self.registry().tools().values().map(spec_of).collect()
    }

    /// The registered tool `name`, if there is one.
    pub fn registered_tool(&self, name: &str) -> Option<ToolSpec> {
        self.registry().get(name).map(spec_of)
    }

    pub(crate) fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.inner
            .registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.inner
            .registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// A counter that moves whenever the list of tools changes, for `tools/list_changed`.
    pub fn tools_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.tools_version.subscribe()
    }

    fn bump_tools(&self) {
        self.inner.tools_version.send_modify(|v| *v += 1);
    }

    /// Reads the contracts directory (and, with a storage database, its contracts) again if
    /// they changed; true when they did.
    pub fn refresh_tools(&self) -> bool {
        let from_database = match &self.inner.shared_contracts {
            None => None,
            Some(shared) => match shared.changed() {
                Ok(texts) => texts,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the contracts in the storage database");
                    None
                }
            },
        };
        if let Some(document) = from_database {
            let extras = document.extras();
            self.registry_mut().use_stored(document.tools, extras);
        } else if self.registry().changed() {
            self.registry_mut().reload();
        } else {
            return false;
        }
        for problem in self.registry().problems() {
            tracing::warn!(%problem, "a contract is left out");
        }
        self.bump_tools();
        true
    }

    /// The problems found in the contracts directory.
    pub fn tool_problems(&self) -> Vec<ContractProblem> {
        self.registry().problems().to_vec()
    }

    /// Registers a tool from its contract's text (YAML or JSON); it persists in the contracts
    /// directory, or in the storage database when there is one.
    pub fn register_tool(&self, caller: &Caller, text: &str) -> Result<String, ServiceError> {
        caller.require(Role::Admin, "registering a tool")?;
        let invalid = |problems: Vec<ContractProblem>| ServiceError::InvalidArgument {
            field: problems
                .first()
                .map_or_else(|| "contract".to_owned(), |p| p.field.clone()),
            message: problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        };
        let name = match &self.inner.shared_contracts {
            Some(shared) => {
                let contract = self.registry().validate(text, None).map_err(invalid)?;
                let document = shared
                    .change(|document| {
                        document
                            .tools
                            .insert(contract.name.clone(), text.to_owned());
                        Ok(())
                    })
                    .map_err(ServiceError::unavailable)?;
                let extras = document.extras();
                self.registry_mut().use_stored(document.tools, extras);
                contract.name
            }
            None => {
                let contract = self.registry_mut().register(text).map_err(|e| match e {
                    sources::contracts::RegistryError::Invalid(problems) => invalid(problems),
                    other => ServiceError::unavailable(other),
                })?;
                contract.name
            }
        };
        self.bump_tools();
        Ok(name)
    }

    /// Removes a registered tool.
    pub fn unregister_tool(&self, caller: &Caller, name: &str) -> Result<(), ServiceError> {
        caller.require(Role::Admin, "removing a tool")?;
        let not_found = |name: String| ServiceError::NotFound {
            resource: "tool",
            id: name,
        };
        match &self.inner.shared_contracts {
            Some(shared) => {
                let document = shared
                    .change(|document| match document.tools.remove(name) {
                        Some(_) => Ok(()),
                        None => Err(crate::shared_contracts::ContractsError::NotFound(
                            name.to_owned(),
                        )),
                    })
                    .map_err(|e| match e {
                        crate::shared_contracts::ContractsError::NotFound(name) => not_found(name),
                        other => ServiceError::unavailable(other),
                    })?;
                let extras = document.extras();
                self.registry_mut().use_stored(document.tools, extras);
            }
            None => self.registry_mut().unregister(name).map_err(|e| match e {
                sources::contracts::RegistryError::NotFound(name) => not_found(name),
                other => ServiceError::unavailable(other),
            })?,
        }
        self.bump_tools();
        Ok(())
    }

    /// Calls each registered tool with arguments built from its contract and says whose reply
    /// matches its contract.
    pub fn tools_health(&self) -> Vec<ToolHealth> {
        let (contracts, allow) = {
            let registry = self.registry();
            (
                registry.tools().values().cloned().collect::<Vec<_>>(),
                registry.allow_list().clone(),
            )
        };
        contracts
            .iter()
            .map(|contract| {
                let arguments = call::sample_arguments(contract);
                let outcome = call::call(
                    contract,
                    &arguments,
                    &allow,
                    self.options().tool_reply_bytes_max,
                );
                match outcome {
                    Ok(reply) => ToolHealth {
                        tool: contract.name.clone(),
                        healthy: true,
                        detail: format!(
                            "a {}-byte reply that matches its contract",
                            reply.bytes.len()
                        ),
                    },
                    Err(e) => ToolHealth {
                        tool: contract.name.clone(),
                        healthy: false,
                        detail: e.to_string(),
                    },
                }
            })
            .collect()
    }

    /// Records a call in the task's stream, or in the `tools` stream without a task.
    fn record_call(
        &self,
        caller: &Caller,
        task: Option<&str>,
        record: RecordExternalToolCall,
    ) -> Result<Option<u64>, ServiceError> {
        match task {
            Some(task_id) => {
                let arguments = json!({"tool": record.tool, "arguments_hash": record.arguments_hash, "reply_hash": record.reply_hash});
                let written = self.write(
                    caller,
                    "external_tool_call",
                    &arguments,
                    Target::Existing(task_id),
                    &WriteOptions::default(),
                    &mut |_| Ok(Command::RecordExternalToolCall(record.clone())),
                )?;
                Ok(Some(written.session_version))
            }
            None => {
                let event = Event::ExternalToolCalled(ExternalToolCalled {
                    tool: record.tool,
                    contract_version: record.contract_version,
                    arguments_hash: record.arguments_hash,
                    reply_hash: record.reply_hash,
                    error: record.error,
                });
                self.ledger()
                    .append(ledger::AppendRequest {
                        stream: TOOLS_STREAM.into(),
                        expected: ledger::ExpectedVersion::Any,
                        actor: caller.actor.clone(),
                        events: vec![ledger::NewEvent {
                            kind: event.kind().to_owned(),
                            payload: research::encode(&event),
                            causation: Vec::new(),
                        }],
                        idempotency: None,
                        content: Vec::new(),
                    })
                    .map_err(ServiceError::unavailable)?;
                Ok(None)
            }
        }
    }

    /// Calls a registered tool: arguments checked and filled, the request sent, the reply
    /// checked and filtered, the call recorded.
    pub(crate) fn call_external(
        &self,
        caller: &Caller,
        contract: &Contract,
        arguments: &Value,
    ) -> Result<ToolOutput, ServiceError> {
        let (mut arguments, task_id) = split_task_id(arguments)?;
        let wanted = wanted_tags(contract, arguments.remove("expected_output_tags"))?;
        let state: Option<Arc<TaskState>> = match &task_id {
            Some(id) => {
                let state = self.state(id)?;
                if state.is_closed() {
                    return Err(ServiceError::Refused(research::Refusal::TaskClosed {
                        task_id: id.clone(),
                    }));
                }
                Some(state)
            }
            None => None,
        };
        let context = state.as_deref().and_then(context_of);
        let (prepared, allow) = {
            let registry = self.registry();
            let prepared = call::prepare_arguments(
                contract,
                &arguments,
                context.as_ref(),
                registry.dictionary(),
            )
            .map_err(call_error)?;
            (prepared, registry.allow_list().clone())
        };
        let arguments_hash = hash_of(canonical_json(&Value::Object(prepared.clone())).as_bytes());
        let outcome = call::call(
            contract,
            &prepared,
            &allow,
            self.options().tool_reply_bytes_max,
        );
        let (reply_hash, error) = recorded_outcome(&outcome);
        let session_version = self.record_call(
            caller,
            task_id.as_deref(),
            RecordExternalToolCall {
                tool: contract.name.clone(),
                contract_version: contract.contract_version.clone(),
                arguments_hash,
                reply_hash,
                error,
            },
        )?;
        let reply = outcome.map_err(call_error)?;
        Ok(reply_output(
            contract,
            &reply,
            wanted.as_deref(),
            task_id.as_deref(),
            session_version,
        ))
    }

    /// Searches a registered evidence source: the query and limit go into the fields tagged
    /// `search_query` and `result_limit`, and each item of the reply becomes a candidate, its
    /// text attached for the append that records the search. Items without a publish date
    /// cannot be evidence and are reported back. The call is recorded in the task.
    pub(crate) fn search_external(
        &self,
        caller: &Caller,
        contract: &Contract,
        state: &TaskState,
        query: &str,
        limit: u32,
        sub_question: Option<&String>,
    ) -> Result<(Vec<SearchCandidate>, Vec<String>, Attachments), ServiceError> {
        let Some(task) = state.task() else {
            return Err(ServiceError::unavailable("a search needs an open task"));
        };
        let mut context = context_of(state).unwrap_or_default();
        context.search_query = Some(query.to_owned());
        context.result_limit = Some(u64::from(limit));
        let mut arguments = Map::new();
        call::fill_tagged(contract, &mut arguments, "search_query", json!(query));
        call::fill_tagged(contract, &mut arguments, "result_limit", json!(limit));
        let mut arguments = Value::Object(arguments);
        if let Value::Object(map) = &mut arguments {
            map.insert("task_id".into(), json!(task.task_id));
        }
        let output = self.call_external(caller, contract, &arguments)?;
        let items = call::evidence_items(contract, &output.structured);
        let mut candidates = Vec::new();
        let mut dropped = Vec::new();
        let mut texts = Attachments::new(self.options().blobs.content_bytes_max);
        for (rank, item) in items.into_iter().take(limit as usize).enumerate() {
            let result_id = item
                .result_id
                .clone()
                .unwrap_or_else(|| format!("{}#{}", contract.name, rank + 1));
            let Some(publish_date) = item.publish_date.clone() else {
                dropped.push(format!("{result_id}: no publish_date"));
                continue;
            };
            let hash = texts.attach(item.content.as_bytes().to_vec())?;
            let (relevance, basis, relevance_inputs) = match item.relevance_score {
                Some(r) if (0.0..=1.0).contains(&r) => (r, RelevanceBasis::ScoredBySource, None),
                _ => self.computed_relevance(task, Some(query), &item.content)?,
            };
            let stance = match item.stance.as_deref() {
                Some("supports") => Some(research::rules::Stance::Supports),
                Some("opposes") => Some(research::rules::Stance::Opposes),
                Some("neutral") => Some(research::rules::Stance::Neutral),
                _ => None,
            };
            let summary = sources::summarize(
                &item.content,
                usize::try_from(self.options().research.summary_chars_max).unwrap_or(usize::MAX),
            );
            candidates.push(SearchCandidate {
                result_id,
                origin: contract.name.clone(),
                raw_score: item.relevance_score.unwrap_or(0.0),
                normalised_score: relevance,
                evidence: EvidenceInput {
                    source: item.publisher.clone().or(item.source_url.clone()),
                    url: item.source_url.clone(),
                    publish_date,
                    publish_date_defaulted: false,
                    source_type: item.source_type.clone().unwrap_or_else(|| "other".into()),
                    citation_count: item.citation_count,
                    summary,
                    content_hash: hash,
                    relevance,
                    relevance_basis: basis,
                    relevance_inputs,
                    stance,
                    sub_question: sub_question.cloned(),
                },
            });
        }
        Ok((candidates, dropped, texts))
    }
}

/// The tool's own arguments, and the task the call is recorded in, which the service adds to
/// every registered tool.
fn split_task_id(arguments: &Value) -> Result<(Map<String, Value>, Option<String>), ServiceError> {
    let mut arguments = match arguments {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        _ => {
            return Err(ServiceError::invalid(
                "arguments",
                "the arguments must be a JSON object",
            ));
        }
    };
    let task_id = match arguments.remove("task_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id),
        Some(_) => return Err(ServiceError::invalid("task_id", "a task id is a string")),
    };
    Ok((arguments, task_id))
}

/// The tags a caller asked the reply filtered to, each one the contract declares.
fn wanted_tags(
    contract: &Contract,
    given: Option<Value>,
) -> Result<Option<Vec<String>>, ServiceError> {
    let tags = match given {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(tags)) => tags,
        Some(_) => {
            return Err(ServiceError::invalid(
                "expected_output_tags",
                "a list of tags",
            ));
        }
    };
    let declared = contract.output_tags();
    let mut out = Vec::new();
    for tag in tags {
        let Some(tag) = tag.as_str() else {
            return Err(ServiceError::invalid(
                "expected_output_tags",
                "tags are strings",
            ));
        };
        if !declared.iter().any(|d| d == tag) {
            return Err(ServiceError::invalid(
                "expected_output_tags",
                format!(
                    "{} replies carry no {tag}; they carry: {}",
                    contract.name,
                    declared.join(", ")
                ),
            ));
        }
        out.push(tag.to_owned());
    }
    Ok(Some(out))
}

/// What the call's event records of its outcome: the reply's hash, or the error cut short.
fn recorded_outcome(
    outcome: &Result<call::Reply, call::CallError>,
) -> (Option<Hash32>, Option<String>) {
    match outcome {
        Ok(reply) => (Some(hash_of(&reply.bytes)), None),
        Err(e) => (
            None,
            Some(
                e.to_string()
                    .chars()
                    .take(RECORDED_ERROR_CHARS_MAX)
                    .collect(),
            ),
        ),
    }
}

/// The tool's answer: the reply (filtered to the tags asked), with the task and version the
/// call was recorded at, and a line of text saying so.
fn reply_output(
    contract: &Contract,
    reply: &call::Reply,
    wanted: Option<&[String]>,
    task_id: Option<&str>,
    session_version: Option<u64>,
) -> ToolOutput {
    let mut structured = match wanted {
        Some(tags) => call::filter_by_tags(contract, &reply.value, tags),
        None => reply.value.clone(),
    };
    if let Value::Object(map) = &mut structured {
        map.insert("tool".into(), json!(contract.name));
        if let (Some(id), Some(version)) = (task_id, session_version) {
            map.insert("task_id".into(), json!(id));
            map.insert("session_version".into(), json!(version));
        }
    }
    let text = format!(
        "{} answered under contract {} ({} bytes); the call is recorded{}.",
        contract.name,
        contract.contract_version,
        reply.bytes.len(),
        task_id.map(|t| format!(" in task {t}")).unwrap_or_default()
    );
    ToolOutput { structured, text }
}
