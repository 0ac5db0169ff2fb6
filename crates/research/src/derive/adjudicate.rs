//! The conflict rules: within a scope, adopted items on both sides form one conflict, decided by
//! authority, else recency, else left pending for a person.
//!
//! A scope is adjudicated afresh only when its participants changed since its current
//! adjudication (an item entered or left, or changed side); otherwise the standing adjudication
//! and any human decision on it are kept.

use crate::derive::max;
use crate::event::{
    Adjudication, Compared, ConflictsAdjudicated, EvidenceStatus, Participant, Side, Tier,
};
use crate::ids::{ConflictId, SubQuestionId};
use crate::rules::{Stance, Thresholds, reaches};
use crate::state::TaskState;

/// The participants a scope has now: adopted, unretracted items that take a side, in the order
/// they were added.
pub(crate) fn participants(state: &TaskState, scope: &Option<SubQuestionId>) -> Vec<Participant> {
    state
        .evidence()
        .iter()
        .filter(|item| item.scope() == scope)
        .filter(|item| item.recorded_status() == EvidenceStatus::Adopted)
        .filter_map(|item| {
            let side = match item.stance()? {
                Stance::Supports => Side::Supports,
                Stance::Opposes => Side::Opposes,
                Stance::Neutral => return None,
            };
            Some(Participant {
                evidence_id: item.id().clone(),
                side,
                source: item.added.source.clone(),
                publish_date: item.added.publish_date,
                authority: item.added.authority,
            })
        })
        .collect()
}

fn same_members(a: &[Participant], b: &[Participant]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.evidence_id == y.evidence_id && x.side == y.side)
}

/// One run of the conflict rules over every scope of the task.
pub(crate) fn run(state: &TaskState) -> ConflictsAdjudicated {
    let thresholds = match state.task() {
        Some(task) => task.rules.thresholds,
        None => crate::rules::RuleSet::v1().thresholds,
    };
    let mut out = ConflictsAdjudicated {
        adjudications: Vec::new(),
        dissolved: Vec::new(),
        unchanged: Vec::new(),
    };
    let mut next = state.conflicts().len();
    for scope in state.scopes() {
        let members = participants(state, &scope);
        let has_both = members.iter().any(|p| p.side == Side::Supports)
            && members.iter().any(|p| p.side == Side::Opposes);
        let current = state
            .current_conflicts()
            .find(|c| c.adjudication.scope == scope);
        match (has_both, current) {
            (true, Some(current)) if same_members(&current.adjudication.participants, &members) => {
                out.unchanged.push(current.id().clone());
            }
            (true, current) => {
                next += 1;
                out.adjudications.push(adjudicate(
                    &thresholds,
                    ConflictId::nth(next),
                    scope,
                    current.map(|c| c.id().clone()),
                    members,
                ));
            }
            (false, Some(current)) => out.dissolved.push(current.id().clone()),
            (false, None) => {}
        }
    }
    out
}

/// The tiers of `v1` over one scope whose participants hold both sides.
pub(crate) fn adjudicate(
    thresholds: &Thresholds,
    conflict_id: ConflictId,
    scope: Option<SubQuestionId>,
    supersedes: Option<ConflictId>,
    participants: Vec<Participant>,
) -> Adjudication {
    let side = |side: Side| participants.iter().filter(move |p| p.side == side);
    let supports_authority = max(side(Side::Supports).map(|p| p.authority));
    let opposes_authority = max(side(Side::Opposes).map(|p| p.authority));
    let authority_gap = (supports_authority - opposes_authority).abs();
    let supports_latest = side(Side::Supports).map(|p| p.publish_date).max();
    let opposes_latest = side(Side::Opposes).map(|p| p.publish_date).max();
    let (supports_latest, opposes_latest) = match (supports_latest, opposes_latest) {
        (Some(s), Some(o)) => (s, o),
        // Only reachable when a side is empty, which `run` never passes; both dates then
        // default to whichever exists so the record stays well formed.
        (Some(d), None) | (None, Some(d)) => (d, d),
        (None, None) => (chrono::NaiveDate::MIN, chrono::NaiveDate::MIN),
    };
    let recency_gap_days = (supports_latest - opposes_latest).num_days().abs();

    // A gap counts only between unequal values: with a threshold of 0 a tie must not pick a side.
    let (tier, winner) = if supports_authority != opposes_authority
        && reaches(authority_gap, thresholds.authority_gap)
    {
        let winner = if supports_authority > opposes_authority {
            Side::Supports
        } else {
            Side::Opposes
        };
        (Tier::Authority, Some(winner))
    } else if supports_latest != opposes_latest
        && reaches(recency_gap_days as f64, thresholds.recency_gap_days)
    {
        let winner = if supports_latest > opposes_latest {
            Side::Supports
        } else {
            Side::Opposes
        };
        (Tier::Recency, Some(winner))
    } else {
        (Tier::Pending, None)
    };

    Adjudication {
        conflict_id,
        scope,
        supersedes,
        participants,
        tier,
        winner,
        compared: Compared {
            supports_authority,
            opposes_authority,
            authority_gap,
            supports_latest,
            opposes_latest,
            recency_gap_days,
        },
    }
}
