//! External tools by contract through a running server: the REST view, a real HTTP server
//! standing in for a team's existing API (and for misbehaving ones), recording in the ledger,
//! evidence from a registered tool, fallbacks, registration and hot reload.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::LegacyApi;

use super::server::{Server, call_tool, get_json, ledger_size, request};

/// The body of `POST /v1/tools/register`: the contract's text in JSON.
pub(crate) fn register_body(contract: &str) -> String {
    serde_json::json!({ "contract": contract }).to_string()
}

pub(crate) fn kb_contract(name: &str, endpoint: &str, timeout_ms: u64) -> String {
    format!(
        r#"name: {name}
description: Searches the team's knowledge base for evidence on a question.
endpoint: {endpoint}
contract_version: "2.1"
timeout_ms: {timeout_ms}
input_schema:
  query: {{ type: string, semantic_tag: search_query }}
  top_k: {{ type: integer, default: 3, min: 1, max: 10, semantic_tag: result_limit }}
output_schema:
  results:
    type: array
    items:
      type: object
      properties:
        id: {{ type: string, semantic_tag: result_id }}
        text: {{ type: string, semantic_tag: evidence_content }}
        url: {{ type: string, semantic_tag: source_url }}
        publisher: {{ type: string, semantic_tag: publisher }}
        date: {{ type: string, semantic_tag: publish_date }}
        type: {{ type: string, semantic_tag: source_type }}
        stance: {{ type: string, semantic_tag: evidence_stance }}
        score: {{ type: number, semantic_tag: relevance_score }}
"#
    )
}

fn call(server: &Server, name: &str, arguments: Value) -> (u16, Value) {
    call_tool(server.addr, name, arguments)
}

/// Opens a task on lithium supply and demand, and gives its id.
fn open_task(server: &Server) -> String {
    let (_, opened) = call(
        server,
        "research_open_task",
        json!({"question": "Does lithium supply outgrow demand?"}),
    );
    opened["result"]["task_id"].as_str().unwrap().to_owned()
}

