//! The GraphQL API and the export endpoint of a spawned `research-ledger serve`, through real
//! HTTP and a real WebSocket on loopback.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tungstenite::{ClientRequestBuilder, Message, WebSocket};

use super::server::{Server, get_json, request};

/// Posts one GraphQL request on a connection of its own; returns the HTTP status and body.
fn post(addr: SocketAddr, query: &str, variables: Value) -> (u16, Value) {
    post_as(addr, None, query, variables)
}

/// Posts one GraphQL request as the holder of `token` (`None`: without credentials).
pub(crate) fn post_as(
    addr: SocketAddr,
    token: Option<&str>,
    query: &str,
    variables: Value,
) -> (u16, Value) {
    let body = json!({"query": query, "variables": variables}).to_string();
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    let (status, body) = request(addr, "POST", "/graphql", &headers, body.as_bytes());
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&body)));
    (status, value)
}

/// Runs a query that must succeed and returns its data.
fn gql(addr: SocketAddr, query: &str, variables: Value) -> Value {
    let (status, out) = post(addr, query, variables);
    assert_eq!(status, 200, "{out}");
    assert!(out.get("errors").is_none(), "{out}");
    out["data"].clone()
}

/// Runs a query that must fail and returns its one error.
fn gql_error(addr: SocketAddr, query: &str, variables: Value) -> Value {
    let (_, out) = post(addr, query, variables);
    let errors = out["errors"].as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(errors.len(), 1, "{out}");
    errors[0].clone()
}

fn open_task(addr: SocketAddr, question: &str) -> String {
    let data = gql(
        addr,
        "mutation($q: String!) { openTask(input: {question: $q, researchDate: \"2025-06-30\"}) { taskId sessionVersion replayed } }",
        json!({"q": question}),
    );
    assert_eq!(data["openTask"]["sessionVersion"], 1);
    data["openTask"]["taskId"].as_str().unwrap().to_owned()
}

const ADD: &str = "mutation($t: ID!, $s: String!, $st: Stance, $v: Int, $k: String) {
    addEvidence(taskId: $t, expectedVersion: $v, idempotencyKey: $k, input: {
        source: $s, publishDate: \"2025-03-01\", sourceType: GOVERNMENT,
        content: $s, stance: $st }) {
      taskId sessionVersion replayed result text
      state { version evidence { evidenceId status source } }
    }
}";

fn add(addr: SocketAddr, task: &str, source: &str, stance: &str) -> Value {
    gql(addr, ADD, json!({"t": task, "s": source, "st": stance}))["addEvidence"].clone()
}

