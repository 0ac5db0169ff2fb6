//! Export bundles: every kind of tampering is caught and located, and a whole-ledger bundle
//! restores a ledger that verifies, hash for hash.

use std::sync::Arc;

use ledger::bundle::{Bundle, BundleCheck, ExportSpec, Scope, verify_bundle};
use ledger::storage::memory::{Faults, MemoryStorage};
use ledger::{Digest, ExpectedVersion, Ledger, LedgerOptions, RecordedEvent};
use serde_json::Value;

use super::{keyed, options, request};

/// Payloads that start with `cite:` cite the content named by the 64 hex digits after it.
fn cited(event: &RecordedEvent) -> Vec<Digest> {
    std::str::from_utf8(&event.payload)
        .ok()
        .and_then(|p| p.strip_prefix("cite:"))
        .and_then(|hex| hex.get(..64))
        .and_then(|hex| hex.parse().ok())
        .into_iter()
        .collect()
}

fn view(event: &RecordedEvent) -> Result<Value, String> {
    Ok(Value::String(
        String::from_utf8_lossy(&event.payload).into_owned(),
    ))
}

fn blob(n: u8) -> (Digest, Vec<u8>) {
    let bytes = vec![n; 100];
    (Digest(*blake3::hash(&bytes).as_bytes()), bytes)
}

fn content(hash: &Digest) -> Result<Vec<u8>, String> {
    (0..10u8)
        .map(blob)
        .find(|(h, _)| h == hash)
        .map(|(_, b)| b)
        .ok_or_else(|| "no such blob".to_owned())
}

fn ledger_with_tasks() -> Ledger {
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 7)),
        options(7),
    );
    for i in 0..12u8 {
        let task = format!("task-{}", i % 3);
        let payload = if i % 4 == 0 {
            format!("cite:{}", blob(i / 4).0)
        } else {
            format!("note {i}")
        };
        let req = request(&task, ExpectedVersion::Any, &[payload.as_bytes()]);
        let req = if i % 5 == 0 {
            keyed(req, &format!("key-{i}"))
        } else {
            req
        };
        ledger.append(req).unwrap();
    }
    ledger
}

fn export(ledger: &Ledger, scope: Scope) -> Bundle {
    ledger
        .export(&ExportSpec {
            scope,
            without_content: false,
            payload_view: &view,
            cited_content: &cited,
            content: &content,
        })
        .unwrap()
}

fn check(bundle: &Bundle) -> Result<ledger::bundle::BundleReport, ledger::bundle::BundleFailure> {
    verify_bundle(
        bundle,
        &BundleCheck {
            trusted_key: None,
            witnesses: Vec::new(),
            payload_view: &view,
            cited_content: &cited,
        },
    )
}

fn location(bundle: &Bundle) -> String {
    check(bundle)
        .expect_err("tampering must be caught")
        .location
}

#[test]
fn a_whole_ledger_bundle_verifies() {
    let ledger = ledger_with_tasks();
    let bundle = export(&ledger, Scope::All);
    let report = check(&bundle).unwrap();
    assert_eq!(report.events, 12);
    assert_eq!(report.tasks.len(), 3);
    assert_eq!(report.content, 3);
    assert!(report.trusted_key_from_bundle);
    assert_eq!(bundle.idempotency.len(), 3);
    // Through JSON and back.
    let text = serde_json::to_string(&bundle).unwrap();
    let (_, again) = ledger::bundle::verify_bundle_text(
        &text,
        usize::MAX,
        &BundleCheck {
            trusted_key: None,
            witnesses: Vec::new(),
            payload_view: &view,
            cited_content: &cited,
        },
    )
    .unwrap();
    assert_eq!(again, report);
}

#[test]
fn any_altered_byte_of_any_event_is_caught_at_that_event() {
    let ledger = ledger_with_tasks();
    let bundle = export(&ledger, Scope::All);
    for i in 0..bundle.events.len() {
        for at in [
            0,
            bundle.events[i].stored.0.len() / 2,
            bundle.events[i].stored.0.len() - 1,
        ] {
            let mut doctored = bundle.clone();
            doctored.events[i].stored.0[at] ^= 0x04;
            let loc = location(&doctored);
            assert!(
                loc.starts_with(&format!("event #{i} ")),
                "byte {at} of event {i}: {loc}"
            );
        }
    }
}

