//! Tools: the service's contract as MCP tools, tool calls as tool results, progress
//! notifications, and pipeline runs as MCP tasks.
//!
//! Only an unknown tool is a protocol error (`-32602`): the client asked for something this
//! server does not have. Everything the service refuses — bad arguments, the wrong order, a
//! stale version, a reused key, a closed task — is a tool result with `isError: true` whose
//! `structuredContent` is the service's structured error, so the model reads what to do next.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult,
    JsonObject, ProgressNotificationParam, ProgressToken, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskOptions};
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use serde_json::{Value, json};
use service::{Job, ServiceError, ToolOutput, ToolProgress};

use crate::bridge::Bridge;
use crate::error::internal;

/// The tool that starts pipeline jobs: with a progress token it reports every step, and with
/// the tasks extension it becomes an MCP task.
const RUN_PIPELINE: &str = service::research::Tool::ResearchRunPipeline.name();

/// What a blocking tool call tells of its progress.
type Report = Box<dyn FnMut(ToolProgress) + Send>;

/// Progress messages queued between the blocking call and the notifier.
const PROGRESS_QUEUE: usize = 64;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// Every tool of the service's contract, with its schemas and annotations. Nothing is ever
/// deleted, so no tool is destructive; reads are read-only and idempotent; every tool works on
/// the ledger and the embedded corpus only, a closed world.
pub(crate) fn tools(service: &service::Service) -> Vec<Tool> {
    let mut out = built_in().to_vec();
    out.extend(service.registered_tools().into_iter().map(tool_of));
    out
}

/// The tool `name`, built-in or registered: what a 2026-07-28 request's `Mcp-Name` header is
/// checked against on every call, so it is found without building the others.
pub(crate) fn tool(service: &service::Service, name: &str) -> Option<Tool> {
    match built_in().iter().find(|t| t.name == name) {
        Some(tool) => Some(tool.clone()),
        None => service.registered_tool(name).map(tool_of),
    }
}

/// The built-in tools as MCP states them, made once (their schemas are shared, so a copy is
/// cheap).
fn built_in() -> &'static [Tool] {
    static TOOLS: std::sync::OnceLock<Vec<Tool>> = std::sync::OnceLock::new();
    TOOLS.get_or_init(|| {
        service::built_in_tools()
            .iter()
            .cloned()
            .map(tool_of)
            .collect()
    })
}

fn tool_of(spec: service::ToolSpec) -> Tool {
    // Only what differs from MCP's defaults (not read-only, destructive, not idempotent, open
    // world; a read-only tool is not destructive) is said: every byte of the list is paid for
    // in context.
    let mut annotations = if spec.read_only {
        ToolAnnotations::default().read_only(true)
    } else {
        ToolAnnotations::default().destructive(false)
    };
    if spec.idempotent {
        annotations = annotations.idempotent(true);
    }
    if !spec.open_world {
        annotations = annotations.open_world(false);
    }
    Tool::new(
        spec.name,
        spec.description,
        Arc::new(object(spec.input_schema)),
    )
    .with_title(spec.title)
    .with_raw_output_schema(Arc::new(object(spec.output_schema)))
    .with_annotations(annotations)
}

/// A service answer as a tool result: the structured object plus a short text, or the
/// structured error with `isError`.
pub(crate) fn tool_result(outcome: Result<ToolOutput, ServiceError>) -> CallToolResult {
    match outcome {
        Ok(out) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(out.text)]);
            result.structured_content = Some(out.structured);
            result
        }
        Err(e) => {
            let body = e.to_json();
            // The text carries the whole error too: clients that show only text still see
            // the code, the pending actions or the current version.
            let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
                "{}: {}\n{}",
                e.code(),
                e,
                body
            ))]);
            result.structured_content = Some(body);
            result
        }
    }
}

