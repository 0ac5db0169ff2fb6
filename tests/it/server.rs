//! A server spawned as its operator would run it, and talked to over real HTTP on loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running `research-ledger serve`, stopped with SIGTERM when dropped. Its stderr (the
/// request log among it) is drained as it comes, so a busy server never blocks on a full pipe.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    log: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    drain: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts a server on a free loopback port over `data`.
    pub(crate) fn start(data: &Path, extra: &[&str]) -> Server {
        Server::start_with(data, extra, &[])
    }

    /// Starts a server with `extra` flags and `env` variables.
    pub(crate) fn start_with(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_research-ledger"))
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("RESEARCH_LEDGER_DATA_DIR")
            .env_remove("RESEARCH_LEDGER_LISTEN")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("a line");
        let addr = line
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
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        let drain = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Server {
            child,
            addr,
            log,
            drain: Some(drain),
        }
    }

    /// What the server wrote to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap()).into_owned()
    }

    /// Kills the server with SIGKILL, as a crash would, and waits until it is gone.
    pub(crate) fn kill(mut self) -> std::process::ExitStatus {
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().expect("the server is gone");
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
        status
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn stop(self) -> std::process::ExitStatus {
        self.stop_with_stderr().0
    }

    /// Sends SIGTERM, waits for the exit, and returns its status and everything on stderr.
    pub(crate) fn stop_with_stderr(mut self) -> (std::process::ExitStatus, String) {
        terminate(&self.child);
        let status = self.child.wait().expect("the server exits");
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
        let stderr = self.stderr();
        (status, stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            terminate(&self.child);
            let _ = self.child.wait();
        }
    }
}

fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

/// One HTTP/1.1 request; returns the status and the body.
pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    try_request(addr, method, path, headers, body).expect("a whole HTTP response")
}

/// One HTTP/1.1 request that may fail: the server may be gone before it connects, while it
/// writes or before the whole response arrives (a response cut short is an error, never a
/// shorter body).
pub(crate) fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let cut = |what: &str| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, what.to_owned());
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| cut("no response head"))?;
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| cut("no status"))?;
    let mut body = response[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body).ok_or_else(|| cut("a chunked body cut short"))?;
    } else if let Some(length) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|l| l.trim().parse::<usize>().ok())
        && body.len() != length
    {
        return Err(cut("a body of another length than its content-length"));
    }
    Ok((status, body))
}

/// The body of a chunked response, or none when it ends before its last chunk.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).ok()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        let start = line_end + 2;
        out.extend_from_slice(data.get(start..start + size)?);
        data = data.get(start + size + 2..)?;
    }
}

pub(crate) fn get_json(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, body) = request(addr, "GET", path, &[], b"");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
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