#[test]
fn removed_reordered_duplicated_or_inserted_events_are_caught_where_they_are() {
    let ledger = ledger_with_tasks();
    let bundle = export(&ledger, Scope::All);
    let n = bundle.events.len();
    for (what, index) in [("first", 0), ("middle", n / 2), ("last", n - 1)] {
        let mut doctored = bundle.clone();
        doctored.events.remove(index);
        assert!(
            location(&doctored).starts_with(&format!("event #{index}")),
            "removed {what}"
        );
    }
    let mut reordered = bundle.clone();
    reordered.events.swap(3, 4);
    assert!(location(&reordered).starts_with("event #3"));
    let mut duplicated = bundle.clone();
    let copy = duplicated.events[5].clone();
    duplicated.events.insert(6, copy);
    assert!(location(&duplicated).starts_with("event #6"));
    let mut inserted = bundle.clone();
    let mut forged = inserted.events[2].clone();
    forged.seq = 99;
    inserted.events.push(forged);
    assert!(location(&inserted).starts_with(&format!("event #{n}")));
}

#[test]
fn a_doctored_view_root_or_signature_is_caught() {
    let ledger = ledger_with_tasks();
    let bundle = export(&ledger, Scope::All);

    let mut view_doctored = bundle.clone();
    view_doctored.events[4].decoded["payload"] = Value::String("something else".into());
    assert!(location(&view_doctored).starts_with("event #4"));

    let mut actor_doctored = bundle.clone();
    actor_doctored.events[1].decoded["actor"] = Value::String("mallory".into());
    assert!(location(&actor_doctored).starts_with("event #1"));

    let mut root_doctored = bundle.clone();
    root_doctored.checkpoint.root = Digest([9; 32]);
    assert_eq!(location(&root_doctored), "checkpoint");

    let mut signature_doctored = bundle.clone();
    signature_doctored.manifest.signature.0[0] ^= 1;
    assert_eq!(location(&signature_doctored), "manifest");

    let mut proof_doctored = bundle.clone();
    proof_doctored.events[7].proof[0] = Digest([1; 32]);
    assert!(location(&proof_doctored).starts_with("event #7"));

    let mut blob_doctored = bundle.clone();
    blob_doctored.content[1].bytes.0[0] ^= 1;
    assert!(location(&blob_doctored).starts_with("content #1"));

    let mut blob_removed = bundle.clone();
    blob_removed.content.remove(0);
    assert_eq!(location(&blob_removed), "content");
}

#[test]
fn a_task_bundle_misses_nothing_of_its_tasks() {
    let ledger = ledger_with_tasks();
    let bundle = export(&ledger, Scope::Tasks(vec!["task-1".into()]));
    let report = check(&bundle).unwrap();
    assert_eq!(report.events, 4);
    assert_eq!(report.tasks, vec![("task-1".to_owned(), 4)]);
    for index in [0, 1, 3] {
        let mut doctored = bundle.clone();
        doctored.events.remove(index);
        assert!(
            check(&doctored).is_err(),
            "removed event {index} of the task"
        );
    }
    // Another task's event slipped in.
    let all = export(&ledger, Scope::All);
    let mut doctored = bundle.clone();
    doctored.events.insert(0, all.events[0].clone());
    assert!(check(&doctored).is_err());
}

#[test]
fn a_bundle_checked_against_another_key_fails() {
    let ledger = ledger_with_tasks();
    let bundle = export(&ledger, Scope::All);
    let stranger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 8)),
        options(8),
    );
    let failure = verify_bundle(
        &bundle,
        &BundleCheck {
            trusted_key: Some(stranger.public_key().unwrap()),
            witnesses: Vec::new(),
            payload_view: &view,
            cited_content: &cited,
        },
    )
    .unwrap_err();
    assert_eq!(failure.location, "checkpoint log");
    let good = verify_bundle(
        &bundle,
        &BundleCheck {
            trusted_key: Some(ledger.public_key().unwrap()),
            witnesses: Vec::new(),
            payload_view: &view,
            cited_content: &cited,
        },
    )
    .unwrap();
    assert!(!good.trusted_key_from_bundle);
}

