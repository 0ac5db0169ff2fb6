//! Crash under load: `serve` takes writes over HTTP from many clients at once, is killed with
//! SIGKILL at a seeded random moment and restarted on the same data directory; the clients
//! retry every write they got no answer to, with the same idempotency key. Afterwards every
//! write a client saw acknowledged is there as it was acknowledged, a retry of it answers with
//! the original result, nothing was written twice, and the ledger verifies.
//!
//! Each round prints `crash seed N` before it starts, and every failure names the seed.
//! `RESEARCH_LEDGER_CRASH_SEEDS=N[,M…]` runs those seeds; `RESEARCH_LEDGER_CRASH_ROUNDS=K` runs
//! K rounds from the fixed base seed (4 by default).
//!
//! The moment of the kill is a seeded number of acknowledged writes followed by a seeded delay
//! of up to a few milliseconds, so it falls while writes are in flight on a fast machine and on
//! a slow one alike; a round may kill the server twice, so recovery also runs on a log that was
//! itself recovered.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ledger::storage::memory::SplitMix64;
use serde_json::{Value, json};

use super::server::{Server, try_request};

const BASE_SEED: u64 = 0x5EED_C4A5_0000;
const DEFAULT_ROUNDS: u64 = 4;
const CLIENTS: usize = 8;
const TASKS_PER_CLIENT: usize = 2;
const ADDS_PER_TASK: usize = 4;
const SHARED_ADDS_PER_CLIENT: usize = 3;
const SOURCE_TYPES: [&str; 4] = ["government", "academic_paper", "news_original", "blog"];

#[test]
fn sigkill_under_concurrent_writes_loses_no_acknowledged_write_and_duplicates_nothing() {
    for seed in seeds() {
        round(seed);
    }
}

/// The seeds to run: `RESEARCH_LEDGER_CRASH_SEEDS`, or `RESEARCH_LEDGER_CRASH_ROUNDS` of them
/// from the base seed.
fn seeds() -> Vec<u64> {
    if let Ok(list) = std::env::var("RESEARCH_LEDGER_CRASH_SEEDS") {
        return list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse()
                    .unwrap_or_else(|_| panic!("RESEARCH_LEDGER_CRASH_SEEDS: {s:?} is no seed"))
            })
            .collect();
    }
    let rounds = match std::env::var("RESEARCH_LEDGER_CRASH_ROUNDS") {
        Ok(n) => n
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("RESEARCH_LEDGER_CRASH_ROUNDS: {n:?} is no count")),
        Err(_) => DEFAULT_ROUNDS,
    };
    (0..rounds).map(|i| BASE_SEED + i).collect()
}

/// The task an evidence item goes to.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// One of the client's own tasks.
    Own(usize),
    /// The task every client adds to.
    Shared,
}

/// One write of a client's plan.
#[derive(Debug, Clone, Copy)]
enum Step {
    Open { task: usize },
    Add { target: Target, item: usize },
}

/// A write the server answered with a result.
#[derive(Debug, Clone)]
struct Acked {
    tool: &'static str,
    arguments: Value,
    result: Value,
    /// How many kills the server had been through when it answered: writes acknowledged
    /// before the last kill are the ones a crash could lose.
    epoch: usize,
}

/// One client: its plan of writes, sent one after another, and what it was told.
#[derive(Debug)]
struct Client {
    id: usize,
    seed: u64,
    steps: Vec<Step>,
    /// The next step to send; every one before it was acknowledged.
    next: usize,
    /// Whether the step at `next` was sent and the server went away (or could not be reached)
    /// before it answered.
    in_doubt: bool,
    /// The ids of the client's own tasks, once their opening was acknowledged.
    tasks: Vec<Option<String>>,
    /// What each acknowledged step was answered, by step.
    acked: Vec<Option<Acked>>,
    /// Retries of a write left in doubt: how many found it already written (`replayed`), and
    /// how many wrote it.
    retried_replayed: usize,
    retried_written: usize,
}

