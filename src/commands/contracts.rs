//! `research-ledger contracts check|health`: the contracts of external tools.

use std::path::{Path, PathBuf};

use anyhow::bail;
use sources::contracts::{ContractLimits, EndpointAllowList, Registry, call, check_dir};

use crate::Outcome;

/// Arguments of `contracts`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Check every contract in a directory: unknown tags, bad schemas, inconsistent defaults,
    /// endpoints off the allow-list — each reported with file and field. Exit 1 if any.
    Check {
        /// The contracts directory.
        dir: PathBuf,
        #[command(flatten)]
        allow: AllowArgs,
    },
    /// With a storage database (--storage-url): store a contracts folder there for every
    /// node. Its `semantic-tags.yaml` and `fallbacks.yaml` replace the database's (none when
    /// the folder has none); its contracts (beside them and in `tools/`) join the registered
    /// tools, replacing those of the same name. Everything is checked first, the tools kept in
    /// the database included; on any problem nothing is stored (exit 1). Every node serves the
    /// new set within a second or so.
    Push {
        /// The contracts folder.
        dir: PathBuf,
        #[command(flatten)]
        allow: AllowArgs,
    },
    /// Call each registered tool with arguments built from its contract and report whose reply
    /// matches its contract. Exit 1 if any does not.
    Health {
        /// The contracts directory (default: the data directory's `contracts/`).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        allow: AllowArgs,
    },
}

/// The endpoint allow-list.
#[derive(Debug, clap::Args)]
pub(crate) struct AllowArgs {
    /// Where tools may live (`scheme://host`, `scheme://host:port` or `scheme://*.domain`);
    /// repeat for more. Loopback only when none is given.
    #[arg(
        long = "tool-endpoint-allow",
        id = "tool_endpoint_allow",
        value_name = "URL"
    )]
    pub(crate) rules: Vec<String>,
}

impl AllowArgs {
    pub(crate) fn allow_list(&self) -> EndpointAllowList {
        if self.rules.is_empty() {
            EndpointAllowList::default()
        } else {
            EndpointAllowList::new(self.rules.clone())
        }
    }
}

fn built_in() -> Vec<String> {
    service::tool_specs().into_iter().map(|t| t.name).collect()
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let names = built_in();
    let reserved: Vec<&str> = names.iter().map(String::as_str).collect();
    match &args.action {
        Action::Check { dir, allow } => check(dir, allow, &reserved),
        Action::Push { dir, allow } => push(data_dir, dir, allow),
        Action::Health { dir, allow } => {
            let dir = dir
                .clone()
                .unwrap_or_else(|| service::Layout::new(data_dir).contracts);
            let registry = Registry::load(
                &dir,
                allow.allow_list(),
                ContractLimits::default(),
                &reserved,
            );
            for problem in registry.problems() {
                say!("left out: {problem}");
            }
            let mut healthy = true;
            for contract in registry.tools().values() {
                let arguments = call::sample_arguments(contract);
                match call::call(contract, &arguments, registry.allow_list(), 4 * 1024 * 1024) {
                    Ok(reply) => say!(
                        "ok      {} (contract {}): a {}-byte reply that matches its contract",
                        contract.name,
                        contract.contract_version,
                        reply.bytes.len()
                    ),
                    Err(e) => {
                        healthy = false;
                        say!("FAILED  {}: {e}", contract.name);
                    }
                }
            }
            say!(
                "{} tool(s) checked in {}",
                registry.tools().len(),
                dir.display()
            );
            Ok(if healthy && registry.problems().is_empty() {
                Outcome::Passed
            } else {
                Outcome::Failed
            })
        }
    }
}

/// `contracts push DIR`: the folder stored in the storage database for every node.
fn push(data_dir: &Path, dir: &Path, allow: &AllowArgs) -> anyhow::Result<Outcome> {
    if crate::config::storage_url().is_none() {
        bail!(
            "contracts push stores a folder in the storage database: give --storage-url \
             (without one, a node reads its own DATA_DIR/contracts/)"
        );
    }
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let mut options = crate::config::service_options(data_dir);
    if !allow.rules.is_empty() {
        options.tool_endpoint_allow = allow.allow_list();
    }
    match service::push_contracts(&options, dir) {
        Ok(tools) => {
            say!(
                "stored {} for every node: {} tool(s): {}",
                dir.display(),
                tools.len(),
                tools.join(", ")
            );
            Ok(Outcome::Passed)
        }
        Err(e) => {
            say!("{e}");
            Ok(Outcome::Failed)
        }
    }
}

/// `contracts check DIR`: every contract of a folder checked, each problem printed.
fn check(dir: &Path, allow: &AllowArgs, reserved: &[&str]) -> anyhow::Result<Outcome> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let (valid, problems) = check_dir(dir, allow.allow_list(), ContractLimits::default(), reserved);
    for problem in &problems {
        say!("{problem}");
    }
    say!(
        "{valid} valid contract(s), {} problem(s) in {}",
        problems.len(),
        dir.display()
    );
    Ok(if problems.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}
