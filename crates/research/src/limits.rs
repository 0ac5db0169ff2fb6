//! Named bounds on everything a command may carry.
//!
//! Every size a client controls has a limit, named with its unit last, and a command that goes
//! past one is refused with the limit's name and value so the client can tell what to shorten.
//! The defaults keep the largest event a task can produce well inside the ledger's
//! `event_bytes_max`; every limit can be raised by whoever builds the [`crate::CommandContext`].

use serde::{Deserialize, Serialize};

/// The bounds `decide` enforces. `Limits::default()` holds the product's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Length of a task id (characters).
    pub task_id_chars_max: u64,
    /// Length of the main question (characters).
    pub question_chars_max: u64,
    /// Number of constraints on a task.
    pub constraints_count_max: u64,
    /// Length of one constraint (characters).
    pub constraint_chars_max: u64,
    /// Sub-questions added by one call.
    pub sub_questions_per_call_max: u64,
    /// Sub-questions of one task in all.
    pub sub_questions_count_max: u64,
    /// Length of one sub-question (characters).
    pub sub_question_chars_max: u64,
    /// Length of a search query (characters).
    pub query_chars_max: u64,
    /// Sources asked by one search.
    pub sources_per_search_max: u64,
    /// Results recorded for one search.
    pub search_results_max: u64,
    /// Evidence items added by one call.
    pub evidence_per_call_max: u64,
    /// Evidence items of one task in all.
    pub evidence_count_max: u64,
    /// Length of an evidence summary (characters; SPEC: 800).
    pub summary_chars_max: u64,
    /// Length of a publisher name (characters).
    pub source_chars_max: u64,
    /// Length of a URL (characters).
    pub url_chars_max: u64,
    /// Length of short names: sources, result ids, index states, tools, contract versions.
    pub name_chars_max: u64,
    /// Length of a reason given with a screening, retraction, decision or closing (characters).
    pub reason_chars_max: u64,
    /// Screening decisions in one call.
    pub screening_per_call_max: u64,
    /// How far past the command's own date a publish or research date may lie (days). A day of
    /// slack absorbs time zones; anything later is a typo or a fabricated date.
    pub future_date_days_max: u64,
    /// Size of one encoded event (bytes). Matches the ledger's own bound, so nothing `decide`
    /// returns is refused at append.
    pub event_bytes_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            task_id_chars_max: 64,
            question_chars_max: 2_000,
            constraints_count_max: 20,
            constraint_chars_max: 500,
            sub_questions_per_call_max: 20,
            sub_questions_count_max: 100,
            sub_question_chars_max: 500,
            query_chars_max: 1_000,
            sources_per_search_max: 16,
            search_results_max: 100,
            evidence_per_call_max: 50,
            evidence_count_max: 250,
            summary_chars_max: 800,
            source_chars_max: 100,
            url_chars_max: 2_048,
            name_chars_max: 128,
            reason_chars_max: 2_000,
            screening_per_call_max: 100,
            future_date_days_max: 1,
            event_bytes_max: 65_536,
        }
    }
}
