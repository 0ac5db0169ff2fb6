//! The auditor's commands through the binary: replay with re-derivation, explain, export,
//! verify-bundle (each kind of tampering caught and located) and import.

use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use super::{first_line, run, stderr, stdout};

/// Runs the demo for one question and returns its task id.
fn demo_task(data: &Path, question: &str) -> String {
    let out = run(data, &["demo", "--json", "--question", question]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["tasks"][0]["task_id"].as_str().unwrap().to_owned()
}

#[test]
fn replay_rederives_every_verdict_and_travels_in_time() {
    let data = tempfile::tempdir().unwrap();
    let task = demo_task(data.path(), "four-day-week-eastvale");
    let out = run(data.path(), &["replay", &task, "--check"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("re-derived bit for bit"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("the replayed state is the live state"));

    let out = run(data.path(), &["replay", &task, "--at", "3", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let state: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["version"], 3);
    assert!(state["conclusion"].is_null(), "no verdict yet at version 3");

    let out = run(data.path(), &["replay", "no-such-task"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn replay_names_an_event_whose_recorded_verdict_does_not_follow_from_its_inputs() {
    let data = tempfile::tempdir().unwrap();
    let task = demo_task(data.path(), "lake-varden-blooms");
    // Append, with a valid hash chain, a conclusion whose confidence was tampered with: the
    // chain verifies, but the value does not follow from the events it cites.
    let forged_seq = {
        let ledger = crate::server::open_ledger(data.path(), ledger::LedgerOptions::default());
        let events = ledger.read_stream(&task, 1, 10_000).unwrap();
        let issued = events
            .iter()
            .rev()
            .find(|e| e.kind == "conclusion_issued")
            .unwrap();
        let mut event = research::decode(&issued.kind, &issued.payload).unwrap();
        if let research::Event::ConclusionIssued(c) = &mut event {
            c.confidence += 0.125;
        }
        let receipt = ledger
            .append(ledger::AppendRequest {
                stream: task.clone(),
                expected: ledger::ExpectedVersion::Any,
                actor: "mallory".into(),
                events: vec![ledger::NewEvent {
                    kind: "conclusion_issued".into(),
                    payload: research::encode(&event),
                    causation: vec![],
                }],
                idempotency: None,
                content: Vec::new(),
            })
            .unwrap();
        receipt.events[0].seq
    };
    let out = run(data.path(), &["replay", &task, "--check"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("check FAILED at seq {forged_seq}")),
        "{}",
        stdout(&out)
    );
    // The chain itself is intact: only re-derivation shows the lie.
    assert!(run(data.path(), &["verify"]).status.success());
}

#[test]
fn explain_reads_and_never_writes() {
    let data = tempfile::tempdir().unwrap();
    let task = demo_task(data.path(), "gongxiang-danche-qingchuan");
    let before = ledger_size(data.path());
    let out = run(data.path(), &["explain", &task]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("# Conclusion cl-1: uncertain"),
        "{}",
        stdout(&out)
    );
    assert_eq!(ledger_size(data.path()), before);
}

fn ledger_size(data: &Path) -> u64 {
    let out = run(data, &["verify", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["size"].as_u64().unwrap()
}

fn edit_bundle(from: &Path, to: &Path, edit: impl FnOnce(&mut Value)) {
    let mut bundle: Value = serde_json::from_slice(&std::fs::read(from).unwrap()).unwrap();
    edit(&mut bundle);
    std::fs::write(to, serde_json::to_vec(&bundle).unwrap()).unwrap();
}

#[test]
fn a_bundle_verifies_offline_and_every_tampering_is_located() {
    let data = tempfile::tempdir().unwrap();
    let task = demo_task(data.path(), "gongxiang-danche-qingchuan");
    demo_task(data.path(), "lake-varden-blooms");
    let bundle = data.path().join("task.json");
    let out = run(
        data.path(),
        &["export", &task, "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let key = first_line(&stdout(&run(data.path(), &["key", "show"])));

    let nowhere = tempfile::tempdir().unwrap();
    let out = run(
        &nowhere.path().join("none"),
        &[
            "verify-bundle",
            bundle.to_str().unwrap(),
            "--public-key",
            &key,
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("valid:"));
    let out = run(nowhere.path(), &["verify-bundle", bundle.to_str().unwrap()]);
    assert!(
        stdout(&out).contains("trusting the key inside the bundle"),
        "{}",
        stdout(&out)
    );

    let doctored = data.path().join("doctored.json");
    let n = {
        let b: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
        b["events"].as_array().unwrap().len()
    };
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, String)> = vec![
        (
            "an altered byte",
            Box::new(|b| {
                let stored = b["events"][4]["stored"].as_str().unwrap();
                let mut bytes = base64::engine::general_purpose::STANDARD
                    .decode(stored)
                    .unwrap();
                bytes[10] ^= 1;
                b["events"][4]["stored"] = base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .into();
            }),
            "event #4".into(),
        ),
        (
            "the first event removed",
            Box::new(|b| {
                b["events"].as_array_mut().unwrap().remove(0);
            }),
            "event #0".into(),
        ),
        (
            "a middle event removed",
            Box::new(|b| {
                b["events"].as_array_mut().unwrap().remove(7);
            }),
            "event #7".into(),
        ),
        (
            "the last event removed",
            Box::new(move |b| {
                b["events"].as_array_mut().unwrap().pop();
            }),
            format!("event #{}", n - 1),
        ),
        (
            "two events swapped",
            Box::new(|b| b["events"].as_array_mut().unwrap().swap(2, 3)),
            "event #2".into(),
        ),
        (
            "an event duplicated",
            Box::new(|b| {
                let copy = b["events"][5].clone();
                b["events"].as_array_mut().unwrap().insert(6, copy);
            }),
            "event #6".into(),
        ),
        (
            "a doctored decoded view",
            Box::new(|b| b["events"][3]["decoded"]["actor"] = "someone else".into()),
            "event #3".into(),
        ),
        (
            "a doctored root",
            Box::new(|b| b["checkpoint"]["root"] = "00".repeat(32).into()),
            "checkpoint".into(),
        ),
        (
            "a doctored signature",
            Box::new(|b| {
                let sig = b["manifest"]["signature"].as_str().unwrap().to_owned();
                let first = if sig.starts_with('0') { '1' } else { '0' };
                let flipped: String = std::iter::once(first).chain(sig.chars().skip(1)).collect();
                b["manifest"]["signature"] = flipped.into();
            }),
            "manifest".into(),
        ),
    ];
    for (what, edit, location) in cases {
        edit_bundle(&bundle, &doctored, edit);
        let out = run(
            nowhere.path(),
            &[
                "verify-bundle",
                doctored.to_str().unwrap(),
                "--public-key",
                &key,
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stdout(&out));
        assert!(
            stdout(&out).contains(&format!("INVALID at {location}")),
            "{what}: {}",
            stdout(&out)
        );
    }
    std::fs::write(&doctored, b"{ not a bundle").unwrap();
    let out = run(
        nowhere.path(),
        &["verify-bundle", doctored.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));

    let out = run(
        data.path(),
        &[
            "export",
            "no-such-task",
            "--out",
            doctored.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn import_restores_a_ledger_that_verifies_and_replays() {
    let data = tempfile::tempdir().unwrap();
    let task = demo_task(data.path(), "four-day-week-eastvale");
    let bundle = data.path().join("all.json");
    assert!(
        run(
            data.path(),
            &["export", "--all", "--out", bundle.to_str().unwrap()]
        )
        .status
        .success()
    );
    let key = data.path().join("ledger/keys/signing.key");

    let restored = tempfile::tempdir().unwrap();
    let out = run(
        restored.path(),
        &[
            "import",
            bundle.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("WARNING"), "{}", stdout(&out));
    let out = run(restored.path(), &["replay", &task, "--check"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let out = run(restored.path(), &["verify"]);
    assert!(out.status.success(), "{}", stdout(&out));
    // The restored ledger goes on: a new task and a checkpoint signed by the same key.
    assert!(run(restored.path(), &["checkpoint"]).status.success());
    assert_eq!(
        stdout(&run(restored.path(), &["key", "show"])),
        stdout(&run(data.path(), &["key", "show"]))
    );

    // Without the key: a new key, and the break is said.
    let keyless = tempfile::tempdir().unwrap();
    let out = run(keyless.path(), &["import", bundle.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("WARNING: no signing key was given"),
        "{}",
        stdout(&out)
    );
    let out = run(keyless.path(), &["verify"]);
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("the chain of signing keys breaks"),
        "{}",
        stderr(&out)
    );

    // Never over a ledger.
    let out = run(restored.path(), &["import", bundle.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
}

#[test]
fn an_export_says_what_no_checkpoint_covers_yet_and_leaves_out() {
    if crate::server::on_postgres() {
        // The events are written in process, to this data directory's own ledger.
        return;
    }
    let data = tempfile::tempdir().unwrap();
    demo_task(data.path(), "lake-varden-blooms");
    let covered = ledger_size(data.path());
    {
        // A writer that stops without its closing checkpoint (as a crash would).
        let service = service::Service::open(service::ServiceOptions::new(data.path())).unwrap();
        service
            .call_tool(
                &service::Caller::new("auditor-test"),
                "research_open_task",
                &serde_json::json!({"question": "Is the lake warming?", "research_date": "2026-01-15"}),
            )
            .unwrap();
    }
    let bundle = data.path().join("all.json");
    let out = run(
        data.path(),
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let uncovered = ledger_size(data.path()) - covered;
    assert!(uncovered > 0);
    assert!(
        stderr(&out).contains(&format!(
            "the ledger holds {uncovered} events after that checkpoint, which no checkpoint covers yet and the bundle leaves out"
        )),
        "{}",
        stderr(&out)
    );
    let written: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(written["events"].as_array().unwrap().len() as u64, covered);

    // Once a checkpoint covers them, the bundle holds every event and nothing is said.
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(
        data.path(),
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("no checkpoint covers"),
        "{}",
        stderr(&out)
    );
    let written: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(
        written["events"].as_array().unwrap().len() as u64,
        ledger_size(data.path())
    );
}

/// A bundle carries public keys and signatures, never a signing key: not the one in use, not
/// one retired by a rotation — in hex as the key file holds it, in base64, or as raw bytes.
#[test]
fn no_signing_key_is_ever_exported() {
    let data = tempfile::tempdir().unwrap();
    let secret = || {
        let text = std::fs::read_to_string(data.path().join("ledger/keys/signing.key")).unwrap();
        text.trim().to_owned()
    };
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = secret();
    let out = run(data.path(), &["key", "rotate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let second = secret();
    assert_ne!(first, second);
    let out = run(data.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bundle = data.path().join("all.json");
    export_all(data.path(), &bundle);
    let text = std::fs::read(&bundle).unwrap();
    let holds = |needle: &[u8]| text.windows(needle.len()).any(|w| w == needle);
    for key in [&first, &second] {
        assert_eq!(key.len(), 64, "a key file holds 32 bytes in hex");
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&key[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        for form in [
            key.to_lowercase().into_bytes(),
            key.to_uppercase().into_bytes(),
            base64::engine::general_purpose::STANDARD
                .encode(&bytes)
                .trim_end_matches('=')
                .as_bytes()
                .to_vec(),
            bytes.clone(),
        ] {
            assert!(!holds(&form), "the bundle holds a signing key");
        }
    }
}

/// Writes the whole-ledger bundle of `data` to `to`.
fn export_all(data: &Path, to: &Path) {
    let out = run(data, &["export", "--all", "--out", to.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `verify-bundle` of `bundle`, trusting `key` (hex) or, without one, the bundle's first key.
fn verify_bundle(bundle: &Path, key: Option<&str>) -> std::process::Output {
    let nowhere = tempfile::tempdir().unwrap();
    let mut args = vec!["verify-bundle", bundle.to_str().unwrap()];
    args.extend(key.iter().flat_map(|k| ["--public-key", k]));
    run(&nowhere.path().join("none"), &args)
}

/// The fingerprint `key show` says (on stderr) for the signing key of `data`.
fn fingerprint(data: &Path) -> String {
    let shown = stderr(&run(data, &["key", "show"]));
    let line = shown.lines().find(|l| l.starts_with("fingerprint "));
    line.unwrap().trim_start_matches("fingerprint ").to_owned()
}

/// A ledger researched under its first key, restored from its backup without that key, then
/// researched and checkpointed further under the key the restore started: the restored
/// ledger's whole-ledger bundle, the first key and the restore's key (hex, and its
/// fingerprint), and the checkpoint log entry (from 1) that introduces the restore's key.
struct KeylessRestore {
    _dirs: [tempfile::TempDir; 2],
    bundle: std::path::PathBuf,
    first_key: String,
    new_key: String,
    new_fingerprint: String,
    break_entry: usize,
}

fn keyless_restore_researched_further() -> KeylessRestore {
    let original = tempfile::tempdir().unwrap();
    demo_task(original.path(), "lake-varden-blooms");
    let backup = original.path().join("backup.json");
    export_all(original.path(), &backup);
    let restored = tempfile::tempdir().unwrap();
    let out = run(restored.path(), &["import", backup.to_str().unwrap()]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    demo_task(restored.path(), "four-day-week-eastvale");
    let out = run(restored.path(), &["checkpoint"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bundle = restored.path().join("after.json");
    export_all(restored.path(), &bundle);
    let first_key = first_line(&stdout(&run(original.path(), &["key", "show"])));
    let new_key = first_line(&stdout(&run(restored.path(), &["key", "show"])));
    let written: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let introduced: Vec<(usize, &Value)> = written["checkpoint_log"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, e)| e["entry"] == "key_introduced")
        .collect();
    assert_eq!(introduced.len(), 2, "{}", written["checkpoint_log"]);
    assert_eq!(introduced[1].1["public_key"], new_key.as_str());
    KeylessRestore {
        bundle,
        first_key,
        new_key,
        new_fingerprint: fingerprint(restored.path()),
        break_entry: introduced[1].0 + 1,
        _dirs: [original, restored],
    }
}

#[test]
fn a_key_an_import_started_without_the_old_key_breaks_the_chain_and_verify_bundle_fails_there_unless_that_key_is_trusted()
 {
    let restore = keyless_restore_researched_further();
    let new_fingerprint = &restore.new_fingerprint;
    for trusted in [None, Some(restore.first_key.as_str())] {
        let out = verify_bundle(&restore.bundle, trusted);
        assert_eq!(out.status.code(), Some(1), "{trusted:?}: {}", stdout(&out));
        let expected = format!(
            "INVALID at checkpoint log entry {}: the chain of keys breaks here (key {new_fingerprint} is not introduced by the trusted key); verify from that key with --public-key if you trust it",
            restore.break_entry
        );
        assert!(
            stdout(&out).contains(&expected),
            "{trusted:?}: {}",
            stdout(&out)
        );
    }
    let out = verify_bundle(&restore.bundle, Some(&restore.new_key));
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "WARNING: the chain of signing keys breaks: checkpoint log entry {}: key {new_fingerprint} starts a new chain",
            restore.break_entry
        )),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("valid:"), "{}", stdout(&out));
}

#[test]
fn a_key_and_checkpoint_forged_onto_a_genuine_bundle_are_refused_at_the_forged_key_by_an_auditor_trusting_the_ledger_s_key()
 {
    use ledger::CheckpointEntry;
    use ledger::ledger_proof::{Checkpoint, SigningKey};

    let data = tempfile::tempdir().unwrap();
    demo_task(data.path(), "lake-varden-blooms");
    let genuine = data.path().join("all.json");
    export_all(data.path(), &genuine);
    let key = first_line(&stdout(&run(data.path(), &["key", "show"])));
    assert!(verify_bundle(&genuine, Some(&key)).status.success());

    // The attacker's own key, introduced as if a restore had started it, signs a checkpoint of
    // the same tree and the manifest of the whole bundle.
    let mut bundle: ledger::bundle::Bundle =
        serde_json::from_slice(&std::fs::read(&genuine).unwrap()).unwrap();
    let attacker = SigningKey::from_secret_bytes(&[7; 32]);
    let c = bundle.checkpoint.clone();
    bundle.checkpoint_log.push(CheckpointEntry::KeyIntroduced {
        public_key: attacker.public_key(),
        tree_size: c.tree_size,
        time: c.time,
        reason: "restored from a bundle without the previous signing key".into(),
        origin: c.origin.clone(),
    });
    let forged_entry = bundle.checkpoint_log.len();
    let forged = Checkpoint::sign(&attacker, &c.origin, c.tree_size, c.root, c.time).unwrap();
    bundle
        .checkpoint_log
        .push(CheckpointEntry::Checkpoint(forged.clone()));
    bundle.checkpoint = forged;
    let mut manifest = bundle.manifest.manifest.clone();
    manifest.checkpoint_log = bundle
        .checkpoint_log
        .iter()
        .map(ledger::bundle::log_line)
        .collect();
    bundle.manifest = manifest.sign(&attacker).unwrap();
    let doctored = data.path().join("forged.json");
    std::fs::write(&doctored, serde_json::to_vec(&bundle).unwrap()).unwrap();

    for trusted in [Some(key.as_str()), None] {
        let out = verify_bundle(&doctored, trusted);
        assert_eq!(out.status.code(), Some(1), "{trusted:?}: {}", stdout(&out));
        assert!(
            stdout(&out).contains(&format!(
                "INVALID at checkpoint log entry {forged_entry}: the chain of keys breaks here (key {} is not introduced by the trusted key)",
                attacker.fingerprint()
            )),
            "{trusted:?}: {}",
            stdout(&out)
        );
    }
    // Only an auditor who chooses to trust the attacker's key is told the bundle holds.
    let attacker_hex = hex::encode(attacker.public_key().to_bytes());
    assert!(
        verify_bundle(&doctored, Some(&attacker_hex))
            .status
            .success()
    );
}

/// Runs `args` on `restored`, which must be refused (status 2) saying `says`, leaving nothing
/// at `restored`.
fn import_refused(restored: &Path, args: &[&str], says: &str) {
    let out = run(restored, args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains(says), "{}", stderr(&out));
    assert!(
        !restored.exists(),
        "a refused import wrote {}",
        restored.display()
    );
}

#[test]
fn import_takes_only_a_whole_ledger_bundle_and_refuses_a_task_bundle_before_writing_anything() {
    let data = tempfile::tempdir().unwrap();
    let task = demo_task(data.path(), "lake-varden-blooms");
    let bundle = data.path().join("task.json");
    let out = run(
        data.path(),
        &["export", &task, "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let key = data.path().join("ledger/keys/signing.key");

    let target = tempfile::tempdir().unwrap();
    let restored = target.path().join("restored");
    for with_key in [false, true] {
        let mut args = vec!["import", bundle.to_str().unwrap()];
        if with_key {
            args.extend(["--key", key.to_str().unwrap()]);
        }
        import_refused(
            &restored,
            &args,
            "only a whole-ledger bundle (export --all) can be restored",
        );
    }
}

#[test]
fn import_refuses_a_key_that_is_not_the_one_the_checkpoint_log_names_as_current_and_leaves_no_ledger_behind()
 {
    let data = tempfile::tempdir().unwrap();
    demo_task(data.path(), "lake-varden-blooms");
    let keys = tempfile::tempdir().unwrap();
    let before_rotation = keys.path().join("before-rotation.key");
    std::fs::copy(
        data.path().join("ledger/keys/signing.key"),
        &before_rotation,
    )
    .unwrap();
    let rotated_away = fingerprint(data.path());
    let out = run(data.path(), &["key", "rotate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    demo_task(data.path(), "four-day-week-eastvale");
    let current = fingerprint(data.path());
    let bundle = data.path().join("all.json");
    export_all(data.path(), &bundle);

    let other = tempfile::tempdir().unwrap();
    demo_task(other.path(), "gongxiang-danche-qingchuan");
    let unrelated = other.path().join("ledger/keys/signing.key");

    let target = tempfile::tempdir().unwrap();
    let restored = target.path().join("restored");
    for (key, named) in [
        (unrelated, fingerprint(other.path())),
        (before_rotation, rotated_away),
    ] {
        import_refused(
            &restored,
            &[
                "import",
                bundle.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
            ],
            &format!("the key given ({named}) is not the ledger's current signing key ({current})"),
        );
    }
    // Nothing stands in the way of the import with the right key.
    let key = data.path().join("ledger/keys/signing.key");
    let out = run(
        &restored,
        &[
            "import",
            bundle.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(fingerprint(&restored), current);
}

/// `bundle` with every signature made again by `attacker`: its first key is the attacker's, so
/// it holds together for anyone who trusts the key inside it.
fn re_signed(bundle: &Path, attacker: &ledger::ledger_proof::SigningKey, to: &Path) {
    use ledger::CheckpointEntry;
    use ledger::ledger_proof::Checkpoint;
    let mut bundle: ledger::bundle::Bundle =
        serde_json::from_slice(&std::fs::read(bundle).unwrap()).unwrap();
    let sign = |c: &Checkpoint| {
        Checkpoint::sign(attacker, &c.origin, c.tree_size, c.root, c.time).unwrap()
    };
    for entry in &mut bundle.checkpoint_log {
        match entry {
            CheckpointEntry::KeyIntroduced { public_key, .. } => {
                *public_key = attacker.public_key();
            }
            CheckpointEntry::Checkpoint(c) => *c = sign(c),
            other => panic!("the demo's checkpoint log holds {other:?}"),
        }
    }
    bundle.checkpoint = sign(&bundle.checkpoint);
    let mut manifest = bundle.manifest.manifest.clone();
    manifest.checkpoint_log = bundle
        .checkpoint_log
        .iter()
        .map(ledger::bundle::log_line)
        .collect();
    bundle.manifest = manifest.sign(attacker).unwrap();
    std::fs::write(to, serde_json::to_vec(&bundle).unwrap()).unwrap();
}

/// Flips the first hex digit of `value`, a string of hex.
fn flip_hex(value: &mut Value) {
    let text = value.as_str().unwrap().to_owned();
    let first = if text.starts_with('0') { '1' } else { '0' };
    *value = std::iter::once(first)
        .chain(text.chars().skip(1))
        .collect::<String>()
        .into();
}

#[test]
fn import_verifies_the_bundle_first_and_restores_nothing_from_a_doctored_or_forged_one() {
    let data = tempfile::tempdir().unwrap();
    demo_task(data.path(), "lake-varden-blooms");
    let genuine = data.path().join("all.json");
    export_all(data.path(), &genuine);
    let key = first_line(&stdout(&run(data.path(), &["key", "show"])));
    let target = tempfile::tempdir().unwrap();
    let restored = target.path().join("restored");

    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "an event's payload changed",
            Box::new(|b| {
                let stored = b["events"][0]["stored"].as_str().unwrap();
                let mut bytes = base64::engine::general_purpose::STANDARD
                    .decode(stored)
                    .unwrap();
                let needle = b"Lake Varden";
                let at = bytes
                    .windows(needle.len())
                    .position(|w| w == needle)
                    .expect("the question is in the first event's payload");
                bytes[at] = b'S';
                b["events"][0]["stored"] = base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .into();
            }),
        ),
        (
            "a chain hash changed",
            Box::new(|b| flip_hex(&mut b["events"][6]["hash"])),
        ),
        (
            "the checkpoint's signature changed",
            Box::new(|b| flip_hex(&mut b["checkpoint"]["signature"])),
        ),
    ];
    let doctored = data.path().join("doctored.json");
    let refused = |bundle: &Path, trusted: Option<&str>, what: &str| {
        let mut args = vec!["import", bundle.to_str().unwrap()];
        args.extend(trusted.iter().flat_map(|k| ["--public-key", k]));
        let out = run(&restored, &args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{what}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("INVALID at") && stdout(&out).contains("nothing was imported"),
            "{what}: {}",
            stdout(&out)
        );
        assert!(
            !restored.exists(),
            "{what}: a refused import wrote {}",
            restored.display()
        );
    };
    for (what, edit) in cases {
        edit_bundle(&genuine, &doctored, edit);
        refused(&doctored, None, what);
        refused(&doctored, Some(&key), what);
    }

    // Every signature made again by another key: a bundle that holds together on its own, and
    // that an import trusting the ledger's key refuses.
    let attacker = ledger::ledger_proof::SigningKey::from_secret_bytes(&[7; 32]);
    let forged = data.path().join("forged.json");
    re_signed(&genuine, &attacker, &forged);
    let attacker_hex = hex::encode(attacker.public_key().to_bytes());
    assert!(verify_bundle(&forged, Some(&attacker_hex)).status.success());
    refused(&forged, Some(&key), "a bundle re-signed by another key");

    // The refusals left the place as new: the genuine bundle imports there.
    let out = run(
        &restored,
        &["import", genuine.to_str().unwrap(), "--public-key", &key],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(run(&restored, &["verify"]).status.success());
}
