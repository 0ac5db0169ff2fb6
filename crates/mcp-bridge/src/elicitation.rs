//! People asked for real: when the conflict rules leave a conflict for a person and the client
//! declared MCP elicitation (form mode), `evaluation_conflict_resolution` asks the person through
//! the client, one form per conflict — the supporting side wins, the opposing side wins, or both
//! stand, and a reason — and records each accepted answer as the person's decision
//! (`decided_by: person`, through the client's name). A declined or cancelled form, or one left
//! unanswered, records nothing, and the result says so.
//!
//! A 2025-11-25 client is asked with `elicitation/create` requests while the call waits. The
//! 2026-07-28 era has no server-to-client requests: the call answers `input_required` with the
//! forms, and the client calls again with the person's answers (`inputResponses`) and the
//! `requestState` it was given; that second call records the answers and runs nothing else.
//! The state is bound to the conflicts asked, and to when, by a MAC under a key random to the
//! process, so only answers to questions this server asked, sent back in time, are recorded.
//!
//! The answers are the client's word that a person gave them, as a reviewer's token is the
//! word of whoever holds it; recording them takes the reviewer's role, like every decision.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Map, Value, json};
use service::research::Tool;
use service::{Caller, ToolOutput};

use crate::bridge::Bridge;

/// The tool whose pending conflicts are asked of a person.
pub(crate) const ASKING_TOOL: &str = Tool::EvaluationConflictResolution.name();

/// The tool an accepted answer is recorded through, as a person's call.
const RECORDING_TOOL: &str = Tool::EvaluationResolveConflict.name();

/// What the `requestState` of an `input_required` answer starts with; the task id, the
/// conflicts asked about, when they were asked and a MAC of all three follow ([`request_state`]).
const REQUEST_STATE_PREFIX: &str = "research-ledger/conflict-answers/v3:";

/// Characters of a reason the form accepts (the service's own limit may be lower and says so).
const REASON_CHARS_MAX: u32 = 2000;

/// Whether the client of this request declared form elicitation (a capability without modes
/// means form, as MCP says).
pub(crate) fn client_can_ask(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The conflicts of a conflict-resolution result that wait for a person.
fn waiting(structured: &Value) -> Vec<&Value> {
    structured["conflicts"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter(|c| c["tier"] == "pending" && c.get("resolution").is_none())
                .collect()
        })
        .unwrap_or_default()
}

/// The form: who wins, and why.
fn schema() -> Result<ElicitationSchema, McpError> {
    serde_json::from_value(json!({
        "type": "object",
        "properties": {
            "outcome": {
                "type": "string",
                "title": "Decision",
                "oneOf": [
                    {"const": "supports", "title": "The supporting side wins"},
                    {"const": "opposes", "title": "The opposing side wins"},
                    {"const": "both_stand", "title": "Both sides stand"},
                ],
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why; recorded in the ledger with the decision",
                "minLength": 1,
                "maxLength": REASON_CHARS_MAX,
            },
        },
        "required": ["outcome", "reason"],
    }))
    .map_err(|e| McpError::internal_error(format!("the decision form is not valid: {e}"), None))
}

/// What the person is shown: the conflict, what the rules compared, and each side's items.
fn message(task_id: &str, conflict: &Value) -> String {
    let id = conflict["conflict_id"].as_str().unwrap_or("?");
    let scope = conflict["scope"].as_str().unwrap_or("the main question");
    let c = &conflict["compared"];
    let mut out = format!(
        "The rules could not decide conflict {id} of task {task_id} ({scope}): highest authority {} for the supporting side against {}, latest dates {} and {} ({} days apart). Which side wins? Your answer is recorded in the ledger as your decision.",
        c["supports_authority"],
        c["opposes_authority"],
        c["supports_latest"].as_str().unwrap_or("?"),
        c["opposes_latest"].as_str().unwrap_or("?"),
        c["recency_gap_days"],
    );
    for side in ["supports", "opposes"] {
        for item in conflict[side].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "\n{side}: {} [{}; {}; {}] {}",
                item["evidence_id"].as_str().unwrap_or("?"),
                item["source_type"].as_str().unwrap_or("?"),
                item["source"].as_str().unwrap_or("?"),
                item["publish_date"].as_str().unwrap_or("?"),
                item["summary"].as_str().unwrap_or(""),
            ));
        }
    }
    out
}

fn request(task_id: &str, conflict: &Value) -> Result<ElicitRequestParams, McpError> {
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(task_id, conflict),
        requested_schema: schema()?,
    })
}

