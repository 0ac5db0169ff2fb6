//! What the layers promise, tried in process: reads never write, the error body is the same
//! structure on every refusal, and the app answers every front end from one router.

use serde_json::json;

use crate::harness::App;

#[tokio::test]
async fn reads_never_write() {
    let app = App::new();
    let task = app
        .ok(
            "research_open_task",
            json!({"question": "Is the sea rising?"}),
        )
        .await["task_id"]
        .clone();
    let before = app.service.ledger().head();
    for (tool, arguments) in [
        ("research_summarize_state", json!({"task_id": task})),
        ("audit_verify", json!({})),
    ] {
        app.ok(tool, arguments).await;
    }
    for path in ["/health", "/metrics", "/v1/tools/list", "/v1/verify"] {
        let (status, body) = app.get(path).await;
        assert!(status.is_success(), "{path}: {status} {body}");
    }
    let graphql = app
        .post("/graphql", &json!({"query": "{ ledger { size } }"}))
        .await;
    assert!(graphql.0.is_success(), "{graphql:?}");
    assert_eq!(app.service.ledger().head(), before, "a read wrote");
}

#[tokio::test]
async fn every_refusal_carries_the_structured_error() {
    let app = App::new();
    for (status, body) in [
        app.get("/v1/none").await,
        app.call("research_open_task", json!({})).await,
        app.call("no_such_tool", json!({})).await,
    ] {
        assert!(status.is_client_error(), "{status}");
        assert!(body["error"].is_string(), "{body}");
        assert!(body["message"].is_string(), "{body}");
    }
}

#[tokio::test]
async fn rest_and_graphql_share_one_service() {
    let app = App::new();
    let task = app
        .ok(
            "research_open_task",
            json!({"question": "Is the sea rising?"}),
        )
        .await["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, body) = app
        .post(
            "/graphql",
            &json!({"query": format!("{{ task(id: \"{task}\") {{ question sessionVersion }} }}")}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    assert_eq!(body["data"]["task"]["question"], "Is the sea rising?");
    assert_eq!(body["data"]["task"]["sessionVersion"], 1);
}
