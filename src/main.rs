//! `research-ledger`: the command line of the research ledger service.
//!
//! Exit status: 0 when the command did what it was asked and every check passed; 1 when a
//! check failed (the ledger does not verify, a proof is invalid); 2 when the command could not
//! run (bad arguments, the data directory is locked, an I/O error).

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An event-sourced, hash-chained research ledger.
#[derive(Debug, Parser)]
#[command(name = "research-ledger", version, about)]
struct Cli {
    /// The data directory.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_DATA_DIR",
        default_value = "./data"
    )]
    data_dir: PathBuf,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify the whole ledger from its first event: every hash, every link, every seq.
    Verify(commands::verify::Args),
    /// Measure the product on this machine: figures next to raw baselines from the same run.
    Bench(commands::bench::Args),
}

/// The outcome of a command that ran: whether its checks passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Passed,
    Failed,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RESEARCH_LEDGER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Verify(args) => commands::verify::run(&cli.data_dir, args),
        Command::Bench(args) => commands::bench::run(args),
    };
    match result {
        Ok(Outcome::Passed) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
