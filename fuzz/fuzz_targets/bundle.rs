//! Export bundles come from anyone: parsing and checking one must never panic, and a bundle
//! that is not signed by the ledger must never verify.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = service::audit::verify_bundle_text(text, 1 << 20, None);
});
