//! Read models over one task for the front ends: the conclusion card, evidence and conflict
//! views, the divergence summary of a conflict, and a compact summary for a client's context
//! window. All are pure data derived from the state; the markdown renderings are deterministic.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::event::{
    Compared, EvidenceAdded, EvidenceStatus, HumanOutcome, Participant, Side, Tier,
};
use crate::ids::{ConclusionId, ConflictId, EvidenceId, Hash32, SubQuestionId};
use crate::refusal::PendingAction;
use crate::rules::{Components, Mode, RuleSet, SourceType, Stance, Verdict};
use crate::state::{
    ConclusionRecord, ConflictRecord, EvidenceRecord, HumanDecisionKind, TaskState, TaskStatus,
};
use crate::text::shorten;
use crate::workflow::next_actions;

/// An item used by a conclusion, as the card shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardEvidence {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Its content hash.
    pub content_hash: Hash32,
    /// Its stance.
    pub stance: Stance,
    /// Its source.
    pub source: String,
}

/// An adjudication in force when a conclusion was issued, as the card shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardAdjudication {
    /// The conflict.
    pub conflict_id: ConflictId,
    /// Its tier then.
    pub tier: Tier,
    /// Its winner then.
    pub winner: Option<Side>,
    /// The human decision in force then (`both_stand` explains a null winner).
    pub resolution: Option<HumanOutcome>,
}

/// The conclusion card (SPEC §10): the single source of truth a client shows for a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConclusionCard {
    /// Its id.
    pub conclusion_id: ConclusionId,
    /// The verdict.
    pub stance: Verdict,
    /// The confidence, unrounded.
    pub confidence: f64,
    /// The components, unrounded.
    pub components: Components,
    /// The items used.
    pub evidence: Vec<CardEvidence>,
    /// The adjudications in force.
    pub adjudications: Vec<CardAdjudication>,
    /// The rule set applied.
    pub rules: RuleSet,
    /// Share of the items used that clients added.
    pub client_share: f64,
    /// Whether its inputs changed after it was issued.
    pub stale: bool,
    /// The conclusion it supersedes.
    pub supersedes: Option<ConclusionId>,
    /// The conclusion that superseded it, if any.
    pub superseded_by: Option<ConclusionId>,
    /// Rule set `v2`: items used whose publish date is a default, which took no part in recency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undated_items: Option<u64>,
    /// Rule set `v2`: the weights applied (without recency, the other three renormalised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_applied: Option<crate::rules::Weights>,
    /// The card as markdown.
    pub markdown: String,
}

impl ConclusionCard {
    fn of(record: &ConclusionRecord) -> Self {
        let issued = &record.issued;
        let mut card = ConclusionCard {
            conclusion_id: issued.conclusion_id.clone(),
            stance: issued.stance,
            confidence: issued.confidence,
            components: issued.components,
            evidence: issued
                .evidence
                .iter()
                .map(|e| CardEvidence {
                    evidence_id: e.evidence_id.clone(),
                    content_hash: e.content_hash,
                    stance: e.stance,
                    source: e.source.clone(),
                })
                .collect(),
            adjudications: issued
                .adjudications
                .iter()
                .map(|a| CardAdjudication {
                    conflict_id: a.conflict_id.clone(),
                    tier: a.tier,
                    winner: a.winner,
                    resolution: a.resolution,
                })
                .collect(),
            rules: issued.rules.clone(),
            client_share: issued.client_share,
            stale: record.stale_since.is_some(),
            supersedes: issued.supersedes.clone(),
            superseded_by: record.superseded_by.clone(),
            undated_items: issued.v2.as_ref().map(|v| v.undated_items),
            weights_applied: issued.v2.as_ref().map(|v| v.weights_applied),
            markdown: String::new(),
        };
        card.markdown = card.render(record);
        card
    }

