//! The witness's checks (C2SP tlog-witness): each refusal with its status, and growth cosigned.

use ledger_proof::witness::{AddCheckpoint, LogState, WitnessError, check_add, cosign};
use ledger_proof::{
    Checkpoint, Cosignature, MemoryTree, MerkleHasher, NoteSignature, Sha256, VerifierKey,
    consistency_proof,
};

use crate::common::{key, time};

const ORIGIN: &str = "example.org/log";

fn tree(leaves: u64, salt: u8) -> MemoryTree<Sha256> {
    let mut tree = MemoryTree::new(Sha256);
    for i in 0..leaves {
        tree.push(&[salt, i as u8]).unwrap();
    }
    tree
}

fn note(tree: &MemoryTree<Sha256>, size: u64, signer: u8) -> String {
    let c = Checkpoint::sign(
        &key(signer),
        ORIGIN,
        size,
        tree.root_at(size).unwrap(),
        time("2025-03-01T09:30:00Z"),
    )
    .unwrap();
    c.note(key(signer).public_key()).unwrap().render()
}

fn request(old: u64, proof: Vec<ledger_proof::Digest>, note: &str) -> AddCheckpoint {
    AddCheckpoint::parse(&AddCheckpoint::render(old, &proof, note)).unwrap()
}

fn held(tree: &MemoryTree<Sha256>, size: u64) -> LogState {
    LogState {
        size,
        root: tree.root_at(size).unwrap(),
        note: String::new(),
    }
}

#[test]
fn growth_is_accepted_and_every_refusal_has_its_status() {
    let log = tree(20, 1);
    let trusted = [VerifierKey::ed25519(ORIGIN, key(1).public_key()).unwrap()];
    let proof = consistency_proof(&Sha256, &log, 8, 20).unwrap();

    // First contact, then growth from what is held.
    assert!(check_add(&request(0, vec![], &note(&log, 8, 1)), &trusted, None).is_ok());
    let (_, size, root) = check_add(
        &request(8, proof.clone(), &note(&log, 20, 1)),
        &trusted,
        Some(&held(&log, 8)),
    )
    .unwrap();
    assert_eq!((size, root), (20, log.root_at(20).unwrap()));

    let status = |r: Result<_, WitnessError>| r.err().map(|e| e.status());
    // Another log key: 403; an origin nobody trusts: 404.
    assert_eq!(
        status(check_add(
            &request(0, vec![], &note(&log, 8, 2)),
            &trusted,
            None
        )),
        Some(403)
    );
    let other = [VerifierKey::ed25519("example.org/other", key(1).public_key()).unwrap()];
    assert_eq!(
        status(check_add(
            &request(0, vec![], &note(&log, 8, 1)),
            &other,
            None
        )),
        Some(404)
    );
    // The old size is not the one held: 409; above the new size, a rollback: 400.
    assert_eq!(
        status(check_add(
            &request(0, vec![], &note(&log, 20, 1)),
            &trusted,
            Some(&held(&log, 8))
        )),
        Some(409)
    );
    assert_eq!(
        status(check_add(
            &request(20, vec![], &note(&log, 8, 1)),
            &trusted,
            Some(&held(&log, 20))
        )),
        Some(400)
    );
    // A fork: the same key signs another tree of 20 that extends no tree of 8 held.
    let fork = tree(20, 2);
    let forked = consistency_proof(&Sha256, &fork, 8, 20).unwrap();
    assert_eq!(
        status(check_add(
            &request(8, forked, &note(&fork, 20, 1)),
            &trusted,
            Some(&held(&log, 8))
        )),
        Some(422)
    );
    // Another root at the size held; a proof from nothing.
    assert_eq!(
        status(check_add(
            &request(8, vec![], &note(&fork, 8, 1)),
            &trusted,
            Some(&held(&log, 8))
        )),
        Some(422)
    );
    assert_eq!(
        status(check_add(
            &request(0, proof, &note(&log, 20, 1)),
            &trusted,
            None
        )),
        Some(422)
    );
    // Not a request at all.
    assert!(AddCheckpoint::parse("old 01\n\n").is_err());
    assert!(AddCheckpoint::parse("new 1\n\nx\n").is_err());
}

#[test]
fn a_witness_line_is_a_cosignature_the_log_can_read_back() {
    let log = tree(5, 1);
    let c = Checkpoint::sign(
        &key(1),
        ORIGIN,
        5,
        log.root_at(5).unwrap(),
        time("2025-03-01T09:30:00Z"),
    )
    .unwrap();
    let line = cosign(&key(9), "witness.example/w", &c.body(), 1_700_000_000).unwrap();
    let parsed = NoteSignature::parse_line(line.line().trim_end()).unwrap();
    let vkey = VerifierKey::cosigner("witness.example/w", key(9).public_key()).unwrap();
    let back = Cosignature::from_line(&parsed, &vkey, &c).unwrap();
    assert_eq!(back.timestamp, 1_700_000_000);
    assert_ne!(Sha256.empty_root(), c.root);
}