impl Client {
    /// A client whose plan opens its tasks and adds evidence to them and to the shared task,
    /// in a seeded order (a task's opening always comes before its evidence).
    fn new(id: usize, seed: u64, rng: &mut SplitMix64) -> Client {
        let mut queues: Vec<VecDeque<Step>> = (0..TASKS_PER_CLIENT)
            .map(|task| {
                std::iter::once(Step::Open { task })
                    .chain((0..ADDS_PER_TASK).map(move |item| Step::Add {
                        target: Target::Own(task),
                        item,
                    }))
                    .collect()
            })
            .collect();
        queues.push(
            (0..SHARED_ADDS_PER_CLIENT)
                .map(|item| Step::Add {
                    target: Target::Shared,
                    item,
                })
                .collect(),
        );
        let mut steps = Vec::new();
        loop {
            let open: Vec<usize> = (0..queues.len())
                .filter(|&q| !queues[q].is_empty())
                .collect();
            if open.is_empty() {
                break;
            }
            let q = open[rng.below(open.len() as u64) as usize];
            steps.extend(queues[q].pop_front());
        }
        Client {
            id,
            seed,
            acked: vec![None; steps.len()],
            steps,
            next: 0,
            in_doubt: false,
            tasks: vec![None; TASKS_PER_CLIENT],
            retried_replayed: 0,
            retried_written: 0,
        }
    }

    fn key(&self, step: usize) -> String {
        format!("crash-{}-client-{}-step-{step}", self.seed, self.id)
    }

    /// The tool and the arguments of a step: the same every time it is sent.
    fn call(&self, step: usize, shared: &str) -> (&'static str, Value) {
        let key = self.key(step);
        match self.steps[step] {
            Step::Open { task } => (
                "research_open_task",
                json!({
                    "question": question(self.seed, Some((self.id, task))),
                    "research_date": "2026-01-15",
                    "idempotency_key": key,
                }),
            ),
            Step::Add { target, item } => {
                let task_id = match target {
                    Target::Own(task) => self.tasks[task]
                        .clone()
                        .expect("a task is opened before evidence is added to it"),
                    Target::Shared => shared.to_owned(),
                };
                (
                    "retrieval_add_evidence",
                    json!({
                        "task_id": task_id,
                        "source": format!("client-{}.example.org", self.id),
                        "publish_date": format!("2025-{:02}-{:02}", 1 + item % 12, 1 + self.id),
                        "source_type": SOURCE_TYPES[item % SOURCE_TYPES.len()],
                        "content": content(self.id, target, item),
                        "stance": if item % 2 == 0 { "supports" } else { "opposes" },
                        "relevance": 0.5,
                        "idempotency_key": key,
                    }),
                )
            }
        }
    }

    /// Sends the rest of the plan, in order, until it is done or the server goes away (then
    /// the step in flight stays in doubt, to be retried with the same key). Any answer other
    /// than a result is a failure.
    fn run(
        &mut self,
        addr: SocketAddr,
        shared: &str,
        epoch: usize,
        progress: &Progress,
    ) -> Result<(), String> {
        while self.next < self.steps.len() {
            let step = self.next;
            let (tool, arguments) = self.call(step, shared);
            let retry = self.in_doubt;
            self.in_doubt = true;
            let Ok((status, body)) = call_tool(addr, tool, &arguments) else {
                return Ok(());
            };
            let result = match (status, body.get("result")) {
                (200, Some(result)) if result.is_object() => result.clone(),
                _ => {
                    return Err(format!(
                        "client {} step {step}: {tool} {arguments} was answered {status}: {body}",
                        self.id
                    ));
                }
            };
            let replayed = result["replayed"] == true;
            match (retry, replayed) {
                (true, true) => self.retried_replayed += 1,
                (true, false) => self.retried_written += 1,
                (false, true) => {
                    return Err(format!(
                        "client {} step {step}: {tool} was sent for the first time and answered `replayed`: {result}",
                        self.id
                    ));
                }
                (false, false) => {}
            }
            let Some(task_id) = result["task_id"].as_str() else {
                return Err(format!(
                    "client {} step {step}: a result without a task id: {result}",
                    self.id
                ));
            };
            if let Step::Open { task } = self.steps[step] {
                self.tasks[task] = Some(task_id.to_owned());
            }
            self.acked[step] = Some(Acked {
                tool,
                arguments,
                result,
                epoch,
            });
            self.in_doubt = false;
            self.next += 1;
            progress.acked();
        }
        Ok(())
    }

    fn remaining(&self) -> usize {
        self.steps.len() - self.next
    }
}

fn question(seed: u64, owner: Option<(usize, usize)>) -> String {
    match owner {
        Some((client, task)) => {
            format!("Round {seed}: does task {task} of client {client} keep every write?")
        }
        None => format!("Round {seed}: does the shared task keep every client's writes?"),
    }
}

fn content(client: usize, target: Target, item: usize) -> String {
    let task = match target {
        Target::Own(task) => format!("its task {task}"),
        Target::Shared => "the shared task".to_owned(),
    };
    format!(
        "Client {client} reports finding {item} for {task}: lithium output rose {} percent in the year to March, the agency said.",
        3 + item
    )
}

