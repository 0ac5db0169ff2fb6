//! The MCP bridge through the spawned binary, spoken to as raw JSON-RPC: `research-ledger mcp`
//! on stdio (only protocol on stdout, exit when stdin closes, the client's name as the actor)
//! and `/mcp` on `serve` (the Host and Origin checks, both eras). The full workflow through
//! the official SDK is in `tests/python`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::server::{Server, request};

/// A `research-ledger mcp` child spoken to line by line.
struct StdioServer {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl StdioServer {
    fn start(data: &std::path::Path) -> StdioServer {
        let mut command = Command::new(env!("CARGO_BIN_EXE_research-ledger"));
        let mut child = crate::server::with_storage(&mut command, data)
            .arg("--data-dir")
            .arg(data)
            .arg("mcp")
            .env_remove("RESEARCH_LEDGER_DATA_DIR")
            .env("RESEARCH_LEDGER_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("research-ledger mcp starts");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        StdioServer {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").expect("write");
        stdin.flush().expect("flush");
    }

    /// The next message on stdout; every line must be one JSON-RPC message.
    fn next(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read");
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line:?}"));
        assert_eq!(value["jsonrpc"], "2.0", "{value}");
        value
    }

    /// Sends a request and returns its response, skipping notifications.
    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.next();
            if message["id"] == id {
                return message;
            }
        }
    }
}

fn initialize(mcp: &mut StdioServer, client: &str) -> Value {
    let init = mcp.call(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": client, "version": "1.0"},
        }),
    );
    mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    init
}

/// A message on stdio is bounded as a request over HTTP is (4 MiB): one line longer is read no
/// further, dropped with an error in the log, and never answered; the next line is served, and
/// so is a message just under the bound.
#[test]
fn mcp_on_stdio_drops_a_message_past_the_request_bound_and_serves_the_next() {
    let data = tempfile::tempdir().unwrap();
    let mut mcp = StdioServer::start(data.path());
    initialize(&mut mcp, "stdio-bound-client");
    let request = |id: u64, bytes: usize| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "research_open_task",
                          "arguments": {"question": "q".repeat(bytes)}}})
    };
    let bound = mcp_bridge::BridgeOptions::default().request_body_bytes_max;
    mcp.send(&request(2, bound + 1));
    mcp.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
    loop {
        let message = mcp.next();
        assert_ne!(
            message["id"], 2,
            "the dropped message was answered: {message}"
        );
        if message["id"] == 3 {
            assert_eq!(message["result"], json!({}), "{message}");
            break;
        }
    }
    // Under the bound, the tool itself refuses the question's length: an answer, to id 4.
    let refused = mcp.call(4, "tools/call", request(4, bound - 1024)["params"].clone());
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(
        refused["result"]["structuredContent"]["limit"],
        "question_chars_max"
    );
    drop(mcp.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut mcp.stdout, &mut rest).unwrap();
    assert!(
        rest.lines().all(|l| !l.contains("\"id\":2")),
        "the dropped message was answered: {rest}"
    );
    let status = mcp.child.wait().unwrap();
    assert!(status.success(), "{status}");
    let mut err = String::new();
    if let Some(mut stderr) = mcp.child.stderr.take() {
        std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    }
    assert!(err.contains("exceeded the maximum line length"), "{err}");
}

