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
    #[command(flatten)]
    graphql: GraphqlArgs,
}

/// The limits of the GraphQL API.
#[derive(Debug, clap::Args)]
struct GraphqlArgs {
    /// Deepest nesting of fields in one GraphQL query, introspection included.
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_DEPTH_LEVELS_MAX", default_value_t = graphql::Limits::default().depth_levels_max)]
    graphql_depth_levels_max: usize,
    /// Most complexity points in one GraphQL query (a point per field, times `first` in a page).
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_COMPLEXITY_POINTS_MAX", default_value_t = graphql::Limits::default().complexity_points_max)]
    graphql_complexity_points_max: usize,
    /// Most items one GraphQL page may ask for.
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_PAGE_ITEMS_MAX", default_value_t = graphql::Limits::default().page_items_max)]
    graphql_page_items_max: usize,
    /// Largest GraphQL request body, and largest WebSocket message.
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_REQUEST_BYTES_MAX", default_value_t = graphql::Limits::default().request_bytes_max)]
    graphql_request_bytes_max: usize,
}

impl GraphqlArgs {
    fn options(&self) -> graphql::Options {
        graphql::Options {
            limits: graphql::Limits {
                depth_levels_max: self.graphql_depth_levels_max,
                complexity_points_max: self.graphql_complexity_points_max,
                page_items_max: self.graphql_page_items_max,
                request_bytes_max: self.graphql_request_bytes_max,
            },
            ..graphql::Options::default()
        }
    }
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
        crate::server::serve(service, listener, args.graphql.options()).await
    })?;
    Ok(Outcome::Passed)
}
