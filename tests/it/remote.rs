//! The commands that act through a running server (`--server URL`): each prints what it prints
//! on the data directory itself, proofs and bundles from the server check out offline, roles
//! bound what a token may ask, and a server that cannot be reached is named.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use super::{first_line, run, stderr, stdout};
use crate::auth::add_token as token;
use crate::server::{Server, ledger_size, request};

/// Runs the demo for one question and returns its task id.
fn demo_task(data: &Path, question: &str) -> String {
    let out = run(data, &["demo", "--json", "--question", question]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["tasks"][0]["task_id"].as_str().unwrap().to_owned()
}

/// Runs a command through the server with `token`.
fn remote(data: &Path, server: &Server, token: &str, args: &[&str]) -> Output {
    let url = format!("http://{}", server.addr);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--server", &url, "--token", token]);
    run(data, &all)
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}\n{}{}",
        out.status.code(),
        stdout(&out),
        stderr(&out)
    );
    out
}

/// A file of the corpus's Markdown form.
fn note(dir: &Path, name: &str, front_matter: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("---\n{front_matter}---\n{text}\n")).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn commands_through_a_server_print_what_they_print_on_the_data_directory() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    let task = demo_task(data, "four-day-week-eastvale");
    let admin = token(data, "ada", "admin");
    let auditor = token(data, "audra", "auditor");
    let writer = token(data, "wes", "writer");
    let key = first_line(&stdout(&ok(run(data, &["key", "show"]))));
    let first: Value = serde_json::from_slice(&ok(run(data, &["checkpoint"])).stdout).unwrap();
    let first_size = first["tree_size"].as_u64().unwrap().to_string();
    let files = tempfile::tempdir().unwrap();
    let good = note(
        files.path(),
        "good.md",
        "id: remote-note-1\ntitle: A note sent through the server\nsource: notes.example.org\npublish_date: 2024-05-01\nsource_type: blog\n",
        "The Eastvale trial of a four-day week ran for six months in 2023.",
    );
    let bad = note(
        files.path(),
        "bad.md",
        "id: remote-note-2\nsource: notes.example.org\nsource_type: blog\n",
        "A note without a date.",
    );

    // More documents than one request carries: they go in batches.
    let many = files.path().join("many.jsonl");
    let lines: Vec<String> = (0..1200)
        .map(|i| {
            json!({
                "id": format!("bulk-{i}"),
                "source": "bulk.example.org",
                "publish_date": "2024-01-02",
                "source_type": "other",
                "content": format!("Bulk note number {i} on working weeks."),
            })
            .to_string()
        })
        .collect();
    std::fs::write(&many, lines.join("\n")).unwrap();
    let many = many.to_str().unwrap();

    let server = Server::start(data, &[]);
    // A writer may write, but not checkpoint or ingest.
    let body = json!({"name": "research_open_task", "arguments": {"question": "Does a four-day week keep output?"}});
    let auth = format!("Bearer {writer}");
    let (status, _) = request(
        server.addr,
        "POST",
        "/v1/tools/call",
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 200);
    for args in [vec!["checkpoint"], vec!["ingest", good.as_str()]] {
        let out = remote(data, &server, &writer, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("refused (403 Forbidden)")
                && stderr(&out).contains("\"error\":\"forbidden\""),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // Without a token the server does not know the caller.
    let url = format!("http://{}", server.addr);
    let out = run(data, &["verify", "--server", &url]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unauthenticated"), "{}", stderr(&out));

    // An admin checkpoints and ingests.
    let out = ok(remote(data, &server, &admin, &["checkpoint"]));
    let second: Value = serde_json::from_slice(&out.stdout).unwrap();
    let second_size = second["tree_size"].as_u64().unwrap().to_string();
    assert!(second["tree_size"].as_u64() > first["tree_size"].as_u64());
    let out = remote(
        data,
        &server,
        &admin,
        &["ingest", &good, &bad, many, "--json"],
    );
    assert_eq!(out.status.code(), Some(1), "one document fails");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["added"], 1201, "{report}");
    // Besides the sample corpus the demo ingested.
    assert!(
        report["index_state"]["documents"].as_u64() > Some(1201),
        "{report}"
    );
    assert_eq!(report["failed"], 1, "{report}");
    let ingested = |log: &str| log.matches("documents ingested").count();
    assert_eq!(
        ingested(&server.stderr_once(|log| ingested(log) >= 3)),
        3,
        "1,201 documents in requests of at most 500"
    );
    let remote_ingest_errors = stderr(&out);
    assert!(
        remote_ingest_errors.contains("bad.md (id remote-note-2): field `publish_date`: missing"),
        "{remote_ingest_errors}"
    );

    // An auditor reads.
    let proof = files.path().join("remote-proof.json");
    let proof_path = proof.to_str().unwrap();
    let bundle = files.path().join("remote-bundle.json");
    let bundle_path = bundle.to_str().unwrap();
    let reads: Vec<Vec<&str>> = vec![
        vec!["verify"],
        vec!["verify", "--json"],
        vec!["replay", &task, "--check"],
        vec!["replay", &task, "--at", "3", "--json"],
        vec!["explain", &task],
        vec!["prove", "2", "--tree-size", &first_size],
        vec!["prove", "--consistency", &first_size, &second_size],
    ];
    let through_server: Vec<String> = reads
        .iter()
        .map(|args| stdout(&ok(remote(data, &server, &auditor, args))))
        .collect();
    ok(remote(
        data,
        &server,
        &auditor,
        &["prove", "5", "--out", proof_path],
    ));
    let out = ok(remote(
        data,
        &server,
        &auditor,
        &["export", &task, "--out", bundle_path, "--public-key", &key],
    ));
    assert!(stderr(&out).contains("valid: "), "{}", stderr(&out));
    let out = remote(data, &server, &auditor, &["replay", "no-such-task"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not_found"), "{}", stderr(&out));
    assert!(server.stop().success());

    // The same commands on the data directory, now that the server let it go.
    for (args, remote_stdout) in reads.iter().zip(&through_server) {
        let local = stdout(&ok(run(data, args)));
        assert_eq!(&local, remote_stdout, "{args:?}");
    }
    assert!(through_server[2].contains("the replayed state is the live state"));
    let out = ok(run(
        data,
        &["verify-proof", proof_path, "--public-key", &key],
    ));
    assert!(stdout(&out).contains("is seq 5 of the"), "{}", stdout(&out));
    let out = ok(run(
        data,
        &["verify-bundle", bundle_path, "--public-key", &key],
    ));
    assert!(stdout(&out).contains("valid: "), "{}", stdout(&out));
    // The server ingested into the data directory's corpus: the document is there as sent,
    // and the failing one is named alike.
    let out = run(data, &["ingest", &good, &bad, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&report["added"], &report["unchanged"]),
        (&json!(0), &json!(1))
    );
    assert_eq!(stderr(&out), remote_ingest_errors);
}

#[test]
fn an_unreachable_server_is_named() {
    let data = tempfile::tempdir().unwrap();
    // Nothing listens on port 1 of loopback.
    for args in [
        vec!["verify"],
        vec!["checkpoint"],
        vec!["replay", "t-1"],
        vec!["prove", "0"],
    ] {
        let mut all = args.clone();
        all.extend(["--server", "http://127.0.0.1:1"]);
        let out = run(data.path(), &all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("cannot reach the server at http://127.0.0.1:1"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = run(data.path(), &["verify", "--server", "127.0.0.1:7878"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is not a URL"), "{}", stderr(&out));
    assert!(
        !data.path().join("ledger").exists(),
        "nothing opened locally"
    );
}

#[test]
fn a_saved_checkpoint_is_proved_grown_from_through_a_server() {
    let data = tempfile::tempdir().unwrap();
    let data = data.path();
    demo_task(data, "four-day-week-eastvale");
    let auditor = token(data, "audra", "auditor");
    let key = first_line(&stdout(&ok(run(data, &["key", "show"]))));
    // The auditor keeps a checkpoint; the ledger grows after it.
    let saved_text = stdout(&ok(run(data, &["checkpoint"])));
    demo_task(data, "lake-varden-blooms");
    let files = tempfile::tempdir().unwrap();
    let saved = files.path().join("saved.json");
    std::fs::write(&saved, &saved_text).unwrap();
    let saved = saved.to_str().unwrap();
    // The same checkpoint with another root: what a server that rewrote history would sign
    // for, were it the saved one.
    let mut doctored: Value = serde_json::from_str(&saved_text).unwrap();
    doctored["root"] = json!("11".repeat(32));
    let doctored_path = files.path().join("doctored.json");
    std::fs::write(&doctored_path, doctored.to_string()).unwrap();
    let doctored_path = doctored_path.to_str().unwrap();

    let server = Server::start(data, &[]);
    let since = ["verify-proof", "--since", saved, "--public-key", &key];
    let out = ok(remote(data, &server, &auditor, &since));
    assert!(
        stdout(&out).contains("the ledger only grew"),
        "{}",
        stdout(&out)
    );
    // To today's ledger: the whole of it, past the saved tree.
    let size = ledger_size(server.addr);
    let saved_size = serde_json::from_str::<Value>(&saved_text).unwrap()["tree_size"]
        .as_u64()
        .unwrap();
    assert!(size > saved_size);
    assert!(
        stdout(&out).contains(&format!("the first {saved_size} of the {size} signed")),
        "{}",
        stdout(&out)
    );
    let out = remote(
        data,
        &server,
        &auditor,
        &[
            "verify-proof",
            "--since",
            doctored_path,
            "--public-key",
            &key,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("INVALID"), "{}", stdout(&out));
    assert!(server.stop().success());

    // On the data directory the verdict is the same.
    let out = ok(run(data, &since));
    assert!(
        stdout(&out).contains("the ledger only grew"),
        "{}",
        stdout(&out)
    );
}
