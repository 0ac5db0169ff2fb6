//! Inputs that once crashed (or were written to probe) the research event fuzz target,
//! replayed on every test run: each must decode or be refused, never panic, and what decodes
//! must re-encode stably.

use std::path::PathBuf;

#[test]
fn research_event_inputs_are_refused_or_round_trip() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/research_event");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        count += 1;
        let Some((&selector, payload)) = data.split_first() else {
            continue;
        };
        let kinds = research::event::EVENT_KINDS;
        let kind = kinds[usize::from(selector) % kinds.len()];
        if let Ok(event) = research::decode(kind, payload) {
            let bytes = research::encode(&event);
            let again = research::decode(kind, &bytes).unwrap();
            assert_eq!(research::encode(&again), bytes);
        }
    }
    assert!(count > 0, "no inputs in {}", dir.display());
}
