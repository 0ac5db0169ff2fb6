//! Subscriptions: every event from a seq on, in order, first from storage and then live.
//!
//! Live events travel through a bounded broadcast buffer. A subscriber that falls behind it is
//! not dropped and skips nothing: it reads what it missed from storage, by seq, and rejoins the
//! live buffer when it has caught up. That is also how a reader on another node would tail a
//! shared backend.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};

use crate::envelope::RecordedEvent;
use crate::error::SubscriptionError;
use crate::ledger::Core;

/// How many events a subscriber reads from storage at a time while catching up.
const CATCH_UP_EVENTS: usize = 512;

/// A live, ordered feed of events. See [`crate::Ledger::subscribe`].
#[derive(Debug)]
pub struct Subscription {
    core: Arc<Core>,
    live: broadcast::Receiver<Arc<RecordedEvent>>,
    next_seq: u64,
    backlog: VecDeque<Arc<RecordedEvent>>,
}

impl Subscription {
    pub(crate) fn new(core: Arc<Core>, from_seq: u64) -> Self {
        // Subscribe to the live buffer before looking at storage, so that nothing appended in
        // between is missed; duplicates are dropped by seq.
        let live = core.events.subscribe();
        Subscription {
            core,
            live,
            next_seq: from_seq,
            backlog: VecDeque::new(),
        }
    }

    /// The seq of the next event this subscription will deliver.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Delivers the next event from the backlog or storage, if one is there without waiting.
    fn take_stored(&mut self) -> Result<Option<Arc<RecordedEvent>>, SubscriptionError> {
        if self.backlog.is_empty() && self.next_seq < self.core.storage.head().size {
            let events = self.core.read_range(self.next_seq, CATCH_UP_EVENTS)?;
            self.backlog.extend(events.into_iter().map(Arc::new));
        }
        Ok(self.backlog.pop_front().inspect(|event| {
            self.next_seq = event.seq + 1;
        }))
    }

    /// Accepts a live event if it is the next one; older ones were already delivered, and a
    /// gap is filled from storage on the next call.
    fn accept(&mut self, event: Arc<RecordedEvent>) -> Option<Arc<RecordedEvent>> {
        if event.seq == self.next_seq {
            self.next_seq += 1;
            Some(event)
        } else {
            None
        }
    }

    /// The next event, waiting for it to be appended if need be.
    pub async fn next(&mut self) -> Result<Arc<RecordedEvent>, SubscriptionError> {
        loop {
            if let Some(event) = self.take_stored()? {
                return Ok(event);
            }
            match self.live.recv().await {
                Ok(event) => {
                    if let Some(event) = self.accept(event) {
                        return Ok(event);
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return Err(SubscriptionError::Closed),
            }
        }
    }

    /// The next event, blocking the thread until it is appended. Not for use inside an async
    /// task.
    pub fn next_blocking(&mut self) -> Result<Arc<RecordedEvent>, SubscriptionError> {
        loop {
            if let Some(event) = self.take_stored()? {
                return Ok(event);
            }
            match self.live.blocking_recv() {
                Ok(event) => {
                    if let Some(event) = self.accept(event) {
                        return Ok(event);
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return Err(SubscriptionError::Closed),
            }
        }
    }

    /// The next event if one is available now.
    pub fn try_next(&mut self) -> Result<Option<Arc<RecordedEvent>>, SubscriptionError> {
        loop {
            if let Some(event) = self.take_stored()? {
                return Ok(Some(event));
            }
            match self.live.try_recv() {
                Ok(event) => {
                    if let Some(event) = self.accept(event) {
                        return Ok(Some(event));
                    }
                }
                Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => return Ok(None),
                Err(TryRecvError::Closed) => return Err(SubscriptionError::Closed),
            }
        }
    }
}

/// The events the writer has just appended, straight from its memory, for a reader in the same
/// process that folds every event and must not read back what was just written (the read
/// models). Unlike a [`Subscription`] it never reads storage: it says when it missed events
/// (the buffer of `subscription_buffer_events` ran over), and the reader fills the gap itself.
#[derive(Debug)]
pub struct LiveEvents {
    live: broadcast::Receiver<Arc<RecordedEvent>>,
}

/// What [`LiveEvents::try_next`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Live {
    /// The next event appended since the last one taken.
    Event(Arc<RecordedEvent>),
    /// Nothing appended since the last event taken.
    Empty,
    /// This many events went past unseen: read them from storage.
    Missed(u64),
    /// The ledger's writer has stopped; nothing more will arrive.
    Closed,
}

impl LiveEvents {
    /// The next event appended, without waiting. Events are taken in seq order, each once;
    /// every append's events are here before its caller is answered.
    pub fn try_next(&mut self) -> Live {
        match self.live.try_recv() {
            Ok(event) => Live::Event(event),
            Err(TryRecvError::Empty) => Live::Empty,
            Err(TryRecvError::Lagged(n)) => Live::Missed(n),
            Err(TryRecvError::Closed) => Live::Closed,
        }
    }
}

impl crate::Ledger {
    /// Every event appended from now on, as the writer hands it out before answering the
    /// append ([`LiveEvents`]).
    pub fn live_events(&self) -> LiveEvents {
        LiveEvents {
            live: self.core().events.subscribe(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::storage::memory::{Faults, MemoryStorage};
    use crate::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, Live, NewEvent};

    #[test]
    fn live_events_are_the_events_a_read_gives_back() {
        // The system clock has nanoseconds; the envelope keeps microseconds.
        let ledger = Ledger::with_storage(
            Arc::new(MemoryStorage::new(Faults::default(), 3)),
            LedgerOptions {
                checkpoint_interval: None,
                ..LedgerOptions::default()
            },
        );
        let mut live = ledger.live_events();
        for round in 0..3u8 {
            ledger
                .append(AppendRequest {
                    stream: "s".into(),
                    expected: ExpectedVersion::Any,
                    actor: "a".into(),
                    events: vec![NewEvent {
                        kind: "k".into(),
                        payload: vec![round; 5],
                        causation: vec![],
                    }],
                    idempotency: None,
                    content: Vec::new(),
                })
                .unwrap();
        }
        for seq in 0..3 {
            let Live::Event(event) = live.try_next() else {
                panic!("event {seq} was handed out before its append returned");
            };
            assert_eq!(*event, ledger.get(seq).unwrap().unwrap());
        }
        assert!(matches!(live.try_next(), Live::Empty));
    }
}
