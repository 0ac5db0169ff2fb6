//! The workflow of SPEC §4: which steps are due, in which order, and what a refused command
//! must wait for.
//!
//! Order is tracked by the stream versions at which the evidence, the adjudications, the human
//! decisions and the matrix last changed, so "the matrix was built after the last conflict
//! resolution" is a comparison of two numbers.

use crate::event::EvidenceStatus;
use crate::ids::EvidenceId;
use crate::refusal::{PendingAction, Tool};
use crate::rules::Mode;
use crate::state::{TaskState, version_of};

/// A step of the workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Step {
    Open,
    Search,
    Screen,
    ConflictResolution,
    HumanDecision,
    Matrix,
    Conclusion,
    Explanation,
}

/// At most this many ids are named in a reason; the rest are counted.
const IDS_NAMED_MAX: usize = 8;

pub(crate) fn list_ids<'a>(ids: impl IntoIterator<Item = &'a EvidenceId>) -> String {
    let ids: Vec<&str> = ids.into_iter().map(EvidenceId::as_str).collect();
    let mut text = ids
        .iter()
        .take(IDS_NAMED_MAX)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > IDS_NAMED_MAX {
        text.push_str(&format!(" and {} more", ids.len() - IDS_NAMED_MAX));
    }
    text
}

pub(crate) fn candidates(state: &TaskState) -> Vec<&EvidenceId> {
    state
        .evidence()
        .iter()
        .filter(|item| item.recorded_status() == EvidenceStatus::Candidate)
        .map(|item| item.id())
        .collect()
}

/// Whether the conflict rules have not run since the evidence last changed.
pub(crate) fn conflicts_outdated(state: &TaskState) -> bool {
    let marks = state.marks();
    version_of(&marks.evidence_changed) > version_of(&marks.conflicts_run)
}

/// Whether no matrix reflects the latest evidence, adjudication and human decision.
pub(crate) fn matrix_outdated(state: &TaskState) -> bool {
    let marks = state.marks();
    let latest = version_of(&marks.evidence_changed)
        .max(version_of(&marks.adjudication_changed))
        .max(version_of(&marks.human_decided));
    marks.matrix_built.is_none() || version_of(&marks.matrix_built) < latest
}

/// Every step due now, in workflow order, with the reason it is due.
pub(crate) fn due(state: &TaskState) -> Vec<(Step, PendingAction)> {
    let Some(task) = state.task() else {
        return vec![(
            Step::Open,
            PendingAction::new(Tool::ResearchOpenTask, "the task has not been opened"),
        )];
    };
    if state.is_closed() {
        return Vec::new();
    }
    let constrained = task.mode == Mode::ToolConstrained;
    [
        search_due(state),
        screening_due(state, constrained),
        conflict_rules_due(state, constrained),
        human_decisions_due(state),
        matrix_due(state, constrained),
        verdict_due(state),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A search, while the task has no evidence.
fn search_due(state: &TaskState) -> Option<(Step, PendingAction)> {
    state.evidence().is_empty().then(|| {
        (
            Step::Search,
            PendingAction::new(
                Tool::RetrievalSearchEvidence,
                "the task has no evidence yet",
            ),
        )
    })
}

/// The screening of the candidates waiting.
fn screening_due(state: &TaskState, constrained: bool) -> Option<(Step, PendingAction)> {
    let waiting = candidates(state);
    if waiting.is_empty() {
        return None;
    }
    let reason = if constrained {
        format!("{} await screening", list_ids(waiting))
    } else {
        format!(
            "{} await screening; candidates do not count until adopted",
            list_ids(waiting)
        )
    };
    Some((
        Step::Screen,
        PendingAction::new(Tool::SynthesisScreenEvidence, reason),
    ))
}

/// The conflict rules, in tool-constrained mode, when the evidence changed since they ran.
fn conflict_rules_due(state: &TaskState, constrained: bool) -> Option<(Step, PendingAction)> {
    (constrained && conflicts_outdated(state)).then(|| {
        (
            Step::ConflictResolution,
            PendingAction::new(
                Tool::EvaluationConflictResolution,
                "the evidence changed since the conflict rules last ran",
            ),
        )
    })
}

/// A person's decision on every conflict that waits for one.
fn human_decisions_due(state: &TaskState) -> Option<(Step, PendingAction)> {
    let pending: Vec<String> = state
        .current_conflicts()
        .filter(|c| c.is_pending())
        .map(|c| c.id().to_string())
        .collect();
    (!pending.is_empty()).then(|| {
        (
            Step::HumanDecision,
            PendingAction::new(
                Tool::EvaluationResolveConflict,
                format!("{} await a human decision", pending.join(", ")),
            ),
        )
    })
}

/// The decision matrix, in tool-constrained mode, when none reflects the latest change.
fn matrix_due(state: &TaskState, constrained: bool) -> Option<(Step, PendingAction)> {
    if !(constrained && matrix_outdated(state)) {
        return None;
    }
    let reason = if state.marks().matrix_built.is_none() {
        "no decision matrix has been built"
    } else {
        "the decision matrix predates the latest change to evidence or adjudications"
    };
    Some((
        Step::Matrix,
        PendingAction::new(Tool::EvaluationBuildDecisionMatrix, reason),
    ))
}

/// A conclusion, when there is none or it is stale; else its explanation, when it has none.
fn verdict_due(state: &TaskState) -> Option<(Step, PendingAction)> {
    let Some(current) = state.current_conclusion() else {
        return Some((
            Step::Conclusion,
            PendingAction::new(
                Tool::EvaluationGenerateConclusion,
                "no conclusion has been issued",
            ),
        ));
    };
    let id = &current.issued.conclusion_id;
    if current.stale_since.is_some() {
        return Some((
            Step::Conclusion,
            PendingAction::new(Tool::EvaluationGenerateConclusion, format!("{id} is stale")),
        ));
    }
    state.explanation_of(id).is_none().then(|| {
        (
            Step::Explanation,
            PendingAction::new(
                Tool::EvaluationExplainReasoning,
                format!("{id} has not been explained"),
            ),
        )
    })
}

/// What a client can do next to move the task on, in workflow order: the steps due now
/// (search while there is no evidence, screening, conflict rules, human decisions, matrix,
/// conclusion, explanation). Empty when the task is closed or fully up to date.
pub fn next_actions(state: &TaskState) -> Vec<PendingAction> {
    due(state).into_iter().map(|(_, action)| action).collect()
}

/// The due steps among those `needed` (the prerequisites of a command), as pending actions.
pub(crate) fn missing(state: &TaskState, needed: &[Step]) -> Vec<PendingAction> {
    due(state)
        .into_iter()
        .filter(|(step, _)| needed.contains(step))
        .map(|(_, action)| action)
        .collect()
}
