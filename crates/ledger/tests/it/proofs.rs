//! Checkpoints, proofs, key rotation and what verification makes of them.

use std::sync::Arc;
use std::time::Duration;

use ledger::ledger_proof::{
    self, ConsistencyProofFile, ProofFile, PublicKey, Verified, verify_proof_file,
};
use ledger::storage::memory::{Faults, MemoryStorage};
use ledger::{
    AppendError, CheckpointEntry, ExpectedVersion, Ledger, LedgerOptions, ProofError, SigningError,
};

use super::{open, options, request};

fn fill(ledger: &Ledger, n: u32) {
    for i in 0..n {
        ledger
            .append(request(
                &format!("t{}", i % 4),
                ExpectedVersion::Any,
                &[&i.to_le_bytes()],
            ))
            .unwrap();
    }
}

fn first_key(ledger: &Ledger) -> PublicKey {
    match ledger.checkpoint_entries().unwrap().first() {
        Some(CheckpointEntry::KeyIntroduced { public_key, .. }) => *public_key,
        other => panic!("the checkpoint log starts with {other:?}"),
    }
}

#[test]
fn every_event_is_provably_in_every_checkpoint_that_covers_it() {
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 1)),
        options(1),
    );
    let key = ledger.public_key().unwrap();
    let mut sizes = Vec::new();
    for i in 0..40u32 {
        fill(&ledger, 1);
        if i % 3 == 0 || i == 39 {
            let c = ledger.checkpoint().unwrap();
            assert_eq!(c.tree_size, u64::from(i) + 1);
            assert_eq!(c.root, ledger.root_at(c.tree_size).unwrap());
            c.verify(&key).unwrap();
            sizes.push(c.tree_size);
        }
    }
    for &size in &sizes {
        for seq in 0..size {
            let proof = ledger.inclusion_proof(seq, Some(size)).unwrap();
            let verified = verify_proof_file(&ProofFile::Inclusion(proof.clone()), &key).unwrap();
            assert!(
                matches!(verified, Verified::Inclusion { leaf_index, .. } if leaf_index == seq)
            );
            if size == 1 {
                continue;
            }
            // A proof for one event does not prove another.
            let mut doctored = proof;
            doctored.event_hash = ledger.get((seq + 1) % size).unwrap().unwrap().hash;
            assert!(verify_proof_file(&ProofFile::Inclusion(doctored), &key).is_err());
        }
    }
    for (i, &first) in sizes.iter().enumerate() {
        for &second in &sizes[i..] {
            let proof = ledger.consistency_proof(first, second).unwrap();
            verify_proof_file(&ProofFile::Consistency(proof), &key).unwrap();
        }
    }
    // Only checkpointed sizes are proved against.
    assert!(matches!(
        ledger.inclusion_proof(0, Some(5)),
        Err(ProofError::NotCheckpointed(5))
    ));
    assert!(matches!(
        ledger.consistency_proof(2, 5),
        Err(ProofError::NotCheckpointed(2))
    ));
}

#[test]
fn an_event_after_the_latest_checkpoint_is_not_yet_provable() {
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 2)),
        options(2),
    );
    fill(&ledger, 5);
    ledger.checkpoint().unwrap();
    fill(&ledger, 1);
    assert!(matches!(
        ledger.inclusion_proof(5, None),
        Err(ProofError::NotCovered {
            seq: 5,
            latest_size: 5
        })
    ));
    assert!(ledger.inclusion_proof(4, None).is_ok());
}

#[test]
fn a_saved_checkpoint_proves_the_log_only_grew() {
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 3)),
        options(3),
    );
    let key = ledger.public_key().unwrap();
    fill(&ledger, 7);
    let saved = ledger.checkpoint().unwrap();
    let text = serde_json::to_string(&saved).unwrap();
    fill(&ledger, 30);
    ledger.checkpoint().unwrap();
    let saved = serde_json::from_str(&text).unwrap();
    let proof = ledger.consistency_since(saved).unwrap();
    assert_eq!((proof.first_size, proof.second_size), (7, 37));
    verify_proof_file(&ProofFile::Consistency(proof.clone()), &key).unwrap();
    // A checkpoint the auditor did not get from this ledger proves nothing.
    let mut forged: ConsistencyProofFile = proof;
    forged.first_checkpoint.root = ledger.root_at(6).unwrap();
    assert!(verify_proof_file(&ProofFile::Consistency(forged), &key).is_err());
}

