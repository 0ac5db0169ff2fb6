//! Inputs that once crashed (or were written to probe) the fuzz targets of the ledger's
//! decoders, replayed on every test run: each must be decoded or refused, never panic.

use std::path::PathBuf;

use ledger::ledger_proof::{ProofFile, PublicKey, verify_proof_file};
use ledger::storage::frame;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no inputs for {target}");
    out
}

#[test]
fn event_envelope_inputs_are_refused_or_decoded() {
    for (_, data) in inputs("event_envelope") {
        let _ = ledger::envelope::decode_stored(&data);
    }
}

#[test]
fn log_frame_inputs_are_refused_or_decoded() {
    for (_, data) in inputs("log_frame") {
        let _ = frame::decode_segment_header(&data);
        if let Some(header) = data.first_chunk::<16>() {
            let _ = frame::decode_frame_header(header);
        }
        for kind in [frame::FrameKind::Events, frame::FrameKind::Content] {
            if let Ok(body) = frame::decode_frame_body_of(kind, &data) {
                for &(offset, len) in &body.events {
                    let _ = ledger::envelope::decode_stored(&data[offset..offset + len]);
                }
                let _ = body.content_len();
            }
        }
    }
}

#[test]
fn proof_file_inputs_are_refused_or_verified() {
    let key: PublicKey = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        .parse()
        .unwrap();
    for (path, data) in inputs("proof_file") {
        let Ok(text) = std::str::from_utf8(&data) else {
            continue;
        };
        if let Ok(file) = ProofFile::from_json(text) {
            assert!(
                verify_proof_file(&file, &key).is_err(),
                "{} verified under an unrelated key",
                path.display()
            );
        }
    }
}

#[test]
fn transparency_text_inputs_are_read_or_refused() {
    use ledger::ledger_proof::witness::{AddCheckpoint, check_add};
    use ledger::ledger_proof::{Note, Tile, VerifierKey, checkpoint};
    for (path, data) in inputs("transparency_text") {
        let Ok(text) = std::str::from_utf8(&data) else {
            continue;
        };
        if let Ok(note) = Note::parse(text) {
            let _ = checkpoint::parse_body(&note.text);
        }
        assert!(VerifierKey::parse(text).is_err(), "{}", path.display());
        let _ = Tile::parse(text);
        if let Ok(request) = AddCheckpoint::parse(text) {
            assert!(
                check_add(&request, &[], None).is_err(),
                "{}",
                path.display()
            );
        }
    }
}
