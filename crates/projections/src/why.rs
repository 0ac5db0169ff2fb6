//! The why-graph of a conclusion: what it rests on, as nodes and edges an auditor can walk.
//!
//! From the conclusion to its four components, from each component to the evidence it was
//! computed from, from the conclusion to the adjudications it took into account, from each
//! adjudication to the items it upheld or overruled (the overruled ones are exactly why they
//! did not count), to the human decisions on it, and to the older adjudications of the same
//! scope it superseded, with the decisions on those marked superseded. Every node carries the
//! seq and hash of the event that established it, so each step can be checked in the ledger.
//!
//! The graph is built from the task as it stood when the conclusion was issued: what happened
//! afterwards cannot explain it. Whether it has since gone stale or been superseded is taken
//! from the task's head and shown on the conclusion's node.
//!
//! Edges point from what is explained to what explains it; every node is reachable from the
//! conclusion.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use research::TaskState;
use research::event::{EvidenceStatus, HumanOutcome, Side, Tier};
use research::ids::{Cite, ConclusionId, ConflictId, EvidenceId, Hash32, SubQuestionId};
use research::rules::{Stance, Verdict, VerdictRule};
use research::state::{
    ConclusionRecord, ConflictRecord, HumanDecisionKind, Provenance, StaleCause,
};
use serde::{Deserialize, Serialize};

use crate::error::QueryError;
use crate::limits::Limits;

/// The why-graph of one conclusion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhyGraph {
    /// The task.
    pub task_id: String,
    /// The conclusion explained.
    pub conclusion_id: ConclusionId,
    /// The task's version when it was issued: the graph shows the task as of then.
    pub as_of_version: u64,
    /// The id of the conclusion's node, where every walk starts.
    pub root: String,
    /// The nodes; the conclusion's first.
    pub nodes: Vec<WhyNode>,
    /// The edges, from what is explained to what explains it.
    pub edges: Vec<WhyEdge>,
}

/// One fact of the graph and the event that established it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhyNode {
    /// Unique within the graph: `conclusion/cl-1`, `component/relevance`, `evidence/ev-3`,
    /// `conflict/cf-2`, `human/17` (by seq).
    pub id: String,
    /// One line for people.
    pub label: String,
    /// The event that established it.
    pub cite: Cite,
    /// Who caused that event.
    pub actor: String,
    /// When the ledger recorded it.
    pub recorded_at: DateTime<Utc>,
    /// What kind of fact it is, and its values.
    pub detail: NodeDetail,
}

/// The four components of a conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Mean relevance.
    Relevance,
    /// Agreement among the items that take a side.
    Consistency,
    /// Mean recency.
    Recency,
    /// Distinct sources.
    Diversity,
}

impl Component {
    /// The stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Component::Relevance => "relevance",
            Component::Consistency => "consistency",
            Component::Recency => "recency",
            Component::Diversity => "diversity",
        }
    }
}

/// Why a human decision no longer applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Superseded {
    /// A later decision on the same adjudication replaced it.
    LaterDecision {
        /// The later decision's event.
        seq: u64,
    },
    /// Its scope's evidence changed and the scope was adjudicated afresh (or its conflict
    /// dissolved, when `conflict_id` is none).
    FreshAdjudication {
        /// The adjudication that replaced the one it decided.
        conflict_id: Option<ConflictId>,
    },
}