#[test]
fn a_proof_to_today_waits_for_the_periodic_checkpoint_and_never_writes_one() {
    // With a checkpointer: the proof stands on the checkpoint it writes within its interval.
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 3)),
        LedgerOptions {
            checkpoint_interval: Some(Duration::from_millis(50)),
            ..options(3)
        },
    );
    let key = ledger.public_key().unwrap();
    fill(&ledger, 7);
    ledger.checkpoint().unwrap();
    fill(&ledger, 5);
    let proof = ledger.consistency_to_today(7).unwrap();
    assert_eq!((proof.first_size, proof.second_size), (7, 12));
    verify_proof_file(&ProofFile::Consistency(proof), &key).unwrap();

    // Without one: the proof stands on the latest checkpoint, and nothing is signed for it.
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 3)),
        LedgerOptions {
            checkpoint_interval: None,
            ..options(3)
        },
    );
    fill(&ledger, 7);
    ledger.checkpoint().unwrap();
    fill(&ledger, 5);
    let proof = ledger.consistency_to_today(7).unwrap();
    assert_eq!(proof.second_size, 7);
    assert_eq!(
        ledger.checkpoints().unwrap().len(),
        1,
        "a reader wrote no checkpoint"
    );
    assert!(matches!(
        ledger.inclusion_proof_covering(9, None),
        Err(ProofError::NotCovered {
            seq: 9,
            latest_size: 7
        })
    ));
    assert_eq!(ledger.checkpoints().unwrap().len(), 1);
}

#[test]
fn rotation_hands_over_and_old_proofs_still_verify_from_the_first_key() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let ledger = open(dir.path());
        fill(&ledger, 10);
        let before = ledger.checkpoint().unwrap();
        let first = first_key(&ledger);
        assert_eq!(ledger.public_key().unwrap(), first);
        let statement = ledger.rotate_key().unwrap();
        assert_eq!(statement.tree_size, 10);
        let second = ledger.public_key().unwrap();
        assert_ne!(first, second);
        assert_eq!(statement.new_public_key, second);
        // The rotation is followed by a checkpoint of the new key at the handover.
        let latest = ledger.latest_checkpoint().unwrap().unwrap();
        assert_eq!(
            (latest.tree_size, latest.key_fingerprint),
            (10, second.fingerprint())
        );
        fill(&ledger, 5);
        let after = ledger.checkpoint().unwrap();
        assert_eq!(after.key_fingerprint, second.fingerprint());
        // Both checkpoints verify for an auditor who trusts only the first key.
        for (seq, size) in [
            (3, before.tree_size),
            (12, after.tree_size),
            (3, after.tree_size),
        ] {
            let proof = ledger.inclusion_proof(seq, Some(size)).unwrap();
            verify_proof_file(&ProofFile::Inclusion(proof), &first).unwrap();
        }
        let proof = ledger.consistency_proof(10, 15).unwrap();
        verify_proof_file(&ProofFile::Consistency(proof), &first).unwrap();
        assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
        first
    };
    // The new key is the one on disk; the old secret is gone.
    let ledger = open(dir.path());
    let current = ledger.public_key().unwrap();
    assert_ne!(current, first);
    let c = ledger.checkpoint().unwrap();
    assert_eq!(c.key_fingerprint, current.fingerprint());
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.is_intact(), "{report:?}");
    // Before the rotation, the new key's at the handover, after it, and this one.
    assert_eq!(report.checkpoints_checked, 4);
}

#[test]
fn a_rotation_interrupted_before_the_key_was_replaced_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let old_secret = {
        let ledger = open(dir.path());
        fill(&ledger, 3);
        std::fs::read(keys.join("signing.key")).unwrap()
    };
    let new_key = {
        let ledger = open(dir.path());
        ledger.rotate_key().unwrap();
        ledger.public_key().unwrap()
    };
    // Put the disk back as a crash between recording the statement and renaming would leave it.
    std::fs::rename(keys.join("signing.key"), keys.join("signing.key.new")).unwrap();
    std::fs::write(keys.join("signing.key"), old_secret).unwrap();
    let ledger = open(dir.path());
    assert_eq!(ledger.public_key().unwrap(), new_key);
    assert!(!keys.join("signing.key.new").exists());
    ledger.checkpoint().unwrap();
}

