//! The state of one research task, folded from its events.
//!
//! [`evolve`] cannot fail and does no I/O: an event that does not fit the state (a reference to
//! an unknown item, a write after closing) is recorded as an [`Anomaly`] and otherwise ignored,
//! so a damaged or hand-made log still folds and the damage is visible. Every fact keeps the
//! [`Provenance`] of the event that established it, so explanations and the why-graph can cite
//! the event's seq and hash. Derived statuses (`overruled`, `stale`) are computed on reading, so
//! a fresh adjudication or an appeal restores an item without rewriting anything.

use std::collections::BTreeSet;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::event::{
    Adjudication, ConclusionIssued, ConflictsAdjudicated, DecisionMatrixBuilt, Event,
    EvidenceAdded, EvidenceRetracted, EvidenceScreened, EvidenceStatus, ExplanationRecorded,
    ExternalToolCalled, HumanOutcome, ScreeningDecision, SearchRecorded, Side, SubQuestion,
    SubQuestionsExpanded, SynthesisRecorded, TaskOpened, Tier,
};
use crate::ids::{Cite, ConclusionId, ConflictId, EventMeta, EvidenceId, SubQuestionId};
use crate::rules::{Mode, RuleSet, Stance};

/// The version of [`TaskState::canonical_bytes`]'s shape. postcard is not self-describing, so
/// bytes written for one shape of the state can decode without error into another and mean
/// something else; whoever keeps encoded states (snapshots of read models) records this version
/// beside them and discards any of another. Bump it whenever a field of the state, or of a type
/// the state holds, is added, removed, reordered or retyped.
pub const STATE_FORMAT_VERSION: u16 = 6;

/// Who recorded a fact, when, and in which event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The event.
    pub cite: Cite,
    /// When the ledger recorded it.
    pub recorded_at: DateTime<Utc>,
    /// Who caused it.
    pub actor: String,
}

impl Provenance {
    fn of(meta: &EventMeta) -> Self {
        Self {
            cite: Cite::of(meta),
            recorded_at: meta.recorded_at,
            actor: meta.actor.clone(),
        }
    }
}

/// A recorded payload with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded<T> {
    /// The payload.
    pub event: T,
    /// Where it was recorded.
    pub provenance: Provenance,
}

impl<T: Clone> Recorded<T> {
    fn of(event: &T, provenance: Provenance) -> Self {
        Recorded {
            event: event.clone(),
            provenance,
        }
    }
}

/// What the task was opened with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The task id.
    pub task_id: String,
    /// The main question.
    pub question: String,
    /// Constraints.
    pub constraints: Vec<String>,
    /// The research date.
    pub research_date: NaiveDate,
    /// Workflow mode.
    pub mode: Mode,
    /// The rule set in force.
    pub rules: RuleSet,
    /// Who may decide the task's conflicts, when the task restricts it.
    pub conflict_decisions: Option<crate::event::ConflictDecisions>,
    /// The `task_opened` event.
    pub opened: Provenance,
}

/// The overall status of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// No conclusion yet.
    Active,
    /// The current conclusion stands.
    Concluded,
    /// A conclusion exists but something changed since.
    Stale,
    /// Closed; nothing can be written.
    Closed,
}

impl TaskStatus {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            TaskStatus::Active => "active",
            TaskStatus::Concluded => "concluded",
            TaskStatus::Stale => "stale",
            TaskStatus::Closed => "closed",
        }
    }
}

/// A sub-question with its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubQuestionRecord {
    /// The sub-question.
    pub sub_question: SubQuestion,
    /// The event that added it.
    pub provenance: Provenance,
}

/// One screening of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreeningRecord {
    /// Adopt or reject.
    pub decision: ScreeningDecision,
    /// The stance from then on.
    pub stance: Option<Stance>,
    /// The scope from then on.
    pub sub_question: Option<SubQuestionId>,
    /// Why.
    pub reason: String,
    /// The event.
    pub provenance: Provenance,
}

