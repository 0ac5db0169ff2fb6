//! Time and randomness, injected so that simulation tests are deterministic.
//!
//! The ledger reads the wall clock only through [`Clock`] and draws the random part of event ids
//! only from an [`IdGenerator`], so a seeded test replays exactly.

use std::fmt;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current UTC time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that starts at a given time and advances by a fixed step each time it is read.
#[derive(Debug)]
pub struct SteppingClock {
    next_us: Mutex<i64>,
    step_us: i64,
}

impl SteppingClock {
    /// A clock reading `start`, then `start + step_us`, and so on.
    pub fn new(start: DateTime<Utc>, step_us: i64) -> Self {
        SteppingClock {
            next_us: Mutex::new(start.timestamp_micros()),
            step_us,
        }
    }
}

impl Clock for SteppingClock {
    fn now(&self) -> DateTime<Utc> {
        let mut next = self.next_us.lock().unwrap_or_else(|p| p.into_inner());
        let now = *next;
        *next = next.saturating_add(self.step_us);
        DateTime::<Utc>::from_timestamp_micros(now).unwrap_or_default()
    }
}

/// Makes event ids: UUIDv7 from the clock and a keyed blake3 stream, or UUIDv8 derived from an
/// idempotency key.
///
/// The random bits are `blake3::keyed_hash(seed, counter)`: unpredictable when the seed is, and
/// reproducible when a test fixes it.
#[derive(Debug)]
pub struct IdGenerator {
    seed: [u8; 32],
    counter: u64,
}

impl IdGenerator {
    /// A generator seeded from the operating system's entropy; falls back to the clock and the
    /// process id if none is available, which only weakens unpredictability, not uniqueness.
    pub fn from_entropy() -> Self {
        let mut seed = [0u8; 32];
        if getrandom::fill(&mut seed).is_err() {
            let fallback = format!("{:?}/{}", Utc::now(), std::process::id());
            seed = *blake3::hash(fallback.as_bytes()).as_bytes();
        }
        IdGenerator { seed, counter: 0 }
    }

    /// A generator that replays the same ids for the same seed.
    pub fn seeded(seed: u64) -> Self {
        IdGenerator {
            seed: *blake3::hash(&seed.to_le_bytes()).as_bytes(),
            counter: 0,
        }
    }

    /// A UUIDv7 for an event recorded at `at`.
    pub fn v7(&mut self, at: DateTime<Utc>) -> Uuid {
        self.counter = self.counter.wrapping_add(1);
        let random = blake3::keyed_hash(&self.seed, &self.counter.to_le_bytes());
        let mut bytes = [0u8; 10];
        bytes.copy_from_slice(&random.as_bytes()[..10]);
        let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
        uuid::Builder::from_unix_timestamp_millis(millis, &bytes).into_uuid()
    }
}

/// The id of the `index`-th event of a command carrying idempotency key `key`: a UUIDv8 from
/// `blake3(key ‖ index as u32 big-endian)`, so a retried command names the same events.
pub fn idempotent_event_id(key: &str, index: u32) -> Uuid {
    let mut hasher = blake3::Hasher::new();
    hasher.update(key.as_bytes());
    hasher.update(&index.to_be_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    Uuid::new_v8(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v7_ids_carry_the_time_and_differ() {
        let at = DateTime::<Utc>::from_timestamp_millis(1_700_000_000_000).expect("time");
        let mut ids = IdGenerator::seeded(1);
        let a = ids.v7(at);
        let b = ids.v7(at);
        assert_ne!(a, b);
        assert_eq!(a.get_version_num(), 7);
        let (secs, _) = a.get_timestamp().expect("v7 has a timestamp").to_unix();
        assert_eq!(secs, 1_700_000_000);
        let mut again = IdGenerator::seeded(1);
        assert_eq!(again.v7(at), a);
    }

    #[test]
    fn idempotent_ids_are_stable_and_distinct() {
        let a = idempotent_event_id("k", 0);
        assert_eq!(a, idempotent_event_id("k", 0));
        assert_ne!(a, idempotent_event_id("k", 1));
        assert_ne!(a, idempotent_event_id("k2", 0));
        assert_eq!(a.get_version_num(), 8);
    }

    /// The example `docs/ledger-format.md` gives, worked out from its words alone with
    /// another BLAKE3 (Python's `blake3`), so the derivation and its description agree.
    #[test]
    fn an_idempotent_id_is_the_one_the_format_describes() {
        assert_eq!(
            idempotent_event_id("order-1", 2).to_string(),
            "9aa9607f-7600-8ad0-a8e1-dca339b449e9"
        );
        let doc = include_str!("../../../docs/ledger-format.md");
        assert!(
            doc.contains(
                "the key `order-1` and index 2 give\n`9aa9607f-7600-8ad0-a8e1-dca339b449e9`"
            ),
            "the format's example is not the one tested"
        );
    }
}
