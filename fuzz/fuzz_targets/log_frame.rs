//! Segment headers, frame headers and frame bodies read from disk must decode or be refused,
//! never panic or allocate without bound.
#![no_main]

use ledger::storage::frame;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = frame::decode_segment_header(data);
    if let Some(header) = data.first_chunk::<16>() {
        let _ = frame::decode_frame_header(header);
    }
    if let Ok(body) = frame::decode_frame_body(data) {
        for (offset, len) in body.events {
            let _ = ledger::envelope::decode_stored(&data[offset..offset + len]);
        }
    }
});