/// A retraction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetractionRecord {
    /// Why.
    pub reason: String,
    /// The event.
    pub provenance: Provenance,
}

/// An evidence item and everything that happened to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecord {
    /// The item as added, with its scores.
    pub added: EvidenceAdded,
    /// The `evidence_added` event.
    pub provenance: Provenance,
    /// Every screening, oldest first; the last is in force.
    pub screenings: Vec<ScreeningRecord>,
    /// The retraction, if any.
    pub retraction: Option<RetractionRecord>,
}

impl EvidenceRecord {
    /// Its id.
    pub fn id(&self) -> &EvidenceId {
        &self.added.evidence_id
    }

    /// The stance in force: from the last screening, else as added.
    pub fn stance(&self) -> Option<Stance> {
        match self.screenings.last() {
            Some(screening) => screening.stance,
            None => self.added.stance,
        }
    }

    /// The scope in force: the sub-question it answers (none for the main question), from the
    /// last screening, else as added.
    pub fn scope(&self) -> &Option<SubQuestionId> {
        match self.screenings.last() {
            Some(screening) => &screening.sub_question,
            None => &self.added.sub_question,
        }
    }

    /// The recorded status, before the derived `overruled` is applied.
    pub fn recorded_status(&self) -> EvidenceStatus {
        if self.retraction.is_some() {
            return EvidenceStatus::Retracted;
        }
        match self.screenings.last().map(|s| s.decision) {
            None => EvidenceStatus::Candidate,
            Some(ScreeningDecision::Adopt) => EvidenceStatus::Adopted,
            Some(ScreeningDecision::Reject) => EvidenceStatus::Rejected,
        }
    }

    /// The screening in force just before stream version `version`.
    pub fn screening_before(&self, version: u64) -> Option<&ScreeningRecord> {
        self.screenings
            .iter()
            .rev()
            .find(|s| s.provenance.cite.version < version)
    }

    /// The event that established the item's current status.
    pub fn status_provenance(&self) -> &Provenance {
        if let Some(retraction) = &self.retraction {
            return &retraction.provenance;
        }
        match self.screenings.last() {
            Some(screening) => &screening.provenance,
            None => &self.provenance,
        }
    }
}

/// A human decision on a conflict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HumanDecision {
    /// A resolution of a pending conflict, or an appeal of an automatic one.
    pub kind: HumanDecisionKind,
    /// The decision.
    pub outcome: HumanOutcome,
    /// Why.
    pub reason: String,
    /// The event (its actor is who decided).
    pub provenance: Provenance,
    /// A person or an assistant, and through which client; absent in decisions recorded before
    /// the ledger told them apart.
    pub decided_by: Option<crate::event::Decider>,
}

/// Whether a human decision resolved a pending conflict or appealed an automatic adjudication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HumanDecisionKind {
    /// On a pending conflict.
    Resolution,
    /// On an automatic adjudication.
    Appeal,
}

/// One adjudication of a scope and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConflictRecord {
    /// The automatic adjudication.
    pub adjudication: Adjudication,
    /// The `conflicts_adjudicated` event.
    pub provenance: Provenance,
    /// Human decisions, oldest first; the last is in force.
    pub human: Vec<HumanDecision>,
    /// The adjudication that replaced it after its scope changed.
    pub superseded_by: Option<ConflictId>,
    /// Set when its scope stopped having items on both sides.
    pub dissolved: Option<Provenance>,
    /// The run that superseded it.
    pub superseded_at: Option<Provenance>,
}

impl ConflictRecord {
    /// Its id.
    pub fn id(&self) -> &ConflictId {
        &self.adjudication.conflict_id
    }

    /// Whether it is still the adjudication of its scope.
    pub fn is_current(&self) -> bool {
        self.superseded_by.is_none() && self.dissolved.is_none()
    }

