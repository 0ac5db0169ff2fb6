//! Evidence texts in the ledger, end to end on the spawned binary: an acknowledged write killed
//! right after keeps its event and its text, both from the ledger; a text redacted in place in
//! the middle of the log breaks no verification, no bundle without content and no replay, and
//! is never served.

use std::path::Path;

use serde_json::{Value, json};

use super::server::{Server, call_tool, embedded_only};
use super::{run, stderr, stdout};

fn open_task(server: &Server) -> String {
    let (status, opened) = call_tool(
        server.addr,
        "research_open_task",
        json!({"question": "Does the reservoir hold more water than last year?", "research_date": "2026-01-15"}),
    );
    assert_eq!(status, 200, "{opened}");
    opened["result"]["task_id"].as_str().unwrap().to_owned()
}

fn text(n: usize) -> String {
    format!(
        "Gauge {n} reads {} percent of capacity, the water board says.",
        40 + n
    )
}

fn add(server: &Server, task: &str, n: usize) -> Value {
    let (status, added) = call_tool(
        server.addr,
        "retrieval_add_evidence",
        json!({
            "task_id": task,
            "source": format!("gauge-{n}.example.org"),
            "publish_date": "2025-11-01",
            "source_type": "government",
            "content": text(n),
            // A summary of its own: the text is then nowhere in the event, only its hash.
            "summary": format!("Gauge {n}."),
            "stance": "supports",
            "relevance": 0.5,
        }),
    );
    assert_eq!(status, 200, "{added}");
    added["result"].clone()
}

fn detail(server: &Server, task: &str, id: &str) -> (u16, Value) {
    call_tool(
        server.addr,
        "retrieval_get_source_detail",
        json!({"task_id": task, "evidence_id": id}),
    )
}

#[test]
fn an_acknowledged_evidence_write_killed_right_after_keeps_its_event_and_its_text() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let task = open_task(&server);
    let added = add(&server, &task, 1);
    server.kill(); // SIGKILL, the moment the answer came

    let server = Server::start(data.path(), &[]);
    let (status, read) = detail(&server, &task, added["evidence_id"].as_str().unwrap());
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["result"]["content"], text(1));
    assert_eq!(read["result"]["evidence"], added["evidence"]);
    server.stop();
    // The text is in the ledger, written by the sync that made the event durable: the content
    // store of earlier versions was never made.
    assert!(!data.path().join("blobs").exists());
    assert!(run(data.path(), &["verify"]).status.success());
}

/// Overwrites every occurrence of `needle` in the log's segment files with zeros; answers how
/// many there were.
fn zero_in_log(data: &Path, needle: &[u8]) -> usize {
    let mut found = 0;
    for entry in std::fs::read_dir(data.join("ledger/log")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(needle.len()).position(|w| w == needle) {
            bytes[at + i..at + i + needle.len()].fill(0);
            at += i + needle.len();
            found += 1;
        }
        std::fs::write(&path, bytes).unwrap();
    }
    found
}

#[test]
fn a_text_redacted_in_the_middle_of_the_log_breaks_no_verification_and_is_never_served() {
    if embedded_only("a_text_redacted_in_the_middle_of_the_log") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let task = open_task(&server);
    for n in 0..4 {
        add(&server, &task, n);
    }
    server.stop();
    assert_eq!(zero_in_log(data.path(), text(1).as_bytes()), 1, "one copy");

    let out = run(data.path(), &["verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = run(data.path(), &["replay", &task, "--check"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let bundle = data.path().join("without.json");
    let out = run(
        data.path(),
        &[
            "export",
            "--all",
            "--without-content",
            "--out",
            bundle.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(data.path(), &["verify-bundle", bundle.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // A bundle with content cannot hold the redacted text, and says why.
    let with = data.path().join("with.json");
    let out = run(
        data.path(),
        &["export", "--all", "--out", with.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("damaged or redacted"),
        "{}",
        stderr(&out)
    );

    let server = Server::start(data.path(), &[]);
    let (status, refused) = detail(&server, &task, "ev-2");
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("damaged or redacted")),
        "{refused}"
    );
    let (status, read) = detail(&server, &task, "ev-3");
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["result"]["content"], text(2));
    add(&server, &task, 9);
    let (_, health) = super::server::get_json(server.addr, "/health");
    assert_eq!(health["status"], "ok", "{health}");
    server.stop();
}
