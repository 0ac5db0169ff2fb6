//! Evidence retrieval for research-ledger.
//!
//! - [`BlobStore`]: full texts under their blake3 hash, durable before `put` returns and checked
//!   on every read.
//!
//! This crate depends on `research` for the rule set's formulas and vocabulary, and on nothing
//! that knows about the ledger: it records nothing itself.

pub mod blobs;

pub use blobs::{BlobError, BlobOptions, BlobStore, ContentHash, content_hash};
