//! Resources: the ledger's read models under the URIs of SPEC §10, listed, readable at head or
//! at a version, and described by templates.
//!
//! ```text
//! ledger://tasks                                         the task index (first page)
//! ledger://tasks/{task_id}/summary                       a task as it stands, compact
//! ledger://tasks/{task_id}/state                         a task as it stands, in full
//! ledger://tasks/{task_id}/state/{version}               a task as it stood after `version` events
//! ledger://tasks/{task_id}/events{?cursor}               its audit trail, a page at a time
//! ledger://tasks/{task_id}/conclusion                    its current conclusion card
//! ledger://tasks/{task_id}/conclusions/{conclusion_id}   one conclusion, as issued (never changes)
//! ledger://checkpoints/latest                            the latest signed checkpoint
//! ```
//!
//! Every read is JSON (`application/json`). A resource that does not exist — an unknown task,
//! a version beyond the head, a task with no conclusion yet — is a protocol error, as MCP
//! wants: `-32002` for 2025-era clients, `-32602` from 2026-07-28.

use projections::TaskQuery;
use research::TaskState;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};
use serde_json::{Value, json};

use crate::bridge::Bridge;
use crate::error::{resource_error, resource_not_found};

const JSON: &str = "application/json";
const PREFIX: &str = "ledger://";

/// The resource templates: URI template, name and what it is.
pub const RESOURCE_TEMPLATES: [(&str, &str, &str); 6] = [
    (
        "ledger://tasks/{task_id}/summary",
        "task-summary",
        "A research task as it stands, compact: status, counts, each item's id, source, date, relevance, status and summary, the conflicts in force, the verdict and the steps due.",
    ),
    (
        "ledger://tasks/{task_id}/state",
        "task-state",
        "A research task as it stands, in full: question, evidence with every field, conflicts with every decision, the current verdict and the steps due.",
    ),
    (
        "ledger://tasks/{task_id}/state/{version}",
        "task-state-at-version",
        "A research task as it stood after its first `version` events (time travel); such a state never changes.",
    ),
    (
        "ledger://tasks/{task_id}/events{?cursor}",
        "task-events",
        "A task's audit trail, a page at a time: each event with its seq, version, kind, actor, time, hashes and decoded payload; next_cursor reads on.",
    ),
    (
        "ledger://tasks/{task_id}/conclusion",
        "task-conclusion",
        "A task's current conclusion card: stance, confidence, components, the evidence and adjudications it used.",
    ),
    (
        "ledger://tasks/{task_id}/conclusions/{conclusion_id}",
        "task-conclusion-pinned",
        "One conclusion as issued, to cite: its card pinned to the task version and the hash of its event; never changes.",
    ),
];

/// A resource URI of this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceUri {
    /// `ledger://tasks`.
    Tasks,
    /// `ledger://tasks/{task_id}/state` or `…/state/{version}`.
    State {
        /// The task.
        task_id: String,
        /// The version, or the head.
        version: Option<u64>,
    },
    /// `ledger://tasks/{task_id}/summary`.
    Summary {
        /// The task.
        task_id: String,
    },
    /// `ledger://tasks/{task_id}/events`, or `…/events?cursor=V` from version `V` on.
    Events {
        /// The task.
        task_id: String,
        /// The version the page starts at, or the first.
        cursor: Option<u64>,
    },
    /// `ledger://tasks/{task_id}/conclusion`.
    Conclusion {
        /// The task.
        task_id: String,
    },
    /// `ledger://tasks/{task_id}/conclusions/{conclusion_id}`.
    ConclusionPinned {
        /// The task.
        task_id: String,
        /// The conclusion.
        conclusion_id: String,
    },
    /// `ledger://checkpoints/latest`.
    LatestCheckpoint,
}