    fn render(&self, record: &ConclusionRecord) -> String {
        let c = &self.components;
        let w = self.weights_applied.as_ref().unwrap_or(&self.rules.weights);
        let mut out = format!(
            "## Conclusion {}: {}\n\nConfidence **{:.4}** = {}·relevance {:.4} + {}·consistency {:.4} + {}·recency {:.4} + {}·diversity {:.4}\n\n",
            self.conclusion_id,
            self.stance.name(),
            self.confidence,
            w.relevance,
            c.relevance,
            w.consistency,
            c.consistency,
            w.recency,
            c.recency,
            w.diversity,
            c.diversity
        );
        if self.evidence.is_empty() {
            out.push_str("Evidence: none adopted.\n");
        } else {
            out.push_str(&format!("Evidence ({}):\n", self.evidence.len()));
            for e in &self.evidence {
                out.push_str(&format!(
                    "- {} {} ({}) `{}`\n",
                    e.evidence_id,
                    e.stance.name(),
                    e.source,
                    e.content_hash.short_hex(16)
                ));
            }
        }
        if !self.adjudications.is_empty() {
            out.push_str("\nAdjudications:\n");
            for a in &self.adjudications {
                let outcome = match (a.winner, a.resolution) {
                    (Some(side), _) => format!("{} wins", side.name()),
                    (None, Some(HumanOutcome::BothStand)) => "both stand".to_string(),
                    (None, _) => "pending".to_string(),
                };
                out.push_str(&format!(
                    "- {} {}: {}\n",
                    a.conflict_id,
                    a.tier.name(),
                    outcome
                ));
            }
        }
        out.push_str(&format!(
            "\nRules {} · client share {:.4}",
            self.rules.id, self.client_share
        ));
        if let Some(previous) = &self.supersedes {
            out.push_str(&format!(" · supersedes {previous}"));
        }
        if let Some(undated) = self.undated_items {
            out.push_str(&format!(
                " · {undated} item(s) with a default date took no part in recency"
            ));
        }
        out.push('\n');
        if let Some(stale) = &record.stale_since {
            out.push_str(&format!(
                "\n> Stale: {} ({}) changed its inputs after it was issued.\n",
                stale.kind, stale.subject
            ));
        }
        if let Some(newer) = &self.superseded_by {
            out.push_str(&format!("\n> Superseded by {newer}.\n"));
        }
        out
    }
}

/// An evidence item with its derived status, in the SPEC §4 field names: the item as added
/// (its fields flattened into the view), with the stance and scope in force, and what screening
/// and retraction made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceView {
    /// The item as added, with its scores; its `stance` and `sub_question` are those in force
    /// (from the last screening, else as added).
    #[serde(flatten)]
    pub item: EvidenceAdded,
    /// Status, `overruled` included.
    pub status: EvidenceStatus,
    /// The reason of the screening in force.
    pub screening_reason: Option<String>,
    /// The reason of the retraction.
    pub retraction_reason: Option<String>,
}

impl EvidenceView {
    fn of(item: &EvidenceRecord, status: EvidenceStatus) -> Self {
        let in_force = EvidenceAdded {
            stance: item.stance(),
            sub_question: item.scope().clone(),
            ..item.added.clone()
        };
        EvidenceView {
            item: in_force,
            status,
            screening_reason: item.screenings.last().map(|s| s.reason.clone()),
            retraction_reason: item.retraction.as_ref().map(|r| r.reason.clone()),
        }
    }
}

/// A human decision as shown on a conflict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HumanDecisionView {
    /// Resolution or appeal.
    pub kind: HumanDecisionKind,
    /// The decision.
    pub outcome: HumanOutcome,
    /// Why.
    pub reason: String,
    /// Who decided.
    pub actor: String,
    /// `person` or `assistant`; absent in decisions recorded before the ledger told them
    /// apart.
    pub decided_by: Option<crate::event::DecidedBy>,
    /// The client the decision came through.
    pub decided_via: Option<String>,
    /// True when its conflict was superseded by a fresh adjudication, so it no longer applies.
    pub superseded: bool,
}

/// A conflict as the front ends show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConflictView {
    /// Its id.
    pub conflict_id: ConflictId,
    /// Its scope.
    pub scope: Option<SubQuestionId>,
    /// `authority`, `recency`, `pending` or `human`.
    pub tier: Tier,
    /// The winner, null while pending or when both stand.
    pub winner: Option<Side>,
    /// The human decision in force (`both_stand` explains a null winner).
    pub resolution: Option<HumanOutcome>,
    /// The values the tiers compared.
    pub compared: Compared,
    /// The items on both sides.
    pub participants: Vec<Participant>,
    /// The adjudication that replaced it.
    pub superseded_by: Option<ConflictId>,
    /// Whether its scope stopped having both sides.
    pub dissolved: bool,
    /// Whether it is in force.
    pub current: bool,
    /// Every human decision on it, oldest first.
    pub human_decisions: Vec<HumanDecisionView>,
}

