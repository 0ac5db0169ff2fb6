//! Tests of the research domain through its public API: given events, when a command, then the
//! events it decides or the refusal it gives.
// The tests read their inputs and settings; the clock and I/O ban of `clippy.toml` is the
// domain's, not theirs.
#![allow(clippy::disallowed_methods)]
// Functions outside `#[test]` functions unwrap too: in a test a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod codec;
mod commands;
mod fuzz_regressions;
mod golden;
mod golden_v2;
mod properties;
mod refusals;
mod support;
mod views;
