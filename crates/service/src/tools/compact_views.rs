//! Evidence as an assistant reads it in a tool result: what screening needs (id, source, type,
//! date, summary, relevance), with flags only when they hold, and a line of text per item for
//! the result's text content, so that a client that reads only text can still screen.
//!
//! The full view of an item (the whole summary, scores, hashes, provenance) stays in the task's
//! state, in `retrieval_list_candidates` with `detail: "full"`, and in GraphQL.
//!
//! Conflicts are shaped the same way: what the tiers compared once, each side's item ids, and
//! for a conflict waiting for a person, each item's source, date, authority and summary — what
//! the person needs to decide it. The full view (participants, every human decision, what it
//! superseded) is in the task's state and GraphQL.

use research::event::Tier;
use research::views::{ConflictView, Divergence, DivergenceItem, EvidenceView};
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

/// Whether a conflict waits for a person: the rules left it pending and nobody decided it.
pub(crate) fn waits_for_person(view: &ConflictView) -> bool {
    matches!(view.tier, Tier::Pending) && view.resolution.is_none()
}

/// A conflict as a compact JSON object; `divergence` (the items of a conflict that waits for a
/// person) gives each side's items in full, else each side is its item ids.
pub(crate) fn conflict(view: &ConflictView, divergence: Option<&Divergence>) -> Value {
    let mut map = Map::new();
    map.insert("conflict_id".into(), json!(view.conflict_id.as_str()));
    map.insert(
        "scope".into(),
        json!(view.scope.as_ref().map(|s| s.as_str())),
    );
    map.insert("tier".into(), json!(view.tier.name()));
    map.insert("winner".into(), json!(view.winner.map(|w| w.name())));
    if let Some(resolution) = view.resolution {
        map.insert("resolution".into(), json!(resolution.name()));
    }
    map.insert("compared".into(), super::to_json(&view.compared));
    match divergence.filter(|_| waits_for_person(view)) {
        Some(d) => {
            map.insert("supports".into(), side_items(&d.supports));
            map.insert("opposes".into(), side_items(&d.opposes));
        }
        None => {
            for side in [
                research::event::Side::Supports,
                research::event::Side::Opposes,
            ] {
                let ids: Vec<&str> = view
                    .participants
                    .iter()
                    .filter(|p| p.side == side)
                    .map(|p| p.evidence_id.as_str())
                    .collect();
                map.insert(side.name().into(), json!(ids));
            }
        }
    }
    if let Some(last) = view.human_decisions.last() {
        let mut decision = Map::new();
        decision.insert("outcome".into(), json!(last.outcome.name()));
        decision.insert("reason".into(), json!(last.reason));
        if let Some(by) = last.decided_by {
            decision.insert("decided_by".into(), json!(by.name()));
        }
        if let Some(via) = &last.decided_via {
            decision.insert("decided_via".into(), json!(via));
        }
        map.insert("decision".into(), Value::Object(decision));
    }
    Value::Object(map)
}

fn side_items(items: &[DivergenceItem]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|i| {
                json!({
                    "evidence_id": i.evidence_id.as_str(),
                    "source": i.source,
                    "source_type": i.source_type.name(),
                    "publish_date": i.publish_date.to_string(),
                    "authority": round3(i.authority),
                    "summary": short(&i.summary),
                })
            })
            .collect(),
    )
}

/// A conflict as one line of text (with a line per item when it waits for a person):
/// `cf-1 (main question): pending, for a person to decide`.
pub(crate) fn conflict_lines(view: &ConflictView, divergence: Option<&Divergence>) -> String {
    let scope = view
        .scope
        .as_ref()
        .map_or("main question".to_owned(), |s| s.as_str().to_owned());
    let state = if waits_for_person(view) {
        "pending, for a person to decide".to_owned()
    } else {
        let outcome = match (view.winner, view.resolution) {
            (Some(w), _) => format!("{} wins", w.name()),
            (None, Some(_)) => "both stand".to_owned(),
            (None, None) => "undecided".to_owned(),
        };
        let by = view
            .human_decisions
            .last()
            .and_then(|h| h.decided_by)
            .map(|b| format!(", decided by the {}", b.name()))
            .unwrap_or_default();
        format!("{}: {outcome}{by}", view.tier.name())
    };
    let mut out = format!("{} ({scope}): {state}", view.conflict_id.as_str());
    if let Some(d) = divergence.filter(|_| waits_for_person(view)) {
        for (side, items) in [("supports", &d.supports), ("opposes", &d.opposes)] {
            for i in items {
                out.push_str(&format!(
                    "\n  {side}: {} [{}; {}; {}; authority {:.2}] {}",
                    i.evidence_id.as_str(),
                    i.source_type.name(),
                    i.source,
                    i.publish_date,
                    i.authority,
                    short(&i.summary)
                ));
            }
        }
    }
    out
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
