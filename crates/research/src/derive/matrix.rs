//! The decision matrix: a row per item with every score, and aggregates per stance over the
//! items a conclusion would use.

use std::collections::BTreeSet;

use crate::derive::{conclude, max, mean};
use crate::event::{DecisionMatrixBuilt, MatrixRow, StanceAggregate};
use crate::ids::MatrixId;
use crate::rules::Stance;
use crate::state::TaskState;

pub(crate) fn matrix(state: &TaskState) -> DecisionMatrixBuilt {
    let rows = state
        .evidence_with_status()
        .into_iter()
        .map(|(item, status)| MatrixRow {
            evidence_id: item.id().clone(),
            source: item.added.source.clone(),
            source_type: item.added.source_type,
            authority: item.added.authority,
            reliability: item.added.reliability,
            relevance: item.added.relevance,
            recency: item.added.recency,
            stance: item.stance(),
            status,
        })
        .collect();
    let used = conclude::used(state);
    let aggregates = [Stance::Supports, Stance::Opposes, Stance::Neutral]
        .into_iter()
        .map(|stance| {
            let items: Vec<_> = used
                .iter()
                .filter(|(_, s)| *s == stance)
                .map(|(item, _)| *item)
                .collect();
            StanceAggregate {
                stance,
                items: items.len() as u64,
                distinct_sources: items
                    .iter()
                    .map(|i| i.added.source.as_str())
                    .collect::<BTreeSet<_>>()
                    .len() as u64,
                mean_relevance: mean(items.iter().map(|i| i.added.relevance)),
                mean_recency: mean(items.iter().map(|i| i.added.recency)),
                mean_reliability: mean(items.iter().map(|i| i.added.reliability)),
                max_authority: max(items.iter().map(|i| i.added.authority)),
            }
        })
        .collect();
    DecisionMatrixBuilt {
        matrix_id: MatrixId::nth(state.matrices().len() + 1),
        rows,
        aggregates,
    }
}
