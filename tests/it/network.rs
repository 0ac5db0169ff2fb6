//! The server as it stands on a network, end to end on loopback: the one `Host` allow-list,
//! streams that outlive their token, slow and idle clients, connection bounds, replies that do
//! not grow with the request, the rule that revoking the last token never reopens the server,
//! contract names, file modes and TLS.

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::Message;

use super::auth::{add_token, bearer};
use super::external::{kb_contract, register_body};
use super::graphql::{connect as ws_connect, receive, send as ws_send};
use super::mcp::{open_session, post as mcp_post, stateless};
use super::server::{
    Header, Response, Server, connect, connect_served, exchange, exchange_on, ledger_size, send,
};
use super::{run, stderr, stdout};

const JSON: (&str, &str) = ("Content-Type", "application/json");

/// A request with the `Host` and `Origin` a rebound page would send: its own name, at the
/// server's port.
fn rebound(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let host = format!("attacker.example:{}", addr.port());
    let mut raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str("\r\n");
    raw.push_str(body);
    exchange(addr, raw.as_bytes())
}

/// A request: method, path, headers and body.
type Route = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    String,
);

/// Every family of routes, as a rebound page would call it.
fn route_families() -> Vec<Route> {
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "rebinder", "version": "1"}},
    });
    let mutation =
        json!({"query": "mutation { openTask(input: {question: \"Rebound?\"}) { taskId } }"});
    let call = json!({"name": "research_open_task",
                      "arguments": {"question": "Rebound?", "research_date": "2025-06-30"}});
    let contract = register_body(&kb_contract("kb_search", "http://127.0.0.1:9/search", 1000));
    let websocket = vec![
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Protocol", "graphql-transport-ws"),
    ];
    vec![
        ("GET", "/health", vec![], String::new()),
        ("GET", "/metrics", vec![], String::new()),
        ("GET", "/", vec![], String::new()),
        ("GET", "/checkpoint", vec![], String::new()),
        (
            "POST",
            "/mcp",
            vec![JSON, ("Accept", "application/json, text/event-stream")],
            initialize.to_string(),
        ),
        ("GET", "/graphql", vec![], String::new()),
        ("POST", "/graphql", vec![JSON], mutation.to_string()),
        ("GET", "/graphql/ws", websocket, String::new()),
        ("GET", "/v1/tools/list", vec![], String::new()),
        ("POST", "/v1/tools/call", vec![JSON], call.to_string()),
        ("POST", "/v1/tools/register", vec![JSON], contract),
        (
            "POST",
            "/v1/tokens",
            vec![JSON],
            json!({"name": "rebinder", "role": "admin"}).to_string(),
        ),
        ("GET", "/v1/export?all=true", vec![], String::new()),
        ("GET", "/v1/verify", vec![], String::new()),
        ("GET", "/no/such/route", vec![], String::new()),
    ]
}

#[test]
fn a_rebound_page_reaches_no_route_and_the_names_given_are_served() {
    let data = tempfile::tempdir().unwrap();
    // Without tokens, on loopback: every caller the server serves is the local admin.
    let server = Server::start(data.path(), &["--allowed-host", "ledger.test"]);
    let addr = server.addr;
    for (method, path, headers, body) in route_families() {
        let reply = rebound(addr, method, path, &headers, &body);
        assert_eq!(reply.status, 403, "{method} {path}: {}", reply.text());
        // `/mcp` says it in JSON-RPC, with the same structured error as its data.
        let error = match path {
            "/mcp" => reply.json()["error"]["data"].clone(),
            _ => reply.json(),
        };
        assert_eq!(error["error"], "forbidden", "{method} {path}: {error}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("attacker.example")),
            "{method} {path}: {error}"
        );
    }
    // Nothing was written, no token made, no tool registered.
    assert_eq!(ledger_size(addr), 0);
    assert!(crate::server::tokens_text(data.path()).is_none());
    assert!(!data.path().join("contracts/tools/kb_search.yaml").exists());

    // A request without any Host at all is refused the same way.
    let reply = exchange(addr, b"GET /health HTTP/1.0\r\n\r\n");
    assert_eq!(reply.status, 403, "{}", reply.text());

    // The loopback names, and the name given, are served on any port.
    for host in [
        addr.to_string(),
        format!("localhost:{}", addr.port()),
        "ledger.test".to_owned(),
        format!("LEDGER.test:{}", addr.port()),
    ] {
        let raw = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let reply = exchange(addr, raw.as_bytes());
        assert_eq!(reply.status, 200, "Host {host}: {}", reply.text());
    }
    let status = server.stop();
    assert!(status.success(), "{status:?}");
}

/// The `Access-Control-*` headers of a response: none, where nothing is granted to a page of
/// another origin.
fn cors_headers(reply: &Response) -> Vec<String> {
    reply
        .head
        .lines()
        .skip(1)
        .filter(|line| line.to_ascii_lowercase().starts_with("access-control-"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_page_of_another_origin_is_granted_a_preflight_or_a_cross_origin_read() {
    let data = tempfile::tempdir().unwrap();
    // Tokenless on loopback, the most open the server is, with an origin named for MCP.
    let server = Server::start(data.path(), &["--mcp-allowed-origin", "http://app.example"]);
    let addr = server.addr;
    let session = open_session(&server, &[], "cors-client");
    let origins = [
        "http://attacker.example",
        "http://app.example",
        "http://localhost:5173",
        "null",
    ];
    let paths = [
        "/v1/tools/call",
        "/v1/tools/register",
        "/v1/tools/list",
        "/v1/tokens",
        "/v1/export?all=true",
        "/v1/verify",
        "/v1/checkpoints",
        "/mcp",
        "/graphql",
        "/graphql/ws",
        "/checkpoint",
        "/health",
        "/metrics",
        "/",
    ];
    for origin in origins {
        for path in paths {
            for method in ["POST", "GET", "DELETE"] {
                let reply = send(
                    addr,
                    "OPTIONS",
                    path,
                    &[
                        ("Origin", origin),
                        ("Access-Control-Request-Method", method),
                        (
                            "Access-Control-Request-Headers",
                            "content-type, authorization, mcp-session-id, mcp-protocol-version",
                        ),
                    ],
                    b"",
                );
                assert!(
                    cors_headers(&reply).is_empty(),
                    "a preflight for {method} {path} from {origin} was granted: {}",
                    reply.head
                );
                assert!(
                    !(200..300).contains(&reply.status),
                    "a preflight for {method} {path} from {origin} was answered {}",
                    reply.head
                );
            }
        }
        // Requests a page may send without asking first, and the ones it would have to ask
        // for, sent anyway: whatever is answered, no origin is told it may read it.
        let initialize = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "page", "version": "1"}},
        })
        .to_string();
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
        let query = json!({"query": "{ __typename }"}).to_string();
        let call = json!({"name": "research_open_task",
                          "arguments": {"question": "Cross-origin?", "research_date": "2025-06-30"}})
        .to_string();
        let mcp_accept = ("Accept", "application/json, text/event-stream");
        let requests: Vec<(&str, &str, Vec<Header>, &str)> = vec![
            ("GET", "/v1/tools/list", vec![], ""),
            ("GET", "/checkpoint", vec![], ""),
            ("GET", "/health", vec![], ""),
            ("GET", "/metrics", vec![], ""),
            ("GET", "/graphql", vec![], ""),
            ("GET", "/graphql?query=%7B__typename%7D", vec![], ""),
            ("POST", "/graphql", vec![JSON], &query),
            (
                "POST",
                "/graphql",
                vec![("Content-Type", "text/plain")],
                &query,
            ),
            ("POST", "/v1/tools/call", vec![JSON], &call),
            (
                "POST",
                "/v1/tools/call",
                vec![("Content-Type", "text/plain")],
                &call,
            ),
            ("POST", "/mcp", vec![JSON, mcp_accept], &initialize),
            (
                "POST",
                "/mcp",
                vec![JSON, mcp_accept, ("Mcp-Session-Id", &session)],
                &list,
            ),
        ];
        for (method, path, mut headers, body) in requests {
            headers.push(("Origin", origin));
            let reply = send(addr, method, path, &headers, body.as_bytes());
            assert!(
                cors_headers(&reply).is_empty(),
                "{method} {path} from {origin} was shared with the page: {}",
                reply.head
            );
        }
    }
}