#[test]
fn queries_read_a_task_at_any_version_a_page_at_a_time() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let first = open_task(addr, "Does the sea level rise along the coast?");
    let second = open_task(addr, "海平面是否上升？");
    let third = open_task(addr, "Do glaciers retreat?");
    for source in [
        "tide-office.example.org",
        "survey.example.org",
        "coast.example.org",
    ] {
        add(addr, &first, source, "SUPPORTS");
    }

    // The index, two tasks a page, across the boundary, in the order they were opened.
    const PAGE: &str = "query($after: String) { tasks(first: 2, after: $after) {
        edges { cursor node { id question sessionVersion status } }
        pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }";
    let page = gql(addr, PAGE, json!({"after": null}))["tasks"].clone();
    let ids: Vec<&str> = page["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [first.as_str(), second.as_str()]);
    assert_eq!(page["edges"][0]["node"]["sessionVersion"], 4);
    assert_eq!(page["pageInfo"]["hasNextPage"], true);
    assert_eq!(page["pageInfo"]["hasPreviousPage"], false);
    assert_eq!(page["pageInfo"]["endCursor"], page["edges"][1]["cursor"]);
    let next = gql(addr, PAGE, json!({"after": page["pageInfo"]["endCursor"]}))["tasks"].clone();
    assert_eq!(next["edges"].as_array().unwrap().len(), 1);
    assert_eq!(next["edges"][0]["node"]["id"], third.as_str());
    assert_eq!(next["pageInfo"]["hasNextPage"], false);
    assert_eq!(next["pageInfo"]["hasPreviousPage"], true);
    // Filters: by text (Chinese as written) and by status.
    let found = gql(
        addr,
        "{ tasks(text: \"海平面\") { edges { node { id } } } active: tasks(status: ACTIVE, first: 5) { edges { node { id } } } }",
        json!({}),
    );
    assert_eq!(found["tasks"]["edges"], json!([{"node": {"id": second}}]));
    assert_eq!(found["active"]["edges"].as_array().unwrap().len(), 3);

    // Time travel: the task after its opening and after its second item, and at its head.
    let task = gql(
        addr,
        "query($t: ID!) { task(id: $t) {
            sessionVersion version
            opened: state(atVersion: 1) { version status evidence { evidenceId } }
            two: state(atVersion: 3) { version evidence { evidenceId source status } }
            evidence { evidenceId }
        } }",
        json!({"t": first}),
    )["task"]
        .clone();
    assert_eq!(task["sessionVersion"], 4);
    assert_eq!(task["version"], 4);
    assert_eq!(
        task["opened"],
        json!({"version": 1, "status": "ACTIVE", "evidence": []})
    );
    assert_eq!(task["two"]["version"], 3);
    assert_eq!(
        task["two"]["evidence"],
        json!([
            {"evidenceId": "ev-1", "source": "tide-office.example.org", "status": "CANDIDATE"},
            {"evidenceId": "ev-2", "source": "survey.example.org", "status": "CANDIDATE"},
        ])
    );
    assert_eq!(task["evidence"].as_array().unwrap().len(), 3);
    let beyond = gql_error(
        addr,
        "query($t: ID!) { task(id: $t) { state(atVersion: 9) { version } } }",
        json!({"t": first}),
    );
    assert_eq!(beyond["extensions"]["code"], "INVALID_ARGUMENT", "{beyond}");

    // The audit trail, three events a page, across the boundary; each links to the one before.
    const EVENTS: &str =
        "query($t: ID!, $after: String) { task(id: $t) { events(first: 3, after: $after) {
        edges { cursor node { seq streamVersion kind actor hash prevHash causation payload } }
        pageInfo { hasNextPage endCursor } headVersion } } }";
    let trail = gql(addr, EVENTS, json!({"t": first, "after": null}))["task"]["events"].clone();
    assert_eq!(trail["headVersion"], 4);
    assert_eq!(trail["pageInfo"]["hasNextPage"], true);
    let edges = trail["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 3);
    assert_eq!(edges[0]["node"]["kind"], "task_opened");
    assert_eq!(edges[0]["node"]["payload"]["type"], "task_opened");
    assert_eq!(edges[1]["node"]["kind"], "evidence_added");
    assert_eq!(edges[1]["node"]["actor"], "local");
    assert_eq!(edges[1]["node"]["payload"]["evidence_id"], "ev-1");
    let rest = gql(
        addr,
        EVENTS,
        json!({"t": first, "after": trail["pageInfo"]["endCursor"]}),
    )["task"]["events"]
        .clone();
    assert_eq!(rest["pageInfo"]["hasNextPage"], false);
    let last = &rest["edges"][0]["node"];
    assert_eq!(last["streamVersion"], 4);
    assert_eq!(last["payload"]["evidence_id"], "ev-3");

    // One event by seq and by hash: the same event the trail shows.
    let by_seq = gql(
        addr,
        "query($s: Int!) { event(seq: $s) { seq taskId hash prevHash kind } }",
        json!({"s": last["seq"]}),
    )["event"]
        .clone();
    assert_eq!(by_seq["hash"], last["hash"]);
    assert_eq!(by_seq["taskId"], first.as_str());
    let by_hash = gql(
        addr,
        "query($h: String!) { event(hash: $h) { seq } }",
        json!({"h": last["hash"]}),
    );
    assert_eq!(by_hash["event"]["seq"], last["seq"]);
    let missing = gql_error(addr, "{ task(id: \"no-such-task\") { id } }", json!({}));
    assert_eq!(missing["extensions"]["code"], "NOT_FOUND");
}