#[test]
fn mcp_on_stdio_speaks_only_protocol_records_the_client_and_exits_when_stdin_closes() {
    let data = tempfile::tempdir().unwrap();
    let mut mcp = StdioServer::start(data.path());
    let init = initialize(&mut mcp, "stdio-test-client");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "research-ledger");
    let capabilities = &init["result"]["capabilities"];
    for capability in ["tools", "resources", "prompts", "completions"] {
        assert!(capabilities[capability].is_object(), "{capability}: {init}");
    }
    assert_eq!(capabilities["resources"]["subscribe"], true);

    let tools = mcp.call(2, "tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let specs = service::tool_specs();
    let mut expected: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    expected.sort_unstable();
    let mut listed = names.clone();
    listed.sort_unstable();
    assert_eq!(listed, expected);

    // An unknown tool is a protocol error; bad arguments are a tool result with isError.
    let unknown = mcp.call(3, "tools/call", json!({"name": "nope", "arguments": {}}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let bad = mcp.call(
        4,
        "tools/call",
        json!({"name": "research_open_task", "arguments": {"question": 7}}),
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert_eq!(
        bad["result"]["structuredContent"]["error"],
        "invalid_argument"
    );

    let opened = mcp.call(
        5,
        "tools/call",
        json!({"name": "research_open_task", "arguments": {"question": "Is the lake warmer?"}}),
    );
    assert_eq!(opened["result"]["isError"], false, "{opened}");
    let task = opened["result"]["structuredContent"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = mcp.call(
        6,
        "resources/read",
        json!({"uri": format!("ledger://tasks/{task}/events")}),
    );
    let trail: Value =
        serde_json::from_str(events["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(trail["events"][0]["actor"], "stdio-test-client");
    let missing = mcp.call(
        7,
        "resources/read",
        json!({"uri": "ledger://tasks/nope/state"}),
    );
    assert_eq!(missing["error"]["code"], -32002, "{missing}");

    // Closing stdin ends the server, cleanly.
    drop(mcp.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut mcp.stdout, &mut rest).unwrap();
    assert!(
        rest.trim().is_empty(),
        "stdout after the last response: {rest:?}"
    );
    let status = mcp.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut mcp.child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("INFO"), "logs go to stderr: {err:?}");
    // The ledger it leaves verifies.
    assert!(super::run(data.path(), &["verify"]).status.success());
}

pub(crate) fn post(server: &Server, headers: &[(&str, &str)], body: &Value) -> (u16, String) {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    let (status, body) = request(
        server.addr,
        "POST",
        "/mcp",
        &all,
        body.to_string().as_bytes(),
    );
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The JSON-RPC message in a response body, plain or as the data of a server-sent event.
pub(crate) fn message(body: &str) -> Value {
    let text = body
        .lines()
        .find_map(|l| {
            l.strip_prefix("data:")
                .map(str::trim)
                .filter(|d| !d.is_empty())
        })
        .unwrap_or(body);
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {body:?}"))
}

/// One request of the 2026-07-28 era, without a session: the request names its protocol
/// version and client in `_meta`, and its method (and tool or resource) in headers, to which
/// `headers` are added. Returns the HTTP status and the JSON-RPC message.
pub(crate) fn stateless(
    server: &Server,
    headers: &[(&str, &str)],
    id: u64,
    method: &str,
    mut params: Value,
) -> (u16, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "stateless-test-client", "version": "1"},
    });
    let name = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut all = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ];
    if let Some(name) = &name {
        all.push(("Mcp-Name", name));
    }
    all.extend_from_slice(headers);
    let (status, body) = post(
        server,
        &all,
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    );
    (status, message(&body))
}

/// A 2025-11-25 session, initialized as `client` with `headers` on each request; returns the
/// session's id.
pub(crate) fn open_session(server: &Server, headers: &[(&str, &str)], client: &str) -> String {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": client, "version": "1"}},
    });
    let reply = super::server::send(
        server.addr,
        "POST",
        "/mcp",
        &all,
        initialize.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let session = reply
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session: {}", reply.text()))
        .to_owned();
    all.push(("Mcp-Session-Id", &session));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = super::server::send(
        server.addr,
        "POST",
        "/mcp",
        &all,
        initialized.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 202, "{}", reply.text());
    session
}

#[test]
fn mcp_over_http_serves_both_eras_and_checks_host_and_origin() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "http-test", "version": "1"}},
    });

    // 2025-11-25: initialize opens a session.
    let (status, body) = post(&server, &[], &initialize);
    assert_eq!(status, 200, "{body}");
    assert_eq!(message(&body)["result"]["protocolVersion"], "2025-11-25");

    // 2026-07-28: no session; the request says who it is in _meta.
    let discover = json!({
        "jsonrpc": "2.0", "id": 2, "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "http-test", "version": "1"},
        }},
    });
    let (status, body) = post(
        &server,
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "server/discover"),
        ],
        &discover,
    );
    assert_eq!(status, 200, "{body}");
    let found = message(&body);
    assert!(
        found["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|x| x == "2026-07-28")),
        "{found}"
    );

    // A browser page from elsewhere is refused; one on this machine is not.
    let (status, _) = post(
        &server,
        &[("Origin", "https://attacker.example")],
        &initialize,
    );
    assert_eq!(status, 403);
    let (status, _) = post(&server, &[("Origin", "http://localhost:5173")], &initialize);
    assert_eq!(status, 200);

    // A name that is not this machine (DNS rebinding) is refused.
    let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = initialize.to_string();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: rebound.example:7878\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut head = String::new();
    BufReader::new(stream).read_line(&mut head).unwrap();
    assert!(head.contains(" 403 "), "{head}");

    let status = server.stop();
    assert!(status.success(), "{status:?}");
}

#[test]
fn an_mcp_client_hears_when_a_contract_file_appears_and_sees_the_new_tool() {
    let data = tempfile::tempdir().unwrap();
    let mut mcp = StdioServer::start(data.path());
    // Reads block: a server that never announces the change is killed, so the test fails
    // rather than hangs.
    let pid = mcp.child.id();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    let init = initialize(&mut mcp, "reload-test");
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    let before = mcp.call(2, "tools/list", json!({}));
    let count = before["result"]["tools"].as_array().unwrap().len();

    // Dropped into the contracts folder; over a database, pushed from a folder of its own.
    let pushed = tempfile::tempdir().unwrap();
    let contracts = if super::server::on_postgres() {
        pushed.path().to_path_buf()
    } else {
        data.path().join("contracts")
    };
    std::fs::create_dir_all(&contracts).unwrap();
    std::fs::write(
        contracts.join("team_kb.yaml"),
        r#"name: team_kb
description: Searches the team's knowledge base.
endpoint: http://127.0.0.1:9/search
contract_version: "1.0"
timeout_ms: 1000
input_schema:
  query: { type: string, semantic_tag: search_query }
output_schema:
  answer: { type: string, semantic_tag: evidence_content }
"#,
    )
    .unwrap();
    super::server::place_contracts(data.path(), &contracts);
    loop {
        let message = mcp.next();
        if message["method"] == "notifications/tools/list_changed" {
            break;
        }
    }
    let after = mcp.call(3, "tools/list", json!({}));
    let tools = after["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), count + 1, "{after}");
    assert!(tools.iter().any(|t| t["name"] == "team_kb"), "{after}");

    drop(mcp.stdin.take());
    assert!(mcp.child.wait().unwrap().success());
    let _ = done.send(());
    watchdog.join().unwrap();
}
