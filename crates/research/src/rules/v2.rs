//! Rule set `v2`: the shape of `v1` (the four weighted components, the confidence floor, the
//! adjudication tiers authority → recency → a person) with what feeds it fixed.
//!
//! - **Relevance measures topicality.** It is the IDF-weighted coverage of the content terms
//!   (stop words out, English and Chinese) of the question and of the query that found the item,
//!   mixed by [`V2Parameters::query_weight`] and saturated at [`V2Parameters::coverage_full`]:
//!   a passage seldom holds every term of a long question, and one that holds the weightiest part
//!   of them is on topic. The query's coverage counts at most [`V2Parameters::query_cap`] times
//!   the question's, so the choice of query cannot make an item relevant that holds nothing of
//!   the question. Everything the formula needs is recorded with the item
//!   ([`RelevanceInputs`]), so a replay re-derives it bit for bit.
//! - **Defaulted dates take no part in recency.** An ingest default says nothing about when a
//!   text was written, so such an item is left out of the recency component and of the recency
//!   tier. When no item used is dated the component is not measured: by default it is dropped and
//!   the other three weights are renormalised (the confidence is then their weighted mean over
//!   what was measured), or, when [`V2Parameters::undated_recency`] is set, it takes that neutral
//!   value. Either way a verdict over undated evidence does not move with the research date.
//! - **A directional verdict needs enough sided evidence:** at least
//!   [`V2Parameters::sided_items_min`] items on the winning side whose relevance sums to at least
//!   [`V2Parameters::sided_relevance_min`].
//! - **The weight of each side** (Σ authority · relevance over its items, in the order added)
//!   may decide a conflict that authority and recency left open, when
//!   [`V2Parameters::side_weight_ratio`] is set. It is off by default: on the benchmark it turns
//!   disputed claims into one-sided verdicts (see `docs/rules.md`).
//!
//! Arithmetic is that of `v1`: f64, `libm`, the 1e-9 tolerance of [`super::reaches`], sums in a
//! fixed order.

use serde::{Deserialize, Serialize};

use super::{Components, Thresholds, VerdictRule, Weights, idf, reaches};

/// The name of rule set `v2`.
pub const RULE_SET_V2: &str = "v2";

/// The parameters `v2` adds to those of `v1`, recorded with the task.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct V2Parameters {
    /// Share of the finding query's coverage in an item's relevance, in [0, 1]; the question's
    /// coverage has the rest. An item no search found has the question's coverage alone.
    pub query_weight: f64,
    /// The coverage at which relevance is full, in (0, 1]: relevance is
    /// `min(1, coverage / coverage_full)`.
    pub coverage_full: f64,
    /// Items the winning side needs for a directional verdict (a whole number ≥ 1).
    pub sided_items_min: u64,
    /// Combined relevance the winning side needs for a directional verdict, in [0, 1000].
    pub sided_relevance_min: f64,
    /// Recency taken when no item used is dated, in [0, 1]; none drops the component and
    /// renormalises the other weights.
    pub undated_recency: Option<f64>,
    /// When set (≥ 1), a conflict authority and recency left open goes to the side whose weight
    /// reaches this multiple of the other's; none sends it to a person as `v1` does.
    pub side_weight_ratio: Option<f64>,
    /// When set, in [0, 1000], the finding query's coverage counts at most this multiple of the
    /// question's: `min(cov(query), query_cap · cov(question))`. None leaves it uncapped, as every
    /// task opened before the cap existed was scored; such a task records none, and keeps its
    /// stored bytes (schema version 4 holds the cap, [`crate::codec`]). Left out of the JSON
    /// view when none.
    #[serde(default)]
    pub query_cap: Option<f64>,
}

crate::v2_part::serialize_with_v2_part!(
    V2Parameters,
    "V2Parameters",
    [
        query_weight,
        coverage_full,
        sided_items_min,
        sided_relevance_min,
        undated_recency,
        side_weight_ratio,
    ],
    query_cap
);

impl V2Parameters {
    /// The defaults of `v2`, chosen on one Climate-FEVER selection and checked on another
    /// (`docs/rules.md` gives the figures).
    pub fn defaults() -> Self {
        Self {
            query_weight: 0.5,
            coverage_full: 0.15,
            sided_items_min: 1,
            sided_relevance_min: 0.3,
            undated_recency: None,
            side_weight_ratio: None,
            query_cap: Some(2.0),
        }
    }
}

/// A content term of the question or of the finding query, with what relevance needs of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermInput {
    /// The term, as the corpus's tokenizer gives it.
    pub term: String,
    /// Corpus documents whose text holds it.
    pub doc_freq: u64,
    /// Whether it is a content term of the task question.
    pub in_question: bool,
    /// Whether it is a content term of the query that found the item.
    pub in_query: bool,
    /// Whether the item's full text holds it.
    pub found: bool,
}

