//! Many writers on one task at once, through a spawned server over real HTTP: with an expected
//! version, exactly one write lands per version and every other is refused with
//! `session_conflict`; writers that re-read the version and retry all land, each exactly once;
//! past the requests-in-flight limit the excess is refused with `limit_exceeded`, whole; and the
//! ledger holds exactly the writes the server acknowledged, nothing lost and nothing doubled.
//!
//! Each writer is a thread with a connection of its own. Where a count must be exact, a write
//! is sent with `Expect: 100-continue` and its body held back until the server has either taken
//! the request in (it asks for the body) or refused it, and the bodies go only once every
//! request's fate is known: the requests are then all in flight together however fast the
//! server answers, and how many the limit lets in is a fact, not the outcome of a race.
//!
//! A writer holds a file descriptor here and one in the server (which inherits this process's
//! limit), and the three tests may run at once: the open-file limit must be above about 4,100.

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::thread;

use serde_json::{Value, json};

use super::server::{
    Held, Response, Server, call_tool, connect_served, get_json, hold, ledger_size, post_json,
    request_on,
};

/// Writers sent at once.
const WRITERS: usize = 1200;
/// Writers that retry until their write lands (fewer: each retry costs a round trip, and the
/// number of tries grows with the square of the writers).
const RETRYING_WRITERS: usize = 100;
/// `serve`'s default `requests_in_flight_max`.
const DEFAULT_IN_FLIGHT_MAX: usize = 256;
/// Writers that come while the limit is full, and the threads they are sent from.
const LATE_WRITERS: usize = 200;
const LATE_THREADS: usize = 8;
/// The time a request may take, raised: the first requests held wait for their bodies until the
/// last one's fate is known, which on a busy machine may be longer than the default minute.
const HELD_SECS_MAX: (&str, &str) = ("--request-secs-max", "600");
/// The writer threads' stack: they hold a connection and parse one response.
const STACK_BYTES: usize = 256 * 1024;

/// Fails early, and says why, when this process may not open a connection per writer.
fn check_file_limit() {
    let Ok(limits) = std::fs::read_to_string("/proc/self/limits") else {
        return;
    };
    let Some(soft) = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|n| n.parse::<usize>().ok())
    else {
        return;
    };
    let needed = 3 * WRITERS + 512;
    assert!(
        soft >= needed,
        "the concurrency tests open {WRITERS} connections each, here and in the server: \
         raise the open-file limit to at least {needed} (ulimit -n {needed}); it is {soft}"
    );
}

/// A server started with `flags`, logging only warnings (the request log of a burst is long).
fn start(data: &std::path::Path, flags: &[&str]) -> Server {
    Server::start_with(data, flags, &[("RESEARCH_LEDGER_LOG", "warn")])
}

fn open_task(addr: SocketAddr) -> String {
    let (status, out) = call_tool(
        addr,
        "research_open_task",
        json!({"question": "Does the Greenland ice sheet lose mass?", "research_date": "2025-06-30"}),
    );
    assert_eq!(status, 200, "{out}");
    out["result"]["task_id"].as_str().unwrap().to_owned()
}

fn session_version(addr: SocketAddr, task: &str) -> u64 {
    let (status, session) = get_json(addr, &format!("/v1/sessions/{task}"));
    assert_eq!(status, 200, "{session}");
    session["session_version"].as_u64().unwrap()
}

/// The arguments of writer `name`'s one write: an evidence item of its own (content and
/// summary name the writer), guarded by `expected_version` and its own idempotency key.
fn evidence(task: &str, name: &str, expected_version: u64) -> Value {
    json!({
        "task_id": task,
        "source": "nasa.gov",
        "publish_date": "2023-05-01",
        "source_type": "government",
        "content": format!("GRACE measurements reported by {name} show the ice sheet losing mass."),
        "summary": format!("reported by {name}"),
        "stance": "supports",
        "relevance": 0.5,
        "expected_version": expected_version,
        "idempotency_key": format!("{name} on {task}"),
    })
}

/// The body of `POST /v1/tools/call` for writer `i`'s write at `version`.
fn write_of(task: &str, i: usize, version: u64) -> Value {
    json!({
        "name": "retrieval_add_evidence",
        "arguments": evidence(task, &format!("writer {i}"), version),
    })
}