#[test]
fn a_stale_version_is_a_session_conflict_and_a_retry_returns_the_original() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let task = open_task(addr, "Does the sea level rise?");
    add(addr, &task, "tide-office.example.org", "SUPPORTS");

    // Version 1 is stale: the task is at 2.
    let vars = json!({"t": task, "s": "survey.example.org", "st": "OPPOSES", "v": 1});
    let error = gql_error(addr, ADD, vars);
    assert_eq!(
        error["extensions"],
        json!({"code": "SESSION_CONFLICT", "taskId": task, "currentVersion": 2,
               "suggestedAction": "research_summarize_state",
               "pendingActions": [{"tool": "research_summarize_state",
                   "reason": "the task is at version 2: read what changed, then retry with expected_version 2"}]}),
        "{error}"
    );
    assert_eq!(error["path"], json!(["addEvidence"]));

    // The same key and command: the original result, and nothing new in the ledger.
    let keyed =
        json!({"t": task, "s": "survey.example.org", "st": "OPPOSES", "v": 2, "k": "add-survey"});
    let first = gql(addr, ADD, keyed.clone())["addEvidence"].clone();
    assert_eq!(first["replayed"], false);
    assert_eq!(first["sessionVersion"], 3);
    let size = gql(addr, "{ ledger { size } }", json!({}))["ledger"]["size"].clone();
    // The expected version is not part of the command: a retry after the write succeeds even
    // though the task has moved on.
    let retry = gql(addr, ADD, keyed)["addEvidence"].clone();
    assert_eq!(retry["replayed"], true);
    assert_eq!(retry["sessionVersion"], 3);
    assert_eq!(
        retry["result"]["evidence_id"],
        first["result"]["evidence_id"]
    );
    assert_eq!(retry["state"], first["state"]);
    assert_eq!(
        gql(addr, "{ ledger { size } }", json!({}))["ledger"]["size"],
        size
    );
    // The same key for another command is refused.
    let reused = gql_error(
        addr,
        ADD,
        json!({"t": task, "s": "other.example.org", "st": "OPPOSES", "k": "add-survey"}),
    );
    assert_eq!(
        reused["extensions"]["code"], "IDEMPOTENCY_KEY_REUSED",
        "{reused}"
    );
    assert_eq!(reused["extensions"]["idempotencyKey"], "add-survey");

    // A refusal of the domain keeps its details: the workflow names what is due first.
    let early = gql_error(
        addr,
        "mutation($t: ID!) { generateConclusion(taskId: $t) { sessionVersion } }",
        json!({"t": task}),
    );
    assert_eq!(early["extensions"]["code"], "WORKFLOW_ORDER", "{early}");
    assert_eq!(
        early["extensions"]["pendingActions"][0]["tool"],
        "synthesis_screen_evidence"
    );
}