/// Calls a tool through the REST view; the body is the answer's JSON (null when it is not JSON).
fn call_tool(addr: SocketAddr, tool: &str, arguments: &Value) -> std::io::Result<(u16, Value)> {
    let body = json!({"name": tool, "arguments": arguments}).to_string();
    let (status, body) = try_request(
        addr,
        "POST",
        "/v1/tools/call",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    )?;
    Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// Acknowledged writes and finished clients, for the thread that picks the moment of the kill.
#[derive(Debug, Default)]
struct Progress {
    counts: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl Progress {
    fn acked(&self) {
        self.counts.lock().unwrap().0 += 1;
        self.changed.notify_all();
    }

    fn finished(&self) {
        self.counts.lock().unwrap().1 += 1;
        self.changed.notify_all();
    }

    /// Waits until `acked` writes were acknowledged or every client is done; returns the counts.
    fn wait(&self, acked: usize, clients: usize) -> (usize, usize) {
        let mut counts = self.counts.lock().unwrap();
        while counts.0 < acked && counts.1 < clients {
            counts = self.changed.wait(counts).unwrap();
        }
        *counts
    }
}

/// Marks a client done however its thread ends, so the waiting thread is never left waiting.
struct Finished<'a>(&'a Progress);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// Runs every client's remaining plan at once against `server`. With `kill_after`, kills the
/// server with SIGKILL once that many writes were acknowledged and `delay` passed, and lets
/// the clients end there; without, every plan must finish.
fn load(
    seed: u64,
    clients: &mut [Client],
    server: Server,
    shared: &str,
    epoch: usize,
    kill: Option<(usize, Duration)>,
) -> Option<Server> {
    let addr = server.addr;
    let progress = Progress::default();
    let mut server = Some(server);
    let outcomes: Vec<Result<(), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter_mut()
            .map(|client| {
                let progress = &progress;
                scope.spawn(move || {
                    let _finished = Finished(progress);
                    client.run(addr, shared, epoch, progress)
                })
            })
            .collect();
        if let Some((kill_after, delay)) = kill {
            let (acked, done) = progress.wait(kill_after, CLIENTS);
            std::thread::sleep(delay);
            eprintln!(
                "crash seed {seed}: SIGKILL after {acked} acknowledged writes in this run ({} clients still writing)",
                CLIENTS - done
            );
            server.take().expect("the server runs").kill();
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client thread panicked".to_owned()))
            })
            .collect()
    });
    for outcome in outcomes {
        if let Err(e) = outcome {
            panic!("crash seed {seed}: {e}");
        }
    }
    if server.is_some() {
        for client in clients.iter() {
            assert_eq!(
                client.remaining(),
                0,
                "crash seed {seed}: client {} stopped with writes left although the server ran",
                client.id
            );
        }
    }
    server
}

