//! Rule sets `v1` and `v2`: their parameters, how a task may override them, and the formulas.
//! `v1`'s formulas are here; what `v2` adds is in [`v2`], its stop words in [`stopwords`].
//!
//! A task records the full parameter set when it is opened, so replaying it never depends on the
//! defaults of whatever build reads it later. Every formula here is a pure function of its
//! arguments; `pow`, `log10` and `ln` come from `libm` so that every platform computes the same
//! bits, and sums run in a fixed order.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::refusal::Refusal;

pub mod stopwords;
pub mod v2;

pub use v2::{RULE_SET_V2, RelevanceInputs, TermInput, V2Parameters};

/// The name of the first rule set.
pub const RULE_SET_V1: &str = "v1";

/// The rule set front ends give a new task whose client names none: `v2`, which follows the
/// evidence better than `v1` on the Climate-FEVER benchmark (`docs/rules.md`). The domain reads a
/// command that names none as `v1`, what such a command meant before `v2` existed, so a command
/// never changes meaning with the build that decides it.
pub const RULE_SET_DEFAULT: &str = RULE_SET_V2;

/// A value reaches a threshold `t` when it is at least `t - TOLERANCE`, so that sums which are
/// mathematically equal to a threshold but land a few ulps below it in f64 still count.
pub const TOLERANCE: f64 = 1e-9;

/// Whether `value` reaches `threshold` under the rule set's tolerance.
pub fn reaches(value: f64, threshold: f64) -> bool {
    value >= threshold - TOLERANCE
}

/// Kind of publisher; decides an item's authority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceType {
    /// Measurements or records at first hand.
    PrimaryData,
    /// A government publication.
    Government,
    /// A peer-reviewed paper.
    AcademicPaper,
    /// A report of an institution.
    InstitutionalReport,
    /// Original news reporting.
    NewsOriginal,
    /// News reprinted from elsewhere.
    NewsReprint,
    /// A blog post.
    Blog,
    /// A social media post.
    Social,
    /// Anything else.
    Other,
}

impl SourceType {
    /// Every source type, in the order of the authority table.
    pub const ALL: [SourceType; 9] = [
        SourceType::PrimaryData,
        SourceType::Government,
        SourceType::AcademicPaper,
        SourceType::InstitutionalReport,
        SourceType::NewsOriginal,
        SourceType::NewsReprint,
        SourceType::Blog,
        SourceType::Social,
        SourceType::Other,
    ];

    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            SourceType::PrimaryData => "primary_data",
            SourceType::Government => "government",
            SourceType::AcademicPaper => "academic_paper",
            SourceType::InstitutionalReport => "institutional_report",
            SourceType::NewsOriginal => "news_original",
            SourceType::NewsReprint => "news_reprint",
            SourceType::Blog => "blog",
            SourceType::Social => "social",
            SourceType::Other => "other",
        }
    }
}

impl fmt::Display for SourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not in a closed vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown name `{0}`")]
pub struct UnknownName(pub String);

impl FromStr for SourceType {
    type Err = UnknownName;
    fn from_str(text: &str) -> Result<Self, UnknownName> {
        let wanted = text.trim();
        SourceType::ALL
            .into_iter()
            .find(|t| t.name() == wanted)
            .ok_or_else(|| UnknownName(text.to_string()))
    }
}

/// An item's position toward the main question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stance {
    /// It supports the question's claim.
    Supports,
    /// It opposes it.
    Opposes,
    /// It takes no side.
    Neutral,
}

impl Stance {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Stance::Supports => "supports",
            Stance::Opposes => "opposes",
            Stance::Neutral => "neutral",
        }
    }
}

impl fmt::Display for Stance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Stance {
    type Err = UnknownName;
    fn from_str(text: &str) -> Result<Self, UnknownName> {
        match text.trim() {
            "supports" => Ok(Stance::Supports),
            "opposes" => Ok(Stance::Opposes),
            "neutral" => Ok(Stance::Neutral),
            _ => Err(UnknownName(text.to_string())),
        }
    }
}

/// How strictly the workflow is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Every step must go through the tools in order; refusals name the steps still due.
    #[default]
    ToolConstrained,
    /// Order is free; generating a conclusion runs the conflict rules and builds the matrix
    /// itself where the evidence changed, so the verdict still follows the rules.
    AgentLed,
}

