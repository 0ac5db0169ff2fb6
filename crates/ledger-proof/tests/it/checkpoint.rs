//! Signed checkpoints, keys, fingerprints and the canonical time.

use ledger_proof::{
    Checkpoint, CheckpointError, Digest, Fingerprint, HexError, KeyError, MerkleHasher, PublicKey,
    Sha256, Signature, SigningKey, TimeError, Timestamp,
};

use crate::common::{flip, key, time};

/// A checkpoint made once with the key from secret `[1; 32]` and kept as data: a later version
/// must still read and accept it byte for byte.
const KEPT_CHECKPOINT: &str = r#"{"origin":"example.org/log","tree_size":7,"root":"3c06f9a65725af605261f636672c9620d409731d89a451d7455fe9c4ae167829","time":"2025-03-01T09:30:00Z","key_fingerprint":"83561adb398fd87f","signature":"032f39b16c1dd93f69f9c020958dfe305da075b2ea0ea9968bec84f4ebe2a7061c10661105faabd01b93ec7dc15f9a24757408e932f929b46eb6fcf7ab18b709"}"#;
const KEPT_PUBLIC_KEY: &str = "8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c";

fn sample(key: &SigningKey) -> Checkpoint {
    Checkpoint::sign(
        key,
        "example.org/log",
        7,
        Sha256.leaf(b"root"),
        time("2025-03-01T09:30:00Z"),
    )
    .unwrap()
}

#[test]
fn the_signed_text_is_exactly_the_specified_one() {
    let root = Sha256.leaf(b"root");
    let checkpoint = sample(&key(1));
    assert_eq!(
        checkpoint.body(),
        format!(
            "example.org/log\n7\n{}\ntime 2025-03-01T09:30:00Z\n",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, root.0)
        )
    );
    // The note: the body, a blank line, one signature line whose key ID is C2SP's.
    let note = checkpoint.note(key(1).public_key()).unwrap().render();
    let vkey = checkpoint.verifier_key(key(1).public_key()).unwrap();
    assert!(note.starts_with(&format!("{}\n\u{2014} example.org/log ", checkpoint.body())));
    let parsed = ledger_proof::Note::parse(&note).unwrap();
    assert_eq!(Checkpoint::from_note(&parsed, &vkey).unwrap(), checkpoint);
    assert!(vkey.to_string().starts_with("example.org/log+"));
}

#[test]
fn a_signed_checkpoint_verifies_and_round_trips_through_json() {
    let key = key(1);
    let checkpoint = sample(&key);
    assert_eq!(checkpoint.verify(&key.public_key()), Ok(()));
    let json = serde_json::to_string(&checkpoint).unwrap();
    assert_eq!(json, KEPT_CHECKPOINT);
    let back: Checkpoint = serde_json::from_str(&json).unwrap();
    assert_eq!(back, checkpoint);
}

#[test]
fn a_kept_checkpoint_still_verifies() {
    let checkpoint: Checkpoint = serde_json::from_str(KEPT_CHECKPOINT).unwrap();
    let public_key: PublicKey = KEPT_PUBLIC_KEY.parse().unwrap();
    assert_eq!(key(1).public_key(), public_key);
    assert_eq!(checkpoint.verify(&public_key), Ok(()));
}

#[test]
fn every_altered_field_is_refused() {
    let key = key(1);
    let public_key = key.public_key();
    let good = sample(&key);
    let bad_signature = |c: &Checkpoint| {
        matches!(
            c.verify(&public_key),
            Err(CheckpointError::BadSignature { .. })
        )
    };

    let mut c = good.clone();
    c.tree_size += 1;
    assert!(bad_signature(&c));
    let mut c = good.clone();
    c.root = flip(&c.root, 0, 0);
    assert!(bad_signature(&c));
    let mut c = good.clone();
    c.time = Timestamp::from_unix_seconds(c.time.unix_seconds() + 1).unwrap();
    assert!(bad_signature(&c));
    for byte in [0, 31, 32, 63] {
        let mut c = good.clone();
        c.signature.0[byte] ^= 0x10;
        assert!(bad_signature(&c), "signature byte {byte} altered");
    }
    let mut c = good.clone();
    c.key_fingerprint.0[0] ^= 1;
    assert!(matches!(
        c.verify(&public_key),
        Err(CheckpointError::WrongKey { .. })
    ));
}

