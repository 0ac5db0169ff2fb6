//! The explanation of a conclusion: a tree of lines, each citing the events it rests on.
//!
//! It explains the conclusion as it was issued: the components it recorded, the items it used,
//! and for every item it left out the reason in force at that moment, found in each item's
//! history. A conclusion that went stale says what changed since. The event keeps the tree; the
//! markdown is rendered from it by a fixed function ([`crate::event::ExplanationRecorded::markdown`]),
//! which keeps the event within the ledger's size bound for large tasks.

use crate::event::{
    ExplanationNode, ExplanationRecorded, HumanOutcome, ScreeningDecision, Tier, UsedAdjudication,
};
use crate::ids::{Cite, ExplanationId};
use crate::rules::VerdictRule;
use crate::state::{ConclusionRecord, EvidenceRecord, TaskState};
use crate::text::shorten;

/// The longest a reason or constraint runs in an explanation line (characters); the full text
/// stays in its own event.
const QUOTE_CHARS_MAX: usize = 200;

struct Tree {
    nodes: Vec<ExplanationNode>,
}

impl Tree {
    fn add(&mut self, parent: Option<u32>, text: String, cites: Vec<Cite>) -> u32 {
        let index = self.nodes.len() as u32;
        let mut unique: Vec<Cite> = Vec::with_capacity(cites.len());
        for cite in cites {
            if !unique.contains(&cite) {
                unique.push(cite);
            }
        }
        self.nodes.push(ExplanationNode {
            parent,
            text: one_line(&text),
            cites: unique,
        });
        index
    }
}

/// Newlines in user text would break the one-line-one-citation shape.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `1 item`, `2 items`.
fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn quote(text: &str) -> String {
    shorten(&one_line(text), QUOTE_CHARS_MAX)
}

fn scope_name(scope: &Option<crate::ids::SubQuestionId>) -> String {
    match scope {
        Some(id) => format!("sub-question {id}"),
        None => "the main question".to_string(),
    }
}

fn winner_name(winner: Option<crate::event::Side>, resolution: Option<HumanOutcome>) -> String {
    match (winner, resolution) {
        (Some(side), _) => format!("{} wins", side.name()),
        (None, Some(HumanOutcome::BothStand)) => "both sides stand".to_string(),
        (None, _) => "no winner yet".to_string(),
    }
}

/// The explanation of the task's current conclusion; none before there is one.
pub(crate) fn explanation(state: &TaskState) -> Option<ExplanationRecorded> {
    let conclusion = state.current_conclusion()?;
    let task = state.task()?;
    let issued = &conclusion.issued;
    let at = conclusion.provenance.cite;
    let mut tree = Tree { nodes: Vec::new() };

    let root = tree.add(
        None,
        format!(
            "Conclusion {}: {} (confidence {})",
            issued.conclusion_id,
            issued.stance.name(),
            issued.confidence
        ),
        vec![at],
    );
    let at_open = Section {
        state,
        conclusion,
        root,
    };
    at_open.question(&mut tree, task);
    tree.add(
        Some(root),
        rules_line(&issued.rules),
        vec![task.opened.cite, at],
    );
    at_open.confidence(&mut tree);
    tree.add(
        Some(root),
        format!(
            "Verdict {}: {}",
            issued.stance.name(),
            rule_text(issued.rule, issued)
        ),
        vec![at],
    );
    at_open.evidence_used(&mut tree);
    at_open.adjudications(&mut tree);
    at_open.left_out(&mut tree);
    at_open.history(&mut tree);

    Some(ExplanationRecorded {
        explanation_id: ExplanationId::nth(state.explanations().len() + 1),
        conclusion_id: issued.conclusion_id.clone(),
        nodes: tree.nodes,
    })
}

/// What every section of the explanation is written from: the task's state, the conclusion
/// explained, and the root line the sections hang from.
struct Section<'a> {
    state: &'a TaskState,
    conclusion: &'a ConclusionRecord,
    root: u32,
}

