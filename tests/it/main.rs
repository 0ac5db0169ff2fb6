//! End-to-end tests of the `research-ledger` binary, spawned as a user would run it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod abuse;
mod audit;
mod auth;
mod bench;
mod concurrency;
mod content;
mod crash;
mod demo;
mod external;
mod fixtures;
mod graphql;
mod ingest;
mod integrity;
mod mcp;
mod meaning;
mod network;
mod nodes;
mod operations;
mod proofs;
mod remote;
mod server;
mod storage;
mod tidy;
mod transparency;
mod verify;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary with `args` on the data directory `data`.
pub fn run(data: &Path, args: &[&str]) -> Output {
    run_with_env(data, args, &[])
}

/// Runs the binary with `args` on the data directory `data`, with the environment variables
/// `env` set (and none of the caller's that would point it at another directory or server).
pub fn run_with_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    command(data, args, env).output().expect("the binary runs")
}

/// Runs the binary as [`run_with_env`] does, for a command that should end by itself (`serve`
/// refusing its settings): killed, failing the test, if it still runs after `secs`.
pub fn run_ending_within(data: &Path, args: &[&str], env: &[(&str, &str)], secs: u64) -> Output {
    let mut child = command(data, args, env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    if exit_within(&mut child, secs).is_none() {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "{args:?} still ran after {secs} s: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    child.wait_with_output().unwrap()
}

/// `child`'s exit status once it exits, if it does within `secs`; none while it still runs.
pub fn exit_within(child: &mut std::process::Child, secs: u64) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The binary with `args` on the data directory `data` and `env` set, as [`run_with_env`]
/// runs it.
pub fn command(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_research-ledger"));
    // A benchmark works on folders of its own, never the data directory's ledger.
    if args.first() == Some(&"bench") {
        command.env_remove("RESEARCH_LEDGER_STORAGE_URL");
    } else {
        server::with_storage(&mut command, data);
    }
    command
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env_remove("RESEARCH_LEDGER_DATA_DIR")
        .env_remove("RESEARCH_LEDGER_SERVER")
        .env_remove("RESEARCH_LEDGER_TOKEN")
        .envs(env.iter().copied());
    command
}

/// What a finished command wrote to stdout, as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The first line of a command's output, trimmed: `key show` prints the hex key first.
pub fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().trim().to_owned()
}

/// What a finished command wrote to stderr, as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