impl ResourceUri {
    /// Reads a URI; `None` when it is none of this server's.
    pub fn parse(uri: &str) -> Option<ResourceUri> {
        let rest = uri.strip_prefix(PREFIX)?;
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        let parts: Vec<&str> = path.split('/').collect();
        let task = |id: &str| (!id.is_empty()).then(|| id.to_owned());
        // Only the events take a query: `cursor`, a version.
        if let Some(query) = query {
            let ["tasks", id, "events"] = parts.as_slice() else {
                return None;
            };
            let cursor = query.strip_prefix("cursor=")?.parse().ok()?;
            return Some(ResourceUri::Events {
                task_id: task(id)?,
                cursor: Some(cursor),
            });
        }
        match parts.as_slice() {
            ["tasks"] => Some(ResourceUri::Tasks),
            ["checkpoints", "latest"] => Some(ResourceUri::LatestCheckpoint),
            ["tasks", id, "state"] => Some(ResourceUri::State {
                task_id: task(id)?,
                version: None,
            }),
            ["tasks", id, "state", v] => Some(ResourceUri::State {
                task_id: task(id)?,
                version: Some(v.parse().ok()?),
            }),
            ["tasks", id, "summary"] => Some(ResourceUri::Summary { task_id: task(id)? }),
            ["tasks", id, "events"] => Some(ResourceUri::Events {
                task_id: task(id)?,
                cursor: None,
            }),
            ["tasks", id, "conclusion"] => Some(ResourceUri::Conclusion { task_id: task(id)? }),
            ["tasks", id, "conclusions", c] if !c.is_empty() => {
                Some(ResourceUri::ConclusionPinned {
                    task_id: task(id)?,
                    conclusion_id: (*c).to_owned(),
                })
            }
            _ => None,
        }
    }

    /// The task a URI is about, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            ResourceUri::State { task_id, .. }
            | ResourceUri::Summary { task_id }
            | ResourceUri::Events { task_id, .. }
            | ResourceUri::Conclusion { task_id }
            | ResourceUri::ConclusionPinned { task_id, .. } => Some(task_id),
            ResourceUri::Tasks | ResourceUri::LatestCheckpoint => None,
        }
    }

    /// Whether the resource can change: a state at a version never does, nor a conclusion
    /// pinned by its id, nor does a missing checkpoint notify (checkpoints are not events).
    pub fn changes_with_appends(&self) -> bool {
        matches!(
            self,
            ResourceUri::Tasks
                | ResourceUri::State { version: None, .. }
                | ResourceUri::Summary { .. }
                | ResourceUri::Events { .. }
                | ResourceUri::Conclusion { .. }
        )
    }
}

/// The URIs an append to `task_id` changes.
pub(crate) fn changed_by_append(task_id: &str) -> [String; 5] {
    [
        format!("{PREFIX}tasks"),
        format!("{PREFIX}tasks/{task_id}/summary"),
        format!("{PREFIX}tasks/{task_id}/state"),
        format!("{PREFIX}tasks/{task_id}/events"),
        format!("{PREFIX}tasks/{task_id}/conclusion"),
    ]
}

pub(crate) fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(
        RESOURCE_TEMPLATES
            .iter()
            .map(|(template, name, description)| {
                ResourceTemplate::new(*template, *name)
                    .with_description(*description)
                    .with_mime_type(JSON)
            })
            .collect(),
    )
}

/// The fixed resources, then each task's on a page of the task index.
pub(crate) fn list(
    bridge: &Bridge,
    cursor: Option<String>,
) -> Result<ListResourcesResult, McpError> {
    let mut resources = Vec::new();
    if cursor.is_none() {
        resources.push(
            Resource::new(format!("{PREFIX}tasks"), "tasks")
                .with_title("Research tasks")
                .with_description("Every research task: question, status, verdict and version.")
                .with_mime_type(JSON),
        );
        // Listed once there is one to read: a fresh ledger has none until the first is due.
        let checkpoint = bridge
            .service()
            .ledger()
            .latest_checkpoint()
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        if checkpoint.is_some() {
            resources.push(
            Resource::new(format!("{PREFIX}checkpoints/latest"), "latest-checkpoint")
                .with_title("Latest signed checkpoint")
                .with_description(
                    "The ledger's latest signed checkpoint: tree size, Merkle root, time, key fingerprint, signature.",
                )
                .with_mime_type(JSON),
            );
        }
    }
    let page = bridge
        .service()
        .projector()
        .tasks(&TaskQuery {
            after: cursor.clone(),
            limit: Some(bridge.options().resource_tasks_per_page),
            ..TaskQuery::default()
        })
        .map_err(|e| {
            let e = service::ServiceError::from(e);
            McpError::invalid_params(e.to_string(), Some(e.to_json()))
        })?;
    for task in &page.tasks {
        resources.extend(task_resources(task));
    }
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = page.next_cursor;
    Ok(result)
}