/// Starts the server on `data` and waits until it reports itself healthy and writable.
fn start(seed: u64, data: &Path) -> Server {
    let server = Server::start(data, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let health = match try_request(server.addr, "GET", "/health", &[], b"") {
            Ok((200, body)) => serde_json::from_slice(&body).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        if health["status"] == "ok" {
            return server;
        }
        assert!(
            Instant::now() < deadline,
            "crash seed {seed}: the server does not report itself healthy: {health}; stderr: {}",
            server.stderr()
        );
        // Polled: the next look is a moment later.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn round(seed: u64) {
    eprintln!("crash seed {seed} (RESEARCH_LEDGER_CRASH_SEEDS={seed} runs this round alone)");
    let started = Instant::now();
    let mut rng = SplitMix64::new(seed);
    let data = tempfile::tempdir().unwrap();
    let mut server = start(seed, data.path());

    // The shared task is opened before the load, like any write: with a key.
    let shared_open = Acked {
        tool: "research_open_task",
        arguments: json!({
            "question": question(seed, None),
            "research_date": "2026-01-15",
            "idempotency_key": format!("crash-{seed}-shared"),
        }),
        result: Value::Null,
        epoch: 0,
    };
    let (status, body) = call_tool(server.addr, shared_open.tool, &shared_open.arguments).unwrap();
    assert_eq!(status, 200, "crash seed {seed}: {body}");
    let shared_open = Acked {
        result: body["result"].clone(),
        ..shared_open
    };
    let shared = shared_open.result["task_id"].as_str().unwrap().to_owned();

    // One or two kills at seeded moments, each followed by a restart on the same directory.
    let mut clients: Vec<Client> = (0..CLIENTS)
        .map(|id| Client::new(id, seed, &mut rng))
        .collect();
    let kills = 1 + rng.below(2) as usize;
    let mut killed = 0;
    while killed < kills {
        let remaining: usize = clients.iter().map(Client::remaining).sum();
        if remaining < 2 * CLIENTS {
            break;
        }
        let kill_after = 1 + rng.below((remaining * 2 / 3) as u64) as usize;
        let delay = Duration::from_micros(rng.below(3_000));
        let kill = Some((kill_after, delay));
        assert!(load(seed, &mut clients, server, &shared, killed, kill).is_none());
        killed += 1;
        server = start(seed, data.path());
    }
    // After the last restart every write not acknowledged is retried, and the rest are sent.
    server = load(seed, &mut clients, server, &shared, killed, None).unwrap();

    let mut acked: BTreeMap<String, &Acked> = BTreeMap::new();
    acked.insert(
        shared_open.arguments["idempotency_key"]
            .as_str()
            .unwrap()
            .to_owned(),
        &shared_open,
    );
    for client in &clients {
        for (step, a) in client.acked.iter().enumerate() {
            acked.insert(client.key(step), a.as_ref().unwrap());
        }
    }
    let resent = check_retries(seed, server.addr, &acked, killed);
    let tasks = expected_tasks(seed, &clients, &shared);
    check_tasks(seed, server.addr, &tasks);

    let status = server.stop();
    assert!(
        status.success(),
        "crash seed {seed}: the server did not stop cleanly: {status:?}"
    );
    let verify = super::run(data.path(), &["verify"]);
    assert!(
        verify.status.success(),
        "crash seed {seed}: verify failed: {}{}",
        super::stdout(&verify),
        super::stderr(&verify)
    );
    let events = check_record(seed, data.path(), &tasks, &acked);

    let (replayed, written) = clients.iter().fold((0, 0), |(r, w), c| {
        (r + c.retried_replayed, w + c.retried_written)
    });
    eprintln!(
        "crash seed {seed}: {killed} kill(s); of the writes in doubt {replayed} had been written and {written} had not; {resent} acknowledged writes resent; {events} events; {:?}",
        started.elapsed()
    );
}

/// Every write acknowledged before a kill, sent again with its key, answers with its original
/// result marked `replayed`; under the same key other arguments are refused. Returns how many
/// were resent.
fn check_retries(
    seed: u64,
    addr: SocketAddr,
    acked: &BTreeMap<String, &Acked>,
    killed: usize,
) -> usize {
    let mut resent = 0;
    for (key, a) in acked {
        if a.epoch >= killed {
            continue;
        }
        let (status, body) = call_tool(addr, a.tool, &a.arguments).unwrap();
        assert_eq!(status, 200, "crash seed {seed}: resending {key}: {body}");
        let mut expected = a.result.clone();
        expected["replayed"] = json!(true);
        assert_eq!(
            body["result"], expected,
            "crash seed {seed}: {key}, acknowledged before a kill and sent again, answers otherwise"
        );
        resent += 1;
    }
    assert!(
        resent > 1,
        "crash seed {seed}: nothing was acknowledged before a kill"
    );
    for (key, a) in acked.iter().take(2) {
        let mut arguments = a.arguments.clone();
        match a.tool {
            "research_open_task" => arguments["research_date"] = json!("2026-01-16"),
            _ => arguments["publish_date"] = json!("2024-12-31"),
        }
        let (status, body) = call_tool(addr, a.tool, &arguments).unwrap();
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("idempotency_key_reused")),
            "crash seed {seed}: {key} with other arguments: {body}"
        );
    }
    resent
}

/// What each task should hold, by task id: its question, and the evidence acknowledged to it.
fn expected_tasks<'a>(
    seed: u64,
    clients: &'a [Client],
    shared: &str,
) -> BTreeMap<String, (String, Vec<&'a Acked>)> {
    let mut tasks: BTreeMap<String, (String, Vec<&Acked>)> = BTreeMap::new();
    tasks.insert(shared.to_owned(), (question(seed, None), Vec::new()));
    for client in clients {
        for (step, acked) in client.acked.iter().enumerate() {
            let acked = acked.as_ref().unwrap();
            let task_id = acked.result["task_id"].as_str().unwrap().to_owned();
            match client.steps[step] {
                Step::Open { task } => {
                    let question = question(seed, Some((client.id, task)));
                    assert!(
                        tasks
                            .insert(task_id.clone(), (question, Vec::new()))
                            .is_none(),
                        "crash seed {seed}: two opens were answered with task {task_id}"
                    );
                }
                Step::Add { .. } => tasks.get_mut(&task_id).unwrap().1.push(acked),
            }
        }
    }
    tasks
}

