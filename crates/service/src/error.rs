//! The service's one error type, and its wire form.
//!
//! Every front end reports an error as `{"error": CODE, "message": …, …details}` (MCP tool
//! results with `isError`, GraphQL `extensions` in upper case, REST bodies). The codes are a
//! contract clients script against; this is the one place they are made.

use std::borrow::Cow;

use serde_json::{Value, json};

/// Characters of a client's own input (an id, a key) an error repeats: the reply to a
/// request naming something that does not exist never grows with the name.
pub(crate) const ECHOED_CHARS_MAX: usize = 200;

/// Characters of an error's message kept: a message may quote what the client sent (an
/// unknown field's name, a value that does not parse), and the reply must not grow with it.
pub(crate) const MESSAGE_CHARS_MAX: usize = 1000;

/// A message cut to [`MESSAGE_CHARS_MAX`], saying how many bytes were left out.
fn cut_message(text: String) -> String {
    match text.char_indices().nth(MESSAGE_CHARS_MAX) {
        None => text,
        Some((cut, _)) => format!("{}… ({} more bytes)", &text[..cut], text.len() - cut),
    }
}

/// `text` as an error repeats it: whole when short, else its first 200 characters and how
/// many bytes were left out.
pub fn echoed(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(ECHOED_CHARS_MAX) {
        None => Cow::Borrowed(text),
        Some((cut, _)) => Cow::Owned(format!(
            "{}… ({} more bytes)",
            &text[..cut],
            text.len() - cut
        )),
    }
}

/// Why a call was not carried out.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The domain refused the command: bad input, the wrong order, a closed task, a limit.
    #[error("{0}")]
    Refused(research::Refusal),
    /// An argument is malformed before the domain could look at it.
    #[error("{message}")]
    InvalidArgument {
        /// The argument, as the client named it.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The task moved on since the caller read it: fetch the latest session and decide again.
    #[error(
        "task {} is at version {current_version}, not {expected_version}",
        echoed(task_id)
    )]
    SessionConflict {
        /// The task.
        task_id: String,
        /// The version the caller expected.
        expected_version: u64,
        /// The version it is at.
        current_version: u64,
    },
    /// The idempotency key was first used for a different command.
    #[error(
        "idempotency key {:?} was already used for a different command",
        echoed(key)
    )]
    IdempotencyKeyReused {
        /// The key.
        key: String,
    },
    /// Something named does not exist.
    #[error("no {resource} {}", echoed(id))]
    NotFound {
        /// What kind of thing.
        resource: &'static str,
        /// Its id.
        id: String,
    },
    /// A limit of the service was reached.
    #[error("{limit} is {max}; the request has {actual}")]
    LimitExceeded {
        /// The limit's name.
        limit: String,
        /// Its value.
        max: u64,
        /// What was asked for.
        actual: u64,
    },
    /// An evidence source failed; the others may still have answered.
    #[error("source {source_name} failed: {message}")]
    SourceFailed {
        /// The source.
        source_name: String,
        /// What went wrong.
        message: String,
    },
    /// The call needs credentials it did not bring.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// A registered external tool broke its contract.
    #[error("tool {tool} broke its contract: {detail}")]
    ContractViolation {
        /// The tool.
        tool: String,
        /// How.
        detail: String,
    },
    /// Something took longer than allowed.
    #[error("{0}")]
    Timeout(String),
    /// The service could not do it, and wrote nothing: the ledger refuses writes (damage or a
    /// loss found, a failed sync, opened read-only), or storage could not be read. Retrying is
    /// safe; whether it can succeed, `/health` says.
    #[error("{0}")]
    Unavailable(String),
    /// A write failed after it may have become durable (storage failed while writing, or the
    /// write is durable but its result could not be read back). Retry with the same
    /// idempotency key: the retry answers with the original result if the write is there.
    #[error("{0}")]
    OutcomeUnknown(String),
}