impl Section<'_> {
    /// The conclusion's own event, which most lines cite.
    fn at(&self) -> Cite {
        self.conclusion.provenance.cite
    }

    /// The question, its constraints, the research date and the mode.
    fn question(&self, tree: &mut Tree, task: &crate::state::TaskInfo) {
        let opened = task.opened.cite;
        let question = tree.add(
            Some(self.root),
            format!("Question: {}", one_line(&task.question)),
            vec![opened],
        );
        for constraint in &task.constraints {
            tree.add(
                Some(question),
                format!("Constraint: {}", quote(constraint)),
                vec![opened],
            );
        }
        tree.add(
            Some(question),
            format!(
                "Research date {}; mode {}",
                task.research_date,
                task.mode.name()
            ),
            vec![opened],
        );
    }

    /// The confidence and each of its four components.
    fn confidence(&self, tree: &mut Tree) {
        let issued = &self.conclusion.issued;
        let rules = &issued.rules;
        let at = self.at();
        // Under `v2` without recency the weights applied are not the task's.
        let w = &issued
            .v2
            .as_ref()
            .map_or(rules.weights, |v| v.weights_applied);
        let c = &issued.components;
        let used = issued.evidence.len();
        let sided = issued.counts.supports + issued.counts.opposes;
        let confidence = tree.add(
            Some(self.root),
            format!(
                "Confidence {} = {}·relevance + {}·consistency + {}·recency + {}·diversity",
                issued.confidence, w.relevance, w.consistency, w.recency, w.diversity
            ),
            vec![at],
        );
        tree.add(
            Some(confidence),
            format!(
                "Relevance {}: mean relevance over {} used",
                c.relevance,
                count(used as u64, "item")
            ),
            vec![at],
        );
        tree.add(
            Some(confidence),
            format!(
                "Consistency {}: {} of {} taking a side on the larger side \
                 ({} support, {} oppose, {} neutral)",
                c.consistency,
                issued.counts.supports.max(issued.counts.opposes),
                count(sided, "item"),
                issued.counts.supports,
                issued.counts.opposes,
                issued.counts.neutral
            ),
            vec![at],
        );
        tree.add(Some(confidence), recency_line(issued), vec![at]);
        tree.add(
            Some(confidence),
            format!(
                "Diversity {}: {}, full at {}",
                c.diversity,
                count(issued.distinct_sources, "distinct source"),
                rules.thresholds.diversity_sources
            ),
            vec![at],
        );
    }

    /// Each item the conclusion used, citing its addition and the screening in force.
    fn evidence_used(&self, tree: &mut Tree) {
        let issued = &self.conclusion.issued;
        if issued.evidence.is_empty() {
            return;
        }
        let before = self.at().version;
        let section = tree.add(
            Some(self.root),
            format!("Evidence used ({})", issued.evidence.len()),
            vec![self.at()],
        );
        for entry in &issued.evidence {
            let Some(item) = self.state.evidence_item(&entry.evidence_id) else {
                continue;
            };
            let mut cites = vec![item.provenance.cite];
            if let Some(screening) = item.screening_before(before) {
                cites.push(screening.provenance.cite);
            }
            tree.add(
                Some(section),
                item_line(item, entry.stance.name(), &entry.origin),
                cites,
            );
        }
    }

    /// The adjudications in force when it was issued.
    fn adjudications(&self, tree: &mut Tree) {
        let issued = &self.conclusion.issued;
        if issued.adjudications.is_empty() {
            return;
        }
        let section = tree.add(
            Some(self.root),
            format!("Adjudications in force ({})", issued.adjudications.len()),
            vec![self.at()],
        );
        for used in &issued.adjudications {
            adjudication_lines(tree, self.state, section, used, self.at().version);
        }
    }

    /// Every item added before it and not used, with the reason in force.
    fn left_out(&self, tree: &mut Tree) {
        let issued = &self.conclusion.issued;
        let before = self.at().version;
        let left_out: Vec<&EvidenceRecord> = self
            .state
            .evidence()
            .iter()
            .filter(|item| item.provenance.cite.version < before)
            .filter(|item| !issued.evidence.iter().any(|e| &e.evidence_id == item.id()))
            .collect();
        if left_out.is_empty() {
            return;
        }
        let section = tree.add(
            Some(self.root),
            format!("Evidence left out ({})", left_out.len()),
            vec![self.at()],
        );
        for item in left_out {
            let (text, cites) = left_out_line(self.state, self.conclusion, item);
            tree.add(Some(section), text, cites);
        }
    }

    /// The conclusion it superseded, and what made it stale.
    fn history(&self, tree: &mut Tree) {
        let issued = &self.conclusion.issued;
        if let Some(previous) = &issued.supersedes
            && let Some(record) = self.state.conclusion(previous)
        {
            tree.add(
                Some(self.root),
                format!(
                    "Supersedes {previous} ({}, confidence {})",
                    record.issued.stance.name(),
                    record.issued.confidence
                ),
                vec![record.provenance.cite, self.at()],
            );
        }
        if let Some(stale) = &self.conclusion.stale_since {
            tree.add(
                Some(self.root),
                format!(
                    "Stale: {} ({}) changed its inputs after it was issued",
                    stale.kind, stale.subject
                ),
                vec![stale.provenance.cite],
            );
        }
    }
}

