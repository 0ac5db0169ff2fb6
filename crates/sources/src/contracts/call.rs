//! Calling a registered tool by its contract: arguments checked and filled, the request sent
//! with a timeout to an allowed endpoint, the reply checked before anything uses it.
//!
//! A reply that lacks a declared tag, or carries another `contract_version`, is refused at once
//! with what is wrong: the runtime never waits for something the tool will not send.

use std::time::Duration;

use serde_json::{Map, Value};

use super::registry::EndpointAllowList;
use super::schema::{Contract, Field, FieldType, Method, check_value};
use super::tags::TagDictionary;

/// What a call is filled from: the task it is made for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskContext {
    /// The task's question.
    pub question: String,
    /// Its constraints.
    pub constraints: Vec<String>,
    /// Its research date, `YYYY-MM-DD`.
    pub research_date: String,
    /// Its sub-questions' texts.
    pub sub_questions: Vec<String>,
    /// The query of the search the call serves, if it serves one.
    pub search_query: Option<String>,
    /// How many results are wanted, if the call serves a search.
    pub result_limit: Option<u64>,
    /// The result ids of the task's last search.
    pub last_result_ids: Vec<String>,
}

impl TaskContext {
    fn value_of(&self, tag: &str) -> Option<Value> {
        Some(match tag {
            "task_question" | "user_intent" => Value::String(self.question.clone()),
            "task_constraints" => Value::from(self.constraints.clone()),
            "research_date" => Value::String(self.research_date.clone()),
            "sub_questions" => Value::from(self.sub_questions.clone()),
            "search_query" => Value::String(self.search_query.clone()?),
            "result_limit" => Value::from(self.result_limit?),
            "last_result_ids" => Value::from(self.last_result_ids.clone()),
            _ => return None,
        })
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// An argument is wrong for the contract.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The argument.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The endpoint is not on the allow-list.
    #[error("{endpoint} is not on the allow-list")]
    NotAllowed {
        /// The endpoint.
        endpoint: String,
    },
    /// The tool did not answer in time.
    #[error("{tool} did not answer within {timeout_ms} ms")]
    Timeout {
        /// The tool.
        tool: String,
        /// Its contract's timeout.
        timeout_ms: u64,
    },
    /// The tool could not be reached, or answered with an error status.
    #[error("{tool} failed: {message}")]
    Failed {
        /// The tool.
        tool: String,
        /// What happened.
        message: String,
    },
    /// The reply breaks the contract.
    #[error("{tool} broke its contract: {detail}")]
    ContractViolation {
        /// The tool.
        tool: String,
        /// How.
        detail: String,
    },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> CallError {
    CallError::InvalidArgument {
        field: field.into(),
        message: message.into(),
    }
}

/// Replaces `{{tag}}` in a string: the whole string becomes the tag's value (keeping its
/// type), or each occurrence inside a longer string becomes its text.
fn fill(
    name: &str,
    value: &Value,
    context: Option<&TaskContext>,
    dictionary: &TagDictionary,
) -> Result<Value, CallError> {
    let Value::String(text) = value else {
        return Ok(value.clone());
    };
    if !text.contains("{{") {
        return Ok(value.clone());
    }
    let resolve = |tag: &str| -> Result<Value, CallError> {
        let tag = tag.trim();
        match dictionary.get(tag) {
            None => Err(invalid(
                name,
                format!("{{{{{tag}}}}} is not a semantic tag"),
            )),
            Some(t) if !t.context => Err(invalid(
                name,
                format!("{{{{{tag}}}}} is not filled from a task's context"),
            )),
            Some(_) => {
                let Some(context) = context else {
                    return Err(invalid(
                        name,
                        format!("{{{{{tag}}}}} is filled from a task: give task_id"),
                    ));
                };
                context
                    .value_of(tag)
                    .ok_or_else(|| invalid(name, format!("the task has no {tag} for this call")))
            }
        }
    };
    if let Some(tag) = text.strip_prefix("{{").and_then(|t| t.strip_suffix("}}"))
        && !tag.contains("{{")
    {
        return resolve(tag);
    }
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            return Err(invalid(name, "an unclosed {{"));
        };
        match resolve(&after[..end])? {
            Value::String(s) => out.push_str(&s),
            other => out.push_str(&other.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

/// The arguments to send: every one known to the contract, `{{tag}}`s filled, defaults added,
/// each checked against its field.
pub fn prepare_arguments(
    contract: &Contract,
    arguments: &Map<String, Value>,
    context: Option<&TaskContext>,
    dictionary: &TagDictionary,
) -> Result<Map<String, Value>, CallError> {
    if let Some(unknown) = arguments
        .keys()
        .find(|k| !contract.input_schema.contains_key(k.as_str()))
    {
        return Err(invalid(
            unknown.clone(),
            format!(
                "{} takes no argument {unknown}; it takes: {}",
                contract.name,
                contract
                    .input_schema
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let mut out = Map::new();
    for (name, field) in &contract.input_schema {
        let value = match arguments.get(name) {
            Some(v) => fill(name, v, context, dictionary)?,
            None => match &field.default {
                Some(d) => d.clone(),
                None if field.required == Some(false) => continue,
                None => return Err(invalid(name.clone(), "is required")),
            },
        };
        check_value(field, &value).map_err(|e| invalid(name.clone(), e))?;
        out.insert(name.clone(), value);
    }
    Ok(out)
}

/// Sets, in `arguments`, the fields whose tag the caller knows a value for (a search's query and
/// limit), unless the caller gave them.
pub fn fill_tagged(
    contract: &Contract,
    arguments: &mut Map<String, Value>,
    tag: &str,
    value: Value,
) {
    for (name, field) in &contract.input_schema {
        if field.semantic_tag.as_deref() == Some(tag) && !arguments.contains_key(name) {
            arguments.insert(name.clone(), value.clone());
        }
    }
}

/// A checked reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The reply as JSON.
    pub value: Value,
    /// The bytes received, which the ledger's record of the call hashes.
    pub bytes: Vec<u8>,
}

/// Calls the tool with prepared arguments, and checks the reply against the contract.
pub fn call(
    contract: &Contract,
    arguments: &Map<String, Value>,
    allow: &EndpointAllowList,
    reply_bytes_max: u64,
) -> Result<Reply, CallError> {
    if !allow.allows(&contract.endpoint) {
        return Err(CallError::NotAllowed {
            endpoint: contract.endpoint.clone(),
        });
    }
    let timeout_ms = contract.timeout_ms();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(timeout_ms)))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let tool = contract.name.clone();
    let failed = |e: ureq::Error| match e {
        ureq::Error::Timeout(_) => CallError::Timeout {
            tool: tool.clone(),
            timeout_ms,
        },
        other => CallError::Failed {
            tool: tool.clone(),
            message: other.to_string(),
        },
    };
    let response = match contract.method {
        Method::Post => {
            let body = serde_json::to_vec(arguments).map_err(|e| CallError::Failed {
                tool: tool.clone(),
                message: e.to_string(),
            })?;
            agent
                .post(&contract.endpoint)
                .header("content-type", "application/json")
                .header("accept", "application/json")
                .send(&body[..])
                .map_err(failed)?
        }
        Method::Get => {
            let mut request = agent
                .get(&contract.endpoint)
                .header("accept", "application/json");
            for (k, v) in arguments {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                request = request.query(k, &text);
            }
            request.call().map_err(failed)?
        }
    };
    let status = response.status();
    let bytes = response
        .into_body()
        .with_config()
        .limit(reply_bytes_max)
        .read_to_vec()
        .map_err(failed)?;
    if !status.is_success() {
        return Err(CallError::Failed {
            tool,
            message: format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ),
        });
    }
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| CallError::ContractViolation {
            tool: tool.clone(),
            detail: format!("the reply is not JSON: {e}"),
        })?;
    check_reply(contract, &value)?;
    Ok(Reply { value, bytes })
}

/// Checks a reply against the contract: an object, carrying this `contract_version`, every
/// declared field of the right type, every tagged field present.
pub fn check_reply(contract: &Contract, reply: &Value) -> Result<(), CallError> {
    let violation = |detail: String| CallError::ContractViolation {
        tool: contract.name.clone(),
        detail,
    };
    let Value::Object(map) = reply else {
        return Err(violation("the reply is not a JSON object".into()));
    };
    match map.get("contract_version") {
        None => {
            return Err(violation(format!(
                "the reply carries no contract_version (the contract is version {})",
                contract.contract_version
            )));
        }
        Some(v) if v.as_str() != Some(contract.contract_version.as_str()) => {
            return Err(violation(format!(
                "the reply is contract_version {v}, the contract is {}",
                contract.contract_version
            )));
        }
        Some(_) => {}
    }
    for (name, field) in &contract.output_schema {
        check_output(name, field, map.get(name)).map_err(violation)?;
    }
    Ok(())
}

fn field_required(field: &Field) -> bool {
    field.required.unwrap_or(field.semantic_tag.is_some())
}

fn check_output(path: &str, field: &Field, value: Option<&Value>) -> Result<(), String> {
    let Some(value) = value else {
        if field_required(field) {
            return Err(match &field.semantic_tag {
                Some(tag) => format!("the reply lacks {path} (tag {tag})"),
                None => format!("the reply lacks {path}"),
            });
        }
        return Ok(());
    };
    if value.is_null() && !field_required(field) {
        return Ok(());
    }
    if !field.kind.admits(value) {
        return Err(format!("{path} is {value}, not a {}", field.kind.name()));
    }
    match (field.kind, value) {
        (FieldType::Array, Value::Array(items)) => {
            if let Some(spec) = &field.items {
                for (i, item) in items.iter().enumerate() {
                    check_output(&format!("{path}[{i}]"), spec, Some(item))?;
                }
            }
        }
        (FieldType::Object, Value::Object(map)) => {
            for (name, spec) in field.properties.iter().flat_map(|p| p.iter()) {
                check_output(&format!("{path}.{name}"), spec, map.get(name))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The reply with only the fields whose tag is in `tags` (and the structure around them), for a
/// caller that asked for only those.
pub fn filter_by_tags(contract: &Contract, reply: &Value, tags: &[String]) -> Value {
    fn keep(field: &Field, value: &Value, tags: &[String]) -> Option<Value> {
        if field
            .semantic_tag
            .as_ref()
            .is_some_and(|t| tags.contains(t))
        {
            return Some(value.clone());
        }
        match (field.kind, value) {
            (FieldType::Array, Value::Array(items)) => {
                let spec = field.items.as_deref()?;
                let kept: Vec<Value> = items.iter().filter_map(|i| keep(spec, i, tags)).collect();
                (!kept.is_empty()).then_some(Value::Array(kept))
            }
            (FieldType::Object, Value::Object(map)) => {
                let mut out = Map::new();
                for (name, spec) in field.properties.iter().flat_map(|p| p.iter()) {
                    if let Some(v) = map.get(name).and_then(|v| keep(spec, v, tags)) {
                        out.insert(name.clone(), v);
                    }
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
            _ => None,
        }
    }
    let mut out = Map::new();
    if let Value::Object(map) = reply {
        if let Some(v) = map.get("contract_version") {
            out.insert("contract_version".into(), v.clone());
        }
        for (name, field) in &contract.output_schema {
            if let Some(v) = map.get(name).and_then(|v| keep(field, v, tags)) {
                out.insert(name.clone(), v);
            }
        }
    }
    Value::Object(out)
}

/// One evidence item a tool returned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EvidenceItem {
    /// The full text (`evidence_content`).
    pub content: String,
    /// `source_url`.
    pub source_url: Option<String>,
    /// `publisher`.
    pub publisher: Option<String>,
    /// `publish_date`.
    pub publish_date: Option<String>,
    /// `source_type`.
    pub source_type: Option<String>,
    /// `citation_count`.
    pub citation_count: Option<u64>,
    /// `relevance_score`.
    pub relevance_score: Option<f64>,
    /// `evidence_stance`.
    pub stance: Option<String>,
    /// `result_id`.
    pub result_id: Option<String>,
}

/// Whether the tool's replies carry evidence: an `evidence_content` tag somewhere.
pub fn is_evidence_source(contract: &Contract) -> bool {
    contract
        .output_tags()
        .iter()
        .any(|t| t == "evidence_content")
}

/// The evidence items in a checked reply: every object, at the top or in an array, whose
/// fields carry `evidence_content`.
pub fn evidence_items(contract: &Contract, reply: &Value) -> Vec<EvidenceItem> {
    fn item_of(
        properties: &std::collections::BTreeMap<String, Field>,
        value: &Map<String, Value>,
    ) -> Option<EvidenceItem> {
        let mut item = EvidenceItem::default();
        let mut has_content = false;
        for (name, field) in properties {
            let (Some(tag), Some(v)) = (&field.semantic_tag, value.get(name)) else {
                continue;
            };
            let text = || v.as_str().map(str::to_owned);
            match tag.as_str() {
                "evidence_content" => {
                    item.content = text()?;
                    has_content = true;
                }
                "source_url" => item.source_url = text(),
                "publisher" => item.publisher = text(),
                "publish_date" => item.publish_date = text(),
                "source_type" => item.source_type = text(),
                "citation_count" => item.citation_count = v.as_u64(),
                "relevance_score" => item.relevance_score = v.as_f64(),
                "evidence_stance" => item.stance = text(),
                "result_id" => {
                    item.result_id = text().or_else(|| v.as_u64().map(|n| n.to_string()))
                }
                _ => {}
            }
        }
        has_content.then_some(item)
    }
    fn walk(field: &Field, value: &Value, out: &mut Vec<EvidenceItem>) {
        match (field.kind, value) {
            (FieldType::Array, Value::Array(items)) => {
                if let Some(spec) = &field.items {
                    for item in items {
                        walk(spec, item, out);
                    }
                }
            }
            (FieldType::Object, Value::Object(map)) => {
                if let Some(properties) = &field.properties {
                    if let Some(item) = item_of(properties, map) {
                        out.push(item);
                    } else {
                        for (name, spec) in properties {
                            if let Some(v) = map.get(name) {
                                walk(spec, v, out);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Value::Object(map) = reply {
        if let Some(item) = item_of(&contract.output_schema, map) {
            out.push(item);
        } else {
            for (name, field) in &contract.output_schema {
                if let Some(v) = map.get(name) {
                    walk(field, v, &mut out);
                }
            }
        }
    }
    out
}

/// Arguments a health check sends: each field's default, else its first allowed value, else
/// a plain value of its type within its bounds.
pub fn sample_arguments(contract: &Contract) -> Map<String, Value> {
    fn sample(field: &Field) -> Value {
        if let Some(d) = &field.default {
            return d.clone();
        }
        if let Some(first) = field.allowed.as_ref().and_then(|a| a.first()) {
            return first.clone();
        }
        match field.kind {
            FieldType::String => {
                let len = field
                    .min
                    .unwrap_or(4.0)
                    .max(4.0)
                    .min(field.max.unwrap_or(64.0)) as usize;
                Value::String("health check".chars().cycle().take(len.max(1)).collect())
            }
            FieldType::Integer => {
                Value::from(field.min.unwrap_or(1.0).max(field.min.unwrap_or(f64::MIN)) as i64)
            }
            FieldType::Number => Value::from(field.min.unwrap_or(1.0)),
            FieldType::Boolean => Value::Bool(true),
            FieldType::Array => Value::Array(match &field.items {
                Some(item) if field.min.unwrap_or(0.0) >= 1.0 => vec![sample(item)],
                _ => Vec::new(),
            }),
            FieldType::Object => Value::Object(
                field
                    .properties
                    .iter()
                    .flat_map(|p| p.iter())
                    .map(|(k, f)| (k.clone(), sample(f)))
                    .collect(),
            ),
        }
    }
    contract
        .input_schema
        .iter()
        .map(|(k, f)| (k.clone(), sample(f)))
        .collect()
}
