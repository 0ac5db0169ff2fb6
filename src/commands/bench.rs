//! `research-ledger bench`: harnesses that measure a part of the product on this machine and
//! print figures next to baselines measured in the same run.
//!
//! A benchmark here never passes or fails on a speed: machines differ, and a figure is only
//! meaningful next to what the same disk and the same cores do without the product in the way.
//! Each target therefore prints its figures, the raw baselines, and the ratio of one to the
//! other.

mod baseline;
mod frames;
mod ledger;
mod report;
mod workload;

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
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Outcome> {
    match &args.target {
        Target::Ledger(args) => ledger::run(args),
    }
}
