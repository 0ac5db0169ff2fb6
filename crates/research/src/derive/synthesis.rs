//! Research synthesis: adopted evidence grouped by scope and stance into viewpoints, in a fixed
//! order so the same evidence always gives the same synthesis.

use crate::derive::{max, mean};
use crate::event::{EvidenceStatus, SynthesisRecorded, Viewpoint};
use crate::ids::SynthesisId;
use crate::rules::Stance;
use crate::state::TaskState;

pub(crate) fn synthesis(state: &TaskState) -> SynthesisRecorded {
    let items = state.evidence_with_status();
    let mut viewpoints = Vec::new();
    for scope in state.scopes() {
        for stance in [Stance::Supports, Stance::Opposes, Stance::Neutral] {
            let group: Vec<_> = items
                .iter()
                .filter(|(item, status)| {
                    matches!(status, EvidenceStatus::Adopted | EvidenceStatus::Overruled)
                        && *item.scope() == scope
                        && item.stance() == Some(stance)
                })
                .collect();
            let Some(first) = group.first() else {
                continue;
            };
            let mut lead = first.0;
            for (item, _) in &group {
                if item.added.relevance > lead.added.relevance {
                    lead = item;
                }
            }
            let mut sources: Vec<String> = Vec::new();
            for (item, _) in &group {
                if !sources.contains(&item.added.source) {
                    sources.push(item.added.source.clone());
                }
            }
            viewpoints.push(Viewpoint {
                scope: scope.clone(),
                stance,
                evidence_ids: group.iter().map(|(i, _)| i.id().clone()).collect(),
                overruled_ids: group
                    .iter()
                    .filter(|(_, s)| *s == EvidenceStatus::Overruled)
                    .map(|(i, _)| i.id().clone())
                    .collect(),
                sources,
                mean_relevance: mean(group.iter().map(|(i, _)| i.added.relevance)),
                max_authority: max(group.iter().map(|(i, _)| i.added.authority)),
                lead_evidence_id: lead.id().clone(),
            });
        }
    }
    SynthesisRecorded {
        synthesis_id: SynthesisId::nth(state.syntheses().len() + 1),
        viewpoints,
    }
}
