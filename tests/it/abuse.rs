//! Requests a careless or hostile client sends a spawned `serve`: malformed JSON-RPC, bodies
//! over the limit (declared or not), wrong content types, unknown methods and routes, deeply
//! nested JSON, invalid UTF-8, wrong or revoked tokens, an auditor trying to write. Each gets a
//! clear, structured error; the server stays up; the ledger does not change.

use std::net::SocketAddr;

use serde_json::{Value, json};

use super::auth::{add_token, bearer, call, open_task};
use super::graphql::{connect, receive, send as ws_send};
use super::mcp::{message, open_session, stateless};
use super::server::{Header, Response, Server, exchange, ledger_size, send, send_chunked};

/// The server-wide body limit these tests set, small enough to cross cheaply.
const BYTES_MAX: usize = 65536;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

/// A server with the body limit above, and a writer's token.
fn start(data: &std::path::Path) -> (Server, String) {
    let writer = add_token(data, "wes", "writer");
    let max = BYTES_MAX.to_string();
    (Server::start(data, &["--request-bytes-max", &max]), writer)
}

/// The server answers, its ledger is still `size` events long, and its process is running.
fn still_up(server: &mut Server, size: u64) {
    assert!(server.is_running(), "the server exited");
    assert_eq!(ledger_size(server.addr), size, "the ledger changed");
}

/// A POST to `/mcp` as `token`'s holder, with `headers` besides the credentials.
fn mcp(addr: SocketAddr, token: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let auth = bearer(token);
    let mut all = vec![("Authorization", auth.as_str())];
    all.extend_from_slice(headers);
    send(addr, "POST", "/mcp", &all, body)
}

/// Asserts a JSON-RPC error with `code` for the request `id`, answered with HTTP `status`, as a
/// JSON body or a server-sent event.
fn assert_jsonrpc_error(reply: &Response, status: u16, code: i64, id: &Value) -> Value {
    let text = reply.text();
    assert_eq!(reply.status, status, "{text}");
    let content_type = reply.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json")
            || content_type.starts_with("text/event-stream"),
        "{content_type}: {text}"
    );
    let answer = message(&text);
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert_eq!(&answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.trim().is_empty()),
        "{answer}"
    );
    answer
}

/// Asserts a structured REST error: the status, the code, a message.
fn assert_error(reply: &Response, status: u16, code: &str) -> Value {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert!(
        reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{:?}: {}",
        reply.header("content-type"),
        reply.text()
    );
    let error = reply.json();
    assert_eq!(error["error"], code, "{error}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{error}"
    );
    error
}

/// Asserts a GraphQL response whose one error has `code`, with HTTP `status`.
fn assert_graphql_error(reply: &Response, status: u16, code: &str) -> Value {
    assert_eq!(reply.status, status, "{}", reply.text());
    let out = reply.json();
    assert!(out["data"].is_null(), "{out}");
    let error = &out["errors"][0];
    assert_eq!(error["extensions"]["code"], code, "{out}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{out}"
    );
    error.clone()
}

/// A write on each surface, as bodies: a tool call over MCP, a mutation, a REST tool call.
fn writes() -> (Value, Value, Value) {
    let arguments = json!({"question": "Does the sea level rise?"});
    (
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "research_open_task", "arguments": arguments}}),
        json!({"query": "mutation { openTask(input: {question: \"Does the sea level rise?\"}) { taskId } }"}),
        json!({"name": "research_open_task", "arguments": arguments}),
    )
}