    /// `human` once a person decided, else the automatic tier.
    pub fn tier(&self) -> Tier {
        if self.human.is_empty() {
            self.adjudication.tier
        } else {
            Tier::Human
        }
    }

    /// The winning side in force, none while pending or when both stand.
    pub fn winner(&self) -> Option<Side> {
        match self.human.last() {
            Some(decision) => decision.outcome.winner(),
            None => self.adjudication.winner,
        }
    }

    /// The human decision in force.
    pub fn resolution(&self) -> Option<HumanOutcome> {
        self.human.last().map(|d| d.outcome)
    }

    /// Whether it waits for a person.
    pub fn is_pending(&self) -> bool {
        self.human.is_empty() && self.adjudication.tier == Tier::Pending
    }

    /// The event that established the decision in force.
    pub fn decision_provenance(&self) -> &Provenance {
        match self.human.last() {
            Some(decision) => &decision.provenance,
            None => &self.provenance,
        }
    }
}

/// A conclusion and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConclusionRecord {
    /// The conclusion as issued.
    pub issued: ConclusionIssued,
    /// The `conclusion_issued` event.
    pub provenance: Provenance,
    /// The first event after it that changed its inputs (new evidence, a screening, a
    /// retraction, a human decision).
    pub stale_since: Option<StaleCause>,
    /// The conclusion that replaced it.
    pub superseded_by: Option<ConclusionId>,
}

/// What made a conclusion stale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleCause {
    /// The event kind.
    pub kind: String,
    /// What it concerned (an evidence or conflict id).
    pub subject: String,
    /// The event.
    pub provenance: Provenance,
}

/// Something in the log that did not fit the state; folding went on without it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anomaly {
    /// The event's ledger position.
    pub seq: u64,
    /// Its kind.
    pub kind: String,
    /// What did not fit.
    pub detail: String,
}

/// Stream versions at which the workflow last moved; `decide` orders steps by them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marks {
    /// Last evidence change: added, screened or retracted.
    pub(crate) evidence_changed: Option<Cite>,
    /// Last run of the conflict rules.
    pub(crate) conflicts_run: Option<Cite>,
    /// Last run that adjudicated or dissolved something.
    pub(crate) adjudication_changed: Option<Cite>,
    /// Last human decision.
    pub(crate) human_decided: Option<Cite>,
    /// Last decision matrix.
    pub(crate) matrix_built: Option<Cite>,
}

pub(crate) fn version_of(cite: &Option<Cite>) -> u64 {
    cite.as_ref().map_or(0, |c| c.version)
}

/// A research task as its events made it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    version: u64,
    last_seq: Option<u64>,
    task: Option<TaskInfo>,
    sub_questions: Vec<SubQuestionRecord>,
    searches: Vec<Recorded<SearchRecorded>>,
    evidence: Vec<EvidenceRecord>,
    conflicts: Vec<ConflictRecord>,
    syntheses: Vec<Recorded<SynthesisRecorded>>,
    matrices: Vec<Recorded<DecisionMatrixBuilt>>,
    conclusions: Vec<ConclusionRecord>,
    explanations: Vec<Recorded<ExplanationRecorded>>,
    tool_calls: Vec<Recorded<ExternalToolCalled>>,
    closed: Option<Recorded<crate::event::TaskClosed>>,
    marks: Marks,
    anomalies: Vec<Anomaly>,
}

/// Folds one event into the state. Never fails: what does not fit becomes an [`Anomaly`].
pub fn evolve(state: &mut TaskState, event: &Event, meta: &EventMeta) {
    state.apply(event, meta);
}

