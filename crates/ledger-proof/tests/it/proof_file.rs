//! Proof files: built from a tree and checkpoints, written as JSON, checked by an auditor with
//! one trusted key; and every kind of alteration refused.

use ledger_proof::{
    ChainError, Checkpoint, CheckpointError, ConsistencyError, ConsistencyProofFile, Digest,
    InclusionError, InclusionProofFile, KeyRotation, MemoryTree, MerkleHasher,
    PROOF_FILE_BYTES_MAX, ProofFile, ProofFileError, Sha256, SigningKey, Verified,
    verify_proof_file, verify_proof_file_json,
};

use crate::common::{event_hashes, flip, key, time};

/// A log of 20 events.
fn log(events: &[Digest]) -> MemoryTree<Sha256> {
    let mut tree = MemoryTree::new(Sha256);
    for event in events {
        tree.push(event.as_bytes()).unwrap();
    }
    tree
}

fn checkpoint(key: &SigningKey, tree: &MemoryTree<Sha256>, size: u64, at: &str) -> Checkpoint {
    Checkpoint::sign(
        key,
        "example.org/log",
        size,
        tree.root_at(size).unwrap(),
        time(at),
    )
    .unwrap()
}

fn inclusion_file(key: &SigningKey, index: u64, size: u64) -> InclusionProofFile {
    let events = event_hashes(20);
    let tree = log(&events);
    InclusionProofFile::new(
        index,
        events[index as usize],
        tree.inclusion_proof(index, size).unwrap(),
        checkpoint(key, &tree, size, "2025-03-01T10:00:00Z"),
        Vec::new(),
    )
}

fn consistency_file(key: &SigningKey, first: u64, second: u64) -> ConsistencyProofFile {
    let tree = log(&event_hashes(20));
    ConsistencyProofFile::new(
        tree.consistency_proof(first, second).unwrap(),
        checkpoint(key, &tree, first, "2025-03-01T09:00:00Z"),
        checkpoint(key, &tree, second, "2025-03-01T10:00:00Z"),
        Vec::new(),
    )
}

fn json(file: ProofFile) -> String {
    serde_json::to_string_pretty(&file).unwrap()
}

#[test]
fn every_event_of_a_checkpointed_log_has_a_verifying_inclusion_file() {
    let a = key(1);
    let events = event_hashes(20);
    for index in 0..13 {
        let file = inclusion_file(&a, index, 13);
        let checkpoint = file.checkpoint.clone();
        let text = json(ProofFile::Inclusion(file));
        assert_eq!(
            verify_proof_file_json(&text, &a.public_key()).unwrap(),
            Verified::Inclusion {
                leaf_index: index,
                event_hash: events[index as usize],
                checkpoint,
            }
        );
    }
}

#[test]
fn every_earlier_checkpoint_has_a_verifying_consistency_file() {
    let a = key(1);
    for first in 1..=13 {
        let file = consistency_file(&a, first, 13);
        let (first_checkpoint, second_checkpoint) = (
            file.first_checkpoint.clone(),
            file.second_checkpoint.clone(),
        );
        let text = json(ProofFile::Consistency(file));
        assert_eq!(
            verify_proof_file_json(&text, &a.public_key()).unwrap(),
            Verified::Consistency {
                first: first_checkpoint,
                second: second_checkpoint,
            }
        );
    }
}

#[test]
fn the_json_shape_names_kind_sizes_hashes_and_checkpoints() {
    let a = key(1);
    let inclusion = serde_json::to_value(ProofFile::Inclusion(inclusion_file(&a, 3, 13))).unwrap();
    let mut fields: Vec<&str> = inclusion
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "checkpoint",
            "event_hash",
            "key_rotations",
            "kind",
            "leaf_hash",
            "leaf_index",
            "path",
            "tree_size"
        ]
    );
    assert_eq!(inclusion["kind"], "inclusion");
    assert_eq!(inclusion["tree_size"], 13);
    assert_eq!(
        inclusion["leaf_hash"],
        Sha256.leaf(event_hashes(4)[3].as_bytes()).to_string()
    );

    let consistency =
        serde_json::to_value(ProofFile::Consistency(consistency_file(&a, 5, 13))).unwrap();
    let mut fields: Vec<&str> = consistency
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "first_checkpoint",
            "first_size",
            "key_rotations",
            "kind",
            "path",
            "second_checkpoint",
            "second_size"
        ]
    );
    assert_eq!(consistency["kind"], "consistency");
}

#[test]
fn a_file_without_key_rotations_field_is_read() {
    let a = key(1);
    let mut value = serde_json::to_value(ProofFile::Inclusion(inclusion_file(&a, 2, 9))).unwrap();
    value.as_object_mut().unwrap().remove("key_rotations");
    let text = value.to_string();
    assert!(matches!(
        verify_proof_file_json(&text, &a.public_key()),
        Ok(Verified::Inclusion { leaf_index: 2, .. })
    ));
}

