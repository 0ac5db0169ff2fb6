//! Why a command was not carried out.
//!
//! Each variant is one of the structured error codes of the public contract (SPEC §10), so a
//! front end maps a refusal to its wire form in exactly one place ([`Refusal::to_json`]).
//! Stale expected versions (`session_conflict`) and idempotency keys are checked by the ledger
//! before the domain is asked, so they have no variant here.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::tool::Tool;

/// A step the client can take next, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAction {
    /// The tool to call.
    pub tool: Tool,
    /// Why it is due, in a sentence naming the items concerned.
    pub reason: String,
}

impl PendingAction {
    pub(crate) fn new(tool: Tool, reason: impl Into<String>) -> Self {
        Self {
            tool,
            reason: reason.into(),
        }
    }
}

/// A command the domain would not carry out. Nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// An argument is malformed or out of range. Fix the named field and send the command again.
    #[error("invalid argument `{field}`: {message}")]
    InvalidArgument {
        /// Path of the offending field, e.g. `items[2].publish_date`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The workflow requires other steps first. Take the pending actions, in order, then retry.
    #[error("{message}")]
    WorkflowOrder {
        /// What the command needed.
        message: String,
        /// The steps still due before it.
        pending_actions: Vec<PendingAction>,
    },
    /// A referenced task, evidence item, sub-question or conflict does not exist. Check the id.
    #[error("{what} `{id}` does not exist")]
    NotFound {
        /// Kind of thing looked for: `task`, `evidence`, `sub_question`, `conflict`, `conclusion`.
        what: &'static str,
        /// The id given.
        id: String,
    },
    /// The task is closed; nothing can be written to it. Open a new task to continue.
    #[error("task `{task_id}` is closed; nothing more can be written to it")]
    TaskClosed {
        /// The closed task.
        task_id: String,
    },
    /// The task requires a person to decide its conflicts, and the decision came from an
    /// assistant. Ask the person: the server asks through an MCP elicitation when the client
    /// supports it, or the person decides with a reviewer's token (REST, GraphQL, the CLI).
    #[error(
        "task `{task_id}` requires a person to decide its conflicts; a decision on {conflict_id} sent by an assistant is not recorded: ask the user, who decides when the client asks through an MCP elicitation (evaluation_conflict_resolution) or with a reviewer's token over REST, GraphQL or the command line"
    )]
    PersonDecisionRequired {
        /// The task.
        task_id: String,
        /// The conflict the assistant tried to decide.
        conflict_id: String,
    },
    /// A size bound was exceeded. Send less (split the call, shorten the text).
    #[error("`{field}` exceeds the limit `{limit}` ({actual} > {max})")]
    LimitExceeded {
        /// Name of the limit, unit last.
        limit: &'static str,
        /// Its value.
        max: u64,
        /// What the command carried.
        actual: u64,
        /// Path of the field that carried it.
        field: String,
    },
}

impl Refusal {
    /// The stable error code of the public contract.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::InvalidArgument { .. } => "invalid_argument",
            Refusal::WorkflowOrder { .. } => "workflow_order",
            Refusal::NotFound { .. } => "not_found",
            Refusal::TaskClosed { .. } => "task_closed",
            Refusal::LimitExceeded { .. } => "limit_exceeded",
            Refusal::PersonDecisionRequired { .. } => "person_decision_required",
        }
    }

    /// The structured error body: `{"error": CODE, "message": …, …details}`.
    pub fn to_json(&self) -> Value {
        let mut body = json!({ "error": self.code(), "message": self.to_string() });
        if let Value::Object(map) = &mut body {
            match self {
                Refusal::InvalidArgument { field, .. } => {
                    map.insert("field".into(), json!(field));
                }
                Refusal::WorkflowOrder {
                    pending_actions, ..
                } => {
                    map.insert("pending_actions".into(), json!(pending_actions));
                }
                Refusal::NotFound { what, id } => {
                    map.insert("resource".into(), json!(what));
                    map.insert("id".into(), json!(id));
                }
                Refusal::TaskClosed { task_id } => {
                    map.insert("task_id".into(), json!(task_id));
                }
                Refusal::PersonDecisionRequired {
                    task_id,
                    conflict_id,
                } => {
                    map.insert("task_id".into(), json!(task_id));
                    map.insert("conflict_id".into(), json!(conflict_id));
                }
                Refusal::LimitExceeded {
                    limit,
                    max,
                    actual,
                    field,
                } => {
                    map.insert("limit".into(), json!(limit));
                    map.insert("max".into(), json!(max));
                    map.insert("actual".into(), json!(actual));
                    map.insert("field".into(), json!(field));
                }
            }
        }
        body
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Refusal::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_body_carries_code_and_details() {
        let refusal = Refusal::WorkflowOrder {
            message: "screen first".into(),
            pending_actions: vec![PendingAction::new(
                Tool::SynthesisScreenEvidence,
                "ev-1 awaits screening",
            )],
        };
        assert_eq!(
            refusal.to_json(),
            json!({
                "error": "workflow_order",
                "message": "screen first",
                "pending_actions": [{"tool": "synthesis_screen_evidence", "reason": "ev-1 awaits screening"}],
            })
        );
        let limit = Refusal::LimitExceeded {
            limit: "summary_chars_max",
            max: 800,
            actual: 801,
            field: "items[0].summary".into(),
        };
        assert_eq!(limit.code(), "limit_exceeded");
        assert_eq!(limit.to_json()["limit"], json!("summary_chars_max"));
    }
}
