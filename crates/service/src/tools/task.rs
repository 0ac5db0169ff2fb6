//! The task's own tools: open it, add sub-questions, summarise it, close it, run its pipeline
//! and follow the job, and verify the ledger it lives in.

use research::command::{CloseTask, Command, ExpandSubQuestions, OpenTask};
use research::event::Event;
use serde_json::{Value, json};

use super::{Call, ToolOutput, base, done, guard, suffix, to_json};
use crate::args::*;
use crate::error::ServiceError;
use crate::service::{Service, Target};

pub(super) fn open(call: &mut Call<'_>, a: OpenTaskArgs) -> Result<ToolOutput, ServiceError> {
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
    let task_id = uuid_v7_like(call.service);
    let written = call.write(
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
                conflict_decisions: a.conflict_decisions.and_then(|d| d.recorded()),
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
    if let Some(d) = task.conflict_decisions {
        map.insert("conflict_decisions".into(), json!(d.name()));
    }
    map.insert("rules".into(), to_json(&task.rules));
    let text = format!(
        "Opened task {} for: {}.{}",
        written.task_id,
        task.question,
        suffix(&written)
    );
    Ok(done(map, text))
}

pub(super) fn expand_subquestions(
    call: &mut Call<'_>,
    a: ExpandSubquestionsArgs,
) -> Result<ToolOutput, ServiceError> {
    let written = call.write(
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

pub(super) fn summarize(call: &mut Call<'_>, a: TaskReadArgs) -> Result<ToolOutput, ServiceError> {
    let state = call.service.state(&a.task_id)?;
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

pub(super) fn close(call: &mut Call<'_>, a: CloseTaskArgs) -> Result<ToolOutput, ServiceError> {
    let written = call.write(
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

pub(super) fn run_pipeline(
    call: &mut Call<'_>,
    a: RunPipelineArgs,
) -> Result<ToolOutput, ServiceError> {
    call.service
        .run_pipeline_tool(call.caller, call.arguments, &a)
}

pub(super) fn job_status(
    call: &mut Call<'_>,
    a: JobStatusArgs,
) -> Result<ToolOutput, ServiceError> {
    call.service.job_status_tool(&a)
}

pub(super) fn verify(call: &mut Call<'_>, _: NoArgs) -> Result<ToolOutput, ServiceError> {
    let report = call.service.verify();
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
