//! Resources: the ledger's read models under the URIs of SPEC §10, listed, readable at head or
//! at a version, and described by templates.
//!
//! ```text
//! ledger://tasks                             the task index (first page)
//! ledger://tasks/{task_id}/state             a task as it stands
//! ledger://tasks/{task_id}/state/{version}   a task as it stood after `version` events
//! ledger://tasks/{task_id}/events            its audit trail
//! ledger://tasks/{task_id}/conclusion        its current conclusion card
//! ledger://checkpoints/latest                the latest signed checkpoint
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
pub const RESOURCE_TEMPLATES: [(&str, &str, &str); 4] = [
    (
        "ledger://tasks/{task_id}/state",
        "task-state",
        "A research task as it stands: question, evidence with statuses, conflicts, the current verdict and the steps due.",
    ),
    (
        "ledger://tasks/{task_id}/state/{version}",
        "task-state-at-version",
        "A research task as it stood after its first `version` events (time travel); such a state never changes.",
    ),
    (
        "ledger://tasks/{task_id}/events",
        "task-events",
        "A task's audit trail: every event with its seq, version, kind, actor, time, hashes and decoded payload.",
    ),
    (
        "ledger://tasks/{task_id}/conclusion",
        "task-conclusion",
        "A task's current conclusion card: stance, confidence, components, the evidence and adjudications it used.",
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
    /// `ledger://tasks/{task_id}/events`.
    Events {
        /// The task.
        task_id: String,
    },
    /// `ledger://tasks/{task_id}/conclusion`.
    Conclusion {
        /// The task.
        task_id: String,
    },
    /// `ledger://checkpoints/latest`.
    LatestCheckpoint,
}

impl ResourceUri {
    /// Reads a URI; `None` when it is none of this server's.
    pub fn parse(uri: &str) -> Option<ResourceUri> {
        let rest = uri.strip_prefix(PREFIX)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let task = |id: &str| (!id.is_empty()).then(|| id.to_owned());
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
            ["tasks", id, "events"] => Some(ResourceUri::Events { task_id: task(id)? }),
            ["tasks", id, "conclusion"] => Some(ResourceUri::Conclusion { task_id: task(id)? }),
            _ => None,
        }
    }

    /// The task a URI is about, if any.
    pub fn task_id(&self) -> Option<&str> {
        match self {
            ResourceUri::State { task_id, .. }
            | ResourceUri::Events { task_id }
            | ResourceUri::Conclusion { task_id } => Some(task_id),
            ResourceUri::Tasks | ResourceUri::LatestCheckpoint => None,
        }
    }

    /// Whether the resource can change: a state at a version never does, nor does a missing
    /// checkpoint notify (checkpoints are not events).
    pub fn changes_with_appends(&self) -> bool {
        matches!(
            self,
            ResourceUri::Tasks
                | ResourceUri::State { version: None, .. }
                | ResourceUri::Events { .. }
                | ResourceUri::Conclusion { .. }
        )
    }
}

/// The URIs an append to `task_id` changes.
pub(crate) fn changed_by_append(task_id: &str) -> [String; 4] {
    [
        format!("{PREFIX}tasks"),
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
    }
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = page.next_cursor;
    Ok(result)
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

/// Reads one resource.
pub(crate) fn read(bridge: &Bridge, uri: &str) -> Result<ReadResourceResult, McpError> {
    let Some(parsed) = ResourceUri::parse(uri) else {
        return Err(resource_not_found(
            uri,
            "this server's resources are under ledger://",
        ));
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
        ResourceUri::Events { task_id } => {
            // The whole trail, page by page, up to a bound; a longer one says where it stops.
            let max = bridge.options().resource_events_max;
            let mut events = Vec::new();
            let mut from = 1;
            let (head, next) = loop {
                let page = service
                    .projector()
                    .audit_trail(&task_id, from, None)
                    .map_err(|e| fail(e.into()))?;
                events.extend(page.events);
                match page.next_version {
                    Some(v) if events.len() < max => from = v,
                    next => break (page.head_version, next),
                }
            };
            if head == 0 {
                return Err(resource_not_found(
                    uri,
                    format!("no task {}", service::echoed(&task_id)),
                ));
            }
            json!({
                "task_id": task_id,
                "head_version": head,
                "events": to_json(&events),
                "next_version": next,
            })
        }
        ResourceUri::Conclusion { task_id } => {
            let state = service.state(&task_id).map_err(fail)?;
            let Some(card) = state.conclusion_card(None) else {
                return Err(resource_not_found(uri, "the task has no conclusion yet"));
            };
            let mut body = json!({"task_id": task_id, "session_version": state.version()});
            if let (Value::Object(map), Value::Object(card)) = (&mut body, to_json(&card)) {
                map.extend(card);
            }
            body
        }
        ResourceUri::LatestCheckpoint => {
            let checkpoint = service
                .ledger()
                .latest_checkpoint()
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            match checkpoint {
                Some(c) => to_json(&c),
                None => {
                    return Err(resource_not_found(
                        uri,
                        "no checkpoint has been written yet",
                    ));
                }
            }
        }
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
                }),
            ),
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
