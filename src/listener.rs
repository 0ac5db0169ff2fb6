//! Connections: the accept loop in front of the router, with bounds on how many connections
//! are open (in all and per client address), how long a client may take to send a request's
//! head or leave a connection idle, and TLS when the server has a certificate.
//!
//! A connection past a bound is accepted, answered `503 limit_exceeded` naming the bound, and
//! closed: the client learns why, and the server never runs out of file descriptors, which
//! would make `accept` itself fail. The bound on connections in all is lowered at start to
//! what the process's open-file limit leaves room for.
//!
//! Each connection is in one of three states, and only two of them are timed: waiting for a
//! request (idle: closed after `idle_time_max` without a byte), reading a request's head
//! (closed when the whole head has not come within `header_read_time_max` of its first byte),
//! or serving (a request is being handled or its response is streaming: bounded by the
//! router's own limits, never cut here). A connection upgraded to a WebSocket is the
//! WebSocket's to time, but still counts against the bounds on connections until it closes.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt as _;

use crate::tls::TlsConfig;

/// Bounds on connections, whatever they carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionLimits {
    /// Connections open at once, in all.
    pub(crate) connections_max: usize,
    /// Connections open at once from one client address.
    pub(crate) connections_per_address_max: usize,
    /// Longest a client may take to send a request's head, from its first byte (and, on
    /// TLS, to finish the handshake).
    pub(crate) header_read_time_max: Duration,
    /// Longest a connection may wait for its next request without a byte coming.
    pub(crate) idle_time_max: Duration,
}

/// Descriptors kept free of connections: the data directory's files, the ledger's segments,
/// the corpus index, the token file, logs.
const DESCRIPTORS_RESERVED: usize = 256;

/// Refusals being written at once; a burst beyond this is closed without one.
const REFUSALS_IN_FLIGHT_MAX: usize = 64;

/// `connections_max`, lowered to what the open-file limit leaves room for (read from
/// `/proc/self/limits`; unchanged where that cannot be read).
pub(crate) fn fit_to_descriptors(connections_max: usize) -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok())
        });
    match soft {
        Some(soft) => {
            // Each connection may hold a second descriptor while it is refused or upgraded.
            let room = soft
                .saturating_sub(DESCRIPTORS_RESERVED + REFUSALS_IN_FLIGHT_MAX)
                .max(1);
            if room < connections_max {
                tracing::warn!(
                    connections_max,
                    open_files = soft,
                    lowered_to = room,
                    "connections_max is more than the open-file limit leaves room for; lowered (raise the limit with ulimit -n to keep it)"
                );
                room
            } else {
                connections_max
            }
        }
        None => connections_max,
    }
}

/// The connections open, in all and per address.
#[derive(Debug)]
struct Slots {
    all: Arc<Semaphore>,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    limits: ConnectionLimits,
}

/// One admitted connection; gives its slots back when dropped.
#[derive(Debug)]
struct Admitted {
    slots: Arc<Slots>,
    address: IpAddr,
    _all: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut per = self
            .slots
            .per_address
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per.get_mut(&self.address) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.address);
            }
        }
    }
}

impl Slots {
    /// A slot for a connection from `address`, or the name and value of the bound it is past.
    fn admit(self: &Arc<Self>, address: IpAddr) -> Result<Admitted, (&'static str, usize)> {
        let all = self
            .all
            .clone()
            .try_acquire_owned()
            .map_err(|_| ("connections_max", self.limits.connections_max))?;
        let mut per = self.per_address.lock().unwrap_or_else(|p| p.into_inner());
        let n = per.entry(address).or_insert(0);
        if *n >= self.limits.connections_per_address_max {
            return Err((
                "connections_per_address_max",
                self.limits.connections_per_address_max,
            ));
        }
        *n += 1;
        Ok(Admitted {
            slots: self.clone(),
            address,
            _all: all,
        })
    }
}

/// What a connection is doing, for its timeouts.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request since then.
    Idle(Instant),
    /// Reading a request's head, whose first byte came then.
    Head(Instant),
    /// Handling requests, or streaming their responses: this many.
    Serving(usize),
    /// Handed to a WebSocket.
    Upgraded,
}

