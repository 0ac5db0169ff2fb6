//! Snapshots of the contract clients script against: the tool list, every built-in tool's
//! result and every error body, as the REST view answers them. A change to any of them shows
//! in review as a change to a file under `snapshots/`; `UPDATE_EXPECT=1 cargo test -p server`
//! rewrites them.
//!
//! Ids, hashes and signatures differ from run to run and are numbered placeholders
//! ([`stable`]); the clock is fixed, so times are not.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use expect_test::expect_file;
use serde_json::{Value, json};

use crate::harness::{App, pretty, stable};

/// The snapshot of one answer: its status and its body.
fn answer(status: StatusCode, body: &Value) -> String {
    pretty(&stable(&json!({"status": status.as_u16(), "body": body})))
}

/// The tool list clients see: names, descriptions, schemas, annotations and roles.
#[tokio::test]
async fn tool_list() {
    let app = App::new();
    let (status, body) = app.get("/v1/tools/list").await;
    expect_file!["snapshots/tools_list.json"].assert_eq(&answer(status, &body));
}

/// One task researched with every built-in tool, each result a snapshot.
#[tokio::test]
async fn every_tool_result() {
    let app = App::new();
    let opened = app
        .ok(
            "research_open_task",
            json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01",
                   "constraints": ["peer-reviewed or official sources"]}),
        )
        .await;
    let task = opened["task_id"].as_str().unwrap().to_owned();
    let mut outputs = vec![("research_open_task", opened)];

    let sub = app
        .ok(
            "research_expand_subquestions",
            json!({"task_id": task, "sub_questions": ["How fast has it risen since 1993?"]}),
        )
        .await;
    outputs.push(("research_expand_subquestions", sub));

    let search = app
        .ok(
            "retrieval_search_evidence",
            json!({"task_id": task, "query": "sea level rise", "limit": 3}),
        )
        .await;
    let found: Vec<String> = search["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["evidence_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(!found.is_empty(), "the sample corpus answers: {search}");
    outputs.push(("retrieval_search_evidence", search));

    let mut added = Vec::new();
    for (source, stance, text) in [
        (
            "tide-office.example.org",
            "supports",
            "Tide gauges and satellite altimetry show the global mean sea level rising by about 3.3 mm per year since 1993.",
        ),
        (
            "coast-review.example.org",
            "opposes",
            "Some coastal records show no rise in the local sea level over the last decades.",
        ),
    ] {
        let result = app
            .ok(
                "retrieval_add_evidence",
                json!({"task_id": task, "source": source, "source_type": "government",
                       "publish_date": "2025-06-30", "content": text, "stance": stance}),
            )
            .await;
        added.push(result["evidence_id"].as_str().unwrap().to_owned());
        if added.len() == 1 {
            outputs.push(("retrieval_add_evidence", result));
        }
    }

    let listed = app
        .ok(
            "retrieval_list_candidates",
            json!({"task_id": task, "limit": 2}),
        )
        .await;
    outputs.push(("retrieval_list_candidates", listed));

    let detail = app
        .ok(
            "retrieval_get_source_detail",
            json!({"task_id": task, "evidence_id": added[0]}),
        )
        .await;
    outputs.push(("retrieval_get_source_detail", detail));

    let mut decisions = vec![
        json!({"evidence_id": added[0], "adopt": true, "stance": "supports"}),
        json!({"evidence_id": added[1], "adopt": true, "stance": "opposes"}),
    ];
    for (i, id) in found.iter().enumerate() {
        decisions.push(if i == 0 {
            json!({"evidence_id": id, "adopt": true, "stance": "supports"})
        } else {
            json!({"evidence_id": id, "adopt": false, "reason": "off the question"})
        });
    }
    let screened = app
        .ok(
            "synthesis_screen_evidence",
            json!({"task_id": task, "decisions": decisions}),
        )
        .await;
    outputs.push(("synthesis_screen_evidence", screened));

    let retracted = app
        .ok(
            "retrieval_retract_evidence",
            json!({"task_id": task, "evidence_id": found[0], "reason": "a duplicate of a government record"}),
        )
        .await;
    outputs.push(("retrieval_retract_evidence", retracted));

    for tool in [
        "synthesis_research_synthesis",
        "evaluation_conflict_resolution",
    ] {
        outputs.push((tool, app.ok(tool, json!({"task_id": task})).await));
    }
    let conflict = outputs.last().unwrap().1["conflicts"][0]["conflict_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decided = app
        .ok(
            "evaluation_resolve_conflict",
            json!({"task_id": task, "conflict_id": conflict, "winner": "supports",
                   "reason": "the national tide record is the wider measurement"}),
        )
        .await;
    outputs.push(("evaluation_resolve_conflict", decided));
    for tool in [
        "evaluation_build_decision_matrix",
        "evaluation_generate_conclusion",
        "evaluation_explain_reasoning",
    ] {
        outputs.push((tool, app.ok(tool, json!({"task_id": task})).await));
    }
    outputs.push((
        "research_summarize_state",
        app.ok("research_summarize_state", json!({"task_id": task}))
            .await,
    ));
    outputs.push(("audit_verify", app.ok("audit_verify", json!({})).await));

    // The pipeline runs in the background: its first answer depends on how far the job got,
    // so what is pinned is the shape of that answer and the job once it stops.
    let second = app
        .ok(
            "research_open_task",
            json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01"}),
        )
        .await;
    let started = app
        .ok(
            "research_run_pipeline",
            json!({"task_id": second["task_id"], "idempotency_key": "pipeline-1"}),
        )
        .await;
    let mut keys: Vec<&String> = started.as_object().unwrap().keys().collect();
    keys.sort();
    outputs.push(("research_run_pipeline", json!({"keys": keys})));
    let job = started["job_id"].as_str().unwrap().to_owned();
    let status = loop {
        let status = app.ok("research_job_status", json!({"job_id": job})).await;
        if status["status"] != "running" {
            break status;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    outputs.push(("research_job_status", status));

    outputs.push((
        "research_close_task",
        app.ok(
            "research_close_task",
            json!({"task_id": task, "reason": "done"}),
        )
        .await,
    ));

    let mut covered: Vec<&str> = outputs.iter().map(|(t, _)| *t).collect();
    covered.sort();
    let mut all: Vec<&str> = service::built_in_tools()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    all.sort();
    assert_eq!(covered, all, "every built-in tool has a snapshot");

    // One run of the redaction over the whole session, so an id reads the same in every file.
    let whole = stable(&Value::Array(
        outputs.iter().map(|(_, v)| v.clone()).collect(),
    ));
    for ((tool, _), value) in outputs.iter().zip(whole.as_array().unwrap()) {
        let path = format!("snapshots/tools/{tool}.json");
        expect_test::ExpectFile {
            path: std::path::PathBuf::from(path),
            position: file!(),
        }
        .assert_eq(&pretty(value));
    }
}

/// Every error code a client of the REST view can meet, with the body it carries.
#[tokio::test]
async fn every_error_body() {
    let app = App::new();
    let task = app
        .ok(
            "research_open_task",
            json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01"}),
        )
        .await["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut cases: Vec<(&str, (StatusCode, Value))> = Vec::new();
    cases.push((
        "invalid_argument",
        app.call("research_open_task", json!({"question": 7})).await,
    ));
    cases.push((
        "invalid_argument_unknown_field",
        app.call(
            "research_open_task",
            json!({"question": "q", "colour": "red"}),
        )
        .await,
    ));
    cases.push((
        "not_found_task",
        app.call(
            "research_summarize_state",
            json!({"task_id": "0195f7a1-0000-7000-8000-000000000001"}),
        )
        .await,
    ));
    cases.push((
        "not_found_tool",
        app.call("research_open_tasks", json!({})).await,
    ));
    cases.push((
        "workflow_order",
        app.call("evaluation_generate_conclusion", json!({"task_id": task}))
            .await,
    ));
    cases.push((
        "limit_exceeded",
        app.call(
            "retrieval_search_evidence",
            json!({"task_id": task, "limit": 100000}),
        )
        .await,
    ));
    cases.push((
        "session_conflict",
        app.call(
            "research_expand_subquestions",
            json!({"task_id": task, "sub_questions": ["Where?"], "expected_version": 0}),
        )
        .await,
    ));
    let keyed = json!({"task_id": task, "sub_questions": ["Where?"], "idempotency_key": "k-1"});
    app.ok("research_expand_subquestions", keyed).await;
    cases.push((
        "idempotency_key_reused",
        app.call(
            "research_expand_subquestions",
            json!({"task_id": task, "sub_questions": ["When?"], "idempotency_key": "k-1"}),
        )
        .await,
    ));
    app.ok("research_close_task", json!({"task_id": task}))
        .await;
    cases.push((
        "task_closed",
        app.call(
            "research_expand_subquestions",
            json!({"task_id": task, "sub_questions": ["Why?"]}),
        )
        .await,
    ));
    cases.push(("no_route", app.get("/v1/nothing-here").await));
    cases.push((
        "no_method",
        app.send(
            Request::put("/v1/tools/call")
                .header(header::HOST, "localhost")
                .body(Body::empty())
                .unwrap(),
        )
        .await,
    ));
    cases.push((
        "not_json",
        app.send(
            Request::post("/v1/tools/call")
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await,
    ));
    cases.push((
        "other_origin",
        app.send(
            Request::post("/v1/tools/call")
                .header(header::HOST, "localhost")
                .header(header::ORIGIN, "http://attacker.example")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(r#"{"name":"audit_verify"}"#))
                .unwrap(),
        )
        .await,
    ));
    cases.push((
        "other_host",
        app.send(
            Request::get("/v1/tools/list")
                .header(header::HOST, "attacker.example")
                .body(Body::empty())
                .unwrap(),
        )
        .await,
    ));
    cases.push((
        "request_too_large",
        app.send(
            Request::post("/v1/tools/call")
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(vec![b' '; (1 << 20) + 1]))
                .unwrap(),
        )
        .await,
    ));
    for (name, (status, body)) in &cases {
        expect_test::ExpectFile {
            path: std::path::PathBuf::from(format!("snapshots/errors/{name}.json")),
            position: file!(),
        }
        .assert_eq(&answer(*status, body));
    }
}

/// The refusal an assistant meets when it decides a conflict of a task that requires a person:
/// the body of the tool result's error, as an MCP client receives it (a call over the REST view
/// is a person's, so it never meets it there).
#[tokio::test]
async fn person_decision_required_body() {
    let app = App::new();
    let task = app
        .ok(
            "research_open_task",
            json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01",
                   "conflict_decisions": "person"}),
        )
        .await["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ids = Vec::new();
    for (source, stance) in [("a.example.org", "supports"), ("b.example.org", "opposes")] {
        let added = app
            .ok(
                "retrieval_add_evidence",
                json!({"task_id": task, "source": source, "source_type": "government",
                       "publish_date": "2025-06-30", "content": format!("{source} says so."),
                       "stance": stance}),
            )
            .await;
        ids.push(added["evidence_id"].as_str().unwrap().to_owned());
    }
    app.ok(
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [
            {"evidence_id": ids[0], "adopt": true}, {"evidence_id": ids[1], "adopt": true}]}),
    )
    .await;
    let conflicts = app
        .ok("evaluation_conflict_resolution", json!({"task_id": task}))
        .await;
    let conflict = conflicts["conflicts"][0]["conflict_id"].clone();
    let assistant = service::Caller::new("snapshot-client").deciding(
        service::research::event::DecidedBy::Assistant,
        "snapshot-client",
    );
    let refused = app
        .service
        .call_tool(
            &assistant,
            "evaluation_resolve_conflict",
            &json!({"task_id": task, "conflict_id": conflict, "winner": "supports",
                    "reason": "the assistant thinks so"}),
        )
        .unwrap_err();
    assert_eq!(refused.code(), "person_decision_required");
    expect_file!["snapshots/errors/person_decision_required.json"]
        .assert_eq(&pretty(&stable(&refused.to_json())));
    // A person (the REST view) decides it.
    let decided = app
        .ok(
            "evaluation_resolve_conflict",
            json!({"task_id": task, "conflict_id": conflict, "winner": "supports",
                   "reason": "the reviewer decided"}),
        )
        .await;
    assert_eq!(decided["conflict"]["decision"]["decided_by"], "person");
}
