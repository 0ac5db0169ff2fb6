//! Tests of the ledger's verifiable math, in one binary with a module per feature.

// The workspace denies these to keep panics out of library code. Here, in shared test code as much
// as in tests, an unwrap is an assertion that the fixture is what the test says it is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod checkpoint;
mod common;
mod doctored;
mod frontier;
mod note;
mod proof_file;
mod properties;
mod rfc6962;
mod rotation;
mod tree;
mod witness;
