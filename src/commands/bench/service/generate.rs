//! Generated ledgers for `bench service`: research tasks written through the service's own
//! tools, in process, as an assistant would write them — a question, evidence from several
//! sources on both sides, a screening, conflict resolution, the matrix, a verdict and its
//! explanation — until the ledger holds the events asked for.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use serde_json::{Value, json};
use service::{Caller, Service, ServiceOptions};

/// Evidence items each generated task gathers.
const ITEMS_PER_TASK: usize = 8;
/// Threads writing tasks at once, so that their appends share syncs as a busy server's do.
const WRITERS: usize = 16;

const SOURCES: [(&str, &str); 8] = [
    ("stats.example.org", "government"),
    ("journal.example.org", "academic_paper"),
    ("institute.example.org", "institutional_report"),
    ("daily.example.org", "news_original"),
    ("wire.example.org", "news_reprint"),
    ("notes.example.org", "blog"),
    ("lab.example.org", "primary_data"),
    ("forum.example.org", "social"),
];

const TOPICS: [&str; 6] = [
    "Does lithium supply grow faster than demand",
    "Do heat pumps cut household emissions in cold climates",
    "Is sea level rise accelerating along the North Sea coast",
    "锂电池回收率是否在提高",
    "Do four-day weeks keep output steady",
    "Are coral reefs recovering after bleaching events",
];

/// What a generation wrote.
#[derive(Debug)]
pub(super) struct Generated {
    pub(super) events: u64,
    pub(super) tasks: u64,
    pub(super) elapsed: Duration,
}

/// Writes research tasks into a new data directory at `dir` until its ledger holds at least
/// `events` events, then shuts the service down as a server would (a snapshot of the read
/// models, a checkpoint).
pub(super) fn generate(dir: &Path, events: u64) -> anyhow::Result<Generated> {
    let service = Service::open(ServiceOptions::new(dir))
        .with_context(|| format!("cannot open a data directory in {}", dir.display()))?;
    let started = Instant::now();
    let tasks = AtomicU64::new(0);
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let service = service.clone();
                let tasks = &tasks;
                s.spawn(move || -> anyhow::Result<()> {
                    let caller = Caller::new(format!("assistant-{w}"));
                    while service.ledger().head().size < events {
                        let n = tasks.fetch_add(1, Ordering::Relaxed);
                        research_task(&service, &caller, n)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle
                .join()
                .map_err(|_| anyhow!("a writer thread panicked"))??;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed();
    let written = service.ledger().head().size;
    service.shutdown();
    Ok(Generated {
        events: written,
        tasks: tasks.load(Ordering::Relaxed),
        elapsed,
    })
}

fn call(service: &Service, caller: &Caller, tool: &str, arguments: Value) -> anyhow::Result<Value> {
    service
        .call_tool(caller, tool, &arguments)
        .map(|o| o.structured)
        .map_err(|e| anyhow!("{tool}: {e}"))
}

/// One task researched start to finish: about `3 · ITEMS_PER_TASK + 6` events.
fn research_task(service: &Service, caller: &Caller, n: u64) -> anyhow::Result<()> {
    let topic = TOPICS[(n % TOPICS.len() as u64) as usize];
    let opened = call(
        service,
        caller,
        "research_open_task",
        json!({
            "question": format!("{topic}? (case {n})"),
            "constraints": ["public sources only"],
            "research_date": "2025-06-30",
        }),
    )?;
    let task = opened["task_id"]
        .as_str()
        .ok_or_else(|| anyhow!("an opened task has no id"))?
        .to_owned();
    let mut decisions = Vec::with_capacity(ITEMS_PER_TASK);
    for i in 0..ITEMS_PER_TASK {
        let (source, source_type) = SOURCES[(n as usize + i) % SOURCES.len()];
        let stance = if (n as usize + i).is_multiple_of(3) {
            "opposes"
        } else {
            "supports"
        };
        let added = call(
            service,
            caller,
            "retrieval_add_evidence",
            json!({
                "task_id": task,
                "source": source,
                "url": format!("https://{source}/reports/{n}/{i}"),
                "publish_date": format!("2024-{:02}-{:02}", 1 + (i % 12), 1 + (n % 28)),
                "source_type": source_type,
                "citation_count": (n as usize * 7 + i * 13) % 400,
                "content": format!(
                    "{source} finds, in report {n}.{i}, that the answer to \"{topic}\" is {stance} the claim. \
                     The figures cover five years of observations and a comparison with two earlier studies; \
                     the method and its limits are set out in an appendix."
                ),
                "stance": stance,
            }),
        )?;
        let id = added["evidence"]["evidence_id"]
            .as_str()
            .or_else(|| added["evidence_id"].as_str())
            .ok_or_else(|| anyhow!("added evidence has no id: {added}"))?
            .to_owned();
        // Most items are adopted; one in four is rejected.
        decisions.push(
            json!({"evidence_id": id, "adopt": i % 4 != 3, "reason": "screened by the benchmark"}),
        );
    }
    call(
        service,
        caller,
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": decisions}),
    )?;
    for step in [
        "evaluation_conflict_resolution",
        "evaluation_build_decision_matrix",
        "evaluation_generate_conclusion",
        "evaluation_explain_reasoning",
    ] {
        call(service, caller, step, json!({"task_id": task}))?;
    }
    Ok(())
}