/// The task's evidence as the read model has it: `(evidence_id, summary)` in the order added.
fn evidence_in_task(addr: SocketAddr, task: &str) -> Vec<(String, String)> {
    let (status, out) = post_json(
        addr,
        "/graphql",
        &json!({
            "query": "query($id: ID!) { task(id: $id) { evidence { evidenceId summary } } }",
            "variables": {"id": task},
        }),
    );
    assert_eq!(status, 200, "{out}");
    assert!(out.get("errors").is_none(), "{out}");
    out["data"]["task"]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["evidenceId"].as_str().unwrap().to_owned(),
                e["summary"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// What one request got: whether the server took it in, and its response.
struct Sent {
    admitted: bool,
    response: Response,
}

/// Sends every body to `POST /v1/tools/call` at once, each on a connection of its own and
/// with its body held back. The requests go one after the other, each once the one before has
/// been taken in or refused (so the server's queue of new connections never overflows, and the
/// first requests are the ones taken in); then `while_held` runs, with the requests taken in
/// still in flight; then the bodies of those go, all together. Returns what each request got,
/// in order.
fn all_at_once(addr: SocketAddr, bodies: Vec<Value>, while_held: impl FnOnce()) -> Vec<Sent> {
    let release = Arc::new(Barrier::new(bodies.len() + 1));
    let (fate_known, fates) = std::sync::mpsc::channel();
    let writers: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let release = Arc::clone(&release);
            let fate_known = fate_known.clone();
            let writer = thread::Builder::new()
                .stack_size(STACK_BYTES)
                .spawn(move || {
                    let held = hold(
                        addr,
                        "POST",
                        "/v1/tools/call",
                        &[("Content-Type", "application/json")],
                        serde_json::to_vec(&body).unwrap(),
                    );
                    // Whatever happened, keep step: the others wait for it.
                    let _ = fate_known.send(());
                    release.wait();
                    match held? {
                        Held::Admitted(request) => Ok(Sent {
                            admitted: true,
                            response: request.finish()?,
                        }),
                        Held::Answered(response) => Ok(Sent {
                            admitted: false,
                            response,
                        }),
                    }
                })
                .expect("a writer thread");
            fates.recv().expect("a fate");
            writer
        })
        .collect();
    let held = std::panic::catch_unwind(std::panic::AssertUnwindSafe(while_held));
    release.wait();
    let sent = writers
        .into_iter()
        .enumerate()
        .map(|(i, w)| {
            w.join()
                .expect("the writer ran")
                .unwrap_or_else(|e: std::io::Error| panic!("writer {i}: {e}"))
        })
        .collect();
    if let Err(panic) = held {
        std::panic::resume_unwind(panic);
    }
    sent
}

/// Sends every body to `POST /v1/tools/call` at once, nothing held back: each writer has a
/// connection the server has accepted and served (made one after the other, so the server's
/// queue of new connections never overflows), and once all have, each sends its request, the
/// body right behind the head, as most clients do. Returns the status and body each got, in
/// order.
fn flood(addr: SocketAddr, bodies: Vec<Value>) -> Vec<(u16, Value)> {
    let everyone = Arc::new(Barrier::new(bodies.len()));
    let writers: Vec<_> = bodies
        .into_iter()
        .map(|body| {
            let everyone = Arc::clone(&everyone);
            let stream = connect_served(addr).expect("a connection");
            thread::Builder::new()
                .stack_size(STACK_BYTES)
                .spawn(move || {
                    everyone.wait();
                    let (status, body) = request_on(
                        stream,
                        "POST",
                        "/v1/tools/call",
                        &[("Content-Type", "application/json")],
                        &serde_json::to_vec(&body).unwrap(),
                    );
                    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
                })
                .expect("a writer thread")
        })
        .collect();
    writers
        .into_iter()
        .map(|w| w.join().expect("the writer ran"))
        .collect()
}

/// The outcomes of one burst of writes at the same expected version, sorted.
#[derive(Debug, Default)]
struct Tally {
    /// Writer indexes whose write landed, with the result.
    won: Vec<(usize, Value)>,
    /// Writer indexes refused with `session_conflict`, with the error.
    conflicted: Vec<(usize, Value)>,
    /// Writer indexes refused at the door with `limit_exceeded`, with the error.
    refused: Vec<(usize, Value)>,
}

impl Tally {
    /// Sorts `(status, body)` outcomes, failing on anything but the three expected ones.
    fn of(outcomes: impl IntoIterator<Item = (u16, Value)>) -> Tally {
        let mut tally = Tally::default();
        for (i, (status, body)) in outcomes.into_iter().enumerate() {
            match (status, body["error"].as_str()) {
                (200, None) => tally.won.push((i, body)),
                (409, Some("session_conflict")) => tally.conflicted.push((i, body)),
                (503, Some("limit_exceeded")) => tally.refused.push((i, body)),
                _ => panic!("writer {i} got {status}: {body}"),
            }
        }
        tally
    }
}

