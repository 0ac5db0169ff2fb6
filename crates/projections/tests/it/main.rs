//! Tests of the projections through their public API, over real ledgers: in memory for the
//! properties, on disk where the embedded backend matters.

// Functions outside `#[test]` functions unwrap too: in a test a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod audit;
mod bounded;
mod index;
mod live;
mod properties;
mod snapshots;
mod support;
mod why;
