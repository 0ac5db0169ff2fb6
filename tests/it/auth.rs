//! Access tokens and roles, end to end: tokens made and revoked with `research-ledger token`
//! (on the file and through a running server), and a spawned `serve` that checks them on every
//! surface — MCP, GraphQL over HTTP and WebSocket, REST, export and metrics.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

use super::external::kb_contract;
use super::graphql::{connect, post_as, receive, send as ws_send};
use super::mcp::{message, open_session, post as mcp_post, stateless};
use super::server::{Header, Response, Server, get_json, ledger_size, send};
use super::{run, run_with_env, stderr, stdout};

/// Makes a token for `name` with `role` on the data directory's token file, and returns it.
pub(crate) fn add_token(data: &Path, name: &str, role: &str) -> String {
    let out = run(data, &["token", "add", name, "--role", role]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    assert!(is_token(&token), "not a token: {token:?}");
    token
}

/// `rl_` and 64 lower-case hex digits.
fn is_token(text: &str) -> bool {
    text.strip_prefix("rl_").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

pub(crate) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `POST /v1/tools/call` as the holder of `token`.
pub(crate) fn call(addr: SocketAddr, token: &str, name: &str, arguments: Value) -> Response {
    let auth = bearer(token);
    send(
        addr,
        "POST",
        "/v1/tools/call",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        json!({"name": name, "arguments": arguments})
            .to_string()
            .as_bytes(),
    )
}

/// A `GET` as the holder of `token`.
fn get(addr: SocketAddr, token: &str, path: &str) -> Response {
    send(addr, "GET", path, &[("Authorization", &bearer(token))], b"")
}

/// Opens a task through REST as the holder of `token`; returns its id.
pub(crate) fn open_task(addr: SocketAddr, token: &str, question: &str) -> String {
    let reply = call(
        addr,
        token,
        "research_open_task",
        json!({"question": question, "research_date": "2025-06-30"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["result"]["task_id"]
        .as_str()
        .expect("a task id")
        .to_owned()
}

fn evidence(task: &str, source: &str, date: &str, stance: &str) -> Value {
    json!({
        "task_id": task, "source": source, "publish_date": date, "source_type": "government",
        "content": format!("{source} on the sea level."), "stance": stance,
    })
}

/// A GraphQL request as `token`'s holder that must succeed; returns its data.
fn gql(addr: SocketAddr, token: &str, query: &str, variables: Value) -> Value {
    let (status, out) = post_as(addr, Some(token), query, variables);
    assert_eq!(status, 200, "{out}");
    assert!(out.get("errors").is_none(), "{out}");
    out["data"].clone()
}

/// The one error of a GraphQL request that must fail.
fn gql_error(addr: SocketAddr, token: &str, query: &str, variables: Value) -> Value {
    let (_, out) = post_as(addr, Some(token), query, variables);
    let errors = out["errors"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(errors.len(), 1, "{out}");
    errors[0].clone()
}

/// The kind and actor of each event of a task, read through GraphQL.
fn actors(addr: SocketAddr, token: &str, task: &str) -> Vec<(String, String)> {
    let data = gql(
        addr,
        token,
        "query($t: ID!) { task(id: $t) { events(first: 50) { edges { node { kind actor } } } } }",
        json!({"t": task}),
    );
    data["task"]["events"]["edges"]
        .as_array()
        .expect("edges")
        .iter()
        .map(|e| {
            (
                e["node"]["kind"].as_str().unwrap().to_owned(),
                e["node"]["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Asserts a REST refusal: its status and structured error code.
fn assert_refused(reply: &Response, status: u16, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["error"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

/// Asserts an MCP tools/call answered with a refusal of the service: a tool result with
/// `isError` and the structured error `code`.
fn assert_tool_refused(message: &Value, code: &str) {
    assert_eq!(message["result"]["isError"], true, "{message}");
    assert_eq!(
        message["result"]["structuredContent"]["error"], code,
        "{message}"
    );
}

#[test]
fn token_add_prints_the_token_once_and_keeps_only_its_hash() {
    let data = tempfile::tempdir().unwrap();
    let out = run(data.path(), &["token", "add", "wes", "--role", "writer"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The token alone on stdout, so that a script can capture it; the advice on stderr.
    let printed = stdout(&out);
    assert_eq!(printed.lines().count(), 1, "{printed:?}");
    let token = printed.trim().to_owned();
    assert!(is_token(&token), "{token:?}");
    assert!(stderr(&out).contains("shown once"), "{}", stderr(&out));
    let other = add_token(data.path(), "aud", "auditor");
    assert_ne!(token, other);

    // The file holds each token's blake3 hash, never the token, and only its owner reads it.
    let file = data.path().join("tokens.json");
    let text = crate::server::tokens_text(data.path()).unwrap();
    let hash = blake3::hash(token.as_bytes()).to_hex().to_string();
    assert!(!text.contains(&token) && !text.contains(&other), "{text}");
    assert!(text.contains(&hash), "{text}");
    if !crate::server::on_postgres() {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
    }

    // The list names holders and roles; neither the tokens nor their hashes.
    let list = run(data.path(), &["token", "list"]);
    assert!(list.status.success(), "{}", stderr(&list));
    let listed = stdout(&list);
    for line in [("wes", "writer"), ("aud", "auditor")] {
        assert!(
            listed
                .lines()
                .any(|l| l.contains(line.0) && l.contains(line.1)),
            "{listed}"
        );
    }
    let list = run(data.path(), &["token", "list", "--json"]);
    let listed = stdout(&list);
    for secret in [&token, &other, &hash] {
        assert!(!listed.contains(secret.as_str()), "{listed}");
    }
    let json: Value = serde_json::from_str(&listed).unwrap();
    let tokens = json["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 2, "{json}");
    assert_eq!(tokens[0]["name"], "wes");
    assert_eq!(tokens[0]["role"], "writer");
    assert_eq!(tokens[0]["revoked_at"], Value::Null);
    assert!(tokens.iter().all(|t| t.get("hash").is_none()), "{json}");

    // A name is one holder: a second token for it is refused, and the file is unchanged.
    let again = run(data.path(), &["token", "add", "wes", "--role", "admin"]);
    assert_eq!(again.status.code(), Some(2), "{}", stdout(&again));
    assert!(stdout(&again).trim().is_empty());
    assert_eq!(crate::server::tokens_text(data.path()).unwrap(), text);

    let revoke = run(data.path(), &["token", "revoke", "wes"]);
    assert!(revoke.status.success(), "{}", stderr(&revoke));
    let json: Value =
        serde_json::from_str(&stdout(&run(data.path(), &["token", "list", "--json"]))).unwrap();
    assert!(json["tokens"][0]["revoked_at"].is_string(), "{json}");
    assert_eq!(json["tokens"][1]["revoked_at"], Value::Null, "{json}");
}

#[test]
fn token_commands_run_at_once_all_land() {
    // Each `token add` is a process of its own reading, changing and writing the token file:
    // the lock beside the file makes them take turns, so none overwrites another's token.
    let data = tempfile::tempdir().unwrap();
    const ADDERS: usize = 12;
    let adders: Vec<_> = (0..ADDERS)
        .map(|i| {
            let data = data.path().to_owned();
            let name = format!("holder-{i}");
            std::thread::spawn(move || run(&data, &["token", "add", &name, "--role", "writer"]))
        })
        .collect();
    let mut tokens = Vec::new();
    for adder in adders {
        let out = adder.join().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        tokens.push(stdout(&out).trim().to_owned());
    }
    let json: Value =
        serde_json::from_str(&stdout(&run(data.path(), &["token", "list", "--json"]))).unwrap();
    let mut names: Vec<String> = json["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = (0..ADDERS).map(|i| format!("holder-{i}")).collect();
    expected.sort();
    assert_eq!(names, expected, "{json}");
    let text = crate::server::tokens_text(data.path()).unwrap();
    for token in &tokens {
        let hash = blake3::hash(token.as_bytes()).to_hex().to_string();
        assert!(text.contains(&hash), "the token file lost a token: {text}");
    }
}

#[test]
fn every_route_but_health_and_the_graphiql_page_needs_a_valid_bearer_token() {
    let data = tempfile::tempdir().unwrap();
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;

    let open = json!({"name": "research_open_task", "arguments": {"question": "Is it?"}});
    let mutation =
        json!({"query": "mutation { openTask(input: {question: \"Is it?\"}) { taskId } }"});
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "no-token", "version": "1"}},
    });
    let json_headers = [("Content-Type", "application/json")];
    let mcp_headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let routes: [(&str, &str, &[Header], Vec<u8>); 15] = [
        (
            "POST",
            "/mcp",
            &mcp_headers,
            initialize.to_string().into_bytes(),
        ),
        (
            "POST",
            "/graphql",
            &json_headers,
            mutation.to_string().into_bytes(),
        ),
        (
            "POST",
            "/v1/tools/call",
            &json_headers,
            open.to_string().into_bytes(),
        ),
        ("GET", "/v1/export?all=true", &[], Vec::new()),
        ("GET", "/metrics", &[], Vec::new()),
        ("GET", "/v1/tools/list", &[], Vec::new()),
        ("GET", "/v1/sessions/some-task", &[], Vec::new()),
        ("GET", "/v1/tokens", &[], Vec::new()),
        // The transparency log and the auditor's routes are reads like any other.
        ("GET", "/checkpoint", &[], Vec::new()),
        ("GET", "/tile/0/000.p/1", &[], Vec::new()),
        ("GET", "/tile/entries/000.p/1", &[], Vec::new()),
        ("GET", "/v1/verify", &[], Vec::new()),
        ("GET", "/v1/proofs/inclusion?seq=0", &[], Vec::new()),
        ("GET", "/v1/proofs/consistency?first=1", &[], Vec::new()),
        ("GET", "/v1/tasks/some-task/head", &[], Vec::new()),
    ];
    let unknown = format!("Bearer rl_{}", "0".repeat(64));
    let bare = format!("rl_{}", &writer[3..]);
    // What is presented, and what the refusal must say about it.
    let credentials: [(Option<&str>, &str); 6] = [
        (None, "Bearer"),
        (Some("Basic dXNlcjpwYXNz"), "Bearer TOKEN"),
        (Some("Bearer"), "Bearer TOKEN"),
        (Some("Bearer    "), "Bearer TOKEN"),
        (Some(&bare), "Bearer TOKEN"),
        (Some(&unknown), "not known or was revoked"),
    ];
    for (method, path, headers, body) in &routes {
        for (presented, says) in credentials {
            let mut all = headers.to_vec();
            if let Some(value) = presented {
                all.push(("Authorization", value));
            }
            let reply = send(addr, method, path, &all, body);
            let context = format!("{method} {path} with {presented:?}");
            assert_eq!(reply.status, 401, "{context}: {}", reply.text());
            assert_eq!(
                reply.header("www-authenticate"),
                Some("Bearer realm=\"research-ledger\""),
                "{context}"
            );
            let error = reply.json();
            assert_eq!(error["error"], "unauthenticated", "{context}: {error}");
            let message = error["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{context}: {error}");
        }
    }

    // Liveness stays open to supervisors, with or without credentials.
    for presented in [None, Some("Basic dXNlcjpwYXNz")] {
        let headers: Vec<(&str, &str)> = presented
            .map(|p| ("Authorization", p))
            .into_iter()
            .collect();
        let reply = send(addr, "GET", "/health", &headers, b"");
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.json()["status"], "ok");
    }
    // So does the GraphiQL page, which holds no data (a browser cannot send a token to load
    // it); its queries are POSTs, which need one.
    let reply = send(addr, "GET", "/graphql", &[], b"");
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(reply.text().contains("GraphiQL"), "{}", reply.text());
    // Nothing was written, and the token in force does pass.
    assert_eq!(ledger_size(addr), 0);
    assert_eq!(get(addr, &writer, "/metrics").status, 200);
    assert_eq!(get(addr, &writer, "/v1/tools/list").status, 200);

    // Once the log holds something, what a token holder is served is still refused to anyone
    // else: the signed checkpoint, the tiles over it, proofs, the verification and task heads.
    let task = open_task(addr, &writer, "Is the log read only with a token?");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while get(addr, &writer, "/checkpoint").status != 200 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let head = format!("/v1/tasks/{task}/head");
    for path in [
        "/checkpoint",
        "/tile/0/000.p/1",
        "/tile/entries/000.p/1",
        "/v1/verify",
        "/v1/proofs/inclusion?seq=0",
        head.as_str(),
    ] {
        let served = get(addr, &writer, path);
        assert_eq!(served.status, 200, "{path}: {}", served.text());
        for presented in [None, Some(unknown.as_str())] {
            let headers: Vec<Header> = presented
                .map(|p| ("Authorization", p))
                .into_iter()
                .collect();
            let reply = send(addr, "GET", path, &headers, b"");
            assert_eq!(reply.status, 401, "{path} with {presented:?}");
            assert_eq!(reply.json()["error"], "unauthenticated", "{path}");
        }
    }
}

#[test]
fn every_surface_records_the_token_holder_as_the_actor() {
    let data = tempfile::tempdir().unwrap();
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let auth = bearer(&writer);

    // REST.
    let task = open_task(addr, &writer, "Does the sea level rise along the coast?");
    // MCP, in the 2026-07-28 era: the client names itself, but the token says who calls.
    let (status, answer) = stateless(
        &server,
        &[("Authorization", &auth)],
        1,
        "tools/call",
        json!({"name": "retrieval_add_evidence",
               "arguments": evidence(&task, "tide-office.example.org", "2025-03-01", "supports")}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // MCP, in a 2025-11-25 session.
    let session = open_session(&server, &[("Authorization", &auth)], "session-test-client");
    let (status, body) = mcp_post(
        &server,
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "retrieval_add_evidence",
            "arguments": evidence(&task, "survey.example.org", "2025-03-02", "supports")}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(message(&body)["result"]["isError"], false, "{body}");
    // GraphQL.
    let added = gql(
        addr,
        &writer,
        "mutation($t: ID!) { addEvidence(taskId: $t, input: {source: \"coast.example.org\",
            publishDate: \"2025-03-03\", sourceType: GOVERNMENT, content: \"coast\", stance: SUPPORTS})
            { sessionVersion } }",
        json!({"t": task}),
    );
    assert_eq!(added["addEvidence"]["sessionVersion"], 4);

    let expected = [
        "task_opened",
        "evidence_added",
        "evidence_added",
        "evidence_added",
    ]
    .map(|kind| (kind.to_owned(), "wes".to_owned()));
    assert_eq!(actors(addr, &writer, &task), expected);
    // The same through the task's events resource, and one event by seq.
    let uri = format!("ledger://tasks/{task}/events");
    let (status, read) = stateless(
        &server,
        &[("Authorization", &auth)],
        3,
        "resources/read",
        json!({"uri": uri}),
    );
    assert_eq!(status, 200, "{read}");
    let trail: Value =
        serde_json::from_str(read["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    let events = trail["events"].as_array().unwrap();
    assert_eq!(events.len(), 4, "{trail}");
    assert!(events.iter().all(|e| e["actor"] == "wes"), "{trail}");
    let last = gql(addr, &writer, "{ event(seq: 3) { actor kind } }", json!({}));
    assert_eq!(
        last["event"],
        json!({"actor": "wes", "kind": "evidence_added"})
    );
}

#[test]
fn an_auditor_reads_everything_and_writes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let auditor = add_token(data.path(), "aud", "auditor");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let auth = bearer(&auditor);
    let task = open_task(addr, &admin, "Does the sea level rise?");
    let reply = call(
        addr,
        &admin,
        "retrieval_add_evidence",
        evidence(&task, "tide-office.example.org", "2025-03-01", "supports"),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let size = ledger_size(addr);
    assert_eq!(size, 2);

    // Reads: the task on every surface, a read-only tool, the metrics and the export.
    let session = get(addr, &auditor, &format!("/v1/sessions/{task}"));
    assert_eq!(session.status, 200, "{}", session.text());
    assert_eq!(session.json()["session_version"], 2);
    let state = gql(
        addr,
        &auditor,
        "query($t: ID!) { task(id: $t) { question sessionVersion evidence { evidenceId } } }",
        json!({"t": task}),
    );
    assert_eq!(state["task"]["sessionVersion"], 2);
    assert_eq!(state["task"]["evidence"], json!([{"evidenceId": "ev-1"}]));
    let (status, read) = stateless(
        &server,
        &[("Authorization", &auth)],
        1,
        "resources/read",
        json!({"uri": format!("ledger://tasks/{task}/state")}),
    );
    assert_eq!(status, 200, "{read}");
    assert!(
        read["result"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("tide-office.example.org")),
        "{read}"
    );
    let summary = call(
        addr,
        &auditor,
        "research_summarize_state",
        json!({"task_id": task}),
    );
    assert_eq!(summary.status, 200, "{}", summary.text());
    let metrics = get(addr, &auditor, "/metrics");
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        metrics.header("content-type")
    );
    let text = metrics.text();
    assert!(text.lines().any(|l| l.starts_with("# TYPE ")), "{text}");
    assert!(
        text.lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .all(|l| l
                .rsplit_once(' ')
                .is_some_and(|(_, v)| v.parse::<f64>().is_ok())),
        "{text}"
    );
    let export = get(addr, &auditor, "/v1/export?all=true");
    assert_eq!(export.status, 200, "{}", export.text());
    assert_eq!(export.json()["events"].as_array().map(Vec::len), Some(2));

    // Writes, on every surface, each refused as forbidden.
    for (name, arguments) in [
        ("research_open_task", json!({"question": "Is it?"})),
        (
            "retrieval_add_evidence",
            evidence(&task, "survey.example.org", "2025-03-02", "opposes"),
        ),
        ("research_close_task", json!({"task_id": task})),
    ] {
        assert_refused(
            &call(addr, &auditor, name, arguments.clone()),
            403,
            "forbidden",
        );
        let (status, answer) = stateless(
            &server,
            &[("Authorization", &auth)],
            2,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        );
        assert_eq!(status, 200, "{answer}");
        assert_tool_refused(&answer, "forbidden");
    }
    let session = open_session(&server, &[("Authorization", &auth)], "auditor-client");
    let (_, body) = mcp_post(
        &server,
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "synthesis_screen_evidence",
            "arguments": {"task_id": task, "decisions": [{"evidence_id": "ev-1", "adopt": true}]}}}),
    );
    assert_tool_refused(&message(&body), "forbidden");
    for mutation in [
        "mutation { openTask(input: {question: \"Is it?\"}) { taskId } }",
        "mutation($t: ID!) { closeTask(taskId: $t) { sessionVersion } }",
        "mutation($t: ID!) { screenEvidence(taskId: $t, decisions: [{evidenceId: \"ev-1\", adopt: true}]) { sessionVersion } }",
    ] {
        let error = gql_error(addr, &auditor, mutation, json!({"t": task}));
        assert_eq!(error["extensions"]["code"], "FORBIDDEN", "{error}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("writer")),
            "{error}"
        );
    }
    // Nor may an auditor manage tools or tokens.
    let contract = kb_contract("kb_search", "http://127.0.0.1:9/search", 1000);
    let reply = send(
        addr,
        "POST",
        "/v1/tools/register",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        super::external::register_body(&contract).as_bytes(),
    );
    assert_refused(&reply, 403, "forbidden");
    assert_refused(&get(addr, &auditor, "/v1/tokens"), 403, "forbidden");
    assert_eq!(ledger_size(addr), size);
}

#[test]
fn a_writer_can_neither_decide_a_conflict_nor_register_a_tool() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let writer = add_token(data.path(), "wes", "writer");
    let reviewer = add_token(data.path(), "rey", "reviewer");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;

    // Two sources of equal authority a few days apart disagree: the rules leave it to a person.
    let task = open_task(addr, &writer, "Does the sea level rise?");
    for (source, date, stance) in [
        ("tide-office.example.org", "2025-03-01", "supports"),
        ("survey.example.org", "2025-03-05", "opposes"),
    ] {
        let reply = call(
            addr,
            &writer,
            "retrieval_add_evidence",
            evidence(&task, source, date, stance),
        );
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let screen = json!({"task_id": task, "decisions": [
        {"evidence_id": "ev-1", "adopt": true}, {"evidence_id": "ev-2", "adopt": true}]});
    assert_eq!(
        call(addr, &writer, "synthesis_screen_evidence", screen).status,
        200
    );
    let resolved = call(
        addr,
        &writer,
        "evaluation_conflict_resolution",
        json!({"task_id": task}),
    );
    assert_eq!(resolved.status, 200, "{}", resolved.text());
    let pending = gql(
        addr,
        &writer,
        "query($t: ID!) { task(id: $t) { conflicts { conflictId tier } } }",
        json!({"t": task}),
    );
    assert_eq!(
        pending["task"]["conflicts"],
        json!([{"conflictId": "cf-1", "tier": "PENDING"}])
    );
    let size = ledger_size(addr);

    // A writer's decision is refused on every surface.
    let decision = json!({"task_id": task, "conflict_id": "cf-1", "winner": "supports",
                          "reason": "the tide gauges are primary data"});
    assert_refused(
        &call(
            addr,
            &writer,
            "evaluation_resolve_conflict",
            decision.clone(),
        ),
        403,
        "forbidden",
    );
    let (_, answer) = stateless(
        &server,
        &[("Authorization", &bearer(&writer))],
        1,
        "tools/call",
        json!({"name": "evaluation_resolve_conflict", "arguments": decision}),
    );
    assert_tool_refused(&answer, "forbidden");
    const RESOLVE: &str = "mutation($t: ID!) { resolveConflict(taskId: $t, conflictId: \"cf-1\",
        winner: SUPPORTS, reason: \"the tide gauges are primary data\") { sessionVersion } }";
    let error = gql_error(addr, &writer, RESOLVE, json!({"t": task}));
    assert_eq!(error["extensions"]["code"], "FORBIDDEN", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("reviewer")),
        "{error}"
    );
    assert_eq!(ledger_size(addr), size);
    // A reviewer's is recorded, under the reviewer's name.
    gql(addr, &reviewer, RESOLVE, json!({"t": task}));
    assert_eq!(ledger_size(addr), size + 1);
    let last = actors(addr, &reviewer, &task).pop().unwrap();
    assert_eq!(last.1, "rey", "{last:?}");

    // Tools are registered and removed by admins only.
    let contract = kb_contract("kb_search", "http://127.0.0.1:9/search", 1000);
    for token in [&writer, &reviewer] {
        let auth = bearer(token);
        let reply = send(
            addr,
            "POST",
            "/v1/tools/register",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            super::external::register_body(&contract).as_bytes(),
        );
        assert_refused(&reply, 403, "forbidden");
    }
    assert!(!data.path().join("contracts/tools/kb_search.yaml").exists());
    let auth = bearer(&admin);
    let reply = send(
        addr,
        "POST",
        "/v1/tools/register",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        super::external::register_body(&contract).as_bytes(),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    let reply = send(
        addr,
        "DELETE",
        "/v1/tools/kb_search",
        &[("Authorization", &bearer(&writer))],
        b"",
    );
    assert_refused(&reply, 403, "forbidden");
    let reply = send(
        addr,
        "DELETE",
        "/v1/tools/kb_search",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[test]
fn tokens_are_revoked_at_once_and_managed_through_the_running_server() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    assert_eq!(get(addr, &writer, "/metrics").status, 200);

    // Revoked on the file while the server runs: refused on the very next request.
    let out = run(data.path(), &["token", "revoke", "wes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_refused(&get(addr, &writer, "/metrics"), 401, "unauthenticated");
    assert_refused(
        &call(
            addr,
            &writer,
            "research_open_task",
            json!({"question": "Is it?"}),
        ),
        401,
        "unauthenticated",
    );

    // Through the server, from a directory that holds nothing.
    let elsewhere = tempfile::tempdir().unwrap();
    let url = format!("http://{addr}");
    let remote = |args: &[&str], token: &str| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--server", &url, "--token", token]);
        run(elsewhere.path(), &all)
    };
    let out = remote(&["token", "add", "sam", "--role", "writer"], &admin);
    assert!(out.status.success(), "{}", stderr(&out));
    let sam = stdout(&out).trim().to_owned();
    assert!(is_token(&sam), "{sam:?}");
    assert_eq!(get(addr, &sam, "/metrics").status, 200);
    let task = open_task(addr, &sam, "Is it?");
    assert_eq!(actors(addr, &sam, &task)[0].1, "sam");

    let out = remote(&["token", "list", "--json"], &admin);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = stdout(&out);
    assert!(
        !listed.contains(&sam) && !listed.contains(&admin),
        "{listed}"
    );
    let list: Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<(&str, &str, bool)> = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap(),
                t["role"].as_str().unwrap(),
                t["revoked_at"].is_null(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("ada", "admin", true),
            ("wes", "writer", false),
            ("sam", "writer", true)
        ]
    );
    // The server and token may come from the environment.
    let out = run_with_env(
        elsewhere.path(),
        &["token", "list"],
        &[
            ("RESEARCH_LEDGER_SERVER", &url),
            ("RESEARCH_LEDGER_TOKEN", &admin),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sam"), "{}", stdout(&out));

    // A writer's token does not manage tokens.
    let out = remote(&["token", "add", "eve", "--role", "admin"], &sam);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stdout(&out).trim().is_empty(), "{}", stdout(&out));
    assert!(stderr(&out).contains("403"), "{}", stderr(&out));
    assert_refused(&get(addr, &sam, "/v1/tokens"), 403, "forbidden");
    let out = remote(&["token", "revoke", "ada"], &sam);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(get(addr, &admin, "/v1/tokens").status, 200);

    let out = remote(&["token", "revoke", "sam"], &admin);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_refused(&get(addr, &sam, "/metrics"), 401, "unauthenticated");
    // All of it happened in the server's data directory.
    assert!(!elsewhere.path().join("tokens.json").exists());
    let file = crate::server::tokens_text(data.path()).unwrap();
    assert!(file.contains("\"sam\"") && !file.contains(&sam), "{file}");
}

/// Reads a WebSocket until it closes; returns the close frame's code and reason. Fails the
/// test when the server acknowledges the connection instead.
fn closed(socket: &mut WebSocket<TcpStream>) -> (u16, String) {
    loop {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => {
                return (u16::from(frame.code), frame.reason.as_str().to_owned());
            }
            Ok(Message::Close(None)) => return (1005, String::new()),
            Ok(Message::Text(text)) => {
                let message: Value = serde_json::from_str(text.as_str()).unwrap();
                assert_ne!(message["type"], "connection_ack", "{message}");
            }
            Ok(_) => {}
            Err(e) => panic!("the socket failed before it was closed: {e}"),
        }
    }
}

#[test]
fn a_graphql_websocket_authenticates_in_its_connection_init() {
    let data = tempfile::tempdir().unwrap();
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let auth = bearer(&writer);

    // The token in connection_init, as browser clients send it: the holder is the actor.
    let mut socket = connect(addr, &[]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {"Authorization": auth}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    ws_send(
        &mut socket,
        json!({"id": "open", "type": "subscribe", "payload": {
            "query": "mutation { openTask(input: {question: \"Is it?\"}) { taskId } }"}}),
    );
    let answer = receive(&mut socket);
    assert_eq!(answer["type"], "next", "{answer}");
    assert!(answer["payload"].get("errors").is_none(), "{answer}");
    let task = answer["payload"]["data"]["openTask"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(actors(addr, &writer, &task)[0].1, "wes");
    drop(socket);

    // The token in the handshake's header works as well.
    let mut socket = connect(addr, &[("Authorization", &auth)]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    drop(socket);

    // A wrong token, a malformed one, or none, is refused before anything runs.
    let unknown = format!("Bearer rl_{}", "0".repeat(64));
    for (payload, says) in [
        (
            json!({"Authorization": unknown}),
            "not known or was revoked",
        ),
        (
            json!({"Authorization": format!("Basic {writer}")}),
            "access token",
        ),
        (json!({}), "access token"),
    ] {
        let mut socket = connect(addr, &[]).unwrap();
        ws_send(
            &mut socket,
            json!({"type": "connection_init", "payload": payload}),
        );
        let (code, reason) = closed(&mut socket);
        assert_ne!(code, 1000, "{payload}: {reason}");
        assert!(reason.contains(says), "{payload}: {code} {reason}");
    }
    // A malformed header on the handshake is refused by HTTP.
    match connect(addr, &[("Authorization", "Bearer")]) {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a malformed Authorization header opened a WebSocket"),
    }
    assert_eq!(ledger_size(addr), 1);
}

#[test]
fn beyond_loopback_the_server_needs_tokens_and_the_names_it_is_reached_by() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let out = run(data.path(), &["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("needs --allowed-host"),
        "{}",
        stderr(&out)
    );

    // Plain HTTP beyond loopback only behind a proxy that terminates TLS.
    let out = run(
        data.path(),
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--allowed-host",
            "example.org",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("--behind-proxy"), "{}", stderr(&out));
    // The flag's former name still joins the one list.
    let server = Server::start_on(
        data.path(),
        "0.0.0.0:0",
        &["--mcp-allowed-host", "example.org", "--behind-proxy"],
    );
    let addr = server.addr;
    let (status, health) = get_json(addr, "/health");
    assert_eq!((status, &health["status"]), (200, &json!("ok")), "{health}");
    assert_refused(
        &send(addr, "GET", "/metrics", &[], b""),
        401,
        "unauthenticated",
    );
    assert_eq!(get(addr, &admin, "/metrics").status, 200);
    let auth = bearer(&admin);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "remote", "version": "1"}},
    })
    .to_string();
    // The MCP endpoint answers to loopback and to the allowed name, and to no other.
    for (host, status) in [
        (addr.to_string(), 200),
        ("example.org".to_owned(), 200),
        (format!("example.org:{}", addr.port()), 200),
        ("rebound.example".to_owned(), 403),
    ] {
        let raw = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAuthorization: {auth}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n{initialize}",
            initialize.len()
        );
        let reply = super::server::exchange(addr, raw.as_bytes());
        assert_eq!(reply.status, status, "Host {host}: {}", reply.text());
    }
    let status = server.stop();
    assert!(status.success(), "{status:?}");
}
