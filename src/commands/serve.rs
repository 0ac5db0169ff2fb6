//! `research-ledger serve`: the HTTP server.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use service::tokens::TokenStore;

use crate::Outcome;
use crate::auth::Auth;
use crate::server::{HttpLimits, ServerOptions};

/// Arguments of `serve`. Each can also be set in `research-ledger.toml` under `[serve]`, with
/// underscores for dashes; flags win, then environment variables, then the file.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on. Beyond loopback only with access tokens.
    #[arg(long, env = "RESEARCH_LEDGER_LISTEN", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// A `Host` the MCP endpoint answers beyond loopback (the name clients reach the server
    /// by; DNS-rebinding protection). Needed when listening beyond loopback; repeat for more.
    #[arg(
        long = "mcp-allowed-host",
        id = "mcp_allowed_host",
        env = "RESEARCH_LEDGER_MCP_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    mcp_allowed_hosts: Vec<String>,
    /// A browser `Origin` (`https://app.example.org`, a `*` port allowed) that may call the MCP
    /// endpoint, besides loopback pages; repeat for more.
    #[arg(
        long = "mcp-allowed-origin",
        id = "mcp_allowed_origin",
        env = "RESEARCH_LEDGER_MCP_ALLOWED_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN"
    )]
    mcp_allowed_origins: Vec<String>,
    /// Largest request body in bytes, on every route (GraphQL has its own bound below).
    #[arg(long, env = "RESEARCH_LEDGER_REQUEST_BYTES_MAX", default_value_t = 4 * 1024 * 1024)]
    request_bytes_max: usize,
    /// Longest a request may take to produce its response, in seconds.
    #[arg(long, env = "RESEARCH_LEDGER_REQUEST_SECS_MAX", default_value_t = 60)]
    request_secs_max: u64,
    /// Longest the shutdown may take after SIGTERM or Ctrl-C, in seconds: past it the process
    /// exits (status 3) saying what it was doing.
    #[arg(long, env = "RESEARCH_LEDGER_SHUTDOWN_SECS_MAX", default_value_t = 30)]
    shutdown_secs_max: u64,
    /// Requests handled at once; more are refused with `limit_exceeded` (HTTP 503), not queued.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_REQUESTS_IN_FLIGHT_MAX",
        default_value_t = 256
    )]
    requests_in_flight_max: usize,
    /// Subscriptions one client may hold: resources per MCP session, subscriptions per GraphQL
    /// WebSocket.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_SUBSCRIPTIONS_PER_CLIENT_MAX",
        default_value_t = 256
    )]
    subscriptions_per_client_max: usize,
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

impl Args {
    fn options(&self, auth: Arc<Auth>) -> ServerOptions {
        let mut bridge = mcp_bridge::BridgeOptions::default();
        bridge
            .allowed_hosts
            .extend(self.mcp_allowed_hosts.iter().cloned());
        bridge
            .allowed_origins
            .extend(self.mcp_allowed_origins.iter().cloned());
        bridge.request_body_bytes_max = self.request_bytes_max;
        bridge.subscriptions_max = self.subscriptions_per_client_max;
        let g = &self.graphql;
        ServerOptions {
            graphql: graphql::Options {
                limits: graphql::Limits {
                    depth_levels_max: g.graphql_depth_levels_max,
                    complexity_points_max: g.graphql_complexity_points_max,
                    page_items_max: g.graphql_page_items_max,
                    request_bytes_max: g.graphql_request_bytes_max,
                    subscriptions_per_connection_max: self.subscriptions_per_client_max,
                },
                ..graphql::Options::default()
            },
            bridge,
            auth,
            limits: HttpLimits {
                request_bytes_max: self.request_bytes_max,
                request_time_max: Duration::from_secs(self.request_secs_max),
                requests_in_flight_max: self.requests_in_flight_max,
                shutdown_time_max: Duration::from_secs(self.shutdown_secs_max),
            },
        }
    }

    /// Refuses settings that cannot work, before anything is opened.
    fn check(&self) -> anyhow::Result<()> {
        for (name, value) in [
            ("request_bytes_max", self.request_bytes_max as u64),
            ("request_secs_max", self.request_secs_max),
            ("shutdown_secs_max", self.shutdown_secs_max),
            ("requests_in_flight_max", self.requests_in_flight_max as u64),
            (
                "subscriptions_per_client_max",
                self.subscriptions_per_client_max as u64,
            ),
        ] {
            if value == 0 {
                bail!("{name} must be at least 1");
            }
        }
        Ok(())
    }
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    args.check()?;
    let store = TokenStore::new(data_dir.join("tokens.json"));
    let loopback = args.listen.ip().is_loopback();
    let tokens = store
        .any_active()
        .with_context(|| format!("cannot read the token file {}", store.path().display()))?;
    if !loopback && !tokens {
        bail!(
            "refusing to listen on {} without access tokens: add one with `research-ledger token add NAME --role admin`, or listen on loopback",
            args.listen
        );
    }
    if !loopback && args.mcp_allowed_hosts.is_empty() {
        bail!(
            "listening on {} needs --mcp-allowed-host: the names clients reach this server by (the MCP endpoint refuses other Host headers)",
            args.listen
        );
    }
    let auth = Arc::new(Auth::new(store, loopback));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let (listener, bound) = crate::server::bind(args.listen).await?;
        // The data directory's lock names the address, so a command that finds it held can
        // say where the server is.
        let mut options = crate::config::service_options(data_dir);
        options.tool_endpoint_allow = args.allow.allow_list();
        options.ledger.lock_note = Some(format!(
            "research-ledger serve on http://{bound} (pid {})",
            std::process::id()
        ));
        // Before the line that says the server listens: a stop asked for from then on is
        // graceful.
        let stop = crate::server::StopSignal::install()?;
        let service = tokio::task::spawn_blocking(move || service::Service::open(options))
            .await
            .context("cannot open the data directory")?
            .with_context(|| format!("cannot open the data directory {}", data_dir.display()))?;
        // The one line on stdout a supervisor or a test waits for.
        println!("listening on http://{bound}");
        let access = if tokens {
            "access tokens required"
        } else {
            "loopback only: no access tokens are configured"
        };
        eprintln!(
            "research-ledger serving {} on http://{bound} ({access})",
            data_dir.display()
        );
        crate::server::serve(service, listener, args.options(auth), stop).await
    })?;
    Ok(Outcome::Passed)
}
