//! A server spawned as its operator would run it, and talked to over real HTTP on loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The variable that runs the suite on PostgreSQL: `postgres` for a throwaway cluster of the
/// test process's own (from `test_support::postgres`), or the URL of a server
/// (`postgres://USER@HOST:PORT/DB`, a user that may create databases) to use instead. Each data
/// directory a test uses gets a database of its own, passed to every run of the binary on that
/// directory as `RESEARCH_LEDGER_STORAGE_URL`.
pub(crate) const STORAGE_VAR: &str = "RESEARCH_LEDGER_TEST_STORAGE";

/// Whether the suite runs on PostgreSQL (see [`STORAGE_VAR`]).
pub(crate) fn on_postgres() -> bool {
    std::env::var(STORAGE_VAR).is_ok_and(|v| !v.is_empty())
}

/// For a test about the embedded backend's own files (segment files, the sled index, the
/// content journal, a copy of the data directory): true, with a note on stderr, when the suite
/// runs on PostgreSQL, where the test does not apply.
pub(crate) fn embedded_only(test: &str) -> bool {
    let skip = on_postgres();
    if skip {
        eprintln!("{test}: about the embedded storage's files, not run on PostgreSQL");
    }
    skip
}

/// Contract files placed by hand in `data`'s contracts folder are served as they are on the
/// embedded backend; over a database a node serves only what the database holds (and refuses a
/// folder it does not hold), so there the folder is pushed first, as an operator does.
pub(crate) fn place_contracts(data: &Path, folder: &Path) {
    if on_postgres() {
        let out = super::run(data, &["contracts", "push", folder.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}{}",
            super::stdout(&out),
            super::stderr(&out)
        );
    }
}

/// The database of each data directory (by its canonical path) the suite used so far.
fn databases()
-> std::sync::MutexGuard<'static, std::collections::HashMap<std::path::PathBuf, String>> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static DATABASES: OnceLock<Mutex<HashMap<std::path::PathBuf, String>>> = OnceLock::new();
    DATABASES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The database of data directory `data` when the suite runs on PostgreSQL: created at the
/// first run on that directory, the same for every later one.
pub(crate) fn storage_url(data: &Path) -> Option<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let wanted = std::env::var(STORAGE_VAR).ok().filter(|v| !v.is_empty())?;
    let key = data.canonicalize().unwrap_or_else(|_| data.to_path_buf());
    let mut databases = databases();
    if let Some(url) = databases.get(&key) {
        return Some(url.clone());
    }
    let url = if wanted == "postgres" {
        test_support::postgres::PgCluster::shared()
            .expect("a PostgreSQL cluster for the suite")
            .create_database()
            .expect("a database")
    } else {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("it_{}_{n}", std::process::id());
        psql(&wanted, &format!("CREATE DATABASE {name}"));
        let (base, _) = wanted.rsplit_once('/').expect("a URL with a database");
        format!("{base}/{name}")
    };
    databases.insert(key, url.clone());
    Some(url)
}

/// Makes `alias` (another path to the same data directory, such as a read-only mount of it)
/// use `data`'s database.
pub(crate) fn alias_storage(data: &Path, alias: &Path) {
    if let Some(url) = storage_url(data) {
        let key = alias.canonicalize().unwrap_or_else(|_| alias.to_path_buf());
        databases().insert(key, url);
    }
}

/// The tokens of data directory `data` as kept: its `tokens.json`, or the shared document in
/// its database when the suite runs on PostgreSQL; `None` when none was ever written.
pub(crate) fn tokens_text(data: &Path) -> Option<String> {
    let Some(url) = storage_url(data) else {
        return std::fs::read_to_string(data.join("tokens.json")).ok();
    };
    if psql(&url, "SELECT to_regclass('shared_documents') IS NOT NULL") != "t" {
        return None;
    }
    let body = psql(
        &url,
        "SELECT coalesce(body, '') FROM shared_documents WHERE name = 'tokens'",
    );
    (!body.is_empty()).then_some(body)
}

/// Whether the contract of tool `name` registered through the server of `data` is kept where
/// registration keeps it: the data directory's `contracts/tools/NAME.yaml`, or the shared
/// document `contracts` of its database when the suite runs on PostgreSQL.
pub(crate) fn registered_contract_kept(data: &Path, name: &str) -> bool {
    let Some(url) = storage_url(data) else {
        return data.join(format!("contracts/tools/{name}.yaml")).exists();
    };
    let body = psql(
        &url,
        "SELECT coalesce(body, '{}') FROM shared_documents WHERE name = 'contracts'",
    );
    let document: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    document["tools"].get(name).is_some()
}

