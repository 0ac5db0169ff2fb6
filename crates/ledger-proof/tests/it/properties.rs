//! Properties over generated inputs: prefixes are consistent with the whole log, a changed
//! prefix never is, and no input, however malformed, makes a verifier panic.

use ledger_proof::{
    Digest, MemoryTree, MerkleHasher, ProofFile, Sha256, consistency_path_len, inclusion_path_len,
    root_from_inclusion_proof, verify_consistency, verify_inclusion, verify_proof_file_json,
};
use proptest::prelude::*;
use proptest::sample::Index;

use crate::common::{Blake3, key};

fn tree<H: MerkleHasher>(hasher: H, leaves: &[Vec<u8>]) -> MemoryTree<H> {
    let mut tree = MemoryTree::new(hasher);
    for leaf in leaves {
        tree.push(leaf).unwrap();
    }
    tree
}

fn leaves() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..160)
}

fn digest() -> impl Strategy<Value = Digest> {
    any::<[u8; 32]>().prop_map(Digest)
}

/// Sizes and indices where the arithmetic has edges: small, anywhere, and near the top.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..600u64,
        any::<u64>(),
        (u64::MAX - 600)..=u64::MAX,
        (0..64u32).prop_map(|bit| 1u64 << bit),
        (0..64u32).prop_map(|bit| (1u64 << bit).wrapping_sub(1)),
    ]
}

