//! Stored event bytes, as read back from a log or an export bundle, must decode or be refused,
//! never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ledger::envelope::decode_stored(data);
});
