//! The task index: every research task, filtered by status, by the stance of its current
//! conclusion and by text, a page at a time, from each task's index entry (no state is read).
//!
//! Tasks are listed in the order they were opened (the seq of their first event), an order no
//! later event can change, so a cursor taken from one page still means the same place when the
//! next page is asked for, however the tasks changed meanwhile. The cursor is opaque to clients;
//! a cursor this index did not make is refused rather than guessed at.

use std::ops::Bound;

use chrono::{DateTime, NaiveDate, Utc};
use research::TaskStatus;
use research::rules::{Mode, Verdict};
use serde::{Deserialize, Serialize};

use crate::error::QueryError;
use crate::limits::Limits;
use crate::model::{Model, TaskEntry, normalise};

/// What to list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskQuery {
    /// Only tasks with this status.
    pub status: Option<TaskStatus>,
    /// Only tasks whose current conclusion has this stance (stale ones included).
    pub stance: Option<Verdict>,
    /// Only tasks whose question or one of whose constraints contains this text, ignoring case
    /// and runs of whitespace.
    pub text: Option<String>,
    /// Start after the task this cursor points at (from an earlier page).
    pub after: Option<String>,
    /// At most this many tasks; [`Limits::page_tasks_default`] when none.
    pub limit: Option<usize>,
}

/// One task as the index lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskListing {
    /// The task.
    pub task_id: String,
    /// Its question.
    pub question: String,
    /// Its constraints.
    pub constraints: Vec<String>,
    /// Its status.
    pub status: TaskStatus,
    /// The stance of its current conclusion.
    pub stance: Option<Verdict>,
    /// The confidence of its current conclusion.
    pub confidence: Option<f64>,
    /// Its workflow mode.
    pub mode: Mode,
    /// Its research date.
    pub research_date: NaiveDate,
    /// Its stream (session) version.
    pub version: u64,
    /// Seq of its first event.
    pub first_seq: u64,
    /// Seq of its last event.
    pub last_seq: u64,
    /// When it was opened.
    pub opened_at: DateTime<Utc>,
    /// When its last event was recorded.
    pub updated_at: DateTime<Utc>,
    /// The cursor that continues a listing after this task.
    pub cursor: String,
}

/// A page of the index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPage {
    /// The tasks, in the order they were opened.
    pub tasks: Vec<TaskListing>,
    /// The cursor of the next page; none when this is the last.
    pub next_cursor: Option<String>,
}

/// The version tag of cursors; another tag is refused.
const CURSOR_TAG: &str = "t1";

fn encode_cursor(first_seq: u64) -> String {
    format!("{CURSOR_TAG}{first_seq:016x}")
}

fn decode_cursor(cursor: &str) -> Option<u64> {
    let hex = cursor.strip_prefix(CURSOR_TAG)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn listing(task_id: &str, entry: &TaskEntry) -> TaskListing {
    let summary = &entry.summary;
    TaskListing {
        task_id: task_id.to_owned(),
        question: summary.question.clone(),
        constraints: summary.constraints.clone(),
        status: summary.status,
        stance: summary.stance,
        confidence: summary.confidence,
        mode: summary.mode,
        research_date: summary.research_date,
        version: entry.version,
        first_seq: entry.first_seq,
        last_seq: entry.last_seq,
        opened_at: summary.opened_at,
        updated_at: entry.updated_at,
        cursor: encode_cursor(entry.first_seq),
    }
}

/// Answers a query over the model.
pub(crate) fn page(
    model: &Model,
    query: &TaskQuery,
    limits: &Limits,
) -> Result<TaskPage, QueryError> {
    let (limit, needle, start) = checked_query(query, limits)?;
    let mut tasks = Vec::with_capacity(limit);
    let mut more = false;
    for (_, task_id) in model.order.range((start, Bound::Unbounded)) {
        let Some(entry) = model.tasks.get(task_id) else {
            continue;
        };
        if !matches(query, needle.as_deref(), entry) {
            continue;
        }
        if tasks.len() == limit {
            // One more match exists: there is a next page.
            more = true;
            break;
        }
        tasks.push(listing(task_id, entry));
    }
    let next_cursor = if more {
        tasks.last().map(|t| t.cursor.clone())
    } else {
        None
    };
    Ok(TaskPage { tasks, next_cursor })
}

/// The query's page size, normalised text filter and starting point, each within its limit.
fn checked_query(
    query: &TaskQuery,
    limits: &Limits,
) -> Result<(usize, Option<String>, Bound<u64>), QueryError> {
    let limit = query.limit.unwrap_or(limits.page_tasks_default);
    if limit == 0 {
        return Err(QueryError::InvalidArgument {
            field: "limit",
            message: "must be at least 1".into(),
        });
    }
    if limit > limits.page_tasks_max {
        return Err(QueryError::LimitExceeded {
            limit: "page_tasks_max",
            max: limits.page_tasks_max as u64,
            requested: limit as u64,
        });
    }
    let needle = match &query.text {
        None => None,
        Some(text) => {
            let chars = text.chars().count();
            if chars > limits.text_filter_chars_max {
                return Err(QueryError::LimitExceeded {
                    limit: "text_filter_chars_max",
                    max: limits.text_filter_chars_max as u64,
                    requested: chars as u64,
                });
            }
            Some(normalise(text)).filter(|n| !n.is_empty())
        }
    };
    let start = match &query.after {
        None => Bound::Unbounded,
        Some(cursor) => {
            Bound::Excluded(
                decode_cursor(cursor).ok_or_else(|| QueryError::InvalidCursor {
                    cursor: cursor.chars().take(64).collect(),
                })?,
            )
        }
    };
    Ok((limit, needle, start))
}

/// Whether a task passes the query's filters (status, stance, text).
fn matches(query: &TaskQuery, needle: Option<&str>, entry: &TaskEntry) -> bool {
    let summary = &entry.summary;
    if query.status.is_some_and(|s| s != summary.status) {
        return false;
    }
    if let Some(stance) = query.stance
        && summary.stance != Some(stance)
    {
        return false;
    }
    needle.is_none_or(|needle| entry.search_text.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        for seq in [0, 1, 255, u64::MAX] {
            assert_eq!(decode_cursor(&encode_cursor(seq)), Some(seq));
        }
        for bad in [
            "",
            "t1",
            "t2000000000000000a",
            "t1+00000000000000a",
            "t1zz00000000000000",
            "t100000000000000000",
        ] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }
}
