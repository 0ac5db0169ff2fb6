//! The append-only, hash-chained event log.