impl Mode {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ToolConstrained => "tool_constrained",
            Mode::AgentLed => "agent_led",
        }
    }
}

impl FromStr for Mode {
    type Err = UnknownName;
    fn from_str(text: &str) -> Result<Self, UnknownName> {
        match text.trim() {
            "tool_constrained" => Ok(Mode::ToolConstrained),
            "agent_led" => Ok(Mode::AgentLed),
            _ => Err(UnknownName(text.to_string())),
        }
    }
}

/// Weights of the four confidence components; they sum to 1 within [`TOLERANCE`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// Weight of mean relevance.
    pub relevance: f64,
    /// Weight of consistency.
    pub consistency: f64,
    /// Weight of mean recency.
    pub recency: f64,
    /// Weight of source diversity.
    pub diversity: f64,
}

/// Authority of each source type, in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AuthorityTable {
    /// `primary_data`.
    pub primary_data: f64,
    /// `government`.
    pub government: f64,
    /// `academic_paper`.
    pub academic_paper: f64,
    /// `institutional_report`.
    pub institutional_report: f64,
    /// `news_original`.
    pub news_original: f64,
    /// `news_reprint`.
    pub news_reprint: f64,
    /// `blog`.
    pub blog: f64,
    /// `social`.
    pub social: f64,
    /// `other`.
    pub other: f64,
}

impl AuthorityTable {
    /// The authority of a source type.
    pub fn get(&self, source_type: SourceType) -> f64 {
        match source_type {
            SourceType::PrimaryData => self.primary_data,
            SourceType::Government => self.government,
            SourceType::AcademicPaper => self.academic_paper,
            SourceType::InstitutionalReport => self.institutional_report,
            SourceType::NewsOriginal => self.news_original,
            SourceType::NewsReprint => self.news_reprint,
            SourceType::Blog => self.blog,
            SourceType::Social => self.social,
            SourceType::Other => self.other,
        }
    }

    fn set(&mut self, source_type: SourceType, value: f64) {
        let slot = match source_type {
            SourceType::PrimaryData => &mut self.primary_data,
            SourceType::Government => &mut self.government,
            SourceType::AcademicPaper => &mut self.academic_paper,
            SourceType::InstitutionalReport => &mut self.institutional_report,
            SourceType::NewsOriginal => &mut self.news_original,
            SourceType::NewsReprint => &mut self.news_reprint,
            SourceType::Blog => &mut self.blog,
            SourceType::Social => &mut self.social,
            SourceType::Other => &mut self.other,
        };
        *slot = value;
    }
}

/// The thresholds of adjudication and verdict.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// An authority gap reaching this wins a conflict.
    pub authority_gap: f64,
    /// A gap between the latest publish dates of both sides reaching this many days wins.
    pub recency_gap_days: f64,
    /// Consistency a side needs for a supportive or opposing verdict.
    pub consistency: f64,
    /// Below this confidence the evidence is insufficient.
    pub confidence_floor: f64,
    /// Distinct sources that give full diversity.
    pub diversity_sources: f64,
}

/// The full parameter set of a task, recorded verbatim when it is opened.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RuleSet {
    /// Name of the rule set: `v1`.
    pub id: String,
    /// Confidence weights.
    pub weights: Weights,
    /// Half-life of an item's recency (days).
    pub half_life_days: f64,
    /// Authority per source type.
    pub authority: AuthorityTable,
    /// Adjudication and verdict thresholds.
    pub thresholds: Thresholds,
    /// What `v2` adds; none for `v1`. Left out of the JSON view when none, so a `v1` task reads
    /// as it always did; the stored form writes it only in schema version 2 or later
    /// ([`crate::codec`]).
    #[serde(default)]
    pub v2: Option<V2Parameters>,
}

crate::v2_part::serialize_with_v2_part!(
    RuleSet,
    "RuleSet",
    [id, weights, half_life_days, authority, thresholds],
    v2
);

impl Default for RuleSet {
    fn default() -> Self {
        Self::v1()
    }
}

