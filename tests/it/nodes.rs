//! Several `serve` nodes on one PostgreSQL database, each with a data directory of its own and
//! the same signing key: any node takes any write, every node reads it, subscriptions on every
//! node see every event in seq order, and a node killed under load from both loses nothing
//! acknowledged. Run whenever PostgreSQL is installed; without it these tests say so and pass,
//! unless `RESEARCH_LEDGER_REQUIRE_POSTGRES` is set.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::postgres::cluster_or_skip;

use super::graphql::{connect, post_as, receive, send};
use super::server::{Server, try_request};
use super::{run_with_env, stderr};

/// Data directories over one database, the second and later given the first one's key.
struct Nodes {
    url: String,
    dirs: Vec<tempfile::TempDir>,
}

impl Nodes {
    fn new(url: String, count: usize) -> Nodes {
        let dirs: Vec<_> = (0..count).map(|_| tempfile::tempdir().unwrap()).collect();
        // The first run makes the key; every node is given that one.
        let out = run_with_env(
            dirs[0].path(),
            &["checkpoint"],
            &[("RESEARCH_LEDGER_STORAGE_URL", &url)],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        for dir in &dirs[1..] {
            copy_key(dirs[0].path(), dir.path());
        }
        Nodes { url, dirs }
    }

    fn start(&self, i: usize) -> Server {
        Server::start_with(
            self.dirs[i].path(),
            &[],
            &[("RESEARCH_LEDGER_STORAGE_URL", &self.url)],
        )
    }
}

/// Gives the node in `to` the signing key of the node in `from`: every node on one database
/// signs with the key its checkpoint log names.
pub(crate) fn copy_key(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("ledger/keys")).unwrap();
    std::fs::copy(
        from.join("ledger/keys/signing.key"),
        to.join("ledger/keys/signing.key"),
    )
    .unwrap();
}

fn gql(addr: SocketAddr, query: &str, variables: Value) -> Value {
    let (status, out) = post_as(addr, None, query, variables);
    assert_eq!(status, 200, "{out}");
    assert!(out.get("errors").is_none(), "{out}");
    out["data"].clone()
}

const OPEN: &str = "mutation($q: String!, $k: String) { openTask(idempotencyKey: $k, input: {question: $q, researchDate: \"2025-06-30\"}) { taskId sessionVersion replayed } }";

const ADD: &str = "mutation($t: ID!, $s: String!, $k: String) {
    addEvidence(taskId: $t, idempotencyKey: $k, input: {
        source: $s, publishDate: \"2025-03-01\", sourceType: GOVERNMENT,
        content: $s, stance: SUPPORTS }) { taskId sessionVersion replayed }
}";

const EVIDENCE: &str = "query($t: ID!) { task(id: $t) { version evidence { source } } }";

