//! `research-ledger token add|list|revoke|open-mode`: the access tokens of the server.
//!
//! Without `--server` the command edits the data directory's token file, which a running
//! server re-reads on its next request; with `--server URL` it asks that server, as an admin
//! (the token in `--token` or `RESEARCH_LEDGER_TOKEN`). A new token is printed once, on stdout;
//! only its hash is kept.

use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};
use service::tokens::Role;

use crate::Outcome;
use crate::remote::{Remote, path_segment};

/// Arguments of `token`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    /// Act through the server at this URL (e.g. `http://127.0.0.1:7878`) instead of on the
    /// data directory's token file.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_SERVER",
        value_name = "URL"
    )]
    server: Option<String>,
    /// An admin token for `--server`.
    #[arg(
        long,
        global = true,
        env = "RESEARCH_LEDGER_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Make a token and print it once. Roles, each including the one before: auditor
    /// (reads, export, metrics), writer (research tools and mutations), reviewer (decisions
    /// on conflicts), admin (tools, tokens, checkpoints, ingest).
    Add {
        /// The holder's name: the actor of every event they cause.
        name: String,
        /// What the holder may do.
        #[arg(long)]
        role: Role,
    },
    /// List the tokens: names, roles, when made and revoked. Never the tokens.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: it stops working on the next request. Revoking the last one leaves a
    /// server that serves no one (see `open-mode`).
    Revoke {
        /// The holder's name.
        name: String,
    },
    /// Return to open mode, where a server on loopback serves callers without a token as the
    /// local user. Once a token has been made the server never returns to it by itself; this
    /// works only on the data directory (not with `--server`), and only once every token is
    /// revoked.
    OpenMode,
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    match &args.server {
        Some(server) => remote(server, args),
        None => local(data_dir, &args.action),
    }
}

fn print_list(tokens: &[Value], json: bool) -> anyhow::Result<()> {
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&json!({ "tokens": tokens }))?
        );
        return Ok(());
    }
    if tokens.is_empty() {
        say!("no tokens: the server listens on loopback only");
    }
    for t in tokens {
        let state = match t["revoked_at"].as_str() {
            Some(at) => format!("revoked {at}"),
            None => "active".to_owned(),
        };
        say!(
            "{:<24} {:<9} made {}  {state}",
            t["name"].as_str().unwrap_or("?"),
            t["role"].as_str().unwrap_or("?"),
            t["created_at"].as_str().unwrap_or("?"),
        );
    }
    Ok(())
}

fn announce(name: &str, role: Role, token: &str) {
    say!("{token}");
    tell!(
        "token for {name} ({}): shown once, keep it secret; send it as `Authorization: Bearer TOKEN`",
        role.name()
    );
}

fn local(data_dir: &Path, action: &Action) -> anyhow::Result<Outcome> {
    super::private_data_dir(data_dir)?;
    let store = super::token_store(data_dir)?;
    match action {
        Action::Add { name, role } => {
            let token = store.add(name, *role)?;
            announce(name, *role, &token);
        }
        Action::List { json } => {
            let tokens: Vec<Value> = store
                .list()?
                .iter()
                .map(server::tokens_api::listing)
                .collect();
            print_list(&tokens, *json)?;
        }
        Action::Revoke { name } => {
            store.revoke(name)?;
            tell!("revoked the token of {name}");
            if !store.any_active()? {
                tell!(
                    "no token is in force: the server serves no one until `token add` (or `token open-mode`)"
                );
            }
        }
        Action::OpenMode => {
            store.open_mode()?;
            tell!("open mode: a server on loopback now serves callers without a token");
        }
    }
    Ok(Outcome::Passed)
}

fn remote(server: &str, args: &Args) -> anyhow::Result<Outcome> {
    let remote = Remote::new(server, args.token.as_deref())?;
    match &args.action {
        Action::Add { name, role } => {
            let body: Value =
                remote.post("/v1/tokens", &json!({ "name": name, "role": role.name() }))?;
            let token = body["token"]
                .as_str()
                .context("the server's answer holds no token")?;
            announce(name, *role, token);
        }
        Action::List { json } => {
            let body: Value = remote.get("/v1/tokens", &[])?;
            let tokens = body["tokens"].as_array().cloned().unwrap_or_default();
            print_list(&tokens, *json)?;
        }
        Action::Revoke { name } => {
            let _: Value = remote.delete(&format!("/v1/tokens/{}", path_segment(name)))?;
            tell!("revoked the token of {name}");
        }
        Action::OpenMode => anyhow::bail!(
            "open mode drops every access check, so it is not offered through a server: run `research-ledger token open-mode` on its data directory"
        ),
    }
    Ok(Outcome::Passed)
}