#[test]
fn another_key_is_refused_even_when_the_fingerprint_is_rewritten() {
    let signer = key(1);
    let other = key(2).public_key();
    let mut checkpoint = sample(&signer);
    assert!(matches!(
        checkpoint.verify(&other),
        Err(CheckpointError::WrongKey { .. })
    ));
    checkpoint.key_fingerprint = other.fingerprint();
    assert!(matches!(
        checkpoint.verify(&other),
        Err(CheckpointError::BadSignature { tree_size: 7 })
    ));
}

/// RFC 8032 §7.1, TEST 1: secret key, public key and the signature of the empty message.
#[test]
fn ed25519_matches_rfc8032_test_1() {
    let secret: [u8; 32] =
        hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
            .unwrap()
            .try_into()
            .unwrap();
    let key = SigningKey::from_secret_bytes(&secret);
    assert_eq!(
        key.public_key().to_string(),
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    );
    assert_eq!(key.to_secret_bytes(), secret);
    let signature: Signature = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b".parse().unwrap();
    assert_eq!(key.public_key().verify(b"", &signature), Ok(()));
    assert!(key.public_key().verify(b"x", &signature).is_err());
}

#[test]
fn the_fingerprint_is_the_start_of_blake3_of_the_key() {
    let public_key = key(3).public_key();
    let expected = &blake3::hash(&public_key.to_bytes()).to_hex()[..16];
    assert_eq!(public_key.fingerprint().to_string(), expected);
    assert_eq!(key(3).fingerprint(), public_key.fingerprint());
    let parsed: Fingerprint = expected.parse().unwrap();
    assert_eq!(parsed, public_key.fingerprint());
}

#[test]
fn public_keys_round_trip_as_64_hex_digits() {
    let public_key = key(4).public_key();
    let text = public_key.to_string();
    assert_eq!(text.len(), 64);
    assert_eq!(text.parse::<PublicKey>(), Ok(public_key));
    assert_eq!(
        PublicKey::from_bytes(&public_key.to_bytes()),
        Ok(public_key)
    );
    assert_eq!(
        serde_json::to_string(&public_key).unwrap(),
        format!("\"{text}\"")
    );
}

#[test]
fn unusable_public_keys_are_refused() {
    // y = 2 is not the y-coordinate of a curve point.
    let mut not_a_point = [0u8; 32];
    not_a_point[0] = 2;
    assert_eq!(PublicKey::from_bytes(&not_a_point), Err(KeyError::NotAKey));
    // The neutral element: every signature "verifies" under a small-order key.
    let mut neutral = [0u8; 32];
    neutral[0] = 1;
    assert_eq!(PublicKey::from_bytes(&neutral), Err(KeyError::WeakKey));
    assert!(matches!(
        "abc".parse::<PublicKey>(),
        Err(KeyError::Hex(HexError::Length {
            expected: 64,
            found: 3
        }))
    ));
}

#[test]
fn the_signing_key_does_not_show_its_secret() {
    let key = key(9);
    let shown = format!("{key:?}");
    assert!(shown.contains(&key.fingerprint().to_string()));
    assert!(!shown.contains(&hex::encode(key.to_secret_bytes())));
}

