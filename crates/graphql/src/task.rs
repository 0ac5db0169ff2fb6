//! A research task: its state at the head or at any earlier version, its audit trail and the
//! why-graph of its verdict; and the task index a page at a time.
//!
//! `Task` is a `TaskState` at the head plus what only the whole task has: its session version,
//! time travel (`state(atVersion)`), its events and the why-graph. States are read models folded
//! from the ledger by the projector; the trail is read from the ledger itself.

use std::sync::Arc;

use async_graphql::{Context, ID, Json, MergedObject, Object, SimpleObject};
use chrono::{DateTime, Utc};
use serde_json::Value;
use service::ServiceError;
use service::projections::TaskListing;
use service::research::TaskState;
use service::research::ids::ConclusionId;

use crate::context;
use crate::enums::{EvidenceStatus, Mode, TaskStatus};
use crate::error::{blocking, invalid, to_gql};
use crate::ledger::LedgerEvent;
use crate::limits::{STORAGE_READ_POINTS, page_complexity, page_size};
use crate::page::{PageInfo, event_cursor, event_cursor_version};
use crate::views::{
    Conclusion, Conflict, DecisionMatrix, Evidence, Explanation, PendingAction, SubQuestion,
    WhyGraphView, conflicts_of, evidence_of, json_of,
};

/// A task's state at one version.
#[derive(Debug, Clone)]
pub(crate) struct StateView {
    task_id: String,
    state: Arc<TaskState>,
}

impl StateView {
    pub(crate) fn new(task_id: String, state: Arc<TaskState>) -> Self {
        StateView { task_id, state }
    }

    fn info(&self) -> async_graphql::Result<&service::research::state::TaskInfo> {
        self.state.task().ok_or_else(|| {
            to_gql(ServiceError::Unavailable(format!(
                "task {} has a state without its opening",
                self.task_id
            )))
        })
    }
}

/// A task as it stood at one version of its stream: what was known then, nothing later.
#[Object(name = "TaskState")]
impl StateView {
    /// The task.
    async fn task_id(&self) -> ID {
        ID(self.task_id.clone())
    }

    /// The stream version this is the state at: the task after its first `version` events.
    async fn version(&self) -> u64 {
        self.state.version()
    }

    /// The main question.
    async fn question(&self) -> async_graphql::Result<&str> {
        Ok(&self.info()?.question)
    }

    /// Constraints on the research, as given.
    async fn constraints(&self) -> async_graphql::Result<&[String]> {
        Ok(&self.info()?.constraints)
    }

    /// The date the research is as of, `YYYY-MM-DD`; recency counts from it.
    async fn research_date(&self) -> async_graphql::Result<String> {
        Ok(self.info()?.research_date.to_string())
    }

    /// How strictly the workflow is enforced.
    async fn mode(&self) -> async_graphql::Result<Mode> {
        Ok(self.info()?.mode.into())
    }

    /// The rule set, every parameter as recorded when the task was opened.
    async fn rules(&self) -> async_graphql::Result<Json<Value>> {
        Ok(json_of(&self.info()?.rules))
    }

    /// The task's status.
    async fn status(&self) -> async_graphql::Result<TaskStatus> {
        self.state
            .status()
            .map(Into::into)
            .ok_or_else(|| invalid("atVersion", "the task had no status yet"))
    }

    /// When the task was opened.
    async fn opened_at(&self) -> async_graphql::Result<DateTime<Utc>> {
        Ok(self.info()?.opened.recorded_at)
    }

    /// Who opened it.
    async fn opened_by(&self) -> async_graphql::Result<&str> {
        Ok(&self.info()?.opened.actor)
    }

    /// The sub-questions, in order.
    async fn sub_questions(&self) -> Vec<SubQuestion> {
        self.state
            .sub_questions()
            .iter()
            .map(|q| SubQuestion {
                id: ID(q.sub_question.id.to_string()),
                text: q.sub_question.text.clone(),
                added: (&q.provenance).into(),
            })
            .collect()
    }

    /// Evidence items in the order they were added; only those of one status when given.
    async fn evidence(&self, status: Option<EvidenceStatus>) -> Vec<Evidence> {
        let mut all = evidence_of(&self.state);
        if let Some(status) = status {
            all.retain(|e| e.status == status);
        }
        all
    }

    /// Every adjudication, superseded ones included, oldest first; only those in force with
    /// `currentOnly`.
    async fn conflicts(&self, current_only: Option<bool>) -> Vec<Conflict> {
        conflicts_of(&self.state, current_only.unwrap_or(false))
    }

    /// The latest decision matrix.
    async fn decision_matrix(&self) -> Option<DecisionMatrix> {
        self.state
            .latest_matrix()
            .map(|m| DecisionMatrix::of(&m.event, &m.provenance))
    }

    /// The latest research synthesis: adopted evidence grouped into viewpoints by scope and
    /// stance.
    async fn synthesis(&self) -> Option<Json<Value>> {
        self.state.latest_synthesis().map(|s| json_of(&s.event))
    }

    /// The current conclusion (stale or not).
    async fn conclusion(&self) -> Option<Conclusion> {
        self.state
            .current_conclusion()
            .map(|c| Conclusion::of(c, &self.state))
    }

    /// Every conclusion, oldest first; superseded and stale ones are marked.
    async fn conclusions(&self) -> Vec<Conclusion> {
        self.state
            .conclusions()
            .iter()
            .map(|c| Conclusion::of(c, &self.state))
            .collect()
    }

    /// The recorded explanation of the current conclusion; none until one is recorded
    /// (`explainReasoning`).
    async fn explanation(&self) -> Option<Explanation> {
        let current = self.state.current_conclusion()?;
        self.state
            .explanation_of(&current.issued.conclusion_id)
            .map(|e| Explanation::of(&e.event, &e.provenance))
    }