pub(crate) async fn call(
    bridge: &Bridge,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let name = request.name.to_string();
    if !bridge.service().has_tool(&name) {
        // The name is the client's: repeated only in part.
        let shown = service::echoed(&name);
        return Err(McpError::invalid_params(
            format!("unknown tool {shown:?}; tools/list names the tools of this server"),
            Some(json!({ "tool": shown })),
        ));
    }
    if name == crate::elicitation::ASKING_TOOL && crate::elicitation::is_answer(&request) {
        // A 2026-07-28 client came back with the person's answers: record them, nothing else.
        let outcome = crate::elicitation::answered(bridge, &context, &request).await?;
        return Ok(tool_result(Ok(outcome)).into());
    }
    let ask =
        name == crate::elicitation::ASKING_TOOL && crate::elicitation::client_can_ask(&context);
    let arguments = request.arguments.map_or(Value::Null, Value::Object);
    let caller = bridge.caller(&context);
    let token = context.meta.get_progress_token();
    let tasks_declared = context
        .client_capabilities()
        .is_some_and(|c| c.supports_tasks());

    let (progress, notifier) = progress_reporter(&context, token.as_ref());
    let outcome = bridge
        .service()
        .call_tool_async_with_progress(caller, name.clone(), arguments, progress)
        .await;
    // Every progress notification goes out before the result it belongs to.
    if let Some(notifier) = notifier {
        let _ = notifier.await;
    }
    // Registered tools are recorded in the ledger, so only built-in ones are read-only.
    let read_only = service::built_in_tools()
        .iter()
        .any(|t| t.name == name && t.read_only);
    crate::logging::tool_called(
        &bridge.session.log_level,
        &context,
        &name,
        read_only,
        &outcome,
    )
    .await;

    if name == RUN_PIPELINE
        && let Ok(out) = &outcome
        && let Some(job_id) = out.structured["job_id"].as_str()
    {
        let replayed = out.structured["replayed"] == true;
        if tasks_declared {
            return Ok(CallToolResponse::Task(pipeline_task(
                bridge, job_id, replayed,
            )?));
        }
        if let Some(token) = token {
            let job = follow_job(bridge, job_id, Some((&context.peer, token))).await?;
            return Ok(tool_result(Ok(job.to_output(replayed))).into());
        }
    }
    if ask && let Ok(out) = outcome {
        return crate::elicitation::ask(bridge, &context, out).await;
    }
    Ok(tool_result(outcome).into())
}

/// Where a call's progress goes: to the client as notifications when it gave a token (sent in
/// order by a task of their own), else nowhere.
fn progress_reporter(
    context: &RequestContext<RoleServer>,
    token: Option<&ProgressToken>,
) -> (Report, Option<tokio::task::JoinHandle<()>>) {
    match token {
        Some(token) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<ToolProgress>(PROGRESS_QUEUE);
            let notifier = tokio::spawn(notify_progress(context.peer.clone(), token.clone(), rx));
            let report: Report = Box::new(move |p| {
                // On the blocking thread; a client that stopped listening only loses progress.
                let _ = tx.blocking_send(p);
            });
            (report, Some(notifier))
        }
        None => (Box::new(|_| {}), None),
    }
}

async fn notify_progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut rx: tokio::sync::mpsc::Receiver<ToolProgress>,
) {
    let mut last = None;
    while let Some(p) = rx.recv().await {
        let value = p.progress as f64;
        // Progress must increase from one notification to the next.
        if last.is_some_and(|l| value <= l) {
            continue;
        }
        last = Some(value);
        let mut param =
            ProgressNotificationParam::new(token.clone(), value).with_message(p.message);
        if let Some(total) = p.total {
            param = param.with_total(total as f64);
        }
        if peer.notify_progress(param).await.is_err() {
            return;
        }
    }
}

/// Where a job stands as a progress value that only grows: `k` once step `k` is finished, the
/// share of the current step's units while it runs, and half a step for a stop before the end.
fn job_progress(job: &Job) -> f64 {
    let done = f64::from(job.step.saturating_sub(1));
    match job.status {
        service::JobStatus::Completed => f64::from(job.steps_total),
        service::JobStatus::Running => {
            let within = job
                .step_progress
                .as_deref()
                .and_then(|p| p.split_once('/'))
                .and_then(|(i, n)| Some((i.parse::<f64>().ok()?, n.parse::<f64>().ok()?)))
                .filter(|(_, n)| *n > 0.0)
                .map_or(0.0, |(i, n)| (i - 1.0).max(0.0) / n);
            done + within
        }
        _ => done + 0.5,
    }
}

/// Reports a job's progress to a client: every finished step once (so none is lost when the
/// job moves faster than the client is told), then where it stands.
struct JobReporter<'a> {
    peer: &'a Peer<RoleServer>,
    token: ProgressToken,
    steps_reported: usize,
    last: Option<f64>,
}