fn prefix_is_consistent<H: MerkleHasher + Copy>(
    hasher: H,
    leaves: &[Vec<u8>],
    cut: &Index,
) -> Result<(), TestCaseError> {
    let n = leaves.len();
    let m = cut.index(n) + 1;
    let whole = tree(hasher, leaves);
    // The prefix's root comes from a tree that never saw the later leaves.
    let prefix = tree(hasher, &leaves[..m]);
    let proof = whole.consistency_proof(m as u64, n as u64).unwrap();
    prop_assert_eq!(
        verify_consistency(
            &hasher,
            m as u64,
            n as u64,
            &prefix.root(),
            &whole.root(),
            &proof
        ),
        Ok(())
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_prefix_is_consistent_with_the_whole_log(leaves in leaves(), cut in any::<Index>()) {
        prefix_is_consistent(Sha256, &leaves, &cut)?;
        prefix_is_consistent(Blake3, &leaves, &cut)?;
    }

    #[test]
    fn a_changed_prefix_is_never_consistent(
        leaves in leaves(),
        cut in any::<Index>(),
        changed in any::<Index>(),
        replacement in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let n = leaves.len();
        let m = cut.index(n) + 1;
        let position = changed.index(m);
        prop_assume!(leaves[position] != replacement);
        let honest_prefix = tree(Sha256, &leaves[..m]);
        let mut rewritten = leaves.clone();
        rewritten[position] = replacement;
        let rewritten = tree(Sha256, &rewritten);
        let proof = rewritten.consistency_proof(m as u64, n as u64).unwrap();
        prop_assert!(verify_consistency(
            &Sha256, m as u64, n as u64, &honest_prefix.root(), &rewritten.root(), &proof
        ).is_err());
    }

    #[test]
    fn every_leaf_is_included_and_no_other(leaves in leaves(), pick in any::<Index>()) {
        let whole = tree(Sha256, &leaves);
        let n = leaves.len() as u64;
        let index = pick.index(leaves.len());
        let proof = whole.inclusion_proof(index as u64, n).unwrap();
        let leaf = Sha256.leaf(&leaves[index]);
        prop_assert_eq!(
            verify_inclusion(&Sha256, index as u64, n, &leaf, &proof, &whole.root()),
            Ok(())
        );
        let stranger = Sha256.leaf(b"\xffnot in the log");
        prop_assert!(verify_inclusion(&Sha256, index as u64, n, &stranger, &proof, &whole.root()).is_err());
    }

    #[test]
    fn inclusion_verification_never_panics(
        index in size(),
        tree_size in size(),
        leaf in digest(),
        path in prop::collection::vec(digest(), 0..80),
        root in digest(),
    ) {
        let result = verify_inclusion(&Sha256, index, tree_size, &leaf, &path, &root);
        let rebuilt = root_from_inclusion_proof(&Sha256, index, tree_size, &leaf, &path);
        // Whatever the input, a verdict; and a path is only ever rebuilt at its one length.
        if rebuilt.is_ok() {
            prop_assert_eq!(inclusion_path_len(index, tree_size), Some(path.len()));
        } else {
            prop_assert!(result.is_err());
        }
    }

    #[test]
    fn consistency_verification_never_panics(
        first in size(),
        second in size(),
        first_root in digest(),
        second_root in digest(),
        path in prop::collection::vec(digest(), 0..140),
    ) {
        let result = verify_consistency(&Sha256, first, second, &first_root, &second_root, &path);
        if result.is_ok() {
            prop_assert_eq!(consistency_path_len(first, second), Some(path.len()));
        }
    }

    #[test]
    fn proof_file_parsing_never_panics(text in ".{0,300}") {
        prop_assert!(ProofFile::from_json(&text).is_err());
    }
}

proptest! {
    // Each case checks Ed25519 signatures, which is slow without optimisation; fewer cases.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// One byte of a valid proof file replaced: either refused, or (whitespace, say) the same
    /// verdict as before, never something else and never a panic.
    #[test]
    fn a_mutated_proof_file_is_refused_or_means_the_same(
        position in any::<Index>(),
        byte in 0x20u8..0x7f,
    ) {
        let a = key(1);
        let mut log = MemoryTree::new(Sha256);
        let events: Vec<Digest> = (0..9u8).map(|i| Sha256.leaf(&[i])).collect();
        for event in &events {
            log.push(event.as_bytes()).unwrap();
        }
        let checkpoint = ledger_proof::Checkpoint::sign(
            &a, "example.org/log", 9, log.root(), ledger_proof::Timestamp::from_unix_seconds(1_740_000_000).unwrap()
        ).unwrap();
        let file = ProofFile::Inclusion(ledger_proof::InclusionProofFile::new(
            4, events[4], log.inclusion_proof(4, 9).unwrap(), checkpoint, Vec::new()
        ));
        let text = serde_json::to_string_pretty(&file).unwrap();
        let original = verify_proof_file_json(&text, &a.public_key()).unwrap();

        let mut bytes = text.into_bytes();
        let at = position.index(bytes.len());
        bytes[at] = byte;
        let mutated = String::from_utf8(bytes).unwrap();
        if let Ok(verdict) = verify_proof_file_json(&mutated, &a.public_key()) {
            prop_assert_eq!(verdict, original);
        }
    }
}

/// The canonical time as the `strftime` pattern reads it, printing back to the same text, in
/// the years the form allows (0000–9999; the pattern also reads a signed year such as `-1970`,
/// which prints back the same): the reference the field-by-field parser is held to.
fn reference_time(text: &str) -> Option<i64> {
    use chrono::{Datelike, Timelike};
    const FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";
    let naive = chrono::NaiveDateTime::parse_from_str(text, FORMAT).ok()?;
    let time = naive.and_utc();
    (naive.nanosecond() == 0
        && (0..=9999).contains(&time.year())
        && time.format(FORMAT).to_string() == text)
        .then(|| time.timestamp())
}

/// Texts near the canonical form: valid times, and valid times with a character changed,
/// inserted or removed, drawn from what the form and its usual misspellings use.
fn time_text() -> impl Strategy<Value = String> {
    let valid = (0i64..253_402_300_800).prop_map(|s| {
        chrono::DateTime::from_timestamp(s, 0)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    });
    let near = (
        valid.clone(),
        any::<Index>(),
        prop::sample::select(b"0123456789-T:Z+ .tz6".to_vec()),
        0..3u8,
    )
        .prop_map(|(text, at, c, how)| {
            let mut bytes = text.into_bytes();
            let i = at.index(bytes.len() + 1);
            match how {
                0 if i < bytes.len() => bytes[i] = c,
                1 => bytes.insert(i, c),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => {}
            }
            String::from_utf8(bytes).unwrap()
        });
    prop_oneof![valid, near, "[0-9T:Z-]{18,22}", ".{0,24}"]
}

proptest! {
    #[test]
    fn the_time_parser_accepts_exactly_what_the_canonical_pattern_does(text in time_text()) {
        let parsed = ledger_proof::time::Timestamp::parse(&text).ok();
        prop_assert_eq!(parsed.map(|t| t.unix_seconds()), reference_time(&text), "{:?}", text);
        if let Some(t) = parsed {
            prop_assert_eq!(t.to_string(), text);
        }
    }

    #[test]
    fn a_time_prints_as_the_canonical_pattern_does(seconds in 0i64..253_402_300_800) {
        let time = ledger_proof::time::Timestamp::from_unix_seconds(seconds).unwrap();
        let reference = chrono::DateTime::from_timestamp(seconds, 0)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        prop_assert_eq!(time.to_string(), reference);
    }

    #[test]
    fn hex_fields_decode_as_the_hex_crate_does_and_refuse_upper_case(
        text in prop_oneof!["[0-9a-f]{64}", "[0-9a-fA-F]{62,66}", ".{0,66}"]
    ) {
        let ours = text.parse::<Digest>().ok().map(|d| d.0);
        let lower = text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let theirs = lower
            .then(|| hex::decode(&text).ok())
            .flatten()
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok());
        prop_assert_eq!(ours, theirs, "{:?}", text);
    }
}