#[test]
fn each_limit_is_refused_with_its_name_and_value() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(
        data.path(),
        &[
            "--graphql-depth-levels-max",
            "5",
            "--graphql-complexity-points-max",
            "50",
            "--graphql-page-items-max",
            "3",
            "--graphql-request-bytes-max",
            "2048",
        ],
    );
    let addr = server.addr;
    let task = open_task(addr, "Does the sea level rise?");
    let limit = |error: &Value| {
        assert_eq!(error["extensions"]["code"], "LIMIT_EXCEEDED", "{error}");
        (
            error["extensions"]["limit"].as_str().unwrap().to_owned(),
            error["extensions"]["max"].as_u64().unwrap(),
            error["extensions"]["actual"].as_u64().unwrap(),
        )
    };

    // Depth: tasks › edges › node › conclusion › components › relevance is six levels.
    let (status, out) = post(
        addr,
        "{ tasks { edges { node { conclusion { components { relevance } } } } } }",
        json!({}),
    );
    assert_eq!(status, 200);
    assert!(out["data"].is_null(), "nothing ran: {out}");
    assert_eq!(
        limit(&out["errors"][0]),
        ("graphql_depth_levels_max".into(), 5, 6)
    );
    // Five levels run.
    gql(
        addr,
        "{ tasks(first: 1) { edges { node { conclusion { stance } } } } }",
        json!({}),
    );

    // Complexity: each page of three tasks costs 3 × (edges 1 + node 1 + 10 fields) = 36.
    const NODE: &str = "edges { node { id question status sessionVersion version researchDate mode openedAt openedBy summary } }";
    let both = format!("{{ a: tasks(first: 3) {{ {NODE} }} b: tasks(first: 3) {{ {NODE} }} }}");
    let (_, out) = post(addr, &both, json!({}));
    assert!(out["data"].is_null(), "nothing ran: {out}");
    assert_eq!(
        limit(&out["errors"][0]),
        ("graphql_complexity_points_max".into(), 50, 72)
    );
    gql(
        addr,
        &format!("{{ tasks(first: 3) {{ {NODE} }} }}"),
        json!({}),
    );
    // Fields that read storage cost more: five earlier states are 1 + 5 × (10 + 1) points.
    let states: String = (1..=5)
        .map(|i| format!("s{i}: state(atVersion: 1) {{ version }} "))
        .collect();
    let (_, out) = post(
        addr,
        &format!("query($t: ID!) {{ task(id: $t) {{ {states} }} }}"),
        json!({"t": task}),
    );
    assert_eq!(
        limit(&out["errors"][0]),
        ("graphql_complexity_points_max".into(), 50, 56)
    );

    // Page size, for the index and for an audit trail.
    let error = gql_error(addr, "{ tasks(first: 4) { edges { cursor } } }", json!({}));
    assert_eq!(limit(&error), ("graphql_page_items_max".into(), 3, 4));
    let error = gql_error(
        addr,
        "query($t: ID!) { task(id: $t) { events(first: 4) { headVersion } } }",
        json!({"t": task}),
    );
    assert_eq!(limit(&error), ("graphql_page_items_max".into(), 3, 4));
    assert_eq!(error["path"], json!(["task", "events"]));

    // Request size.
    let padding = "x".repeat(3000);
    let body = json!({"query": format!("{{ ledger {{ size }} }} # {padding}")}).to_string();
    let (status, body) = request(
        addr,
        "POST",
        "/graphql",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    );
    assert_eq!(status, 413);
    let out: Value = serde_json::from_slice(&body).unwrap();
    let (name, max, actual) = limit(&out["errors"][0]);
    assert_eq!((name.as_str(), max), ("request_bytes_max", 2048));
    assert!(actual > 2048);
}

/// A negative count — a seq, a tree size, a checkpoint entry, an expected version, a citation
/// count — is refused naming its argument, as every other bad argument is, not with the
/// GraphQL library's "Failed to parse \"Int\"" and no name.
#[test]
fn a_negative_count_is_refused_naming_its_argument() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let task = open_task(addr, "Does the sea level rise?");
    for (query, field) in [
        ("{ event(seq: -1) { seq } }", "seq"),
        ("{ inclusionProof(seq: -1) { __typename } }", "seq"),
        (
            "{ inclusionProof(seq: 0, treeSize: -2) { __typename } }",
            "treeSize",
        ),
        (
            "{ consistencyProof(from: -1, to: 1) { __typename } }",
            "from",
        ),
        ("{ consistencyProof(from: 1, to: -1) { __typename } }", "to"),
        (
            "{ ledger { checkpoints(beforeEntry: -1) { entry } } }",
            "beforeEntry",
        ),
    ] {
        let error = gql_error(addr, query, json!({}));
        assert_eq!(
            error["extensions"]["code"], "INVALID_ARGUMENT",
            "{query}: {error}"
        );
        assert_eq!(error["extensions"]["field"], field, "{query}: {error}");
        assert!(
            error["message"].as_str().unwrap().contains("at least 0"),
            "{query}: {error}"
        );
    }
    let error = gql_error(addr, ADD, json!({"t": task, "s": "a.example.org", "v": -1}));
    assert_eq!(error["extensions"]["code"], "INVALID_ARGUMENT", "{error}");
    assert_eq!(error["extensions"]["field"], "expected_version", "{error}");
    // The largest GraphQL Int is still a count like any other.
    let error = gql_error(addr, "{ event(seq: 2147483647) { seq } }", json!({}));
    assert_eq!(error["extensions"]["code"], "NOT_FOUND", "{error}");
}

