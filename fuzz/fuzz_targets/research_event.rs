//! Research event payloads of every kind must decode or be refused, never panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    let kinds = research::event::EVENT_KINDS;
    let kind = kinds[usize::from(selector) % kinds.len()];
    if let Ok(event) = research::decode(kind, payload) {
        // What decodes must encode to bytes that decode and encode to the same bytes.
        let bytes = research::encode(&event);
        let again = research::decode(kind, &bytes).expect("an encoded event decodes");
        assert_eq!(research::encode(&again), bytes);
    }
});