/// The close code of a socket the server closes, waiting at most `within`; panics when a
/// message other than a close comes, or nothing.
fn closed_within(socket: &mut tungstenite::WebSocket<TcpStream>, within: Duration) -> u16 {
    socket.get_mut().set_read_timeout(Some(within)).unwrap();
    loop {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => return u16::from(frame.code),
            Ok(Message::Close(None)) => return 1005,
            Ok(Message::Ping(_) | Message::Pong(_)) => {}
            Ok(other) => panic!("a message instead of the close: {other:?}"),
            Err(e) => panic!("no close within {within:?}: {e}"),
        }
    }
}

fn open_task_mutation(id: &str) -> Value {
    json!({"id": id, "type": "subscribe", "payload": {
        "query": "mutation { openTask(input: {question: \"Is it?\"}) { taskId } }"}})
}

#[test]
fn a_websocket_does_not_outlive_its_token() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;

    // A writer's socket writes, its token is revoked: the socket is closed within a second or
    // so, though the client sends nothing.
    let mut socket = ws_connect(addr, &[]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {"Authorization": bearer(&writer)}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    ws_send(&mut socket, open_task_mutation("one"));
    let answer = receive(&mut socket);
    assert!(answer["payload"].get("errors").is_none(), "{answer}");
    assert_eq!(receive(&mut socket)["type"], "complete");
    let size = ledger_size(addr);
    assert_eq!(size, 1);
    let out = run(data.path(), &["token", "revoke", "wes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let revoked = Instant::now();
    assert_eq!(closed_within(&mut socket, Duration::from_secs(5)), 4401);
    assert!(
        revoked.elapsed() < Duration::from_secs(3),
        "closed {:?} after the revocation",
        revoked.elapsed()
    );
    let _ = socket.send(Message::text(open_task_mutation("two").to_string()));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ledger_size(addr), size);

    // A mutation sent at once after a revocation, before any periodic check, is refused: the
    // token is checked on every message.
    let reviewer = add_token(data.path(), "rev", "reviewer");
    let mut socket = ws_connect(addr, &[("Authorization", &bearer(&reviewer))]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    let revoke = send(
        addr,
        "DELETE",
        "/v1/tokens/rev",
        &[("Authorization", &bearer(&admin))],
        b"",
    );
    assert_eq!(revoke.status, 200, "{}", revoke.text());
    ws_send(&mut socket, open_task_mutation("three"));
    assert_eq!(closed_within(&mut socket, Duration::from_secs(5)), 4401);
    assert_eq!(ledger_size(addr), size);
    drop(server);

    // A socket opened before the first token existed loses its local rights when one is made.
    let open = tempfile::tempdir().unwrap();
    let server = Server::start(open.path(), &[]);
    let addr = server.addr;
    let mut socket = ws_connect(addr, &[]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    ws_send(&mut socket, open_task_mutation("local"));
    let answer = receive(&mut socket);
    assert!(answer["payload"].get("errors").is_none(), "{answer}");
    assert_eq!(receive(&mut socket)["type"], "complete");
    add_token(open.path(), "ada", "admin");
    assert_eq!(closed_within(&mut socket, Duration::from_secs(5)), 4401);
    let _ = socket.send(Message::text(open_task_mutation("late").to_string()));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ledger_size(addr), 1);
}

/// Opens the session's event stream (`GET /mcp`) and reads it until it ends; returns how long
/// that took after `then` ran, or panics when it has not ended within `within`.
fn stream_ends_after(
    addr: SocketAddr,
    session: &str,
    headers: &[(&str, &str)],
    then: impl FnOnce(),
    within: Duration,
) -> Duration {
    let mut stream = connect(addr).unwrap();
    let mut raw = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str("\r\n");
    stream.write_all(raw.as_bytes()).unwrap();
    // The head, then nothing more until something happens.
    let mut first = [0u8; 512];
    let n = stream.read(&mut first).unwrap();
    let head = String::from_utf8_lossy(&first[..n]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    then();
    let started = Instant::now();
    stream.set_read_timeout(Some(within)).unwrap();
    let mut rest = Vec::new();
    match stream.read_to_end(&mut rest) {
        Ok(_) => started.elapsed(),
        Err(e) => panic!("the event stream did not end within {within:?}: {e}"),
    }
}

#[test]
fn an_mcp_session_answers_only_its_token_and_streams_end_with_their_caller() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(data.path(), &[]);
    let (ada, wes) = (bearer(&admin), bearer(&writer));
    let session = open_session(&server, &[("Authorization", &ada)], "ada-client");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let (status, _) = mcp_post(
        &server,
        &[("Authorization", &ada), ("Mcp-Session-Id", &session)],
        &list,
    );
    assert_eq!(status, 200);
    // Another holder with the session's id is answered as if there were no such session.
    let (status, body) = mcp_post(
        &server,
        &[("Authorization", &wes), ("Mcp-Session-Id", &session)],
        &list,
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        super::mcp::message(&body)["error"]["data"]["error"],
        "not_found"
    );
    // The stream of a token that is revoked ends.
    let took = stream_ends_after(
        server.addr,
        &session,
        &[("Authorization", &ada)],
        || {
            assert!(
                run(data.path(), &["token", "revoke", "ada"])
                    .status
                    .success()
            )
        },
        Duration::from_secs(10),
    );
    assert!(
        took < Duration::from_secs(3),
        "ended {took:?} after the revocation"
    );
    drop(server);

    // A stream opened before tokens existed stops once one exists.
    let open = tempfile::tempdir().unwrap();
    let server = Server::start(open.path(), &[]);
    let session = open_session(&server, &[], "local-client");
    let took = stream_ends_after(
        server.addr,
        &session,
        &[],
        || drop(add_token(open.path(), "ada", "admin")),
        Duration::from_secs(10),
    );
    assert!(
        took < Duration::from_secs(3),
        "ended {took:?} after the first token"
    );
}

/// Sends the head of a chunked `POST` and then a byte of body every `every`, `chunks` times,
/// and returns the status the server answered (0 when it answered nothing).
fn trickle(addr: SocketAddr, token: Option<&str>, chunks: usize, every: Duration) -> u16 {
    let Ok(mut stream) = connect(addr) else {
        return 0;
    };
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST /v1/tools/call HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n{auth}\r\n"
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return 0;
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    for _ in 0..chunks {
        std::thread::sleep(every);
        // The server may have answered and closed already: what it answered is what counts.
        if stream.write_all(b"1\r\n \r\n").is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn slow_unauthenticated_bodies_hold_nothing_while_a_token_holder_is_served() {
    let data = tempfile::tempdir().unwrap();
    let writer = add_token(data.path(), "wes", "writer");
    let server = Server::start(
        data.path(),
        &["--requests-in-flight-max", "4", "--body-read-secs-max", "2"],
    );
    let addr = server.addr;
    // Ten times as many trickling clients as there are request slots, without a token.
    let tricklers: Vec<_> = (0..40)
        .map(|_| std::thread::spawn(move || trickle(addr, None, 15, Duration::from_millis(200))))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let reply = super::auth::call(
        addr,
        &writer,
        "research_open_task",
        json!({"question": "Served while others trickle?", "research_date": "2025-06-30"}),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let (status, _) = super::server::get_json(addr, "/health");
    assert_eq!(status, 200);
    for trickler in tricklers {
        assert_eq!(trickler.join().unwrap(), 401);
    }
    // A token holder's own body that trickles for longer than body_read_secs_max is refused.
    let writer_token = writer.clone();
    assert_eq!(
        trickle(addr, Some(&writer_token), 12, Duration::from_millis(400)),
        408
    );
    assert_eq!(ledger_size(addr), 1);
}

/// Whether the server closed `stream` within `within` (reads its end rather than time out).
fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn slow_heads_and_idle_connections_are_closed_and_connections_are_bounded() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &[
            "--header-read-secs-max",
            "1",
            "--idle-secs-max",
            "3",
            "--connections-max",
            "6",
            "--connections-per-address-max",
            "6",
        ],
    );
    let addr = server.addr;
    // A head that never ends.
    let mut slow = connect(addr).unwrap();
    slow.write_all(b"POST /v1/tools/call HTTP/1.1\r\nHost: ")
        .unwrap();
    assert!(closed_by_server(&mut slow, Duration::from_secs(5)));
    // A connection idle for longer than the head's bound, but not the idle one, still serves.
    let mut kept = connect_served(addr).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let again = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let reply = exchange_on(kept.try_clone().unwrap(), again.as_bytes()).unwrap();
    assert_eq!(reply.status, 200);
    // One idle past the idle bound is closed.
    kept = connect_served(addr).unwrap();
    assert!(closed_by_server(&mut kept, Duration::from_secs(8)));

    // Six connections open; the seventh is told why it is refused, and closed.
    let held: Vec<TcpStream> = (0..6).map(|_| connect_served(addr).unwrap()).collect();
    let refused = exchange(
        addr,
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["error"], "limit_exceeded");
    assert_eq!(refused.json()["limit"], "connections_max");
    assert_eq!(refused.header("retry-after"), Some("1"));
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let (status, _) = super::server::get_json(addr, "/health");
    assert_eq!(status, 200, "served again once connections closed");
    drop(server);

    // Per address, the same.
    let server = Server::start(data.path(), &["--connections-per-address-max", "2"]);
    let addr = server.addr;
    let held: Vec<TcpStream> = (0..2).map(|_| connect_served(addr).unwrap()).collect();
    let refused = exchange(
        addr,
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["limit"], "connections_per_address_max");
    drop(held);
}

/// The resident memory of a process, in KiB, from `/proc/PID/status`.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmRSS")
}

#[test]
fn a_request_being_handled_or_a_stream_open_is_not_idle() {
    use super::server::{Held, hold};

    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &["--idle-secs-max", "1", "--header-read-secs-max", "1"],
    );
    let addr = server.addr;
    let idle_for = Duration::from_secs(3);
    // The bound is in force: a connection that waits for its next request is closed.
    let mut waiting = connect_served(addr).unwrap();
    assert!(closed_by_server(&mut waiting, idle_for));

    // A request whose body comes after longer than the bound is still being handled.
    let call = json!({"name": "research_open_task",
                      "arguments": {"question": "Handled past the idle bound?",
                                    "research_date": "2025-06-30"}});
    let held = match hold(
        addr,
        "POST",
        "/v1/tools/call",
        &[JSON],
        call.to_string().into_bytes(),
    )
    .unwrap()
    {
        Held::Admitted(request) => request,
        Held::Answered(reply) => panic!("answered at once: {}", reply.head),
    };
    std::thread::sleep(idle_for);
    let reply = held.finish().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());

    // An MCP session's event stream, silent for longer than the bound, still carries what
    // comes after.
    let session = open_session(&server, &[], "idle-stream-client");
    let in_session = [
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe",
                           "params": {"uri": "ledger://tasks"}});
    let (status, body) = mcp_post(&server, &in_session, &subscribe);
    assert_eq!(status, 200, "{body}");
    let mut stream = connect(addr).unwrap();
    stream
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before its head");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    std::thread::sleep(idle_for);
    let open = json!({"name": "research_open_task",
                      "arguments": {"question": "Told after a silence?",
                                    "research_date": "2025-06-30"}});
    let (status, body) = super::server::post_json(addr, "/v1/tools/call", &open);
    assert_eq!(status, 200, "{body}");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let told = b"notifications/resources/updated";
    while !got.windows(told.len()).any(|w| w == told) {
        match stream.read(&mut buf) {
            Ok(0) => panic!("the stream was closed: {}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("nothing came ({e}): {}", String::from_utf8_lossy(&got)),
        }
    }
}

