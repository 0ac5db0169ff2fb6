//! The conclusion formula over E, the adopted items that are neither overruled nor retracted:
//! `v1`'s, or `v2`'s, which leaves defaulted dates out of recency (dropping the component when no
//! item is dated, unless a neutral value is set) and asks enough sided evidence of a directional
//! verdict.

use std::collections::BTreeSet;

use crate::derive::mean;
use crate::event::{
    ConclusionIssued, ConclusionV2, EvidenceStatus, ORIGIN_CLIENT, StanceCounts, UsedAdjudication,
    UsedEvidence,
};
use crate::ids::ConclusionId;
use crate::rules::{self, Components, RuleSet, Stance, VerdictRule};
use crate::state::{EvidenceRecord, TaskState};

/// E: the items a conclusion uses, in the order they were added. An adopted item without a
/// stance (only in a damaged log) cannot be counted on any side and is left out.
pub(crate) fn used(state: &TaskState) -> Vec<(&EvidenceRecord, Stance)> {
    state
        .evidence_with_status()
        .into_iter()
        .filter(|(_, status)| *status == EvidenceStatus::Adopted)
        .filter_map(|(item, _)| item.stance().map(|stance| (item, stance)))
        .collect()
}

/// The conclusion the rules give for the state as it is.
pub(crate) fn conclusion(state: &TaskState) -> ConclusionIssued {
    let rules = state
        .task()
        .map(|t| t.rules.clone())
        .unwrap_or_else(RuleSet::v1);
    let used = used(state);

    let mut counts = StanceCounts::default();
    for (_, stance) in &used {
        match stance {
            Stance::Supports => counts.supports += 1,
            Stance::Opposes => counts.opposes += 1,
            Stance::Neutral => counts.neutral += 1,
        }
    }
    let distinct_sources = used
        .iter()
        .map(|(item, _)| item.added.source.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    let tally = Tally {
        used: &used,
        supports: counts.supports as usize,
        opposes: counts.opposes as usize,
        distinct_sources,
        pending: state.current_conflicts().any(|c| c.is_pending()),
    };
    let (components, confidence, rule, v2) = match &rules.v2 {
        None => {
            let (components, confidence, rule) = tally.score_v1(&rules);
            (components, confidence, rule, None)
        }
        Some(params) => {
            let (components, confidence, rule, v2) = tally.score_v2(&rules, params);
            (components, confidence, rule, Some(v2))
        }
    };
    let client_share = client_share(&used);

    ConclusionIssued {
        conclusion_id: ConclusionId::nth(state.conclusions().len() + 1),
        stance: rule.verdict(),
        rule,
        confidence,
        components,
        counts,
        distinct_sources: distinct_sources as u64,
        evidence: used_evidence(&used),
        adjudications: state
            .current_conflicts()
            .map(|c| UsedAdjudication {
                conflict_id: c.id().clone(),
                tier: c.tier(),
                winner: c.winner(),
                resolution: c.resolution(),
            })
            .collect(),
        rules,
        client_share,
        supersedes: state
            .current_conclusion()
            .map(|c| c.issued.conclusion_id.clone()),
        v2,
    }
}

/// The share of the items used that a client added rather than a search found.
fn client_share(used: &[(&EvidenceRecord, Stance)]) -> f64 {
    let from_clients = used
        .iter()
        .filter(|(item, _)| item.added.origin == ORIGIN_CLIENT)
        .count();
    if used.is_empty() {
        0.0
    } else {
        from_clients as f64 / used.len() as f64
    }
}

/// The items used as the conclusion records them.
fn used_evidence(used: &[(&EvidenceRecord, Stance)]) -> Vec<UsedEvidence> {
    used.iter()
        .map(|(item, stance)| UsedEvidence {
            evidence_id: item.id().clone(),
            content_hash: item.added.content_hash,
            stance: *stance,
            source: item.added.source.clone(),
            origin: item.added.origin.clone(),
        })
        .collect()
}

/// The items a conclusion uses, counted: what both rule sets score from.
struct Tally<'a> {
    used: &'a [(&'a EvidenceRecord, Stance)],
    supports: usize,
    opposes: usize,
    distinct_sources: usize,
    pending: bool,
}

impl Tally<'_> {
    /// Rule set `v1`: every item counts in every component.
    fn score_v1(&self, rules: &RuleSet) -> (Components, f64, VerdictRule) {
        let used = self.used;
        let components = Components {
            relevance: mean(used.iter().map(|(item, _)| item.added.relevance)),
            consistency: rules::consistency(self.supports, self.opposes),
            recency: mean(used.iter().map(|(item, _)| item.added.recency)),
            diversity: rules::diversity(self.distinct_sources, rules.thresholds.diversity_sources),
        };
        let confidence = if used.is_empty() {
            0.0
        } else {
            rules::confidence(&rules.weights, &components)
        };
        let rule = rules::verdict_rule(
            &rules.thresholds,
            self.supports,
            self.opposes,
            components.consistency,
            confidence,
            self.pending,
        );
        (components, confidence, rule)
    }

    /// Rule set `v2`: undated items take no part in recency, and a directional verdict needs
    /// enough sided evidence.
    fn score_v2(
        &self,
        rules: &RuleSet,
        params: &rules::v2::V2Parameters,
    ) -> (Components, f64, VerdictRule, ConclusionV2) {
        let used = self.used;
        let dated: Vec<f64> = used
            .iter()
            .filter(|(item, _)| !item.added.publish_date_defaulted)
            .map(|(item, _)| item.added.recency)
            .collect();
        let (recency, recency_measured) = match (dated.is_empty(), params.undated_recency) {
            (false, _) => (mean(dated.iter().copied()), true),
            (true, Some(neutral)) => (neutral, true),
            (true, None) => (0.0, false),
        };
        let components = Components {
            relevance: mean(used.iter().map(|(item, _)| item.added.relevance)),
            consistency: rules::consistency(self.supports, self.opposes),
            recency,
            diversity: rules::diversity(self.distinct_sources, rules.thresholds.diversity_sources),
        };
        let weights_applied = rules::v2::weights_applied(&rules.weights, recency_measured);
        let confidence = if used.is_empty() {
            0.0
        } else {
            rules::v2::confidence(&weights_applied, &components)
        };
        let side_relevance = |side: Stance| {
            let mut sum = 0.0;
            for (item, _) in used.iter().filter(|(_, s)| *s == side) {
                sum += item.added.relevance;
            }
            sum
        };
        let sided = rules::v2::SidedEvidence {
            supports: self.supports,
            opposes: self.opposes,
            supports_relevance: side_relevance(Stance::Supports),
            opposes_relevance: side_relevance(Stance::Opposes),
        };
        let rule = rules::v2::verdict_rule(
            &rules.thresholds,
            params,
            &sided,
            components.consistency,
            confidence,
            self.pending,
        );
        let v2 = ConclusionV2 {
            dated_items: dated.len() as u64,
            undated_items: (used.len() - dated.len()) as u64,
            recency_measured,
            weights_applied,
            supports_relevance: sided.supports_relevance,
            opposes_relevance: sided.opposes_relevance,
        };
        (components, confidence, rule, v2)
    }
}