#[test]
fn a_restored_ledger_is_the_same_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let source = Ledger::open(&dir.path().join("old"), options(1)).unwrap();
    for i in 0..20u32 {
        let req = request(
            &format!("t{}", i % 3),
            ExpectedVersion::Any,
            &[&i.to_le_bytes()],
        );
        source.append(keyed(req, &format!("k{i}"))).unwrap();
        if i == 9 {
            source.rotate_key().unwrap();
        }
    }
    let bundle = export(&source, Scope::All);
    let old_root = source.root_at(20).unwrap();
    let old_secret = std::fs::read_to_string(dir.path().join("old/keys/signing.key")).unwrap();
    drop(source);

    // With the key: signing goes on, no break.
    let mut secret = [0u8; 32];
    hex::decode_to_slice(old_secret.trim(), &mut secret).unwrap();
    let key = ledger::ledger_proof::SigningKey::from_secret_bytes(&secret);
    let (restored, report) =
        Ledger::restore(&dir.path().join("new"), &bundle, Some(key), options(2)).unwrap();
    assert_eq!(report.events, 20);
    assert_eq!(report.idempotency_keys, 20);
    assert!(report.key_chain_break.is_none());
    assert_eq!(restored.root_at(20).unwrap(), old_root);
    let verified = restored.verify_from_scratch(&mut |_, _| {});
    assert!(verified.is_intact(), "{verified:?}");
    assert!(verified.key_chain_breaks.is_empty());
    // A retried command is answered with its original receipt.
    let retry = restored
        .append(keyed(
            request("t1", ExpectedVersion::Any, &[&4u32.to_le_bytes()]),
            "k4",
        ))
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.events[0].hash, bundle.events[4].hash);
    restored.checkpoint().unwrap();
    drop(restored);

    // Without it: a new key, and the break is said.
    let (restored, report) =
        Ledger::restore(&dir.path().join("newer"), &bundle, None, options(3)).unwrap();
    assert!(report.key_chain_break.is_some());
    let verified = restored.verify_from_scratch(&mut |_, _| {});
    assert!(verified.is_intact(), "{verified:?}");
    assert_eq!(verified.key_chain_breaks.len(), 1);

    // Never over an existing ledger.
    assert!(Ledger::restore(&dir.path().join("newer"), &bundle, None, options(4)).is_err());
    let _ = LedgerOptions::default();
}

#[test]
fn a_restore_refused_for_its_scope_or_its_key_writes_nothing_where_the_ledger_would_be() {
    use ledger::RestoreError;
    use ledger::ledger_proof::SigningKey;

    let dir = tempfile::tempdir().unwrap();
    let source = Ledger::open(&dir.path().join("old"), options(1)).unwrap();
    for i in 0..6u32 {
        let req = request(
            &format!("t{}", i % 2),
            ExpectedVersion::Any,
            &[&i.to_le_bytes()],
        );
        source.append(req).unwrap();
        if i == 2 {
            source.rotate_key().unwrap();
        }
    }
    let all = export(&source, Scope::All);
    let task = export(&source, Scope::Tasks(vec!["t1".into()]));
    let secret = std::fs::read_to_string(dir.path().join("old/keys/signing.key")).unwrap();
    drop(source);
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(secret.trim(), &mut bytes).unwrap();
    let current = || SigningKey::from_secret_bytes(&bytes);
    let stranger = || SigningKey::from_secret_bytes(&[7; 32]);

    let target = dir.path().join("new");
    let refused = Ledger::restore(&target, &task, Some(current()), options(2));
    assert!(matches!(refused, Err(RestoreError::NotWholeLedger)));
    assert!(
        !target.exists(),
        "a refused restore wrote {}",
        target.display()
    );
    let refused = Ledger::restore(&target, &all, Some(stranger()), options(2));
    match refused {
        Err(RestoreError::WrongKey {
            given,
            current: named,
        }) => {
            assert_eq!(given, stranger().fingerprint().to_string());
            assert_eq!(named, current().fingerprint().to_string());
        }
        other => panic!("{:?}", other.map(|(_, report)| report)),
    }
    assert!(
        !target.exists(),
        "a refused restore wrote {}",
        target.display()
    );
    // Nothing stands in the way of the restore with the right key.
    let (restored, report) = Ledger::restore(&target, &all, Some(current()), options(2)).unwrap();
    assert!(report.key_chain_break.is_none());
    assert!(restored.verify_from_scratch(&mut |_, _| {}).is_intact());
}

/// A ledger in `dir` that lost its last event to damage, accepted the loss and wrote on; with
/// the checkpoint it had signed over the history given up.
fn ledger_past_an_accepted_loss(
    dir: &std::path::Path,
) -> (Ledger, ledger::ledger_proof::Checkpoint) {
    let quiet = || super::quiet(5);
    let given_up = {
        let ledger = Ledger::open(dir, quiet()).unwrap();
        for i in 0..6u8 {
            ledger
                .append(request("t", ExpectedVersion::Any, &[&[i; 40]]))
                .unwrap();
        }
        ledger.checkpoint().unwrap()
    };
    let segment = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    std::fs::write(&segment, &bytes[..bytes.len() - 7]).unwrap();
    Ledger::accept_loss(dir, quiet(), "the disk lost its last write").unwrap();
    let ledger = Ledger::open(dir, quiet()).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    for i in 0..3u8 {
        ledger
            .append(request("u", ExpectedVersion::Any, &[&[i; 30]]))
            .unwrap();
    }
    ledger.checkpoint().unwrap();
    (ledger, given_up)
}