impl TaskState {
    /// A task with no events: not opened.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds a sequence of events.
    pub fn from_events<'a>(events: impl IntoIterator<Item = (&'a Event, &'a EventMeta)>) -> Self {
        let mut state = Self::default();
        for (event, meta) in events {
            state.apply(event, meta);
        }
        state
    }

    fn anomaly(&mut self, meta: &EventMeta, event: &Event, detail: impl Into<String>) {
        self.anomalies.push(Anomaly {
            seq: meta.seq,
            kind: event.kind().to_string(),
            detail: detail.into(),
        });
    }

    fn apply(&mut self, event: &Event, meta: &EventMeta) {
        self.check_order(event, meta);
        let provenance = Provenance::of(meta);
        if let Event::TaskOpened(opened) = event {
            self.task_opened(meta, event, opened, provenance);
            return;
        }
        if self.task.is_none() {
            self.anomaly(meta, event, "the task was not opened");
            return;
        }
        if self.closed.is_some() {
            self.anomaly(meta, event, "the task was already closed");
            return;
        }
        match event {
            Event::TaskOpened(_) => {}
            Event::SubQuestionsExpanded(e) => {
                self.sub_questions_expanded(meta, event, e, provenance)
            }
            Event::SearchRecorded(e) => self.searches.push(Recorded::of(e, provenance)),
            Event::EvidenceAdded(e) => self.evidence_added(meta, event, e, provenance),
            Event::EvidenceScreened(e) => self.evidence_screened(meta, event, e, provenance),
            Event::EvidenceRetracted(e) => self.evidence_retracted(meta, event, e, provenance),
            Event::SynthesisRecorded(e) => self.syntheses.push(Recorded::of(e, provenance)),
            Event::ConflictsAdjudicated(e) => {
                self.conflicts_adjudicated(meta, event, e, provenance)
            }
            Event::ConflictResolved(_) | Event::AdjudicationAppealed(_) => {
                self.decision(meta, event, provenance);
            }
            Event::DecisionMatrixBuilt(e) => {
                self.marks.matrix_built = Some(provenance.cite);
                self.matrices.push(Recorded::of(e, provenance));
            }
            Event::ConclusionIssued(e) => self.conclusion_issued(meta, event, e, provenance),
            Event::ExplanationRecorded(e) => {
                if self.conclusion_index(&e.conclusion_id).is_none() {
                    self.anomaly(meta, event, format!("no conclusion {}", e.conclusion_id));
                }
                self.explanations.push(Recorded::of(e, provenance));
            }
            Event::ExternalToolCalled(e) => self.tool_calls.push(Recorded::of(e, provenance)),
            Event::TaskClosed(e) => self.closed = Some(Recorded::of(e, provenance)),
        }
    }

    /// Counts the event into the stream's version and notes one out of order.
    fn check_order(&mut self, event: &Event, meta: &EventMeta) {
        self.version = self.version.saturating_add(1);
        if meta.stream_version != self.version {
            self.anomaly(
                meta,
                event,
                format!(
                    "stream version {} where {} was expected",
                    meta.stream_version, self.version
                ),
            );
        }
        if let Some(last) = self.last_seq
            && meta.seq <= last
        {
            self.anomaly(
                meta,
                event,
                format!("seq {} does not follow {last}", meta.seq),
            );
        }
        self.last_seq = Some(meta.seq);
    }

    fn task_opened(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        opened: &TaskOpened,
        provenance: Provenance,
    ) {
        if self.task.is_some() {
            self.anomaly(meta, event, "the task was already opened");
            return;
        }
        self.task = Some(TaskInfo {
            task_id: opened.task_id.clone(),
            question: opened.question.clone(),
            constraints: opened.constraints.clone(),
            research_date: opened.research_date,
            mode: opened.mode,
            rules: opened.rules.clone(),
            conflict_decisions: opened.conflict_decisions,
            opened: provenance,
        });
    }

    fn sub_questions_expanded(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        e: &SubQuestionsExpanded,
        provenance: Provenance,
    ) {
        for sub_question in &e.sub_questions {
            if self.sub_question(&sub_question.id).is_some() {
                self.anomaly(
                    meta,
                    event,
                    format!("sub-question {} exists already", sub_question.id),
                );
                continue;
            }
            self.sub_questions.push(SubQuestionRecord {
                sub_question: sub_question.clone(),
                provenance: provenance.clone(),
            });
        }
    }

    fn evidence_added(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        e: &EvidenceAdded,
        provenance: Provenance,
    ) {
        if self.evidence_index(&e.evidence_id).is_some() {
            self.anomaly(
                meta,
                event,
                format!("evidence {} exists already", e.evidence_id),
            );
            return;
        }
        self.evidence.push(EvidenceRecord {
            added: e.clone(),
            provenance: provenance.clone(),
            screenings: Vec::new(),
            retraction: None,
        });
        self.evidence_changed(event, &e.evidence_id, &provenance);
    }

    fn evidence_screened(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        e: &EvidenceScreened,
        provenance: Provenance,
    ) {
        let Some(index) = self.evidence_index(&e.evidence_id) else {
            self.anomaly(meta, event, format!("no evidence {}", e.evidence_id));
            return;
        };
        if self.evidence[index].retraction.is_some() {
            self.anomaly(
                meta,
                event,
                format!("evidence {} is retracted", e.evidence_id),
            );
            return;
        }
        if e.decision == ScreeningDecision::Adopt && e.stance.is_none() {
            self.anomaly(
                meta,
                event,
                format!(
                    "evidence {} adopted without a stance; it cannot be used",
                    e.evidence_id
                ),
            );
        }
        self.evidence[index].screenings.push(ScreeningRecord {
            decision: e.decision,
            stance: e.stance,
            sub_question: e.sub_question.clone(),
            reason: e.reason.clone(),
            provenance: provenance.clone(),
        });
        self.evidence_changed(event, &e.evidence_id, &provenance);
    }

    fn evidence_retracted(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        e: &EvidenceRetracted,
        provenance: Provenance,
    ) {
        let Some(index) = self.evidence_index(&e.evidence_id) else {
            self.anomaly(meta, event, format!("no evidence {}", e.evidence_id));
            return;
        };
        if self.evidence[index].retraction.is_some() {
            self.anomaly(
                meta,
                event,
                format!("evidence {} is already retracted", e.evidence_id),
            );
            return;
        }
        self.evidence[index].retraction = Some(RetractionRecord {
            reason: e.reason.clone(),
            provenance: provenance.clone(),
        });
        self.evidence_changed(event, &e.evidence_id, &provenance);
    }

    /// Marks the evidence changed, and the conclusion stale when one stands.
    fn evidence_changed(
        &mut self,
        event: &Event,
        evidence_id: &EvidenceId,
        provenance: &Provenance,
    ) {
        self.marks.evidence_changed = Some(provenance.cite);
        self.mark_stale(event, evidence_id.as_str(), provenance);
    }

    fn conflicts_adjudicated(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        e: &ConflictsAdjudicated,
        provenance: Provenance,
    ) {
        let mut changed = false;
        for adjudication in &e.adjudications {
            if self.conflict_index(&adjudication.conflict_id).is_some() {
                self.anomaly(
                    meta,
                    event,
                    format!("conflict {} exists already", adjudication.conflict_id),
                );
                continue;
            }
            if let Some(old) = &adjudication.supersedes {
                self.supersede(meta, event, old, &adjudication.conflict_id, &provenance);
            }
            self.conflicts.push(ConflictRecord {
                adjudication: adjudication.clone(),
                provenance: provenance.clone(),
                human: Vec::new(),
                superseded_by: None,
                dissolved: None,
                superseded_at: None,
            });
            changed = true;
        }
        for id in &e.dissolved {
            match self.conflict_index(id) {
                Some(i) if self.conflicts[i].is_current() => {
                    self.conflicts[i].dissolved = Some(provenance.clone());
                    changed = true;
                }
                Some(_) => {
                    self.anomaly(meta, event, format!("conflict {id} was no longer current"))
                }
                None => self.anomaly(meta, event, format!("no conflict {id} to dissolve")),
            }
        }
        self.marks.conflicts_run = Some(provenance.cite);
        if changed {
            self.marks.adjudication_changed = Some(provenance.cite);
        }
    }

    /// Marks conflict `old` superseded by `new`, when it is still current.
    fn supersede(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        old: &ConflictId,
        new: &ConflictId,
        provenance: &Provenance,
    ) {
        match self.conflict_index(old) {
            Some(i) if self.conflicts[i].is_current() => {
                self.conflicts[i].superseded_by = Some(new.clone());
                self.conflicts[i].superseded_at = Some(provenance.clone());
            }
            Some(_) => self.anomaly(meta, event, format!("conflict {old} was no longer current")),
            None => self.anomaly(meta, event, format!("no conflict {old} to supersede")),
        }
    }

    fn conclusion_issued(
        &mut self,
        meta: &EventMeta,
        event: &Event,
        e: &ConclusionIssued,
        provenance: Provenance,
    ) {
        if self.conclusion_index(&e.conclusion_id).is_some() {
            self.anomaly(
                meta,
                event,
                format!("conclusion {} exists already", e.conclusion_id),
            );
            return;
        }
        let current = self
            .current_conclusion()
            .map(|c| c.issued.conclusion_id.clone());
        if current != e.supersedes {
            self.anomaly(
                meta,
                event,
                format!(
                    "supersedes {} but the current conclusion is {}",
                    e.supersedes.as_ref().map_or("none", |c| c.as_str()),
                    current.as_ref().map_or("none", |c| c.as_str())
                ),
            );
        }
        if let Some(record) = self.conclusions.last_mut()
            && record.superseded_by.is_none()
        {
            record.superseded_by = Some(e.conclusion_id.clone());
        }
        self.conclusions.push(ConclusionRecord {
            issued: e.clone(),
            provenance,
            stale_since: None,
            superseded_by: None,
        });
    }

    /// A decision on a conflict: a resolution of a pending one, or an appeal.
    fn decision(&mut self, meta: &EventMeta, event: &Event, provenance: Provenance) {
        let (conflict_id, kind, outcome, reason, decided_by) = match event {
            Event::ConflictResolved(e) => (
                &e.conflict_id,
                HumanDecisionKind::Resolution,
                e.outcome,
                &e.reason,
                &e.decided_by,
            ),
            Event::AdjudicationAppealed(e) => (
                &e.conflict_id,
                HumanDecisionKind::Appeal,
                e.outcome,
                &e.reason,
                &e.decided_by,
            ),
            _ => return,
        };
        let Some(index) = self.conflict_index(conflict_id) else {
            self.anomaly(meta, event, format!("no conflict {conflict_id}"));
            return;
        };
        if !self.conflicts[index].is_current() {
            self.anomaly(
                meta,
                event,
                format!("conflict {conflict_id} is no longer current"),
            );
            return;
        }
        let automatic = self.conflicts[index].adjudication.tier;
        let expected = if automatic == Tier::Pending {
            HumanDecisionKind::Resolution
        } else {
            HumanDecisionKind::Appeal
        };
        if kind != expected {
            self.anomaly(
                meta,
                event,
                format!(
                    "conflict {conflict_id} was adjudicated `{}`",
                    automatic.name()
                ),
            );
        }
        self.conflicts[index].human.push(HumanDecision {
            kind,
            outcome,
            reason: reason.to_string(),
            provenance: provenance.clone(),
            decided_by: decided_by.clone(),
        });
        self.marks.human_decided = Some(provenance.cite);
        self.mark_stale(event, conflict_id.as_str(), &provenance);
    }

    fn mark_stale(&mut self, event: &Event, subject: &str, provenance: &Provenance) {
        if let Some(record) = self.conclusions.last_mut()
            && record.superseded_by.is_none()
            && record.stale_since.is_none()
        {
            record.stale_since = Some(StaleCause {
                kind: event.kind().to_string(),
                subject: subject.to_string(),
                provenance: provenance.clone(),
            });
        }
    }

    fn evidence_index(&self, id: &EvidenceId) -> Option<usize> {
        self.evidence.iter().position(|e| e.id() == id)
    }

    fn conflict_index(&self, id: &ConflictId) -> Option<usize> {
        self.conflicts.iter().position(|c| c.id() == id)
    }

    fn conclusion_index(&self, id: &ConclusionId) -> Option<usize> {
        self.conclusions
            .iter()
            .position(|c| &c.issued.conclusion_id == id)
    }

    // ----- queries -----

    /// Events folded so far: the task's stream version.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// What the task was opened with; none before it was.
    pub fn task(&self) -> Option<&TaskInfo> {
        self.task.as_ref()
    }

    /// The task's status; none before it was opened.
    pub fn status(&self) -> Option<TaskStatus> {
        self.task.as_ref()?;
        if self.closed.is_some() {
            return Some(TaskStatus::Closed);
        }
        Some(match self.current_conclusion() {
            None => TaskStatus::Active,
            Some(c) if c.stale_since.is_some() => TaskStatus::Stale,
            Some(_) => TaskStatus::Concluded,
        })
    }

    /// Whether the task is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// The closing, if any.
    pub fn closed(&self) -> Option<&Recorded<crate::event::TaskClosed>> {
        self.closed.as_ref()
    }

    /// Sub-questions in the order added.
    pub fn sub_questions(&self) -> &[SubQuestionRecord] {
        &self.sub_questions
    }

    /// A sub-question by id.
    pub fn sub_question(&self, id: &SubQuestionId) -> Option<&SubQuestionRecord> {
        self.sub_questions.iter().find(|s| &s.sub_question.id == id)
    }

    /// Searches in the order recorded.
    pub fn searches(&self) -> &[Recorded<SearchRecorded>] {
        &self.searches
    }

    /// Evidence items in the order added.
    pub fn evidence(&self) -> &[EvidenceRecord] {
        &self.evidence
    }

    /// An evidence item by id.
    pub fn evidence_item(&self, id: &EvidenceId) -> Option<&EvidenceRecord> {
        self.evidence.iter().find(|e| e.id() == id)
    }

    /// Items currently on the losing side of their scope's adjudication.
    pub fn overruled(&self) -> BTreeSet<EvidenceId> {
        let mut out = BTreeSet::new();
        for conflict in self.conflicts.iter().filter(|c| c.is_current()) {
            let Some(winner) = conflict.winner() else {
                continue;
            };
            for participant in &conflict.adjudication.participants {
                if participant.side == winner {
                    continue;
                }
                if let Some(item) = self.evidence_item(&participant.evidence_id)
                    && item.recorded_status() == EvidenceStatus::Adopted
                    && item.stance() == Some(participant.side.stance())
                {
                    out.insert(participant.evidence_id.clone());
                }
            }
        }
        out
    }

    /// The status of an item, `overruled` included.
    pub fn evidence_status(&self, id: &EvidenceId) -> Option<EvidenceStatus> {
        let item = self.evidence_item(id)?;
        let status = item.recorded_status();
        if status == EvidenceStatus::Adopted && self.overruled().contains(id) {
            return Some(EvidenceStatus::Overruled);
        }
        Some(status)
    }

    /// Every item with its derived status, in the order added.
    pub fn evidence_with_status(&self) -> Vec<(&EvidenceRecord, EvidenceStatus)> {
        let overruled = self.overruled();
        self.evidence
            .iter()
            .map(|item| {
                let status = item.recorded_status();
                let status = if status == EvidenceStatus::Adopted && overruled.contains(item.id()) {
                    EvidenceStatus::Overruled
                } else {
                    status
                };
                (item, status)
            })
            .collect()
    }

    /// Every adjudication ever made, superseded ones included, in order.
    pub fn conflicts(&self) -> &[ConflictRecord] {
        &self.conflicts
    }

    /// A conflict by id.
    pub fn conflict(&self, id: &ConflictId) -> Option<&ConflictRecord> {
        self.conflicts.iter().find(|c| c.id() == id)
    }

    /// The adjudications in force, one per scope at most.
    pub fn current_conflicts(&self) -> impl Iterator<Item = &ConflictRecord> {
        self.conflicts.iter().filter(|c| c.is_current())
    }

    /// Every conclusion, oldest first.
    pub fn conclusions(&self) -> &[ConclusionRecord] {
        &self.conclusions
    }

    /// The latest conclusion, which no other supersedes.
    pub fn current_conclusion(&self) -> Option<&ConclusionRecord> {
        self.conclusions.last()
    }

    /// A conclusion by id.
    pub fn conclusion(&self, id: &ConclusionId) -> Option<&ConclusionRecord> {
        self.conclusions
            .iter()
            .find(|c| &c.issued.conclusion_id == id)
    }

    /// Every decision matrix, oldest first.
    pub fn matrices(&self) -> &[Recorded<DecisionMatrixBuilt>] {
        &self.matrices
    }

    /// The latest decision matrix.
    pub fn latest_matrix(&self) -> Option<&Recorded<DecisionMatrixBuilt>> {
        self.matrices.last()
    }

    /// The latest synthesis.
    pub fn latest_synthesis(&self) -> Option<&Recorded<SynthesisRecorded>> {
        self.syntheses.last()
    }

    /// The explanation of the current conclusion, if it was explained.
    pub fn current_explanation(&self) -> Option<&Recorded<ExplanationRecorded>> {
        self.explanation_of(&self.current_conclusion()?.issued.conclusion_id)
    }

    /// Every synthesis, oldest first.
    pub fn syntheses(&self) -> &[Recorded<SynthesisRecorded>] {
        &self.syntheses
    }

    /// Every explanation, oldest first.
    pub fn explanations(&self) -> &[Recorded<ExplanationRecorded>] {
        &self.explanations
    }

    /// The latest explanation of a conclusion.
    pub fn explanation_of(&self, id: &ConclusionId) -> Option<&Recorded<ExplanationRecorded>> {
        self.explanations
            .iter()
            .rev()
            .find(|e| &e.event.conclusion_id == id)
    }

    /// External tool calls, oldest first.
    pub fn tool_calls(&self) -> &[Recorded<ExternalToolCalled>] {
        &self.tool_calls
    }

    /// Events that did not fit, oldest first. Empty for any log `decide` wrote.
    pub fn anomalies(&self) -> &[Anomaly] {
        &self.anomalies
    }

    pub(crate) fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    pub(crate) fn marks(&self) -> &Marks {
        &self.marks
    }

    /// A stable encoding of the whole state (postcard), for the caller to hash: two replicas
    /// that folded the same events produce the same bytes.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Every field is a plain struct, Vec or Option with known lengths, so encoding cannot
        // fail; see `codec::append`.
        let bytes = postcard::to_stdvec(self);
        debug_assert!(bytes.is_ok(), "task state always encodes");
        bytes.unwrap_or_default()
    }

    /// The scopes of the task: the main question, then each sub-question in order, then any
    /// scope an item names that is not a known sub-question (only in a damaged log).
    pub(crate) fn scopes(&self) -> Vec<Option<SubQuestionId>> {
        let mut scopes: Vec<Option<SubQuestionId>> = vec![None];
        for sub_question in &self.sub_questions {
            scopes.push(Some(sub_question.sub_question.id.clone()));
        }
        for item in &self.evidence {
            let scope = item.scope().clone();
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        scopes
    }
}