/// An auditor who kept a checkpoint signed by the first key checks a consistency proof to a
/// checkpoint signed after a key rotation.
#[test]
fn a_consistency_file_across_a_key_rotation_verifies_with_the_first_key() {
    let (a, b) = (key(1), key(2));
    let tree = log(&event_hashes(20));
    let kept = checkpoint(&a, &tree, 5, "2025-03-01T09:00:00Z");
    let handover = KeyRotation::sign(
        &a,
        "example.org/log",
        b.public_key(),
        8,
        tree.root_at(8).unwrap(),
        time("2025-03-01T09:30:00Z"),
    )
    .unwrap();
    let latest = checkpoint(&b, &tree, 13, "2025-03-01T10:00:00Z");
    let file = ConsistencyProofFile::new(
        tree.consistency_proof(5, 13).unwrap(),
        kept,
        latest,
        vec![handover],
    );
    let text = json(ProofFile::Consistency(file.clone()));
    assert!(matches!(
        verify_proof_file_json(&text, &a.public_key()),
        Ok(Verified::Consistency { .. })
    ));

    // Without the statement, the new key means nothing to this auditor.
    let mut bare = file.clone();
    bare.key_rotations.clear();
    assert!(matches!(
        verify_proof_file(&ProofFile::Consistency(bare), &a.public_key()),
        Err(ProofFileError::Checkpoint(ChainError::UnknownKey {
            tree_size: 13,
            ..
        }))
    ));

    // An auditor who trusts only the new key cannot accept the old key's checkpoint.
    assert!(matches!(
        verify_proof_file(&ProofFile::Consistency(file.clone()), &b.public_key()),
        Err(ProofFileError::Checkpoint(ChainError::UnknownKey {
            tree_size: 5,
            ..
        }))
    ));

    // The old key may not sign after the handover.
    let mut late = file;
    late.second_checkpoint = checkpoint(&a, &tree, 13, "2025-03-01T10:00:00Z");
    assert!(matches!(
        verify_proof_file(&ProofFile::Consistency(late), &a.public_key()),
        Err(ProofFileError::Checkpoint(ChainError::RetiredKey { .. }))
    ));
}

#[test]
fn altered_inclusion_files_are_refused() {
    let a = key(1);
    let trusted = a.public_key();
    let good = inclusion_file(&a, 6, 13);
    let check = |file: InclusionProofFile| verify_proof_file(&ProofFile::Inclusion(file), &trusted);
    assert!(check(good.clone()).is_ok());

    let mut f = good.clone();
    f.tree_size = 12;
    assert!(matches!(
        check(f),
        Err(ProofFileError::SizeMismatch {
            stated: 12,
            signed: 13
        })
    ));

    let mut f = good.clone();
    f.leaf_hash = flip(&f.leaf_hash, 0, 0);
    assert!(matches!(
        check(f),
        Err(ProofFileError::LeafHashMismatch { .. })
    ));

    let mut f = good.clone();
    f.event_hash = event_hashes(20)[7];
    f.leaf_hash = Sha256.leaf(f.event_hash.as_bytes());
    assert!(matches!(
        check(f),
        Err(ProofFileError::Inclusion(
            InclusionError::RootMismatch { .. }
        ))
    ));

    for index in [5, 7, 12] {
        let mut f = good.clone();
        f.leaf_index = index;
        assert!(matches!(check(f), Err(ProofFileError::Inclusion(_))));
    }

    let mut f = good.clone();
    f.leaf_index = 13;
    assert!(matches!(
        check(f),
        Err(ProofFileError::Inclusion(
            InclusionError::IndexOutOfRange { .. }
        ))
    ));

    for position in 0..good.path.len() {
        let mut f = good.clone();
        f.path[position] = flip(&f.path[position], 3, 3);
        assert!(matches!(
            check(f),
            Err(ProofFileError::Inclusion(
                InclusionError::RootMismatch { .. }
            ))
        ));
    }

    let mut f = good.clone();
    f.path.pop();
    assert!(matches!(
        check(f),
        Err(ProofFileError::Inclusion(InclusionError::PathLength { .. }))
    ));

    let mut f = good.clone();
    f.checkpoint.root = flip(&f.checkpoint.root, 0, 7);
    assert!(matches!(
        check(f),
        Err(ProofFileError::Checkpoint(ChainError::Checkpoint(
            CheckpointError::BadSignature { .. }
        )))
    ));

    let mut f = good.clone();
    f.checkpoint.signature.0[10] ^= 1;
    assert!(matches!(
        check(f),
        Err(ProofFileError::Checkpoint(ChainError::Checkpoint(
            CheckpointError::BadSignature { .. }
        )))
    ));

    // A checkpoint re-signed by someone else, over the same tree.
    let mut f = good.clone();
    let mallory = key(0x66);
    f.checkpoint = Checkpoint::sign(
        &mallory,
        "example.org/log",
        13,
        f.checkpoint.root,
        f.checkpoint.time,
    )
    .unwrap();
    assert!(matches!(
        check(f),
        Err(ProofFileError::Checkpoint(ChainError::UnknownKey { .. }))
    ));

    assert!(matches!(
        verify_proof_file(&ProofFile::Inclusion(good), &key(2).public_key()),
        Err(ProofFileError::Checkpoint(ChainError::UnknownKey { .. }))
    ));
}

