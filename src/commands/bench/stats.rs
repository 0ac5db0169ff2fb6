//! Turning counts and times into the figures every benchmark prints.

use std::time::Duration;

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
