//! What the service counts, exposed in the Prometheus text format at `GET /metrics`.
//!
//! Labels are bounded: tool names are the built-in and registered ones (any other name is
//! counted as `unknown`), outcomes are the error codes, tiers and stances come from the rules.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the append latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The service's counters.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    events_appended: AtomicU64,
    appends: AtomicU64,
    latency: Mutex<Histogram>,
    tool_calls: Mutex<BTreeMap<(String, String), u64>>,
    conflicts: Mutex<BTreeMap<String, u64>>,
    conclusions: Mutex<BTreeMap<String, u64>>,
    verification_failures: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// An append of `events` events that took `took`.
    pub(crate) fn append(&self, events: u64, took: Duration) {
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.events_appended.fetch_add(events, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        let mut h = lock(&self.latency);
        h.count += 1;
        h.sum += seconds;
        for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.buckets[i] += 1;
            }
        }
    }

    /// A tool call and how it ended (`ok` or an error code).
    pub(crate) fn tool_call(&self, tool: &str, outcome: &str) {
        *lock(&self.tool_calls)
            .entry((tool.to_owned(), outcome.to_owned()))
            .or_default() += 1;
    }

    /// A conflict decided at this tier.
    pub(crate) fn conflict(&self, tier: &str) {
        *lock(&self.conflicts).entry(tier.to_owned()).or_default() += 1;
    }

    /// A conclusion issued with this stance.
    pub(crate) fn conclusion(&self, stance: &str) {
        *lock(&self.conclusions)
            .entry(stance.to_owned())
            .or_default() += 1;
    }

    /// A verification that found damage.
    pub(crate) fn verification_failed(&self) {
        self.verification_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with the gauges read now.
    pub(crate) fn render(&self, ledger_size: u64, projection_lag: u64) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        counter(
            "research_ledger_appends_total",
            "Appends acknowledged by this process.",
            self.appends.load(Ordering::Relaxed),
        );
        counter(
            "research_ledger_events_appended_total",
            "Events appended by this process.",
            self.events_appended.load(Ordering::Relaxed),
        );
        counter(
            "research_ledger_verification_failures_total",
            "Verifications that found the ledger damaged.",
            self.verification_failures.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP research_ledger_size_events Events in the ledger.\n# TYPE research_ledger_size_events gauge\nresearch_ledger_size_events {ledger_size}"
        );
        let _ = writeln!(
            out,
            "# HELP research_ledger_projection_lag_events Events the read models have not folded yet.\n# TYPE research_ledger_projection_lag_events gauge\nresearch_ledger_projection_lag_events {projection_lag}"
        );
        self.render_latency(&mut out);
        let _ = writeln!(
            out,
            "# HELP research_ledger_tool_calls_total Tool calls by tool and outcome (ok or the error code).\n# TYPE research_ledger_tool_calls_total counter"
        );
        for ((tool, outcome), n) in lock(&self.tool_calls).iter() {
            let _ = writeln!(
                out,
                "research_ledger_tool_calls_total{{tool=\"{}\",outcome=\"{}\"}} {n}",
                escape(tool),
                escape(outcome)
            );
        }
        labelled(
            &mut out,
            "research_ledger_conflicts_total",
            "Conflicts decided, by tier.",
            "tier",
            &lock(&self.conflicts),
        );
        labelled(
            &mut out,
            "research_ledger_conclusions_total",
            "Conclusions issued, by stance.",
            "stance",
            &lock(&self.conclusions),
        );
        out
    }

    /// The histogram of append latencies.
    fn render_latency(&self, out: &mut String) {
        let h = lock(&self.latency);
        let _ = writeln!(
            out,
            "# HELP research_ledger_append_duration_seconds Time from submitting an append to its acknowledgement.\n# TYPE research_ledger_append_duration_seconds histogram"
        );
        for (bound, count) in LATENCY_BUCKETS.iter().zip(h.buckets) {
            let _ = writeln!(
                out,
                "research_ledger_append_duration_seconds_bucket{{le=\"{bound}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "research_ledger_append_duration_seconds_bucket{{le=\"+Inf\"}} {}\nresearch_ledger_append_duration_seconds_sum {}\nresearch_ledger_append_duration_seconds_count {}",
            h.count, h.sum, h.count
        );
    }
}

/// A counter with one label, a line per value of the label.
fn labelled<K: AsRef<str>>(
    out: &mut String,
    name: &str,
    help: &str,
    label: &str,
    values: &std::collections::BTreeMap<K, u64>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (value, n) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {n}", escape(value.as_ref()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_is_prometheus_text() {
        let m = Metrics::default();
        m.append(3, Duration::from_millis(2));
        m.tool_call("research_open_task", "ok");
        m.tool_call("research_open_task", "invalid_argument");
        m.conflict("authority");
        m.conclusion("supportive");
        let text = m.render(10, 0);
        assert!(text.contains("research_ledger_events_appended_total 3"));
        assert!(text.contains("research_ledger_append_duration_seconds_bucket{le=\"0.0025\"} 1"));
        assert!(text.contains("research_ledger_append_duration_seconds_bucket{le=\"0.001\"} 0"));
        assert!(text.contains(
            "research_ledger_tool_calls_total{tool=\"research_open_task\",outcome=\"invalid_argument\"} 1"
        ));
        assert!(text.contains("research_ledger_conflicts_total{tier=\"authority\"} 1"));
        assert!(text.contains("research_ledger_size_events 10"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(line.split(' ').count(), 2, "{line}");
        }
    }
}
