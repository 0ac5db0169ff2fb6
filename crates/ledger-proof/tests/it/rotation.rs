//! Key rotation statements and the key chain that decides which key may sign which checkpoint.

use ledger_proof::{
    ChainError, Checkpoint, CheckpointError, Digest, KeyChain, KeyRotation, MerkleHasher,
    RotationError, Sha256, SigningKey, Timestamp,
};

use crate::common::{flip, key, time};

/// The root of the (pretend) log at `size`: any fixed function of the size will do here.
fn root(size: u64) -> Digest {
    Sha256.leaf(&size.to_be_bytes())
}

/// A time `size` minutes after a fixed start, so that time grows with the log.
fn at(size: u64) -> Timestamp {
    Timestamp::from_unix_seconds(1_740_000_000 + 60 * size as i64).unwrap()
}

fn checkpoint(key: &SigningKey, size: u64) -> Checkpoint {
    Checkpoint::sign(key, "example.org/log", size, root(size), at(size)).unwrap()
}

fn rotation(old: &SigningKey, new: &SigningKey, size: u64) -> KeyRotation {
    KeyRotation::sign(
        old,
        "example.org/log",
        new.public_key(),
        size,
        root(size),
        at(size),
    )
    .unwrap()
}

/// Keys A, B and C; A hands over to B at size 10, B to C at size 20.
struct Chain {
    a: SigningKey,
    b: SigningKey,
    c: SigningKey,
    rotations: Vec<KeyRotation>,
}

fn chain() -> Chain {
    let (a, b, c) = (key(0xa), key(0xb), key(0xc));
    let rotations = vec![rotation(&a, &b, 10), rotation(&b, &c, 20)];
    Chain { a, b, c, rotations }
}

#[test]
fn the_signed_text_is_exactly_the_specified_one() {
    let b = key(0xb);
    let text = KeyRotation::body(
        "example.org/log",
        10,
        &root(10),
        &time("2025-03-01T09:30:00Z"),
        &b.public_key(),
    )
    .unwrap();
    let vkey = ledger_proof::VerifierKey::ed25519("example.org/log", b.public_key()).unwrap();
    assert_eq!(
        text,
        format!(
            "example.org/log\n10\n{}\ntime 2025-03-01T09:30:00Z\nrotate-to {vkey}\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, root(10).0),
        )
    );
}

#[test]
fn a_rotation_statement_round_trips_through_json() {
    let statement = rotation(&key(0xa), &key(0xb), 10);
    let json = serde_json::to_value(&statement).unwrap();
    let fields: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        [
            "new_public_key",
            "old_key_fingerprint",
            "origin",
            "root",
            "signature",
            "time",
            "tree_size"
        ]
    );
    assert_eq!(
        serde_json::from_value::<KeyRotation>(json).unwrap(),
        statement
    );
}

#[test]
fn a_valid_chain_assigns_each_key_its_stretch_of_the_log() {
    let Chain { a, b, c, rotations } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &rotations).unwrap();

    let ranges: Vec<_> = keys
        .epochs()
        .map(|e| {
            (
                e.fingerprint(),
                e.valid_from().map(|h| h.tree_size),
                e.valid_until().map(|h| h.tree_size),
            )
        })
        .collect();
    assert_eq!(
        ranges,
        [
            (a.fingerprint(), None, Some(10)),
            (b.fingerprint(), Some(10), Some(20)),
            (c.fingerprint(), Some(20), None),
        ]
    );
    assert_eq!(keys.current().key(), &c.public_key());

    let list = [
        checkpoint(&a, 1),
        checkpoint(&a, 10),
        checkpoint(&b, 10),
        checkpoint(&b, 15),
        checkpoint(&b, 20),
        checkpoint(&c, 20),
        checkpoint(&c, 1000),
    ];
    for cp in &list {
        let epoch = keys.verify_checkpoint(cp).unwrap();
        assert_eq!(epoch.fingerprint(), cp.key_fingerprint);
    }
    assert_eq!(keys.verify_checkpoints(&list), Ok(()));
}

