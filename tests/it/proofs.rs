//! Checkpoints, proofs and their offline verification, through the binary.

use std::path::Path;

use super::{first_line, run, stderr, stdout};

fn populate(data: &Path, from: u32, to: u32) {
    super::verify::populate_range(data, from, to);
}

fn public_key(data: &Path) -> String {
    let out = run(data, &["key", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    first_line(&stdout(&out))
}

#[test]
fn an_inclusion_proof_verifies_offline_and_a_doctored_one_does_not() {
    let data = tempfile::tempdir().unwrap();
    populate(data.path(), 0, 12);
    let key = public_key(data.path());
    let proof_path = data.path().join("proof.json");
    // No checkpoint covers seq 7 yet: a proof is refused, and none is signed for it (a read
    // never writes).
    let out = run(
        data.path(),
        &["prove", "7", "--out", proof_path.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no checkpoint covers seq 7"),
        "{}",
        stderr(&out)
    );
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(
        data.path(),
        &["prove", "7", "--out", proof_path.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let elsewhere = tempfile::tempdir().unwrap();
    let out = run(
        &elsewhere.path().join("no-data-here"),
        &[
            "verify-proof",
            proof_path.to_str().unwrap(),
            "--public-key",
            &key,
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("is seq 7 of the 12 events"),
        "{}",
        stdout(&out)
    );
    assert!(
        !elsewhere.path().join("no-data-here").exists(),
        "verify-proof needs no data directory"
    );

    let text = std::fs::read_to_string(&proof_path).unwrap();
    let mut proof: serde_json::Value = serde_json::from_str(&text).unwrap();
    proof["leaf_index"] = 6.into();
    let doctored = data.path().join("doctored.json");
    std::fs::write(&doctored, proof.to_string()).unwrap();
    let out = run(
        data.path(),
        &[
            "verify-proof",
            doctored.to_str().unwrap(),
            "--public-key",
            &key,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).starts_with("INVALID"), "{}", stdout(&out));

    let other_key = "ab".repeat(32);
    let out = run(
        data.path(),
        &[
            "verify-proof",
            proof_path.to_str().unwrap(),
            "--public-key",
            &other_key,
        ],
    );
    assert_ne!(
        out.status.code(),
        Some(0),
        "a proof must not verify under another key"
    );
}

#[test]
fn a_saved_checkpoint_proves_in_one_command_that_the_ledger_only_grew() {
    let data = tempfile::tempdir().unwrap();
    populate(data.path(), 0, 5);
    let key = public_key(data.path());
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let saved = data.path().join("saved.json");
    std::fs::write(&saved, &out.stdout).unwrap();
    let checkpoint: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(checkpoint["tree_size"], 5);

    populate(data.path(), 5, 30);
    let out = run(data.path(), &["key", "rotate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    populate(data.path(), 30, 33);
    // Today's checkpoint, as a server's checkpointer would sign it: the proof stands on it.
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = run(
        data.path(),
        &[
            "verify-proof",
            "--since",
            saved.to_str().unwrap(),
            "--public-key",
            &key,
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("the ledger only grew"),
        "{}",
        stdout(&out)
    );

    // A checkpoint that this ledger never signed proves nothing.
    let mut forged = checkpoint.clone();
    forged["root"] = "00".repeat(32).into();
    let forged_path = data.path().join("forged.json");
    std::fs::write(&forged_path, forged.to_string()).unwrap();
    let out = run(
        data.path(),
        &[
            "verify-proof",
            "--since",
            forged_path.to_str().unwrap(),
            "--public-key",
            &key,
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));

    // Consistency between two checkpoints by size, checked offline.
    let out = run(data.path(), &["prove", "--consistency", "5", "33"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let file = data.path().join("consistency.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let out = run(
        data.path(),
        &["verify-proof", file.to_str().unwrap(), "--public-key", &key],
    );
    assert!(out.status.success(), "{}", stdout(&out));

    let out = run(data.path(), &["verify"]);
    assert!(out.status.success(), "{}", stdout(&out));
    // The saved one, the new key's at the rotation, and today's.
    assert!(
        stdout(&out).contains("3 signed checkpoints checked"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn proving_against_a_size_that_was_never_checkpointed_is_refused() {
    let data = tempfile::tempdir().unwrap();
    populate(data.path(), 0, 4);
    let out = run(data.path(), &["prove", "1", "--tree-size", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no checkpoint has tree size 3"),
        "{}",
        stderr(&out)
    );
}