impl RuleSet {
    /// The parameters of `v1` as SPEC §4 states them.
    pub fn v1() -> Self {
        Self {
            id: RULE_SET_V1.to_string(),
            weights: Weights {
                relevance: 0.4,
                consistency: 0.3,
                recency: 0.2,
                diversity: 0.1,
            },
            half_life_days: 365.0,
            authority: AuthorityTable {
                primary_data: 1.00,
                government: 0.95,
                academic_paper: 0.90,
                institutional_report: 0.85,
                news_original: 0.60,
                news_reprint: 0.40,
                blog: 0.30,
                social: 0.20,
                other: 0.10,
            },
            thresholds: Thresholds {
                authority_gap: 0.15,
                recency_gap_days: 30.0,
                consistency: 2.0 / 3.0,
                confidence_floor: 0.5,
                diversity_sources: 3.0,
            },
            v2: None,
        }
    }

    /// The parameters of `v2`: those of `v1` and [`V2Parameters::defaults`].
    pub fn v2() -> Self {
        Self {
            id: RULE_SET_V2.to_string(),
            v2: Some(V2Parameters::defaults()),
            ..Self::v1()
        }
    }

    /// The rule set of that name with its defaults.
    pub fn named(name: &str) -> Result<Self, Refusal> {
        match name.trim() {
            RULE_SET_V1 => Ok(Self::v1()),
            RULE_SET_V2 => Ok(Self::v2()),
            other => Err(Refusal::invalid(
                "rules.rule_set",
                format!(
                    "unknown rule set `{}`; known: v1, v2",
                    crate::text::shorten(other, 16)
                ),
            )),
        }
    }

    /// The rule set the overrides name (`v1` when they name none) with the overrides applied, or
    /// the first override that is out of range or does not belong to it.
    pub fn with_overrides(overrides: &RulesOverride) -> Result<Self, Refusal> {
        let mut rules = Self::named(overrides.rule_set.as_deref().unwrap_or(RULE_SET_V1))?;
        if let Some(weights) = overrides.weights {
            rules.weights = weights;
        }
        if let Some(half_life) = overrides.half_life_days {
            rules.half_life_days = half_life;
        }
        for (name, value) in &overrides.authority {
            let source_type: SourceType = name.parse().map_err(|_| {
                Refusal::invalid(
                    format!("rules.authority.{name}"),
                    format!(
                        "unknown source type; known: {}",
                        SourceType::ALL.map(SourceType::name).join(", ")
                    ),
                )
            })?;
            rules.authority.set(source_type, *value);
        }
        let t = &overrides.thresholds;
        let th = &mut rules.thresholds;
        th.authority_gap = t.authority_gap.unwrap_or(th.authority_gap);
        th.recency_gap_days = t.recency_gap_days.unwrap_or(th.recency_gap_days);
        th.consistency = t.consistency.unwrap_or(th.consistency);
        th.confidence_floor = t.confidence_floor.unwrap_or(th.confidence_floor);
        th.diversity_sources = t.diversity_sources.unwrap_or(th.diversity_sources);
        match &mut rules.v2 {
            Some(p) => apply_v2_overrides(p, overrides),
            None => refuse_v2_overrides(overrides, &rules.id)?,
        }
        rules.validate()?;
        Ok(rules)
    }