/// A crash after the new key was staged but before the rotation was recorded: no statement
/// names the staged key, so the open discards it and the old key goes on signing. A read-only
/// open leaves it where it is.
#[test]
fn a_rotation_interrupted_before_it_was_recorded_is_discarded_on_open() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let old_key = {
        let ledger = open(dir.path());
        fill(&ledger, 3);
        ledger.checkpoint().unwrap();
        ledger.public_key().unwrap()
    };
    let entries_before = open(dir.path()).checkpoint_entries().unwrap().len();
    let staged = ledger_proof::SigningKey::from_secret_bytes(&[9; 32]);
    assert_ne!(staged.public_key(), old_key);
    let staged_path = keys.join("signing.key.new");
    std::fs::write(
        &staged_path,
        format!("{}\n", hex::encode(staged.to_secret_bytes())),
    )
    .unwrap();
    std::fs::set_permissions(&staged_path, std::fs::Permissions::from_mode(0o600)).unwrap();

    let read_only = Ledger::open(
        dir.path(),
        LedgerOptions {
            read_only: true,
            ..options(1)
        },
    )
    .unwrap();
    assert_eq!(read_only.public_key().unwrap(), old_key);
    drop(read_only);
    assert!(
        staged_path.exists(),
        "a read-only open removed the staged key"
    );

    let ledger = open(dir.path());
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert!(!staged_path.exists(), "the staged key was kept");
    assert_eq!(ledger.public_key().unwrap(), old_key);
    // Nothing in the checkpoint log names the staged key, before or after the open.
    let entries = ledger.checkpoint_entries().unwrap();
    assert_eq!(entries.len(), entries_before, "{entries:?}");
    assert!(
        !entries.iter().any(|e| match e {
            CheckpointEntry::KeyIntroduced { public_key, .. } => *public_key == staged.public_key(),
            CheckpointEntry::Rotation(r) => r.new_public_key == staged.public_key(),
            _ => false,
        }),
        "{entries:?}"
    );
    fill(&ledger, 2);
    let c = ledger.checkpoint().unwrap();
    assert_eq!(c.key_fingerprint, old_key.fingerprint());
    c.verify(&old_key).unwrap();
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.is_intact(), "{report:?}");
    assert!(report.key_chain_breaks.is_empty(), "{report:?}");
    drop(ledger);
    assert_eq!(open(dir.path()).public_key().unwrap(), old_key);
}

#[test]
fn a_foreign_key_on_disk_signs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = open(dir.path());
        fill(&ledger, 3);
    }
    std::fs::write(
        dir.path().join("keys/signing.key"),
        format!("{}\n", "11".repeat(32)),
    )
    .unwrap();
    let ledger = open(dir.path());
    assert!(ledger.public_key().is_err());
    assert!(matches!(ledger.checkpoint(), Err(SigningError::NoKey(_))));
    // Events still go in; only signing waits for the right key.
    fill(&ledger, 1);
}

#[test]
fn periodic_checkpoints_follow_growth_only() {
    let ledger = Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), 4)),
        LedgerOptions {
            checkpoint_every_events: Some(10),
            checkpoint_interval: Some(Duration::from_millis(40)),
            ..options(4)
        },
    );
    fill(&ledger, 25);
    let sizes: Vec<u64> = ledger
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| c.tree_size)
        .collect();
    assert!(sizes.starts_with(&[10, 20]), "{sizes:?}");
    // The timer covers the last five within a few ticks...
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ledger.latest_checkpoint().unwrap().unwrap().tree_size < 25 {
        assert!(std::time::Instant::now() < deadline, "no timed checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    // ...and writes nothing more while the tree does not grow.
    let count = ledger.checkpoints().unwrap().len();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(ledger.checkpoints().unwrap().len(), count);
}

#[test]
fn verification_checks_roots_and_signatures_of_the_checkpoint_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = open(dir.path());
        fill(&ledger, 20);
        ledger.checkpoint().unwrap();
        fill(&ledger, 5);
        ledger.checkpoint().unwrap();
    }
    let log = dir.path().join("checkpoints.jsonl");
    let original = std::fs::read_to_string(&log).unwrap();

    // A root doctored in the log: the signature no longer holds.
    let lines: Vec<&str> = original.lines().collect();
    let mut entry: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    entry["root"] = serde_json::Value::String("00".repeat(32));
    let doctored = [lines[0], &entry.to_string(), lines[2]].join("\n") + "\n";
    std::fs::write(&log, doctored).unwrap();
    let report = open(dir.path()).verify_from_scratch(&mut |_, _| {});
    let failure = report
        .failure
        .expect("a doctored checkpoint fails verification");
    assert!(failure.problem.contains("entry 2"), "{failure:?}");
    std::fs::write(&log, &original).unwrap();
    assert!(
        open(dir.path())
            .verify_from_scratch(&mut |_, _| {})
            .is_intact()
    );

    // The log cut short and its index lost: the head record and the checkpoints remember the
    // end.
    let ledger_dir = dir.path();
    let all = open(ledger_dir).read_raw_range(0, 100).unwrap();
    std::fs::remove_dir_all(ledger_dir.join("index")).unwrap();
    let segment = ledger_dir.join("log/00000000000000000000.seg");
    let bytes = std::fs::read(&segment).unwrap();
    let last = &all[24].bytes;
    let at = bytes
        .windows(last.len())
        .position(|w| w == &last[..])
        .unwrap();
    // Cut at the start of the last frame (its 16-byte header precedes the body).
    let frame_start = (0..at)
        .rev()
        .find(|&i| &bytes[i..i + 4] == b"RLFR")
        .unwrap();
    std::fs::write(&segment, &bytes[..frame_start]).unwrap();
    let report = open(ledger_dir).verify_from_scratch(&mut |_, _| {});
    let failure = report
        .failure
        .expect("a log shorter than its checkpoints fails");
    assert_eq!(failure.seq, 24, "{failure:?}");
    assert!(failure.problem.contains("lost"), "{failure:?}");
    // Without the head record, the signed checkpoints still say so.
    std::fs::remove_file(ledger_dir.join("head")).unwrap();
    let ledger = open(ledger_dir);
    assert!(
        ledger
            .problems()
            .iter()
            .any(|p| p.contains("checkpoint log, which signs a tree of 25 events")),
        "{:?}",
        ledger.problems()
    );
    assert!(ledger.poisoned().is_some());
}