#[test]
fn malformed_requests_get_clear_errors_and_change_nothing() {
    let data = tempfile::tempdir().unwrap();
    let (mut server, writer) = start(data.path());
    let addr = server.addr;
    let auth = bearer(&writer);
    let stateless_era = [JSON, ACCEPT, ("MCP-Protocol-Version", "2026-07-28")];
    let invalid_utf8: &[u8] = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\", \"params\": {\"x\": \"\xff\xfe\"}}";

    // MCP: not JSON, not JSON-RPC, not a method the server has, not the params it takes.
    for body in [
        &b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": "[..],
        b"{\"jsonrpc\": \"2.0\", \"id\": 1,, }",
        b"",
        invalid_utf8,
    ] {
        let reply = mcp(addr, &writer, &[JSON, ACCEPT], body);
        let answer = assert_jsonrpc_error(&reply, 400, -32700, &Value::Null);
        assert_eq!(
            answer["error"]["data"]["error"], "invalid_argument",
            "{answer}"
        );
    }
    for (body, id) in [
        (json!({"hello": "world"}), Value::Null),
        (json!("initialize"), Value::Null),
        (json!(42), Value::Null),
        (json!([]), Value::Null),
        (
            json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "2.0", "id": {"not": "an id"}, "method": "ping"}),
            Value::Null,
        ),
        (
            json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
            json!(1),
        ),
        (
            json!({"jsonrpc": "2.0", "id": "two", "method": 7}),
            json!("two"),
        ),
    ] {
        let reply = mcp(addr, &writer, &[JSON, ACCEPT], body.to_string().as_bytes());
        assert_jsonrpc_error(&reply, 400, -32600, &id);
    }
    // A method no MCP server has: in either era, "method not found" for that request's id.
    let (status, answer) = stateless(
        &server,
        &[("Authorization", &auth)],
        7,
        "ledger/rewrite",
        json!({}),
    );
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ledger/rewrite")),
        "{answer}"
    );
    // A method the 2026-07-28 era removed, asked for in that era: not found either.
    for method in ["initialize", "logging/setLevel"] {
        let (status, answer) =
            stateless(&server, &[("Authorization", &auth)], 11, method, json!({}));
        assert_eq!(status, 404, "{method}: {answer}");
        assert_eq!(answer["id"], 11, "{answer}");
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
    let session = open_session(&server, &[("Authorization", &auth)], "abuse-client");
    let in_session = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let reply = mcp(
        addr,
        &writer,
        &in_session,
        json!({"jsonrpc": "2.0", "id": 8, "method": "ledger/rewrite", "params": {}})
            .to_string()
            .as_bytes(),
    );
    assert_jsonrpc_error(&reply, 200, -32601, &json!(8));
    // A method it has, with params it cannot read: "invalid params", not "method not found".
    for params in [
        json!(5),
        json!({"name": "research_open_task", "arguments": 5}),
        json!({"name": 5}),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
        let reply = mcp(addr, &writer, &in_session, body.to_string().as_bytes());
        assert_jsonrpc_error(&reply, 400, -32602, &json!(9));
        let mut headers = stateless_era.to_vec();
        headers.extend([
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "research_open_task"),
        ]);
        let reply = mcp(addr, &writer, &headers, body.to_string().as_bytes());
        assert_jsonrpc_error(&reply, 400, -32602, &json!(9));
    }
    // A notification MCP defines, with params it cannot read: there is no id to answer, but
    // the HTTP request is answered, with "invalid params".
    let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": 7});
    let reply = mcp(addr, &writer, &in_session, body.to_string().as_bytes());
    assert_jsonrpc_error(&reply, 400, -32602, &Value::Null);
    // A tool the server does not have.
    let body = json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
                      "params": {"name": "ledger_rewrite", "arguments": {}}});
    let reply = mcp(addr, &writer, &in_session, body.to_string().as_bytes());
    assert_jsonrpc_error(&reply, 200, -32602, &json!(10));
    // HTTP the endpoint does not take: another content type, a client that cannot read the
    // answer, another method, a session that does not exist.
    let (mcp_write, mutation, rest_write) = writes();
    let write = mcp_write.to_string();
    for (headers, status) in [
        (vec![("Content-Type", "text/plain"), ACCEPT], 415),
        (
            vec![
                ("Content-Type", "application/x-www-form-urlencoded"),
                ACCEPT,
            ],
            415,
        ),
        (vec![ACCEPT], 415),
        (vec![JSON, ("Accept", "text/html")], 406),
        (
            vec![JSON, ACCEPT, ("Mcp-Session-Id", "no-such-session")],
            404,
        ),
    ] {
        let reply = mcp(addr, &writer, &headers, write.as_bytes());
        let answer = assert_jsonrpc_error(&reply, status, -32600, &Value::Null);
        assert!(answer["error"]["data"]["error"].is_string(), "{answer}");
    }
    let reply = send(addr, "PUT", "/mcp", &[("Authorization", &auth)], b"");
    assert_jsonrpc_error(&reply, 405, -32600, &Value::Null);
    assert!(reply.header("allow").is_some_and(|a| a.contains("POST")));
    still_up(&mut server, 0);

    // GraphQL.
    let graphql = |headers: &[(&str, &str)], body: &[u8]| {
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(headers);
        send(addr, "POST", "/graphql", &all, body)
    };
    for body in [
        &b"{\"query\": \"mutation { openTask"[..],
        b"",
        b"{\"query\": \"{ ledger { size } }\", \"variables\": {\"x\": \"\xff\"}}",
        b"[]",
        b"[{\"query\": \"{ ledger { size } }\"}]",
        b"\"{ ledger { size } }\"",
    ] {
        let error = assert_graphql_error(&graphql(&[JSON], body), 400, "INVALID_ARGUMENT");
        assert_eq!(error["extensions"]["field"], "body", "{error}");
    }
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/graphql",
    ] {
        let reply = graphql(
            &[("Content-Type", content_type)],
            mutation.to_string().as_bytes(),
        );
        let error = assert_graphql_error(&reply, 415, "INVALID_ARGUMENT");
        assert_eq!(error["extensions"]["field"], "content-type", "{error}");
    }
    for query in [
        "mutation { openTask(input: {question: \"Is it?\"}) { taskId }",
        "mutation { rewriteLedger }",
        "mutation { openTask(input: {question: 7}) { taskId } }",
        "subscription { events { seq } }",
    ] {
        let reply = graphql(&[JSON], json!({"query": query}).to_string().as_bytes());
        assert_graphql_error(&reply, 200, "INVALID_ARGUMENT");
    }
    let reply = send(
        addr,
        "PUT",
        "/graphql",
        &[("Authorization", &auth), JSON],
        mutation.to_string().as_bytes(),
    );
    assert_error(&reply, 405, "invalid_argument");
    still_up(&mut server, 0);

    // REST.
    let rest = |headers: &[(&str, &str)], body: &[u8]| {
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(headers);
        send(addr, "POST", "/v1/tools/call", &all, body)
    };
    for body in [
        &b"{\"name\": \"research_open_task\", "[..],
        b"",
        b"{\"name\": \"research_open_task\", \"arguments\": {\"question\": \"\xff\xfe?\"}}",
        b"[]",
        b"{\"tool\": \"research_open_task\", \"arguments\": {}}",
    ] {
        let error = assert_error(&rest(&[JSON], body), 400, "invalid_argument");
        assert_eq!(error["field"], "body", "{error}");
    }
    let error = assert_error(
        &rest(
            &[JSON],
            json!({"name": "research_open_task", "arguments": 5})
                .to_string()
                .as_bytes(),
        ),
        400,
        "invalid_argument",
    );
    assert_eq!(error["field"], "arguments", "{error}");
    let error = assert_error(
        &rest(
            &[JSON],
            json!({"name": "research_open_task", "arguments": {"question": 7}})
                .to_string()
                .as_bytes(),
        ),
        400,
        "invalid_argument",
    );
    assert_eq!(error["field"], "question", "{error}");
    assert_error(
        &rest(
            &[JSON],
            json!({"name": "ledger_rewrite", "arguments": {}})
                .to_string()
                .as_bytes(),
        ),
        404,
        "not_found",
    );
    // A chunked body that is not chunked as HTTP says.
    let raw = format!(
        "POST /v1/tools/call HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: {auth}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n"
    );
    let error = assert_error(&exchange(addr, raw.as_bytes()), 400, "invalid_argument");
    assert_eq!(error["field"], "body", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("chunk size")),
        "{error}"
    );
    // A body a page of any site could send without asking first is not a tool call.
    for headers in [
        vec![("Content-Type", "text/plain")],
        vec![("Content-Type", "application/x-www-form-urlencoded")],
        vec![("Content-Type", "multipart/form-data; boundary=x")],
        vec![],
    ] {
        let error = assert_error(
            &rest(&headers, rest_write.to_string().as_bytes()),
            415,
            "invalid_argument",
        );
        assert_eq!(error["field"], "content-type", "{error}");
    }
    // Routes and methods the server does not have.
    for (method, path) in [
        ("GET", "/v1/tools/call"),
        ("PUT", "/v1/tools/list"),
        ("POST", "/health"),
        ("DELETE", "/v1/export"),
        ("POST", "/"),
    ] {
        let reply = send(addr, method, path, &[("Authorization", &auth), JSON], b"{}");
        assert_error(&reply, 405, "invalid_argument");
    }
    for path in ["/v1/rewrite", "/v2/tools/call", "/index.html", "/mcp/extra"] {
        let reply = send(
            addr,
            "POST",
            path,
            &[("Authorization", &auth), JSON],
            rest_write.to_string().as_bytes(),
        );
        assert_error(&reply, 404, "not_found");
    }
    // A path whose parameter is not text.
    for (method, path) in [
        ("GET", "/v1/sessions/%ff%fe"),
        ("DELETE", "/v1/tools/%ff"),
        ("DELETE", "/v1/tokens/%c3%28"),
    ] {
        let reply = send(addr, method, path, &[("Authorization", &auth)], b"");
        let error = assert_error(&reply, 400, "invalid_argument");
        assert_eq!(error["field"], "path", "{method} {path}: {error}");
    }
    // The WebSocket's path, asked for something other than a graphql-transport-ws (or
    // graphql-ws) connection.
    for headers in [
        vec![],
        vec![("Sec-WebSocket-Protocol", "graphql-transport-ws")],
        vec![
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Protocol", "chat"),
        ],
    ] {
        let mut all = vec![("Authorization", auth.as_str())];
        all.extend_from_slice(&headers);
        let reply = send(addr, "GET", "/graphql/ws", &all, b"");
        let error = assert_graphql_error(&reply, 400, "INVALID_ARGUMENT");
        assert_eq!(
            error["extensions"]["field"], "upgrade",
            "{headers:?}: {error}"
        );
    }
    still_up(&mut server, 0);

    // After all of it, the same server still takes a write.
    let reply = rest(&[JSON], rest_write.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
    still_up(&mut server, 1);
}