    /// Checks every parameter; the refusal names the first field out of range.
    pub fn validate(&self) -> Result<(), Refusal> {
        let unit = |field: &str, value: f64| -> Result<(), Refusal> {
            if !value.is_finite() || !(0.0..=1.0).contains(&value) {
                return Err(Refusal::invalid(
                    field,
                    format!("must be a finite number in [0, 1], got {value}"),
                ));
            }
            Ok(())
        };
        let w = &self.weights;
        unit("rules.weights.relevance", w.relevance)?;
        unit("rules.weights.consistency", w.consistency)?;
        unit("rules.weights.recency", w.recency)?;
        unit("rules.weights.diversity", w.diversity)?;
        let sum = w.relevance + w.consistency + w.recency + w.diversity;
        if (sum - 1.0).abs() > TOLERANCE {
            return Err(Refusal::invalid(
                "rules.weights",
                format!("weights must sum to 1 within 1e-9, they sum to {sum}"),
            ));
        }
        if !self.half_life_days.is_finite() || self.half_life_days <= 0.0 {
            return Err(Refusal::invalid(
                "rules.half_life_days",
                format!(
                    "must be a positive finite number of days, got {}",
                    self.half_life_days
                ),
            ));
        }
        for source_type in SourceType::ALL {
            unit(
                &format!("rules.authority.{}", source_type.name()),
                self.authority.get(source_type),
            )?;
        }
        let th = &self.thresholds;
        unit("rules.thresholds.authority_gap", th.authority_gap)?;
        unit("rules.thresholds.consistency", th.consistency)?;
        unit("rules.thresholds.confidence_floor", th.confidence_floor)?;
        whole(
            "rules.thresholds.recency_gap_days",
            th.recency_gap_days,
            0.0,
            36_500.0,
        )?;
        whole(
            "rules.thresholds.diversity_sources",
            th.diversity_sources,
            1.0,
            1_000.0,
        )?;
        match (self.id.as_str(), &self.v2) {
            (RULE_SET_V1, None) => Ok(()),
            (RULE_SET_V2, Some(p)) => validate_v2(p),
            (RULE_SET_V1 | RULE_SET_V2, _) => Err(Refusal::invalid(
                "rules.v2",
                format!("rule set {} does not have these parameters", self.id),
            )),
            _ => Err(Refusal::invalid(
                "rules.id",
                format!("unknown rule set `{}`", self.id),
            )),
        }
    }

    /// Whether these are the rules of `v2`.
    pub fn is_v2(&self) -> bool {
        self.v2.is_some()
    }

    /// Authority of a source type under these rules.
    pub fn authority_of(&self, source_type: SourceType) -> f64 {
        self.authority.get(source_type)
    }
}

/// Applies the overrides of `v2`'s own parameters; absent ones keep what `p` holds.
fn apply_v2_overrides(p: &mut V2Parameters, overrides: &RulesOverride) {
    let t = &overrides.thresholds;
    p.sided_items_min = t.sided_items_min.unwrap_or(p.sided_items_min);
    p.sided_relevance_min = t.sided_relevance_min.unwrap_or(p.sided_relevance_min);
    let r = &overrides.relevance;
    p.query_weight = r.query_weight.unwrap_or(p.query_weight);
    p.coverage_full = r.coverage_full.unwrap_or(p.coverage_full);
    if r.query_cap.is_some() {
        p.query_cap = r.query_cap;
    }
    if overrides.undated_recency.is_some() {
        p.undated_recency = overrides.undated_recency;
    }
    if overrides.side_weight_ratio.is_some() {
        p.side_weight_ratio = overrides.side_weight_ratio;
    }
}

/// Refuses, naming the first, a parameter only `v2` has given for the rule set `id`, which has
/// none of them.
fn refuse_v2_overrides(overrides: &RulesOverride, id: &str) -> Result<(), Refusal> {
    let t = &overrides.thresholds;
    let r = &overrides.relevance;
    let only_v2 = [
        (
            "rules.thresholds.sided_items_min",
            t.sided_items_min.is_some(),
        ),
        (
            "rules.thresholds.sided_relevance_min",
            t.sided_relevance_min.is_some(),
        ),
        ("rules.relevance.query_weight", r.query_weight.is_some()),
        ("rules.relevance.coverage_full", r.coverage_full.is_some()),
        ("rules.relevance.query_cap", r.query_cap.is_some()),
        ("rules.undated_recency", overrides.undated_recency.is_some()),
        (
            "rules.side_weight_ratio",
            overrides.side_weight_ratio.is_some(),
        ),
    ];
    match only_v2.into_iter().find(|(_, given)| *given) {
        Some((field, _)) => Err(Refusal::invalid(
            field,
            format!("only rule set v2 has this parameter; this task uses {id}"),
        )),
        None => Ok(()),
    }
}

