//! `research-ledger verify`: checks the whole ledger from scratch, in the data directory or,
//! with `--server`, in the server that holds it (`GET /v1/verify`). Either way the same report
//! is printed and the exit status is the same.

use std::path::Path;

use ledger::VerifyReport;

use crate::Outcome;
use crate::remote::ServerArgs;

/// Arguments of `verify`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: ServerArgs,
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let report = match args.remote.remote()? {
        Some(remote) => {
            let spinner = super::spinner(&format!("verifying on {}", remote.server()));
            let report: VerifyReport = remote.get("/v1/verify", &[])?;
            spinner.finish_and_clear();
            report
        }
        None => {
            let ledger = super::open_ledger_read_only(data_dir)?;
            let bar = super::progress_bar(ledger.head().size, "verifying");
            let report = ledger.verify_from_scratch(&mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            });
            bar.finish_and_clear();
            report
        }
    };
    for note in &report.key_chain_breaks {
        tell!("WARNING: the chain of signing keys breaks: {note}");
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for note in &report.notes {
            say!("note: {note}");
        }
        match &report.failure {
            None if report.incomplete.is_some() => {}
            None => {
                say!(
                    "intact: {} events verified; {} signed checkpoints checked; head hash {}; root {}",
                    report.size,
                    report.checkpoints_checked,
                    report.head_hash,
                    report.root
                );
            }
            Some(failure) => {
                say!(
                    "FAILED at seq {}: {}\n{} events before it verified.",
                    failure.seq,
                    failure.problem,
                    failure.seq
                );
            }
        }
    }
    if let (None, Some(why)) = (&report.failure, &report.incomplete) {
        anyhow::bail!(
            "verification could not finish ({} events checked): {why}",
            report.checked
        );
    }
    Ok(if report.is_intact() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
