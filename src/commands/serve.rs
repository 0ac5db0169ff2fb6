//! `research-ledger serve`: the HTTP server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::Outcome;
use crate::listener::ConnectionLimits;
use crate::server::ServerOptions;
use crate::tls::TlsConfig;
use server::auth::Auth;
use server::hosts::HostAllowList;
use server::{AppOptions, HttpLimits};

/// Arguments of `serve`. Each can also be set in `research-ledger.toml` under `[serve]`, with
/// underscores for dashes; flags win, then environment variables, then the file.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on. Beyond loopback only with access tokens.
    #[arg(long, env = "RESEARCH_LEDGER_LISTEN", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// A name the server answers to besides the loopback names (`HOST`, any port, or
    /// `HOST:PORT`): every route refuses a request whose `Host` is another (DNS-rebinding
    /// protection). Needed when listening beyond loopback; repeat for more.
    #[arg(
        long = "allowed-host",
        id = "allowed_host",
        env = "RESEARCH_LEDGER_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    allowed_hosts: Vec<String>,
    /// The former name of `--allowed-host`, kept for existing command lines and files: the
    /// names join the same list, for every route.
    #[arg(
        long = "mcp-allowed-host",
        id = "mcp_allowed_host",
        env = "RESEARCH_LEDGER_MCP_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "HOST",
        hide = true
    )]
    mcp_allowed_hosts: Vec<String>,
    /// The PEM certificate chain to serve TLS with (with `--tls-key`); read again when it
    /// changes.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`; read again when it changes.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP beyond loopback because a reverse proxy in front terminates TLS.
    /// Without it (or `--tls-cert`), the server refuses to listen beyond loopback.
    #[arg(long, env = "RESEARCH_LEDGER_BEHIND_PROXY")]
    behind_proxy: bool,
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
    /// Connections open at once, in all; more are answered 503 `limit_exceeded` and closed.
    /// Lowered at start to what the open-file limit leaves room for.
    #[arg(long, env = "RESEARCH_LEDGER_CONNECTIONS_MAX", default_value_t = 4096)]
    connections_max: usize,
    /// Connections open at once from one client address.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_CONNECTIONS_PER_ADDRESS_MAX",
        default_value_t = 2048
    )]
    connections_per_address_max: usize,
    /// Longest a client may take to send a request's head (and a TLS handshake), in seconds.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_HEADER_READ_SECS_MAX",
        default_value_t = 10
    )]
    header_read_secs_max: u64,
    /// Longest a request's body may take to arrive, whole, in seconds.
    #[arg(long, env = "RESEARCH_LEDGER_BODY_READ_SECS_MAX", default_value_t = 30)]
    body_read_secs_max: u64,
    /// Longest a connection may wait for its next request without a byte coming, in seconds.
    #[arg(long, env = "RESEARCH_LEDGER_IDLE_SECS_MAX", default_value_t = 60)]
    idle_secs_max: u64,
    /// Export bundles being written at once; more are refused with `limit_exceeded`.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_EXPORT_CONCURRENT_MAX",
        default_value_t = 2
    )]
    export_concurrent_max: usize,
    /// MCP sessions open at once; an `initialize` past it is refused with `limit_exceeded`.
    #[arg(long, env = "RESEARCH_LEDGER_MCP_SESSIONS_MAX", default_value_t = 1024)]
    mcp_sessions_max: usize,
    /// Subscriptions one client may hold: resources per MCP session, subscriptions per GraphQL
    /// WebSocket.
    #[arg(
        long,
        env = "RESEARCH_LEDGER_SUBSCRIPTIONS_PER_CLIENT_MAX",
        default_value_t = 256
    )]
    subscriptions_per_client_max: usize,
    /// A witness to push each new checkpoint to, as `URL,VKEY`: its submission prefix (C2SP
    /// `tlog-witness`) and its verifier key (type 0x04); repeat for more. Their cosignatures
    /// are kept in the checkpoint log.
    #[arg(
        long = "witness",
        env = "RESEARCH_LEDGER_WITNESSES",
        value_delimiter = ' ',
        value_name = "URL,VKEY"
    )]
    witnesses: Vec<String>,
    /// The log's origin (the first line of its checkpoints, the name of its key), taken when
    /// the ledger introduces its first key; by default `research-ledger/` and that key's
    /// fingerprint.
    #[arg(long, env = "RESEARCH_LEDGER_ORIGIN", value_parser = crate::config::parse_origin)]
    origin: Option<String>,
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
    /// Most errors one GraphQL response lists; the rest are counted in one last error.
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_ERRORS_MAX", default_value_t = graphql::Limits::default().errors_max)]
    graphql_errors_max: usize,
    /// GraphQL WebSockets open at once.
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_WEBSOCKETS_MAX", default_value_t = graphql::Limits::default().websockets_max)]
    graphql_websockets_max: usize,
    /// Longest a GraphQL WebSocket may wait for its connection_init, in seconds.
    #[arg(long, env = "RESEARCH_LEDGER_GRAPHQL_CONNECTION_INIT_SECS_MAX", default_value_t = graphql::Limits::default().connection_init_secs_max)]
    graphql_connection_init_secs_max: u64,
}