/// Through the running server: each task is at the version its writes make and holds one item
/// per key, each at its own version, with the content that was sent.
fn check_tasks(seed: u64, addr: SocketAddr, tasks: &BTreeMap<String, (String, Vec<&Acked>)>) {
    for (task_id, (_, adds)) in tasks {
        let (status, session) = super::server::get_json(addr, &format!("/v1/sessions/{task_id}"));
        assert_eq!(status, 200, "crash seed {seed}: {session}");
        assert_eq!(
            session["session_version"],
            json!(1 + adds.len()),
            "crash seed {seed}: task {task_id} is not at the version its writes make: {session}"
        );
        assert_eq!(
            session["summary"]["evidence"]["candidate"],
            json!(adds.len()),
            "crash seed {seed}: task {task_id} does not hold one item per key: {session}"
        );
        let ids: BTreeSet<String> = adds
            .iter()
            .map(|a| a.result["evidence_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            ids,
            (1..=adds.len()).map(|n| format!("ev-{n}")).collect(),
            "crash seed {seed}: task {task_id}: the acknowledged evidence ids"
        );
        let versions: BTreeSet<u64> = adds
            .iter()
            .map(|a| a.result["session_version"].as_u64().unwrap())
            .collect();
        assert_eq!(
            versions,
            (2..=1 + adds.len() as u64).collect(),
            "crash seed {seed}: task {task_id}: the acknowledged versions"
        );
        for acked in adds {
            let id = &acked.result["evidence_id"];
            let (status, detail) = call_tool(
                addr,
                "retrieval_get_source_detail",
                &json!({"task_id": task_id, "evidence_id": id}),
            )
            .unwrap();
            assert_eq!(
                status, 200,
                "crash seed {seed}: {id} of {task_id}: {detail}"
            );
            let detail = &detail["result"];
            assert_eq!(
                detail["content"], acked.arguments["content"],
                "crash seed {seed}: {id} of {task_id}"
            );
            assert_eq!(
                detail["evidence"], acked.result["evidence"],
                "crash seed {seed}: {id} of {task_id} is not what was acknowledged"
            );
        }
    }
}

/// The record itself, read from a whole-ledger export of the stopped server's directory: each
/// task opened once, one event per write, each key committed once, where it was acknowledged.
/// Returns the number of events.
fn check_record(
    seed: u64,
    data: &Path,
    tasks: &BTreeMap<String, (String, Vec<&Acked>)>,
    acked: &BTreeMap<String, &Acked>,
) -> usize {
    let bundle = data.join("all.json");
    let export = super::run(
        data,
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(
        export.status.success(),
        "crash seed {seed}: {}",
        super::stderr(&export)
    );
    let bundle: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let events = bundle["events"].as_array().unwrap();
    let mut opened: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut events_of: BTreeMap<String, usize> = BTreeMap::new();
    for event in events {
        let decoded = &event["decoded"];
        let stream = decoded["stream"].as_str().unwrap().to_owned();
        *events_of.entry(stream.clone()).or_default() += 1;
        if decoded["kind"] == "task_opened" {
            let question = decoded["payload"]["question"].as_str().unwrap().to_owned();
            opened.entry(question).or_default().push(stream);
        }
    }
    let expected_opened: BTreeMap<String, Vec<String>> = tasks
        .iter()
        .map(|(id, (question, _))| (question.clone(), vec![id.clone()]))
        .collect();
    assert_eq!(
        opened, expected_opened,
        "crash seed {seed}: the tasks opened, by question"
    );
    let expected_events: BTreeMap<String, usize> = tasks
        .iter()
        .map(|(id, (_, adds))| (id.clone(), 1 + adds.len()))
        .collect();
    assert_eq!(
        events_of, expected_events,
        "crash seed {seed}: the events of each task"
    );
    let mut committed: BTreeMap<String, (String, u64)> = BTreeMap::new();
    for record in bundle["idempotency"].as_array().unwrap() {
        let key = record["key"].as_str().unwrap().to_owned();
        let at = (
            record["stream"].as_str().unwrap().to_owned(),
            record["stream_version"].as_u64().unwrap(),
        );
        assert!(
            committed.insert(key.clone(), at).is_none(),
            "crash seed {seed}: key {key} was committed twice"
        );
    }
    let expected_committed: BTreeMap<String, (String, u64)> = acked
        .iter()
        .map(|(key, a)| {
            let at = (
                a.result["task_id"].as_str().unwrap().to_owned(),
                a.result["session_version"].as_u64().unwrap(),
            );
            (key.clone(), at)
        })
        .collect();
    assert_eq!(
        committed, expected_committed,
        "crash seed {seed}: the idempotency keys committed, and where"
    );
    events.len()
}
