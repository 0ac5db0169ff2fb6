//! Segment headers, frame headers and frame bodies read from disk — of frames without content
//! and of content frames, whose bodies end in a table of the blobs that follow them — must
//! decode or be refused, never panic or allocate without bound.
#![no_main]

use ledger::storage::frame::{self, FrameKind};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = frame::decode_segment_header(data);
    if let Some(header) = data.first_chunk::<16>() {
        let _ = frame::decode_frame_header(header);
    }
    for kind in [FrameKind::Events, FrameKind::Content] {
        if let Ok(body) = frame::decode_frame_body_of(kind, data) {
            for &(offset, len) in &body.events {
                let _ = ledger::envelope::decode_stored(&data[offset..offset + len]);
            }
            let _ = body.content_len();
        }
    }
});