/// What a node stands for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeDetail {
    /// The conclusion explained.
    Conclusion {
        /// Its id.
        conclusion_id: ConclusionId,
        /// The verdict.
        stance: Verdict,
        /// The clause of the stance rule that gave it.
        rule: VerdictRule,
        /// The confidence, unrounded.
        confidence: f64,
        /// Share of its items that clients added.
        client_share: f64,
        /// The conclusion it superseded.
        supersedes: Option<ConclusionId>,
        /// Whether it is the task's current conclusion.
        current: bool,
        /// Whether its inputs changed after it was issued.
        stale: bool,
        /// The first change, when it is stale.
        stale_cause: Option<StaleCause>,
        /// The conclusion that replaced it.
        superseded_by: Option<ConclusionId>,
    },
    /// One component of the confidence.
    Component {
        /// Which.
        name: Component,
        /// Its value, unrounded.
        value: f64,
        /// Its weight under the task's rules.
        weight: f64,
        /// `weight × value`.
        contribution: f64,
    },
    /// An evidence item.
    Evidence {
        /// Its id.
        evidence_id: EvidenceId,
        /// Its source.
        source: String,
        /// Who brought it in: a source's name or `client`.
        origin: String,
        /// Its stance then.
        stance: Option<Stance>,
        /// Its status then, `overruled` included.
        status: EvidenceStatus,
        /// Whether the conclusion used it.
        used: bool,
        /// Its content hash.
        content_hash: Hash32,
        /// Its relevance.
        relevance: f64,
        /// Its recency.
        recency: f64,
        /// Its source's authority.
        authority: f64,
        /// The screening in force then.
        screened: Option<Cite>,
    },
    /// An adjudication of one scope.
    Conflict {
        /// Its id.
        conflict_id: ConflictId,
        /// Its scope; none for the main question.
        scope: Option<SubQuestionId>,
        /// Its tier then (`human` once a person decided).
        tier: Tier,
        /// Its winner then.
        winner: Option<Side>,
        /// The human decision in force then.
        resolution: Option<HumanOutcome>,
        /// The tier the rules gave it.
        automatic_tier: Tier,
        /// The winner the rules gave it.
        automatic_winner: Option<Side>,
        /// Whether it was still its scope's adjudication then.
        current: bool,
        /// The adjudication that replaced it.
        superseded_by: Option<ConflictId>,
    },
    /// A person's resolution of a pending conflict, or appeal of an automatic adjudication.
    HumanDecision {
        /// The adjudication decided.
        conflict_id: ConflictId,
        /// Resolution or appeal.
        decision: HumanDecisionKind,
        /// The outcome.
        outcome: HumanOutcome,
        /// Why, as the person put it.
        reason: String,
        /// Whether it was the decision in force then.
        in_force: bool,
        /// Why it no longer applied then, if it did not.
        superseded: Option<Superseded>,
    },
}

/// How one node explains another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// Conclusion → one of its components.
    Component,
    /// Component → an item it was computed from.
    Input,
    /// Conclusion → an adjudication in force when it was issued.
    Adjudication,
    /// Adjudication → an item of the winning side, which counted.
    Upheld,
    /// Adjudication → an item of the losing side, which therefore did not count.
    Overruled,
    /// Adjudication decided "both stand" → an item of either side, which counted.
    Stands,
    /// Pending adjudication → an item of either side, which counted while a person is awaited.
    Pending,
    /// Adjudication → a human decision on it.
    DecidedBy,
    /// Adjudication → the older adjudication of the same scope it replaced.
    Supersedes,
}

/// An edge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhyEdge {
    /// The node explained.
    pub from: String,
    /// The node that explains it.
    pub to: String,
    /// How.
    pub kind: EdgeKind,
}

/// Collects nodes once each, within the node budget.
struct Builder {
    nodes: Vec<WhyNode>,
    ids: BTreeMap<String, usize>,
    edges: Vec<WhyEdge>,
    max: usize,
}

