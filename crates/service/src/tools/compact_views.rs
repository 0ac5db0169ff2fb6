//! Evidence as an assistant reads it in a tool result: what screening needs (id, source, type,
//! date, summary, relevance), with flags only when they hold, and a line of text per item for
//! the result's text content, so that a client that reads only text can still screen.
//!
//! The full view of an item (the whole summary, scores, hashes, provenance) stays in the task's
//! state, in `retrieval_list_candidates` with `detail: "full"`, and in GraphQL.

use research::views::EvidenceView;
use serde_json::{Map, Value, json};

/// An item as a compact JSON object.
pub(crate) fn item(view: &EvidenceView) -> Value {
    let mut map = Map::new();
    map.insert("evidence_id".into(), json!(view.item.evidence_id.as_str()));
    if let Some(found) = &view.item.found_by {
        map.insert("result_id".into(), json!(found.result_id));
    }
    map.insert("origin".into(), json!(view.item.origin));
    map.insert("source".into(), json!(view.item.source));
    map.insert("source_type".into(), json!(view.item.source_type.name()));
    map.insert(
        "publish_date".into(),
        json!(view.item.publish_date.to_string()),
    );
    if view.item.publish_date_defaulted {
        map.insert("publish_date_defaulted".into(), json!(true));
    }
    map.insert("relevance".into(), json!(round3(view.item.relevance)));
    map.insert("status".into(), json!(view.status.name()));
    if let Some(stance) = view.item.stance {
        map.insert("stance".into(), json!(stance.name()));
    }
    if let Some(scope) = &view.item.sub_question {
        map.insert("sub_question".into(), json!(scope.as_str()));
    }
    map.insert("summary".into(), json!(short(&view.item.summary)));
    Value::Object(map)
}

/// The characters of a summary a compact item shows; the whole summary is in the full view.
const SUMMARY_CHARS_SHOWN: usize = 240;

/// `summary` cut to [`SUMMARY_CHARS_SHOWN`] at a word's end, marked with `…` when cut.
fn short(summary: &str) -> String {
    let summary = summary.replace('\n', " ");
    if summary.chars().count() <= SUMMARY_CHARS_SHOWN {
        return summary;
    }
    let cut: String = summary.chars().take(SUMMARY_CHARS_SHOWN).collect();
    let at_word = cut.rfind(' ').map_or(cut.as_str(), |i| &cut[..i]);
    format!("{}…", at_word.trim_end_matches([',', ';', ':']))
}

/// An item as one line of text: `ev-3 [government; varden basin water authority; 2024-11-15;
/// relevance 0.82] summary`.
pub(crate) fn line(view: &EvidenceView) -> String {
    let defaulted = if view.item.publish_date_defaulted {
        " (default date)"
    } else {
        ""
    };
    let stance = view
        .item
        .stance
        .map(|s| format!("; {}", s.name()))
        .unwrap_or_default();
    format!(
        "{} [{}; {}; {}{defaulted}; relevance {:.2}{stance}] {}",
        view.item.evidence_id.as_str(),
        view.item.source_type.name(),
        view.item.source,
        view.item.publish_date,
        view.item.relevance,
        short(&view.item.summary)
    )
}

/// A score shown to three decimals: the unrounded value is in the ledger and the full view.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn a_long_summary_is_cut_at_a_word_and_marked() {
        let long = "word ".repeat(100);
        let cut = short(&long);
        assert!(cut.ends_with("word…"), "{cut}");
        assert!(cut.chars().count() <= 241);
        assert_eq!(short("short, whole."), "short, whole.");
        let chinese = "证据".repeat(200);
        assert_eq!(short(&chinese).chars().count(), 241);
    }
}
