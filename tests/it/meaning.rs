//! The search by meaning through the spawned binary: `--encoder` on `ingest` and `serve`, a
//! search that finds a passage sharing no term with its query, the ranking named in `/health`
//! and in the recorded index state, vectors kept where `--vectors-dir` says, and a model folder
//! that is not one refused before anything is served.
//!
//! The model is read from `RESEARCH_LEDGER_ENCODER_DIR` (`scripts/fetch-encoder`); without it
//! these tests pass without running, unless `RESEARCH_LEDGER_REQUIRE_ENCODER=1`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::server::{Server, call_tool, get_json};
use crate::{run, stderr, stdout};

const PASSAGES: &[(&str, &str, &str)] = &[
    (
        "glaciers-1",
        "Glaciers",
        "Mountain glaciers have been retreating almost everywhere since 1950.",
    ),
    (
        "sea-1",
        "Sea level",
        "Oceans rose about twenty centimetres over the twentieth century.",
    ),
    (
        "football-1",
        "Football",
        "The striker scored twice in the second half of the final.",
    ),
    (
        "markets-1",
        "Markets",
        "Stock prices fell sharply after the central bank raised interest rates.",
    ),
];

fn documents(dir: &Path) -> PathBuf {
    let lines: Vec<String> = PASSAGES
        .iter()
        .map(|(id, title, text)| {
            json!({"id": id, "title": title, "content": text, "source": "Example Survey",
                   "source_type": "government", "publish_date": "2024-01-01"})
            .to_string()
        })
        .collect();
    let path = dir.join("passages.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// Searches a new task's corpus for `query` through REST; the hits' document ids and the
/// recorded index state.
fn search(server: &Server, query: &str) -> (Vec<String>, String) {
    let (status, opened) = call_tool(
        server.addr,
        "research_open_task",
        json!({"question": "Are mountain glaciers shrinking?", "research_date": "2026-01-15"}),
    );
    assert_eq!(status, 200, "{opened}");
    let task = opened["result"]["task_id"].as_str().unwrap().to_owned();
    let (status, found) = call_tool(
        server.addr,
        "retrieval_search_evidence",
        json!({"task_id": task, "query": query, "limit": 2}),
    );
    assert_eq!(status, 200, "{found}");
    let ids = found["result"]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["result_id"].as_str().unwrap().to_owned())
        .collect();
    let state = found["result"]["index_state"].as_str().unwrap().to_owned();
    (ids, state)
}

#[test]
fn a_server_with_an_encoder_finds_by_meaning_and_names_its_ranking() {
    let Some(model) = test_support::encoder_model_dir() else {
        return;
    };
    let model = model.to_str().unwrap();
    let data = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let vectors = files.path().join("vectors");
    let vectors_flag = vectors.to_str().unwrap();
    let file = documents(files.path());
    let out = run(
        data.path(),
        &[
            "--encoder",
            model,
            "--vectors-dir",
            vectors_flag,
            "ingest",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["added"], 4, "{}", stdout(&out));
    // The vectors are where the flag says, and not in the data directory.
    assert_eq!(std::fs::read_dir(&vectors).unwrap().count(), 1);
    assert!(!data.path().join("vectors").exists());

    // No query term is in the glaciers passage: terms alone do not find it.
    let query = "ice in the alps is melting away";
    let lexical = Server::start(data.path(), &[]);
    let (_, health) = get_json(lexical.addr, "/health");
    assert!(health["corpus"]["encoder"].is_null(), "{health}");
    let (lexical_hits, lexical_state) = search(&lexical, query);
    assert!(
        !lexical_hits.contains(&"glaciers-1".to_owned()),
        "{lexical_hits:?}"
    );
    lexical.stop();

    let server = Server::start(
        data.path(),
        &["--encoder", model, "--vectors-dir", vectors_flag],
    );
    let (_, health) = get_json(server.addr, "/health");
    let encoder = health["corpus"]["encoder"].as_str().unwrap_or_default();
    assert!(encoder.starts_with("bert-mean-l2 "), "{health}");
    let (hits, state) = search(&server, query);
    assert_eq!(
        hits.first().map(String::as_str),
        Some("glaciers-1"),
        "{hits:?}"
    );
    // The recorded search names another index state: the ranking, with its encoder.
    assert_eq!(health["corpus"]["index_state"], state.as_str());
    assert_ne!(state, lexical_state);
    server.stop();
}

#[test]
fn a_folder_that_is_not_a_model_is_refused_before_anything_is_served() {
    let data = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = run(
        data.path(),
        &[
            "--encoder",
            empty.path().to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let errors = stderr(&out);
    assert!(errors.contains("config.json"), "{errors}");
    assert!(!stdout(&out).contains("listening on"), "{}", stdout(&out));
}