/// Checks a burst at `version` whose one write landed: the winner's result, every conflict
/// naming the version the winner made, every refusal naming the limit `in_flight_max`.
fn check_burst(tally: &Tally, task: &str, version: u64, in_flight_max: usize) -> usize {
    assert_eq!(
        tally.won.len(),
        1,
        "exactly one write at version {version} lands: {:?}",
        tally.won
    );
    let (winner, won) = &tally.won[0];
    assert_eq!(won["result"]["session_version"], version + 1, "{won}");
    assert_eq!(won["result"]["replayed"], false, "{won}");
    assert_eq!(
        won["result"]["evidence"]["summary"],
        format!("reported by writer {winner}"),
        "{won}"
    );
    for (i, body) in &tally.conflicted {
        assert_eq!(
            body,
            &json!({
                "error": "session_conflict",
                "message": body["message"],
                "task_id": task,
                "current_version": version + 1,
                "suggested_action": "research_summarize_state",
                "pending_actions": [{
                    "tool": "research_summarize_state",
                    "reason": format!(
                        "the task is at version {}: read what changed, then retry with expected_version {}",
                        version + 1,
                        version + 1
                    ),
                }],
            }),
            "writer {i}"
        );
    }
    for (i, body) in &tally.refused {
        assert_eq!(
            body,
            &json!({
                "error": "limit_exceeded",
                "message": body["message"],
                "limit": "requests_in_flight_max",
                "max": in_flight_max,
                "actual": in_flight_max + 1,
            }),
            "writer {i}"
        );
    }
    *winner
}

/// Sends again, with their idempotency keys, the winner's write and every 25th writer's: only
/// the winner's had landed, so only it is answered from the ledger (`replayed`); every other is
/// decided afresh and refused, the task having moved on. Sent a few at a time, below any
/// in-flight limit.
fn check_only_the_winner_landed(addr: SocketAddr, task: &str, version: u64, winner: usize) {
    const THREADS: usize = 4;
    let sample: Vec<usize> = (0..WRITERS)
        .step_by(25)
        .chain([winner])
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let retries: Vec<_> = sample
        .chunks(sample.len().div_ceil(THREADS))
        .map(|writers| {
            let task = task.to_owned();
            let writers = writers.to_vec();
            thread::Builder::new()
                .stack_size(STACK_BYTES)
                .spawn(move || {
                    writers
                        .into_iter()
                        .map(|i| {
                            let args = evidence(&task, &format!("writer {i}"), version);
                            (i, call_tool(addr, "retrieval_add_evidence", args))
                        })
                        .collect::<Vec<_>>()
                })
                .expect("a thread")
        })
        .collect();
    for (i, (status, body)) in retries.into_iter().flat_map(|t| t.join().unwrap()) {
        if i == winner {
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["result"]["replayed"], true, "{body}");
            assert_eq!(body["result"]["session_version"], version + 1, "{body}");
        } else {
            assert_eq!(status, 409, "writer {i}: {body}");
            assert_eq!(body["error"], "session_conflict", "writer {i}: {body}");
        }
    }
}