/// Runs `sql` with `psql` on the database at `url`; returns what it printed (tuples only,
/// unaligned).
pub(crate) fn psql(url: &str, sql: &str) -> String {
    let psql = test_support::postgres::bin_dir()
        .map(|bin| bin.join("psql"))
        .unwrap_or_else(|| "psql".into());
    let out = Command::new(psql)
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Opens the ledger of data directory `data` through the library, where the suite keeps it:
/// its database on PostgreSQL, its folder otherwise.
pub(crate) fn open_ledger(data: &Path, options: ledger::LedgerOptions) -> ledger::Ledger {
    match storage_url(data) {
        Some(url) => ledger::Ledger::open_postgres(&url, &data.join("ledger/keys"), options),
        None => ledger::Ledger::open(&data.join("ledger"), options),
    }
    .expect("the ledger opens")
}

/// Points `command`, a run of the binary on `data`, at that directory's database when the suite
/// runs on PostgreSQL (and at no other in any case).
pub(crate) fn with_storage<'c>(command: &'c mut Command, data: &Path) -> &'c mut Command {
    command.env_remove("RESEARCH_LEDGER_STORAGE_URL");
    if let Some(url) = storage_url(data) {
        command.env("RESEARCH_LEDGER_STORAGE_URL", url);
    }
    command
}

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
        Server::spawn(data, "127.0.0.1:0", extra, env)
    }

    /// Starts a server listening on `listen` (port 0: a free one) over `data`. Its address is
    /// the one it reports, with an unspecified IP (`0.0.0.0`) replaced by loopback, where the
    /// tests reach it.
    pub(crate) fn start_on(data: &Path, listen: &str, extra: &[&str]) -> Server {
        Server::spawn(data, listen, extra, &[])
    }

    /// Starts a server through `wrapper` (a program that execs the command it is given, such
    /// as `fiu-run -x`), with `extra` flags.
    pub(crate) fn start_wrapped(data: &Path, wrapper: &[&str], extra: &[&str]) -> Server {
        Server::spawn_with(wrapper, data, "127.0.0.1:0", extra, &[])
    }

    fn spawn(data: &Path, listen: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn_with(&[], data, listen, extra, env)
    }

    fn spawn_with(
        wrapper: &[&str],
        data: &Path,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let binary = env!("CARGO_BIN_EXE_research-ledger");
        let mut command = match wrapper.split_first() {
            None => Command::new(binary),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
        };
        with_storage(&mut command, data);
        let mut child = command
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--listen", listen])
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
        let mut addr: SocketAddr = line
            .trim()
            .strip_prefix("listening on http://")
            .or_else(|| line.trim().strip_prefix("listening on https://"))
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

    /// What the server wrote to stderr, once `done` holds of it (within ten seconds): a line the
    /// server wrote before it answered may still be on its way through the pipe to this log.
    pub(crate) fn stderr_once(&self, done: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let text = self.stderr();
            if done(&text) || std::time::Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Whether the process is still running (it has not crashed or exited).
    pub(crate) fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("the server's status")
            .is_none()
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

pub(crate) fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

/// A header of a request: its name and value.
pub(crate) type Header<'a> = (&'a str, &'a str);

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
    try_request_on(connect(addr)?, method, path, headers, body)
}

/// A connection for one request.
pub(crate) fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(stream)
}

/// One HTTP/1.1 request on a connection made with [`connect`]; returns the status and the body.
pub(crate) fn request_on(
    stream: TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    try_request_on(stream, method, path, headers, body).expect("a whole HTTP response")
}

fn try_request_on(
    stream: TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let addr = stream.peer_addr()?;
    let mut raw = head(addr, method, path, headers, Some(body.len())).into_bytes();
    raw.extend_from_slice(body);
    let response = try_exchange_on(stream, &raw)?;
    Ok((response.status, response.body))
}

/// One HTTP/1.1 request with its `Content-Length`; returns the whole response, head included.
pub(crate) fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut raw = head(addr, method, path, headers, Some(body.len())).into_bytes();
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
) -> Response {
    let mut raw = head(addr, method, path, headers, None).into_bytes();
    for chunk in body.chunks(8192) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    exchange(addr, &raw)
}

/// Writes `raw`, a whole HTTP/1.1 request, on a connection of its own and reads the response.
pub(crate) fn exchange(addr: SocketAddr, raw: &[u8]) -> Response {
    connect(addr)
        .and_then(|stream| try_exchange_on(stream, raw))
        .unwrap_or_else(|e| {
            panic!(
                "no whole HTTP response to {:?}: {e}",
                String::from_utf8_lossy(&raw[..raw.len().min(200)])
            )
        })
}

/// Writes `raw` on a connection of the caller's and reads the whole response, or the error.
pub(crate) fn exchange_on(stream: TcpStream, raw: &[u8]) -> std::io::Result<Response> {
    try_exchange_on(stream, raw)
}

/// Writes `raw` on `stream` and reads the whole response. A server may answer and close before
/// it has read all of a body it refuses: an error writing the rest is no failure when a whole
/// response comes back, and the failure when none does.
fn try_exchange_on(mut stream: TcpStream, raw: &[u8]) -> std::io::Result<Response> {
    let written = stream.write_all(raw);
    let response = read_response(&mut stream)?;
    let Some(response) = Response::parse(&response) else {
        written?;
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "no whole response: no head, or a chunked body cut short",
        ));
    };
    if response
        .header("content-length")
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n != response.body.len())
    {
        written?;
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "a body of another length than its content-length",
        ));
    }
    Ok(response)
}

