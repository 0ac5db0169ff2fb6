//! The first released format, frozen in `tests/fixtures/format-v1`: a data directory made once
//! and its bundle keep opening, verifying and replaying, byte for byte, with every build.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{run, stderr, stdout};

const TASK: &str = "01a2327b-c4d7-745f-a0b7-10194d2b51c2";
const FIRST_KEY: &str = "4dfb7d2bf499d8525acc5fb3745ba9aa1308c241b44202089b7a26fc5f48ebed";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v1")
}

/// A copy of the frozen data directory: opening it must not need to write, but a test never
/// risks the fixture.
fn copy_of_data() -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixture().join("data/."))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    // git keeps no file mode: the key is made private again, as the ledger keeps it.
    let key = copy.path().join("ledger/keys/signing.key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    copy
}

#[test]
fn the_frozen_data_directory_opens_verifies_and_replays() {
    if crate::server::embedded_only("the_frozen_data_directory_opens_verifies_and_replays") {
        return;
    }
    let data = copy_of_data();
    let out = run(data.path(), &["verify", "--json"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["size"], 69);
    assert_eq!(
        report["root"],
        "4a39e6a6ea8e9c019c5e731ca43eccb4454899289347ee473e5375c0ecdd88ed"
    );
    let out = run(data.path(), &["replay", TASK, "--check"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("re-derived bit for bit"),
        "{}",
        stdout(&out)
    );

    // An export of it today holds the same stored events as the frozen bundle.
    let bundle = data.path().join("again.json");
    let out = run(
        data.path(),
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let stored = |path: &Path| -> Vec<Value> {
        let bundle: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        bundle["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["stored"].clone())
            .collect()
    };
    assert_eq!(stored(&bundle), stored(&fixture().join("bundle.json")));
    // Its texts, written before the ledger kept content, are read from the content store of
    // that version (`blobs/`), each checked against its hash.
    let content = |path: &Path| -> Value {
        let bundle: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        bundle["content"].clone()
    };
    let texts = content(&bundle);
    assert_eq!(texts.as_array().map(Vec::len), Some(29));
    assert_eq!(texts, content(&fixture().join("bundle.json")));

    // It opens for writing: a checkpoint is signed by the key the chain names.
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(run(data.path(), &["verify"]).status.success());
}

#[test]
fn the_frozen_bundle_verifies_from_either_key_and_its_witness() {
    if crate::server::embedded_only("the_frozen_bundle_verifies_from_either_key_and_its_witness") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let bundle = fixture().join("bundle.json");
    let witness = std::fs::read_to_string(fixture().join("witness.vkey")).unwrap();
    let out = run(
        data.path(),
        &[
            "verify-bundle",
            bundle.to_str().unwrap(),
            "--public-key",
            FIRST_KEY,
            "--witness",
            witness.trim(),
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("cosigned by witness witness.example/fixture"));
    let frozen: Value = serde_json::from_str(&std::fs::read_to_string(&bundle).unwrap()).unwrap();
    let rotation = frozen["checkpoint_log"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["entry"] == "rotation")
        .expect("a rotation");
    let current = rotation["new_public_key"].as_str().unwrap();
    let out = run(
        data.path(),
        &[
            "verify-bundle",
            bundle.to_str().unwrap(),
            "--public-key",
            current,
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));

    // And it restores into a ledger that verifies.
    let restored = tempfile::tempdir().unwrap();
    let out = run(
        restored.path(),
        &[
            "import",
            bundle.to_str().unwrap(),
            "--public-key",
            FIRST_KEY,
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("verified: 69 events intact"),
        "{}",
        stdout(&out)
    );
}