#[test]
fn replies_and_memory_stay_bounded_whatever_the_request() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &["--mcp-sessions-max", "3", "--graphql-websockets-max", "2"],
    );
    let addr = server.addr;
    let pid = server.child.id();
    // Warm up, then measure from there.
    for _ in 0..3 {
        assert_eq!(super::server::get_json(addr, "/health").0, 200);
    }
    let baseline = rss_kib(pid);
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    // 300 KB of fields that do not exist, sixteen at once: one short error each.
    let fields = "nope ".repeat(60_000);
    let huge = json!({"query": format!("{{ {fields} }}")}).to_string();
    let askers: Vec<_> = (0..16)
        .map(|_| {
            let huge = huge.clone();
            std::thread::spawn(move || send(addr, "POST", "/graphql", &[JSON], huge.as_bytes()))
        })
        .collect();
    for asker in askers {
        let reply = asker.join().unwrap();
        assert!(reply.body.len() < 16 * 1024, "{} bytes", reply.body.len());
        let errors = reply.json()["errors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{}", reply.text());
        assert_eq!(errors[0]["extensions"]["code"], "LIMIT_EXCEEDED");
        assert_eq!(
            errors[0]["extensions"]["limit"],
            "graphql_complexity_points_max"
        );
    }
    // Within the document bound, the list of errors is capped, and says so.
    let some = json!({"query": format!("{{ {} }}", "nope ".repeat(400))}).to_string();
    let reply = send(addr, "POST", "/graphql", &[JSON], some.as_bytes());
    let errors = reply.json()["errors"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(errors.len(), 50, "{}", reply.text());
    assert_eq!(errors[49]["extensions"]["limit"], "graphql_errors_max");
    // A message that quotes a long part of the request is cut.
    let long = json!({"query": format!("{{ {} }}", "n".repeat(20_000))}).to_string();
    let reply = send(addr, "POST", "/graphql", &[JSON], long.as_bytes());
    let message = reply.json()["errors"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("more bytes") && message.chars().count() < 1100,
        "{message}"
    );

    // A 3.9 MB task id that does not exist, eight at once: the answer names a part of it.
    let id = "x".repeat(3_900_000);
    let callers: Vec<_> = (0..8)
        .map(|i| {
            let id = id.clone();
            std::thread::spawn(move || {
                let server_addr = addr;
                let body =
                    json!({"name": "research_summarize_state", "arguments": {"task_id": id}});
                let reply = send(
                    server_addr,
                    "POST",
                    "/v1/tools/call",
                    &[JSON],
                    body.to_string().as_bytes(),
                );
                (i, reply)
            })
        })
        .collect();
    for caller in callers {
        let (i, reply) = caller.join().unwrap();
        assert!(
            reply.body.len() < 8 * 1024,
            "{i}: {} bytes",
            reply.body.len()
        );
    }
    let (status, answer) = stateless(
        &server,
        &[],
        9,
        "tools/call",
        json!({"name": "research_summarize_state", "arguments": {"task_id": id}}),
    );
    let text = answer.to_string();
    assert!(text.len() < 8 * 1024, "MCP: {status}, {} bytes", text.len());
    // Nor do the names and values a request should not have held.
    let big = "q".repeat(1_000_000);
    let mut unknown_argument = json!({"question": "Is it?"});
    unknown_argument[&big] = json!(1);
    for (path, body) in [
        (
            "/v1/tools/call",
            json!({"name": "research_open_task", "arguments": unknown_argument}),
        ),
        (
            "/v1/tools/call",
            json!({"name": "research_open_task", &big: 1}),
        ),
        ("/v1/tokens", json!({"name": big, "role": "admin"})),
        ("/v1/tokens", json!({"name": "ok", "role": big})),
        (
            "/graphql",
            json!({"query": format!("{{ tasks({big}: 1) {{ edges {{ cursor }} }} }}")}),
        ),
    ] {
        let reply = send(addr, "POST", path, &[JSON], body.to_string().as_bytes());
        assert!(
            reply.body.len() < 8 * 1024,
            "{path}: {} bytes",
            reply.body.len()
        );
        assert!(
            reply.status >= 400 || path == "/graphql",
            "{path}: {}",
            reply.status
        );
    }
    assert!(crate::server::tokens_text(data.path()).is_none());

    // Nor does anything else MCP names: a resource, a tool, a prompt (in a session, where the
    // name is in the body alone).
    let session = open_session(&server, &[], "namer");
    for (method, params) in [
        (
            "resources/read",
            json!({"uri": format!("ledger://tasks/{id}/state")}),
        ),
        ("tools/call", json!({"name": id, "arguments": {}})),
        ("prompts/get", json!({"name": id, "arguments": {}})),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": 10, "method": method, "params": params});
        let (status, body) = mcp_post(&server, &[("Mcp-Session-Id", &session)], &request);
        assert!(
            body.len() < 8 * 1024,
            "{method}: {status}, {} bytes",
            body.len()
        );
        let answer = super::mcp::message(&body);
        assert!(
            answer.get("error").is_some() || answer["result"]["isError"] == true,
            "{method}: {answer}"
        );
    }
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let grown_mib = (peak.load(std::sync::atomic::Ordering::Relaxed) - baseline) / 1024;
    assert!(grown_mib < 400, "the server grew by {grown_mib} MiB");

    // Sessions past mcp_sessions_max are refused, and say which limit (one is open already).
    for i in 0..2 {
        open_session(&server, &[], &format!("client-{i}"));
    }
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "one-too-many", "version": "1"}},
    });
    let (status, body) = mcp_post(&server, &[], &initialize);
    assert_eq!(status, 503, "{body}");
    let refusal = super::mcp::message(&body);
    assert_eq!(
        refusal["error"]["data"]["error"], "limit_exceeded",
        "{refusal}"
    );
    assert_eq!(
        refusal["error"]["data"]["limit"], "mcp_sessions_max",
        "{refusal}"
    );

    // WebSockets past graphql_websockets_max are refused at the handshake.
    let _first = ws_connect(addr, &[]).unwrap();
    let _second = ws_connect(addr, &[]).unwrap();
    match ws_connect(addr, &[]) {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            let body: Value =
                serde_json::from_slice(response.body().as_deref().unwrap_or_default()).unwrap();
            assert_eq!(
                body["errors"][0]["extensions"]["limit"], "graphql_websockets_max",
                "{body}"
            );
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a third WebSocket opened"),
    }
}

