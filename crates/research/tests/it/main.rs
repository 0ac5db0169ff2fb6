//! Tests of the research domain through its public API: given events, when a command, then the
//! events it decides or the refusal it gives.

mod codec;
mod commands;
mod golden;
mod properties;
mod refusals;
mod support;
mod views;