/// `body` padded with spaces to just over the limit: still a valid request, so only its size
/// can be the reason to refuse it.
fn padded(body: &str) -> Vec<u8> {
    let mut bytes = body.as_bytes().to_vec();
    bytes.resize(BYTES_MAX + 1000, b' ');
    bytes
}

#[test]
fn bodies_over_the_limit_are_refused_whether_declared_or_not() {
    let data = tempfile::tempdir().unwrap();
    let (mut server, writer) = start(data.path());
    let admin = add_token(data.path(), "ada", "admin");
    let addr = server.addr;
    let (mcp_write, mutation, rest_write) = writes();
    let contract = super::external::kb_contract("kb_search", "http://127.0.0.1:9/search", 1000);
    let new_token = json!({"name": "eve", "role": "admin"}).to_string();
    // Each route with a body, the token that may use it, its headers, and a request it takes.
    let routes: [(&str, &str, Vec<Header>, String); 5] = [
        (
            "/mcp",
            &writer,
            vec![
                JSON,
                ACCEPT,
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "research_open_task"),
            ],
            {
                let mut request = mcp_write.clone();
                request["params"]["_meta"] = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "big", "version": "1"},
                });
                request.to_string()
            },
        ),
        ("/graphql", &writer, vec![JSON], mutation.to_string()),
        (
            "/v1/tools/call",
            &writer,
            vec![JSON],
            rest_write.to_string(),
        ),
        (
            "/v1/tools/register",
            &admin,
            vec![JSON],
            super::external::register_body(&contract),
        ),
        ("/v1/tokens", &admin, vec![JSON], new_token),
    ];
    for (path, token, headers, body) in &routes {
        let auth = bearer(token);
        let mut all = headers.clone();
        all.push(("Authorization", &auth));
        let big = padded(body);
        for (how, reply) in [
            ("declared", send(addr, "POST", path, &all, &big)),
            ("chunked", send_chunked(addr, "POST", path, &all, &big)),
        ] {
            assert_eq!(reply.status, 413, "{path} {how}: {}", reply.text());
            let error = reply.json();
            assert_eq!(error["error"], "limit_exceeded", "{path} {how}: {error}");
            assert_eq!(error["limit"], "request_bytes_max", "{path} {how}: {error}");
            assert_eq!(error["max"], BYTES_MAX, "{path} {how}: {error}");
            assert!(
                error["actual"]
                    .as_u64()
                    .is_some_and(|n| n > BYTES_MAX as u64),
                "{path} {how}: {error}"
            );
        }
        still_up(&mut server, 0);
    }
    assert!(!data.path().join("contracts/tools/kb_search.yaml").exists());
    let tokens = crate::server::tokens_text(data.path()).unwrap_or_default();
    assert!(!tokens.contains("\"eve\""), "{tokens}");

    // The same requests within the limit, chunked or not, are served.
    for (i, (path, token, headers, body)) in routes.iter().enumerate().take(3) {
        let auth = bearer(token);
        let mut all = headers.clone();
        all.push(("Authorization", &auth));
        let reply = if i % 2 == 0 {
            send_chunked(addr, "POST", path, &all, body.as_bytes())
        } else {
            send(addr, "POST", path, &all, body.as_bytes())
        };
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        let answer = message(&reply.text());
        let refused = answer.get("errors").is_some()
            || answer.get("error").is_some()
            || answer["result"]["isError"] == true;
        assert!(!refused, "{path}: {answer}");
    }
    still_up(&mut server, 3);
}