/// Everything `v2` relevance is computed from, recorded with the item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelevanceInputs {
    /// Documents in the corpus (`N` of the IDF) when the statistics were read.
    pub corpus_docs: u64,
    /// The distinct content terms: the question's in the order first seen, then the query's
    /// that the question lacks.
    pub terms: Vec<TermInput>,
}

/// IDF-weighted coverage of the terms `member` selects: `Σ idf(t) found / Σ idf(t)`, summed in
/// the recorded order; none selected gives 0.
pub fn coverage(inputs: &RelevanceInputs, member: impl Fn(&TermInput) -> bool) -> (f64, bool) {
    let mut found = 0.0;
    let mut total = 0.0;
    let mut any = false;
    for term in inputs.terms.iter().filter(|t| member(t)) {
        any = true;
        let weight = idf(inputs.corpus_docs, term.doc_freq);
        total += weight;
        if term.found {
            found += weight;
        }
    }
    if total > 0.0 {
        ((found / total).clamp(0.0, 1.0), any)
    } else {
        (0.0, any)
    }
}

/// `v2` relevance: `min(1, max(0, mixed / coverage_full))`, `mixed` as [`mixed_coverage`] gives
/// it.
pub fn topical_relevance(inputs: &RelevanceInputs, params: &V2Parameters) -> f64 {
    let mixed = mixed_coverage(inputs, params);
    if params.coverage_full <= 0.0 {
        return 0.0;
    }
    (mixed / params.coverage_full).clamp(0.0, 1.0)
}

/// The numerator of [`topical_relevance`]: the question's coverage mixed with the query's by
/// `query_weight`, `(1 − query_weight)·cov(question) + query_weight·q`, or the question's alone
/// when no query term is recorded. `q` is the query's coverage, at most `query_cap` times the
/// question's when the task records a cap: `min(cov(query), query_cap·cov(question))`. An item
/// that holds no term of the question thus has 0 whatever the query; with a cap of 0 the query
/// only takes its share away from the question's.
pub fn mixed_coverage(inputs: &RelevanceInputs, params: &V2Parameters) -> f64 {
    let (question, _) = coverage(inputs, |t| t.in_question);
    let (query, has_query) = coverage(inputs, |t| t.in_query);
    if has_query {
        (1.0 - params.query_weight) * question
            + params.query_weight * query_part(query, question, params)
    } else {
        question
    }
}

/// The query's coverage as the mix counts it: capped at `query_cap · question` when a cap is
/// recorded, as it is otherwise.
pub fn query_part(query: f64, question: f64, params: &V2Parameters) -> f64 {
    match params.query_cap {
        Some(cap) => query.min(cap * question),
        None => query,
    }
}

/// The weights a `v2` confidence applies. With recency measured, the task's weights; without,
/// recency's weight is 0 and the other three are divided by their sum (relevance + consistency +
/// diversity, in that order), so the confidence is their weighted mean.
pub fn weights_applied(weights: &Weights, recency_measured: bool) -> Weights {
    if recency_measured {
        return *weights;
    }
    let rest = weights.relevance + weights.consistency + weights.diversity;
    if rest <= 0.0 {
        return Weights {
            relevance: 0.0,
            consistency: 0.0,
            recency: 0.0,
            diversity: 0.0,
        };
    }
    Weights {
        relevance: weights.relevance / rest,
        consistency: weights.consistency / rest,
        recency: 0.0,
        diversity: weights.diversity / rest,
    }
}

/// What the sided-evidence clause of `v2` compares for the larger side.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SidedEvidence {
    /// Items supporting, among those used.
    pub supports: usize,
    /// Items opposing.
    pub opposes: usize,
    /// Relevance of the supporting items, summed in the order added.
    pub supports_relevance: f64,
    /// Relevance of the opposing items.
    pub opposes_relevance: f64,
}

/// The stance rule of `v2`: `v1`'s clauses, with a directional verdict given only when the
/// winning side has at least `sided_items_min` items and combined relevance reaching
/// `sided_relevance_min`; otherwise the evidence is insufficient.
pub fn verdict_rule(
    thresholds: &Thresholds,
    params: &V2Parameters,
    sided: &SidedEvidence,
    consistency: f64,
    confidence: f64,
    pending_conflict: bool,
) -> VerdictRule {
    let enough = |items: usize, relevance: f64| {
        items as u64 >= params.sided_items_min && reaches(relevance, params.sided_relevance_min)
    };
    if sided.supports + sided.opposes == 0 {
        VerdictRule::NoSideTaken
    } else if !reaches(confidence, thresholds.confidence_floor) {
        VerdictRule::BelowConfidenceFloor
    } else if pending_conflict {
        VerdictRule::PendingConflict
    } else if sided.supports > sided.opposes && reaches(consistency, thresholds.consistency) {
        if enough(sided.supports, sided.supports_relevance) {
            VerdictRule::SupportsPrevail
        } else {
            VerdictRule::TooLittleSidedEvidence
        }
    } else if sided.opposes > sided.supports && reaches(consistency, thresholds.consistency) {
        if enough(sided.opposes, sided.opposes_relevance) {
            VerdictRule::OpposesPrevail
        } else {
            VerdictRule::TooLittleSidedEvidence
        }
    } else {
        VerdictRule::Divided
    }
}

