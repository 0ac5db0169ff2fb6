//! `research-ledger`: the command line of the research ledger service.
//!
//! Exit status: 0 when the command did what it was asked and every check passed; 1 when a
//! check failed (the ledger does not verify, a proof is invalid); 2 when the command could not
//! run (bad arguments, the data directory is locked, an I/O error); 141 when the reader of its
//! output went away before it was done (`| head`), as for a process stopped by SIGPIPE.

#[macro_use]
mod output;

mod commands;
mod config;
mod demo;
mod listener;
mod remote;
mod server;
mod tls;
mod witness_client;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process. mimalloc hands memory it no longer needs
/// back to the system and faults it in again when it grows; with transparent huge pages each
/// such fault zeroes 2 MiB where 4 KiB would do — under a server's writes, the kernel's page
/// clearing took about a fifteenth of the processor. A failure leaves things as they were.
fn keep_allocations_small_paged() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

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

    /// The configuration file (default: `research-ledger.toml` in the working directory, when
    /// there is one). Flags win over environment variables, which win over the file.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_CONFIG",
        value_name = "FILE"
    )]
    config: Option<PathBuf>,

    /// How logs on stderr look: lines for people, or one JSON object per line. The level is
    /// set by `RESEARCH_LEDGER_LOG` (e.g. `info`, `research_ledger=debug`).
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,

    /// The shared database holding the ledger, the content store, the access tokens, the
    /// contracts, the pipeline jobs and the corpus's documents instead of the data directory:
    /// `postgres://USER@HOST:PORT/DB` (PostgreSQL 15 or later). The data directory keeps the
    /// signing key and what is derived: the read models and the corpus's index.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_STORAGE_URL",
        value_name = "URL",
        value_parser = config::parse_storage_url
    )]
    storage_url: Option<String>,

    /// A sentence encoder's model folder, as its publisher ships it (`config.json`,
    /// `model.safetensors`, `tokenizer.json`; `scripts/fetch-encoder` fetches
    /// all-MiniLM-L6-v2): searches of the corpus then rank by meaning too, mixing the encoder's
    /// cosine with BM25F (`docs/rules.md`). Read by the commands that search or ingest.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_ENCODER",
        value_name = "DIR"
    )]
    encoder: Option<PathBuf>,

    /// Where the passages' vectors are kept when `--encoder` is given (default: `vectors` in
    /// the data directory). They are derived: what is missing is encoded again.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_VECTORS_DIR",
        value_name = "DIR"
    )]
    vectors_dir: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of `serve`'s many settings costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API (default 127.0.0.1:7878): /health, MCP at /mcp, /graphql (+
    /// /graphql/ws), /v1/export, and the REST view of the tools.
    Serve(commands::serve::Args),
    /// Serve MCP on stdin and stdout, for clients that start the server themselves. Logs go to
    /// stderr; the command ends when stdin closes.
    Mcp(commands::mcp::Args),
    /// Run research tasks on the bundled sample corpus, start to finish, and print their
    /// verdicts, explanations and the ledger's verification.
    Demo(commands::demo::Args),
    /// Verify the whole ledger from its first event: every hash, every link, every seq, the
    /// Merkle tree against every signed checkpoint, and every signature.
    Verify(commands::verify::Args),
    /// Show a task as it stands or stood at a version; `--check` re-derives every score,
    /// adjudication and conclusion from the events it cites.
    Replay(commands::audit::ReplayArgs),
    /// Why a task's verdict is what it is, every line citing ledger events. Writes nothing.
    Explain(commands::audit::ExplainArgs),
    /// Write an export bundle of some tasks or the whole ledger, for auditors or as a backup.
    Export(commands::audit::ExportArgs),
    /// Check an export bundle offline, with no data directory; say where it is wrong.
    VerifyBundle(commands::audit::VerifyBundleArgs),
    /// Restore a data directory from a whole-ledger bundle, verifying it first.
    Import(commands::audit::ImportArgs),
    /// Move a whole deployment between a data directory and a PostgreSQL database (either
    /// way) and verify the copy.
    Migrate(commands::migrate::Args),
    /// Check the contracts of external tools, or call each to see that it keeps its contract.
    Contracts(commands::contracts::Args),
    /// Write a signed checkpoint of the ledger as it stands and print it (JSON).
    Checkpoint(commands::checkpoint::Args),
    /// Print a proof that an event is in a checkpoint, or that one checkpoint extends another.
    Prove(commands::prove::ProveArgs),
    /// Check a proof file offline against a trusted public key, or prove that the ledger only
    /// grew since a saved checkpoint. Exit 0 only for a valid proof.
    VerifyProof(commands::prove::VerifyArgs),
    /// Show or rotate the key that signs checkpoints.
    Key(commands::key::Args),
    /// An auditor's witness: cosigns a log's checkpoints once it has checked that the log only
    /// grew (C2SP tlog-witness).
    Witness(commands::witness::Args),
    /// Add documents (.md/.txt with YAML front matter, .json, .jsonl) to the embedded corpus.
    Ingest(commands::ingest::Args),
    /// Measure the product on this machine: figures next to raw baselines from the same run.
    Bench(commands::bench::Args),
    /// Say why the ledger refuses writes and cut what recovery may cut; with `--accept-loss
    /// --reason TEXT`, record (signed) that the loss is accepted and go on from the part of the
    /// log that checks out.
    Repair(commands::repair::Args),
    /// Make, list and revoke the access tokens of the server, in the data directory's token
    /// file (which a running server re-reads) or through a running server with `--server`.
    Token(commands::token::Args),
}

