//! Signed notes, verifier keys and cosignatures, against the examples C2SP publishes.

use ledger_proof::note::{TYPE_COSIGNATURE_V1, TYPE_ED25519, key_id};
use ledger_proof::{Checkpoint, Cosignature, CosignatureError, Note, NoteError, VerifierKey};

use crate::common::{key, time};

/// c2sp.org/signed-note, "Example".
const C2SP_VKEY: &str = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k";
const C2SP_NOTE: &str = "This is an example message.\n\n\u{2014} example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n";

#[test]
fn the_c2sp_example_note_verifies_under_its_verifier_key() {
    let vkey = VerifierKey::parse(C2SP_VKEY).unwrap();
    assert_eq!(vkey.name(), "example.com/foo");
    assert_eq!(vkey.sig_type(), TYPE_ED25519);
    assert_eq!(vkey.to_string(), C2SP_VKEY);
    let note = Note::parse(C2SP_NOTE).unwrap();
    assert_eq!(note.text, "This is an example message.\n");
    assert_eq!(note.render(), C2SP_NOTE);
    note.verify_ed25519(&vkey).unwrap();

    let altered = C2SP_NOTE.replace("example message", "exemplary message");
    let altered = Note::parse(&altered).unwrap();
    assert_eq!(
        altered.verify_ed25519(&vkey),
        Err(NoteError::BadSignature("example.com/foo".into()))
    );
    let other = VerifierKey::ed25519("example.com/bar", *vkey.key()).unwrap();
    assert!(matches!(
        note.verify_ed25519(&other),
        Err(NoteError::NotSigned(_))
    ));
}

#[test]
fn a_verifier_key_whose_base64_holds_a_plus_reads_back() {
    // Only the first two `+` separate the parts: base64 has `+` of its own.
    let text =
        "research-ledger/bd6907e0ff70966d+3b12d1ca+AbDebVCFvY9OMzvsNbvnwwjI+Nybnv2HSl/XI8Ap/66V";
    let vkey = VerifierKey::parse(text).unwrap();
    assert_eq!(vkey.to_string(), text);
    assert_eq!(vkey.name(), "research-ledger/bd6907e0ff70966d");
}

#[test]
fn malformed_notes_and_keys_are_refused() {
    for bad in [
        "no blank line\n\u{2014} a AAAA\n",
        "text\n\n",
        "text\n\n\u{2014} a b c\n",
        "text\n\n- example.com/foo AAAAAAAA\n",
        "text\twith a tab\n\n\u{2014} a AAAAAAAA\n",
        "no final newline\n\n\u{2014} a AAAAAAAA",
    ] {
        assert!(Note::parse(bad).is_err(), "{bad:?}");
    }
    for bad in [
        "example.com/foo+530d903b+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
        "example.com/foo+530D903A+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
        "example.com/fo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
        "example.com/foo+530d903a",
        "example com+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k",
    ] {
        assert!(VerifierKey::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_cosignature_is_c2sp_v1_and_every_change_is_refused() {
    let log = key(1);
    let witness = key(2);
    let checkpoint = Checkpoint::sign(
        &log,
        "example.org/log",
        5,
        ledger_proof::Digest([9; 32]),
        time("2025-03-01T09:30:00Z"),
    )
    .unwrap();
    let cosignature =
        Cosignature::sign(&witness, "example.org/witness", &checkpoint, 1_700_000_000).unwrap();
    cosignature.verify().unwrap();
    let vkey = VerifierKey::cosigner("example.org/witness", witness.public_key()).unwrap();
    assert_eq!(
        vkey.id(),
        key_id(
            "example.org/witness",
            TYPE_COSIGNATURE_V1,
            &witness.public_key().to_bytes()
        )
    );
    // The signed message is C2SP's: header, time line, the whole body.
    let message = ledger_proof::cosignature::cosigned_message(&checkpoint.body(), 1_700_000_000);
    assert!(message.starts_with("cosignature/v1\ntime 1700000000\nexample.org/log\n5\n"));
    let line = cosignature.line();
    assert_eq!(line.bytes.len(), 72);
    assert_eq!(&line.bytes[..8], &1_700_000_000u64.to_be_bytes());
    let back = Cosignature::from_line(&line, &vkey, &checkpoint).unwrap();
    assert_eq!(back, cosignature);

    let mut later = line.clone();
    later.bytes[7] ^= 1;
    assert!(matches!(
        Cosignature::from_line(&later, &vkey, &checkpoint),
        Err(CosignatureError::BadSignature(_))
    ));
    let mut other = checkpoint.clone();
    other.tree_size = 6;
    assert!(matches!(
        Cosignature::from_line(&line, &vkey, &other),
        Err(CosignatureError::BadSignature(_))
    ));
    let log_vkey = VerifierKey::ed25519("example.org/witness", witness.public_key()).unwrap();
    assert!(Cosignature::from_line(&line, &log_vkey, &checkpoint).is_err());
}