    /// What the workflow expects next.
    async fn pending_actions(&self) -> Vec<PendingAction> {
        service::research::next_actions(&self.state)
            .into_iter()
            .map(|a| PendingAction {
                tool: a.tool.name().to_owned(),
                reason: a.reason,
            })
            .collect()
    }

    /// A few lines for people: status, counts, pending conflicts, the verdict, what is next.
    async fn summary(&self) -> Option<String> {
        self.state.summary().map(|s| s.text())
    }
}

/// What only the task as a whole has.
#[derive(Debug, Clone)]
pub(crate) struct TaskHead {
    task_id: String,
    version: u64,
}

/// A page of a task's audit trail.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct EventConnection {
    /// The events, in stream order.
    edges: Vec<EventEdge>,
    /// Where the page stands.
    page_info: PageInfo,
    /// The task's version in the ledger when the page was read.
    head_version: u64,
}

/// An event of a trail and its cursor.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct EventEdge {
    /// The event.
    node: LedgerEvent,
    /// Continue after it with `after`.
    cursor: String,
}

#[Object]
impl TaskHead {
    /// The task's id; also its stream in the ledger.
    async fn id(&self) -> ID {
        ID(self.task_id.clone())
    }

    /// The session version: the task's stream version, which `expectedVersion` guards.
    async fn session_version(&self) -> u64 {
        self.version
    }

    /// The task as it stood after its first `atVersion` events (time travel); at the head
    /// when none is given.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn state(
        &self,
        ctx: &Context<'_>,
        at_version: Option<u64>,
    ) -> async_graphql::Result<StateView> {
        if at_version == Some(0) {
            return Err(invalid(
                "atVersion",
                "stream versions start at 1 (the task's opening)",
            ));
        }
        let service = context::service(ctx)?.clone();
        let task_id = self.task_id.clone();
        let state = blocking(move || service.state_at(&task_id, at_version)).await?;
        Ok(StateView::new(self.task_id.clone(), state))
    }

    /// The why-graph of a conclusion (the current one when none is named): what it rests on,
    /// as the task stood when it was issued.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn why_graph(
        &self,
        ctx: &Context<'_>,
        conclusion_id: Option<ID>,
    ) -> async_graphql::Result<WhyGraphView> {
        let service = context::service(ctx)?.clone();
        let task_id = self.task_id.clone();
        let graph = blocking(move || {
            let id = conclusion_id.map(|c| ConclusionId::new(c.0));
            Ok(service.projector().why_graph(&task_id, id.as_ref())?)
        })
        .await?;
        Ok(WhyGraphView::from(&graph))
    }

    /// The audit trail: the task's events exactly as the ledger holds them, with their hashes,
    /// the hash each links to, what they were derived from and their decoded payload.
    #[graphql(complexity = "page_complexity(first, child_complexity)")]
    async fn events(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<EventConnection> {
        let limit = page_size(first, context::limits(ctx)?)?;
        let from = match &after {
            None => 1,
            Some(cursor) => event_cursor_version(cursor)
                .and_then(|v| v.checked_add(1))
                .ok_or_else(|| invalid("after", "not a cursor of this trail"))?,
        };
        let service = context::service(ctx)?.clone();
        let task_id = self.task_id.clone();
        let page = blocking(move || {
            Ok(service
                .projector()
                .audit_trail(&task_id, from, Some(limit))?)
        })
        .await?;
        let edges: Vec<EventEdge> = page
            .events
            .iter()
            .map(|e| EventEdge {
                node: LedgerEvent::of_trail(&self.task_id, e),
                cursor: event_cursor(e.stream_version),
            })
            .collect();
        Ok(EventConnection {
            page_info: PageInfo {
                has_next_page: page.next_version.is_some(),
                has_previous_page: from > 1,
                start_cursor: edges.first().map(|e| e.cursor.clone()),
                end_cursor: edges.last().map(|e| e.cursor.clone()),
            },
            edges,
            head_version: page.head_version,
        })
    }
}

/// A research task, read at its head.
#[derive(MergedObject, Debug, Clone)]
pub(crate) struct Task(TaskHead, StateView);

impl Task {
    /// The task at its head.
    pub(crate) fn at_head(task_id: String, state: Arc<TaskState>) -> Self {
        Task(
            TaskHead {
                task_id: task_id.clone(),
                version: state.version(),
            },
            StateView::new(task_id, state),
        )
    }
}

/// A page of the task index.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct TaskConnection {
    /// The tasks, in the order they were opened.
    edges: Vec<TaskEdge>,
    /// Where the page stands.
    page_info: PageInfo,
}

/// A task of the index and its cursor.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct TaskEdge {
    /// The task.
    node: Task,
    /// Continue after it with `after`.
    cursor: String,
}

impl TaskConnection {
    pub(crate) fn new(
        listings: Vec<(TaskListing, Arc<TaskState>)>,
        next_cursor: Option<String>,
        after: bool,
    ) -> Self {
        let edges: Vec<TaskEdge> = listings
            .into_iter()
            .map(|(listing, state)| TaskEdge {
                cursor: listing.cursor,
                node: Task::at_head(listing.task_id, state),
            })
            .collect();
        TaskConnection {
            page_info: PageInfo {
                has_next_page: next_cursor.is_some(),
                has_previous_page: after,
                start_cursor: edges.first().map(|e| e.cursor.clone()),
                end_cursor: edges.last().map(|e| e.cursor.clone()),
            },
            edges,
        }
    }
}