#[test]
fn revoking_the_last_token_never_reopens_the_server() {
    let data = tempfile::tempdir().unwrap();
    add_token(data.path(), "ada", "admin");
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let out = run(data.path(), &["token", "revoke", "ada"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("serves no one"), "{}", stderr(&out));
    // Without a token, on loopback, nothing is served: minting an admin token least of all.
    let reply = send(
        addr,
        "POST",
        "/v1/tokens",
        &[JSON],
        json!({"name": "eve", "role": "admin"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(reply.status, 401, "{}", reply.text());
    assert!(
        reply.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("open-mode")),
        "{}",
        reply.text()
    );
    assert_eq!(send(addr, "GET", "/metrics", &[], b"").status, 401);
    drop(server);
    // A restart does not reopen it either.
    let server = Server::start(data.path(), &[]);
    assert_eq!(send(server.addr, "GET", "/metrics", &[], b"").status, 401);

    // Open mode is an explicit choice, on the data directory only, and not while a token is in
    // force.
    let bob = add_token(data.path(), "bob", "auditor");
    let out = run(data.path(), &["token", "open-mode"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("bob"), "{}", stderr(&out));
    let out = run(
        data.path(),
        &[
            "token",
            "open-mode",
            "--server",
            &format!("http://{}", server.addr),
            "--token",
            &bob,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        run(data.path(), &["token", "revoke", "bob"])
            .status
            .success()
    );
    let out = run(data.path(), &["token", "open-mode"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(send(server.addr, "GET", "/metrics", &[], b"").status, 200);
}

#[test]
fn a_tool_named_like_the_servers_own_files_can_be_registered_and_removed() {
    let data = tempfile::tempdir().unwrap();
    let contracts = data.path().join("contracts");
    std::fs::create_dir_all(&contracts).unwrap();
    let fallbacks = "fallbacks:\n  kb_lookup: research_summarize_state\n";
    std::fs::write(contracts.join("fallbacks.yaml"), fallbacks).unwrap();
    super::server::place_contracts(data.path(), &contracts);
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    for name in ["fallbacks", "semantic-tags"] {
        let contract = kb_contract(name, "http://127.0.0.1:9/search", 1000);
        let reply = send(
            addr,
            "POST",
            "/v1/tools/register",
            &[JSON],
            register_body(&contract).as_bytes(),
        );
        assert_eq!(reply.status, 201, "{name}: {}", reply.text());
        assert!(super::server::registered_contract_kept(data.path(), name));
    }
    assert_eq!(
        std::fs::read_to_string(contracts.join("fallbacks.yaml")).unwrap(),
        fallbacks
    );
    assert!(!contracts.join("semantic-tags.yaml").exists());
    for name in ["fallbacks", "semantic-tags"] {
        let reply = send(addr, "DELETE", &format!("/v1/tools/{name}"), &[], b"");
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
        assert!(!super::server::registered_contract_kept(data.path(), name));
    }
    assert_eq!(
        std::fs::read_to_string(contracts.join("fallbacks.yaml")).unwrap(),
        fallbacks
    );
    let (_, tools) = super::server::get_json(addr, "/v1/tools/list");
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.contains(&"fallbacks"), "{names:?}");
}

#[test]
fn the_data_directory_and_bundles_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let parent = tempfile::tempdir().unwrap();
    let data = parent.path().join("data");
    // Made by the first command that needs it, whatever the umask.
    add_token(&data, "ada", "admin");
    assert_eq!(mode(&data), 0o700);
    // One made open by someone else is closed at the next start.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(&data, &["demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&data), 0o700);
    let bundle = parent.path().join("bundle.json");
    let out = run(
        &data,
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&bundle), 0o600);
}

/// A certificate authority and a server certificate it signed for `localhost` and 127.0.0.1,
/// written to `dir` as `cert.pem` and `key.pem`; returns the authority's certificate (DER).
fn certify(dir: &std::path::Path) -> Vec<u8> {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "research-ledger test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    // Written beside and renamed, as a certificate manager does.
    for (name, text) in [("cert.pem", cert.pem()), ("key.pem", key.serialize_pem())] {
        let temp = dir.join(format!("{name}.new"));
        std::fs::write(&temp, text).unwrap();
        std::fs::rename(&temp, dir.join(name)).unwrap();
    }
    ca.der().to_vec()
}

/// A client that trusts `ca` alone.
fn client(ca: &[u8]) -> ureq::Agent {
    let roots = vec![ureq::tls::Certificate::from_der(ca).to_owned()];
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(roots)))
                .build(),
        )
        .build()
        .new_agent()
}

#[test]
fn tls_serves_with_the_certificate_in_its_files_and_follows_them_when_they_change() {
    let data = tempfile::tempdir().unwrap();
    let certs = tempfile::tempdir().unwrap();
    let first = certify(certs.path());
    let cert = certs.path().join("cert.pem");
    let key = certs.path().join("key.pem");
    let server = Server::start(
        data.path(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--header-read-secs-max",
            "1",
        ],
    );
    let url = format!("https://localhost:{}/health", server.addr.port());
    // A client that never finishes its handshake is closed like a slow head.
    let mut silent = connect(server.addr).unwrap();
    assert!(closed_by_server(&mut silent, Duration::from_secs(5)));
    let mut reply = client(&first).get(&url).call().unwrap();
    assert_eq!(reply.status().as_u16(), 200);
    let health: Value = serde_json::from_str(&reply.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(health["status"], "ok");
    // Plain HTTP on the TLS port gets no answer.
    let plain = super::server::try_request(server.addr, "GET", "/health", &[], b"");
    assert!(plain.is_err(), "{plain:?}");

    // A renewed certificate, from another authority, is served without a restart.
    let second = certify(certs.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(reply) = client(&second).get(&url).call() {
            assert_eq!(reply.status().as_u16(), 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        client(&first).get(&url).call().is_err(),
        "the old certificate is gone"
    );

    // Files that do not make a certificate keep the one in force.
    std::fs::write(&cert, "not a certificate").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        client(&second).get(&url).call().unwrap().status().as_u16(),
        200
    );
    drop(server);

    // Beyond loopback, with tokens, plain HTTP needs --behind-proxy; TLS does not.
    add_token(data.path(), "ada", "admin");
    std::fs::remove_file(&cert).unwrap();
    certify(certs.path());
    let out = run(
        data.path(),
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--allowed-host",
            "ledger.test",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--tls-cert"), "{}", stderr(&out));
    let out = run(
        data.path(),
        &[
            "serve",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            certs.path().join("missing.pem").to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.pem"), "{}", stderr(&out));
}

#[test]
fn exports_past_the_bound_are_refused_while_one_streams() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--export-concurrent-max", "1"]);
    let addr = server.addr;
    // Several megabytes of evidence, more than the connection buffers hold.
    let (status, opened) = super::server::call_tool(
        addr,
        "research_open_task",
        json!({"question": "Does the sea level rise?", "research_date": "2025-06-30"}),
    );
    assert_eq!(status, 200, "{opened}");
    let task = opened["result"]["task_id"].as_str().unwrap().to_owned();
    for i in 0..10 {
        let content = format!("Report {i} on the sea level. ").repeat(30_000);
        let (status, added) = super::server::call_tool(
            addr,
            "retrieval_add_evidence",
            json!({"task_id": task, "source": format!("survey-{i}.example.org"),
                   "publish_date": "2025-03-01", "source_type": "government",
                   "content": content, "stance": "supports"}),
        );
        assert_eq!(status, 200, "{added}");
    }
    // One export is taken in but not read: it holds its slot while it streams.
    let mut first = connect(addr).unwrap();
    first
        .write_all(
            format!(
                "GET /v1/export?all=true HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let mut start = [0u8; 256];
    let n = first.read(&mut start).unwrap();
    assert!(
        String::from_utf8_lossy(&start[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&start[..n])
    );
    std::thread::sleep(Duration::from_millis(500));
    let refused = send(addr, "GET", "/v1/export?all=true", &[], b"");
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["limit"], "export_concurrent_max");
    assert_eq!(refused.header("retry-after"), Some("1"));
    // Read to its end, the first is a whole bundle, and the slot is free again.
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).unwrap();
    let mut whole = start[..n].to_vec();
    whole.extend_from_slice(&rest);
    assert!(whole.len() > 8 * 1024 * 1024, "{} bytes", whole.len());
    std::thread::sleep(Duration::from_millis(200));
    let again = send(addr, "GET", "/v1/export?all=true", &[], b"");
    assert_eq!(again.status, 200, "{}", again.text());
    let bundle: Value = serde_json::from_slice(&again.body).unwrap();
    assert!(bundle.is_object());
}

/// The status of `GET /health` sent with `Host: host`.
fn health_as(addr: SocketAddr, host: &str) -> u16 {
    let raw = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    exchange(addr, raw.as_bytes()).status
}

#[test]
fn the_allowed_hosts_come_from_flags_the_environment_or_the_file_and_hold_with_tokens() {
    let data = tempfile::tempdir().unwrap();
    let admin = add_token(data.path(), "ada", "admin");
    let server = Server::start_with(
        data.path(),
        &[],
        &[("RESEARCH_LEDGER_ALLOWED_HOSTS", "env.test,other.test:8443")],
    );
    let addr = server.addr;
    assert_eq!(health_as(addr, "env.test"), 200);
    assert_eq!(health_as(addr, "other.test:8443"), 200);
    assert_eq!(health_as(addr, "other.test:9"), 403);
    // A valid token does not make a foreign name acceptable: the name is checked first.
    let raw = format!(
        "GET /v1/tokens HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: Bearer {admin}\r\nConnection: close\r\n\r\n"
    );
    let reply = exchange(addr, raw.as_bytes());
    assert_eq!(reply.status, 403, "{}", reply.text());
    drop(server);

    let file = data.path().join("research-ledger.toml");
    std::fs::write(&file, "[serve]\nallowed_host = [\"file.test\"]\n").unwrap();
    let server = Server::start(data.path(), &["--config", file.to_str().unwrap()]);
    assert_eq!(health_as(server.addr, "file.test"), 200);
    assert_eq!(health_as(server.addr, "env.test"), 403);
}

#[test]
fn subscriptions_on_one_websocket_are_bounded() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--subscriptions-per-client-max", "2"]);
    let mut socket = ws_connect(server.addr, &[]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    for id in ["a", "b", "c"] {
        ws_send(
            &mut socket,
            json!({"id": id, "type": "subscribe", "payload": {"query": "subscription { events { seq } }"}}),
        );
    }
    // The three are served at once, in no set order: one of them is refused (and nothing else
    // is said, as no event is appended).
    let refused = receive(&mut socket);
    assert_eq!(refused["type"], "next", "{refused}");
    let error = &refused["payload"]["errors"][0];
    assert_eq!(
        error["extensions"]["limit"], "subscriptions_per_client_max",
        "{refused}"
    );
}

#[test]
fn with_few_descriptors_the_server_refuses_connections_rather_than_run_out() {
    let data = tempfile::tempdir().unwrap();
    // The open-file limit of this server alone, lowered as a shell does.
    let mut child = std::process::Command::new("sh")
        .args([
            "-c",
            "ulimit -n 400 && exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_research-ledger"),
            "--data-dir",
            data.path().to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("RESEARCH_LEDGER_DATA_DIR")
        .env("RESEARCH_LEDGER_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("{line:?}"))
        .parse()
        .unwrap();
    // Many more connections than the descriptors left: the first are served, the rest told.
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..300 {
        let mut stream = connect(addr).unwrap();
        stream
            .write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .unwrap();
        let mut head = [0u8; 512];
        let n = stream.read(&mut head).unwrap();
        let text = String::from_utf8_lossy(&head[..n]).into_owned();
        if text.starts_with("HTTP/1.1 200") {
            held.push(stream);
        } else {
            assert!(text.starts_with("HTTP/1.1 503"), "{text}");
            assert!(text.contains("connections_max"), "{text}");
            refused += 1;
        }
    }
    assert!(
        refused > 0 && !held.is_empty(),
        "{} held, {refused} refused",
        held.len()
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    // Still answering once the connections are gone.
    assert_eq!(super::server::get_json(addr, "/health").0, 200);
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.contains("lowered"), "{err}");
}

/// Sends `raw`, a request answered with an event stream, and reads the response's head; the
/// stream stays open on the connection returned.
fn open_event_stream(addr: SocketAddr, raw: &str) -> TcpStream {
    let mut stream = connect(addr).unwrap();
    stream.write_all(raw.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "no whole head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    stream
}

#[test]
fn sigterm_stops_the_server_with_idle_connections_websockets_and_event_streams_open() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let _idle: Vec<TcpStream> = (0..3).map(|_| connect_served(addr).unwrap()).collect();
    let mut socket = ws_connect(addr, &[]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    // Streams with no end of their own: a session's event stream, and a subscription.
    let session = open_session(&server, &[], "streams-at-shutdown");
    let get = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\r\n"
    );
    let listen = json!({
        "jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "listener", "version": "1"},
            },
            "notifications": {"resourcesListChanged": true},
        },
    })
    .to_string();
    let listen = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{listen}",
        listen.len()
    );
    let streams = [
        open_event_stream(addr, &get),
        open_event_stream(addr, &listen),
    ];
    let asked = Instant::now();
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "stopped after {:?}",
        asked.elapsed()
    );
    for mut stream in streams {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        let ended = stream.read_to_end(&mut rest);
        assert!(
            ended.is_ok()
                || ended
                    .as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "the stream did not end: {ended:?}"
        );
    }
}

/// The task id in the answer to a request that opened a task, whichever front end answered.
fn opened_task(reply: &Response) -> String {
    let body = reply.text();
    let message = if body.contains("data:") {
        super::mcp::message(&body)
    } else {
        reply.json()
    };
    [
        &message["result"]["task_id"],
        &message["data"]["openTask"]["taskId"],
        &message["result"]["structuredContent"]["task_id"],
    ]
    .into_iter()
    .find_map(Value::as_str)
    .unwrap_or_else(|| panic!("no task opened: {}\n{body}", reply.head))
    .to_owned()
}

#[test]
fn sigterm_lets_the_writes_in_flight_finish_and_keeps_every_one_it_acknowledged() {
    use super::server::{Held, hold};

    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let session = open_session(&server, &[], "shutdown-client");
    let open = |question: &str| {
        json!({"name": "research_open_task",
               "arguments": {"question": question, "research_date": "2025-06-30"}})
    };
    let mutation = json!({
        "query": "mutation($q: String!) { openTask(input: {question: $q}) { taskId } }",
        "variables": {"q": "Opened over GraphQL while the server stops?"},
    });
    let mut stateless = open("Opened over stateless MCP while the server stops?");
    stateless["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "shutdown-client", "version": "1"},
    });
    let call = |id: u64, params: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    let accept = ("Accept", "application/json, text/event-stream");
    let requests: Vec<(&str, Vec<Header>, Value)> = vec![
        (
            "/v1/tools/call",
            vec![JSON],
            open("Opened over REST while the server stops?"),
        ),
        ("/graphql", vec![JSON], mutation),
        (
            "/mcp",
            vec![
                JSON,
                accept,
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "research_open_task"),
            ],
            call(1, stateless),
        ),
        (
            "/mcp",
            vec![
                JSON,
                accept,
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Mcp-Session-Id", &session),
            ],
            call(2, open("Opened in an MCP session while the server stops?")),
        ),
    ];
    // Each request is in flight: the server has its head and asked for its body.
    let held: Vec<_> = requests
        .iter()
        .map(|(path, headers, body)| {
            match hold(addr, "POST", path, headers, body.to_string().into_bytes()).unwrap() {
                Held::Admitted(request) => request,
                Held::Answered(reply) => panic!("{path} answered at once: {}", reply.head),
            }
        })
        .collect();
    super::server::terminate(&server.child);
    // The server has taken the signal once it stops accepting.
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The bodies arrive now, after the signal: every request is answered as it would have been.
    let tasks: Vec<String> = held
        .into_iter()
        .zip(&requests)
        .map(|(request, (path, _, _))| {
            let reply = request
                .finish()
                .unwrap_or_else(|e| panic!("{path} was not answered: {e}"));
            assert_eq!(
                reply.status,
                200,
                "{path}: {}\n{}",
                reply.head,
                reply.text()
            );
            opened_task(&reply)
        })
        .collect();
    let status = super::exit_within(&mut server.child, 30).expect("the server exits");
    assert!(status.success(), "{status:?}");

    // Every answered write is in the ledger, which verifies, under a checkpoint of it all.
    let out = run(data.path(), &["verify", "--json"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let size = report["size"].as_u64().unwrap();
    assert_eq!(size, tasks.len() as u64, "{report}");
    let ledger = super::server::open_ledger(data.path(), ledger::LedgerOptions::default());
    let checkpoint = ledger.latest_checkpoint().unwrap().expect("a checkpoint");
    assert_eq!(
        checkpoint.tree_size, size,
        "the last checkpoint covers every write"
    );
    for task in &tasks {
        assert_eq!(ledger.read_stream(task, 1, 10).unwrap().len(), 1, "{task}");
    }
}

#[test]
fn websockets_must_say_who_they_are_in_time_and_count_as_connections() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &[
            "--graphql-connection-init-secs-max",
            "1",
            "--connections-per-address-max",
            "3",
        ],
    );
    let addr = server.addr;
    // A socket that never sends connection_init is closed as the protocol says.
    let mut silent = ws_connect(addr, &[]).unwrap();
    assert_eq!(closed_within(&mut silent, Duration::from_secs(5)), 4408);
    drop(silent);
    std::thread::sleep(Duration::from_millis(300));
    // Open sockets hold their connections: with three open, a fourth connection is refused.
    let mut sockets = Vec::new();
    for _ in 0..3 {
        let mut socket = ws_connect(addr, &[]).unwrap();
        ws_send(
            &mut socket,
            json!({"type": "connection_init", "payload": {}}),
        );
        assert_eq!(receive(&mut socket)["type"], "connection_ack");
        sockets.push(socket);
    }
    let refused = exchange(
        addr,
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["limit"], "connections_per_address_max");
    drop(sockets);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(super::server::get_json(addr, "/health").0, 200);
}

/// An evidence source of [`kb_contract`] that takes `delay` to answer each request; its URL,
/// and the number of requests it got.
fn slow_source(delay: Duration) -> (String, std::sync::Arc<AtomicUsize>) {
    scripted_source(delay, |_, asked| {
        let query = asked["query"].as_str().unwrap_or_default();
        let n = asked["top_k"].as_u64().unwrap_or(3);
        let reply = json!({"contract_version": "2.1", "results": test_support::items(n, query)});
        ("200 OK", reply.to_string())
    })
}

/// An evidence source that reads each request, waits `delay`, and answers what `answer` makes
/// of the request's number (from 0) and body: a status line and a JSON body. Its URL, and the
/// number of requests it got.
fn scripted_source(
    delay: Duration,
    answer: impl Fn(usize, &Value) -> (&'static str, String) + Send + Sync + 'static,
) -> (String, std::sync::Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/search", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let (count, answer) = (count.clone(), answer.clone());
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
                let mut length = 0;
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = n.trim().parse().unwrap();
                    }
                    line.clear();
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                let n = count.fetch_add(1, Ordering::SeqCst);
                let asked: Value = serde_json::from_slice(&body).unwrap();
                std::thread::sleep(delay);
                let (status, reply) = answer(n, &asked);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            });
        }
    });
    (url, asked)
}