/// The resources `resources/list` gives for one task: its state, summary, events and, once
/// concluded, its conclusion.
fn task_resources(task: &projections::TaskListing) -> Vec<Resource> {
    let mut resources = Vec::new();
    let id = &task.task_id;
    let short: String = task.question.chars().take(80).collect();
    resources.push(
        Resource::new(
            format!("{PREFIX}tasks/{id}/state"),
            format!("task-{id}-state"),
        )
        .with_title(format!("Task: {short}"))
        .with_description(format!("The task as it stands (version {}).", task.version))
        .with_mime_type(JSON),
    );
    resources.push(
        Resource::new(
            format!("{PREFIX}tasks/{id}/summary"),
            format!("task-{id}-summary"),
        )
        .with_title(format!("Task, compact: {short}"))
        .with_mime_type(JSON),
    );
    resources.push(
        Resource::new(
            format!("{PREFIX}tasks/{id}/events"),
            format!("task-{id}-events"),
        )
        .with_title(format!("Audit trail: {short}"))
        .with_mime_type(JSON),
    );
    if task.stance.is_some() {
        resources.push(
            Resource::new(
                format!("{PREFIX}tasks/{id}/conclusion"),
                format!("task-{id}-conclusion"),
            )
            .with_title(format!("Conclusion: {short}"))
            .with_mime_type(JSON),
        );
    }
    resources
}

fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A task's state as clients read it.
pub(crate) fn state_view(task_id: &str, state: &TaskState) -> Value {
    json!({
        "task_id": task_id,
        "session_version": state.version(),
        "task": state.task().map(to_json),
        "status": state.status().map(|s| to_json(&s)),
        "sub_questions": state
            .sub_questions()
            .iter()
            .map(|q| json!({"id": q.sub_question.id, "text": q.sub_question.text}))
            .collect::<Vec<_>>(),
        "evidence": to_json(&state.evidence_views()),
        "conflicts": to_json(&state.conflict_views()),
        "conclusion": state.conclusion_card(None).map(|c| to_json(&c)),
        "pending_actions": to_json(&research::next_actions(state)),
        "summary": state.summary().map(|s| to_json(&s)),
    })
}

/// A task's state, compact: what an assistant needs to act on it, each item and conflict in
/// the shape the tools give them, and where the full view is.
pub(crate) fn summary_view(task_id: &str, state: &TaskState) -> Value {
    let evidence: Vec<Value> = state
        .evidence_views()
        .iter()
        .map(service::compact_item)
        .collect();
    let (conflicts, _) = service::conflicts_in_force(state);
    let conclusion = state.current_conclusion().map(|c| {
        let id = c.issued.conclusion_id.as_str();
        json!({
            "conclusion_id": id,
            "stance": to_json(&c.issued.stance),
            "confidence": c.issued.confidence,
            "stale": c.stale_since.is_some(),
            "uri": format!("{PREFIX}tasks/{task_id}/conclusions/{id}"),
        })
    });
    json!({
        "task_id": task_id,
        "session_version": state.version(),
        "question": state.task().map(|t| t.question.clone()),
        "status": state.status().map(|s| to_json(&s)),
        "sub_questions": state
            .sub_questions()
            .iter()
            .map(|q| json!({"id": q.sub_question.id, "text": q.sub_question.text}))
            .collect::<Vec<_>>(),
        "evidence": evidence,
        "conflicts": conflicts,
        "conclusion": conclusion,
        "pending_actions": to_json(&research::next_actions(state)),
        "full": format!("{PREFIX}tasks/{task_id}/state"),
    })
}

