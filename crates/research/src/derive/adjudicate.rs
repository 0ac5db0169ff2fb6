//! The conflict rules: within a scope, adopted items on both sides form one conflict, decided by
//! authority, else recency, else left pending for a person. Under `v2` only given dates take
//! part in the recency tier, and, when the task enables it, the weight of each side decides what
//! the first two tiers left open.
//!
//! A scope is adjudicated afresh only when its participants changed since its current
//! adjudication (an item entered or left, or changed side); otherwise the standing adjudication
//! and any human decision on it are kept.

use crate::derive::max;
use crate::event::{
    Adjudication, Compared, ComparedV2, ConflictsAdjudicated, EvidenceStatus, Participant, Side,
    Tier,
};
use crate::ids::{ConflictId, SubQuestionId};
use crate::rules::{RuleSet, Stance, Thresholds, V2Parameters, reaches};
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
    let rules = match state.task() {
        Some(task) => task.rules.clone(),
        None => RuleSet::v1(),
    };
    let thresholds = rules.thresholds;
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
                let conflict_id = ConflictId::nth(next);
                let supersedes = current.map(|c| c.id().clone());
                out.adjudications.push(match &rules.v2 {
                    None => adjudicate(&thresholds, conflict_id, scope, supersedes, members),
                    Some(params) => adjudicate_v2(
                        state,
                        &thresholds,
                        params,
                        conflict_id,
                        scope,
                        supersedes,
                        members,
                    ),
                });
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
        v2: None,
    }
}

/// What `v2` compares beyond `v1`: which participants' dates are defaults, each side's latest
/// given date, and each side's Σ authority · relevance, summed in the participants' order.
fn compare_v2(state: &TaskState, participants: &[Participant]) -> ComparedV2 {
    let defaulted = |p: &Participant| {
        state
            .evidence_item(&p.evidence_id)
            .is_none_or(|item| item.added.publish_date_defaulted)
    };
    let relevance = |p: &Participant| {
        state
            .evidence_item(&p.evidence_id)
            .map_or(0.0, |item| item.added.relevance)
    };
    let latest_dated = |side: Side| {
        participants
            .iter()
            .filter(|p| p.side == side && !defaulted(p))
            .map(|p| p.publish_date)
            .max()
    };
    let weight = |side: Side| {
        let mut sum = 0.0;
        for p in participants.iter().filter(|p| p.side == side) {
            sum += p.authority * relevance(p);
        }
        sum
    };
    ComparedV2 {
        undated: participants
            .iter()
            .filter(|p| defaulted(p))
            .map(|p| p.evidence_id.clone())
            .collect(),
        supports_latest_dated: latest_dated(Side::Supports),
        opposes_latest_dated: latest_dated(Side::Opposes),
        supports_weight: weight(Side::Supports),
        opposes_weight: weight(Side::Opposes),
    }
}

/// The weight tier of `v2`: with `side_weight_ratio` set, the side whose weight reaches that
/// multiple of the other's wins; else the conflict is pending.
fn by_weight(v2: &ComparedV2, params: &V2Parameters) -> (Tier, Option<Side>) {
    let Some(ratio) = params.side_weight_ratio else {
        return (Tier::Pending, None);
    };
    let (s, o) = (v2.supports_weight, v2.opposes_weight);
    if s > o && reaches(s, ratio * o) {
        (Tier::Weight, Some(Side::Supports))
    } else if o > s && reaches(o, ratio * s) {
        (Tier::Weight, Some(Side::Opposes))
    } else {
        (Tier::Pending, None)
    }
}

/// The tiers of `v2` over one scope whose participants hold both sides: authority as in `v1`;
/// then recency over given dates only (a side with none cannot win on recency); then, when
/// `side_weight_ratio` is set, the side whose Σ authority · relevance reaches that multiple of
/// the other's; else pending. `compared` keeps `v1`'s meaning for the dates (latest of any kind)
/// except `recency_gap_days`, which is the gap between the latest given dates (0 when a side has
/// none).
fn adjudicate_v2(
    state: &TaskState,
    thresholds: &Thresholds,
    params: &V2Parameters,
    conflict_id: ConflictId,
    scope: Option<SubQuestionId>,
    supersedes: Option<ConflictId>,
    participants: Vec<Participant>,
) -> Adjudication {
    let mut automatic = adjudicate(
        thresholds,
        conflict_id,
        scope,
        supersedes,
        participants.clone(),
    );
    let v2 = compare_v2(state, &participants);
    let (tier, winner) = if automatic.tier == Tier::Authority {
        (automatic.tier, automatic.winner)
    } else {
        let dated = v2.supports_latest_dated.zip(v2.opposes_latest_dated);
        automatic.compared.recency_gap_days = dated.map_or(0, |(s, o)| (s - o).num_days().abs());
        match dated {
            Some((s, o))
                if s != o
                    && reaches(
                        automatic.compared.recency_gap_days as f64,
                        thresholds.recency_gap_days,
                    ) =>
            {
                (
                    Tier::Recency,
                    Some(if s > o { Side::Supports } else { Side::Opposes }),
                )
            }
            _ => by_weight(&v2, params),
        }
    };
    automatic.tier = tier;
    automatic.winner = winner;
    automatic.v2 = Some(v2);
    automatic
}