/// The rule set's parameters as one line.
fn rules_line(rules: &crate::rules::RuleSet) -> String {
    let w = &rules.weights;
    let th = &rules.thresholds;
    let mut line = format!(
        "Rule set {}: weights relevance {}, consistency {}, recency {}, diversity {}; \
         half-life {} days; authority gap {}, recency gap {} days, consistency {}, \
         confidence floor {}, full diversity at {} sources",
        rules.id,
        w.relevance,
        w.consistency,
        w.recency,
        w.diversity,
        rules.half_life_days,
        th.authority_gap,
        th.recency_gap_days,
        th.consistency,
        th.confidence_floor,
        th.diversity_sources
    );
    if let Some(p) = &rules.v2 {
        line.push_str(&format!(
            "; relevance min(1, ((1 − {q})·coverage of the question's content terms + {q}·coverage \
             of the query's{cap}) / {full}); a directional verdict needs {items} on the winning side \
             with relevance summing to {rel}; undated evidence takes no part in recency ({undated}); \
             side weighing {weighing}",
            q = p.query_weight,
            cap = match p.query_cap {
                Some(cap) => format!(", counted at most {cap} times the question's"),
                None => String::new(),
            },
            full = p.coverage_full,
            items = count(p.sided_items_min, "item"),
            rel = p.sided_relevance_min,
            undated = match p.undated_recency {
                Some(value) => format!("recency {value} when no item used is dated"),
                None => "the component is dropped when no item used is dated".to_string(),
            },
            weighing = match p.side_weight_ratio {
                Some(ratio) => format!("at {ratio} times the other side"),
                None => "off".to_string(),
            },
        ));
    }
    line
}

/// The recency component's line, which under `v2` says how many items had a given date.
fn recency_line(issued: &crate::event::ConclusionIssued) -> String {
    let c = &issued.components;
    let half_life = issued.rules.half_life_days;
    let used = issued.evidence.len();
    match &issued.v2 {
        None => format!(
            "Recency {}: mean of 0.5^(age_days / {}) over {} used",
            c.recency,
            half_life,
            count(used as u64, "item")
        ),
        Some(v) if v.dated_items > 0 => format!(
            "Recency {}: mean of 0.5^(age_days / {}) over {} with a given date; {} with a default date take no part",
            c.recency,
            half_life,
            count(v.dated_items, "item"),
            count(v.undated_items, "item")
        ),
        Some(v) if v.recency_measured => format!(
            "Recency {}: the neutral value, since none of the {} used has a given date",
            c.recency,
            count(v.undated_items, "item")
        ),
        Some(v) => format!(
            "Recency not measured: none of the {} used has a given date, so its weight is dropped and the others renormalised",
            count(v.undated_items, "item")
        ),
    }
}

fn item_line(item: &EvidenceRecord, stance: &str, origin: &str) -> String {
    let added = &item.added;
    format!(
        "{} {stance}: {} ({}, published {}{}), relevance {}, recency {}, authority {}; from {origin}",
        added.evidence_id,
        added.source,
        added.source_type.name(),
        added.publish_date,
        if added.publish_date_defaulted {
            " by default"
        } else {
            ""
        },
        added.relevance,
        added.recency,
        added.authority
    )
}

