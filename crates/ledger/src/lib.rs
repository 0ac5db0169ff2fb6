//! The append-only, hash-chained event log of research-ledger.
//!
//! Every event is sealed in an [`Envelope`] whose hash covers the hash of the event before it,
//! so altering, removing, reordering or inserting any event breaks the chain at a seq that
//! [`Ledger::verify`] names. Appends are conditional on the stream's version, idempotent by key,
//! and acknowledged only when durable; concurrent appends share one sync.
//!
//! This crate knows nothing of research: payloads are bytes and kinds are strings, given by
//! the layer above.

pub mod bundle;
mod chain;
mod checkpoint_view;
pub mod clock;
mod durable;
pub mod envelope;
pub mod error;
mod key_history;
mod keys;
mod ledger;
pub mod limits;
mod restore;
pub mod storage;
mod subscribe;
mod tree;
mod verify;

pub use chain::ChainBreak;
pub use clock::{Clock, IdGenerator, SteppingClock, SystemClock};
pub use envelope::{Digest, Envelope, RecordedEvent};
pub use error::{AppendError, ProofError, ReadError, SigningError, SubscriptionError};
pub use ledger::{
    AcceptedLoss, AppendRequest, Causation, ExpectedVersion, Idempotency, Ledger, LedgerOptions,
    NewEvent, Receipt, ReceiptEvent,
};
pub use ledger_proof;
pub use limits::Limits;
pub use restore::{RestoreError, RestoreReport};
pub use storage::{
    ChainHead, CheckpointEntry, IdempotencyRecord, PendingCut, RawEvent, Standing, Storage,
    StorageError, standings,
};
pub use subscribe::{Live, LiveEvents, Subscription};
pub use tree::{CheckpointPage, PagedCheckpoint};
pub use verify::{VerifyFailure, VerifyReport};