/// A WebSocket speaking graphql-transport-ws to the server, with a read timeout so a missing
/// message fails the test instead of hanging it.
fn websocket(addr: SocketAddr, origin: Option<&str>) -> tungstenite::Result<WebSocket<TcpStream>> {
    let mut socket = connect(
        addr,
        &origin
            .map(|o| ("Origin", o))
            .into_iter()
            .collect::<Vec<_>>(),
    )?;
    send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    Ok(socket)
}

/// The handshake alone, with `headers`: the caller sends `connection_init`.
pub(crate) fn connect(
    addr: SocketAddr,
    headers: &[(&str, &str)],
) -> tungstenite::Result<WebSocket<TcpStream>> {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let uri = format!("ws://{addr}/graphql/ws").parse().unwrap();
    let mut request = ClientRequestBuilder::new(uri).with_sub_protocol("graphql-transport-ws");
    for (name, value) in headers {
        request = request.with_header(*name, *value);
    }
    let (socket, response) = tungstenite::client(request, stream).map_err(|e| match e {
        tungstenite::HandshakeError::Failure(e) => e,
        tungstenite::HandshakeError::Interrupted(_) => panic!("the handshake was interrupted"),
    })?;
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "graphql-transport-ws"
    );
    Ok(socket)
}

pub(crate) fn send(socket: &mut WebSocket<TcpStream>, message: Value) {
    socket.send(Message::text(message.to_string())).unwrap();
}

