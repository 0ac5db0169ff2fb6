//! `research-ledger bench`: harnesses that measure a part of the product on this machine and
//! print figures next to baselines measured in the same run.
//!
//! A benchmark here never passes or fails on a speed: machines differ, and a figure is only
//! meaningful next to what the same disk and the same cores do without the product in the way.
//! Each target therefore prints its figures, the raw baselines, and the ratio of one to the
//! other.

mod decisions;
mod ledger;
mod search;
mod service;
mod stats;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::Outcome;

/// Arguments of `bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    target: Target,
}

/// What to measure. Each target is its own harness with its own options.
#[derive(Debug, clap::Subcommand)]
enum Target {
    /// Durable appends (one writer, then many), replay and full verification, inclusion
    /// proofs; with raw sled and raw blake3 baselines measured in the same run.
    Ledger(ledger::Args),
    /// The embedded corpus at scale: ingest documents/s, search queries/s with p50/p99
    /// latency, and how often a gold evidence sentence is in the top results.
    Search(search::Args),
    /// Verdicts against the labels of Climate-FEVER claims, end to end through the tools, for
    /// each rule set: retrieval with a perfect screener and the annotated evidence added
    /// directly, at today's research date and the evidence's default date.
    Decisions(decisions::Args),
    /// The service through its real transports: `serve` spawned on a temporary directory,
    /// concurrent writes over REST and MCP beside the ledger's own concurrent appends, read
    /// tool calls and a GraphQL query, and cold start, memory and reads on generated ledgers
    /// of 10k, 100k and 1M events.
    Service(service::Args),
}

impl Args {
    /// Whether the target runs on `--storage-url` (only `bench ledger` does).
    pub(crate) fn takes_storage_url(&self) -> bool {
        matches!(self.target, Target::Ledger(_))
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Outcome> {
    match &args.target {
        Target::Ledger(args) => match crate::config::storage_url() {
            Some(url) => ledger::run_postgres(url, args),
            None => ledger::run(args),
        },
        Target::Search(args) => search::run(args),
        Target::Decisions(args) => decisions::run(args),
        Target::Service(args) => service::run(args),
    }
}

/// Says what the run is doing, on a terminal only: the report on stdout stays clean.
fn phase(what: &str) {
    if std::io::stderr().is_terminal() {
        tell!("{what}…");
    }
}

/// Where a benchmark writes: a temporary directory removed on drop, or one the user chose.
#[derive(Debug)]
enum Scratch {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

impl Scratch {
    /// A new temporary directory, or `dir` after checking it is new or empty.
    fn new(dir: Option<&Path>) -> anyhow::Result<Scratch> {
        match dir {
            None => Ok(Scratch::Temporary(
                tempfile::Builder::new()
                    .prefix("research-ledger-bench-")
                    .tempdir()
                    .context("cannot create a temporary directory")?,
            )),
            Some(dir) => {
                if dir.exists() {
                    let mut entries = std::fs::read_dir(dir)
                        .with_context(|| format!("cannot read {}", dir.display()))?;
                    // A ledger or anything else already there must not be mixed with, or
                    // mistaken for, what a benchmark writes.
                    if entries.next().is_some() {
                        bail!(
                            "{} is not empty; give a new or empty directory for the benchmark",
                            dir.display()
                        );
                    }
                } else {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("cannot create {}", dir.display()))?;
                }
                Ok(Scratch::Kept(dir.to_owned()))
            }
        }
    }

    fn path(&self) -> &Path {
        match self {
            Scratch::Temporary(t) => t.path(),
            Scratch::Kept(p) => p,
        }
    }

    /// Whether what was written stays after the run.
    fn kept(&self) -> bool {
        matches!(self, Scratch::Kept(_))
    }
}

/// The records of a JSON Lines file (blank lines skipped), each read as `T`; a line that is not
/// one is named by its number.
pub(crate) fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Vec<T>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(at, line)| {
            serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not what was expected", path.display(), at + 1))
        })
        .collect()
}