#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            phase: Mutex::new(Phase::Idle(Instant::now())),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Phase) -> T) -> T {
        f(&mut self.phase.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn bytes_read(&self) {
        self.with(|phase| {
            if let Phase::Idle(_) = phase {
                *phase = Phase::Head(Instant::now());
            }
        });
    }

    fn request_started(&self) {
        self.with(|phase| {
            *phase = match *phase {
                Phase::Serving(n) => Phase::Serving(n + 1),
                Phase::Upgraded => Phase::Upgraded,
                _ => Phase::Serving(1),
            }
        });
    }

    fn response_ended(&self) {
        self.with(|phase| {
            if let Phase::Serving(n) = *phase {
                *phase = if n <= 1 {
                    Phase::Idle(Instant::now())
                } else {
                    Phase::Serving(n - 1)
                };
            }
        });
    }

    fn upgraded(&self) {
        self.with(|phase| *phase = Phase::Upgraded);
    }

    /// When the connection is to be closed, if it stays as it is.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        self.with(|phase| match *phase {
            Phase::Idle(since) => Some(since + limits.idle_time_max),
            Phase::Head(since) => Some(since + limits.header_read_time_max),
            Phase::Serving(_) | Phase::Upgraded => None,
        })
    }

    /// Resolves once the connection is past its deadline.
    async fn expired(&self, limits: ConnectionLimits) {
        loop {
            match self.deadline(&limits) {
                Some(deadline) if Instant::now() >= deadline => return,
                Some(deadline) => {
                    // Woken at the deadline or sooner; the phase may have moved meanwhile.
                    let wait = deadline
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_secs(1));
                    tokio::time::sleep(wait).await;
                }
                None => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

/// A connection's bytes, with the reads noted for its timeouts, and its slots: they go with
/// the bytes, so a connection handed to a WebSocket still counts until the socket closes.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    _admitted: Admitted,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.bytes_read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that tells the connection when it has ended (or was dropped unfinished).
struct Ending {
    inner: Body,
    activity: Option<Arc<Activity>>,
}

impl Ending {
    fn end(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.response_ended();
        }
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        self.end();
    }
}

impl hyper::body::Body for Ending {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.end();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Answers a connection past a bound and closes it.
async fn refuse(mut stream: TcpStream, limit: &'static str, max: usize) {
    let body = json!({
        "error": "limit_exceeded",
        "message": format!("too many connections are open ({limit} = {max}); try again shortly"),
        "limit": limit,
        "max": max,
    })
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

/// Whether an `accept` error is about one connection (the server goes on at once) rather than
/// the process (out of descriptors or memory: it pauses before trying again).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves `app` on every connection `listener` accepts until `shutdown` resolves; then stops
/// accepting, lets the requests in flight finish, and returns once every connection is closed.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    tls: Option<Arc<TlsConfig>>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Slots {
        all: Arc::new(Semaphore::new(limits.connections_max)),
        per_address: Mutex::new(HashMap::new()),
        limits,
    });
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow with every one served.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::error!(error = %e, "cannot accept a connection; trying again shortly");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admitted = match slots.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err((limit, max)) => {
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream, limit, max).await;
                        drop(permit);
                    });
                }
                continue;
            }
        };
        connections.spawn(serve_connection(
            stream,
            peer,
            app.clone(),
            limits,
            tls.clone(),
            admitted,
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
}

/// One connection, from its TLS handshake (if any) to its close.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    tls: Option<Arc<TlsConfig>>,
    admitted: Admitted,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    match tls {
        None => {
            let io = Tracked {
                inner: stream,
                activity: activity.clone(),
                _admitted: admitted,
            };
            run_http(io, peer, app, limits, activity, &mut stop).await;
        }
        Some(tls) => {
            let handshake = tls.acceptor().accept(stream);
            let io = match tokio::time::timeout(limits.header_read_time_max, handshake).await {
                Ok(Ok(io)) => io,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let io = Tracked {
                inner: io,
                activity: activity.clone(),
                _admitted: admitted,
            };
            run_http(io, peer, app, limits, activity, &mut stop).await;
        }
    }
}

/// HTTP/1.1 over one connection's bytes.
async fn run_http<S>(
    io: Tracked<S>,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    activity: Arc<Activity>,
    stop: &mut watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let app = app.clone();
        let activity = requests.clone();
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        activity.request_started();
        async move {
            let response = app.oneshot(request.map(Body::new)).await;
            let response = match response {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
                activity.upgraded();
            }
            Ok::<_, std::convert::Infallible>(response.map(|inner| Ending {
                inner,
                activity: Some(activity),
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The head's deadline is kept by `Activity`, which knows an idle wait from a slow head.
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let connection = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(connection);
    let expired = activity.expired(limits);
    tokio::pin!(expired);
    let mut stopping = *stop.borrow();
    if stopping {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut expired => {
                tracing::debug!(%peer, "connection closed: idle, or its request's head too slow");
                return;
            }
            changed = stop.changed(), if !stopping => {
                if changed.is_err() || *stop.borrow() {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
