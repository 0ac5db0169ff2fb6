//! What the benchmarks write and how they turn counts and times into rates.
//!
//! Payloads are pseudo-random rather than repeated bytes so that nothing on the way to the disk
//! (a compressing file system, a deduplicating device) makes them cheaper than real events.

use std::time::Duration;

use ledger::{AppendRequest, ExpectedVersion, NewEvent};

/// Size of every benchmark event's payload.
pub(super) const PAYLOAD_BYTES: usize = 300;

/// The kind every benchmark event carries.
const KIND: &str = "bench_appended";

/// The actor every benchmark append names.
const ACTOR: &str = "bench";

/// A small deterministic generator (xorshift64*): the same run writes the same bytes.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        // Zero is the one state xorshift never leaves.
        Rng((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `len` pseudo-random bytes.
    pub(super) fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// A number in `0..bound` (`bound > 0`); the slight bias of a modulo does not matter for
    /// picking which events to prove.
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// One append of one benchmark event to `stream`, whatever the stream's version.
pub(super) fn append_request(stream: &str, rng: &mut Rng) -> AppendRequest {
    AppendRequest {
        stream: stream.to_owned(),
        expected: ExpectedVersion::Any,
        actor: ACTOR.to_owned(),
        events: vec![NewEvent {
            kind: KIND.to_owned(),
            payload: rng.bytes(PAYLOAD_BYTES),
            causation: Vec::new(),
        }],
        idempotency: None,
    }
}

/// Operations per second. A run too short for the clock to see still gives a finite rate.
pub(super) fn rate(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// The median of some rates (the upper middle one for an even count), or 0 for none.
pub(super) fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied().unwrap_or(0.0)
}

/// The `q`-quantile (0..=1) of some durations, by nearest rank.
pub(super) fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_have_the_stated_size_and_differ() {
        let mut rng = Rng::new(7);
        let a = rng.bytes(PAYLOAD_BYTES);
        let b = rng.bytes(PAYLOAD_BYTES);
        assert_eq!(a.len(), PAYLOAD_BYTES);
        assert_eq!(b.len(), PAYLOAD_BYTES);
        assert_ne!(a, b);
    }

    #[test]
    fn median_and_quantiles_pick_the_middle_and_the_tail() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
        let ms: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&ms, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&ms, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&ms, 1.0), Duration::from_millis(100));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn a_rate_is_finite_even_for_no_time() {
        assert!(rate(10, Duration::ZERO).is_finite());
        assert_eq!(rate(10, Duration::from_secs(2)), 5.0);
    }
}