/// `depth` nested JSON arrays: `[[[…]]]`.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn deeply_nested_json_is_refused_without_bringing_the_server_down() {
    let data = tempfile::tempdir().unwrap();
    let writer = add_token(data.path(), "wes", "writer");
    let admin = add_token(data.path(), "ada", "admin");
    // The default limits, which admit bodies of a few hundred kilobytes.
    let mut server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let auth = bearer(&writer);
    let deep = nested(100_000);

    // In the arguments of a tool call, over MCP and REST.
    let body = format!(
        "{{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"tools/call\", \"params\": {{\"name\": \"research_open_task\", \"arguments\": {{\"question\": {deep}}}}}}}"
    );
    let reply = mcp(
        addr,
        &writer,
        &[
            JSON,
            ACCEPT,
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "research_open_task"),
        ],
        body.as_bytes(),
    );
    assert_jsonrpc_error(&reply, 400, -32700, &Value::Null);
    still_up(&mut server, 0);
    let body =
        format!("{{\"name\": \"research_open_task\", \"arguments\": {{\"question\": {deep}}}}}");
    let reply = send(
        addr,
        "POST",
        "/v1/tools/call",
        &[("Authorization", &auth), JSON],
        body.as_bytes(),
    );
    assert_error(&reply, 400, "invalid_argument");
    still_up(&mut server, 0);

    // In GraphQL variables, and in the query itself: selections, lists and objects.
    let graphql = |body: &[u8]| {
        send(
            addr,
            "POST",
            "/graphql",
            &[("Authorization", &auth), JSON],
            body,
        )
    };
    let body = format!(
        "{{\"query\": \"query($v: String) {{ ledger {{ size }} }}\", \"variables\": {{\"v\": {deep}}}}}"
    );
    assert_graphql_error(&graphql(body.as_bytes()), 400, "INVALID_ARGUMENT");
    for query in [
        format!("{}{}", "{ ledger ".repeat(20_000), "}".repeat(20_000)),
        format!("{}{}", "{".repeat(100_000), "}".repeat(100_000)),
        format!(
            "{{ tasks(text: {}) {{ edges {{ cursor }} }} }}",
            nested(100_000)
        ),
        format!(
            "{{ tasks(text: {}1{}) {{ edges {{ cursor }} }} }}",
            "{a: ".repeat(50_000),
            "}".repeat(50_000)
        ),
        format!(
            "{{ ledger {{ size {}size{} }} }}",
            "... on Ledger { ".repeat(20_000),
            "}".repeat(20_000)
        ),
    ] {
        let reply = graphql(json!({"query": query}).to_string().as_bytes());
        assert_graphql_error(&reply, 200, "INVALID_ARGUMENT");
        still_up(&mut server, 0);
    }

    // Over the GraphQL WebSocket.
    let mut socket = connect(addr, &[("Authorization", &auth)]).unwrap();
    ws_send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    socket
        .send(tungstenite::Message::text(format!(
            "{{\"id\": \"deep\", \"type\": \"subscribe\", \"payload\": {{\"query\": \"{{ ledger {{ size }} }}\", \"variables\": {{\"v\": {deep}}}}}}}"
        )))
        .unwrap();
    match socket.read() {
        Ok(tungstenite::Message::Close(Some(frame))) => {
            // 1002, protocol error: the message is not one the protocol reads.
            assert_eq!(u16::from(frame.code), 1002, "{frame:?}");
            assert!(frame.reason.contains("recursion limit"), "{frame:?}");
        }
        other => panic!("a nested message was not refused: {other:?}"),
    }
    still_up(&mut server, 0);

    // In a contract and a token request.
    let contract = format!("name: deep\ndescription: {deep}\n");
    let admin_auth = bearer(&admin);
    let reply = send(
        addr,
        "POST",
        "/v1/tools/register",
        &[("Authorization", &admin_auth), JSON],
        super::external::register_body(&contract).as_bytes(),
    );
    assert_error(&reply, 400, "invalid_argument");
    let body = format!("{{\"name\": \"eve\", \"role\": {deep}}}");
    let reply = send(
        addr,
        "POST",
        "/v1/tokens",
        &[("Authorization", &admin_auth), JSON],
        body.as_bytes(),
    );
    assert_error(&reply, 400, "invalid_argument");
    still_up(&mut server, 0);
}

