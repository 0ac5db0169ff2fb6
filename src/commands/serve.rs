//! `research-ledger serve`: the HTTP server.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{Context, bail};

use crate::Outcome;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on.
    #[arg(long, env = "RESEARCH_LEDGER_LISTEN", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    #[command(flatten)]
    allow: super::contracts::AllowArgs,
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    if !args.listen.ip().is_loopback() {
        bail!(
            "refusing to listen on {} without access tokens: the server listens on loopback only until tokens are configured",
            args.listen
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let (listener, bound) = crate::server::bind(args.listen).await?;
        // The data directory's lock names the address, so a command that finds it held can
        // say where the server is.
        let mut options = service::ServiceOptions::new(data_dir);
        options.tool_endpoint_allow = args.allow.allow_list();
        options.ledger.lock_note = Some(format!(
            "research-ledger serve on http://{bound} (pid {})",
            std::process::id()
        ));
        let service = tokio::task::spawn_blocking(move || service::Service::open(options))
            .await
            .context("cannot open the data directory")?
            .with_context(|| format!("cannot open the data directory {}", data_dir.display()))?;
        // The one line on stdout a supervisor or a test waits for.
        println!("listening on http://{bound}");
        eprintln!(
            "research-ledger serving {} on http://{bound} (loopback only: no access tokens are configured)",
            data_dir.display()
        );
        crate::server::serve(service, listener).await
    })?;
    Ok(Outcome::Passed)
}
