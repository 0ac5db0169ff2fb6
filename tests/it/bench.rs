//! `research-ledger bench ledger --json` through the spawned binary: every figure is there,
//! positive and finite, and every ratio is its figure over its baseline. Never a speed.

use serde_json::Value;

use super::{run, stderr};

const FIGURES: [&str; 6] = [
    "durable_appends_1_writer_per_s",
    "durable_appends_concurrent_per_s",
    "replay_verify_events_per_s",
    "replay_events_per_s",
    "inclusion_proofs_generated_per_s",
    "inclusion_proofs_verified_per_s",
];

const BASELINES: [&str; 5] = [
    "file_sync_each_appends_per_s",
    "file_sync_grouped_appends_per_s",
    "sled_sync_each_inserts_per_s",
    "sled_sync_grouped_inserts_per_s",
    "blake3_hashes_per_s",
];

fn positive(report: &Value, section: &str, key: &str) -> f64 {
    let value = report[section][key]
        .as_f64()
        .unwrap_or_else(|| panic!("{section}.{key} is not a number: {}", report[section]));
    assert!(
        value.is_finite() && value > 0.0,
        "{section}.{key} is {value}"
    );
    value
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

#[test]
fn the_ledger_benchmark_reports_every_figure_with_consistent_ratios() {
    let data = tempfile::tempdir().unwrap();
    let out = run(
        data.path(),
        &["bench", "ledger", "--json", "--events", "200"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["bench"], "ledger");

    for key in FIGURES {
        positive(&report, "figures", key);
    }
    for key in BASELINES {
        positive(&report, "baselines", key);
    }
    assert_eq!(
        report["figures"].as_object().unwrap().len(),
        FIGURES.len(),
        "{}",
        report["figures"]
    );
    assert_eq!(
        report["baselines"].as_object().unwrap().len(),
        BASELINES.len(),
        "{}",
        report["baselines"]
    );

    // Every figure with a baseline has its ratios, and each ratio is recomputable.
    let ratios = report["ratios"].as_array().unwrap();
    let mut rated: Vec<(&str, &str)> = ratios
        .iter()
        .map(|r| {
            (
                r["figure"].as_str().unwrap(),
                r["baseline"].as_str().unwrap(),
            )
        })
        .collect();
    rated.sort_unstable();
    assert_eq!(
        rated,
        [
            (
                "durable_appends_1_writer_per_s",
                "file_sync_each_appends_per_s"
            ),
            (
                "durable_appends_1_writer_per_s",
                "sled_sync_each_inserts_per_s"
            ),
            (
                "durable_appends_concurrent_per_s",
                "file_sync_grouped_appends_per_s"
            ),
            (
                "durable_appends_concurrent_per_s",
                "sled_sync_grouped_inserts_per_s"
            ),
            ("replay_events_per_s", "blake3_hashes_per_s"),
            ("replay_verify_events_per_s", "blake3_hashes_per_s"),
        ]
    );
    for r in ratios {
        let figure = positive(&report, "figures", r["figure"].as_str().unwrap());
        let baseline = positive(&report, "baselines", r["baseline"].as_str().unwrap());
        let ratio = r["ratio"].as_f64().unwrap();
        assert!(
            close(ratio, figure / baseline),
            "{r}: {figure} / {baseline}"
        );
        assert!(
            r["target"].is_null() || r["target"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }

    // The parameters say what ran, and the sync counts add up to it.
    let p = &report["parameters"];
    assert_eq!(p["payload_bytes"], 300);
    assert_eq!(p["concurrent_appends"], 200);
    assert_eq!(p["sequential_appends"], 20);
    assert_eq!(p["writers"], 32);
    assert_eq!(p["replayed_events"], 220);
    assert!(p["append_rounds"].as_u64().unwrap() >= 1, "{p}");
    assert!(p["stored_event_bytes"].as_f64().unwrap() > 300.0, "{p}");
    for (run, appends) in [("sequential", 20), ("concurrent", 200)] {
        let g = &report["group_commit"][run];
        let syncs = g["syncs"].as_u64().unwrap();
        assert_eq!(g["events"], appends, "{g}");
        assert!(syncs >= 1 && syncs <= appends, "{g}");
        assert!(close(
            g["events_per_sync"].as_f64().unwrap(),
            appends as f64 / syncs as f64
        ));
        assert!(g["largest"].as_u64().unwrap() >= 1, "{g}");
    }
    // One writer that waits for each acknowledgement cannot share a sync.
    assert_eq!(report["group_commit"]["sequential"]["syncs"], 20);
    let latency = &report["group_commit"]["concurrent_latency_ms"];
    let (p50, p99, max) = (
        latency["p50"].as_f64().unwrap(),
        latency["p99"].as_f64().unwrap(),
        latency["max"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{latency}");
    assert!(!report["notes"].as_array().unwrap().is_empty());

    // The benchmark writes in a directory of its own, never in the data directory.
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0);
}