#[test]
fn a_rewritten_event_is_named_by_the_tree_that_recorded_it() {
    // An attacker rewrites event 6 and recomputes its hash; event 7 still links to the
    // original. The chain breaks at 7; the stored Merkle leaf shows that 6 changed.
    let dir = tempfile::tempdir().unwrap();
    let events = {
        let ledger = open(dir.path());
        fill(&ledger, 12);
        ledger.read_range(0, 100).unwrap()
    };
    let original = &events[6];
    let mut forged = original.envelope.clone();
    forged.payload = b"rewritten".to_vec();
    // Same length as the original payload, so the frame layout does not move.
    forged.payload.truncate(original.payload.len());
    while forged.payload.len() < original.payload.len() {
        forged.payload.push(b'!');
    }
    let (forged_bytes, _) = forged.seal();
    let (original_bytes, _) = original.envelope.seal();
    assert_eq!(forged_bytes.len(), original_bytes.len());
    let segment = dir.path().join("log/00000000000000000000.seg");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes
        .windows(original_bytes.len())
        .position(|w| w == &original_bytes[..])
        .unwrap();
    bytes[at..at + forged_bytes.len()].copy_from_slice(&forged_bytes);
    // Fix the frame checksum too, as a careful attacker would.
    let frame_start = (0..at)
        .rev()
        .find(|&i| &bytes[i..i + 4] == b"RLFR")
        .unwrap();
    let body_len =
        u32::from_le_bytes(bytes[frame_start + 4..frame_start + 8].try_into().unwrap()) as usize;
    let body = &bytes[frame_start + 16..frame_start + 16 + body_len];
    let crc = crc32fast::hash(body).to_le_bytes();
    bytes[frame_start + 8..frame_start + 12].copy_from_slice(&crc);
    let header_crc = crc32fast::hash(&bytes[frame_start..frame_start + 12]).to_le_bytes();
    bytes[frame_start + 12..frame_start + 16].copy_from_slice(&header_crc);
    std::fs::write(&segment, &bytes).unwrap();

    let report = open(dir.path()).verify_from_scratch(&mut |_, _| {});
    let failure = report.failure.expect("rewritten");
    assert_eq!(failure.seq, 6, "{failure:?}");
    assert!(failure.problem.contains("rewritten"), "{failure:?}");
    let _ = ledger_proof::Sha256;
}