/// The next protocol message, skipping pings.
pub(crate) fn receive(socket: &mut WebSocket<TcpStream>) -> Value {
    loop {
        match socket.read().expect("a message before the timeout") {
            Message::Text(text) => {
                let value: Value = serde_json::from_str(text.as_str()).unwrap();
                if value["type"] == "ping" {
                    send(socket, json!({"type": "pong"}));
                    continue;
                }
                return value;
            }
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The next `next` message of a subscription.
fn next_of(socket: &mut WebSocket<TcpStream>, id: &str) -> Value {
    let message = receive(socket);
    assert_eq!(message["type"], "next", "{message}");
    assert_eq!(message["id"], id, "{message}");
    assert!(message["payload"].get("errors").is_none(), "{message}");
    message["payload"]["data"].clone()
}

#[test]
fn subscribers_receive_the_events_and_conclusions_other_writers_append() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let task = open_task(addr, "Does the sea level rise?");
    let other = open_task(addr, "Do glaciers retreat?");
    // Subscribing from the ledger's size as it is now: whatever is appended from here on is
    // delivered, however late the server starts the subscription.
    let size = gql(addr, "{ ledger { size } }", json!({}))["ledger"]["size"].clone();

    let mut socket = websocket(addr, None).unwrap();
    send(
        &mut socket,
        json!({"id": "events", "type": "subscribe", "payload": {
            "query": "subscription($t: ID, $from: Int) { events(taskId: $t, fromSeq: $from) {
                seq taskId sessionVersion kind actor hash event { prevHash payload } } }",
            "variables": {"t": task, "from": size}}}),
    );
    send(
        &mut socket,
        json!({"id": "conclusions", "type": "subscribe", "payload": {
            "query": "subscription($from: Int) { conclusions(fromSeq: $from) {
                taskId sessionVersion conclusion { conclusionId stance confidence current stale evidence { evidenceId } issued { seq } } } }",
            "variables": {"from": size}}}),
    );

    // Another writer, on connections of its own: first to the other task, which the events
    // subscription does not follow, then to the task it does.
    add(addr, &other, "ice-survey.example.org", "SUPPORTS");
    add(addr, &task, "tide-office.example.org", "SUPPORTS");
    let notice = next_of(&mut socket, "events")["events"].clone();
    assert_eq!(notice["taskId"], task.as_str());
    assert_eq!(notice["kind"], "evidence_added");
    assert_eq!(notice["sessionVersion"], 2);
    assert_eq!(notice["actor"], "local");
    assert_eq!(notice["event"]["payload"]["evidence_id"], "ev-1");
    let trail = gql(
        addr,
        "query($t: ID!) { task(id: $t) { events(first: 2) { edges { node { seq hash } } } } }",
        json!({"t": task}),
    );
    assert_eq!(
        trail["task"]["events"]["edges"][1]["node"]["hash"],
        notice["hash"]
    );
    assert_eq!(
        trail["task"]["events"]["edges"][1]["node"]["seq"],
        notice["seq"]
    );

    // The rest of the workflow, to a verdict; every event arrives in order.
    for mutation in [
        "screenEvidence(taskId: $t, decisions: [{evidenceId: \"ev-1\", adopt: true}])",
        "runConflictResolution(taskId: $t)",
        "buildDecisionMatrix(taskId: $t)",
        "generateConclusion(taskId: $t)",
    ] {
        gql(
            addr,
            &format!("mutation($t: ID!) {{ {mutation} {{ sessionVersion }} }}"),
            json!({"t": task}),
        );
    }
    let mut kinds = Vec::new();
    let mut conclusion = None;
    while kinds.len() < 4 {
        let message = receive(&mut socket);
        assert_eq!(message["type"], "next", "{message}");
        match message["id"].as_str() {
            Some("events") => {
                let event = &message["payload"]["data"]["events"];
                assert_eq!(event["taskId"], task.as_str());
                kinds.push(event["kind"].as_str().unwrap().to_owned());
            }
            Some("conclusions") => {
                conclusion = Some(message["payload"]["data"]["conclusions"].clone())
            }
            other => panic!("a message for {other:?}"),
        }
    }
    assert_eq!(
        kinds,
        [
            "evidence_screened",
            "conflicts_adjudicated",
            "decision_matrix_built",
            "conclusion_issued"
        ]
    );
    let conclusion = match conclusion {
        Some(c) => c,
        None => next_of(&mut socket, "conclusions")["conclusions"].clone(),
    };
    assert_eq!(conclusion["taskId"], task.as_str());
    assert_eq!(conclusion["sessionVersion"], 6);
    assert_eq!(conclusion["conclusion"]["conclusionId"], "cl-1");
    assert_eq!(conclusion["conclusion"]["current"], true);
    assert_eq!(conclusion["conclusion"]["stale"], false);
    assert_eq!(
        conclusion["conclusion"]["evidence"],
        json!([{"evidenceId": "ev-1"}])
    );
    let head = gql(
        addr,
        "query($t: ID!) { task(id: $t) { status conclusion { conclusionId confidence } } }",
        json!({"t": task}),
    );
    assert_eq!(head["task"]["status"], "CONCLUDED");
    assert_eq!(
        head["task"]["conclusion"]["confidence"],
        conclusion["conclusion"]["confidence"]
    );

    send(&mut socket, json!({"id": "events", "type": "complete"}));
    // A subscription still open does not hold the server up when it is told to stop.
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    drop(socket);
}

#[test]
fn graphiql_is_served_and_other_origins_and_content_types_are_refused() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let (status, page) = request(addr, "GET", "/graphql", &[], b"");
    assert_eq!(status, 200);
    let page = String::from_utf8(page).unwrap();
    // GraphiQL and what it runs on come from this server, not from elsewhere.
    assert!(
        page.contains("/console/vendor/graphiql-3.9.0/graphiql.min.js"),
        "{page}"
    );
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    let (status, start) = request(addr, "GET", "/console/js/graphiql-start.js", &[], b"");
    assert_eq!(status, 200);
    let start = String::from_utf8(start).unwrap();
    assert!(start.contains("GraphiQL.createFetcher"), "{start}");
    assert!(start.contains("'/graphql/ws'"), "{start}");

    // A form post, which a page of any site could send, is not a GraphQL request here.
    let (status, body) = request(
        addr,
        "POST",
        "/graphql",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        b"query=mutation%20%7B%20closeTask%20%7D",
    );
    assert_eq!(status, 415);
    let out: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(out["errors"][0]["extensions"]["code"], "INVALID_ARGUMENT");
    let body = json!({"query": "{ ledger { size } }"}).to_string();
    let (status, body) = request(
        addr,
        "POST",
        "/graphql",
        &[
            ("Content-Type", "application/json"),
            ("Origin", "http://elsewhere.example.org"),
        ],
        body.as_bytes(),
    );
    assert_eq!(status, 403);
    let out: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(out["errors"][0]["extensions"]["code"], "FORBIDDEN");
    match websocket(addr, Some("http://elsewhere.example.org")) {
        Err(tungstenite::Error::Http(response)) => assert_eq!(response.status(), 403),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a page of another origin opened a WebSocket"),
    }
    // The server's own pages may.
    let own = format!("http://{addr}");
    websocket(addr, Some(&own)).unwrap();
}

fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

#[test]
fn auditors_export_verify_and_prove_over_http() {
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let task = open_task(addr, "Does the sea level rise?");
    let other = open_task(addr, "Do glaciers retreat?");
    add(addr, &task, "tide-office.example.org", "SUPPORTS");
    add(addr, &other, "ice-survey.example.org", "SUPPORTS");
    let ledger = gql(
        addr,
        "{ ledger { size publicKey keyFingerprint } }",
        json!({}),
    )["ledger"]
        .clone();
    let public_key = ledger["publicKey"].as_str().unwrap().to_owned();

    // No checkpoint covers the events yet: a proof is not found, and says why.
    let error = gql_error(addr, "{ inclusionProof(seq: 0) { seq } }", json!({}));
    assert_eq!(error["extensions"]["code"], "NOT_FOUND", "{error}");

    // One task's bundle, checked offline against the key the API gave.
    let (status, bundle) = get_json(addr, &format!("/v1/export?task={task}"));
    assert_eq!(status, 200, "{bundle}");
    let file = out.path().join("task.json");
    write_json(&file, &bundle);
    let check = super::run(
        out.path(),
        &[
            "verify-bundle",
            file.to_str().unwrap(),
            "--public-key",
            &public_key,
        ],
    );
    assert!(check.status.success(), "{}", super::stdout(&check));
    assert!(
        super::stdout(&check).contains("valid: 2 events of 1 task(s)"),
        "{}",
        super::stdout(&check)
    );

    // The whole ledger without content, checked against the key inside it.
    let (status, bundle) = get_json(addr, "/v1/export?all=true&without_content=true");
    assert_eq!(status, 200, "{bundle}");
    assert_eq!(bundle["content"], json!([]));
    let file = out.path().join("all.json");
    write_json(&file, &bundle);
    let check = super::run(out.path(), &["verify-bundle", file.to_str().unwrap()]);
    assert!(check.status.success(), "{}", super::stdout(&check));
    let stdout = super::stdout(&check);
    assert!(
        stdout.contains(ledger["keyFingerprint"].as_str().unwrap()),
        "{stdout}"
    );
    assert!(stdout.contains("valid: 4 events of 2 task(s)"), "{stdout}");

    // A bundle that was tampered with on the way is not.
    let mut forged = bundle.clone();
    forged["events"].as_array_mut().unwrap().remove(1);
    write_json(&file, &forged);
    let check = super::run(out.path(), &["verify-bundle", file.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(1), "{}", super::stdout(&check));

    let (status, error) = get_json(addr, "/v1/export?task=no-such-task");
    assert_eq!(status, 404);
    assert_eq!(error["error"], "not_found");
    let (status, error) = get_json(addr, "/v1/export?everything=yes");
    assert_eq!(status, 400);
    assert_eq!(error["error"], "invalid_argument");

    // The export wrote a checkpoint covering every event: proofs stand on it, and the proof
    // file checks offline.
    let proofs = gql(
        addr,
        "{ verify { intact size checkpointsChecked failure { seq } }
           ledger { root latestCheckpoint { treeSize root } }
           inclusionProof(seq: 2) { seq treeSize eventHash checkpoint { treeSize } file } }",
        json!({}),
    );
    assert_eq!(proofs["verify"]["intact"], true);
    assert_eq!(proofs["verify"]["size"], 4);
    assert_eq!(proofs["ledger"]["latestCheckpoint"]["treeSize"], 4);
    assert_eq!(
        proofs["ledger"]["latestCheckpoint"]["root"],
        proofs["ledger"]["root"]
    );
    let event = gql(addr, "{ event(seq: 2) { hash } }", json!({}));
    assert_eq!(
        proofs["inclusionProof"]["eventHash"],
        event["event"]["hash"]
    );
    let proof = out.path().join("proof.json");
    write_json(&proof, &proofs["inclusionProof"]["file"]);
    let check = super::run(
        out.path(),
        &[
            "verify-proof",
            proof.to_str().unwrap(),
            "--public-key",
            &public_key,
        ],
    );
    assert!(check.status.success(), "{}", super::stdout(&check));

    // The ledger grows, the next export checkpoints it again, and the two checkpoints are
    // proved consistent: the log only grew between them.
    add(addr, &task, "survey.example.org", "SUPPORTS");
    let (status, _) = get_json(addr, &format!("/v1/export?task={task}"));
    assert_eq!(status, 200);
    let grown = gql(
        addr,
        "{ ledger { checkpoints { treeSize } }
           consistencyProof(from: 4, to: 5) { firstSize secondSize firstCheckpoint { treeSize } file } }",
        json!({}),
    );
    assert_eq!(
        grown["ledger"]["checkpoints"],
        json!([{"treeSize": 4}, {"treeSize": 5}])
    );
    assert_eq!(grown["consistencyProof"]["firstCheckpoint"]["treeSize"], 4);
    write_json(&proof, &grown["consistencyProof"]["file"]);
    let check = super::run(
        out.path(),
        &[
            "verify-proof",
            proof.to_str().unwrap(),
            "--public-key",
            &public_key,
        ],
    );
    assert!(check.status.success(), "{}", super::stdout(&check));
    assert!(super::stdout(&check).contains("the ledger only grew"));
    let error = gql_error(
        addr,
        "{ consistencyProof(from: 4, to: 6) { firstSize } }",
        json!({}),
    );
    assert_eq!(error["extensions"]["code"], "NOT_FOUND", "{error}");
}

