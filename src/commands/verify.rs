//! `research-ledger verify`: checks the whole ledger from scratch.

use std::path::Path;

use crate::Outcome;

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let ledger = super::open_ledger(data_dir)?;
    let bar = super::progress_bar(ledger.head().size, "verifying");
    let report = ledger.verify_from_scratch(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    for note in &report.key_chain_breaks {
        eprintln!("WARNING: the chain of signing keys breaks: {note}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        match &report.failure {
            None => {
                println!(
                    "intact: {} events verified; {} signed checkpoints checked; head hash {}; root {}",
                    report.size, report.checkpoints_checked, report.head_hash, report.root
                );
            }
            Some(failure) => {
                println!(
                    "FAILED at seq {}: {}\n{} events before it verified.",
                    failure.seq, failure.problem, failure.seq
                );
            }
        }
    }
    Ok(if report.is_intact() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