fn validate_v2(p: &V2Parameters) -> Result<(), Refusal> {
    let unit = |field: &str, value: f64| -> Result<(), Refusal> {
        if !value.is_finite() || !(0.0..=1.0).contains(&value) {
            return Err(Refusal::invalid(
                field,
                format!("must be a finite number in [0, 1], got {value}"),
            ));
        }
        Ok(())
    };
    unit("rules.relevance.query_weight", p.query_weight)?;
    unit("rules.relevance.coverage_full", p.coverage_full)?;
    if p.coverage_full <= 0.0 {
        return Err(Refusal::invalid(
            "rules.relevance.coverage_full",
            "must be above 0: relevance divides by it",
        ));
    }
    if !(1..=1_000).contains(&p.sided_items_min) {
        return Err(Refusal::invalid(
            "rules.thresholds.sided_items_min",
            format!(
                "must be a whole number in [1, 1000], got {}",
                p.sided_items_min
            ),
        ));
    }
    if !p.sided_relevance_min.is_finite() || !(0.0..=1_000.0).contains(&p.sided_relevance_min) {
        return Err(Refusal::invalid(
            "rules.thresholds.sided_relevance_min",
            format!(
                "must be a finite number in [0, 1000], got {}",
                p.sided_relevance_min
            ),
        ));
    }
    if let Some(cap) = p.query_cap
        && (!cap.is_finite() || !(0.0..=1_000.0).contains(&cap))
    {
        return Err(Refusal::invalid(
            "rules.relevance.query_cap",
            format!("must be a finite number in [0, 1000], got {cap}"),
        ));
    }
    if let Some(value) = p.undated_recency {
        unit("rules.undated_recency", value)?;
    }
    if let Some(ratio) = p.side_weight_ratio
        && (!ratio.is_finite() || !(1.0..=1_000.0).contains(&ratio))
    {
        return Err(Refusal::invalid(
            "rules.side_weight_ratio",
            format!("must be a finite number in [1, 1000], got {ratio}"),
        ));
    }
    Ok(())
}

fn whole(field: &str, value: f64, min: f64, max: f64) -> Result<(), Refusal> {
    if !value.is_finite() || value.fract() != 0.0 || value < min || value > max {
        return Err(Refusal::invalid(
            field,
            format!("must be a whole number in [{min}, {max}], got {value}"),
        ));
    }
    Ok(())
}

/// Parameters a task may override when it is opened (SPEC §10 `rules`). Absent parts keep the
/// defaults of the rule set chosen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesOverride {
    /// `v1` or `v2`; `v1` when absent (front ends fill in [`RULE_SET_DEFAULT`]).
    pub rule_set: Option<String>,
    /// All four weights together, since they must sum to 1.
    pub weights: Option<Weights>,
    /// Recency half-life (days).
    pub half_life_days: Option<f64>,
    /// Authority of some source types, by name.
    pub authority: BTreeMap<String, f64>,
    /// Some thresholds.
    pub thresholds: ThresholdsOverride,
    /// `v2` only: the relevance formula's parameters.
    pub relevance: RelevanceOverride,
    /// `v2` only: see [`V2Parameters::undated_recency`].
    pub undated_recency: Option<f64>,
    /// `v2` only: see [`V2Parameters::side_weight_ratio`].
    pub side_weight_ratio: Option<f64>,
}

/// `v2` relevance parameters a task may override.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelevanceOverride {
    /// See [`V2Parameters::query_weight`].
    pub query_weight: Option<f64>,
    /// See [`V2Parameters::coverage_full`].
    pub coverage_full: Option<f64>,
    /// See [`V2Parameters::query_cap`].
    pub query_cap: Option<f64>,
}

/// Thresholds a task may override; absent ones keep `v1`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThresholdsOverride {
    /// See [`Thresholds::authority_gap`].
    pub authority_gap: Option<f64>,
    /// See [`Thresholds::recency_gap_days`].
    pub recency_gap_days: Option<f64>,
    /// See [`Thresholds::consistency`].
    pub consistency: Option<f64>,
    /// See [`Thresholds::confidence_floor`].
    pub confidence_floor: Option<f64>,
    /// See [`Thresholds::diversity_sources`].
    pub diversity_sources: Option<f64>,
    /// `v2` only: see [`V2Parameters::sided_items_min`].
    pub sided_items_min: Option<u64>,
    /// `v2` only: see [`V2Parameters::sided_relevance_min`].
    pub sided_relevance_min: Option<f64>,
}