#[test]
fn a_torn_checkpoint_entry_is_cut_on_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = open(dir.path());
        fill(&ledger, 4);
        ledger.checkpoint().unwrap();
    }
    let log = dir.path().join("checkpoints.jsonl");
    let mut text = std::fs::read_to_string(&log).unwrap();
    let whole = text.len();
    let torn = "{\"entry\":\"checkpoint\",\"tree_si";
    text.push_str(torn);
    std::fs::write(&log, text).unwrap();
    let ledger = open(dir.path());
    assert_eq!(ledger.checkpoints().unwrap().len(), 1);
    // The torn bytes are kept, not thrown away.
    let kept = dir
        .path()
        .join("recovered")
        .join(format!("checkpoints.jsonl.{whole}.torn"));
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), torn);
    assert_eq!(std::fs::read_to_string(&log).unwrap().len(), whole);
    assert!(ledger.poisoned().is_none());
    ledger.checkpoint().unwrap();
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn a_damaged_checkpoint_entry_the_head_record_counted_is_reported_and_never_cut() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = open(dir.path());
        fill(&ledger, 4);
        ledger.checkpoint().unwrap();
        // The next acknowledged append records how long the checkpoint log was.
        ledger
            .append(request("t", ExpectedVersion::Any, &[b"after"]))
            .unwrap();
    }
    let log = dir.path().join("checkpoints.jsonl");
    let text = std::fs::read(&log).unwrap();
    let damaged = text[..text.len() - 10].to_vec();
    std::fs::write(&log, &damaged).unwrap();

    let ledger = open(dir.path());
    assert!(
        ledger.poisoned().is_some(),
        "writes go on over a lost entry"
    );
    let problems = ledger.problems();
    assert!(
        problems.iter().any(|p| p.contains("head record counted")),
        "{problems:?}"
    );
    let notes = ledger.recovery_notes();
    assert!(
        !notes.iter().any(|n| n.contains("cuts them")),
        "a note promises a cut no open makes: {notes:?}"
    );
    drop(ledger);
    assert_eq!(
        std::fs::read(&log).unwrap(),
        damaged,
        "the open changed the checkpoint log"
    );
}

#[test]
fn an_open_checks_the_newest_checkpoints_in_full_and_verify_checks_them_all() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = open(dir.path());
        ledger
            .append(request("t", ExpectedVersion::Any, &[b"one"]))
            .unwrap();
        for _ in 0..1030 {
            ledger.checkpoint().unwrap();
        }
    }
    let log = dir.path().join("checkpoints.jsonl");
    let original = std::fs::read_to_string(&log).unwrap();
    let flip = |line: usize| {
        let mut lines: Vec<serde_json::Value> = original
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let signature = lines[line]["signature"].as_str().unwrap().to_owned();
        let first = if signature.starts_with('0') { "1" } else { "0" };
        lines[line]["signature"] = format!("{first}{}", &signature[1..]).into();
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&log, text).unwrap();
    };

    // The newest checkpoint doctored: the open refuses writes.
    flip(original.lines().count() - 1);
    let ledger = open(dir.path());
    assert!(
        ledger.poisoned().is_some(),
        "the newest checkpoint is checked at open"
    );
    drop(ledger);

    // One of the oldest doctored: the open checks its tree size only, and verify finds it.
    flip(2);
    let ledger = open(dir.path());
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    let failure = report.failure.expect("verify checks every checkpoint");
    assert!(failure.problem.contains("entry 3"), "{failure:?}");
}