impl ServiceError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::Refused(refusal) => refusal.code(),
            ServiceError::InvalidArgument { .. } => "invalid_argument",
            ServiceError::SessionConflict { .. } => "session_conflict",
            ServiceError::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            ServiceError::NotFound { .. } => "not_found",
            ServiceError::LimitExceeded { .. } => "limit_exceeded",
            ServiceError::SourceFailed { .. } => "source_failed",
            ServiceError::Unauthenticated(_) => "unauthenticated",
            ServiceError::Forbidden(_) => "forbidden",
            ServiceError::ContractViolation { .. } => "contract_violation",
            ServiceError::Timeout(_) => "timeout",
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::OutcomeUnknown(_) => "outcome_unknown",
        }
    }

    /// The structured error body.
    pub fn to_json(&self) -> Value {
        if let ServiceError::Refused(refusal) = self {
            return refusal.to_json();
        }
        let message = cut_message(self.to_string());
        let mut body = json!({ "error": self.code(), "message": message });
        if let Value::Object(map) = &mut body {
            match self {
                ServiceError::InvalidArgument { field, .. } => {
                    // The field may be the client's own name for an argument it should not send.
                    map.insert("field".into(), json!(echoed(field)));
                }
                ServiceError::SessionConflict {
                    task_id,
                    current_version,
                    ..
                } => {
                    map.insert("task_id".into(), json!(echoed(task_id)));
                    map.insert("current_version".into(), json!(current_version));
                    // The tool that reads the task as it is now, named as every other next step
                    // is: a model that follows pending actions needs nothing else.
                    let read = research::Tool::ResearchSummarizeState.name();
                    map.insert("suggested_action".into(), json!(read));
                    map.insert(
                        "pending_actions".into(),
                        json!([{
                            "tool": read,
                            "reason": format!(
                                "the task is at version {current_version}: read what changed, then retry with expected_version {current_version}"
                            ),
                        }]),
                    );
                }
                ServiceError::IdempotencyKeyReused { key } => {
                    map.insert("idempotency_key".into(), json!(echoed(key)));
                }
                ServiceError::NotFound { resource, id } => {
                    map.insert("resource".into(), json!(resource));
                    map.insert("id".into(), json!(echoed(id)));
                }
                ServiceError::LimitExceeded { limit, max, actual } => {
                    map.insert("limit".into(), json!(limit));
                    map.insert("max".into(), json!(max));
                    map.insert("actual".into(), json!(actual));
                }
                ServiceError::SourceFailed { source_name, .. } => {
                    map.insert("source".into(), json!(source_name));
                }
                ServiceError::ContractViolation { tool, detail } => {
                    map.insert("tool".into(), json!(tool));
                    map.insert("detail".into(), json!(detail));
                }
                _ => {}
            }
        }
        body
    }

    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ServiceError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn unavailable(e: impl std::fmt::Display) -> Self {
        ServiceError::Unavailable(e.to_string())
    }

    pub(crate) fn outcome_unknown(e: impl std::fmt::Display) -> Self {
        ServiceError::OutcomeUnknown(e.to_string())
    }
}

impl From<ledger::AppendError> for ServiceError {
    /// The failures of an append that the write path does not answer itself: those before
    /// anything was written are `unavailable`, a storage failure while writing is
    /// `outcome_unknown`.
    fn from(e: ledger::AppendError) -> Self {
        use ledger::AppendError as A;
        match e {
            A::VersionConflict { .. }
            | A::IdempotencyKeyReused { .. }
            | A::LimitExceeded { .. }
            | A::Invalid(_)
            | A::Poisoned(_)
            | A::Closed => ServiceError::Unavailable(format!("{e}; nothing was written")),
            _ => ServiceError::OutcomeUnknown(format!(
                "{e}; retry with the same idempotency key to learn whether it was written"
            )),
        }
    }
}

impl From<research::Refusal> for ServiceError {
    fn from(refusal: research::Refusal) -> Self {
        ServiceError::Refused(refusal)
    }
}

impl From<projections::QueryError> for ServiceError {
    fn from(e: projections::QueryError) -> Self {
        use projections::QueryError as Q;
        match e {
            Q::TaskNotFound { task_id } => ServiceError::NotFound {
                resource: "task",
                id: task_id,
            },
            Q::VersionBeyondHead {
                requested, head, ..
            } => ServiceError::invalid(
                "version",
                format!("version {requested} is beyond the task's head, {head}"),
            ),
            Q::LimitExceeded {
                limit,
                max,
                requested,
            } => ServiceError::LimitExceeded {
                limit: limit.to_string(),
                max,
                actual: requested,
            },
            Q::InvalidCursor { .. } => ServiceError::invalid("cursor", e.to_string()),
            Q::InvalidArgument { .. } => ServiceError::invalid("query", e.to_string()),
            other => ServiceError::unavailable(other),
        }
    }
}