/// `v2` confidence: the applied weights times the components, summed in the order relevance,
/// consistency, recency, diversity, kept in [0, 1].
pub fn confidence(applied: &Weights, components: &Components) -> f64 {
    super::confidence(applied, components)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(t: &str, doc_freq: u64, q: bool, w: bool, found: bool) -> TermInput {
        TermInput {
            term: t.into(),
            doc_freq,
            in_question: q,
            in_query: w,
            found,
        }
    }

    #[test]
    fn relevance_mixes_question_and_query_coverage_and_saturates() {
        let params = V2Parameters::defaults();
        // An empty corpus weighs every term ln 2: plain coverage.
        let inputs = RelevanceInputs {
            corpus_docs: 0,
            terms: vec![
                term("lithium", 0, true, true, true),
                term("demand", 0, true, false, false),
                term("supply", 0, true, false, false),
                term("battery", 0, false, true, true),
            ],
        };
        // question 1/3, query 2/2: (0.5·1/3 + 0.5·1) / 0.5 = 4/3, capped at 1.
        assert_eq!(topical_relevance(&inputs, &params), 1.0);
        let half = V2Parameters {
            coverage_full: 1.0,
            query_cap: None,
            ..params
        };
        let ln2 = libm::log(2.0);
        let question = ln2 / (ln2 + ln2 + ln2);
        let expected = 0.5 * question + 0.5 * 1.0;
        assert_eq!(topical_relevance(&inputs, &half), expected);
        // Capped at twice the question's coverage, the query counts 2/3, not 1.
        let capped = V2Parameters {
            query_cap: Some(2.0),
            ..half
        };
        let expected = 0.5 * question + 0.5 * (2.0 * question);
        assert_eq!(topical_relevance(&inputs, &capped), expected);
        let no_query = RelevanceInputs {
            corpus_docs: 0,
            terms: vec![
                term("lithium", 0, true, false, true),
                term("demand", 0, true, false, false),
            ],
        };
        assert_eq!(topical_relevance(&no_query, &half), 0.5);
        assert_eq!(topical_relevance(&no_query, &params), 1.0);
        let nothing = RelevanceInputs {
            corpus_docs: 10,
            terms: vec![],
        };
        assert_eq!(topical_relevance(&nothing, &params), 0.0);
    }

    #[test]
    fn dropped_recency_renormalises_the_other_weights() {
        let w = super::super::RuleSet::v1().weights;
        assert_eq!(weights_applied(&w, true), w);
        let applied = weights_applied(&w, false);
        assert_eq!(applied.recency, 0.0);
        let rest = 0.4 + 0.3 + 0.1;
        assert_eq!(applied.relevance, 0.4 / rest);
        assert_eq!(applied.consistency, 0.3 / rest);
        assert_eq!(applied.diversity, 0.1 / rest);
    }

    #[test]
    fn a_directional_verdict_needs_enough_sided_evidence() {
        let th = super::super::RuleSet::v1().thresholds;
        let p = V2Parameters::defaults();
        let sided = |s, o, sr, or| SidedEvidence {
            supports: s,
            opposes: o,
            supports_relevance: sr,
            opposes_relevance: or,
        };
        assert_eq!(
            verdict_rule(&th, &p, &sided(1, 0, 0.036, 0.0), 1.0, 0.9, false),
            VerdictRule::TooLittleSidedEvidence
        );
        assert_eq!(
            verdict_rule(&th, &p, &sided(1, 0, 0.3 - 5e-10, 0.0), 1.0, 0.9, false),
            VerdictRule::SupportsPrevail
        );
        assert_eq!(
            verdict_rule(&th, &p, &sided(0, 2, 0.0, 0.29), 1.0, 0.9, false),
            VerdictRule::TooLittleSidedEvidence
        );
        assert_eq!(
            verdict_rule(&th, &p, &sided(0, 2, 0.0, 0.31), 1.0, 0.9, false),
            VerdictRule::OpposesPrevail
        );
        assert_eq!(
            verdict_rule(&th, &p, &sided(0, 0, 0.0, 0.0), 0.0, 0.9, false),
            VerdictRule::NoSideTaken
        );
        assert_eq!(
            verdict_rule(&th, &p, &sided(1, 1, 1.0, 1.0), 0.5, 0.9, false),
            VerdictRule::Divided
        );
    }
}
