//! The demo: research tasks on the bundled sample corpus, run through the tools exactly as an
//! assistant would call them, with the judgements an assistant would make on reading each
//! document (they come with the sample, in `questions.json`).
//!
//! The driver talks to the service only through [`Tools`], a tool caller, so the same script
//! runs against the service in process or through a real MCP transport.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};

include!(concat!(env!("OUT_DIR"), "/sample_corpus.rs"));

/// Calls a tool by name with JSON arguments and returns its structured result, or the
/// structured error as an `Err`.
pub(crate) trait Tools {
    fn call(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value>;
}

/// The sample's questions file.
#[derive(Debug, Deserialize)]
pub(crate) struct Sample {
    pub(crate) questions: Vec<Question>,
}

/// One research question of the sample, with the judgements made on reading its documents.
#[derive(Debug, Deserialize)]
pub(crate) struct Question {
    pub(crate) id: String,
    pub(crate) question: String,
    #[serde(default)]
    pub(crate) constraints: Vec<String>,
    pub(crate) research_date: String,
    pub(crate) sub_questions: Vec<String>,
    pub(crate) screening: Vec<Screening>,
}

/// The judgement on one document.
#[derive(Debug, Deserialize)]
pub(crate) struct Screening {
    pub(crate) doc_id: String,
    pub(crate) sub_question_index: Option<u32>,
    pub(crate) adopt: bool,
    pub(crate) stance: String,
    pub(crate) reason: String,
}

/// The bundled sample's questions.
pub(crate) fn sample() -> anyhow::Result<Sample> {
    serde_json::from_str(SAMPLE_QUESTIONS).context("the bundled questions.json does not parse")
}

/// Writes the bundled documents into `dir`, for ingest.
pub(crate) fn write_documents(dir: &std::path::Path) -> anyhow::Result<()> {
    for (name, contents) in SAMPLE_DOCUMENTS {
        std::fs::write(dir.join(name), contents).with_context(|| format!("cannot write {name}"))?;
    }
    Ok(())
}

/// What a run of one question produced.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) task_id: String,
    pub(crate) searches: usize,
    pub(crate) candidates: usize,
    pub(crate) adopted: usize,
    pub(crate) rejected: usize,
    pub(crate) conflicts: Vec<Value>,
    pub(crate) human_decisions: Vec<String>,
    pub(crate) card: Value,
    pub(crate) explanation: String,
    /// Which evidence item each document of the corpus became.
    pub(crate) evidence_of: BTreeMap<String, String>,
}

fn str_field<'a>(value: &'a Value, field: &str) -> anyhow::Result<&'a str> {
    value[field]
        .as_str()
        .with_context(|| format!("the result has no {field}: {value}"))
}