fn contracts(data: &Path) -> std::path::PathBuf {
    let dir = data.join("contracts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A server on `data` with the contracts `files` (file name, contract) in its contracts folder.
fn serve_with(data: &Path, files: &[(&str, String)]) -> Server {
    let dir = contracts(data);
    for (file, contract) in files {
        std::fs::write(dir.join(file), contract).unwrap();
    }
    super::server::place_contracts(data, &dir);
    Server::start(data, &[])
}

#[test]
fn contracts_check_names_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kb.yaml"),
        kb_contract("kb_search", "http://127.0.0.1:9/s", 1000),
    )
    .unwrap();
    let out = super::run(
        dir.path(),
        &["contracts", "check", dir.path().to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", super::stdout(&out));
    let bad = kb_contract("kb_bad", "http://127.0.0.1:9/s", 1000)
        .replace("semantic_tag: publisher", "semantic_tag: publsher");
    std::fs::write(dir.path().join("bad.yaml"), bad).unwrap();
    let out = super::run(
        dir.path(),
        &["contracts", "check", dir.path().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = super::stdout(&out);
    assert!(
        text.contains(
            "bad.yaml: output_schema.results[].publisher.semantic_tag: unknown tag \"publsher\""
        ),
        "{text}"
    );
}

#[test]
fn a_registered_tool_is_listed_called_checked_and_recorded() {
    let api = LegacyApi::start();
    let data = tempfile::tempdir().unwrap();
    let dir = contracts(data.path());
    std::fs::write(
        dir.join("kb.yaml"),
        kb_contract("kb_search", &api.url("/search"), 3000),
    )
    .unwrap();
    std::fs::write(
        dir.join("kb-broken.yaml"),
        kb_contract("kb_broken", &api.url("/missing-tag"), 3000),
    )
    .unwrap();
    std::fs::write(
        dir.join("kb-old.yaml"),
        kb_contract("kb_old", &api.url("/old-version"), 3000),
    )
    .unwrap();
    std::fs::write(
        dir.join("kb-slow.yaml"),
        kb_contract("kb_slow", &api.url("/slow"), 300),
    )
    .unwrap();
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    std::fs::write(
        dir.join("kb-down.yaml"),
        kb_contract("kb_down", &format!("http://{down}/search"), 3000),
    )
    .unwrap();
    std::fs::write(
        dir.join("fallbacks.yaml"),
        "fallbacks:\n  knowledge_base: kb_search\n",
    )
    .unwrap();
    super::server::place_contracts(data.path(), &dir);
    let server = Server::start(data.path(), &[]);

    let (status, list) = get_json(server.addr, "/v1/tools/list");
    assert_eq!(status, 200);
    let kb = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "kb_search")
        .expect("listed");
    assert!(kb["inputSchema"]["properties"]["task_id"].is_object());
    assert_eq!(kb["annotations"]["destructiveHint"], false);

    // Without a task: answered, and recorded in the tools stream.
    let before = ledger_size(server.addr);
    let (status, out) = call(
        &server,
        "kb_search",
        json!({"query": "lithium", "top_k": 2}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"]["results"].as_array().unwrap().len(), 2);
    assert_eq!(ledger_size(server.addr), before + 1);

    // With a task: {{task_question}} is filled from it and the call lands in its stream.
    let task = open_task(&server);
    let (status, out) = call(
        &server,
        "kb_search",
        json!({"task_id": task, "query": "{{task_question}}", "expected_output_tags": ["result_id", "source_url"]}),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"]["session_version"], 2);
    let first = &out["result"]["results"][0];
    assert!(
        first["text"].is_null() && first["id"].is_string(),
        "filtered by tags: {first}"
    );
    let (_, session) = get_json(server.addr, &format!("/v1/sessions/{task}"));
    assert_eq!(session["session_version"], 2);

    // Misbehaving tools: clear errors at once, never a hang.
    for (name, code, http) in [
        ("kb_broken", "contract_violation", 502),
        ("kb_old", "contract_violation", 502),
        ("kb_slow", "timeout", 504),
        ("kb_down", "source_failed", 502),
    ] {
        let started = Instant::now();
        let (status, out) = call(&server, name, json!({"query": "q"}));
        assert_eq!(status, http, "{name}: {out}");
        assert_eq!(out["error"], code, "{name}: {out}");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{name} took {:?}",
            started.elapsed()
        );
    }
    let (_, out) = call(&server, "kb_broken", json!({"query": "q"}));
    assert!(
        out["detail"].as_str().unwrap().contains("evidence_content"),
        "{out}"
    );

    // Bad arguments never reach the tool.
    let (status, out) = call(&server, "kb_search", json!({"query": "q", "top_k": 99}));
    assert_eq!(
        (status, out["error"].as_str()),
        (400, Some("invalid_argument")),
        "{out}"
    );

    // An unknown name with a fallback is answered by it; without one it is not found.
    let (status, out) = call(&server, "knowledge_base", json!({"query": "q"}));
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"]["fallback_from"], "knowledge_base");
    let (status, _) = call(&server, "no_such_tool", json!({}));
    assert_eq!(status, 404);
}

#[test]
fn a_search_uses_a_registered_evidence_source_beside_the_corpus() {
    let api = LegacyApi::start();
    let data = tempfile::tempdir().unwrap();
    let server = serve_with(
        data.path(),
        &[
            (
                "kb.yaml",
                kb_contract("kb_search", &api.url("/search"), 3000),
            ),
            (
                "kb-slow.yaml",
                kb_contract("kb_slow", &api.url("/slow"), 300),
            ),
        ],
    );
    let task = open_task(&server);
    let (status, out) = call(
        &server,
        "retrieval_search_evidence",
        json!({"task_id": task, "sources": ["corpus", "kb_search", "kb_slow"], "limit": 2}),
    );
    assert_eq!(status, 200, "{out}");
    let result = &out["result"];
    let candidates = result["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 2, "{result}");
    assert!(
        candidates.iter().all(|c| c["origin"] == "kb_search"),
        "{result}"
    );
    assert_eq!(result["relevance_basis"]["kb_search"], "scored_by_source");
    assert_eq!(candidates[0]["source"], "example mining institute");
    let failed = result["failed_sources"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["source"], "kb_slow");
    assert_eq!(failed[0]["error"]["error"], "timeout");
    // The evidence's full text was stored and is readable.
    let id = candidates[0]["evidence_id"].as_str().unwrap();
    let (_, detail) = call(
        &server,
        "retrieval_get_source_detail",
        json!({"task_id": task, "evidence_id": id}),
    );
    assert!(
        detail["result"]["content"]
            .as_str()
            .unwrap()
            .contains("Knowledge base note"),
        "{detail}"
    );
    // An unknown source is refused before anything is asked.
    let (status, out) = call(
        &server,
        "retrieval_search_evidence",
        json!({"task_id": task, "sources": ["kb_nope"]}),
    );
    assert_eq!(
        (status, out["error"].as_str()),
        (400, Some("invalid_argument"))
    );
}

/// An item a source gives without a publish date cannot be weighed: it is left out of the
/// candidates and reported in `dropped_items`, and the other sources still count. Here the
/// source's contract has no field tagged `publish_date`, so every item of it is dropped.
#[test]
fn items_without_a_publish_date_are_reported_as_dropped() {
    let api = LegacyApi::start();
    let data = tempfile::tempdir().unwrap();
    let undated = kb_contract("kb_undated", &api.url("/search"), 3000).replace(
        "        date: { type: string, semantic_tag: publish_date }\n",
        "",
    );
    assert!(!undated.contains("publish_date"));
    let server = serve_with(data.path(), &[("kb.yaml", undated)]);
    let task = open_task(&server);
    let (status, out) = call(
        &server,
        "retrieval_search_evidence",
        json!({"task_id": task, "sources": ["corpus", "kb_undated"], "limit": 3}),
    );
    assert_eq!(status, 200, "{out}");
    let result = &out["result"];
    let candidates = result["candidates"].as_array().unwrap();
    assert!(
        candidates.iter().all(|c| c["origin"] != "kb_undated"),
        "{result}"
    );
    let dropped = result["dropped_items"].as_array().unwrap();
    assert_eq!(dropped.len(), 3, "{result}");
    for (i, item) in dropped.iter().enumerate() {
        assert_eq!(item["source"], "kb_undated", "{result}");
        assert_eq!(
            item["item"],
            format!("kb-{}: no publish_date", i + 1),
            "{result}"
        );
    }
    assert!(
        result.get("failed_sources").is_none_or(|f| f == &json!([])),
        "{result}"
    );
}

#[test]
fn registration_is_allow_listed_persistent_and_hot_reloaded() {
    let api = LegacyApi::start();
    let data = tempfile::tempdir().unwrap();
    let dir = contracts(data.path());
    let server = Server::start(data.path(), &[]);
    let text = kb_contract("kb_search", &api.url("/search"), 3000);
    let (status, body) = request(
        server.addr,
        "POST",
        "/v1/tools/register",
        &[("Content-Type", "application/json")],
        register_body(&text).as_bytes(),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    assert!(super::server::registered_contract_kept(
        data.path(),
        "kb_search"
    ));
    let outside = kb_contract("kb_far", "https://api.example.com/search", 3000);
    let (status, body) = request(
        server.addr,
        "POST",
        "/v1/tools/register",
        &[("Content-Type", "application/json")],
        register_body(&outside).as_bytes(),
    );
    assert_eq!(status, 400);
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["field"], "endpoint", "{error}");

    // A contract file dropped into the directory is picked up while the server runs; over a
    // database, a folder pushed into it is.
    let second = kb_contract("kb_second", &api.url("/search"), 3000);
    if super::server::on_postgres() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("second.yaml"), second).unwrap();
        super::server::place_contracts(data.path(), folder.path());
    } else {
        std::fs::write(dir.join("second.yaml"), second).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, list) = get_json(server.addr, "/v1/tools/list");
        if list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "kb_second")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new contract was never loaded"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, _) = request(server.addr, "DELETE", "/v1/tools/kb_search", &[], b"");
    assert_eq!(status, 200);
    assert!(!dir.join("kb_search.yaml").exists());
    assert!(!super::server::registered_contract_kept(
        data.path(),
        "kb_search"
    ));
    let (status, _) = request(server.addr, "DELETE", "/v1/tools/kb_search", &[], b"");
    assert_eq!(status, 404);
}

#[test]
fn contracts_health_calls_each_tool_and_says_which_keep_their_contract() {
    let api = LegacyApi::start();
    let data = tempfile::tempdir().unwrap();
    let dir = contracts(data.path());
    std::fs::write(
        dir.join("kb.yaml"),
        kb_contract("kb_search", &api.url("/search"), 3000),
    )
    .unwrap();
    let out = super::run(data.path(), &["contracts", "health"]);
    assert!(out.status.success(), "{}", super::stdout(&out));
    assert!(super::stdout(&out).contains("ok      kb_search"));
    std::fs::write(
        dir.join("old.yaml"),
        kb_contract("kb_old", &api.url("/old-version"), 3000),
    )
    .unwrap();
    let out = super::run(data.path(), &["contracts", "health"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        super::stdout(&out).contains("FAILED  kb_old"),
        "{}",
        super::stdout(&out)
    );
}

#[test]
fn a_shutdown_held_past_its_bound_by_a_call_in_flight_exits_with_status_3_and_says_why() {
    // A tool that takes the request, says so, and does not answer within the test.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/search", listener.local_addr().unwrap());
    let (arrived, arrival) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            let _ = arrived.send(());
            std::thread::sleep(Duration::from_secs(20));
            drop(stream);
        }
    });
    let data = tempfile::tempdir().unwrap();
    let dir = contracts(data.path());
    std::fs::write(
        dir.join("kb-held.yaml"),
        kb_contract("kb_held", &endpoint, 15_000),
    )
    .unwrap();
    super::server::place_contracts(data.path(), &dir);
    let server = Server::start(data.path(), &["--shutdown-secs-max", "1"]);
    let task = open_task(&server);
    let addr = server.addr;
    let in_flight = std::thread::spawn(move || {
        call_tool(
            addr,
            "retrieval_search_evidence",
            json!({"task_id": task, "sources": ["kb_held"]}),
        )
    });
    arrival
        .recv_timeout(Duration::from_secs(20))
        .expect("the call reached the tool");
    let started = Instant::now();
    let (status, stderr) = server.stop_with_stderr();
    let took = started.elapsed();
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(took < Duration::from_secs(5), "the shutdown took {took:?}");
    assert!(stderr.contains("did not finish within 1 s"), "{stderr}");
    let _ = in_flight.join();
}

#[test]
fn a_search_of_registered_sources_alone_is_recorded() {
    let api = LegacyApi::start();
    let data = tempfile::tempdir().unwrap();
    let server = serve_with(
        data.path(),
        &[(
            "kb.yaml",
            kb_contract("kb_search", &api.url("/search"), 3000),
        )],
    );
    let task = open_task(&server);
    let (status, out) = call(
        &server,
        "retrieval_search_evidence",
        json!({"task_id": task, "sources": ["kb_search"], "limit": 2}),
    );
    assert_eq!(status, 200, "{out}");
    let candidates = out["result"]["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 2, "{out}");
    assert!(
        candidates.iter().all(|c| c["origin"] == "kb_search"),
        "{out}"
    );
    server.stop();
}
