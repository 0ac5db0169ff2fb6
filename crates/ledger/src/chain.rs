//! Checking the hash chain event by event, with a diagnosis that names the first bad seq.
//!
//! Used when the embedded log is scanned on open and by [`crate::Ledger::verify`], so the two
//! can never disagree about what a valid chain is.

use std::collections::HashMap;

use crate::envelope::{Digest, EventRef, decode_stored_ref};

/// Where the chain breaks and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The first seq that is not what it should be.
    pub seq: u64,
    /// What is wrong there, for an auditor.
    pub problem: String,
}

/// Walks events in log order and checks each against the one before.
#[derive(Debug, Clone)]
pub(crate) struct ChainChecker {
    /// The seq the next event must have.
    pub(crate) next_seq: u64,
    /// Hash of the event at `next_seq - 1`.
    pub(crate) last_hash: Digest,
    /// Hash of the event at `next_seq - 2`, to recognise an inserted event.
    before_last: Option<Digest>,
    /// Stream versions seen so far.
    pub(crate) versions: HashMap<String, u64>,
}

impl ChainChecker {
    /// A checker that expects `next_seq` to follow an event with hash `last_hash`.
    pub(crate) fn new(next_seq: u64, last_hash: Digest) -> Self {
        ChainChecker {
            next_seq,
            last_hash,
            before_last: None,
            versions: HashMap::new(),
        }
    }

    /// Checks the stored bytes found at position `next_seq`. `base_version` gives a stream's
    /// version before the first event this checker saw of it.
    pub(crate) fn check<'a>(
        &mut self,
        bytes: &'a [u8],
        base_version: &mut dyn FnMut(&str) -> Result<u64, String>,
    ) -> Result<EventRef<'a>, ChainBreak> {
        let pos = self.next_seq;
        let event = decode_stored_ref(bytes).map_err(|e| ChainBreak {
            seq: pos,
            problem: format!("the stored event does not check out ({e}): it was altered"),
        })?;
        if event.seq != pos {
            return Err(self.misplaced(&event));
        }
        if event.prev_hash != self.last_hash {
            return Err(ChainBreak {
                seq: pos,
                problem: format!(
                    "prev_hash {} is not the hash of seq {} ({}): an event before it was altered, removed or inserted",
                    event.prev_hash,
                    pos.wrapping_sub(1),
                    self.last_hash
                ),
            });
        }
        self.follow_stream(&event, base_version)?;
        self.before_last = Some(self.last_hash);
        self.last_hash = event.hash;
        self.next_seq += 1;
        Ok(event)
    }

    /// Why the event found at `next_seq` says it is at another position: a copy of the event
    /// before it, an insertion just before it, or events removed, inserted or moved.
    fn misplaced(&self, event: &EventRef<'_>) -> ChainBreak {
        let pos = self.next_seq;
        if event.hash == self.last_hash {
            return ChainBreak {
                seq: pos,
                problem: format!("the event here is a copy of seq {}", event.seq),
            };
        }
        if event.seq.checked_add(1) == Some(pos) && Some(event.prev_hash) == self.before_last {
            return ChainBreak {
                seq: event.seq,
                problem: format!(
                    "an event was inserted at seq {}: the event after it also says it is seq {} and links to seq {}",
                    event.seq,
                    event.seq,
                    event.seq.wrapping_sub(1)
                ),
            };
        }
        let problem = if event.seq > pos {
            format!(
                "the event here says it is seq {}: seq {pos} is missing (removed or moved)",
                event.seq
            )
        } else {
            format!(
                "the event here says it is seq {}: events were inserted or moved",
                event.seq
            )
        };
        ChainBreak { seq: pos, problem }
    }

    /// Checks that the event's stream version follows the stream's last one, and moves it on.
    fn follow_stream(
        &mut self,
        event: &EventRef<'_>,
        base_version: &mut dyn FnMut(&str) -> Result<u64, String>,
    ) -> Result<(), ChainBreak> {
        let pos = self.next_seq;
        // A stream seen before is looked up by the borrowed name; only a new stream's name is
        // copied into the map.
        let follows = |current: u64| {
            if event.stream_version == current.wrapping_add(1) {
                Ok(())
            } else {
                Err(ChainBreak {
                    seq: pos,
                    problem: format!(
                        "stream {} version {} follows version {current}",
                        event.stream, event.stream_version
                    ),
                })
            }
        };
        match self.versions.get_mut(event.stream) {
            Some(current) => {
                follows(*current)?;
                *current = event.stream_version;
            }
            None => {
                let current = base_version(event.stream).map_err(|e| ChainBreak {
                    seq: pos,
                    problem: format!("cannot read the version of stream {}: {e}", event.stream),
                })?;
                follows(current)?;
                self.versions
                    .insert(event.stream.to_owned(), event.stream_version);
            }
        }
        Ok(())
    }
}
