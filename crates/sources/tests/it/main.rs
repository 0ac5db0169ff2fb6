//! Tests of the `sources` crate through its public API, on real files in temporary folders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod blobs;