/// A server on `data` with the evidence source `name` at `endpoint` registered, started with
/// `args`; and a task opened on it.
fn serve_with_source(data: &Path, name: &str, endpoint: &str, args: &[&str]) -> (Server, String) {
    let contracts = data.join("contracts");
    std::fs::create_dir_all(&contracts).unwrap();
    let contract = kb_contract(name, endpoint, 8000);
    std::fs::write(contracts.join(format!("{name}.yaml")), contract).unwrap();
    super::server::place_contracts(data, &contracts);
    let server = Server::start(data, args);
    let (status, opened) = super::server::call_tool(
        server.addr,
        "research_open_task",
        json!({"question": "Does lithium supply outgrow demand?", "research_date": "2025-06-30"}),
    );
    assert_eq!(status, 200, "{opened}");
    let task = opened["result"]["task_id"].as_str().unwrap().to_owned();
    (server, task)
}

/// The task's version and its candidates, as `GET /v1/sessions/{task}` gives them.
fn version_and_candidates(addr: SocketAddr, task: &str) -> (u64, u64) {
    let (status, session) = super::server::get_json(addr, &format!("/v1/sessions/{task}"));
    assert_eq!(status, 200, "{session}");
    let version = session["session_version"].as_u64().unwrap();
    let candidates = session["summary"]["evidence"]["candidate"].as_u64();
    (version, candidates.unwrap_or_else(|| panic!("{session}")))
}

