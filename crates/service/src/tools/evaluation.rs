//! The evaluation tools: synthesis, the conflict rules and a person's decisions, the decision
//! matrix, the verdict and its explanation.

use research::command::{Command, ResolveConflict};
use research::event::{Event, Tier};
use serde_json::{Value, json};

use super::{Call, ToolOutput, base, compact_views, done, guard, suffix, to_json};
use crate::args::*;
use crate::error::ServiceError;
use crate::service::Target;

pub(super) fn synthesis(call: &mut Call<'_>, a: TaskArgs) -> Result<ToolOutput, ServiceError> {
    let written = call.write_simple(&a, Command::RecordSynthesis)?;
    let mut map = base(&written);
    map.insert(
        "synthesis".into(),
        written
            .state
            .latest_synthesis()
            .map(|s| to_json(&s.event))
            .unwrap_or(Value::Null),
    );
    let text = format!("Recorded a synthesis.{}", suffix(&written));
    Ok(done(map, text))
}

pub(super) fn conflict_resolution(
    call: &mut Call<'_>,
    a: TaskArgs,
) -> Result<ToolOutput, ServiceError> {
    let written = call.write_simple(&a, Command::RunConflictResolution)?;
    let (conflicts, text) = conflicts_in_force(&written.state);
    let mut map = base(&written);
    map.insert("conflicts".into(), conflicts);
    Ok(done(map, format!("{text}{}", suffix(&written))))
}

/// The conflicts in force, compact (what a person needs to decide the pending ones), and their
/// text: a count, then a line per conflict.
pub fn conflicts_in_force(state: &research::TaskState) -> (Value, String) {
    let conflicts: Vec<_> = state
        .conflict_views()
        .into_iter()
        .filter(|c| c.current)
        .collect();
    let pending = conflicts
        .iter()
        .filter(|c| compact_views::waits_for_person(c))
        .count();
    let mut list = Vec::with_capacity(conflicts.len());
    let mut text = format!(
        "{} conflict(s) in force, {pending} pending a person's decision.",
        conflicts.len()
    );
    for c in &conflicts {
        let divergence = state.divergence(&c.conflict_id);
        list.push(compact_views::conflict(c, divergence.as_ref()));
        text.push('\n');
        text.push_str(&compact_views::conflict_lines(c, divergence.as_ref()));
    }
    (Value::Array(list), text)
}

pub(super) fn resolve_conflict(
    call: &mut Call<'_>,
    a: ResolveConflictArgs,
) -> Result<ToolOutput, ServiceError> {
    let written = call.write(
        Target::Existing(&a.task_id),
        &guard(a.expected_version, &a.idempotency_key),
        &mut |_| {
            Ok(Command::ResolveConflict(ResolveConflict {
                conflict_id: a.conflict_id.clone(),
                winner: a.winner.into(),
                reason: a.reason.clone(),
                decided_by: Some(call.caller.decider.clone()),
            }))
        },
    )?;
    let conflict = written
        .state
        .conflict_views()
        .into_iter()
        .find(|c| c.conflict_id.as_str() == a.conflict_id);
    let mut map = base(&written);
    let line = conflict
        .as_ref()
        .map(|c| compact_views::conflict_lines(c, None))
        .unwrap_or_default();
    map.insert(
        "conflict".into(),
        conflict
            .map(|c| compact_views::conflict(&c, None))
            .unwrap_or(Value::Null),
    );
    let text = format!(
        "Recorded the decision on {} as the {}'s.{}\n{line}",
        a.conflict_id,
        call.caller.decider.by.name(),
        suffix(&written)
    );
    Ok(done(map, text))
}

pub(super) fn decision_matrix(
    call: &mut Call<'_>,
    a: TaskArgs,
) -> Result<ToolOutput, ServiceError> {
    let written = call.write_simple(&a, Command::BuildDecisionMatrix)?;
    let mut map = base(&written);
    map.insert(
        "matrix".into(),
        written
            .state
            .latest_matrix()
            .map(|m| to_json(&m.event))
            .unwrap_or(Value::Null),
    );
    let text = format!("Built the decision matrix.{}", suffix(&written));
    Ok(done(map, text))
}