impl Args {
    /// Every name given with `--allowed-host` or its former name.
    fn host_names(&self) -> Vec<String> {
        self.allowed_hosts
            .iter()
            .chain(&self.mcp_allowed_hosts)
            .cloned()
            .collect()
    }

    fn options(&self, auth: Arc<Auth>, tls: Option<Arc<TlsConfig>>) -> ServerOptions {
        let hosts = Arc::new(HostAllowList::new(&self.host_names()));
        let mut bridge = mcp_bridge::BridgeOptions {
            // The same list the server checks first, so the endpoint's own check never differs.
            allowed_hosts: hosts.names(),
            sessions_max: self.mcp_sessions_max,
            request_body_bytes_max: self.request_bytes_max,
            subscriptions_max: self.subscriptions_per_client_max,
            ..mcp_bridge::BridgeOptions::default()
        };
        bridge
            .allowed_origins
            .extend(self.mcp_allowed_origins.iter().cloned());
        let g = &self.graphql;
        let app = AppOptions {
            graphql: graphql::Options {
                limits: graphql::Limits {
                    depth_levels_max: g.graphql_depth_levels_max,
                    complexity_points_max: g.graphql_complexity_points_max,
                    page_items_max: g.graphql_page_items_max,
                    request_bytes_max: g.graphql_request_bytes_max,
                    subscriptions_per_connection_max: self.subscriptions_per_client_max,
                    errors_max: g.graphql_errors_max,
                    websockets_max: g.graphql_websockets_max,
                    connection_init_secs_max: g.graphql_connection_init_secs_max,
                },
                ..graphql::Options::default()
            },
            bridge,
            auth,
            limits: HttpLimits {
                request_bytes_max: self.request_bytes_max,
                request_time_max: Duration::from_secs(self.request_secs_max),
                requests_in_flight_max: self.requests_in_flight_max,
                body_read_time_max: Duration::from_secs(self.body_read_secs_max),
            },
            hosts,
            export_concurrent_max: self.export_concurrent_max,
        };
        ServerOptions {
            app,
            shutdown_time_max: Duration::from_secs(self.shutdown_secs_max),
            connections: ConnectionLimits {
                connections_max: crate::listener::fit_to_descriptors(self.connections_max),
                connections_per_address_max: self.connections_per_address_max,
                header_read_time_max: Duration::from_secs(self.header_read_secs_max),
                idle_time_max: Duration::from_secs(self.idle_secs_max),
            },
            tls,
        }
    }

    /// The witnesses to push checkpoints to.
    fn witness_targets(&self) -> anyhow::Result<Vec<crate::witness_client::WitnessTarget>> {
        self.witnesses
            .iter()
            .map(|w| crate::witness_client::WitnessTarget::parse(w))
            .collect()
    }