#[test]
fn a_request_past_request_secs_max_is_a_504_and_its_retry_with_the_same_key_writes_nothing_again() {
    let (endpoint, asked) = slow_source(Duration::from_secs(3));
    let data = tempfile::tempdir().unwrap();
    let (server, task) = serve_with_source(
        data.path(),
        "kb_slow",
        &endpoint,
        &["--request-secs-max", "1"],
    );
    let addr = server.addr;
    let (opened_at, _) = version_and_candidates(addr, &task);
    let search = json!({"task_id": task, "sources": ["corpus", "kb_slow"], "limit": 2,
                        "idempotency_key": "lithium search"});

    let started = Instant::now();
    let (status, out) = super::server::call_tool(addr, "retrieval_search_evidence", search.clone());
    let took = started.elapsed();
    assert_eq!(
        (status, out["error"].as_str()),
        (504, Some("timeout")),
        "{out}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "answered after {took:?}"
    );
    // The search goes on without its caller, and lands.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (landed, found) = loop {
        let (version, candidates) = version_and_candidates(addr, &task);
        if candidates > 0 {
            break (version, candidates);
        }
        assert!(Instant::now() < deadline, "the search never landed");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(landed > opened_at);
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    // The retry answers with what landed, at once, and writes nothing.
    let (status, out) = super::server::call_tool(addr, "retrieval_search_evidence", search);
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"]["replayed"], true, "{out}");
    assert_eq!(out["result"]["session_version"], landed, "{out}");
    let candidates = out["result"]["candidates"].as_array().map(Vec::len);
    assert_eq!(candidates, Some(found as usize), "{out}");
    assert_eq!(version_and_candidates(addr, &task), (landed, found));
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the source was asked again"
    );
}