/// Reliability pre-score, which orders candidates and never enters the verdict:
/// `min(1, authority + 0.1 · min(1, log10(1 + citation_count) / 3))`. An unknown citation
/// count counts as none.
pub fn reliability(authority: f64, citation_count: Option<u64>) -> f64 {
    // u64 → f64 rounds above 2^53; the rounding is the same on every platform.
    let citations = citation_count.unwrap_or(0) as f64;
    let citation_bonus = (libm::log10(1.0 + citations) / 3.0).min(1.0);
    (authority + 0.1 * citation_bonus).min(1.0)
}

/// Whole days from `publish_date` to `research_date`, never negative: an item published after
/// the research date is as fresh as one published on it.
pub fn age_days(research_date: NaiveDate, publish_date: NaiveDate) -> i64 {
    (research_date - publish_date).num_days().max(0)
}

/// Recency of an item: `0.5 ^ (age_days / half_life_days)`.
pub fn recency(age_days: i64, half_life_days: f64) -> f64 {
    libm::pow(0.5, age_days as f64 / half_life_days)
}

/// BM25's inverse document frequency `ln(1 + (N − df + 0.5) / (df + 0.5))`. A document frequency
/// above `N` (a stale count) is taken as `N`.
pub fn idf(corpus_docs: u64, doc_freq: u64) -> f64 {
    let n = corpus_docs as f64;
    let df = doc_freq.min(corpus_docs) as f64;
    libm::log(1.0 + (n - df + 0.5) / (df + 0.5))
}

/// A term of the task question, with the number of corpus documents that contain it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuestionTerm<'a> {
    /// The term as the corpus's tokenizer produced it.
    pub term: &'a str,
    /// Documents of the corpus containing it.
    pub doc_freq: u64,
}

/// Relevance of a text to the question when neither the source nor the client scored it:
/// the IDF-weighted share of the question's distinct terms found in the text,
/// `Σ idf(t) over those found / Σ idf(t) over all`. Terms are tokens the retrieval side produced
/// with the corpus's own tokenizer; repeated question terms count once, in the order first seen.
/// No question terms give 0. An empty corpus gives every term `ln 2`: plain coverage.
pub fn idf_coverage(
    question_terms: &[QuestionTerm<'_>],
    text_terms: &[&str],
    corpus_docs: u64,
) -> f64 {
    let mut seen: Vec<&str> = Vec::new();
    let mut found = 0.0;
    let mut total = 0.0;
    for term in question_terms {
        if seen.contains(&term.term) {
            continue;
        }
        seen.push(term.term);
        let weight = idf(corpus_docs, term.doc_freq);
        total += weight;
        if text_terms.contains(&term.term) {
            found += weight;
        }
    }
    if total > 0.0 {
        (found / total).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// The four components of a conclusion, each in [0, 1], unrounded.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Components {
    /// Mean relevance of the evidence used.
    pub relevance: f64,
    /// Share of the larger side among the items that take one.
    pub consistency: f64,
    /// Mean recency of the evidence used.
    pub recency: f64,
    /// Distinct sources over the number that gives full diversity, at most 1.
    pub diversity: f64,
}

/// `relevance·w + consistency·w + recency·w + diversity·w`, summed in that order, kept in
/// [0, 1] (weights may sum to 1 + 1e-9).
pub fn confidence(weights: &Weights, components: &Components) -> f64 {
    let sum = weights.relevance * components.relevance
        + weights.consistency * components.consistency
        + weights.recency * components.recency
        + weights.diversity * components.diversity;
    sum.clamp(0.0, 1.0)
}

/// `min(1, distinct / full)`.
pub fn diversity(distinct_sources: usize, full: f64) -> f64 {
    if full <= 0.0 {
        return 1.0;
    }
    (distinct_sources as f64 / full).min(1.0)
}

/// `max(#supports, #opposes) / #(supports + opposes)`, 0 when no item takes a side.
pub fn consistency(supports: usize, opposes: usize) -> f64 {
    let sided = supports + opposes;
    if sided == 0 {
        0.0
    } else {
        supports.max(opposes) as f64 / sided as f64
    }
}

/// The verdict of a conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The evidence supports the question's claim.
    Supportive,
    /// The evidence opposes it.
    Opposing,
    /// The evidence is divided, or a conflict awaits a person.
    Uncertain,
    /// Too little evidence, or none that takes a side.
    EvidenceInsufficient,
}

impl Verdict {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Supportive => "supportive",
            Verdict::Opposing => "opposing",
            Verdict::Uncertain => "uncertain",
            Verdict::EvidenceInsufficient => "evidence_insufficient",
        }
    }
}

