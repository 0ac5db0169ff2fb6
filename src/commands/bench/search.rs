//! `research-ledger bench search`: measures the embedded corpus on the Climate-FEVER data.
//!
//! It ingests an evidence collection into a fresh corpus in a temporary folder (never the data
//! directory's), then searches every claim of a Climate-FEVER claims file the way the service
//! does (with the claim as the research question, so relevance is computed too), and prints:
//! ingest documents per second, search queries per second with p50 and p99 latency, and as a
//! quality figure the share of claims with one of their annotated evidence sentences among the
//! top hits. It prints figures and asserts nothing: timings depend on the machine.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use sources::{Corpus, CorpusLimits, Defaults, tokenize};

use crate::Outcome;
use crate::commands::ingest::ingest_with_progress;

/// Arguments of `bench search`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The evidence collection to ingest (any format `ingest` reads), e.g. Climate-FEVER's
    /// `evidence.jsonl`.
    #[arg(long, value_name = "PATH")]
    evidence: PathBuf,

    /// Climate-FEVER claims, one JSON object a line with `claim` and `evidences[].evidence_id`.
    #[arg(long, value_name = "FILE")]
    claims: PathBuf,

    /// Publish date given to evidence without one (Climate-FEVER's sentences have none).
    #[arg(long, value_name = "YYYY-MM-DD", default_value = "2020-01-01")]
    default_publish_date: NaiveDate,

    /// Hits asked for per claim; the quality figure counts a claim as found when one of its
    /// evidence sentences is among them.
    #[arg(long, default_value_t = 5)]
    top: usize,

    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Deserialize)]
struct Claim {
    claim: String,
    #[serde(default)]
    evidences: Vec<ClaimEvidence>,
}

#[derive(Debug, Deserialize)]
struct ClaimEvidence {
    evidence_id: String,
    #[serde(default)]
    evidence_label: Option<String>,
}

/// What the bench measured.
#[derive(Debug, Serialize)]
struct Figures {
    documents: u64,
    ingest_secs: f64,
    ingest_docs_per_sec: f64,
    reingest_unchanged_secs: f64,
    claims: usize,
    top: usize,
    search_secs: f64,
    queries_per_sec: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    latency_max_us: f64,
    claims_with_evidence_in_top: f64,
    claims_with_labelled_evidence_in_top: f64,
    index_state: String,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Outcome> {
    let claims: Vec<Claim> = super::read_lines(&args.claims)?;
    if claims.is_empty() {
        bail!("{} holds no claims", args.claims.display());
    }
    let scratch = tempfile::tempdir().context("cannot create a temporary folder")?;
    let corpus = Corpus::open(scratch.path().join("corpus"), CorpusLimits::default())?;
    let defaults = Defaults {
        publish_date: Some(args.default_publish_date),
        ..Defaults::default()
    };
    let paths = [args.evidence.clone()];

    let started = Instant::now();
    let report = ingest_with_progress(&corpus, &paths, &defaults)?;
    let ingest = started.elapsed();
    if !report.is_clean() {
        for error in &report.errors {
            tell!("error: {error}");
        }
        bail!("{} evidence documents could not be ingested", report.failed);
    }
    let started = Instant::now();
    let again = ingest_with_progress(&corpus, &paths, &defaults)?;
    let reingest = started.elapsed();
    if again.unchanged != report.documents {
        bail!("re-ingesting the same evidence changed the corpus");
    }

    // One untimed pass first, so the timed pass measures searching rather than the first
    // page faults of a freshly written index.
    let questions: Vec<Vec<String>> = claims.iter().map(|c| tokenize(&c.claim)).collect();
    for (claim, question) in claims.iter().zip(&questions) {
        search(&corpus, &claim.claim, args.top, question)?;
    }
    let mut latencies = Vec::with_capacity(claims.len());
    let (mut found_any, mut found_labelled) = (0usize, 0usize);
    let bar = crate::commands::progress_bar(claims.len() as u64, "searching");
    let started = Instant::now();
    for (claim, question) in claims.iter().zip(&questions) {
        let one = Instant::now();
        let result = search(&corpus, &claim.claim, args.top, question)?;
        latencies.push(one.elapsed());
        bar.inc(1);
        let shown: Vec<&str> = result
            .hits
            .iter()
            .flat_map(|h| {
                std::iter::once(h.id.as_str()).chain(h.folded_ids.iter().map(String::as_str))
            })
            .collect();
        let is_shown = |e: &&ClaimEvidence| shown.contains(&e.evidence_id.as_str());
        if claim.evidences.iter().any(|e| is_shown(&e)) {
            found_any += 1;
        }
        let labelled = |e: &&ClaimEvidence| {
            matches!(e.evidence_label.as_deref(), Some("SUPPORTS" | "REFUTES"))
        };
        if claim
            .evidences
            .iter()
            .filter(labelled)
            .any(|e| is_shown(&e))
        {
            found_labelled += 1;
        }
    }
    let searching = started.elapsed();
    bar.finish_and_clear();
    latencies.sort_unstable();

    let secs = |d: Duration| d.as_secs_f64();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let n = claims.len();
    let figures = Figures {
        documents: report.documents,
        ingest_secs: secs(ingest),
        ingest_docs_per_sec: report.documents as f64 / secs(ingest),
        reingest_unchanged_secs: secs(reingest),
        claims: n,
        top: args.top,
        search_secs: secs(searching),
        queries_per_sec: n as f64 / secs(searching),
        latency_p50_us: micros(percentile(&latencies, 50)),
        latency_p99_us: micros(percentile(&latencies, 99)),
        latency_max_us: micros(latencies.last().copied().unwrap_or_default()),
        claims_with_evidence_in_top: found_any as f64 / n as f64,
        claims_with_labelled_evidence_in_top: found_labelled as f64 / n as f64,
        index_state: report.index_state.id.clone(),
    };
    if args.json {
        say!("{}", serde_json::to_string_pretty(&figures)?);
    } else {
        print_figures(&figures);
    }
    Ok(Outcome::Passed)
}

fn search(
    corpus: &Corpus,
    claim: &str,
    top: usize,
    question: &[String],
) -> anyhow::Result<sources::SearchResult> {
    corpus
        .search(claim, top, question)
        .with_context(|| format!("searching for {claim:?}"))
}

fn print_figures(f: &Figures) {
    say!(
        "ingest:  {} documents in {:.3} s = {:.0} documents/s (re-ingest, all unchanged: {:.3} s)",
        f.documents,
        f.ingest_secs,
        f.ingest_docs_per_sec,
        f.reingest_unchanged_secs
    );
    say!(
        "search:  {} claims, top {}, in {:.3} s = {:.0} queries/s; latency p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        f.claims,
        f.top,
        f.search_secs,
        f.queries_per_sec,
        f.latency_p50_us,
        f.latency_p99_us,
        f.latency_max_us
    );
    say!(
        "quality: {:.1}% of claims have one of their evidence sentences in the top {} ({:.1}% one labelled SUPPORTS or REFUTES)",
        f.claims_with_evidence_in_top * 100.0,
        f.top,
        f.claims_with_labelled_evidence_in_top * 100.0
    );
    say!("index state {}", f.index_state);
}

/// The nearest-rank percentile of sorted durations.
fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}
