//! `research-ledger demo` through the spawned binary: every sample question reaches the verdict
//! its documents were written to produce, with conflicts of every tier, and the ledger it leaves
//! verifies.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{run, stderr, stdout};

const QUESTIONS: &str = include_str!("../../corpus/sample/questions.json");

#[test]
fn the_demo_reaches_the_designed_verdicts_and_the_ledger_verifies() {
    let data = tempfile::tempdir().unwrap();
    let out = run(data.path(), &["demo", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["verification"]["failure"].is_null(),
        "{}",
        report["verification"]
    );
    let sample: Value = serde_json::from_str(QUESTIONS).unwrap();
    let mut tiers_seen = BTreeSet::new();
    for task in report["tasks"].as_array().unwrap() {
        let id = task["question_id"].as_str().unwrap();
        let question = sample["questions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["id"] == id)
            .unwrap();
        let expected = &question["expected"];
        assert_eq!(
            task["card"]["stance"], expected["conclusion"]["stance"],
            "{id}"
        );

        // The documents the verdict used are the ones the sample says.
        let doc_of: BTreeMap<&str, &str> = task["evidence_of"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(doc, ev)| (ev.as_str().unwrap(), doc.as_str()))
            .collect();
        let used: BTreeSet<&str> = task["card"]["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| doc_of[e["evidence_id"].as_str().unwrap()])
            .collect();
        let designed: BTreeSet<&str> = expected["conclusion"]["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert_eq!(used, designed, "{id}");

        // Each scope's conflict was decided by the tier the sample was written for.
        for scope in expected["scopes"].as_array().unwrap() {
            let Some(tier) = scope["tier"].as_str() else {
                continue;
            };
            let scope_id = scope["sub_question_index"]
                .as_u64()
                .map(|i| format!("sq-{i}"));
            let conflict = task["conflicts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["scope"].as_str().map(str::to_owned) == scope_id)
                .unwrap_or_else(|| panic!("{id}: no conflict in scope {scope_id:?}"));
            if tier == "pending" {
                // The demo's reviewer decides it: both sides stand.
                assert_eq!(conflict["tier"], "human", "{id}");
                assert_eq!(conflict["resolution"], "both_stand", "{id}");
                assert_eq!(task["human_decisions"].as_array().unwrap().len(), 1);
            } else {
                assert_eq!(conflict["tier"], tier, "{id} {scope_id:?}");
                assert_eq!(conflict["winner"], scope["winner"], "{id} {scope_id:?}");
            }
            tiers_seen.insert(tier.to_owned());
        }
    }
    assert_eq!(
        tiers_seen,
        ["authority", "pending", "recency"]
            .map(str::to_owned)
            .into()
    );
}

#[test]
fn the_demo_prints_cards_explanations_and_how_to_audit() {
    let data = tempfile::tempdir().unwrap();
    let out = run(
        data.path(),
        &["demo", "--question", "gongxiang-danche-qingchuan"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("## Conclusion cl-1: uncertain"), "{text}");
    assert!(text.contains("was pending: a reviewer decided"), "{text}");
    assert!(text.contains("Ledger: intact."), "{text}");
    assert!(text.contains("replay"), "{text}");
    // Running it again on the same data directory adds a task and still verifies.
    let again = run(data.path(), &["demo", "--question", "lake-varden-blooms"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stdout(&again).contains("opposing"));
    let unknown = run(data.path(), &["demo", "--question", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("no question"),
        "{}",
        stderr(&unknown)
    );
}