#[test]
fn twelve_hundred_writers_at_one_version_one_lands_and_retrying_writers_all_land_once() {
    check_file_limit();
    let data = tempfile::tempdir().unwrap();
    let server = start(
        data.path(),
        &[
            "--requests-in-flight-max",
            "2000",
            HELD_SECS_MAX.0,
            HELD_SECS_MAX.1,
        ],
    );
    let addr = server.addr;
    let task = open_task(addr);
    let version = session_version(addr, &task);
    assert_eq!(version, 1);

    // 1,200 writes at the version just read, all in flight together.
    let bodies = (0..WRITERS).map(|i| write_of(&task, i, version)).collect();
    let sent = all_at_once(addr, bodies, || {});
    let admitted = sent.iter().filter(|s| s.admitted).count();
    assert_eq!(admitted, WRITERS, "the raised limit takes every writer in");
    let tally = Tally::of(sent.iter().map(|s| (s.response.status, s.response.json())));
    let winner = check_burst(&tally, &task, version, 2000);
    assert_eq!(tally.conflicted.len(), WRITERS - 1);
    eprintln!(
        "{WRITERS} writers at version {version}, all in flight: 1 landed (writer {winner}), {} session_conflict",
        tally.conflicted.len()
    );

    // The ledger holds that write and nothing else.
    assert_eq!(
        evidence_in_task(addr, &task),
        vec![("ev-1".to_owned(), format!("reported by writer {winner}"))]
    );
    assert_eq!(session_version(addr, &task), version + 1);
    assert_eq!(ledger_size(addr), 2, "the task's opening and the one write");
    check_only_the_winner_landed(addr, &task, version, winner);
    assert_eq!(ledger_size(addr), 2, "the retries wrote nothing");

    // Writers that, refused, fetch the latest session and try again with the same key. A try
    // is refused only when another writer's write landed since its read of the version, so
    // none needs more tries than there are writers.
    let start_version = version + 1;
    let everyone = Arc::new(Barrier::new(RETRYING_WRITERS));
    let writers: Vec<_> = (0..RETRYING_WRITERS)
        .map(|i| {
            let everyone = Arc::clone(&everyone);
            let task = task.clone();
            thread::Builder::new()
                .stack_size(STACK_BYTES)
                .spawn(move || {
                    let name = format!("retrying writer {i}");
                    let mut expected = start_version;
                    everyone.wait();
                    for attempt in 1..=RETRYING_WRITERS {
                        let args = evidence(&task, &name, expected);
                        let (status, body) = call_tool(addr, "retrieval_add_evidence", args);
                        match status {
                            200 => return (attempt, body["result"].clone()),
                            409 if body["error"] == "session_conflict" => {
                                let current = body["current_version"].as_u64().unwrap();
                                assert!(current > expected, "{name}: {body}");
                                expected = session_version(addr, &task);
                                assert!(expected >= current, "{name}: went back to {expected}");
                            }
                            _ => panic!("{name}: {status} {body}"),
                        }
                    }
                    panic!("{name} was refused {RETRYING_WRITERS} times")
                })
                .expect("a writer thread")
        })
        .collect();
    let landed: Vec<(usize, Value)> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let tries: usize = landed.iter().map(|(n, _)| n).sum();
    let most = landed.iter().map(|(n, _)| *n).max().unwrap();
    eprintln!(
        "{RETRYING_WRITERS} retrying writers: all landed after {tries} tries in all, {most} at most"
    );

    // Each version the task went through is exactly one writer's write.
    let mut versions: Vec<u64> = landed
        .iter()
        .map(|(_, r)| r["session_version"].as_u64().unwrap())
        .collect();
    versions.sort_unstable();
    let end_version = start_version + RETRYING_WRITERS as u64;
    assert_eq!(
        versions,
        (start_version + 1..=end_version).collect::<Vec<_>>()
    );
    assert!(landed.iter().all(|(_, r)| r["replayed"] == false));
    // And the task holds every write once: the first burst's, then one item per writer, in
    // the order they landed, each with the id its writer was told.
    let mut expected: Vec<(u64, String, String)> = landed
        .iter()
        .enumerate()
        .map(|(i, (_, r))| {
            (
                r["session_version"].as_u64().unwrap(),
                r["evidence"]["evidence_id"].as_str().unwrap().to_owned(),
                format!("reported by retrying writer {i}"),
            )
        })
        .collect();
    expected.sort();
    let mut items = vec![("ev-1".to_owned(), format!("reported by writer {winner}"))];
    items.extend(expected.into_iter().map(|(_, id, summary)| (id, summary)));
    assert_eq!(evidence_in_task(addr, &task), items);
    assert_eq!(
        items.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
        (1..=RETRYING_WRITERS + 1)
            .map(|n| format!("ev-{n}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(session_version(addr, &task), end_version);
    assert_eq!(ledger_size(addr), end_version);

    // A writer unsure whether its write landed sends it again with its key: the original
    // result, whatever version it now names.
    let again = evidence(&task, "retrying writer 0", start_version);
    let (status, body) = call_tool(addr, "retrieval_add_evidence", again);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["replayed"], true, "{body}");
    assert_eq!(
        body["result"]["session_version"],
        landed[0].1["session_version"]
    );
    assert_eq!(ledger_size(addr), end_version);

    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let verify = super::run(data.path(), &["verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", super::stdout(&verify));
}

#[test]
fn past_the_default_in_flight_limit_the_excess_is_refused_and_nothing_is_lost() {
    check_file_limit();
    let data = tempfile::tempdir().unwrap();
    let server = start(data.path(), &[HELD_SECS_MAX.0, HELD_SECS_MAX.1]);
    let addr = server.addr;

    // 1,200 writes at the version just read, all in flight together: the limit takes exactly
    // its number in and refuses the rest at once, with `Retry-After`.
    let task = open_task(addr);
    let version = session_version(addr, &task);
    let bodies = (0..WRITERS).map(|i| write_of(&task, i, version)).collect();
    // While they are in flight, late writers send their writes as most clients do, the body
    // right behind the head: each gets the refusal, whole, and not a reset connection.
    let late = |task: &str| {
        let late: Vec<_> = (0..LATE_THREADS)
            .map(|t| {
                let task = task.to_owned();
                thread::Builder::new()
                    .stack_size(STACK_BYTES)
                    .spawn(move || {
                        (0..LATE_WRITERS / LATE_THREADS)
                            .map(|n| {
                                let name = format!("late writer {}", t + n * LATE_THREADS);
                                let args = evidence(&task, &name, version);
                                (name, call_tool(addr, "retrieval_add_evidence", args))
                            })
                            .collect::<Vec<_>>()
                    })
                    .expect("a thread")
            })
            .collect();
        for (name, (status, body)) in late.into_iter().flat_map(|t| t.join().unwrap()) {
            assert_eq!(status, 503, "{name}: {body}");
            assert_eq!(body["error"], "limit_exceeded", "{name}: {body}");
            assert_eq!(body["max"], DEFAULT_IN_FLIGHT_MAX, "{name}: {body}");
        }
    };
    let sent = all_at_once(addr, bodies, || late(&task));
    let admitted = sent.iter().filter(|s| s.admitted).count();
    assert_eq!(admitted, DEFAULT_IN_FLIGHT_MAX);
    assert!(
        sent[..DEFAULT_IN_FLIGHT_MAX].iter().all(|s| s.admitted),
        "the first requests are the ones taken in"
    );
    for (i, s) in sent.iter().enumerate().filter(|(_, s)| !s.admitted) {
        assert_eq!(s.response.status, 503, "writer {i}: {:?}", s.response);
        assert_eq!(s.response.header("retry-after"), Some("1"), "writer {i}");
    }
    let tally = Tally::of(sent.iter().map(|s| (s.response.status, s.response.json())));
    let winner = check_burst(&tally, &task, version, DEFAULT_IN_FLIGHT_MAX);
    assert_eq!(tally.conflicted.len(), DEFAULT_IN_FLIGHT_MAX - 1);
    assert_eq!(tally.refused.len(), WRITERS - DEFAULT_IN_FLIGHT_MAX);
    assert!(
        tally.refused.iter().all(|(i, _)| !sent[*i].admitted),
        "only requests refused at the door get limit_exceeded"
    );
    eprintln!(
        "{WRITERS} writers all in flight, default limit: {admitted} taken in, 1 landed, {} session_conflict, {} limit_exceeded",
        tally.conflicted.len(),
        tally.refused.len()
    );
    assert_eq!(
        evidence_in_task(addr, &task),
        vec![("ev-1".to_owned(), format!("reported by writer {winner}"))]
    );
    assert_eq!(session_version(addr, &task), version + 1);
    assert_eq!(ledger_size(addr), 2, "the task's opening and the one write");
    // Neither the conflicts nor the refusals left anything behind under their keys.
    check_only_the_winner_landed(addr, &task, version, winner);
    assert_eq!(ledger_size(addr), 2);

    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let verify = super::run(data.path(), &["verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", super::stdout(&verify));
}

#[test]
fn a_flood_past_a_low_in_flight_limit_is_refused_whole_and_loses_nothing() {
    check_file_limit();
    let data = tempfile::tempdir().unwrap();
    let server = start(data.path(), &["--requests-in-flight-max", "8"]);
    let addr = server.addr;
    let task = open_task(addr);
    let version = session_version(addr, &task);

    // 1,200 writes at once with nothing held back: each lands, conflicts or is refused at the
    // door, how many of each depending on how fast the server drains them, and exactly one
    // lands (the limit always lets the first in). Each refusal reaches its writer whole: the
    // writers send their bodies right behind their heads, and a server that answered and
    // closed without reading them would reset the connections, refusal and all.
    let bodies = (0..WRITERS).map(|i| write_of(&task, i, version)).collect();
    let tally = Tally::of(flood(addr, bodies));
    let winner = check_burst(&tally, &task, version, 8);
    eprintln!(
        "{WRITERS} writers as fast as they can, limit 8: 1 landed, {} session_conflict, {} limit_exceeded",
        tally.conflicted.len(),
        tally.refused.len()
    );
    assert_eq!(
        evidence_in_task(addr, &task),
        vec![("ev-1".to_owned(), format!("reported by writer {winner}"))]
    );
    assert_eq!(session_version(addr, &task), version + 1);
    assert_eq!(ledger_size(addr), 2);
    check_only_the_winner_landed(addr, &task, version, winner);
    assert_eq!(ledger_size(addr), 2);

    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let verify = super::run(data.path(), &["verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", super::stdout(&verify));
}
