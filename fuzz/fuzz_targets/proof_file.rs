//! Proof files come from anyone: parsing and verifying one must never panic.
#![no_main]

use ledger::ledger_proof::{ProofFile, PublicKey, verify_proof_file};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = ProofFile::from_json(text) {
        // Any well-formed key will do: verification must refuse cleanly, not crash.
        if let Ok(key) = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a".parse::<PublicKey>() {
            let _ = verify_proof_file(&file, &key);
        }
    }
});
