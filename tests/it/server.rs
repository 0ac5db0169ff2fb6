//! A server spawned as its operator would run it, and talked to over real HTTP on loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running `research-ledger serve`, stopped with SIGTERM when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl Server {
    /// Starts a server on a free loopback port over `data`.
    pub(crate) fn start(data: &Path, extra: &[&str]) -> Server {
        Server::start_on(data, "127.0.0.1:0", extra)
    }

    /// Starts a server listening on `listen` (port 0: a free one) over `data`. Its address is
    /// the one it reports, with an unspecified IP (`0.0.0.0`) replaced by loopback, where the
    /// tests reach it.
    pub(crate) fn start_on(data: &Path, listen: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_research-ledger"))
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--listen", listen])
            .args(extra)
            .env_remove("RESEARCH_LEDGER_DATA_DIR")
            .env_remove("RESEARCH_LEDGER_LISTEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        let mut addr: SocketAddr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| {
                let mut err = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = stderr.read_to_string(&mut err);
                }
                panic!("unexpected first line {line:?}; stderr: {err}")
            })
            .parse()
            .expect("an address");
        if addr.ip().is_unspecified() {
            addr.set_ip(Ipv4Addr::LOCALHOST.into());
        }
        Server { child, addr }
    }

    /// Whether the process is still running (it has not crashed or exited).
    pub(crate) fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("the server's status")
            .is_none()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn stop(mut self) -> std::process::ExitStatus {
        terminate(&self.child);
        let status = self.child.wait().expect("the server exits");
        std::mem::forget(self);
        status
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        terminate(&self.child);
        let _ = self.child.wait();
    }
}

fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

/// A header of a request: its name and value.
pub(crate) type Header<'a> = (&'a str, &'a str);

/// An HTTP response as it came back: the status, the head, and the body (de-chunked).
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    head: String,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// The value of the header `name` (any case), if present.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }

    /// The body as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; fails the test, showing the body, when it is not.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} answered a body that is not JSON ({e}): {:?}",
                self.status,
                self.text()
            )
        })
    }
}

/// Writes `raw` (a whole HTTP/1.1 request, `Connection: close`) on a connection of its own and
/// reads the response. The server may answer and close before it has read all of a body it
/// refuses: errors writing the rest, and a reset after the response, are not the test's
/// concern — the response is.
pub(crate) fn exchange(addr: SocketAddr, raw: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let _ = stream.write_all(raw);
    let mut response = Vec::new();
    if let Err(e) = stream.read_to_end(&mut response) {
        assert!(
            !response.is_empty() && e.kind() != std::io::ErrorKind::WouldBlock,
            "no response to {:?}: {e}",
            String::from_utf8_lossy(&raw[..raw.len().min(200)])
        );
    }
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "no response head in {:?}",
                String::from_utf8_lossy(&response)
            )
        });
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let mut body = response[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Reply { status, head, body }
}

/// The head of a request to `path`, with `headers` after `Host` and `Connection: close`, and
/// no blank line after it.
pub(crate) fn head(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head
}

/// One HTTP/1.1 request with its `Content-Length`; returns the whole reply.
pub(crate) fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut raw = head(addr, method, path, headers).into_bytes();
    raw.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    raw.extend_from_slice(body);
    exchange(addr, &raw)
}

/// The same request with its body sent chunked, without a `Content-Length`: a length the
/// server only learns by reading.
pub(crate) fn send_chunked(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut raw = head(addr, method, path, headers).into_bytes();
    raw.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
    for chunk in body.chunks(8192) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    exchange(addr, &raw)
}

/// One HTTP/1.1 request; returns the status and the body.
pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let reply = send(addr, method, path, headers, body);
    (reply.status, reply.body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            std::str::from_utf8(&data[..line_end]).unwrap_or("0").trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = line_end + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
}

pub(crate) fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = request(addr, "GET", path, &[], b"");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The ledger's size as `/health` reports it (open to anyone).
pub(crate) fn ledger_size(addr: SocketAddr) -> u64 {
    let (status, health) = get_json(addr, "/health");
    assert_eq!(status, 200, "{health}");
    health["ledger"]["size"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ledger size in {health}"))
}

#[test]
fn health_answers_and_sigterm_stops_the_server_cleanly() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let (status, health) = get_json(server.addr, "/health");
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["ledger"]["size"], 0);

    // The data directory is held, and a second command says by whom.
    let other = super::run(data.path(), &["verify"]);
    assert_eq!(other.status.code(), Some(2));
    let err = super::stderr(&other);
    assert!(
        err.contains(&format!("serve on http://{}", server.addr)),
        "{err}"
    );

    let status = server.stop();
    assert!(status.success(), "{status:?}");
    // Released: the directory opens again and verifies.
    assert!(super::run(data.path(), &["verify"]).status.success());
}

#[test]
fn the_server_refuses_to_listen_beyond_loopback_without_tokens() {
    let data = tempfile::tempdir().unwrap();
    let out = super::run(data.path(), &["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        super::stderr(&out).contains("without access tokens"),
        "{}",
        super::stderr(&out)
    );
}