/// The task as `addr` reads it once it is at `version` (a node reads another's write after its
/// follower has read it from the database); the last read if it never gets there.
fn task_at(addr: SocketAddr, task: &str, version: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let read = gql(addr, EVIDENCE, json!({"t": task}))["task"].clone();
        if read["version"].as_u64() >= Some(version) || Instant::now() > deadline {
            return read;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn subscribe_all(addr: SocketAddr) -> tungstenite::WebSocket<std::net::TcpStream> {
    let mut socket = connect(addr, &[]).unwrap();
    send(
        &mut socket,
        json!({"type": "connection_init", "payload": {}}),
    );
    assert_eq!(receive(&mut socket)["type"], "connection_ack");
    send(
        &mut socket,
        json!({"id": "all", "type": "subscribe", "payload": {
            "query": "subscription { events(fromSeq: 0) { seq taskId sessionVersion hash } }"}}),
    );
    socket
}

#[test]
fn a_task_opened_on_one_node_is_written_on_the_other_and_read_and_followed_on_both() {
    let Some(cluster) = cluster_or_skip("a_task_opened_on_one_node") else {
        return;
    };
    let nodes = Nodes::new(cluster.create_database().unwrap(), 2);
    let (a, b) = (nodes.start(0), nodes.start(1));
    let mut sockets = [subscribe_all(a.addr), subscribe_all(b.addr)];

    let opened = gql(a.addr, OPEN, json!({"q": "Does the sea level rise?"}));
    let task = opened["openTask"]["taskId"].as_str().unwrap().to_owned();
    // Written on the other node, which has not seen the task open unless it follows.
    let added = gql(
        b.addr,
        ADD,
        json!({"t": task, "s": "tide-office.example.org"}),
    );
    assert_eq!(added["addEvidence"]["sessionVersion"], 2, "{added}");
    let added = gql(
        a.addr,
        ADD,
        json!({"t": task, "s": "ice-survey.example.org"}),
    );
    assert_eq!(added["addEvidence"]["sessionVersion"], 3, "{added}");
    // The same idempotency key on the other node: the first answer, nothing written twice.
    let key = json!({"t": task, "s": "gauge.example.org", "k": "gauge-1"});
    let first = gql(b.addr, ADD, key.clone());
    let again = gql(a.addr, ADD, key);
    assert_eq!(again["addEvidence"]["replayed"], true, "{again}");
    assert_eq!(
        again["addEvidence"]["sessionVersion"],
        first["addEvidence"]["sessionVersion"]
    );

    for node in [&a, &b] {
        let read = task_at(node.addr, &task, 4);
        assert_eq!(read["version"], 4, "{read}");
        let sources: Vec<&str> = read["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["source"].as_str().unwrap())
            .collect();
        assert_eq!(
            sources,
            [
                "tide-office.example.org",
                "ice-survey.example.org",
                "gauge.example.org"
            ]
        );
    }
    // Both subscriptions: every event, in seq order, with the same hashes.
    let mut seen: Vec<Vec<Value>> = Vec::new();
    for socket in &mut sockets {
        let mut events = Vec::new();
        for seq in 0..4u64 {
            let message = receive(socket);
            assert_eq!(message["type"], "next", "{message}");
            let event = message["payload"]["data"]["events"].clone();
            assert_eq!(event["seq"], seq, "{event}");
            assert_eq!(event["taskId"], task.as_str());
            assert_eq!(event["sessionVersion"], seq + 1);
            events.push(event["hash"].clone());
        }
        seen.push(events);
    }
    assert_eq!(seen[0], seen[1]);
    a.stop();
    b.stop();
    let out = run_with_env(
        nodes.dirs[1].path(),
        &["verify", "--json"],
        &[("RESEARCH_LEDGER_STORAGE_URL", &nodes.url)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_node_with_another_signing_key_is_refused() {
    let Some(cluster) = cluster_or_skip("a_node_with_another_signing_key") else {
        return;
    };
    let nodes = Nodes::new(cluster.create_database().unwrap(), 1);
    let other = tempfile::tempdir().unwrap();
    let out = run_with_env(
        other.path(),
        &["serve", "--listen", "127.0.0.1:0"],
        &[("RESEARCH_LEDGER_STORAGE_URL", &nodes.url)],
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("same signing key"), "{err}");
}

/// One client: writes to its task with a key per write, on node `prefer` first and the other
/// when that one fails, until `stop`; returns every write acknowledged, by key.
fn client(
    addrs: [SocketAddr; 2],
    prefer: usize,
    task: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        let mut dead = [false; 2];
        for i in 0.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let key = format!("{task}-{i}");
            let body = json!({"query": ADD, "variables": {"t": task, "s": key, "k": key}});
            let body = body.to_string();
            // Each write is retried with its key until a node acknowledges it.
            for attempt in 0.. {
                assert!(attempt < 1000, "{key} never acknowledged");
                let node = (prefer + i + attempt) % 2;
                if dead[node] {
                    continue;
                }
                let answer = try_request(
                    addrs[node],
                    "POST",
                    "/graphql",
                    &[("Content-Type", "application/json")],
                    body.as_bytes(),
                );
                match answer {
                    Ok((200, out)) => {
                        let out: Value = serde_json::from_slice(&out).unwrap();
                        if out.get("errors").is_none() {
                            acknowledged.push(key.clone());
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => {
                        dead[node] = try_request(addrs[node], "GET", "/health", &[], b"").is_err();
                    }
                }
            }
        }
        acknowledged
    })
}

#[test]
fn a_node_killed_under_load_from_both_loses_nothing_acknowledged() {
    let Some(cluster) = cluster_or_skip("a_node_killed_under_load") else {
        return;
    };
    let nodes = Nodes::new(cluster.create_database().unwrap(), 2);
    let (a, b) = (nodes.start(0), nodes.start(1));
    let addrs = [a.addr, b.addr];
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<String> = (0..4)
        .map(|t| {
            let opened = gql(addrs[t % 2], OPEN, json!({"q": format!("Question {t}?")}));
            opened["openTask"]["taskId"].as_str().unwrap().to_owned()
        })
        .collect();
    let clients: Vec<_> = tasks
        .iter()
        .enumerate()
        .map(|(t, task)| client(addrs, t % 2, task.clone(), Arc::clone(&stop)))
        .collect();
    // Once both nodes have taken writes, the second dies as a crash would.
    let size = |addr| super::server::ledger_size(addr);
    let deadline = Instant::now() + Duration::from_secs(60);
    while size(a.addr) < 60 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    b.kill();
    let at_kill = size(a.addr);
    while size(a.addr) < at_kill + 40 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let acknowledged: Vec<Vec<String>> = clients.into_iter().map(|c| c.join().unwrap()).collect();

    // Every acknowledged write is in its task exactly once, as the surviving node reads it.
    let mut total = 0;
    for (task, keys) in tasks.iter().zip(&acknowledged) {
        let read = task_at(a.addr, task, 1 + keys.len() as u64);
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for e in read["evidence"].as_array().unwrap() {
            *counts.entry(e["source"].as_str().unwrap()).or_default() += 1;
        }
        for key in keys {
            assert_eq!(counts.get(key.as_str()), Some(&1), "{key} in {read}");
        }
        total += keys.len();
    }
    assert!(total >= 100, "{total} writes acknowledged");
    a.stop();
    let out = run_with_env(
        nodes.dirs[1].path(),
        &["verify", "--json"],
        &[("RESEARCH_LEDGER_STORAGE_URL", &nodes.url)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Stops (`STOP`) or resumes (`CONT`) every process of the cluster in `data`: its postmaster
/// and the backends it started. A stopped server keeps its connections open and answers
/// nothing, as one does that hangs or sits behind a network partition.
fn signal_cluster(data: &Path, signal: &str) {
    let pid_file = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
    let postmaster = pid_file.lines().next().unwrap().trim().to_owned();
    let children = std::process::Command::new("pgrep")
        .args(["-P", &postmaster])
        .output()
        .unwrap();
    let mut pids = vec![postmaster];
    pids.extend(
        String::from_utf8_lossy(&children.stdout)
            .split_whitespace()
            .map(str::to_owned),
    );
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .args(&pids)
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pids:?}");
}

#[test]
fn health_checks_waiting_on_a_database_that_does_not_answer_hold_no_async_thread() {
    // `/health` reads the ledger's latest checkpoint, on PostgreSQL a query. Load balancers
    // ask it often; when the database stops answering, those checks wait, and must wait off
    // the server's async threads, or the node stops serving everything else with them.
    if cluster_or_skip("health_checks_waiting").is_none() {
        return;
    }
    let cluster = test_support::postgres::PgCluster::start().unwrap();
    let url = cluster.create_database().unwrap();
    let nodes = Nodes::new(url, 1);
    let server = nodes.start(0);
    let addr = server.addr;
    let (status, _) = super::server::request(addr, "GET", "/health", &[], b"");
    assert_eq!(status, 200);
    signal_cluster(&cluster.data_dir(), "STOP");
    // More waiting checks than the server has async threads (one a core).
    let checks: Vec<_> = (0..std::thread::available_parallelism().map_or(4, |n| n.get()) * 2)
        .map(|_| {
            std::thread::spawn(move || {
                let stream = std::net::TcpStream::connect(addr).unwrap();
                stream.set_read_timeout(None).unwrap();
                super::server::request_on(stream, "GET", "/health", &[], b"").0
            })
        })
        .collect();
    // Let the checks reach the server and start waiting on the database.
    std::thread::sleep(Duration::from_millis(500));
    let console = super::server::try_request(addr, "GET", "/", &[], b"");
    signal_cluster(&cluster.data_dir(), "CONT");
    let (status, _) = console.expect("the console page was not served while checks waited");
    assert_eq!(status, 200);
    for check in checks {
        assert_eq!(check.join().unwrap(), 200);
    }
    server.stop();
}