/// Reads a response up to the end of the connection. A server that answers before it has read
/// the whole request (one refused for its size) and closes with the rest unread resets the
/// connection: once a whole response has come, a reset ends it like the end of the stream.
fn read_response(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionReset
                    && Response::parse(&got).is_some_and(|r| r.is_whole()) =>
            {
                return Ok(got);
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{e} after {:?}", String::from_utf8_lossy(&got)),
                ));
            }
        }
    }
}

/// The head of a request on a connection of its own, its body `length` bytes long or, without
/// one, sent chunked.
fn head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    length: Option<usize>,
) -> String {
    let framing = match length {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{framing}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// A response as it came over the wire.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// The status line and the header lines.
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// Reads a whole response (head, then a body with a length, chunked or up to the end).
    fn parse(response: &[u8]) -> Option<Response> {
        let split = response.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&response[..split]).into_owned();
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let mut body = response[split + 4..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = dechunk(&body)?;
        }
        Some(Response { status, head, body })
    }

    /// Whether the body is as long as the head says.
    fn is_whole(&self) -> bool {
        self.header("content-length")
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n == self.body.len())
    }

    /// The value of the header `name` (in any case), if it was sent.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The body as JSON; null when it is not JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The body as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A request sent as far as the end of its head, with `Expect: 100-continue`, its body held
/// back: the server either takes it in (asks for the body, and from then on the request is
/// in flight until it answers) or answers at once without it.
#[derive(Debug)]
pub(crate) enum Held {
    /// The server asked for the body.
    Admitted(HeldRequest),
    /// The server answered without reading the body.
    Answered(Response),
}

/// A request the server took in and waits to read the body of.
#[derive(Debug)]
pub(crate) struct HeldRequest {
    stream: TcpStream,
    body: Vec<u8>,
}

/// Sends the head of a request and waits for the server to either ask for its body or answer.
/// Errors are returned rather than raised, so that callers in step with others can keep step.
pub(crate) fn hold(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> std::io::Result<Held> {
    let mut stream = connect(addr)?;
    let mut headers = headers.to_vec();
    headers.push(("Expect", "100-continue"));
    stream.write_all(head(addr, method, path, &headers, Some(body.len())).as_bytes())?;
    let mut got = read_head(&mut stream)?;
    if got.starts_with(b"HTTP/1.1 100 ") {
        return Ok(Held::Admitted(HeldRequest { stream, body }));
    }
    got.extend(read_response(&mut stream)?);
    Response::parse(&got)
        .map(Held::Answered)
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))
}

impl HeldRequest {
    /// Sends the body and reads the response.
    pub(crate) fn finish(mut self) -> std::io::Result<Response> {
        self.stream.write_all(&self.body)?;
        let response = read_response(&mut self.stream)?;
        Response::parse(&response).ok_or_else(|| std::io::Error::other("not an HTTP response"))
    }
}

/// Reads a response head, byte by byte: nothing after it is consumed.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the connection closed after {:?}",
                    String::from_utf8_lossy(&got)
                ),
            ));
        }
        got.push(byte[0]);
    }
    Ok(got)
}

/// A connection the server has accepted and is ready to read the next request on: it answered
/// a `GET /health` on it and kept it open.
pub(crate) fn connect_served(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let mut stream = connect(addr)?;
    stream.write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let head = read_head(&mut stream)?;
    let length = Response::parse(&head)
        .and_then(|r| r.header("content-length")?.parse::<usize>().ok())
        .ok_or_else(|| std::io::Error::other("a response without a length"))?;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    Ok(stream)
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

/// The ledger's size as `/health` reports it (open to anyone).
pub(crate) fn ledger_size(addr: SocketAddr) -> u64 {
    let (status, health) = get_json(addr, "/health");
    assert_eq!(status, 200, "{health}");
    health["ledger"]["size"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ledger size in {health}"))
}

/// Posts `value` as JSON; returns the status and the body as JSON (null when it is not).
pub(crate) fn post_json(addr: SocketAddr, path: &str, value: &Value) -> (u16, Value) {
    let body = serde_json::to_vec(value).expect("JSON");
    let (status, body) = request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        &body,
    );
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Calls a tool through the REST view (`POST /v1/tools/call`).
pub(crate) fn call_tool(addr: SocketAddr, name: &str, arguments: Value) -> (u16, Value) {
    post_json(
        addr,
        "/v1/tools/call",
        &serde_json::json!({"name": name, "arguments": arguments}),
    )
}

#[test]
fn health_answers_and_sigterm_stops_the_server_cleanly() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let (status, health) = get_json(server.addr, "/health");
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["ledger"]["size"], 0);

    // The data directory's ledger is held, and a second command says by whom (a ledger in a
    // database is read beside its server).
    let other = super::run(data.path(), &["verify"]);
    if on_postgres() {
        assert!(other.status.success(), "{}", super::stderr(&other));
    } else {
        assert_eq!(other.status.code(), Some(2));
        let err = super::stderr(&other);
        assert!(
            err.contains(&format!("serve on http://{}", server.addr)),
            "{err}"
        );
    }

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