#[test]
fn altered_consistency_files_are_refused() {
    let a = key(1);
    let trusted = a.public_key();
    let good = consistency_file(&a, 5, 13);
    let check =
        |file: ConsistencyProofFile| verify_proof_file(&ProofFile::Consistency(file), &trusted);
    assert!(check(good.clone()).is_ok());

    let mut f = good.clone();
    f.first_size = 4;
    assert!(matches!(
        check(f),
        Err(ProofFileError::SizeMismatch {
            stated: 4,
            signed: 5
        })
    ));
    let mut f = good.clone();
    f.second_size = 14;
    assert!(matches!(
        check(f),
        Err(ProofFileError::SizeMismatch {
            stated: 14,
            signed: 13
        })
    ));

    for position in 0..good.path.len() {
        let mut f = good.clone();
        f.path[position] = flip(&f.path[position], 9, 1);
        assert!(matches!(check(f), Err(ProofFileError::Consistency(_))));
    }
    let mut f = good.clone();
    f.path.push(Digest([0; 32]));
    assert!(matches!(
        check(f),
        Err(ProofFileError::Consistency(
            ConsistencyError::PathLength { .. }
        ))
    ));

    let mut f = good.clone();
    f.second_checkpoint.root = flip(&f.second_checkpoint.root, 0, 0);
    assert!(matches!(
        check(f),
        Err(ProofFileError::Checkpoint(ChainError::Checkpoint(_)))
    ));

    // Checkpoints swapped: the log would have shrunk.
    let mut f = good.clone();
    std::mem::swap(&mut f.first_checkpoint, &mut f.second_checkpoint);
    std::mem::swap(&mut f.first_size, &mut f.second_size);
    assert!(matches!(
        check(f),
        Err(ProofFileError::Consistency(
            ConsistencyError::SizesOutOfOrder { .. }
        ))
    ));
}

/// The log is rewritten after an auditor kept a checkpoint: one early event is replaced and
/// the log carries on. Even correctly signed, the new checkpoint cannot be shown to extend the
/// kept one.
#[test]
fn a_rewritten_history_is_detected() {
    let a = key(1);
    let events = event_hashes(20);
    let original = log(&events);
    let kept = checkpoint(&a, &original, 5, "2025-03-01T09:00:00Z");

    let mut rewritten_events = events.clone();
    rewritten_events[2] = Sha256.leaf(b"a different event");
    let rewritten = log(&rewritten_events);
    let latest = checkpoint(&a, &rewritten, 13, "2025-03-01T10:00:00Z");
    let file = ConsistencyProofFile::new(
        rewritten.consistency_proof(5, 13).unwrap(),
        kept.clone(),
        latest.clone(),
        Vec::new(),
    );
    assert!(matches!(
        verify_proof_file(&ProofFile::Consistency(file), &a.public_key()),
        Err(ProofFileError::Consistency(
            ConsistencyError::FirstRootMismatch { .. }
                | ConsistencyError::SecondRootMismatch { .. }
        ))
    ));
    // Nor does the honest log's proof connect the kept checkpoint to the rewritten root.
    let file = ConsistencyProofFile::new(
        original.consistency_proof(5, 13).unwrap(),
        kept,
        latest,
        Vec::new(),
    );
    assert!(matches!(
        verify_proof_file(&ProofFile::Consistency(file), &a.public_key()),
        Err(ProofFileError::Consistency(
            ConsistencyError::SecondRootMismatch { .. }
        ))
    ));
}

#[test]
fn text_that_is_not_a_proof_file_is_refused() {
    let a = key(1);
    let trusted = a.public_key();
    let mut value = serde_json::to_value(ProofFile::Inclusion(inclusion_file(&a, 1, 4))).unwrap();

    let mut unknown_field = value.clone();
    unknown_field["comment"] = "ignore the path".into();
    let mut unknown_kind = value.clone();
    unknown_kind["kind"] = "exclusion".into();
    let mut no_kind = value.clone();
    no_kind.as_object_mut().unwrap().remove("kind");
    let mut unknown_in_checkpoint = value.clone();
    unknown_in_checkpoint["checkpoint"]["extra"] = 1.into();
    value["path"][0] = "not hex".into();

    for text in [
        unknown_field.to_string(),
        unknown_kind.to_string(),
        no_kind.to_string(),
        unknown_in_checkpoint.to_string(),
        value.to_string(),
        String::new(),
        "[]".to_owned(),
        "{\"kind\": \"inclusion\"}".to_owned(),
    ] {
        assert!(
            matches!(
                verify_proof_file_json(&text, &trusted),
                Err(ProofFileError::Json(_))
            ),
            "accepted {text}"
        );
    }

    let huge = " ".repeat(PROOF_FILE_BYTES_MAX + 1);
    assert!(matches!(
        verify_proof_file_json(&huge, &trusted),
        Err(ProofFileError::TooLarge { .. })
    ));
}