/// How logs look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Lines for people.
    Text,
    /// One JSON object per line.
    Json,
}

/// What `serve` logs by default: every request once (ours, info), and the MCP SDK's warnings
/// and errors. The SDK's own info lines narrate each connection's and each stateless request's
/// service starting and ending, three lines a request that say nothing the request's line does
/// not; formatting them cost a twelfth of the server's time on a read.
const SERVE_LOGS: &str = "info,rmcp=warn";

/// Logs go to stderr: stdout carries what commands print. `serve` logs each request (info);
/// other commands only warnings, unless `RESEARCH_LEDGER_LOG` says otherwise. A filter it sets
/// that cannot be read is refused, not replaced by the default: an operator who asked for debug
/// logs would otherwise get none and not know why.
fn init_logs(format: LogFormat, serving: bool) -> Result<(), String> {
    let filter = match std::env::var("RESEARCH_LEDGER_LOG") {
        Ok(directives) if !directives.trim().is_empty() => {
            tracing_subscriber::EnvFilter::try_new(&directives).map_err(|e| {
                format!("RESEARCH_LEDGER_LOG={directives:?} is not a log filter: {e}")
            })?
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err("RESEARCH_LEDGER_LOG is not UTF-8".into());
        }
        _ => tracing_subscriber::EnvFilter::new(if serving { SERVE_LOGS } else { "warn" }),
    };
    // Colour codes only for a person at a terminal: a journal or a log file gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        // A log line that cannot be written is lost, not reported with `eprintln!` to the
        // same closed stderr: that panicked whichever thread logged, midway through its work.
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    Ok(())
}

/// The command line, with the configuration file's values beneath it.
fn parse() -> Result<Cli, clap::Error> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = match config::load(Cli::command(), &args) {
        Ok(command) => command,
        Err(e) => {
            return Err(
                Cli::command().error(clap::error::ErrorKind::InvalidValue, format!("{e:#}"))
            );
        }
    };
    let matches = command.try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

/// The name of a command that cannot use a shared database, when `command` is one.
fn embedded_only(command: &Command) -> Option<&'static str> {
    match command {
        Command::Repair(_) => Some("repair"),
        Command::Bench(args) if !args.takes_storage_url() => Some("bench"),
        _ => None,
    }
}

/// The outcome of a command that ran: whether its checks passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Passed,
    Failed,
}

fn main() -> ExitCode {
    keep_allocations_small_paged();
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Err(e) = init_logs(cli.log_format, matches!(cli.command, Command::Serve(_)))
        .and_then(|()| config::check_origin())
    {
        tell!("error: {e}");
        return ExitCode::from(2);
    }
    if cli.storage_url.is_some()
        && let Some(name) = embedded_only(&cli.command)
    {
        tell!("error: `{name}` works on the data directory's own ledger only, not --storage-url");
        return ExitCode::from(2);
    }
    config::set_storage_url(cli.storage_url.clone());
    config::set_search(cli.encoder.clone(), cli.vectors_dir.clone());
    let result = match &cli.command {
        Command::Serve(args) => commands::serve::run(&cli.data_dir, args),
        Command::Mcp(args) => commands::mcp::run(&cli.data_dir, args),
        Command::Demo(args) => commands::demo::run(&cli.data_dir, args),
        Command::Verify(args) => commands::verify::run(&cli.data_dir, args),
        Command::Replay(args) => commands::audit::replay(&cli.data_dir, args),
        Command::Explain(args) => commands::audit::explain(&cli.data_dir, args),
        Command::Export(args) => commands::audit::export(&cli.data_dir, args),
        Command::VerifyBundle(args) => commands::audit::verify_bundle(args),
        Command::Import(args) => commands::audit::import(&cli.data_dir, args),
        Command::Migrate(args) => commands::migrate::run(&cli.data_dir, args),
        Command::Contracts(args) => commands::contracts::run(&cli.data_dir, args),
        Command::Checkpoint(args) => commands::checkpoint::run(&cli.data_dir, args),
        Command::Prove(args) => commands::prove::prove(&cli.data_dir, args),
        Command::VerifyProof(args) => commands::prove::verify(&cli.data_dir, args),
        Command::Key(args) => commands::key::run(&cli.data_dir, args),
        Command::Witness(args) => commands::witness::run(args),
        Command::Ingest(args) => commands::ingest::run(&cli.data_dir, args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Token(args) => commands::token::run(&cli.data_dir, args),
        Command::Repair(args) => commands::repair::run(&cli.data_dir, args),
    };
    match result {
        Ok(Outcome::Passed) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Err(e) => {
            tell!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