#[test]
fn wrong_revoked_and_read_only_tokens_write_nothing_anywhere() {
    let data = tempfile::tempdir().unwrap();
    let (mut server, writer) = start(data.path());
    let addr = server.addr;
    let auditor = add_token(data.path(), "aud", "auditor");
    let revoked = add_token(data.path(), "rex", "writer");
    let out = super::run(data.path(), &["token", "revoke", "rex"]);
    assert!(out.status.success(), "{}", super::stderr(&out));
    let task = open_task(addr, &writer, "Does the sea level rise?");
    let size = ledger_size(addr);
    let unknown = format!("rl_{}", "7".repeat(64));
    let (mcp_write, mutation, _) = writes();

    for (token, status, code) in [
        (unknown.as_str(), 401, "unauthenticated"),
        (revoked.as_str(), 401, "unauthenticated"),
        (auditor.as_str(), 403, "forbidden"),
    ] {
        let auth = bearer(token);
        // REST.
        let reply = call(addr, token, "research_close_task", json!({"task_id": task}));
        assert_error(&reply, status, code);
        // GraphQL.
        let reply = send(
            addr,
            "POST",
            "/graphql",
            &[("Authorization", &auth), JSON],
            mutation.to_string().as_bytes(),
        );
        if status == 401 {
            assert_error(&reply, 401, code);
        } else {
            let out = reply.json();
            assert_eq!(out["errors"][0]["extensions"]["code"], "FORBIDDEN", "{out}");
        }
        // MCP.
        let (answer_status, answer) = {
            let mut params = mcp_write["params"].clone();
            params["arguments"] = json!({"task_id": task});
            params["name"] = json!("research_close_task");
            if status == 401 {
                let reply = mcp(
                    addr,
                    token,
                    &[JSON, ACCEPT],
                    mcp_write.to_string().as_bytes(),
                );
                (reply.status, reply.json())
            } else {
                stateless(
                    &server,
                    &[("Authorization", &auth)],
                    1,
                    "tools/call",
                    params,
                )
            }
        };
        if status == 401 {
            assert_eq!(answer_status, 401, "{answer}");
            assert_eq!(answer["error"], code, "{answer}");
        } else {
            assert_eq!(answer["result"]["isError"], true, "{answer}");
            assert_eq!(
                answer["result"]["structuredContent"]["error"], code,
                "{answer}"
            );
        }
        // The GraphQL WebSocket.
        let mut socket = connect(addr, &[]).unwrap();
        ws_send(
            &mut socket,
            json!({"type": "connection_init", "payload": {"Authorization": auth}}),
        );
        if status == 401 {
            match socket.read() {
                Ok(tungstenite::Message::Close(Some(frame))) => {
                    assert!(frame.reason.contains("revoked"), "{frame:?}");
                }
                other => panic!("{token}: not refused: {other:?}"),
            }
        } else {
            assert_eq!(receive(&mut socket)["type"], "connection_ack");
            ws_send(
                &mut socket,
                json!({"id": "w", "type": "subscribe", "payload": mutation}),
            );
            let answer = receive(&mut socket);
            assert_eq!(
                answer["payload"]["errors"][0]["extensions"]["code"], "FORBIDDEN",
                "{answer}"
            );
        }
        still_up(&mut server, size);
    }
}