/// A page of a task's audit trail from version `cursor` (the first when absent), of at most
/// `resource_events_per_page` events, with the cursor and URI of the next page.
fn events_page(
    bridge: &Bridge,
    uri: &str,
    task_id: &str,
    cursor: Option<u64>,
) -> Result<Value, McpError> {
    let service = bridge.service();
    let per_page = bridge.options().resource_events_per_page;
    let page = service
        .projector()
        .audit_trail(task_id, cursor.unwrap_or(1), Some(per_page))
        .map_err(|e| resource_error(uri, &e.into()))?;
    if page.head_version == 0 {
        return Err(resource_not_found(
            uri,
            format!("no task {}", service::echoed(task_id)),
        ));
    }
    let mut body = json!({
        "task_id": task_id,
        "head_version": page.head_version,
        "events": to_json(&page.events),
    });
    if let Some(next) = page.next_version {
        body["next_cursor"] = json!(next.to_string());
        body["next"] = json!(format!("{PREFIX}tasks/{task_id}/events?cursor={next}"));
    }
    Ok(body)
}

/// `ledger://tasks/{task_id}/conclusion`: the task's current conclusion card.
fn latest_conclusion(bridge: &Bridge, uri: &str, task_id: &str) -> Result<Value, McpError> {
    let state = bridge
        .service()
        .state(task_id)
        .map_err(|e| resource_error(uri, &e))?;
    let Some(card) = state.conclusion_card(None) else {
        return Err(resource_not_found(uri, "the task has no conclusion yet"));
    };
    let mut body = json!({"task_id": task_id, "session_version": state.version()});
    if let (Value::Object(map), Value::Object(card)) = (&mut body, to_json(&card)) {
        map.extend(card);
    }
    Ok(body)
}

/// `ledger://checkpoints/latest`: the latest signed checkpoint.
fn latest_checkpoint(bridge: &Bridge, uri: &str) -> Result<Value, McpError> {
    let checkpoint = bridge
        .service()
        .ledger()
        .latest_checkpoint()
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
    match checkpoint {
        Some(c) => Ok(to_json(&c)),
        None => Err(resource_not_found(
            uri,
            "no checkpoint has been written yet",
        )),
    }
}

/// A conclusion as issued, by id: its card as the task stood when it was issued, pinned to
/// that version and to the hash and seq of its `conclusion_issued` event. It never changes; the
/// current conclusion, and whether this one went stale, are at `…/conclusion`.
fn pinned_conclusion(
    bridge: &Bridge,
    uri: &str,
    task_id: &str,
    conclusion_id: &str,
) -> Result<Value, McpError> {
    let service = bridge.service();
    let fail = |e: service::ServiceError| resource_error(uri, &e);
    let head = service.state(task_id).map_err(fail)?;
    let Some(record) = head
        .conclusions()
        .iter()
        .find(|c| c.issued.conclusion_id.as_str() == conclusion_id)
    else {
        return Err(resource_not_found(uri, "the task has no such conclusion"));
    };
    let cite = record.provenance.cite;
    let then = service
        .state_at(task_id, Some(cite.version))
        .map_err(fail)?;
    let Some(card) = then.conclusion_card(Some(&record.issued.conclusion_id)) else {
        return Err(resource_not_found(uri, "the task has no such conclusion"));
    };
    let mut body = json!({
        "task_id": task_id,
        "version": cite.version,
        "seq": cite.seq,
        "event_hash": to_json(&cite.hash),
        "uri": uri,
    });
    if let (Value::Object(map), Value::Object(card)) = (&mut body, to_json(&card)) {
        map.extend(card);
    }
    Ok(body)
}

