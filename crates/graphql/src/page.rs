//! Cursor pagination in the shape Relay clients expect: a connection of edges, each with its
//! node and cursor, and the page's `pageInfo`.
//!
//! Cursors are opaque to clients. The task index makes its own (a task's place in the order
//! tasks were opened, which no later event changes); an audit trail's cursor is the stream
//! version of the last event seen, so the next page starts right after it however many events
//! were appended meanwhile.

use async_graphql::SimpleObject;

/// Where a page stands in its list.
#[derive(SimpleObject, Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageInfo {
    /// Whether more items follow this page; ask for them with `after: endCursor`.
    pub(crate) has_next_page: bool,
    /// Whether items come before this page (true when it was asked for with `after`).
    pub(crate) has_previous_page: bool,
    /// The cursor of the first item of the page.
    pub(crate) start_cursor: Option<String>,
    /// The cursor of the last item of the page.
    pub(crate) end_cursor: Option<String>,
}

/// The tag of audit-trail cursors; another tag is refused.
const EVENT_CURSOR_TAG: &str = "v1:";

/// The cursor after the event at `version` of a task's stream.
pub(crate) fn event_cursor(version: u64) -> String {
    format!("{EVENT_CURSOR_TAG}{version}")
}

/// The stream version a cursor points at; none for a cursor this API did not make.
pub(crate) fn event_cursor_version(cursor: &str) -> Option<u64> {
    let digits = cursor.strip_prefix(EVENT_CURSOR_TAG)?;
    if digits.is_empty() || digits.len() > 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_cursors_round_trip_and_strangers_are_refused() {
        for version in [1, 2, 99, u64::MAX] {
            assert_eq!(event_cursor_version(&event_cursor(version)), Some(version));
        }
        for bad in [
            "",
            "v1:",
            "v2:3",
            "v1:-3",
            "v1:+3",
            "v1:3x",
            "t100000000000000a",
        ] {
            assert_eq!(event_cursor_version(bad), None, "{bad}");
        }
    }
}
