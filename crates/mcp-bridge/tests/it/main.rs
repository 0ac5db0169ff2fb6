//! The bridge in process, spoken to by the official SDK's client over an in-memory pipe: what
//! only a client of this SDK exercises easily — pipeline runs as MCP tasks, log messages at
//! the level a client set, and a client without a name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_bridge::{Bridge, BridgeOptions};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams,
    Implementation, TaskPayload,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ClientHandler, RoleServer, ServiceExt};
use serde_json::{Value, json};
use service::{Service, ServiceOptions};

mod elicitation;
mod subscriptions;

fn service(dir: &std::path::Path) -> Service {
    let mut options = ServiceOptions::new(dir);
    options.ledger.checkpoint_interval = None;
    Service::open(options).unwrap()
}

/// A client connected to a bridge over an in-memory pipe; both ends stay up while the pair is
/// held.
struct Connected<C: ClientHandler> {
    client: RunningService<RoleClient, C>,
    _server: RunningService<RoleServer, Bridge>,
}

impl<C: ClientHandler> std::ops::Deref for Connected<C> {
    type Target = RunningService<RoleClient, C>;
    fn deref(&self) -> &Self::Target {
        &self.client
    }
}

async fn connect<C: ClientHandler>(service: &Service, client: C) -> Connected<C> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = Bridge::new(service.clone(), BridgeOptions::default());
    let server = tokio::spawn(bridge.serve(server_end));
    let client = client.serve(client_end).await.unwrap();
    Connected {
        client,
        _server: server.await.unwrap().unwrap(),
    }
}

fn arguments(value: Value) -> rmcp::model::JsonObject {
    match value {
        Value::Object(map) => map,
        _ => panic!("arguments are an object"),
    }
}

async fn call(
    client: &RunningService<RoleClient, impl ClientHandler>,
    name: &str,
    args: Value,
) -> Value {
    let result = client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments(args)))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
    result.structured_content.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_run_is_an_mcp_task_for_clients_that_declare_the_extension() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let config = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("task-client", "1.0"),
    );
    let client = connect(&service, config).await;
    let opened = call(
        &client,
        "research_open_task",
        json!({"question": "Is the lake warmer?"}),
    )
    .await;
    let task_id = opened["task_id"].as_str().unwrap().to_owned();
    call(
        &client,
        "retrieval_add_evidence",
        json!({
            "task_id": task_id, "source": "survey.example.org", "publish_date": "2025-01-02",
            "source_type": "government", "content": "The lake is warmer than it was.", "stance": "supports",
        }),
    )
    .await;

    let response = client
        .call_tool_once(
            CallToolRequestParams::new("research_run_pipeline")
                .with_arguments(arguments(json!({"task_id": task_id}))),
        )
        .await
        .unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("a client with the tasks extension gets a task: {response:?}");
    };
    let mut result = None;
    for _ in 0..200 {
        let got = client
            .get_task(GetTaskParams::new(created.task.task_id.clone()))
            .await
            .unwrap();
        if let TaskPayload::Completed { result: r } = got.task.payload {
            result = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let result = result.expect("the task completes when the job stops");
    let job = &result["structuredContent"];
    assert_eq!(job["status"], "waiting", "{job}");
    assert_eq!(job["task_id"], task_id.as_str());
    assert_eq!(
        job["pending_actions"][0]["tool"],
        "synthesis_screen_evidence"
    );

    // Without the extension the same call answers at once with the job to poll.
    let plain = connect(&service, ClientConfig::default()).await;
    let started = call(&plain, "research_run_pipeline", json!({"task_id": task_id})).await;
    assert!(started["job_id"].as_str().unwrap().starts_with("job-"));
}

/// A client that keeps the log messages it is sent.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<Value>>>);

impl ClientHandler for Logs {
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(json!({"level": params.level, "data": params.data}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn a_client_that_sets_a_log_level_is_told_what_each_call_did() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let logs = Logs::default();
    let client = connect(&service, logs.clone()).await;
    // Nothing is sent before the client asks.
    call(
        &client,
        "research_open_task",
        json!({"question": "Unlogged?"}),
    )
    .await;
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Info,
        ))
        .await
        .unwrap();
    let opened = call(
        &client,
        "research_open_task",
        json!({"question": "Logged?"}),
    )
    .await;
    call(
        &client,
        "research_summarize_state",
        json!({"task_id": opened["task_id"]}),
    )
    .await;
    let refused = client
        .call_tool(
            CallToolRequestParams::new("research_summarize_state")
                .with_arguments(arguments(json!({"task_id": "nope"}))),
        )
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = logs.0.lock().unwrap().clone();
        if seen.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The write at info, the refusal at warning; the read (debug) is below the level.
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["level"], "info");
    assert_eq!(seen[0]["data"]["tool"], "research_open_task");
    assert_eq!(seen[0]["data"]["task_id"], opened["task_id"]);
    assert_eq!(seen[1]["level"], "warning");
    assert_eq!(seen[1]["data"]["error"]["error"], "not_found");
}

/// From 2026-07-28 there is no `logging/setLevel`: a request asks for log messages with
/// `io.modelcontextprotocol/logLevel` in its `_meta`, and only that request gets them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn a_request_that_names_a_log_level_is_told_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let logs = Logs::default();
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = Bridge::new(service.clone(), BridgeOptions::default());
    // A 2026-07-28 server starts serving with the client's first request: it is not awaited.
    let _server = tokio::spawn(async move {
        let running = bridge.serve(server_end).await.unwrap();
        let _ = running.waiting().await;
    });
    let client = rmcp::service::ClientServiceExt::serve_with_lifecycle(
        logs.clone(),
        client_end,
        rmcp::service::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .unwrap();
    let opened = call(
        &client,
        "research_open_task",
        json!({"question": "Unlogged?"}),
    )
    .await;
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.set_log_level(rmcp::model::LoggingLevel::Info);
    let mut asked = CallToolRequestParams::new("research_open_task")
        .with_arguments(arguments(json!({"question": "Logged?"})));
    asked.meta = Some(meta.clone());
    let logged = tokio::time::timeout(Duration::from_secs(10), client.call_tool(asked))
        .await
        .expect("answered")
        .unwrap();
    assert_ne!(logged.is_error, Some(true), "{logged:?}");
    // A read is logged at debug: below the level this request names.
    let mut read = CallToolRequestParams::new("research_summarize_state")
        .with_arguments(arguments(json!({"task_id": opened["task_id"]})));
    read.meta = Some(meta);
    tokio::time::timeout(Duration::from_secs(10), client.call_tool(read))
        .await
        .expect("answered")
        .unwrap();
    // The same read without the level in its `_meta` is not logged either way.
    call(
        &client,
        "research_summarize_state",
        json!({"task_id": opened["task_id"]}),
    )
    .await;
    for _ in 0..100 {
        if !logs.0.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for any message that should not come.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = logs.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["level"], "info");
    assert_eq!(seen[0]["data"]["tool"], "research_open_task");
    let task = logged.structured_content.unwrap()["task_id"].clone();
    assert_eq!(seen[0]["data"]["task_id"], task);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_name_is_recorded_under_the_default_actor() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let config = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("  ", "1"),
    );
    let client = connect(&service, config).await;
    let opened = call(
        &client,
        "research_open_task",
        json!({"question": "Anyone?"}),
    )
    .await;
    let trail = service
        .projector()
        .audit_trail(opened["task_id"].as_str().unwrap(), 1, None)
        .unwrap();
    assert_eq!(trail.events[0].actor, "mcp-client");
}