/// Reads one resource.
pub(crate) fn read(bridge: &Bridge, uri: &str) -> Result<ReadResourceResult, McpError> {
    let Some(parsed) = ResourceUri::parse(uri) else {
        let why = if uri.starts_with(PREFIX) {
            "not a URI of this server's (resources/templates/list gives them)"
        } else {
            "this server's resources are under ledger://"
        };
        return Err(resource_not_found(uri, why));
    };
    let service = bridge.service();
    let fail = |e: service::ServiceError| resource_error(uri, &e);
    let body = match parsed {
        ResourceUri::Tasks => {
            let page = service
                .projector()
                .tasks(&TaskQuery::default())
                .map_err(|e| fail(e.into()))?;
            to_json(&page)
        }
        ResourceUri::State { task_id, version } => {
            let state = service.state_at(&task_id, version).map_err(fail)?;
            if state.task().is_none() {
                return Err(resource_not_found(
                    uri,
                    "the task has no events at that version",
                ));
            }
            state_view(&task_id, &state)
        }
        ResourceUri::Summary { task_id } => {
            let state = service.state(&task_id).map_err(fail)?;
            if state.task().is_none() {
                return Err(resource_not_found(
                    uri,
                    format!("no task {}", service::echoed(&task_id)),
                ));
            }
            summary_view(&task_id, &state)
        }
        ResourceUri::Events { task_id, cursor } => events_page(bridge, uri, &task_id, cursor)?,
        ResourceUri::ConclusionPinned {
            task_id,
            conclusion_id,
        } => pinned_conclusion(bridge, uri, &task_id, &conclusion_id)?,
        ResourceUri::Conclusion { task_id } => latest_conclusion(bridge, uri, &task_id)?,
        ResourceUri::LatestCheckpoint => latest_checkpoint(bridge, uri)?,
    };
    let text = serde_json::to_string_pretty(&body)
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type(JSON),
    ]))
}

#[cfg(test)]
mod tests {
    use super::ResourceUri;

    #[test]
    fn uris_parse_as_the_contract_writes_them() {
        let cases = [
            ("ledger://tasks", Some(ResourceUri::Tasks)),
            (
                "ledger://checkpoints/latest",
                Some(ResourceUri::LatestCheckpoint),
            ),
            (
                "ledger://tasks/t-1/state",
                Some(ResourceUri::State {
                    task_id: "t-1".into(),
                    version: None,
                }),
            ),
            (
                "ledger://tasks/t-1/state/7",
                Some(ResourceUri::State {
                    task_id: "t-1".into(),
                    version: Some(7),
                }),
            ),
            (
                "ledger://tasks/t-1/events",
                Some(ResourceUri::Events {
                    task_id: "t-1".into(),
                    cursor: None,
                }),
            ),
            (
                "ledger://tasks/t-1/events?cursor=51",
                Some(ResourceUri::Events {
                    task_id: "t-1".into(),
                    cursor: Some(51),
                }),
            ),
            (
                "ledger://tasks/t-1/summary",
                Some(ResourceUri::Summary {
                    task_id: "t-1".into(),
                }),
            ),
            (
                "ledger://tasks/t-1/conclusions/co-2",
                Some(ResourceUri::ConclusionPinned {
                    task_id: "t-1".into(),
                    conclusion_id: "co-2".into(),
                }),
            ),
            ("ledger://tasks/t-1/events?cursor=x", None),
            ("ledger://tasks/t-1/events?page=2", None),
            ("ledger://tasks/t-1/state?cursor=2", None),
            ("ledger://tasks/t-1/conclusions/", None),
            (
                "ledger://tasks/t-1/conclusion",
                Some(ResourceUri::Conclusion {
                    task_id: "t-1".into(),
                }),
            ),
            ("ledger://tasks/t-1/state/x", None),
            ("ledger://tasks//state", None),
            ("ledger://tasks/t-1", None),
            ("ledger://checkpoints", None),
            ("file:///etc/passwd", None),
        ];
        for (uri, expected) in cases {
            assert_eq!(ResourceUri::parse(uri), expected, "{uri}");
        }
    }
}