#[test]
fn hex_is_lowercase_and_exact() {
    let digest = Sha256.leaf(b"x");
    let text = digest.to_string();
    assert_eq!(text.parse::<Digest>(), Ok(digest));
    assert_eq!(
        text.to_uppercase().parse::<Digest>(),
        Err(HexError::NotLowercaseHex)
    );
    assert_eq!(
        text[..62].parse::<Digest>(),
        Err(HexError::Length {
            expected: 64,
            found: 62
        })
    );
    assert_eq!(
        format!("{text}00").parse::<Digest>(),
        Err(HexError::Length {
            expected: 64,
            found: 66
        })
    );
    assert_eq!(
        format!("{}g", &text[..63]).parse::<Digest>(),
        Err(HexError::NotLowercaseHex)
    );
    // Multi-byte characters of the right byte length are not hex either.
    assert_eq!(
        format!("{}é", &text[..62]).parse::<Digest>(),
        Err(HexError::NotLowercaseHex)
    );
}

#[test]
fn only_the_canonical_time_is_accepted() {
    let canonical = "2025-03-01T09:30:00Z";
    assert_eq!(time(canonical).to_string(), canonical);
    for text in [
        "2025-03-01T09:30:00.5Z",
        "2025-03-01T09:30:00.000Z",
        "2025-03-01T09:30:00+00:00",
        "2025-03-01t09:30:00z",
        "2025-03-01 09:30:00Z",
        "2025-3-1T09:30:00Z",
        "2025-03-01T9:30:00Z",
        "+2025-03-01T09:30:00Z",
        "2016-12-31T23:59:60Z",
        "2025-02-30T00:00:00Z",
        " 2025-03-01T09:30:00Z",
        "2025-03-01T09:30:00Z ",
        "",
    ] {
        assert!(
            matches!(Timestamp::parse(text), Err(TimeError::NotCanonical { .. })),
            "{text:?} accepted"
        );
    }
}

#[test]
fn times_drop_fractions_and_stay_within_four_digit_years() {
    let precise = chrono::DateTime::parse_from_rfc3339("2025-03-01T09:30:00.999+02:00")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let stamp = Timestamp::from_datetime(precise).unwrap();
    assert_eq!(stamp.to_string(), "2025-03-01T07:30:00Z");
    assert_eq!(
        stamp.unix_seconds(),
        Timestamp::parse("2025-03-01T07:30:00Z")
            .unwrap()
            .unix_seconds()
    );
    assert_eq!(
        Timestamp::from_unix_seconds(0).unwrap().to_string(),
        "1970-01-01T00:00:00Z"
    );
    assert_eq!(
        Timestamp::parse("9999-12-31T23:59:59Z")
            .unwrap()
            .to_string(),
        "9999-12-31T23:59:59Z"
    );
    assert_eq!(
        Timestamp::from_unix_seconds(253_402_300_800),
        Err(TimeError::OutOfRange)
    );
    assert_eq!(
        Timestamp::from_unix_seconds(i64::MAX),
        Err(TimeError::OutOfRange)
    );
}

#[test]
fn checkpoint_json_refuses_unknown_missing_and_malformed_fields() {
    let good: serde_json::Value = serde_json::from_str(KEPT_CHECKPOINT).unwrap();

    let mut extra = good.clone();
    extra["note"] = "trust me".into();
    assert!(serde_json::from_value::<Checkpoint>(extra).is_err());

    for field in ["tree_size", "root", "time", "key_fingerprint", "signature"] {
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove(field);
        assert!(
            serde_json::from_value::<Checkpoint>(missing).is_err(),
            "{field} missing"
        );
    }

    let mut upper = good.clone();
    upper["root"] = good["root"].as_str().unwrap().to_uppercase().into();
    assert!(serde_json::from_value::<Checkpoint>(upper).is_err());

    let mut fractional = good.clone();
    fractional["time"] = "2025-03-01T09:30:00.000Z".into();
    assert!(serde_json::from_value::<Checkpoint>(fractional).is_err());

    let mut negative = good;
    negative["tree_size"] = (-1).into();
    assert!(serde_json::from_value::<Checkpoint>(negative).is_err());
}
