//! The rules applied: everything `decide` derives from the state rather than takes from a
//! command. Each function reads only the state, so a replay can call it again on the state
//! before a recorded event and compare ([`crate::recheck`]).

pub(crate) mod adjudicate;
pub(crate) mod conclude;
pub(crate) mod explain;
pub(crate) mod matrix;
pub(crate) mod synthesis;

use chrono::NaiveDate;

use crate::rules::{self, RuleSet, SourceType};

/// The scores recorded with an evidence item.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scores {
    pub(crate) authority: f64,
    pub(crate) reliability: f64,
    pub(crate) age_days: i64,
    pub(crate) recency: f64,
}

pub(crate) fn evidence_scores(
    rules: &RuleSet,
    research_date: NaiveDate,
    source_type: SourceType,
    citation_count: Option<u64>,
    publish_date: NaiveDate,
) -> Scores {
    let authority = rules.authority_of(source_type);
    let age_days = rules::age_days(research_date, publish_date);
    Scores {
        authority,
        reliability: rules::reliability(authority, citation_count),
        age_days,
        recency: rules::recency(age_days, rules.half_life_days),
    }
}

/// Sum in the order given, divided by the count; 0 for none.
pub(crate) fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut sum = 0.0;
    let mut count = 0u64;
    for value in values {
        sum += value;
        count += 1;
    }
    if count == 0 { 0.0 } else { sum / count as f64 }
}

/// Highest value, 0 for none. NaN (only in a damaged log) is skipped.
pub(crate) fn max(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(0.0, f64::max)
}
