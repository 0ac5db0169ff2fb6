//! The load the measured runs put on the server: many kept-alive HTTP/1.1 connections driven
//! by one thread, as a load generator such as `wrk` drives them.
//!
//! The server and its clients share the machine's cores, so what a client spends on each
//! request is taken from the server it measures. A thread per client, blocking on its socket,
//! costs two context switches a request on the client's side alone; here every connection is a
//! task of one single-threaded runtime, each request is a body of bytes built without a JSON
//! tree, and an answer is checked for the marks of success (the status, and no error in it)
//! rather than decoded. The setup — opening sessions and tasks, seeding what is read — goes
//! through [`super::client::Client`], which decodes everything.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::client::Transport;

/// The longest any one request may take.
const REQUEST_TIME_MAX: Duration = Duration::from_secs(60);

/// One kept-alive connection, speaking one transport.
pub(super) struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    transport: Transport,
    /// The MCP session a 2025-11-25 connection opened.
    session: Option<String>,
    next_id: u64,
}

/// What a request is for: a tool call over the connection's transport, or a GraphQL query.
pub(super) enum Call<'a> {
    /// A tool, and its arguments as JSON text.
    Tool(&'a str, &'a str),
    /// A GraphQL request body (`{"query": …, "variables": …}`) as JSON text.
    Graphql(&'a str),
}

impl Conn {
    /// Connects to `addr` and, for a 2025-11-25 MCP connection, opens its session.
    pub(super) async fn open(addr: SocketAddr, transport: Transport) -> anyhow::Result<Conn> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        // The connection is driven by a task of its own until either side closes it.
        tokio::spawn(connection);
        let mut conn = Conn {
            sender,
            host: addr.to_string(),
            transport,
            session: None,
            next_id: 1,
        };
        if transport == Transport::McpSession {
            conn.open_session().await?;
        }
        Ok(conn)
    }

    async fn open_session(&mut self) -> anyhow::Result<()> {
        let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench-load","version":"1"}}}"#;
        let (status, headers, body) = self.post("/mcp", &[], initialize.into()).await?;
        if !status.is_success() {
            bail!("initialize answered {status}: {}", text(&body));
        }
        let session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("initialize opened no session"))?;
        self.session = Some(session);
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let (status, _, body) = self.post("/mcp", &[], initialized.into()).await?;
        if !status.is_success() {
            bail!(
                "notifications/initialized answered {status}: {}",
                text(&body)
            );
        }
        Ok(())
    }

    /// Makes `call` and checks that it succeeded; returns the answer's bytes.
    pub(super) async fn call(&mut self, call: Call<'_>) -> anyhow::Result<Bytes> {
        match call {
            Call::Graphql(body) => {
                let (status, _, answer) = self.post("/graphql", &[], body.to_owned()).await?;
                // A GraphQL error is answered with 200 and an `errors` member.
                if !status.is_success() || contains(&answer, b"\"errors\"") {
                    bail!("the query failed ({status}): {}", text(&answer));
                }
                Ok(answer)
            }
            Call::Tool(name, arguments) => self.tool(name, arguments).await,
        }
    }

    async fn tool(&mut self, name: &str, arguments: &str) -> anyhow::Result<Bytes> {
        let (status, _, answer) = match self.transport {
            Transport::Rest => {
                let body = format!(r#"{{"name":{},"arguments":{arguments}}}"#, quoted(name));
                self.post("/v1/tools/call", &[], body).await?
            }
            Transport::McpSession | Transport::McpStateless => {
                let id = self.next_id;
                self.next_id += 1;
                let name_json = quoted(name);
                let (meta, headers): (&str, Vec<(&str, String)>) = if self.transport
                    == Transport::McpStateless
                {
                    (
                        r#","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"bench-load","version":"1"}}"#,
                        vec![
                            ("mcp-protocol-version", "2026-07-28".into()),
                            ("mcp-method", "tools/call".into()),
                            ("mcp-name", name.to_owned()),
                        ],
                    )
                } else {
                    ("", vec![("mcp-protocol-version", "2025-11-25".into())])
                };
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":{name_json},"arguments":{arguments}{meta}}}}}"#
                );
                self.post("/mcp", &headers, body).await?
            }
        };
        // REST answers a refusal with an error status; MCP with a result marked `isError`, or
        // a JSON-RPC error, both with 200.
        let refused = !status.is_success()
            || contains(&answer, b"\"isError\":true")
            || (self.transport != Transport::Rest && !contains(&answer, b"\"result\""));
        if refused {
            bail!("{name} was refused ({status}): {}", text(&answer));
        }
        Ok(answer)
    }

    async fn post(
        &mut self,
        path: &str,
        headers: &[(&str, String)],
        body: String,
    ) -> anyhow::Result<(hyper::StatusCode, hyper::HeaderMap, Bytes)> {
        let mut request = hyper::Request::post(path)
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream");
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .context("build a request")?;
        let exchange = async {
            self.sender.ready().await.context("the connection closed")?;
            let response = self
                .sender
                .send_request(request)
                .await
                .with_context(|| format!("POST {path}"))?;
            let (parts, body) = response.into_parts();
            let bytes = body
                .collect()
                .await
                .with_context(|| format!("POST {path}: the answer"))?
                .to_bytes();
            anyhow::Ok((parts.status, parts.headers, bytes))
        };
        tokio::time::timeout(REQUEST_TIME_MAX, exchange)
            .await
            .map_err(|_| anyhow!("POST {path} took over {REQUEST_TIME_MAX:?}"))?
    }
}