#[test]
fn a_retry_sent_while_the_timed_out_search_is_still_asking_waits_for_it_and_asks_no_source() {
    let (endpoint, asked) = slow_source(Duration::from_secs(3));
    let data = tempfile::tempdir().unwrap();
    let (server, task) = serve_with_source(
        data.path(),
        "kb_slow",
        &endpoint,
        &["--request-secs-max", "2"],
    );
    let addr = server.addr;
    let search = json!({"task_id": task, "sources": ["corpus", "kb_slow"], "limit": 2,
                        "idempotency_key": "lithium search"});

    let (status, out) = super::server::call_tool(addr, "retrieval_search_evidence", search.clone());
    assert_eq!(
        (status, out["error"].as_str()),
        (504, Some("timeout")),
        "{out}"
    );
    // The first search has about a second left with the source. Retried at once, the search
    // waits for it rather than asking the source again (which would take three seconds more,
    // past this retry's own limit), and answers with what the first recorded.
    let (status, out) = super::server::call_tool(addr, "retrieval_search_evidence", search.clone());
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["result"]["replayed"], true, "{out}");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "the source was asked again"
    );
    let (version, candidates) = version_and_candidates(addr, &task);
    assert_eq!(out["result"]["session_version"], version, "{out}");
    assert_eq!(
        out["result"]["candidates"].as_array().map(Vec::len),
        Some(candidates as usize),
        "{out}"
    );

    // Two retries at once, with the search recorded: both answered from the record.
    let retries: Vec<_> = (0..2)
        .map(|_| {
            let search = search.clone();
            std::thread::spawn(move || {
                super::server::call_tool(addr, "retrieval_search_evidence", search)
            })
        })
        .collect();
    for retry in retries {
        let (status, out) = retry.join().unwrap();
        assert_eq!(
            (status, &out["result"]["replayed"]),
            (200, &json!(true)),
            "{out}"
        );
    }
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    assert_eq!(version_and_candidates(addr, &task), (version, candidates));
}