/// What became of one question.
enum Answer {
    /// The person answered with this content.
    Accepted(Value),
    /// The person said no.
    Declined,
    /// The person dismissed the form.
    Cancelled,
    /// No answer came (the client failed, or the time ran out).
    Unanswered(String),
}

impl Answer {
    fn of(result: ElicitResult) -> Answer {
        match result.action {
            ElicitationAction::Accept => Answer::Accepted(result.content.unwrap_or(Value::Null)),
            ElicitationAction::Decline => Answer::Declined,
            ElicitationAction::Cancel => Answer::Cancelled,
            other => Answer::Unanswered(format!("an action this server does not know: {other:?}")),
        }
    }
}

/// The answer of a conflict-resolution call whose client can be asked: the person asked now
/// (2025-11-25), or the forms for the client to fill in and send back (2026-07-28).
pub(crate) async fn ask(
    bridge: &Bridge,
    context: &RequestContext<RoleServer>,
    out: ToolOutput,
) -> Result<CallToolResponse, McpError> {
    let era_2026 =
        crate::error::is_2026_era(context.protocol_version().as_ref().map(|v| v.as_str()));
    if era_2026 {
        return Ok(match ask_later(bridge.answer_key(), &out)? {
            Some(input_required) => CallToolResponse::InputRequired(input_required),
            None => crate::tools::tool_result(Ok(out)).into(),
        });
    }
    let asked = ask_now(bridge, context, out).await?;
    Ok(crate::tools::tool_result(Ok(asked)).into())
}

/// Asks a 2025-11-25 client's person about every conflict of `out` that waits for one, while
/// the call waits, and records the answers; `out` comes back with the conflicts as they stand
/// after them and what became of each question.
async fn ask_now(
    bridge: &Bridge,
    context: &RequestContext<RoleServer>,
    out: ToolOutput,
) -> Result<ToolOutput, McpError> {
    let task_id = out.structured["task_id"].as_str().unwrap_or("").to_owned();
    let conflicts: Vec<Value> = waiting(&out.structured).into_iter().cloned().collect();
    if conflicts.is_empty() {
        return Ok(out);
    }
    let timeout = Duration::from_millis(bridge.options().elicitation_timeout_ms);
    let mut answers = Vec::with_capacity(conflicts.len());
    for conflict in &conflicts {
        let id = conflict["conflict_id"].as_str().unwrap_or("").to_owned();
        let answer = match context
            .peer
            .create_elicitation_with_timeout(request(&task_id, conflict)?, Some(timeout))
            .await
        {
            Ok(result) => Answer::of(result),
            Err(e) => Answer::Unanswered(e.to_string()),
        };
        answers.push((id, answer));
    }
    record(bridge, context, &task_id, answers).await
}

/// The `input_required` answer of a 2026-07-28 call whose conflicts wait for a person: one form
/// per conflict, keyed by its id; `None` when none waits.
fn ask_later(key: &[u8; 32], out: &ToolOutput) -> Result<Option<InputRequiredResult>, McpError> {
    let task_id = out.structured["task_id"].as_str().unwrap_or("");
    let mut requests = InputRequests::new();
    for conflict in waiting(&out.structured) {
        let id = conflict["conflict_id"].as_str().unwrap_or("").to_owned();
        requests.insert(
            id,
            InputRequest::Elicitation(ElicitRequest::new(request(task_id, conflict)?)),
        );
    }
    if requests.is_empty() {
        return Ok(None);
    }
    let asked: Vec<String> = requests.keys().cloned().collect();
    Ok(Some(InputRequiredResult::new(
        Some(requests),
        Some(request_state(key, task_id, now_ms(), &asked)),
    )))
}

/// Milliseconds since the Unix epoch (0 for a clock before it).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a `requestState` names: the task, the conflicts asked, and when they were asked.
#[derive(Debug, PartialEq)]
struct Asked {
    task_id: String,
    conflicts: Vec<String>,
    asked_at_ms: u64,
}

/// The `requestState` of forms about `conflicts` of `task_id` asked at `asked_at_ms`: all three,
/// and a MAC of them under this process's key, so that answers are recorded only for questions
/// this server asked, and only within the time a person is given.
fn request_state(key: &[u8; 32], task_id: &str, asked_at_ms: u64, conflicts: &[String]) -> String {
    let ids = conflicts.join(",");
    let mac = blake3::keyed_hash(key, format!("{task_id}\n{asked_at_ms}\n{ids}").as_bytes());
    format!(
        "{REQUEST_STATE_PREFIX}{task_id}:{asked_at_ms}:{ids}:{}",
        mac.to_hex()
    )
}

