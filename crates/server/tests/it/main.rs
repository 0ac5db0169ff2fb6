//! The app driven in process: every request goes through the whole router and its layers with
//! `tower::ServiceExt::oneshot`, no socket, no binary. The spawned-binary suite at the root
//! covers what only a process shows (signals, the connection loop, TLS, crashes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod console;
mod harness;
mod requests;
mod snapshots;
mod transparency;
