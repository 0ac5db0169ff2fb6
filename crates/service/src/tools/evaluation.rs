//! The evaluation tools: synthesis, the conflict rules and a person's decisions, the decision
//! matrix, the verdict and its explanation.

use research::command::{Command, ResolveConflict};
use research::event::{Event, Tier};
use serde_json::{Value, json};

use super::{Call, ToolOutput, base, done, guard, suffix, to_json};
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
    let conflicts: Vec<_> = written
        .state
        .conflict_views()
        .into_iter()
        .filter(|c| c.current)
        .collect();
    let pending = conflicts
        .iter()
        .filter(|c| matches!(c.tier, Tier::Pending))
        .count();
    let mut list = Vec::with_capacity(conflicts.len());
    for c in &conflicts {
        let mut v = to_json(c);
        if matches!(c.tier, Tier::Pending)
            && let (Value::Object(m), Some(d)) = (&mut v, written.state.divergence(&c.conflict_id))
        {
            m.insert("divergence".into(), to_json(&d));
        }
        list.push(v);
    }
    let mut map = base(&written);
    let text = format!(
        "{} conflict(s) in force, {pending} pending a human decision.{}",
        conflicts.len(),
        suffix(&written)
    );
    map.insert("conflicts".into(), Value::Array(list));
    Ok(done(map, text))
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
            }))
        },
    )?;
    let conflict = written
        .state
        .conflict_views()
        .into_iter()
        .find(|c| c.conflict_id.as_str() == a.conflict_id);
    let mut map = base(&written);
    map.insert(
        "conflict".into(),
        conflict.map(|c| to_json(&c)).unwrap_or(Value::Null),
    );
    let text = format!(
        "Recorded the decision on {}.{}",
        a.conflict_id,
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
    let text = format!(
        "Verdict: {} (confidence {:.3}).{}",
        card.stance.name(),
        card.confidence,
        suffix(&written)
    );
    let mut map = base(&written);
    if let Value::Object(card) = to_json(&card) {
        map.extend(card);
    }
    Ok(done(map, text))
}

pub(super) fn explain(call: &mut Call<'_>, a: TaskArgs) -> Result<ToolOutput, ServiceError> {
    let written = call.write_simple(&a, Command::ExplainReasoning)?;
    let explanation = written.state.current_explanation().ok_or_else(|| {
        ServiceError::unavailable("an explanation was recorded but is not in the state")
    })?;
    let markdown = explanation.event.markdown();
    let mut map = base(&written);
    map.insert("explanation".into(), to_json(&explanation.event));
    map.insert("markdown".into(), json!(markdown));
    Ok(done(map, markdown))
}