#[test]
fn a_bundle_past_an_accepted_loss_verifies_and_cannot_stand_on_the_history_given_up() {
    let dir = tempfile::tempdir().unwrap();
    let (ledger, given_up) = ledger_past_an_accepted_loss(dir.path());
    assert_eq!(given_up.tree_size, 6);
    let bundle = export(&ledger, Scope::All);
    assert!(
        bundle
            .checkpoint_log
            .iter()
            .any(|e| matches!(e, ledger::CheckpointEntry::Recovery(_))),
        "the statement travels with the bundle"
    );
    let report = check(&bundle).unwrap();
    assert_eq!(report.tree_size, 8);
    assert_eq!(report.events, 8);

    // The operator, who holds the key, re-signs the bundle to stand on the checkpoint signed
    // before the loss.
    let mut forged = bundle.clone();
    forged.checkpoint = given_up.clone();
    let mut manifest = forged.manifest.manifest.clone();
    manifest.tree_size = given_up.tree_size;
    manifest.root = given_up.root;
    forged.manifest = ledger.sign_manifest(manifest).unwrap();
    let failure = check(&forged).expect_err("a checkpoint of history given up was accepted");
    assert!(
        failure.location.contains("checkpoint") && failure.problem.contains("given up"),
        "{}: {}",
        failure.location,
        failure.problem
    );
}

/// What a reader makes of a bundle's text.
fn check_text(text: &str) -> Result<ledger::bundle::BundleReport, ledger::bundle::BundleFailure> {
    ledger::bundle::verify_bundle_text(
        text,
        usize::MAX,
        &BundleCheck {
            trusted_key: None,
            witnesses: Vec::new(),
            payload_view: &view,
            cited_content: &cited,
        },
    )
    .map(|(_, report)| report)
}

#[test]
fn a_field_the_format_does_not_have_is_refused_wherever_it_is() {
    use ledger::ledger_proof::{Cosignature, SigningKey};

    // Every kind of object a bundle holds: a rotation and a cosignature in the checkpoint log
    // besides keys and checkpoints, blobs, idempotency keys, and a task bundle's scope.
    let ledger = ledger_with_tasks();
    ledger.rotate_key().unwrap();
    let checkpoint = ledger.checkpoint().unwrap();
    let witness = SigningKey::from_secret_bytes(&[9; 32]);
    ledger
        .record_cosignature(Cosignature::sign(&witness, "w", &checkpoint, 1_750_000_000).unwrap())
        .unwrap();
    let all = serde_json::to_value(export(&ledger, Scope::All)).unwrap();
    let task = serde_json::to_value(export(&ledger, Scope::Tasks(vec!["task-1".into()]))).unwrap();
    let kind_at = |entry: &str| {
        all["checkpoint_log"]
            .as_array()
            .unwrap()
            .iter()
            .position(|e| e["entry"] == entry)
            .unwrap_or_else(|| panic!("no {entry} entry"))
    };
    let entry = |kind: &str| format!("/checkpoint_log/{}", kind_at(kind));
    let path = |kind: &str| format!("checkpoint_log[{}]", kind_at(kind));
    let places: Vec<(&Value, String, String)> = vec![
        (&all, String::new(), String::new()),
        (&task, "/scope".into(), "scope".into()),
        (&all, entry("key_introduced"), path("key_introduced")),
        (&all, entry("checkpoint"), path("checkpoint")),
        (&all, entry("rotation"), path("rotation")),
        (&all, entry("cosignature"), path("cosignature")),
        (&all, "/checkpoint".into(), "checkpoint".into()),
        (&all, "/events/3".into(), "events[3]".into()),
        (&all, "/content/0".into(), "content[0]".into()),
        (&all, "/idempotency/0".into(), "idempotency[0]".into()),
        (&all, "/manifest".into(), "manifest".into()),
    ];
    let mut accepted = Vec::new();
    for (bundle, place, path) in places {
        check_text(&bundle.to_string()).unwrap_or_else(|e| panic!("{place}: {e}"));
        let mut doctored = bundle.clone();
        doctored
            .pointer_mut(&place)
            .and_then(Value::as_object_mut)
            .unwrap_or_else(|| panic!("{place} is not an object"))
            .insert("note".into(), Value::from("trust me"));
        match check_text(&doctored.to_string()) {
            Ok(_) => accepted.push(place),
            Err(failure) => {
                // Refused as the reader refuses any text that is not a bundle, naming the field.
                assert!(
                    failure.location.starts_with("the bundle, line "),
                    "{place}: {failure}"
                );
                assert!(failure.problem.contains("`note`"), "{place}: {failure}");
                assert!(
                    failure
                        .problem
                        .starts_with(&format!("not a bundle: {path}")),
                    "{place}: {failure}"
                );
            }
        }
    }
    assert!(
        accepted.is_empty(),
        "a field added here was accepted: {accepted:?}"
    );
    // The decoded view is compared whole with the stored bytes: a field added to it is caught at
    // its event.
    let mut doctored = all.clone();
    doctored["events"][3]["decoded"]["note"] = Value::from("trust me");
    let failure = check_text(&doctored.to_string()).unwrap_err();
    assert!(failure.location.starts_with("event #3 "), "{failure}");
}