#[test]
fn a_subscriber_receives_the_event_an_mcp_tool_call_appends() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let addr = server.addr;
    let task = open_task(addr, "Is Arctic sea ice thinning?");
    // From the ledger's size now, so the event is delivered however late the subscription
    // starts on the server.
    let size = gql(addr, "{ ledger { size } }", json!({}))["ledger"]["size"].clone();
    let mut socket = websocket(addr, None).unwrap();
    send(
        &mut socket,
        json!({"id": "trail", "type": "subscribe", "payload": {
            "query": "subscription($t: ID, $from: Int) { events(taskId: $t, fromSeq: $from) { seq taskId sessionVersion kind actor event { payload } } }",
            "variables": {"t": task, "from": size}}}),
    );

    // An assistant adds evidence through the MCP endpoint (2026-07-28: one request, no session).
    let call = json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {
            "name": "retrieval_add_evidence",
            "arguments": {
                "task_id": task, "source": "polar-institute.example.org",
                "publish_date": "2024-11-02", "source_type": "academic_paper",
                "content": "Submarine sonar records show a 40% decline in mean ice thickness.",
                "stance": "supports",
            },
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "assistant-over-mcp", "version": "1"},
            },
        },
    });
    let (status, body) = request(
        addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "retrieval_add_evidence"),
        ],
        call.to_string().as_bytes(),
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"isError\":false"), "{body}");

    let notice = next_of(&mut socket, "trail")["events"].clone();
    assert_eq!(notice["taskId"], task.as_str());
    assert_eq!(notice["kind"], "evidence_added");
    assert_eq!(notice["sessionVersion"], 2);
    assert_eq!(notice["actor"], "assistant-over-mcp");
    assert_eq!(
        notice["event"]["payload"]["source"],
        "polar-institute.example.org"
    );
    server.stop();
}