#[test]
fn a_search_that_failed_lets_the_retry_waiting_on_its_key_ask_again() {
    // The first search is refused by its source after a while (a closed connection); a
    // retry with its key, sent meanwhile, waits, then asks the source itself.
    let (endpoint, asked) = scripted_source(Duration::from_millis(1500), |n, _| match n {
        0 => (
            "503 Service Unavailable",
            "{\"error\": \"busy\"}".to_owned(),
        ),
        _ => {
            let results = test_support::items(2, "lithium");
            let reply = json!({"contract_version": "2.1", "results": results});
            ("200 OK", reply.to_string())
        }
    });
    let data = tempfile::tempdir().unwrap();
    let (server, task) = serve_with_source(data.path(), "kb", &endpoint, &[]);
    let addr = server.addr;
    let search = json!({"task_id": task, "sources": ["kb"], "limit": 2,
                        "idempotency_key": "lithium search"});
    let first = {
        let search = search.clone();
        std::thread::spawn(move || {
            super::server::call_tool(addr, "retrieval_search_evidence", search)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let (status, retried) = super::server::call_tool(addr, "retrieval_search_evidence", search);
    let (first_status, first) = first.join().unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2, "{first}\n{retried}");
    assert_ne!(first_status, 200, "{first}");
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["result"]["replayed"], false, "{retried}");
}