/// Runs `connections` copies of `client` (each given its index and the start line they share)
/// on one thread of its own, together, and gathers what each returned. The thread is the load
/// generator: the caller's thread only waits for it.
pub(super) fn drive<T, F, Fut>(connections: usize, client: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize, StartLine) -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<T>> + 'static,
{
    let generator = std::thread::Builder::new()
        .name("bench-load".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("start the load generator's runtime")?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                let start = StartLine::new(connections);
                let handles: Vec<_> = (0..connections)
                    .map(|i| tokio::task::spawn_local(client(i, start.clone())))
                    .collect();
                let mut out = Vec::with_capacity(connections);
                for handle in handles {
                    out.push(handle.await.context("a client task failed")??);
                }
                anyhow::Ok(out)
            })
        })
        .context("start the load generator's thread")?;
    generator
        .join()
        .map_err(|_| anyhow!("the load generator panicked"))?
}

/// A start line every client waits at, so that all of them begin measuring together once each
/// has connected and set up.
pub(super) struct StartLine {
    ready: std::rc::Rc<std::cell::Cell<usize>>,
    count: usize,
    notify: std::rc::Rc<tokio::sync::Notify>,
}

impl Clone for StartLine {
    fn clone(&self) -> Self {
        StartLine {
            ready: std::rc::Rc::clone(&self.ready),
            count: self.count,
            notify: std::rc::Rc::clone(&self.notify),
        }
    }
}

impl StartLine {
    /// A start line for `count` clients.
    pub(super) fn new(count: usize) -> StartLine {
        StartLine {
            ready: std::rc::Rc::new(std::cell::Cell::new(0)),
            count,
            notify: std::rc::Rc::new(tokio::sync::Notify::new()),
        }
    }

    /// Waits until every client has arrived; answers when they all did.
    pub(super) async fn wait(&self) -> Instant {
        let notified = self.notify.notified();
        self.ready.set(self.ready.get() + 1);
        if self.ready.get() >= self.count {
            self.notify.notify_waiters();
        } else {
            notified.await;
        }
        Instant::now()
    }
}

/// The address in a base URL `http://host:port`.
pub(super) fn address(base: &str) -> anyhow::Result<SocketAddr> {
    base.strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| anyhow!("{base} is not http://ADDRESS:PORT"))
}

/// A JSON string of `s`.
pub(super) fn quoted(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    s.chars().take(300).collect()
}

/// The value of `"field":"…"` in a JSON answer: how a set-up step finds the id it was given
/// without decoding the whole answer.
pub(super) fn string_field(answer: &[u8], field: &str) -> Option<String> {
    let marker = format!("\"{field}\":\"");
    let at = answer
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())?
        + marker.len();
    let end = answer[at..].iter().position(|b| *b == b'"')?;
    String::from_utf8(answer[at..at + end].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_found_in_an_answer_and_a_missing_one_is_not() {
        let answer = br#"{"result":{"task_id":"t-0192","version":1}}"#;
        assert_eq!(string_field(answer, "task_id").as_deref(), Some("t-0192"));
        assert_eq!(string_field(answer, "evidence_id"), None);
        assert!(contains(br#"{"isError":true}"#, b"\"isError\":true"));
        assert!(!contains(br#"{"isError":false}"#, b"\"isError\":true"));
    }

    #[test]
    fn names_are_quoted_as_json() {
        assert_eq!(quoted("a\"b"), r#""a\"b""#);
    }
}