impl Builder {
    fn has(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    fn node(
        &mut self,
        id: String,
        label: String,
        provenance: &Provenance,
        detail: NodeDetail,
    ) -> Result<(), QueryError> {
        if self.has(&id) {
            return Ok(());
        }
        if self.nodes.len() >= self.max {
            return Err(QueryError::LimitExceeded {
                limit: "why_graph_nodes_max",
                max: self.max as u64,
                requested: self.max as u64 + 1,
            });
        }
        self.ids.insert(id.clone(), self.nodes.len());
        self.nodes.push(WhyNode {
            id,
            label,
            cite: provenance.cite,
            actor: provenance.actor.clone(),
            recorded_at: provenance.recorded_at,
            detail,
        });
        Ok(())
    }

    fn edge(&mut self, from: &str, to: &str, kind: EdgeKind) {
        self.edges.push(WhyEdge {
            from: from.to_owned(),
            to: to.to_owned(),
            kind,
        });
    }
}

fn evidence_node_id(id: &EvidenceId) -> String {
    format!("evidence/{id}")
}

fn conflict_node_id(id: &ConflictId) -> String {
    format!("conflict/{id}")
}

fn scope_name(scope: &Option<SubQuestionId>) -> String {
    scope
        .as_ref()
        .map_or_else(|| "main question".to_string(), |s| s.to_string())
}

/// Adds an evidence item's node as the task stood then; `fallback` cites the conclusion when
/// the item is unknown to the state (only in a damaged log).
fn add_evidence(
    b: &mut Builder,
    then: &TaskState,
    id: &EvidenceId,
    used: bool,
    fallback: &Provenance,
) -> Result<String, QueryError> {
    let node_id = evidence_node_id(id);
    if b.has(&node_id) {
        return Ok(node_id);
    }
    let status = then
        .evidence_status(id)
        .unwrap_or(EvidenceStatus::Candidate);
    let (provenance, detail, label) = match then.evidence_item(id) {
        Some(item) => {
            let a = &item.added;
            let stance = item.stance();
            let label = format!(
                "{id} {} ({}), {}",
                stance.map_or("no stance", Stance::name),
                a.source,
                status.name()
            );
            (
                &item.provenance,
                NodeDetail::Evidence {
                    evidence_id: id.clone(),
                    source: a.source.clone(),
                    origin: a.origin.clone(),
                    stance,
                    status,
                    used,
                    content_hash: a.content_hash,
                    relevance: a.relevance,
                    recency: a.recency,
                    authority: a.authority,
                    screened: item.screenings.last().map(|s| s.provenance.cite),
                },
                label,
            )
        }
        None => (
            fallback,
            NodeDetail::Evidence {
                evidence_id: id.clone(),
                source: String::new(),
                origin: String::new(),
                stance: None,
                status,
                used,
                content_hash: Hash32::default(),
                relevance: 0.0,
                recency: 0.0,
                authority: 0.0,
                screened: None,
            },
            format!("{id} (not in the task's log)"),
        ),
    };
    b.node(node_id.clone(), label, provenance, detail)?;
    Ok(node_id)
}

/// Adds an adjudication's node and its human decisions; returns its node id.
fn add_conflict(b: &mut Builder, record: &ConflictRecord) -> Result<String, QueryError> {
    let node_id = conflict_node_id(record.id());
    if b.has(&node_id) {
        return Ok(node_id);
    }
    let outcome = match (record.winner(), record.resolution()) {
        (Some(side), _) => format!("{} wins", side.name()),
        (None, Some(HumanOutcome::BothStand)) => "both stand".to_string(),
        (None, _) => "pending".to_string(),
    };
    b.node(
        node_id.clone(),
        format!(
            "{} ({}): {}, {outcome}",
            record.id(),
            scope_name(&record.adjudication.scope),
            record.tier().name()
        ),
        &record.provenance,
        NodeDetail::Conflict {
            conflict_id: record.id().clone(),
            scope: record.adjudication.scope.clone(),
            tier: record.tier(),
            winner: record.winner(),
            resolution: record.resolution(),
            automatic_tier: record.adjudication.tier,
            automatic_winner: record.adjudication.winner,
            current: record.is_current(),
            superseded_by: record.superseded_by.clone(),
        },
    )?;
    add_human_decisions(b, record, &node_id)?;
    Ok(node_id)
}

/// The conclusion's node, the root: `record` as issued, `now` as it stands.
fn add_conclusion(
    b: &mut Builder,
    record: &ConclusionRecord,
    now: &ConclusionRecord,
    current: bool,
) -> Result<String, QueryError> {
    let issued = &record.issued;
    let conclusion_id = &issued.conclusion_id;
    let root = format!("conclusion/{conclusion_id}");
    b.node(
        root.clone(),
        format!(
            "{conclusion_id}: {}, confidence {:.4}",
            issued.stance.name(),
            issued.confidence
        ),
        &record.provenance,
        NodeDetail::Conclusion {
            conclusion_id: conclusion_id.clone(),
            stance: issued.stance,
            rule: issued.rule,
            confidence: issued.confidence,
            client_share: issued.client_share,
            supersedes: issued.supersedes.clone(),
            current,
            stale: now.stale_since.is_some(),
            stale_cause: now.stale_since.clone(),
            superseded_by: now.superseded_by.clone(),
        },
    )?;
    Ok(root)
}

/// The four components of the confidence, each with its weight and contribution.
fn add_components(
    b: &mut Builder,
    root: &str,
    record: &ConclusionRecord,
) -> Result<(), QueryError> {
    let c = &record.issued.components;
    let w = &record.issued.rules.weights;
    let components = [
        (Component::Relevance, c.relevance, w.relevance),
        (Component::Consistency, c.consistency, w.consistency),
        (Component::Recency, c.recency, w.recency),
        (Component::Diversity, c.diversity, w.diversity),
    ];
    for (name, value, weight) in components {
        let id = format!("component/{}", name.name());
        b.node(
            id.clone(),
            format!(
                "{} {value:.4} × weight {weight} = {:.4}",
                name.name(),
                weight * value
            ),
            &record.provenance,
            NodeDetail::Component {
                name,
                value,
                weight,
                contribution: weight * value,
            },
        )?;
        b.edge(root, &id, EdgeKind::Component);
    }
    Ok(())
}

/// The human decisions on a conflict, each marked in force or superseded.
fn add_human_decisions(
    b: &mut Builder,
    record: &ConflictRecord,
    node_id: &str,
) -> Result<(), QueryError> {
    let last = record.human.len().saturating_sub(1);
    for (i, decision) in record.human.iter().enumerate() {
        let superseded = if i < last {
            record
                .human
                .get(i + 1)
                .map(|next| Superseded::LaterDecision {
                    seq: next.provenance.cite.seq,
                })
        } else if !record.is_current() {
            Some(Superseded::FreshAdjudication {
                conflict_id: record.superseded_by.clone(),
            })
        } else {
            None
        };
        let human_id = format!("human/{}", decision.provenance.cite.seq);
        let kind = match decision.kind {
            HumanDecisionKind::Resolution => "resolution",
            HumanDecisionKind::Appeal => "appeal",
        };
        b.node(
            human_id.clone(),
            format!(
                "{kind} by {}: {}{}",
                decision.provenance.actor,
                decision.outcome.name(),
                if superseded.is_some() {
                    " (superseded)"
                } else {
                    ""
                }
            ),
            &decision.provenance,
            NodeDetail::HumanDecision {
                conflict_id: record.id().clone(),
                decision: decision.kind,
                outcome: decision.outcome,
                reason: decision.reason.clone(),
                in_force: superseded.is_none(),
                superseded,
            },
        )?;
        b.edge(node_id, &human_id, EdgeKind::DecidedBy);
    }
    Ok(())
}

/// An adjudication the conclusion used: the conflict, its participants with how each fared,
/// and the older adjudications of its scope with the human decisions they carried.
fn add_adjudication(
    b: &mut Builder,
    then: &TaskState,
    root: &str,
    record: &ConclusionRecord,
    conflict: &ConflictRecord,
) -> Result<(), QueryError> {
    let conflict_id = add_conflict(b, conflict)?;
    b.edge(root, &conflict_id, EdgeKind::Adjudication);
    let winner = conflict.winner();
    for participant in &conflict.adjudication.participants {
        let kind = match winner {
            Some(side) if side == participant.side => EdgeKind::Upheld,
            Some(_) => EdgeKind::Overruled,
            None if conflict.is_pending() => EdgeKind::Pending,
            None => EdgeKind::Stands,
        };
        let used = record
            .issued
            .evidence
            .iter()
            .any(|e| e.evidence_id == participant.evidence_id);
        let id = add_evidence(
            b,
            then,
            &participant.evidence_id,
            used,
            &conflict.provenance,
        )?;
        b.edge(&conflict_id, &id, kind);
    }
    let mut newer = conflict;
    while let Some(older_id) = &newer.adjudication.supersedes {
        let Some(older) = then.conflict(older_id) else {
            break;
        };
        let newer_id = conflict_node_id(newer.id());
        let seen = b.has(&conflict_node_id(older.id()));
        let older_node = add_conflict(b, older)?;
        b.edge(&newer_id, &older_node, EdgeKind::Supersedes);
        if seen {
            break;
        }
        newer = older;
    }
    Ok(())
}

/// Builds the graph of `conclusion_id` from `then` (the task when it was issued) and `head`
/// (the task now).
pub(crate) fn build(
    task_id: &str,
    then: &TaskState,
    head: &TaskState,
    conclusion_id: &ConclusionId,
    limits: &Limits,
) -> Result<WhyGraph, QueryError> {
    let not_found = || QueryError::ConclusionNotFound {
        task_id: task_id.to_owned(),
        conclusion_id: Some(conclusion_id.to_string()),
    };
    let record = then.conclusion(conclusion_id).ok_or_else(not_found)?;
    let now = head.conclusion(conclusion_id).ok_or_else(not_found)?;
    let mut b = Builder {
        nodes: Vec::new(),
        ids: BTreeMap::new(),
        edges: Vec::new(),
        max: limits.why_graph_nodes_max.max(1),
    };
    let current = head
        .current_conclusion()
        .is_some_and(|c| &c.issued.conclusion_id == conclusion_id);
    let root = add_conclusion(&mut b, record, now, current)?;
    add_components(&mut b, &root, record)?;
    for used in &record.issued.evidence {
        let id = add_evidence(&mut b, then, &used.evidence_id, true, &record.provenance)?;
        // Every item enters the means of relevance and recency and the count of sources; only
        // items that take a side enter consistency.
        for name in [
            Component::Relevance,
            Component::Consistency,
            Component::Recency,
            Component::Diversity,
        ] {
            if name == Component::Consistency && used.stance == Stance::Neutral {
                continue;
            }
            b.edge(&format!("component/{}", name.name()), &id, EdgeKind::Input);
        }
    }
    for used in &record.issued.adjudications {
        if let Some(conflict) = then.conflict(&used.conflict_id) {
            add_adjudication(&mut b, then, &root, record, conflict)?;
        }
    }

    Ok(WhyGraph {
        task_id: task_id.to_owned(),
        conclusion_id: conclusion_id.clone(),
        as_of_version: record.provenance.cite.version,
        root,
        nodes: b.nodes,
        edges: b.edges,
    })
}
