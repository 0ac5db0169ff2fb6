//! Errors of the ledger's operations, one enum per operation, each variant saying what the
//! caller should do.

use std::sync::Arc;

use crate::storage::StorageError;

/// Why an append was refused or failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    /// The stream moved on since the caller read it. Fetch the stream at `current` and decide
    /// again.
    #[error("stream {stream} is at version {current}, not the expected {expected}")]
    VersionConflict {
        /// The stream.
        stream: String,
        /// The version the caller expected.
        expected: u64,
        /// The version the stream is at.
        current: u64,
    },
    /// The idempotency key was first used by a different command (another fingerprint).
    /// Use a fresh key for a new command.
    #[error("idempotency key {key:?} was already used by a different command")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
    },
    /// The request breaks one of the ledger's limits; nothing was written.
    #[error("{limit} is {max}; the request has {actual}")]
    LimitExceeded {
        /// The limit's name, as in [`crate::Limits`].
        limit: &'static str,
        /// Its value.
        max: u64,
        /// What the request asked for.
        actual: u64,
    },
    /// The request is malformed; nothing was written.
    #[error("invalid append: {0}")]
    Invalid(String),
    /// The ledger refuses appends because its integrity is in doubt (a failed sync, a failed
    /// verification or damage found on open). An operator must look; reads still work.
    #[error("the ledger refuses appends: {0}")]
    Poisoned(String),
    /// Storage failed while writing. The append may or may not be durable: reopen the ledger
    /// and retry with the same idempotency key to learn which.
    #[error("storage failed; the append may or may not be durable: {0}")]
    Storage(Arc<StorageError>),
    /// On a shared store, another node rotated the key: the key this node holds is retired
    /// and signs nothing more. Nothing was written. The operator puts the key the log names
    /// in this node's key folder, where the node picks it up.
    #[error("the signing key is retired: {0}")]
    KeyRetired(String),
    /// The ledger has been shut down.
    #[error("the ledger is shut down")]
    Closed,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Stored bytes are not a valid event at the place they were found. Run `verify`.
    #[error("seq {seq}: {detail}")]
    Damaged {
        /// Where.
        seq: u64,
        /// What.
        detail: String,
    },
    /// A content blob's stored bytes do not hash to its name: damaged, or overwritten on
    /// purpose (a redaction). They are never returned. The chain is not affected: no event
    /// hash covers a blob's bytes. An append that carries the original bytes stores them again.
    #[error("content {hash} is damaged or redacted: its stored bytes hash to {actual}")]
    ContentDamaged {
        /// The blob's name.
        hash: crate::envelope::Digest,
        /// The hash of the bytes found.
        actual: crate::envelope::Digest,
    },
}

/// Why a subscription stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubscriptionError {
    /// Catching up from storage failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The ledger was shut down.
    #[error("the ledger is shut down")]
    Closed,
}

/// Why a checkpoint or key rotation could not be written.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SigningError {
    /// No usable signing key: the key on disk is not the one the checkpoint log names, or none
    /// could be made. An operator must restore the right key.
    #[error("no signing key: {0}")]
    NoKey(String),
    /// The clock gave a time a checkpoint cannot carry.
    #[error("no valid time for the checkpoint: {0}")]
    Time(String),
    /// The ledger refuses writes because its integrity is in doubt.
    #[error("the ledger refuses writes: {0}")]
    Poisoned(String),
    /// A manifest names something that cannot be written into its signed text.
    #[error("the manifest cannot be signed: {0}")]
    Manifest(String),
    /// Writing the checkpoint log failed.
    #[error("the checkpoint log could not be written: {0}")]
    Storage(Arc<StorageError>),
    /// A witness's cosignature was refused: it does not verify, or cosigns no checkpoint of the
    /// log. Nothing was written.
    #[error("the cosignature is refused: {0}")]
    Cosignature(String),
    /// On a shared store, another node rotated the key: the key this node holds is retired
    /// and signs nothing more. Nothing was written. The operator puts the key the log names
    /// in this node's key folder, where the node picks it up.
    #[error("the signing key is retired: {0}")]
    KeyRetired(String),
    /// The ledger has been shut down.
    #[error("the ledger is shut down")]
    Closed,
}

/// Why a proof could not be given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// No checkpoint covers the event yet: write one, then ask again.
    #[error("no checkpoint covers seq {seq} yet (the latest covers {latest_size} events)")]
    NotCovered {
        /// The event asked about.
        seq: u64,
        /// Size of the latest checkpoint.
        latest_size: u64,
    },
    /// Proofs are given only against checkpointed tree sizes.
    #[error("no checkpoint has tree size {0}")]
    NotCheckpointed(u64),
    /// The request makes no sense for the tree (an index beyond the size, sizes out of order).
    #[error("{0}")]
    Invalid(String),
    /// Reading the log or its tree failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// No checkpoint covered the event, and the one written to cover it could not be.
    #[error("no checkpoint covers the event, and none could be written: {0}")]
    Checkpoint(#[from] SigningError),
}
