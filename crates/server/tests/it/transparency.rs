//! `GET /checkpoint` and the C2SP tiles, in process: the note verifies under the log's verifier
//! key, a tile is served once a checkpoint covers it and not before, and reading them writes
//! nothing.

use axum::http::StatusCode;
use ledger::ledger_proof::{Checkpoint, MerkleHasher, Note, Sha256};
use serde_json::{Value, json};

use crate::harness::{App, BytesOf as _};

#[tokio::test]
async fn the_checkpoint_note_and_its_tiles_follow_the_signed_tree() {
    let app = App::new();
    let (status, _) = app.get("/checkpoint").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no checkpoint yet");
    for question in ["Is the sea rising?", "Do bees sleep?", "Is tea calming?"] {
        app.ok("research_open_task", json!({"question": question}))
            .await;
    }
    let ledger = app.service.ledger().clone();
    let signed = tokio::task::spawn_blocking(move || ledger.checkpoint().unwrap())
        .await
        .unwrap();
    let before = app.service.ledger().head();

    let (status, body) = app.get("/checkpoint").await;
    assert_eq!(status, StatusCode::OK);
    let Value::String(text) = body else {
        panic!("the note is text")
    };
    let note = Note::parse(&text).unwrap();
    let vkey = app.service.ledger().verifier_key().unwrap();
    assert_eq!(Checkpoint::from_note(&note, &vkey).unwrap(), signed);

    // The level-0 tile of the signed size: the leaf hashes of the events, in order.
    let size = signed.tree_size;
    let (status, _) = app.get(&format!("/tile/0/000.p/{size}")).await;
    assert_eq!(status, StatusCode::OK);
    let events = app.service.ledger().read_range(0, size as usize).unwrap();
    let response = app
        .router
        .clone()
        .oneshot_bytes(&format!("/tile/0/000.p/{size}"))
        .await;
    let expected: Vec<u8> = events
        .iter()
        .flat_map(|e| Sha256.leaf(e.hash.as_bytes()).0)
        .collect();
    assert_eq!(response, expected);
    for path in [
        format!("/tile/0/000.p/{}", size + 1),
        "/tile/0/000".to_owned(),
        "/tile/0/0".to_owned(),
        "/tile/1/000.p/1".to_owned(),
    ] {
        let (status, _) = app.get(&path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    assert_eq!(app.service.ledger().head(), before, "a read wrote");
}
