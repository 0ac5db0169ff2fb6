//! `research-ledger mcp`: the MCP server on stdin and stdout, for clients that start it
//! themselves (Claude Desktop and other stdio hosts).
//!
//! Only protocol messages go to stdout; logs go to stderr. The command ends when the client
//! closes stdin, after shutting the service down cleanly.

use std::path::Path;

use anyhow::Context;

use crate::Outcome;

/// Arguments of `mcp`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(data_dir: &Path, _args: &Args) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let service = super::open_service(data_dir)?;
    let served = runtime.block_on(async {
        let watcher = crate::server::watch_contracts(service.clone());
        let served =
            mcp_bridge::serve_stdio(service.clone(), mcp_bridge::BridgeOptions::default()).await;
        watcher.abort();
        served
    });
    service.shutdown();
    served.context("the MCP server on stdio failed")?;
    Ok(Outcome::Passed)
}