impl JobReporter<'_> {
    async fn send(&mut self, value: f64, total: f64, message: String) {
        // Progress must increase from one notification to the next.
        if self.last.is_some_and(|l| value <= l) {
            return;
        }
        self.last = Some(value);
        let param = ProgressNotificationParam::new(self.token.clone(), value)
            .with_total(total)
            .with_message(message);
        // A client that stopped listening still gets the result.
        let _ = self.peer.notify_progress(param).await;
    }

    async fn report(&mut self, job: &Job) {
        let total = f64::from(job.steps_total);
        for step in job.steps.iter().skip(self.steps_reported) {
            let message = format!(
                "step {}/{}: {}: {}",
                step.step, job.steps_total, step.name, step.detail
            );
            self.send(f64::from(step.step), total, message).await;
        }
        self.steps_reported = job.steps.len();
        self.send(job_progress(job), total, job.progress.clone())
            .await;
    }
}

/// Waits for a job to stop (completed, waiting for screening, failed, interrupted), telling
/// the client of every step when it gave a progress token.
async fn follow_job(
    bridge: &Bridge,
    job_id: &str,
    notify: Option<(&Peer<RoleServer>, ProgressToken)>,
) -> Result<Job, McpError> {
    let mut watch = bridge
        .service()
        .watch_job(job_id)
        .map_err(|e| internal(&e))?;
    let mut reporter = notify.map(|(peer, token)| JobReporter {
        peer,
        token,
        steps_reported: 0,
        last: None,
    });
    loop {
        let job = watch.borrow_and_update().clone();
        if let Some(reporter) = &mut reporter {
            reporter.report(&job).await;
        }
        if job.status.is_stopped() {
            return Ok(job);
        }
        if watch.changed().await.is_err() {
            // The job was forgotten while running (it cannot be: running jobs are kept);
            // answer with what the service says now.
            return bridge.service().job(job_id).map_err(|e| internal(&e));
        }
    }
}

/// A pipeline run as an MCP task: the task completes when the job stops, with the job as its
/// result. Cancelling the task stops the waiting, not the job, which ends at its next stop on
/// its own.
fn pipeline_task(
    bridge: &Bridge,
    job_id: &str,
    replayed: bool,
) -> Result<CreateTaskResult, McpError> {
    let options = TaskOptions::new()
        .with_ttl_ms(bridge.options().task_ttl_ms)
        .with_poll_interval_ms(500)
        .with_status_message(format!("pipeline job {job_id}"));
    let waiter = bridge.clone();
    let job_id = job_id.to_owned();
    let task = bridge.shared.tasks.spawn(options, move |context| {
        Box::pin(async move {
            let follow = follow_job(&waiter, &job_id, None);
            tokio::select! {
                job = follow => {
                    let job = job.map_err(TaskExit::Error)?;
                    context.set_status_message(job.progress.clone());
                    Ok(tool_result(Ok(job.to_output(replayed))))
                }
                () = context.cancelled() => Err(TaskExit::Cancelled),
            }
        })
    });
    Ok(CreateTaskResult::new(task))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = r#"name: kb_search
description: Searches the team's knowledge base for evidence on a question.
endpoint: http://127.0.0.1:9/search
contract_version: "2.1"
timeout_ms: 1000
input_schema:
  query: { type: string, semantic_tag: search_query }
output_schema:
  results:
    type: array
    items:
      type: object
      properties:
        id: { type: string, semantic_tag: result_id }
        text: { type: string, semantic_tag: evidence_content }
"#;

    #[test]
    fn one_tool_found_by_name_is_its_entry_in_the_list_built_in_or_registered() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = service::ServiceOptions::new(dir.path());
        options.ledger.checkpoint_interval = None;
        let service = service::Service::open(options).unwrap();
        service
            .register_tool(&service::Caller::new("admin"), CONTRACT)
            .unwrap();
        let listed = tools(&service);
        assert!(listed.iter().any(|t| t.name == "kb_search"));
        assert!(listed.iter().any(|t| t.name == "research_summarize_state"));
        for entry in &listed {
            assert_eq!(tool(&service, &entry.name).as_ref(), Some(entry));
        }
        assert!(tool(&service, "no_such_tool").is_none());
        service
            .unregister_tool(&service::Caller::new("admin"), "kb_search")
            .unwrap();
        assert!(tool(&service, "kb_search").is_none());
    }
}