/// What the whole checkpoint log says the reads that serve checkpoints must answer: the latest
/// signed checkpoint that counts, its note with every cosignature of it, and the rotations of
/// the current era of keys.
fn from_the_whole_log(ledger: &Ledger) -> (Option<String>, Vec<ledger_proof::KeyRotation>) {
    let entries = ledger.checkpoint_entries().unwrap();
    let era = entries
        .iter()
        .rposition(|e| matches!(e, CheckpointEntry::KeyIntroduced { .. }))
        .unwrap();
    let CheckpointEntry::KeyIntroduced { public_key, .. } = &entries[era] else {
        unreachable!()
    };
    let rotations: Vec<_> = entries[era..]
        .iter()
        .filter_map(|e| match e {
            CheckpointEntry::Rotation(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    let keys: Vec<PublicKey> = std::iter::once(*public_key)
        .chain(rotations.iter().map(|r| r.new_public_key))
        .collect();
    let note = ledger.checkpoints().unwrap().pop().map(|latest| {
        let key = keys
            .iter()
            .find(|k| k.fingerprint() == latest.key_fingerprint)
            .unwrap();
        let mut note = latest.note(*key).unwrap();
        for cosignature in ledger.cosignatures_of(&latest).unwrap() {
            note.signatures.push(cosignature.line());
        }
        note.render()
    });
    (note, rotations)
}

/// A page of the checkpoints as the whole log gives it: entry number, tree size and how many
/// cosignatures of each.
fn page_from_the_whole_log(
    ledger: &Ledger,
    last: usize,
    before: Option<u64>,
) -> Vec<(u64, u64, usize)> {
    let entries = ledger.checkpoint_entries().unwrap();
    let standing = ledger::storage::standings(&entries);
    let counting: Vec<(u64, ledger_proof::Checkpoint)> = entries
        .iter()
        .zip(&standing)
        .enumerate()
        .filter_map(|(i, (e, s))| match e {
            CheckpointEntry::Checkpoint(c) if *s == ledger::storage::Standing::Counts => {
                Some((i as u64 + 1, c.clone()))
            }
            _ => None,
        })
        .filter(|(n, _)| before.is_none_or(|b| *n < b))
        .collect();
    counting[counting.len().saturating_sub(last)..]
        .iter()
        .map(|(n, c)| (*n, c.tree_size, ledger.cosignatures_of(c).unwrap().len()))
        .collect()
}

fn page(ledger: &Ledger, last: usize, before: Option<u64>) -> Vec<(u64, u64, usize)> {
    ledger
        .checkpoint_page(last, before)
        .unwrap()
        .checkpoints
        .iter()
        .map(|p| (p.entry, p.checkpoint.tree_size, p.cosignatures.len()))
        .collect()
}

/// Only the checkpoints a run writes, so that each step is compared with the log it read.
fn without_periodic_checkpoints() -> LedgerOptions {
    LedgerOptions {
        checkpoint_interval: None,
        ..options(5)
    }
}

#[test]
fn the_reads_that_serve_checkpoints_agree_with_the_whole_log_at_every_step_in_memory() {
    let storage = Arc::new(MemoryStorage::new(Faults::default(), 5));
    let ledger = Ledger::with_storage(storage, without_periodic_checkpoints());
    agree_with_the_whole_log_at_every_step(&ledger, 600);
}

#[test]
fn the_reads_that_serve_checkpoints_agree_with_the_whole_log_at_every_step_on_disk() {
    // The checkpoint log's entries stay in its file, read where the ledger noted they are, so
    // a ledger opened again reads them as it wrote them.
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), without_periodic_checkpoints()).unwrap();
    agree_with_the_whole_log_at_every_step(&ledger, 300);
    let (note, rotations) = from_the_whole_log(&ledger);
    let newest = page(&ledger, 20, None);
    let count = ledger.checkpoint_count().unwrap();
    ledger.shutdown();
    drop(ledger);
    let ledger = Ledger::open(dir.path(), without_periodic_checkpoints()).unwrap();
    assert_eq!(ledger.checkpoint_note().unwrap(), note);
    assert_eq!(ledger.key_rotations().unwrap(), rotations);
    assert_eq!(page(&ledger, 20, None), newest);
    assert_eq!(ledger.checkpoint_count().unwrap(), count);
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
}

/// The reads that serve checkpoints keep what they need as entries come rather than reading
/// the whole log each time; a run of appends, checkpoints, key rotations and witness
/// cosignatures (of the latest checkpoint and of older ones, some twice) must never find them
/// saying something the whole log does not.
fn agree_with_the_whole_log_at_every_step(ledger: &Ledger, steps: u32) {
    let witnesses: Vec<ledger_proof::SigningKey> = (1..=3u8)
        .map(|i| ledger_proof::SigningKey::from_secret_bytes(&[i; 32]))
        .collect();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    let (mut rotations, mut cosigned, mut kept) = (0, 0, 0);
    for step in 0..steps {
        match next(20) {
            0..=7 => fill(ledger, 1),
            8..=12 => {
                fill(ledger, 1);
                ledger.checkpoint().unwrap();
            }
            13 if step % 3 == 0 => {
                ledger.rotate_key().unwrap();
                rotations += 1;
            }
            _ => {
                let checkpoints = ledger.checkpoints().unwrap();
                if checkpoints.is_empty() {
                    continue;
                }
                // The latest most often, an older one sometimes.
                let at = if next(3) == 0 {
                    next(checkpoints.len() as u64) as usize
                } else {
                    checkpoints.len() - 1
                };
                let witness = next(witnesses.len() as u64) as usize;
                let cosignature = ledger_proof::Cosignature::sign(
                    &witnesses[witness],
                    &format!("witness-{witness}"),
                    &checkpoints[at],
                    1_750_000_000 + u64::from(step),
                )
                .unwrap();
                let before = ledger.checkpoint_entries().unwrap().len();
                ledger.record_cosignature(cosignature).unwrap();
                cosigned += 1;
                kept += ledger.checkpoint_entries().unwrap().len() - before;
            }
        }
        let (note, expected_rotations) = from_the_whole_log(ledger);
        assert_eq!(ledger.checkpoint_note().unwrap(), note, "step {step}");
        assert_eq!(
            ledger.latest_checkpoint().unwrap().map(|c| c.tree_size),
            ledger.checkpoints().unwrap().pop().map(|c| c.tree_size),
            "step {step}"
        );
        assert_eq!(
            ledger.key_rotations().unwrap(),
            expected_rotations,
            "step {step}"
        );
        let latest = ledger.checkpoints().unwrap().pop();
        assert_eq!(
            ledger.latest_cosigned_checkpoint().unwrap(),
            latest.map(|c| {
                let cosignatures = ledger.cosignatures_of(&c).unwrap();
                (c, cosignatures)
            }),
            "step {step}"
        );
        let entries = ledger.checkpoint_entries().unwrap();
        for (i, witness) in witnesses.iter().enumerate() {
            let key =
                ledger_proof::VerifierKey::cosigner(&format!("witness-{i}"), witness.public_key())
                    .unwrap();
            let largest = entries
                .iter()
                .filter_map(|e| match e {
                    CheckpointEntry::Cosignature(c) if c.witness == key => Some(c.tree_size),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            assert_eq!(
                ledger.last_cosigned_size(&key).unwrap(),
                largest,
                "step {step}"
            );
        }
        if step % 25 == 0 {
            let entries = ledger.checkpoint_entries().unwrap().len() as u64;
            for before in [None, Some(1), Some(entries / 2), Some(entries + 5)] {
                for last in [1, 3, 20] {
                    assert_eq!(
                        page(ledger, last, before),
                        page_from_the_whole_log(ledger, last, before),
                        "step {step}, the last {last} before {before:?}"
                    );
                }
            }
            assert_eq!(
                ledger.checkpoint_count().unwrap(),
                ledger.checkpoints().unwrap().len() as u64
            );
        }
    }
    // The run did what it is meant to test.
    assert!(rotations >= 2, "{rotations} rotations");
    assert!(
        cosigned >= 50 && kept < cosigned,
        "{cosigned} cosignatures, {kept} kept"
    );
    // Every witness cosigns the latest checkpoint, one twice: its note carries each once.
    fill(ledger, 1);
    let latest = ledger.checkpoint().unwrap();
    for (i, witness) in witnesses.iter().enumerate().chain([(0, &witnesses[0])]) {
        let cosignature = ledger_proof::Cosignature::sign(
            witness,
            &format!("witness-{i}"),
            &latest,
            1_800_000_000,
        )
        .unwrap();
        ledger.record_cosignature(cosignature).unwrap();
    }
    let note = ledger.checkpoint_note().unwrap().unwrap();
    let lines = |name: &str| {
        note.lines()
            .filter(|l| l.starts_with(&format!("— {name} ")))
            .count()
    };
    for i in 0..witnesses.len() {
        assert_eq!(lines(&format!("witness-{i}")), 1, "{note}");
    }
    assert_eq!(Some(note), from_the_whole_log(ledger).0);
}

#[test]
fn a_page_of_checkpoints_reads_further_back_when_other_entries_stand_between_them() {
    // A checkpoint cosigned by 200 witnesses, then two more: the newest three are 203 entries
    // back, further than a page first reads.
    let storage = Arc::new(MemoryStorage::new(Faults::default(), 9));
    let ledger = Ledger::with_storage(storage, without_periodic_checkpoints());
    fill(&ledger, 1);
    let first = ledger.checkpoint().unwrap();
    for i in 0..200u32 {
        let mut secret = [0u8; 32];
        secret[..4].copy_from_slice(&i.to_le_bytes());
        secret[31] = 1;
        let witness = ledger_proof::SigningKey::from_secret_bytes(&secret);
        let cosignature =
            ledger_proof::Cosignature::sign(&witness, &format!("w{i}"), &first, 1_750_000_000)
                .unwrap();
        ledger.record_cosignature(cosignature).unwrap();
    }
    for _ in 0..2 {
        fill(&ledger, 1);
        ledger.checkpoint().unwrap();
    }
    let newest = page(&ledger, 3, None);
    assert_eq!(newest, page_from_the_whole_log(&ledger, 3, None));
    assert_eq!(newest[0], (2, first.tree_size, 200), "{newest:?}");
    assert_eq!(newest.len(), 3);
    // And before the first of them, nothing.
    assert!(page(&ledger, 3, Some(2)).is_empty());
}

#[test]
fn a_checkpoint_entry_changed_on_disk_while_the_ledger_is_open_is_not_served() {
    // The entries stay in their file: one overwritten there after the open is read as it now
    // is, so it must not pass for what was signed.
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), without_periodic_checkpoints()).unwrap();
    for _ in 0..3 {
        fill(&ledger, 1);
        ledger.checkpoint().unwrap();
    }
    let path = dir.path().join("checkpoints.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let second = text.lines().nth(2).unwrap();
    assert!(second.contains("\"entry\":\"checkpoint\""), "{second}");
    let at = text.find(second).unwrap();

    // A signature changed, the line still parsing: verification names it.
    let signature = second.find("\"signature\":\"").unwrap() + "\"signature\":\"".len();
    let mut forged = text.clone().into_bytes();
    let digit = &mut forged[at + signature];
    *digit = if *digit == b'0' { b'1' } else { b'0' };
    std::fs::write(&path, &forged).unwrap();
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(
        report.failure.is_some() || report.incomplete.is_some(),
        "{report:?}"
    );

    // A line that no longer parses: reading the log is refused, naming the entry.
    let mut torn = text.into_bytes();
    torn[at] = b'#';
    std::fs::write(&path, &torn).unwrap();
    let err = ledger.checkpoint_entries().unwrap_err();
    assert!(
        err.to_string().contains("entry 3 of the checkpoint log"),
        "{err}"
    );
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.incomplete.is_some(), "{report:?}");
}

#[test]
fn a_cosignature_of_a_checkpoint_the_log_does_not_hold_fails_verification_and_the_open() {
    use ledger::storage::Storage;
    let storage = Arc::new(MemoryStorage::new(Faults::default(), 9));
    let ledger = Ledger::with_storage(storage.clone(), without_periodic_checkpoints());
    fill(&ledger, 3);
    let held = ledger.checkpoint().unwrap();
    let witness = ledger_proof::SigningKey::from_secret_bytes(&[7; 32]);
    let cosign = |c: &ledger_proof::Checkpoint, at: u64| {
        ledger_proof::Cosignature::sign(&witness, "w", c, at).unwrap()
    };
    ledger
        .record_cosignature(cosign(&held, 1_750_000_000))
        .unwrap();
    assert_eq!(ledger.verify().failure, None);
    // The same size, root and origin a second later: a checkpoint the log never held, whose
    // cosignature is genuine as a witness's signature.
    let mut other = held.clone();
    other.time = ledger_proof::Timestamp::from_unix_seconds(held.time.unix_seconds() + 1).unwrap();
    storage
        .append_checkpoint_entry(&CheckpointEntry::Cosignature(cosign(&other, 1_750_000_001)))
        .unwrap();
    let failure = ledger.verify().failure.expect("verification passed");
    assert!(
        failure.problem.contains("the log does not hold before it"),
        "{failure:?}"
    );
    ledger.shutdown();
    let reopened = Ledger::with_storage(storage, without_periodic_checkpoints());
    let refused = reopened.poisoned().expect("the open found nothing wrong");
    assert!(
        refused.contains("the log does not hold before it"),
        "{refused}"
    );
}

/// An event's stored bytes changed under an open ledger: verification fails, and from then on
/// no append or checkpoint is written, even once the bytes are put back, until the ledger is
/// opened again over a log that checks out.
#[test]
fn a_failed_verification_stops_appends_until_the_ledger_is_opened_over_a_sound_log() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), without_periodic_checkpoints()).unwrap();
    for i in 0..6u32 {
        let payload = format!("payload number {i}");
        ledger
            .append(request("t", ExpectedVersion::Any, &[payload.as_bytes()]))
            .unwrap();
    }
    ledger.checkpoint().unwrap();
    assert!(ledger.verify().is_intact());
    let segment = super::segment_files(dir.path()).remove(0);
    let original = std::fs::read(&segment).unwrap();
    let needle = b"payload number 3";
    let at = original
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    let mut damaged = original.clone();
    damaged[at] ^= 0x20;
    std::fs::write(&segment, &damaged).unwrap();

    let report = ledger.verify_from_scratch(&mut |_, _| {});
    let failure = report.failure.expect("the damage is found");
    assert_eq!(failure.seq, 3, "{failure:?}");
    let refused = |ledger: &Ledger| {
        match ledger.append(request("t", ExpectedVersion::Any, &[b"after"])) {
            Err(AppendError::Poisoned(reason)) => {
                assert!(reason.contains("verification failed at seq 3"), "{reason}")
            }
            other => panic!("an append after a failed verification: {other:?}"),
        }
        assert!(matches!(
            ledger.checkpoint(),
            Err(SigningError::Poisoned(_))
        ));
    };
    refused(&ledger);
    assert!(ledger.poisoned().is_some());
    // The bytes put back under the same open ledger: the doubt stays until an operator
    // reopens it.
    std::fs::write(&segment, &original).unwrap();
    refused(&ledger);
    drop(ledger);
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        original,
        "a refused append wrote to the log"
    );

    let ledger = Ledger::open(dir.path(), without_periodic_checkpoints()).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert_eq!(ledger.read_range(0, 100).unwrap().len(), 6);
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"after"]))
        .unwrap();
    ledger.checkpoint().unwrap();
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.size, 7);
}
