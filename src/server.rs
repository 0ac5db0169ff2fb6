//! Serving the app: binding the port, the connection loop, the contracts watcher, and a
//! graceful shutdown that loses nothing acknowledged.
//!
//! On SIGTERM or Ctrl-C the server stops accepting connections, lets requests in flight finish,
//! then shuts the service down: the projections are snapshotted, a signed checkpoint covers
//! everything appended, and the ledger's writer stops after the appends queued for it (every
//! acknowledged append was already durable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use service::Service;

/// How the server serves: the app's options, and what only a listening process needs.
#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    /// The routes and their layers.
    pub(crate) app: server::AppOptions,
    /// Bounds on connections.
    pub(crate) connections: crate::listener::ConnectionLimits,
    /// The certificate, when the server speaks TLS.
    pub(crate) tls: Option<Arc<crate::tls::TlsConfig>>,
    /// Longest the shutdown may take once a stop was asked for; past it the process exits
    /// with a message of what it was doing.
    pub(crate) shutdown_time_max: Duration,
}

/// Connections the kernel may complete before the server accepts them (it caps the number at
/// `net.core.somaxconn`). A burst of new connections beyond it is dropped or reset by the
/// kernel before the server could answer, even with `limit_exceeded`; the usual 1024 is less
/// than the 1,200 concurrent writers the server is meant to take.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (the port may be 0: the address actually bound is returned with the listener).
pub(crate) async fn bind(
    addr: SocketAddr,
) -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listen = || {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does: a restarted server may take its port straight back.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    let listener = listen().with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// Reloads the contracts of external tools when their files change (checked every second), so
/// MCP clients hear `tools/list_changed`. Runs until aborted.
pub(crate) fn watch_contracts(service: Service) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let service = service.clone();
            if let Ok(true) = tokio::task::spawn_blocking(move || service.refresh_tools()).await {
                tracing::info!("contracts changed; the tool list was reloaded");
            }
        }
    })
}

/// Serves every route on `listener` until SIGTERM or Ctrl-C, then shuts down gracefully.
pub(crate) async fn serve(
    service: Service,
    listener: tokio::net::TcpListener,
    options: ServerOptions,
    stop: StopSignal,
) -> anyhow::Result<()> {
    let mcp = mcp_bridge::HttpEndpoint::new(service.clone(), options.app.bridge.clone());
    let app = server::app_with_mcp(&service, &options.app, Some(&mcp));
    let watcher = watch_contracts(service.clone());
    let tokens = options.app.auth.poll();
    let certificates = options.tls.as_ref().map(|tls| tls.watch());
    let stage = Arc::new(std::sync::Mutex::new("finishing the requests in flight"));
    let deadline = options.shutdown_time_max;
    let watched = Arc::clone(&stage);
    let streams = mcp.clone();
    crate::listener::serve(
        listener,
        app,
        options.connections,
        options.tls.clone(),
        async move {
            stop.wait().await;
            watchdog(deadline, watched);
            // MCP streams without an end of their own (a session's event stream, a
            // subscription) would hold the shutdown open; the requests in flight are answered.
            streams.end_streams();
        },
    )
    .await;
    // Nothing is in flight any more: the sessions end.
    mcp.stop();
    watcher.abort();
    tokens.abort();
    if let Some(certificates) = certificates {
        certificates.abort();
    }
    tracing::info!("no more requests in flight; shutting the service down");
    *stage.lock().unwrap_or_else(|p| p.into_inner()) = "stopping jobs, writing the read models' snapshots and the last checkpoint, closing the stores";
    tokio::task::spawn_blocking(move || {
        service.shutdown();
        drop(service);
    })
    .await
    .context("the shutdown did not finish")?;
    Ok(())
}

/// Bounds the shutdown: once a stop was asked for, the process ends within `deadline` however
/// the stores behave (a full disk can make a store's last flush wait forever), saying what it
/// was doing. Nothing acknowledged depends on what is left: every acknowledged event is durable
/// in the log, and what a stuck flush leaves out (snapshots, the index) is rebuilt on the next
/// open.
fn watchdog(deadline: Duration, stage: Arc<std::sync::Mutex<&'static str>>) {
    let spawned = std::thread::Builder::new()
        .name("shutdown-watchdog".into())
        .spawn(move || {
            std::thread::sleep(deadline);
            let stage = *stage.lock().unwrap_or_else(|p| p.into_inner());
            tell!(
                "research-ledger: the shutdown did not finish within {} s; it was {stage}. Every acknowledged event is durable in the log; what could not be flushed (read-model snapshots, the index, the last checkpoint) is rebuilt or written on the next open.",
                deadline.as_secs_f64()
            );
            std::process::exit(3);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "the shutdown has no deadline: its watchdog did not start");
    }
}

/// SIGTERM and Ctrl-C (SIGINT), listened for from the moment this is made: made before the
/// server says it listens, a stop asked for right after is a graceful one, not the default
/// action of the signal, which ends the process on the spot.
#[derive(Debug)]
pub(crate) struct StopSignal {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Starts listening. Must run inside the runtime.
    pub(crate) fn install() -> anyhow::Result<StopSignal> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignal {
            terminate: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
        tracing::info!("shutting down: no new connections; finishing the requests in flight");
    }
}