#[test]
fn a_page_of_another_site_changes_nothing_through_the_rest_view() {
    let data = tempfile::tempdir().unwrap();
    // Without tokens, on loopback: every caller is the local user, with every right.
    let mut server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let foreign = ("Origin", "http://elsewhere.example.org");
    let contract = super::external::kb_contract("kb_search", "http://127.0.0.1:9/search", 1000);
    let (_, _, rest_write) = writes();
    let new_token = json!({"name": "eve", "role": "admin"}).to_string();
    // What a page may send without asking first (a form, or text/plain), and what it may not
    // (JSON, which needs a preflight the server never grants): refused alike, on every route.
    for content_type in ["text/plain", "application/json"] {
        let register = super::external::register_body(&contract);
        for (path, body) in [
            ("/v1/tools/register", &register),
            ("/v1/tools/call", &rest_write.to_string()),
            ("/v1/tokens", &new_token),
        ] {
            let reply = send(
                addr,
                "POST",
                path,
                &[foreign, ("Content-Type", content_type)],
                body.as_bytes(),
            );
            let error = assert_error(&reply, 403, "forbidden");
            assert!(
                error["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("elsewhere.example.org")),
                "{path}: {error}"
            );
        }
    }
    for (method, path) in [
        ("DELETE", "/v1/tools/kb_search"),
        ("GET", "/v1/export?all=true"),
        ("GET", "/v1/tokens"),
    ] {
        let reply = send(addr, method, path, &[foreign], b"");
        assert_error(&reply, 403, "forbidden");
    }
    assert!(!data.path().join("contracts/tools/kb_search.yaml").exists());
    assert!(crate::server::tokens_text(data.path()).is_none());
    still_up(&mut server, 0);

    // A page the server itself serves, and a client that sends no Origin, are served.
    let own = format!("http://{addr}");
    let reply = send(
        addr,
        "POST",
        "/v1/tools/call",
        &[("Origin", &own), JSON],
        rest_write.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = send(
        addr,
        "POST",
        "/v1/tools/register",
        &[JSON],
        super::external::register_body(&contract).as_bytes(),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    // A contract as the text it is, without JSON around it, is what any page may send.
    let reply = send(
        addr,
        "POST",
        "/v1/tools/register",
        &[("Content-Type", "text/plain")],
        contract.as_bytes(),
    );
    assert_error(&reply, 415, "invalid_argument");
    still_up(&mut server, 1);
}

#[test]
fn a_tool_argument_is_refused_as_an_argument_whatever_its_name() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path(), &[]);
    let addr = server.addr;
    // A registered tool whose arguments are named like parts of an HTTP request.
    let contract = super::external::kb_contract("kb_search", "http://127.0.0.1:9/search", 1000)
        .replace(
            "input_schema:\n",
            "input_schema:\n  method: { type: string }\n  content-type: { type: string }\n",
        );
    let reply = send(
        addr,
        "POST",
        "/v1/tools/register",
        &[JSON],
        super::external::register_body(&contract).as_bytes(),
    );
    assert_eq!(reply.status, 201, "{}", reply.text());
    for argument in ["method", "content-type"] {
        let mut arguments =
            json!({"query": "tides", "method": "GET", "content-type": "text/plain"});
        arguments[argument] = json!(7);
        let body = json!({"name": "kb_search", "arguments": arguments});
        let reply = send(
            addr,
            "POST",
            "/v1/tools/call",
            &[JSON],
            body.to_string().as_bytes(),
        );
        let error = assert_error(&reply, 400, "invalid_argument");
        assert_eq!(error["field"], argument, "{error}");
    }
    still_up(&mut server, 0);
}