impl ConflictView {
    fn of(record: &ConflictRecord) -> Self {
        let superseded = !record.is_current();
        ConflictView {
            conflict_id: record.id().clone(),
            scope: record.adjudication.scope.clone(),
            tier: record.tier(),
            winner: record.winner(),
            resolution: record.resolution(),
            compared: record.adjudication.compared.clone(),
            participants: record.adjudication.participants.clone(),
            superseded_by: record.superseded_by.clone(),
            dissolved: record.dissolved.is_some(),
            current: record.is_current(),
            human_decisions: record
                .human
                .iter()
                .map(|h| HumanDecisionView {
                    kind: h.kind,
                    outcome: h.outcome,
                    reason: h.reason.clone(),
                    actor: h.provenance.actor.clone(),
                    decided_by: h.decided_by.as_ref().map(|d| d.by),
                    decided_via: h.decided_by.as_ref().map(|d| d.via.clone()),
                    superseded,
                })
                .collect(),
        }
    }
}

/// One item of a divergence summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DivergenceItem {
    /// The item.
    pub evidence_id: EvidenceId,
    /// Its source.
    pub source: String,
    /// Its source type.
    pub source_type: SourceType,
    /// Its publish date.
    pub publish_date: NaiveDate,
    /// Its authority.
    pub authority: f64,
    /// Its summary.
    pub summary: String,
}

/// What a person needs to decide a conflict: both sides' items, sources, dates and summaries,
/// and what the automatic tiers compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// The conflict.
    pub conflict_id: ConflictId,
    /// Its scope, with the sub-question's text when it has one.
    pub scope: Option<SubQuestionId>,
    /// The sub-question's text.
    pub scope_text: Option<String>,
    /// The supporting items.
    pub supports: Vec<DivergenceItem>,
    /// The opposing items.
    pub opposes: Vec<DivergenceItem>,
    /// What the tiers compared and why neither decided.
    pub compared: Compared,
}

/// Counts of items by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts {
    /// Not screened.
    pub candidate: u64,
    /// Adopted and not overruled.
    pub adopted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Retracted.
    pub retracted: u64,
    /// Overruled.
    pub overruled: u64,
}

/// The current conclusion in brief.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConclusionBrief {
    /// Its id.
    pub conclusion_id: ConclusionId,
    /// The verdict.
    pub stance: Verdict,
    /// Its confidence.
    pub confidence: f64,
    /// Whether it is stale.
    pub stale: bool,
}

/// A compact summary of a task for a client's context window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    /// The task.
    pub task_id: String,
    /// The question, cut to 200 characters.
    pub question: String,
    /// Status.
    pub status: TaskStatus,
    /// Mode.
    pub mode: Mode,
    /// Research date.
    pub research_date: NaiveDate,
    /// Stream version.
    pub version: u64,
    /// Sub-questions.
    pub sub_questions: u64,
    /// Items by status.
    pub evidence: StatusCounts,
    /// Conflicts awaiting a person.
    pub pending_conflicts: Vec<ConflictId>,
    /// The current conclusion.
    pub conclusion: Option<ConclusionBrief>,
    /// What to do next.
    pub next_actions: Vec<PendingAction>,
}

const SUMMARY_QUESTION_CHARS_MAX: usize = 200;

impl TaskState {
    /// The card of a conclusion, the current one when `id` is none.
    pub fn conclusion_card(&self, id: Option<&ConclusionId>) -> Option<ConclusionCard> {
        let record = match id {
            Some(id) => self.conclusion(id)?,
            None => self.current_conclusion()?,
        };
        Some(ConclusionCard::of(record))
    }

    /// Every conclusion's card, oldest first.
    pub fn conclusion_history(&self) -> Vec<ConclusionCard> {
        self.conclusions().iter().map(ConclusionCard::of).collect()
    }

    /// Every item with its derived status.
    pub fn evidence_views(&self) -> Vec<EvidenceView> {
        self.evidence_with_status()
            .into_iter()
            .map(|(item, status)| EvidenceView::of(item, status))
            .collect()
    }

    /// One item with its derived status, built alone: what a write that added or changed one
    /// item answers with, without the views of every other item.
    pub fn evidence_view(&self, id: &str) -> Option<EvidenceView> {
        let item = self.evidence().iter().find(|i| i.id().as_str() == id)?;
        let status = item.recorded_status();
        let status = if status == EvidenceStatus::Adopted && self.overruled().contains(item.id()) {
            EvidenceStatus::Overruled
        } else {
            status
        };
        Some(EvidenceView::of(item, status))
    }