fn rule_text(rule: VerdictRule, issued: &crate::event::ConclusionIssued) -> String {
    let th = &issued.rules.thresholds;
    match rule {
        VerdictRule::NoSideTaken => {
            "no item used takes a side, so the evidence is insufficient".to_string()
        }
        VerdictRule::BelowConfidenceFloor => format!(
            "confidence {} does not reach the floor {} (tolerance 1e-9)",
            issued.confidence, th.confidence_floor
        ),
        VerdictRule::PendingConflict => {
            "a conflict awaits a human decision, so the verdict is uncertain".to_string()
        }
        VerdictRule::SupportsPrevail => format!(
            "more items support ({} to {}) and consistency {} reaches {}",
            issued.counts.supports,
            issued.counts.opposes,
            issued.components.consistency,
            th.consistency
        ),
        VerdictRule::OpposesPrevail => format!(
            "more items oppose ({} to {}) and consistency {} reaches {}",
            issued.counts.opposes,
            issued.counts.supports,
            issued.components.consistency,
            th.consistency
        ),
        VerdictRule::TooLittleSidedEvidence => {
            let (items, relevance) = if issued.counts.supports > issued.counts.opposes {
                (
                    issued.counts.supports,
                    issued.v2.as_ref().map_or(0.0, |v| v.supports_relevance),
                )
            } else {
                (
                    issued.counts.opposes,
                    issued.v2.as_ref().map_or(0.0, |v| v.opposes_relevance),
                )
            };
            let (items_min, relevance_min) = issued
                .rules
                .v2
                .as_ref()
                .map_or((0, 0.0), |p| (p.sided_items_min, p.sided_relevance_min));
            format!(
                "the larger side has {} with relevance summing to {relevance}; a directional verdict needs {items_min} and {relevance_min}, so the evidence is insufficient",
                count(items, "item")
            )
        }
        VerdictRule::Divided => format!(
            "neither side prevails clearly ({} support, {} oppose, consistency {} against {})",
            issued.counts.supports,
            issued.counts.opposes,
            issued.components.consistency,
            th.consistency
        ),
    }
}

fn adjudication_lines(
    tree: &mut Tree,
    state: &TaskState,
    section: u32,
    used: &UsedAdjudication,
    before: u64,
) {
    let Some(record) = state.conflict(&used.conflict_id) else {
        return;
    };
    let a = &record.adjudication;
    let human = record
        .human
        .iter()
        .rev()
        .find(|h| h.provenance.cite.version < before);
    let mut cites = vec![record.provenance.cite];
    cites.extend(human.map(|h| h.provenance.cite));
    let line = tree.add(
        Some(section),
        format!(
            "{} in {}: {} tier, {}",
            a.conflict_id,
            scope_name(&a.scope),
            used.tier.name(),
            winner_name(used.winner, used.resolution)
        ),
        cites,
    );
    let compared = &a.compared;
    tree.add(
        Some(line),
        format!(
            "Compared authority {} (supports) against {} (opposes), gap {}; latest dates {} against {}, gap {} days",
            compared.supports_authority,
            compared.opposes_authority,
            compared.authority_gap,
            compared.supports_latest,
            compared.opposes_latest,
            compared.recency_gap_days
        ),
        vec![record.provenance.cite],
    );
    if let Some(v2) = &a.v2 {
        let date = |d: Option<chrono::NaiveDate>| d.map_or("none".to_string(), |d| d.to_string());
        tree.add(
            Some(line),
            format!(
                "Rule set v2: latest given dates {} against {} ({} with a default date left out); side weights {} against {}",
                date(v2.supports_latest_dated),
                date(v2.opposes_latest_dated),
                count(v2.undated.len() as u64, "item"),
                v2.supports_weight,
                v2.opposes_weight
            ),
            vec![record.provenance.cite],
        );
    }
    if let Some(h) = human {
        human_lines(tree, line, record, h);
    }
}