/// The task and the conflicts a `requestState` of [`request_state`] names, when its MAC holds
/// under `key`; `None` for any other text.
fn questions_asked(key: &[u8; 32], state: &str) -> Option<Asked> {
    let rest = state.strip_prefix(REQUEST_STATE_PREFIX)?;
    let mut parts = rest.rsplitn(4, ':');
    let (mac, ids, at, task_id) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if task_id.is_empty() {
        return None;
    }
    let given = blake3::Hash::from_hex(mac).ok()?;
    // `blake3::Hash`'s equality is constant-time.
    if given != blake3::keyed_hash(key, format!("{task_id}\n{at}\n{ids}").as_bytes()) {
        return None;
    }
    let conflicts = ids
        .split(',')
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    Some(Asked {
        task_id: task_id.to_owned(),
        conflicts: conflicts.collect(),
        asked_at_ms: at.parse().ok()?,
    })
}

/// Whether a call carries a person's answers to the forms of [`ask_later`].
pub(crate) fn is_answer(request: &CallToolRequestParams) -> bool {
    request
        .request_state
        .as_deref()
        .is_some_and(|s| s.starts_with(REQUEST_STATE_PREFIX))
}

/// Records the answers a 2026-07-28 client sent back: nothing else of the tool runs again.
pub(crate) async fn answered(
    bridge: &Bridge,
    context: &RequestContext<RoleServer>,
    request: &CallToolRequestParams,
) -> Result<ToolOutput, McpError> {
    let Asked {
        task_id,
        conflicts: asked,
        asked_at_ms,
    } = request
        .request_state
        .as_deref()
        .and_then(|state| questions_asked(bridge.answer_key(), state))
        .ok_or_else(|| {
            McpError::invalid_params(
                "requestState was not issued by this server, or the server restarted since it \
                 was: call evaluation_conflict_resolution again to be asked afresh",
                None,
            )
        })?;
    let asked_for = request
        .arguments
        .as_ref()
        .and_then(|a| a.get("task_id"))
        .and_then(Value::as_str);
    if asked_for != Some(task_id.as_str()) {
        return Err(McpError::invalid_params(
            "requestState is of another task than the call's task_id",
            None,
        ));
    }
    let timeout_ms = bridge.options().elicitation_timeout_ms;
    let late = now_ms().saturating_sub(asked_at_ms) > timeout_ms;
    let mut answers = Vec::new();
    for (id, response) in request.input_responses.iter().flatten() {
        let answer = if !asked.contains(id) {
            Answer::Unanswered("the server did not ask about this conflict".into())
        } else if late {
            Answer::Unanswered(format!(
                "not answered within {timeout_ms} ms of the question"
            ))
        } else {
            match serde_json::from_value::<ElicitResult>(response.clone()) {
                Ok(result) => Answer::of(result),
                Err(e) => {
                    Answer::Unanswered(format!("the response is not an elicitation result: {e}"))
                }
            }
        };
        answers.push((id.clone(), answer));
    }
    record(bridge, context, &task_id, answers).await
}

/// Records every accepted answer as the person's decision, then gives the conflicts as they
/// stand and what became of each question, in structure and text.
async fn record(
    bridge: &Bridge,
    context: &RequestContext<RoleServer>,
    task_id: &str,
    answers: Vec<(String, Answer)>,
) -> Result<ToolOutput, McpError> {
    let person: Caller = bridge.person(context);
    let mut entries = Vec::with_capacity(answers.len());
    let mut lines = Vec::with_capacity(answers.len());
    for (conflict_id, answer) in answers {
        let (entry, line) = record_one(bridge, &person, task_id, &conflict_id, answer).await;
        entries.push(entry);
        lines.push(line);
    }
    let service = bridge.service().clone();
    let id = task_id.to_owned();
    let state = tokio::task::spawn_blocking(move || service.state(&id))
        .await
        .map_err(|e| McpError::internal_error(format!("the read stopped: {e}"), None))?
        .map_err(|e| crate::error::internal(&e))?;
    let (conflicts, text) = service::conflicts_in_force(&state);
    let mut map = Map::new();
    map.insert("task_id".into(), json!(task_id));
    map.insert("session_version".into(), json!(state.version()));
    map.insert("replayed".into(), json!(false));
    map.insert("conflicts".into(), conflicts);
    map.insert("elicitation".into(), Value::Array(entries));
    let text = format!(
        "{text}\n{}\nTask {task_id} is at version {}.",
        lines.join("\n"),
        state.version()
    );
    Ok(ToolOutput {
        structured: Value::Object(map),
        text,
    })
}

