//! The feed: every event of the ledger in seq order, each delivered only after the projection
//! folded it, for subscribers (MCP resource updates, GraphQL subscriptions).
//!
//! A subscriber told of an event reads the read models and finds the event's effect there:
//! the projector announces an event only once it is folded, under the same lock as the fold,
//! so announcements come in seq order. A subscriber that starts in the past, or falls behind
//! the announcement buffer, reads what it missed from the ledger — never past what the
//! projection has folded — and rejoins the announcements where it caught up, so it skips
//! nothing and never runs ahead of the read models.

use std::collections::VecDeque;
use std::sync::Arc;

use ledger::{ReadError, RecordedEvent};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::error::Stall;
use crate::projector::Projector;

/// How many events a subscriber reads from the ledger at a time while catching up.
const CATCH_UP_EVENTS: usize = 512;

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
                let events = self.projector.ledger().read_range(self.next_seq, want)?;
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
}