#[test]
fn a_retired_key_cannot_sign_later_checkpoints() {
    let Chain {
        a, b, rotations, ..
    } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &rotations).unwrap();
    assert!(matches!(
        keys.verify_checkpoint(&checkpoint(&a, 11)),
        Err(ChainError::RetiredKey {
            tree_size: 11,
            retired_at: 10,
            ..
        })
    ));
    assert!(matches!(
        keys.verify_checkpoint(&checkpoint(&b, 21)),
        Err(ChainError::RetiredKey { retired_at: 20, .. })
    ));
    // Same size as the handover, but signed after it.
    let late = Checkpoint::sign(&a, "example.org/log", 10, root(10), at(11)).unwrap();
    assert!(matches!(
        keys.verify_checkpoint(&late),
        Err(ChainError::RetiredKey { .. })
    ));
}

#[test]
fn a_new_key_cannot_sign_history_before_its_introduction() {
    let Chain { a, b, c, rotations } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &rotations).unwrap();
    assert!(matches!(
        keys.verify_checkpoint(&checkpoint(&b, 9)),
        Err(ChainError::NotYetValid {
            introduced_at: 10,
            ..
        })
    ));
    let early = Checkpoint::sign(&c, "example.org/log", 25, root(25), at(19)).unwrap();
    assert!(matches!(
        keys.verify_checkpoint(&early),
        Err(ChainError::NotYetValid {
            introduced_at: 20,
            ..
        })
    ));
}

#[test]
fn a_checkpoint_disagreeing_with_a_handover_root_is_a_fork() {
    let Chain { a, rotations, .. } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &rotations).unwrap();
    let forked =
        Checkpoint::sign(&a, "example.org/log", 10, flip(&root(10), 0, 0), at(10)).unwrap();
    assert!(matches!(
        keys.verify_checkpoint(&forked),
        Err(ChainError::Fork { tree_size: 10, .. })
    ));
}

#[test]
fn a_forged_statement_is_refused() {
    let Chain { a, b, .. } = chain();
    let mallory = key(0x66);

    // Signed by the new key itself instead of the old one.
    let mut self_signed = rotation(&mallory, &mallory, 10);
    self_signed.old_key_fingerprint = a.fingerprint();
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &[self_signed]),
        Err(RotationError::Forged { position: 0, .. })
    ));

    // A genuine statement with its new key swapped.
    let mut swapped = rotation(&a, &b, 10);
    swapped.new_public_key = mallory.public_key();
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &[swapped]),
        Err(RotationError::Forged { .. })
    ));

    // A genuine statement with its handover moved.
    let mut moved = rotation(&a, &b, 10);
    moved.tree_size = 1000;
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &[moved]),
        Err(RotationError::Forged { .. })
    ));
}

#[test]
fn reordered_missing_or_repeated_statements_are_refused() {
    let Chain { a, rotations, .. } = chain();
    let trusted = a.public_key();

    let reordered = [rotations[1].clone(), rotations[0].clone()];
    assert!(matches!(
        KeyChain::from_rotations(trusted, &reordered),
        Err(RotationError::WrongOldKey { position: 0, .. })
    ));

    let d = key(0xd);
    let gap = [rotations[0].clone(), rotation(&key(0xc), &d, 30)];
    assert!(matches!(
        KeyChain::from_rotations(trusted, &gap),
        Err(RotationError::WrongOldKey { position: 1, .. })
    ));

    let repeated = [rotations[0].clone(), rotations[0].clone()];
    assert!(matches!(
        KeyChain::from_rotations(trusted, &repeated),
        Err(RotationError::WrongOldKey { position: 1, .. })
    ));

    let swapped_after_first = [
        rotations[0].clone(),
        rotations[1].clone(),
        rotations[0].clone(),
    ];
    assert!(matches!(
        KeyChain::from_rotations(trusted, &swapped_after_first),
        Err(RotationError::WrongOldKey { position: 2, .. })
    ));
}