pub(super) fn conclusion(call: &mut Call<'_>, a: TaskArgs) -> Result<ToolOutput, ServiceError> {
    let written = call.write_simple(&a, Command::GenerateConclusion)?;
    let issued = written.events.iter().rev().find_map(|(_, _, e)| match e {
        Event::ConclusionIssued(c) => Some(c.conclusion_id.clone()),
        _ => None,
    });
    let card = written
        .state
        .conclusion_card(issued.as_ref())
        .ok_or_else(|| ServiceError::unavailable("a conclusion was issued but has no card"))?;
    let warnings = conclusion_warnings(&written.state, &card);
    let mut text = format!(
        "Verdict: {} (confidence {:.3}).{}",
        card.stance.name(),
        card.confidence,
        suffix(&written)
    );
    for w in &warnings {
        text.push_str(&format!(
            "\nWarning ({}): {}",
            w["kind"].as_str().unwrap_or(""),
            w["message"].as_str().unwrap_or("")
        ));
    }
    let mut map = base(&written);
    if let Value::Object(card) = to_json(&card) {
        map.extend(card);
    }
    map.insert("warnings".into(), Value::Array(warnings));
    Ok(done(map, text))
}

/// Mean relevance of the evidence used below which a verdict is flagged as resting on
/// evidence of little topicality.
const LOW_RELEVANCE: f64 = 0.3;

/// What a reader of a verdict should know before trusting it: candidates never screened,
/// conflicts still waiting for a person, evidence used whose date is a default, a single
/// source, and low relevance. Each is `{kind, message}`; none is an error — the verdict is what
/// the rules give over what the ledger holds.
fn conclusion_warnings(
    state: &research::TaskState,
    card: &research::views::ConclusionCard,
) -> Vec<Value> {
    let mut out = Vec::new();
    let mut warn = |kind: &str, message: String| {
        out.push(json!({"kind": kind, "message": message}));
    };
    let views = state.evidence_views();
    let unscreened = views
        .iter()
        .filter(|v| matches!(v.status, research::event::EvidenceStatus::Candidate))
        .count();
    if unscreened > 0 {
        warn(
            "unscreened_candidates",
            format!(
                "{unscreened} candidate(s) were never screened and take no part; screen them and conclude again"
            ),
        );
    }
    let pending = state
        .conflict_views()
        .iter()
        .filter(|c| c.current && matches!(c.tier, Tier::Pending) && c.resolution.is_none())
        .count();
    if pending > 0 {
        warn(
            "pending_conflicts",
            format!(
                "{pending} conflict(s) wait for a decision; their items count on neither side until one is made"
            ),
        );
    }
    let defaulted = card
        .evidence
        .iter()
        .filter_map(|e| views.iter().find(|v| v.item.evidence_id == e.evidence_id))
        .filter(|v| v.item.publish_date_defaulted)
        .count();
    if defaulted > 0 {
        let how = if card.rules.v2.is_some() {
            "they take no part in recency"
        } else {
            "rule set v1 counts their default date in recency"
        };
        warn(
            "defaulted_dates",
            format!("{defaulted} item(s) used have a default publish date: {how}"),
        );
    }
    let sources: std::collections::BTreeSet<&str> =
        card.evidence.iter().map(|e| e.source.as_str()).collect();
    if sources.len() == 1 {
        warn(
            "single_source",
            "every item used comes from one source".to_owned(),
        );
    }
    if !card.evidence.is_empty() && card.components.relevance < LOW_RELEVANCE {
        warn(
            "low_relevance",
            format!(
                "the evidence used has a mean relevance of {:.2}, below {LOW_RELEVANCE}",
                card.components.relevance
            ),
        );
    }
    out
}

pub(super) fn explain(call: &mut Call<'_>, a: TaskArgs) -> Result<ToolOutput, ServiceError> {
    let written = call.write_simple(&a, Command::ExplainReasoning)?;
    let explanation = written.state.current_explanation().ok_or_else(|| {
        ServiceError::unavailable("an explanation was recorded but is not in the state")
    })?;
    // The explanation once: its Markdown, every line citing its events. The lines as nodes
    // (with their parents and citations apart) are in the state, GraphQL and the why-graph.
    let markdown = explanation.event.markdown();
    let mut map = base(&written);
    map.insert(
        "explanation_id".into(),
        json!(explanation.event.explanation_id),
    );
    map.insert(
        "conclusion_id".into(),
        json!(explanation.event.conclusion_id),
    );
    map.insert("markdown".into(), json!(markdown));
    Ok(done(map, markdown))
}
