//! `research-ledger verify` on an intact, a damaged and a locked data directory.

use ledger::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, NewEvent};

use super::{run, stderr, stdout};

fn populate(data: &std::path::Path, events: u32) {
    populate_range(data, 0, events);
}

/// Appends events `from..to` to the ledger of a data directory, through the library.
pub(crate) fn populate_range(data: &std::path::Path, from: u32, to: u32) {
    let ledger = crate::server::open_ledger(data, LedgerOptions::default());
    for i in from..to {
        ledger
            .append(AppendRequest {
                stream: format!("task-{}", i % 3),
                expected: ExpectedVersion::Any,
                actor: "tester".into(),
                events: vec![NewEvent {
                    kind: "noted".into(),
                    payload: format!("event number {i}").into_bytes(),
                    causation: vec![],
                }],
                idempotency: None,
                content: Vec::new(),
            })
            .unwrap();
    }
}

#[test]
fn an_intact_ledger_verifies_with_exit_zero() {
    let data = tempfile::tempdir().unwrap();
    populate(data.path(), 20);
    let out = run(data.path(), &["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("intact: 20 events verified"),
        "{}",
        stdout(&out)
    );

    let out = run(data.path(), &["verify", "--json"]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["size"], 20);
    assert!(report["failure"].is_null());
}

#[test]
fn a_damaged_event_fails_verification_naming_its_seq() {
    let data = tempfile::tempdir().unwrap();
    populate(data.path(), 20);
    if let Some(url) = crate::server::storage_url(data.path()) {
        // The same damage in the database: one bit of the stored bytes of seq 12.
        crate::server::psql(
            &url,
            "UPDATE ledger_events SET bytes = set_byte(bytes, \
             position('event number 12'::bytea in bytes) - 1, \
             get_byte(bytes, position('event number 12'::bytea in bytes) - 1) # 32) \
             WHERE seq = 12",
        );
    } else {
        let segment = data.path().join("ledger/log/00000000000000000000.seg");
        let mut bytes = std::fs::read(&segment).unwrap();
        let needle = b"event number 12";
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap();
        bytes[at] ^= 0x20;
        std::fs::write(&segment, bytes).unwrap();
    }

    let out = run(data.path(), &["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("FAILED at seq 12"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_locked_data_directory_is_reported_with_its_holder() {
    if crate::server::embedded_only("a_locked_data_directory_is_reported_with_its_holder") {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    populate(data.path(), 1);
    let _held = Ledger::open(
        &data.path().join("ledger"),
        LedgerOptions {
            lock_note: Some("research-ledger serve on 127.0.0.1:7999 (pid 1)".into()),
            ..LedgerOptions::default()
        },
    )
    .unwrap();
    let out = run(data.path(), &["verify"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains("127.0.0.1:7999"), "{err}");
}

#[test]
fn a_fresh_data_directory_verifies_empty() {
    let data = tempfile::tempdir().unwrap();
    let out = run(&data.path().join("new"), &["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("intact: 0 events"));
}
