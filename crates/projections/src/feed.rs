//! The feed: every event of the ledger in seq order, each delivered only after the projection
//! folded it, for subscribers (MCP resource updates, GraphQL subscriptions).
//!
//! A subscriber told of an event reads the read models and finds the event's effect there:
//! the projector announces an event only once it is folded, under the same lock as the fold,
//! so announcements come in seq order. A subscriber that starts in the past, or falls behind
//! the announcement buffer, reads what it missed from the ledger — never past what the
//! projection has folded — and rejoins the announcements where it caught up, so it skips
//! nothing and never runs ahead of the read models.
//!
//! A read that the database failed (a dropped session, a failover, a restart) is tried again
//! after a pause, growing from 50 ms to 5 s: the subscriber waits, as it waits for new events,
//! and misses nothing. Anything else that stops a read — damaged or missing events — ends the
//! feed with an error.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ledger::{ReadError, RecordedEvent, StorageError};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::error::Stall;
use crate::projector::Projector;

/// How many events a subscriber reads from the ledger at a time while catching up.
const CATCH_UP_EVENTS: usize = 512;

/// The pause after the first failed catch-up read.
const READ_RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between catch-up reads that keep failing.
const READ_RETRY_MAX: Duration = Duration::from_secs(5);

/// What the projector announces.
#[derive(Debug, Clone)]
pub(crate) enum Folded {
    /// An event, just folded.
    Event(Arc<RecordedEvent>),
    /// Folding stopped before this event.
    Stalled(Stall),
}

/// Why a feed cannot deliver its next event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// The projection stopped before the next event and will not fold it: see the stall.
    #[error("the read models stopped before seq {}: {}", .0.seq, .0.reason)]
    Stalled(Stall),
    /// Reading what the subscriber missed from the ledger failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Every event from a seq on, each once folded. See [`Projector::feed`].
#[derive(Debug)]
pub struct Feed {
    projector: Projector,
    live: broadcast::Receiver<Folded>,
    next_seq: u64,
    backlog: VecDeque<Arc<RecordedEvent>>,
}

impl Feed {
    pub(crate) fn new(projector: Projector, live: broadcast::Receiver<Folded>, from: u64) -> Self {
        Feed {
            projector,
            live,
            next_seq: from,
            backlog: VecDeque::new(),
        }
    }

    /// The seq of the next event this feed delivers.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The next event, waiting until it is appended and folded.
    pub async fn next(&mut self) -> Result<Arc<RecordedEvent>, FeedError> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.next_seq = event.seq + 1;
                return Ok(event);
            }
            let folded = self.projector.next_seq();
            if self.next_seq < folded {
                let want = ((folded - self.next_seq) as usize).min(CATCH_UP_EVENTS);
                let events = self.read_missed(want).await?;
                let before = self.next_seq;
                self.backlog.extend(
                    events
                        .into_iter()
                        .filter(|e| e.seq >= before && e.seq < folded)
                        .map(Arc::new),
                );
                if self.backlog.front().is_none_or(|e| e.seq != before) {
                    return Err(FeedError::Read(ReadError::Damaged {
                        seq: before,
                        detail: "the ledger does not hold an event the read models folded".into(),
                    }));
                }
                continue;
            }
            if let Some(stall) = self.projector.stall()
                && stall.seq <= self.next_seq
            {
                return Err(FeedError::Stalled(stall));
            }
            match self.live.recv().await {
                Ok(Folded::Event(event)) if event.seq == self.next_seq => {
                    self.next_seq += 1;
                    return Ok(event);
                }
                // Older ones were delivered already; a newer one means some were missed, and
                // the projector's position now says to read them from the ledger.
                Ok(Folded::Event(_)) | Err(RecvError::Lagged(_)) => {}
                Ok(Folded::Stalled(stall)) if stall.seq <= self.next_seq => {
                    return Err(FeedError::Stalled(stall));
                }
                Ok(Folded::Stalled(_)) => {}
                // The projector holds the sender, and this feed holds the projector.
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }

    /// Up to `want` events from the next one on, read from the ledger off the runtime's
    /// workers; what the database failed is read again after a pause.
    async fn read_missed(&self, want: usize) -> Result<Vec<RecordedEvent>, ReadError> {
        let mut pause = READ_RETRY_FIRST;
        let mut failing = false;
        loop {
            let ledger = self.projector.ledger().clone();
            let from = self.next_seq;
            let read =
                match tokio::task::spawn_blocking(move || ledger.read_range(from, want)).await {
                    Ok(read) => read,
                    Err(e) => match e.try_into_panic() {
                        Ok(panic) => std::panic::resume_unwind(panic),
                        // Cancelled: the runtime is shutting down, and this feed with it.
                        Err(_) => std::future::pending().await,
                    },
                };
            match read {
                Err(ReadError::Storage(e @ StorageError::Database { .. })) => {
                    if !failing {
                        tracing::warn!(seq = from, error = %e, "a subscriber waits for the database to read events");
                        failing = true;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(READ_RETRY_MAX);
                }
                Ok(events) if failing => {
                    tracing::info!(seq = from, "a subscriber reads events again");
                    return Ok(events);
                }
                other => return other,
            }
        }
    }
}