    /// Every conflict, superseded ones included, oldest first.
    pub fn conflict_views(&self) -> Vec<ConflictView> {
        self.conflicts().iter().map(ConflictView::of).collect()
    }

    /// The divergence summary of a conflict.
    pub fn divergence(&self, id: &ConflictId) -> Option<Divergence> {
        let record = self.conflict(id)?;
        let side = |side: Side| -> Vec<DivergenceItem> {
            record
                .adjudication
                .participants
                .iter()
                .filter(|p| p.side == side)
                .filter_map(|p| {
                    let item = self.evidence_item(&p.evidence_id)?;
                    Some(DivergenceItem {
                        evidence_id: p.evidence_id.clone(),
                        source: p.source.clone(),
                        source_type: item.added.source_type,
                        publish_date: p.publish_date,
                        authority: p.authority,
                        summary: item.added.summary.clone(),
                    })
                })
                .collect()
        };
        let scope = record.adjudication.scope.clone();
        Some(Divergence {
            conflict_id: id.clone(),
            scope_text: scope
                .as_ref()
                .and_then(|s| self.sub_question(s))
                .map(|s| s.sub_question.text.clone()),
            scope,
            supports: side(Side::Supports),
            opposes: side(Side::Opposes),
            compared: record.adjudication.compared.clone(),
        })
    }

    /// A compact summary; none before the task was opened.
    pub fn summary(&self) -> Option<TaskSummary> {
        let task = self.task()?;
        let mut counts = StatusCounts::default();
        for (_, status) in self.evidence_with_status() {
            match status {
                EvidenceStatus::Candidate => counts.candidate += 1,
                EvidenceStatus::Adopted => counts.adopted += 1,
                EvidenceStatus::Rejected => counts.rejected += 1,
                EvidenceStatus::Retracted => counts.retracted += 1,
                EvidenceStatus::Overruled => counts.overruled += 1,
            }
        }
        Some(TaskSummary {
            task_id: task.task_id.clone(),
            question: shorten(&task.question, SUMMARY_QUESTION_CHARS_MAX),
            status: self.status().unwrap_or(TaskStatus::Active),
            mode: task.mode,
            research_date: task.research_date,
            version: self.version(),
            sub_questions: self.sub_questions().len() as u64,
            evidence: counts,
            pending_conflicts: self
                .current_conflicts()
                .filter(|c| c.is_pending())
                .map(|c| c.id().clone())
                .collect(),
            conclusion: self.current_conclusion().map(|c| ConclusionBrief {
                conclusion_id: c.issued.conclusion_id.clone(),
                stance: c.issued.stance,
                confidence: c.issued.confidence,
                stale: c.stale_since.is_some(),
            }),
            next_actions: next_actions(self),
        })
    }
}

impl TaskSummary {
    /// A few lines of plain text.
    pub fn text(&self) -> String {
        let e = &self.evidence;
        let mut out = format!(
            "Task {} ({}, {}, v{}): {}\nEvidence: {} candidate, {} adopted, {} overruled, {} rejected, {} retracted; sub-questions: {}\n",
            self.task_id,
            self.status.name(),
            self.mode.name(),
            self.version,
            self.question,
            e.candidate,
            e.adopted,
            e.overruled,
            e.rejected,
            e.retracted,
            self.sub_questions
        );
        if !self.pending_conflicts.is_empty() {
            let ids: Vec<&str> = self.pending_conflicts.iter().map(|c| c.as_str()).collect();
            out.push_str(&format!("Pending conflicts: {}\n", ids.join(", ")));
        }
        match &self.conclusion {
            Some(c) => out.push_str(&format!(
                "Conclusion {}: {} (confidence {:.4}){}\n",
                c.conclusion_id,
                c.stance.name(),
                c.confidence,
                if c.stale { ", stale" } else { "" }
            )),
            None => out.push_str("No conclusion yet\n"),
        }
        if !self.next_actions.is_empty() {
            let next: Vec<String> = self
                .next_actions
                .iter()
                .map(|a| format!("{} ({})", a.tool.name(), a.reason))
                .collect();
            out.push_str(&format!("Next: {}\n", next.join("; ")));
        }
        out
    }
}