/// Under an adjudication a person (or an assistant) decided: what the rules decided, then the
/// decision.
fn human_lines(
    tree: &mut Tree,
    line: u32,
    record: &crate::state::ConflictRecord,
    h: &crate::state::HumanDecision,
) {
    let a = &record.adjudication;
    let automatic = match a.winner {
        Some(side) => format!("{} tier, {} wins", a.tier.name(), side.name()),
        None => format!(
            "{}: neither gap reached its threshold",
            Tier::Pending.name()
        ),
    };
    tree.add(
        Some(line),
        format!("Automatic adjudication: {automatic}"),
        vec![record.provenance.cite],
    );
    let kind = match h.kind {
        crate::state::HumanDecisionKind::Resolution => "Resolved",
        crate::state::HumanDecisionKind::Appeal => "Appealed",
    };
    tree.add(
        Some(line),
        format!(
            "{kind} by {}{}: {}; reason: {}",
            h.provenance.actor,
            decider_text(h.decided_by.as_ref()),
            h.outcome.name(),
            quote(&h.reason)
        ),
        vec![h.provenance.cite],
    );
}

fn left_out_line(
    state: &TaskState,
    conclusion: &ConclusionRecord,
    item: &EvidenceRecord,
) -> (String, Vec<Cite>) {
    let before = conclusion.provenance.cite.version;
    let id = item.id();
    if let Some(retraction) = item
        .retraction
        .as_ref()
        .filter(|r| r.provenance.cite.version < before)
    {
        return (
            format!("{id} retracted: {}", quote(&retraction.reason)),
            vec![retraction.provenance.cite],
        );
    }
    let Some(screening) = item.screening_before(before) else {
        return (
            format!("{id} was not screened ({})", item.added.source),
            vec![item.provenance.cite],
        );
    };
    match screening.decision {
        ScreeningDecision::Reject => (
            format!("{id} rejected: {}", quote(&screening.reason)),
            vec![screening.provenance.cite],
        ),
        ScreeningDecision::Adopt => {
            for used in &conclusion.issued.adjudications {
                let Some(winner) = used.winner else {
                    continue;
                };
                let Some(record) = state.conflict(&used.conflict_id) else {
                    continue;
                };
                let loses = record
                    .adjudication
                    .participants
                    .iter()
                    .any(|p| p.evidence_id == *id && p.side != winner);
                if loses {
                    let mut cites = vec![screening.provenance.cite, record.provenance.cite];
                    if let Some(h) = record
                        .human
                        .iter()
                        .rev()
                        .find(|h| h.provenance.cite.version < before)
                    {
                        cites.push(h.provenance.cite);
                    }
                    return (
                        format!(
                            "{id} overruled by {} ({} wins by {} tier)",
                            used.conflict_id,
                            winner.name(),
                            used.tier.name()
                        ),
                        cites,
                    );
                }
            }
            (
                format!("{id} adopted without a stance, so it could not be counted"),
                vec![screening.provenance.cite],
            )
        }
    }
}

/// Renders explanation lines as markdown: the root as a heading, the rest as a nested list,
/// each line followed by the events it cites (`#seq hash-prefix`).
pub(crate) fn render_markdown(nodes: &[ExplanationNode]) -> String {
    let mut out = String::new();
    let mut depths: Vec<usize> = Vec::with_capacity(nodes.len());
    for (index, node) in nodes.iter().enumerate() {
        // Parents come first; a parent index that does not (only in a damaged log) is a root.
        let depth = match node.parent {
            Some(parent) if (parent as usize) < index => {
                depths.get(parent as usize).copied().unwrap_or(0) + 1
            }
            _ => 0,
        };
        depths.push(depth);
        let cites = node
            .cites
            .iter()
            .map(Cite::short)
            .collect::<Vec<_>>()
            .join("; ");
        let prefix = if depth == 0 {
            "# ".to_string()
        } else {
            format!("{}- ", "  ".repeat(depth - 1))
        };
        out.push_str(&prefix);
        out.push_str(&node.text);
        if !cites.is_empty() {
            out.push_str(" (");
            out.push_str(&cites);
            out.push(')');
        }
        out.push('\n');
        if depth == 0 {
            out.push('\n');
        }
    }
    out
}

/// Who decided, as the explanation says it: ` (a person, via rest)`. Decisions recorded before
/// the ledger told a person from an assistant read as they always did.
fn decider_text(decider: Option<&crate::event::Decider>) -> String {
    decider.map_or(String::new(), |d| match d.by {
        crate::event::DecidedBy::Person => format!(" (a person, via {})", d.via),
        crate::event::DecidedBy::Assistant => format!(" (the assistant, via {})", d.via),
    })
}
