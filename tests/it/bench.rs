//! `research-ledger bench` through the spawned binary. `bench ledger --json`: every figure is
//! there, positive and finite, and every ratio is its figure over its baseline — never a speed.
//! `bench decisions --json` on a handful of generated claims: every run is reported, and rule set
//! `v2` gives each label's verdict from the annotated evidence at either research date.

use serde_json::{Value, json};

use super::{run, stderr};

const FIGURES: [&str; 6] = [
    "durable_appends_1_writer_per_s",
    "durable_appends_concurrent_per_s",
    "replay_verify_events_per_s",
    "replay_events_per_s",
    "inclusion_proofs_generated_per_s",
    "inclusion_proofs_verified_per_s",
];

const BASELINES: [&str; 6] = [
    "file_sync_each_appends_per_s",
    "file_sync_grouped_appends_per_s",
    "sled_sync_each_inserts_per_s",
    "sled_sync_grouped_inserts_per_s",
    "blake3_hashes_per_s",
    "sha256_node_hashes_per_s",
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
        &[
            "bench",
            "ledger",
            "--json",
            "--events",
            "200",
            "--checkpoints",
            "40",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["bench"], "ledger");

    // The reads that serve checkpoints, on the short log and on the one asked for.
    let reads = &report["checkpoint_reads"];
    assert_eq!(reads["short"]["entries"], 16, "{reads}");
    assert_eq!(reads["long"]["entries"], 40, "{reads}");
    for log in ["short", "long"] {
        for key in ["notes_per_s", "proofs_per_s", "health_per_s"] {
            assert!(
                reads[log][key].as_f64().is_some_and(|r| r > 0.0),
                "{log} {key}: {reads}"
            );
        }
    }

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
            ("replay_verify_events_per_s", "sha256_node_hashes_per_s"),
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

/// Writes a small Climate-FEVER-shaped claims file: one claim of each label, each with its
/// annotated sentences, plus sentences on other topics for the search to pass over.
fn claims_file(dir: &std::path::Path) {
    let evidence = |id: &str, label: &str, article: &str, text: &str| {
        serde_json::json!({"evidence_id": id, "evidence_label": label, "article": article,
            "evidence": text, "entropy": 0.0, "votes": [label]})
    };
    let claims = [
        serde_json::json!({"claim_id": "1", "claim": "Arctic sea ice extent has declined sharply since 1979",
        "claim_label": "SUPPORTS", "evidences": [
            evidence("Sea ice:1", "SUPPORTS", "Sea ice", "Arctic sea ice extent has declined sharply since satellite records began in 1979."),
            evidence("Sea ice:2", "NOT_ENOUGH_INFO", "Sea ice", "Sea ice forms when ocean water freezes in polar regions."),
        ]}),
        serde_json::json!({"claim_id": "2", "claim": "Volcanoes emit more carbon dioxide than human activity",
        "claim_label": "REFUTES", "evidences": [
            evidence("Volcano:1", "REFUTES", "Volcano", "Human activity emits far more carbon dioxide each year than all volcanoes combined."),
            evidence("Volcano:2", "NOT_ENOUGH_INFO", "Volcano", "A volcano is a rupture in the crust of a planet."),
        ]}),
        serde_json::json!({"claim_id": "3", "claim": "Glacier retreat in the Alps is caused by warming",
        "claim_label": "DISPUTED", "evidences": [
            evidence("Glacier:1", "SUPPORTS", "Glacier", "Warming has caused glacier retreat in the Alps since 1850."),
            evidence("Glacier:2", "REFUTES", "Glacier", "Some Alps glacier retreat predates industrial warming and followed lower snowfall."),
        ]}),
        serde_json::json!({"claim_id": "4", "claim": "Penguins migrate to the Sahara each winter",
        "claim_label": "NOT_ENOUGH_INFO", "evidences": [
            evidence("Penguin:1", "NOT_ENOUGH_INFO", "Penguin", "Penguins are flightless seabirds of the Southern Hemisphere."),
        ]}),
    ];
    let text: String = claims.iter().map(|c| format!("{c}\n")).collect();
    std::fs::write(dir.join("climate-fever.jsonl"), text).unwrap();
}

#[test]
fn the_decisions_benchmark_reports_every_run_and_v2_follows_the_annotated_evidence() {
    let data = tempfile::tempdir().unwrap();
    let input = tempfile::tempdir().unwrap();
    claims_file(input.path());
    let out = run(
        data.path(),
        &[
            "bench",
            "decisions",
            "--data",
            input.path().to_str().unwrap(),
            "--claims",
            "4",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["bench"], "decisions");
    assert_eq!(report["claims"], 4);
    let runs = report["runs"].as_array().unwrap();
    // Two rule sets × two modes × two research dates.
    assert_eq!(runs.len(), 8, "{report}");
    for run in runs {
        let confusion: u64 = run["confusion"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap())
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(confusion, 4, "{run}");
        let agreement = run["agreement"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&agreement), "{run}");
    }
    let find = |rule_set: &str, mode: &str, date: &str| {
        runs.iter()
            .find(|r| r["rule_set"] == rule_set && r["mode"] == mode && r["research_date"] == date)
            .unwrap_or_else(|| panic!("no {rule_set} {mode} {date} in {report}"))
    };
    let today = report["today"].as_str().unwrap();
    // With the annotators' evidence v2 gives each label's verdict, whatever the research date:
    // the sentences are undated, so recency takes no part.
    for date in [today, "2020-01-01"] {
        let oracle = find("v2", "oracle", date);
        assert_eq!(oracle["agreement"], 1.0, "{oracle}");
        assert_eq!(
            oracle["confusion"],
            serde_json::json!([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
        );
    }
    let v2_changed = report["date_sensitivity"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["rule_set"] == "v2")
        .map(|s| s["verdicts_changed"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(v2_changed, 0.0, "{report}");
    // v1 counts the default date's age: years later, the same evidence is insufficient.
    let v1_today = find("v1", "oracle", today);
    assert!(v1_today["agreement"].as_f64().unwrap() < 1.0, "{v1_today}");
}

#[test]
fn the_decisions_benchmark_names_its_ranking_and_leaves_a_whole_directory() {
    let Some(model) = test_support::encoder_model_dir() else {
        return;
    };
    let model = model.to_str().unwrap();
    let data = tempfile::tempdir().unwrap();
    let input = tempfile::tempdir().unwrap();
    claims_file(input.path());
    let kept = input.path().join("kept");
    let bench = |extra: &[&str]| -> Value {
        let mut args = vec![
            "bench",
            "decisions",
            "--data",
            input.path().to_str().unwrap(),
            "--claims",
            "4",
            "--json",
        ];
        args.extend(extra);
        let out = run(data.path(), &args);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let lexical = bench(&[]);
    let ranking = lexical["ranking"].as_str().unwrap();
    assert!(
        ranking.starts_with("research-ledger-rank-v1: bm25f"),
        "{ranking}"
    );
    let meaning = bench(&["--encoder", model, "--dir", kept.to_str().unwrap()]);
    let ranking = meaning["ranking"].as_str().unwrap();
    assert!(
        ranking.starts_with("research-ledger-rank-v2: "),
        "{ranking}"
    );
    assert!(ranking.contains("encoder=[bert-mean-l2 "), "{ranking}");

    // The kept directory is whole: every event under a checkpoint, so an export holds them all.
    // (It is an embedded directory; on PostgreSQL the suite points commands at a database.)
    if crate::server::on_postgres() {
        return;
    }
    let kept_data = kept.join("data");
    let bundle = input.path().join("all.json");
    let out = run(
        &kept_data,
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("no checkpoint covers"),
        "{}",
        stderr(&out)
    );
    let verified = run(&kept_data, &["verify", "--json"]);
    let size = serde_json::from_slice::<Value>(&verified.stdout).unwrap()["size"]
        .as_u64()
        .unwrap();
    let written: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(written["events"].as_array().unwrap().len() as u64, size);
}

/// `bench service --json`, as small as it goes: every write run has the engine's and the
/// in-process baselines beside the transports, every ratio is its rate over the engine's, every
/// read and every generated ledger is reported.
#[test]
fn the_service_benchmark_reports_each_transport_beside_its_baselines() {
    let data = tempfile::tempdir().unwrap();
    let out = run(
        data.path(),
        &[
            "bench",
            "service",
            "--json",
            "--connections",
            "1,2",
            "--sizes",
            "300",
            "--write-secs",
            "0.3",
            "--reads",
            "5",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let writes = report["writes"].as_array().unwrap();
    assert_eq!(
        writes
            .iter()
            .map(|w| w["connections"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2]
    );
    for w in writes {
        let w = &json!({ "w": w });
        let engine = positive(w, "w", "engine_appends_per_s");
        for key in [
            "engine_cpu_ms_per_append",
            "in_process_writes_per_s",
            "in_process_cpu_ms_per_write",
            "server_cpu_ms_per_write",
            "rest_appends_per_sync",
            "client_cpu_ms_per_write",
        ] {
            positive(w, "w", key);
        }
        for transport in ["rest", "mcp"] {
            let rate = positive(w, "w", &format!("{transport}_writes_per_s"));
            let ratio = positive(w, "w", &format!("{transport}_ratio"));
            assert!(close(ratio, rate / engine), "{transport}: {w}");
            let latency = &w["w"][format!("{transport}_latency")];
            assert!(latency["p50_ms"].as_f64().unwrap() <= latency["p99_ms"].as_f64().unwrap());
        }
    }
    let reads: Vec<&str> = report["reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["what"].as_str().unwrap())
        .collect();
    assert_eq!(reads.len(), 4, "{reads:?}");
    assert!(reads.iter().any(|r| r.contains("GraphQL")), "{reads:?}");
    let scale = report["scale"].as_array().unwrap();
    assert_eq!(scale.len(), 1);
    let generated = &json!({ "s": scale[0] });
    assert!(positive(generated, "s", "events") >= 300.0, "{generated}");
    for key in ["tasks", "cold_start_ms", "rss_mib"] {
        positive(generated, "s", key);
    }
}