/// What became of one question, recorded when accepted: its entry in the result and its line
/// of text.
async fn record_one(
    bridge: &Bridge,
    person: &Caller,
    task_id: &str,
    conflict_id: &str,
    answer: Answer,
) -> (Value, String) {
    let mut entry = Map::new();
    entry.insert("conflict_id".into(), json!(conflict_id));
    let kept = "nothing was recorded and it stays pending";
    let (action, recorded, line) = match answer {
        Answer::Accepted(content) => {
            let outcome = content["outcome"].clone();
            let arguments = json!({
                "task_id": task_id,
                "conflict_id": conflict_id,
                "winner": outcome,
                "reason": content["reason"],
            });
            let result = bridge
                .service()
                .call_tool_async(person.clone(), RECORDING_TOOL.to_owned(), arguments)
                .await;
            match result {
                Ok(_) => {
                    let line = format!(
                        "The person decided {conflict_id}: {}; recorded as the person's decision.",
                        outcome.as_str().unwrap_or("?")
                    );
                    entry.insert("outcome".into(), outcome);
                    entry.insert("decided_by".into(), json!("person"));
                    entry.insert("decided_via".into(), json!(person.decider.via));
                    ("accept", true, line)
                }
                Err(e) => {
                    let line = format!(
                        "The person's answer on {conflict_id} was not recorded: {}: {e}",
                        e.code()
                    );
                    entry.insert("error".into(), e.to_json());
                    ("accept", false, line)
                }
            }
        }
        Answer::Declined => (
            "decline",
            false,
            format!("The person declined to decide {conflict_id}; {kept}."),
        ),
        Answer::Cancelled => (
            "cancel",
            false,
            format!("The person cancelled the question on {conflict_id}; {kept}."),
        ),
        Answer::Unanswered(why) => {
            let line = format!("No answer on {conflict_id} ({why}); {kept}.");
            entry.insert("detail".into(), json!(why));
            ("no_answer", false, line)
        }
    };
    entry.insert("action".into(), json!(action));
    entry.insert("recorded".into(), json!(recorded));
    (Value::Object(entry), line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_a_valid_elicitation_schema_with_the_three_outcomes() {
        let schema = serde_json::to_value(schema().unwrap()).unwrap();
        let outcomes: Vec<&str> = schema["properties"]["outcome"]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["const"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["supports", "opposes", "both_stand"]);
        assert_eq!(schema["required"], json!(["outcome", "reason"]));
    }

    #[test]
    fn only_undecided_pending_conflicts_are_asked() {
        let out = json!({"conflicts": [
            {"conflict_id": "cf-1", "tier": "pending"},
            {"conflict_id": "cf-2", "tier": "pending", "resolution": "both_stand"},
            {"conflict_id": "cf-3", "tier": "authority"},
        ]});
        let ids: Vec<&str> = waiting(&out)
            .iter()
            .map(|c| c["conflict_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["cf-1"]);
    }
}

#[cfg(test)]
mod request_states {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn a_request_state_names_the_task_and_the_conflicts_asked() {
        let asked = vec!["cf-1".to_owned(), "cf-3".to_owned()];
        let state = request_state(&KEY, "task:with:colons", 42, &asked);
        assert_eq!(
            questions_asked(&KEY, &state),
            Some(Asked {
                task_id: "task:with:colons".to_owned(),
                conflicts: asked,
                asked_at_ms: 42,
            })
        );
    }

    #[test]
    fn a_request_state_widened_forged_or_from_another_process_is_refused() {
        let state = request_state(&KEY, "t1", 42, &["cf-1".to_owned()]);
        let mac = state.rsplit(':').next().unwrap_or_default().to_owned();
        for forged in [
            // Another conflict added to the list, the MAC kept.
            format!("{REQUEST_STATE_PREFIX}t1:42:cf-1,cf-2:{mac}"),
            // Another task, the MAC kept.
            format!("{REQUEST_STATE_PREFIX}t2:42:cf-1:{mac}"),
            // Asked later than it was, the MAC kept.
            format!("{REQUEST_STATE_PREFIX}t1:99999:cf-1:{mac}"),
            // No MAC, or not hex.
            format!("{REQUEST_STATE_PREFIX}t1:42:cf-1"),
            format!("{REQUEST_STATE_PREFIX}t1:42:cf-1:zz"),
            // The form of the second version, which had no time.
            format!("research-ledger/conflict-answers/v2:t1:cf-1:{mac}"),
            // The form of the first version, which named only the task.
            "research-ledger/conflict-answers/v1:t1".to_owned(),
        ] {
            assert_eq!(questions_asked(&KEY, &forged), None, "{forged}");
        }
        // The same state under another process's key.
        assert_eq!(questions_asked(&[8; 32], &state), None);
    }
}