#[test]
fn a_backdated_handover_is_refused() {
    let (a, b, c) = (key(0xa), key(0xb), key(0xc));
    let statements = [rotation(&a, &b, 20), rotation(&b, &c, 10)];
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &statements),
        Err(RotationError::GoesBack {
            position: 1,
            tree_size: 10,
            ..
        })
    ));
    let earlier_time =
        KeyRotation::sign(&b, "example.org/log", c.public_key(), 20, root(20), at(19)).unwrap();
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &[statements[0].clone(), earlier_time]),
        Err(RotationError::GoesBack { .. })
    ));
}

#[test]
fn a_key_cannot_come_back() {
    let (a, b) = (key(0xa), key(0xb));
    let statements = [rotation(&a, &b, 10), rotation(&b, &a, 20)];
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &statements),
        Err(RotationError::KeyReused { position: 1, .. })
    ));
    assert!(matches!(
        KeyChain::from_rotations(a.public_key(), &[rotation(&a, &a, 10)]),
        Err(RotationError::KeyReused { position: 0, .. })
    ));
}

#[test]
fn trust_starting_at_a_later_key_flows_forward_only() {
    let Chain { a, b, c, rotations } = chain();
    let keys = KeyChain::from_rotations(b.public_key(), &rotations).unwrap();
    let fingerprints: Vec<_> = keys.epochs().map(|e| e.fingerprint()).collect();
    assert_eq!(fingerprints, [b.fingerprint(), c.fingerprint()]);
    assert!(keys.verify_checkpoint(&checkpoint(&b, 12)).is_ok());
    assert!(keys.verify_checkpoint(&checkpoint(&c, 30)).is_ok());
    assert!(matches!(
        keys.verify_checkpoint(&checkpoint(&a, 5)),
        Err(ChainError::UnknownKey { .. })
    ));

    let outsider = key(0x77).public_key();
    assert!(matches!(
        KeyChain::from_rotations(outsider, &rotations),
        Err(RotationError::TrustedKeyNotInChain { .. })
    ));
}

#[test]
fn without_statements_only_the_trusted_key_signs() {
    let Chain { a, b, .. } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &[]).unwrap();
    assert_eq!(keys, KeyChain::new(a.public_key()));
    assert!(keys.verify_checkpoint(&checkpoint(&a, 1_000_000)).is_ok());
    assert!(matches!(
        keys.verify_checkpoint(&checkpoint(&b, 12)),
        Err(ChainError::UnknownKey { tree_size: 12, .. })
    ));
}

#[test]
fn a_checkpoint_with_a_bad_signature_is_refused_by_the_chain() {
    let Chain { a, rotations, .. } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &rotations).unwrap();
    let mut altered = checkpoint(&a, 5);
    altered.root = flip(&altered.root, 1, 1);
    assert!(matches!(
        keys.verify_checkpoint(&altered),
        Err(ChainError::Checkpoint(CheckpointError::BadSignature {
            tree_size: 5
        }))
    ));
}

#[test]
fn a_list_of_checkpoints_must_follow_the_log() {
    let Chain {
        a, b, rotations, ..
    } = chain();
    let keys = KeyChain::from_rotations(a.public_key(), &rotations).unwrap();
    assert!(matches!(
        keys.verify_checkpoints(&[checkpoint(&a, 5), checkpoint(&a, 3)]),
        Err(ChainError::OutOfOrder {
            previous_size: 5,
            tree_size: 3
        })
    ));
    let other_root =
        Checkpoint::sign(&b, "example.org/log", 15, flip(&root(15), 2, 2), at(15)).unwrap();
    assert!(matches!(
        keys.verify_checkpoints(&[checkpoint(&b, 15), other_root]),
        Err(ChainError::Fork { tree_size: 15, .. })
    ));
    let earlier = Checkpoint::sign(&b, "example.org/log", 16, root(16), at(14)).unwrap();
    assert!(matches!(
        keys.verify_checkpoints(&[checkpoint(&b, 15), earlier]),
        Err(ChainError::OutOfOrder { .. })
    ));
}