/// Runs one question from opening the task to explaining the verdict.
pub(crate) fn run_question(tools: &mut dyn Tools, q: &Question) -> anyhow::Result<Outcome> {
    let opened = tools.call(
        "research_open_task",
        json!({
            "question": q.question,
            "constraints": q.constraints,
            "research_date": q.research_date,
            "idempotency_key": format!("demo-open-{}-{}", q.id, std::process::id()),
        }),
    )?;
    let task_id = str_field(&opened, "task_id")?.to_owned();
    let expanded = tools.call(
        "research_expand_subquestions",
        json!({"task_id": task_id, "sub_questions": q.sub_questions}),
    )?;
    let sub_question_ids: Vec<String> = expanded["sub_questions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();

    let (evidence_of, searches) = search_every_scope(tools, &task_id, &sub_question_ids)?;
    let (adopted, rejected) = screen_as_judged(tools, &task_id, q, &evidence_of)?;
    tools.call("synthesis_research_synthesis", json!({"task_id": task_id}))?;
    let resolved = tools.call(
        "evaluation_conflict_resolution",
        json!({"task_id": task_id}),
    )?;
    let (conflicts, human_decisions) = decide_pending(tools, &task_id, &resolved)?;
    tools.call(
        "evaluation_build_decision_matrix",
        json!({"task_id": task_id}),
    )?;
    let card = tools.call(
        "evaluation_generate_conclusion",
        json!({"task_id": task_id}),
    )?;
    let explained = tools.call("evaluation_explain_reasoning", json!({"task_id": task_id}))?;
    let explanation = str_field(&explained, "markdown")?.to_owned();
    if card["stance"].is_null() {
        bail!("the conclusion has no stance: {card}");
    }
    Ok(Outcome {
        task_id,
        searches,
        candidates: evidence_of.len(),
        adopted,
        rejected,
        conflicts,
        human_decisions,
        card,
        explanation,
        evidence_of,
    })
}

/// Searches the main question, then each sub-question: which document became which evidence
/// item, and how many searches ran.
fn search_every_scope(
    tools: &mut dyn Tools,
    task_id: &str,
    sub_question_ids: &[String],
) -> anyhow::Result<(BTreeMap<String, String>, usize)> {
    let mut evidence_of: BTreeMap<String, String> = BTreeMap::new();
    let mut searches = 0;
    let mut scopes: Vec<Option<&String>> = vec![None];
    scopes.extend(sub_question_ids.iter().map(Some));
    for scope in scopes {
        let mut arguments = json!({"task_id": task_id, "limit": 20});
        if let Some(id) = scope {
            arguments["sub_question"] = json!(id);
        }
        let found = tools.call("retrieval_search_evidence", arguments)?;
        searches += 1;
        for candidate in found["candidates"].as_array().into_iter().flatten() {
            if let (Some(doc), Some(ev)) = (
                candidate["result_id"].as_str(),
                candidate["evidence_id"].as_str(),
            ) {
                evidence_of.insert(doc.to_owned(), ev.to_owned());
            }
        }
    }
    Ok((evidence_of, searches))
}

/// Screens every candidate: the sample's judgement where it has one; a document from another
/// question is off topic. Answers how many were adopted and rejected.
fn screen_as_judged(
    tools: &mut dyn Tools,
    task_id: &str,
    q: &Question,
    evidence_of: &BTreeMap<String, String>,
) -> anyhow::Result<(usize, usize)> {
    let judged: BTreeMap<&str, &Screening> =
        q.screening.iter().map(|s| (s.doc_id.as_str(), s)).collect();
    let mut decisions = Vec::new();
    let (mut adopted, mut rejected) = (0, 0);
    for (doc, evidence_id) in evidence_of {
        let decision = match judged.get(doc.as_str()) {
            Some(s) => {
                let scope = match s.sub_question_index {
                    Some(i) => json!(format!("sq-{i}")),
                    None => Value::Null,
                };
                if s.adopt {
                    adopted += 1;
                } else {
                    rejected += 1;
                }
                json!({
                    "evidence_id": evidence_id,
                    "adopt": s.adopt,
                    "stance": s.stance,
                    "sub_question": scope,
                    "reason": s.reason,
                })
            }
            None => {
                rejected += 1;
                json!({
                    "evidence_id": evidence_id,
                    "adopt": false,
                    "reason": format!("{doc} is about another question"),
                })
            }
        };
        decisions.push(decision);
    }
    // The same item can be reached from two documents with the same text: screen it once.
    let mut seen = std::collections::BTreeSet::new();
    decisions.retain(|d| seen.insert(d["evidence_id"].as_str().unwrap_or_default().to_owned()));
    tools.call(
        "synthesis_screen_evidence",
        json!({"task_id": task_id, "decisions": decisions}),
    )?;
    Ok((adopted, rejected))
}

/// Decides each pending conflict as the demo's assistant: both stand. Answers the conflicts as
/// they stand and the ids decided.
fn decide_pending(
    tools: &mut dyn Tools,
    task_id: &str,
    resolved: &Value,
) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let mut conflicts = resolved["conflicts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut decided = Vec::new();
    for conflict in &mut conflicts {
        if conflict["tier"] == "pending" {
            // What a reviewer would do with two sides of near-equal authority published within
            // weeks of each other: let both stand until better evidence settles it.
            let conflict_id = str_field(conflict, "conflict_id")?.to_owned();
            let answer = tools.call(
                "evaluation_resolve_conflict",
                json!({
                    "task_id": task_id,
                    "conflict_id": conflict_id,
                    "winner": "both_stand",
                    "reason": "Both sides are recent and of near-equal authority and measure different things; neither is overruled until newer evidence settles it.",
                }),
            )?;
            *conflict = answer["conflict"].clone();
            decided.push(conflict_id);
        }
    }
    Ok((conflicts, decided))
}