    /// The service's options: the data directory's, with the endpoint allow-list and the
    /// origin given here.
    fn service_options(&self, data_dir: &Path) -> service::ServiceOptions {
        let mut options = crate::config::service_options(data_dir);
        options.tool_endpoint_allow = self.allow.allow_list();
        if let Some(origin) = self.origin.as_ref().filter(|o| !o.is_empty()) {
            options.ledger.origin = Some(origin.clone());
        }
        options
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
            ("connections_max", self.connections_max as u64),
            (
                "connections_per_address_max",
                self.connections_per_address_max as u64,
            ),
            ("header_read_secs_max", self.header_read_secs_max),
            ("body_read_secs_max", self.body_read_secs_max),
            ("idle_secs_max", self.idle_secs_max),
            ("export_concurrent_max", self.export_concurrent_max as u64),
            ("mcp_sessions_max", self.mcp_sessions_max as u64),
            (
                "graphql_depth_levels_max",
                self.graphql.graphql_depth_levels_max as u64,
            ),
            (
                "graphql_complexity_points_max",
                self.graphql.graphql_complexity_points_max as u64,
            ),
            (
                "graphql_page_items_max",
                self.graphql.graphql_page_items_max as u64,
            ),
            (
                "graphql_request_bytes_max",
                self.graphql.graphql_request_bytes_max as u64,
            ),
            ("graphql_errors_max", self.graphql.graphql_errors_max as u64),
            (
                "graphql_websockets_max",
                self.graphql.graphql_websockets_max as u64,
            ),
            (
                "graphql_connection_init_secs_max",
                self.graphql.graphql_connection_init_secs_max,
            ),
        ] {
            if value == 0 {
                bail!("{name} must be at least 1");
            }
        }
        Ok(())
    }
}

/// Who the server serves, in words for its operator.
fn access(tokens: bool, required: bool) -> &'static str {
    if tokens {
        "access tokens required"
    } else if required {
        "access tokens required, and none is in force: serving no one until `token add`"
    } else {
        "loopback only: no access tokens are configured"
    }
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    args.check()?;
    super::private_data_dir(data_dir)?;
    let store = super::token_store(data_dir)?;
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
    if !loopback && args.host_names().is_empty() {
        bail!(
            "listening on {} needs --allowed-host: the names clients reach this server by (every route refuses other Host headers)",
            args.listen
        );
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsConfig::load(cert, key)?),
        _ => None,
    };
    if !loopback && tls.is_none() && !args.behind_proxy {
        bail!(
            "refusing to serve plain HTTP on {}: tokens would cross the network in the clear. Serve TLS with --tls-cert FILE --tls-key FILE, or say --behind-proxy when a reverse proxy in front terminates TLS",
            args.listen
        );
    }
    let witnesses = args.witness_targets()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let auth = Arc::new(Auth::new(store, loopback));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let (listener, bound) = crate::server::bind(args.listen).await?;
        // The data directory's lock names the address, so a command that finds it held can
        // say where the server is.
        let mut options = args.service_options(data_dir);
        options.ledger.lock_note = Some(format!(
            "research-ledger serve on {scheme}://{bound} (pid {})",
            std::process::id()
        ));
        // Before the line that says the server listens: a stop asked for from then on is
        // graceful.
        let stop = crate::server::StopSignal::install()?;
        let service = tokio::task::spawn_blocking(move || service::Service::open(options))
            .await
            .context("cannot open the data directory")?
            .with_context(|| format!("cannot open the data directory {}", data_dir.display()))?;
        refuse_a_foreign_key(service.ledger())?;
        // The one line on stdout a supervisor or a test waits for.
        say!("listening on {scheme}://{bound}");
        let access = access(tokens, auth.store().tokens_required().unwrap_or(true));
        tell!(
            "research-ledger serving {} on {scheme}://{bound} ({access})",
            data_dir.display()
        );
        let ledger = service.ledger().clone();
        let served = crate::server::serve(service, listener, args.options(auth, tls), stop);
        crate::witness_client::while_serving(ledger, witnesses, served).await
    })?;
    Ok(Outcome::Passed)
}

/// Several nodes on one database sign its checkpoints with one key: a node that takes writes
/// but whose key is not the one the checkpoint log names is refused, rather than serving a log
/// it cannot sign.
fn refuse_a_foreign_key(ledger: &ledger::Ledger) -> anyhow::Result<()> {
    if crate::config::storage_url().is_none() || ledger.poisoned().is_some() {
        return Ok(());
    }
    if let Err(reason) = ledger.public_key() {
        bail!(
            "refusing to serve the shared database: {reason}; every node on one database must be \
             given the same signing key (DATA_DIR/ledger/keys/)"
        );
    }
    Ok(())
}
