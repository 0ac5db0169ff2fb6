//! What the transparency-log formats read from anyone — signed notes, verifier keys, checkpoint
//! bodies, witness requests and tile paths — must be read or refused, never panic.
#![no_main]

use ledger::ledger_proof::witness::{AddCheckpoint, check_add};
use ledger::ledger_proof::{Note, Tile, VerifierKey, checkpoint};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(note) = Note::parse(text) {
        let _ = note.render();
        let _ = checkpoint::parse_body(&note.text);
    }
    let _ = VerifierKey::parse(text);
    let _ = Tile::parse(text);
    if let Ok(request) = AddCheckpoint::parse(text) {
        let _ = check_add(&request, &[], None);
    }
});
