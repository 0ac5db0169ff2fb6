//! A 2026-07-28 `subscriptions/listen` request over the SDK's client: it is told of each append
//! to the resources it names, and when nothing more can be told in order it ends with an
//! internal error that says why, not as if the client had cancelled it.

use std::time::Duration;

use ledger::{AppendRequest, ExpectedVersion, NewEvent};
use mcp_bridge::{Bridge, BridgeOptions};
use rmcp::model::{ServerNotification, SubscriptionFilter};
use serde_json::json;

use super::elicitation::asking_client;
use super::{call, service};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_request_ends_with_an_internal_error_once_the_read_models_stop() {
    let dir = tempfile::tempdir().unwrap();
    let service = service(dir.path());
    let bridge = Bridge::new(service.clone(), BridgeOptions::default());
    let client = asking_client(&bridge).await;
    let opened = call(
        &client,
        "research_open_task",
        json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01"}),
    )
    .await;
    let task = opened["task_id"].as_str().unwrap().to_owned();
    let summary = format!("ledger://tasks/{task}/summary");
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions(vec![summary.clone()])
        .build();
    let mut listening = client.listen(filter).await.unwrap();

    call(
        &client,
        "retrieval_add_evidence",
        json!({"task_id": task, "source": "tide-office.example.org", "source_type": "government",
               "publish_date": "2025-06-30", "stance": "supports",
               "content": "Tide gauges record a rise of 3.3 mm a year since 1993."}),
    )
    .await;
    let told = tokio::time::timeout(Duration::from_secs(10), listening.next())
        .await
        .expect("told of the append")
        .unwrap();
    match told {
        Some(ServerNotification::ResourceUpdatedNotification(n)) => {
            assert_eq!(n.params.uri, summary)
        }
        other => panic!("told {other:?}"),
    }

    // An event of a known kind that does not decode, appended beside the service: the read
    // models stop before it, and no later update can be told in order.
    let ledger = service.ledger().clone();
    let stream = task.clone();
    tokio::task::spawn_blocking(move || {
        ledger.append(AppendRequest {
            stream,
            expected: ExpectedVersion::Any,
            actor: "newer-build".into(),
            events: vec![NewEvent {
                kind: "evidence_weighed".into(),
                payload: vec![1, 0, 7],
                causation: vec![],
            }],
            idempotency: None,
            content: Vec::new(),
        })
    })
    .await
    .unwrap()
    .unwrap();
    let projector = service.projector().clone();
    let folded = tokio::task::spawn_blocking(move || projector.catch_up())
        .await
        .unwrap();
    assert!(folded.is_err(), "{folded:?}");

    let ended = tokio::time::timeout(Duration::from_secs(10), listening.next())
        .await
        .expect("the request ends");
    let error = ended.expect_err("it ends with an error, not as if cancelled");
    let rmcp::ServiceError::McpError(data) = &error else {
        panic!("not a JSON-RPC error: {error:?}");
    };
    assert_eq!(data.code.0, -32603, "{data:?}");
    assert!(data.message.contains("read models stopped"), "{data:?}");
}