/// Which clause of the stance rule decided the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictRule {
    /// No item used takes a side (none at all, or all neutral).
    NoSideTaken,
    /// Confidence did not reach the floor.
    BelowConfidenceFloor,
    /// A conflict awaits a person.
    PendingConflict,
    /// More items support, and consistency reaches its threshold.
    SupportsPrevail,
    /// More items oppose, and consistency reaches its threshold.
    OpposesPrevail,
    /// Neither side prevails clearly.
    Divided,
    /// `v2`: the larger side prevails but has too few items or too little combined relevance.
    TooLittleSidedEvidence,
}

impl VerdictRule {
    /// The verdict this clause gives.
    pub fn verdict(self) -> Verdict {
        match self {
            VerdictRule::NoSideTaken
            | VerdictRule::BelowConfidenceFloor
            | VerdictRule::TooLittleSidedEvidence => Verdict::EvidenceInsufficient,
            VerdictRule::PendingConflict | VerdictRule::Divided => Verdict::Uncertain,
            VerdictRule::SupportsPrevail => Verdict::Supportive,
            VerdictRule::OpposesPrevail => Verdict::Opposing,
        }
    }
}

/// The stance rule of `v1`, clause by clause in the order SPEC §4 gives them.
pub fn verdict_rule(
    thresholds: &Thresholds,
    supports: usize,
    opposes: usize,
    consistency: f64,
    confidence: f64,
    pending_conflict: bool,
) -> VerdictRule {
    if supports + opposes == 0 {
        VerdictRule::NoSideTaken
    } else if !reaches(confidence, thresholds.confidence_floor) {
        VerdictRule::BelowConfidenceFloor
    } else if pending_conflict {
        VerdictRule::PendingConflict
    } else if supports > opposes && reaches(consistency, thresholds.consistency) {
        VerdictRule::SupportsPrevail
    } else if opposes > supports && reaches(consistency, thresholds.consistency) {
        VerdictRule::OpposesPrevail
    } else {
        VerdictRule::Divided
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn the_spec_sum_reaches_one_half() {
        let components = Components {
            relevance: 0.5,
            consistency: 0.5,
            recency: 0.5,
            diversity: 0.5,
        };
        let c = confidence(&RuleSet::v1().weights, &components);
        assert_eq!(c, 0.49999999999999994);
        assert!(c < 0.5);
        assert!(reaches(c, 0.5));
        assert!(!reaches(0.5 - 2e-9, 0.5));
    }

    #[test]
    fn authority_gap_of_government_over_institutional_report_is_a_float_below_the_threshold() {
        let gap: f64 = 0.95 - 0.80;
        assert!(gap < 0.15, "0.95 - 0.80 is {gap} in f64");
        assert!(reaches(gap, 0.15));
    }

    #[test]
    fn reliability_adds_at_most_a_tenth_for_citations() {
        assert_eq!(reliability(0.3, None), 0.3);
        assert_eq!(reliability(0.3, Some(0)), 0.3);
        // log10(1000) / 3 = 1: the full bonus.
        assert_eq!(reliability(0.3, Some(999)), 0.3 + 0.1);
        assert_eq!(reliability(0.3, Some(u64::MAX)), 0.3 + 0.1);
        assert_eq!(reliability(0.95, Some(999)), 1.0);
        let r = reliability(0.6, Some(9));
        assert_eq!(r, 0.6 + 0.1 * (1.0 / 3.0));
    }

    #[test]
    fn recency_halves_over_one_half_life() {
        assert_eq!(recency(0, 365.0), 1.0);
        assert_eq!(recency(365, 365.0), 0.5);
        assert_eq!(recency(730, 365.0), 0.25);
        assert_eq!(age_days(date("2025-01-01"), date("2024-01-01")), 366);
        assert_eq!(age_days(date("2024-01-01"), date("2025-01-01")), 0);
    }

    #[test]
    fn idf_coverage_weights_rare_terms_and_empty_corpus_is_plain_coverage() {
        let terms = [
            QuestionTerm {
                term: "lithium",
                doc_freq: 0,
            },
            QuestionTerm {
                term: "demand",
                doc_freq: 0,
            },
            QuestionTerm {
                term: "lithium",
                doc_freq: 0,
            },
        ];
        assert_eq!(idf(0, 0), libm::log(2.0));
        assert_eq!(idf_coverage(&terms, &["lithium"], 0), 0.5);
        assert_eq!(idf_coverage(&terms, &["lithium", "demand"], 0), 1.0);
        assert_eq!(idf_coverage(&[], &["lithium"], 0), 0.0);
        let weighted = [
            QuestionTerm {
                term: "rare",
                doc_freq: 1,
            },
            QuestionTerm {
                term: "the",
                doc_freq: 99,
            },
        ];
        let coverage = idf_coverage(&weighted, &["rare"], 100);
        assert!(coverage > 0.9 && coverage < 1.0, "{coverage}");
        // A document frequency above N is clamped rather than producing a NaN.
        assert!(idf(10, 50).is_finite());
    }

    #[test]
    fn overrides_are_validated_field_by_field() {
        let bad_sum = RulesOverride {
            weights: Some(Weights {
                relevance: 0.5,
                consistency: 0.3,
                recency: 0.2,
                diversity: 0.1,
            }),
            ..Default::default()
        };
        assert!(matches!(
            RuleSet::with_overrides(&bad_sum),
            Err(Refusal::InvalidArgument { field, .. }) if field == "rules.weights"
        ));
        let unknown = RulesOverride {
            authority: BTreeMap::from([("podcast".to_string(), 0.5)]),
            ..Default::default()
        };
        assert!(matches!(
            RuleSet::with_overrides(&unknown),
            Err(Refusal::InvalidArgument { field, .. }) if field == "rules.authority.podcast"
        ));
        let nan = RulesOverride {
            half_life_days: Some(f64::NAN),
            ..Default::default()
        };
        assert!(matches!(
            RuleSet::with_overrides(&nan),
            Err(Refusal::InvalidArgument { field, .. }) if field == "rules.half_life_days"
        ));
        let fractional = RulesOverride {
            thresholds: ThresholdsOverride {
                diversity_sources: Some(2.5),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(matches!(
            RuleSet::with_overrides(&fractional),
            Err(Refusal::InvalidArgument { field, .. }) if field == "rules.thresholds.diversity_sources"
        ));
        let good = RulesOverride {
            half_life_days: Some(180.0),
            authority: BTreeMap::from([("blog".to_string(), 0.35)]),
            thresholds: ThresholdsOverride {
                authority_gap: Some(0.2),
                ..Default::default()
            },
            ..Default::default()
        };
        let rules = RuleSet::with_overrides(&good).unwrap();
        assert_eq!(rules.half_life_days, 180.0);
        assert_eq!(rules.authority.blog, 0.35);
        assert_eq!(rules.thresholds.authority_gap, 0.2);
        assert_eq!(rules.thresholds.recency_gap_days, 30.0);
    }

    #[test]
    fn verdict_clauses_in_order() {
        let th = RuleSet::v1().thresholds;
        assert_eq!(
            verdict_rule(&th, 0, 0, 0.0, 0.9, false),
            VerdictRule::NoSideTaken
        );
        assert_eq!(
            verdict_rule(&th, 3, 0, 1.0, 0.49, false),
            VerdictRule::BelowConfidenceFloor
        );
        assert_eq!(
            verdict_rule(&th, 3, 0, 1.0, 0.9, true),
            VerdictRule::PendingConflict
        );
        assert_eq!(
            verdict_rule(&th, 2, 1, 2.0 / 3.0, 0.9, false),
            VerdictRule::SupportsPrevail
        );
        assert_eq!(
            verdict_rule(&th, 1, 2, 2.0 / 3.0, 0.9, false),
            VerdictRule::OpposesPrevail
        );
        assert_eq!(
            verdict_rule(&th, 1, 1, 0.5, 0.9, false),
            VerdictRule::Divided
        );
        assert_eq!(
            verdict_rule(&th, 3, 2, 0.6, 0.9, false),
            VerdictRule::Divided
        );
    }
}
