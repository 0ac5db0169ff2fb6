//! Test doubles shared by the test suites. At the root: a real HTTP server on loopback standing
//! in for a team's existing API, well-behaved and not (it answers by path, so one server plays
//! every part). [`postgres`]: throwaway PostgreSQL clusters in temporary folders.
//! [`encoder_model_dir`]: where the sentence encoder's model is, for the tests that need it.

pub mod postgres;

/// The sentence encoder's model folder the tests read (`RESEARCH_LEDGER_ENCODER_DIR`, which
/// `scripts/fetch-encoder` fills); the model is not part of the repository. `None` lets a test
/// pass without running, unless `RESEARCH_LEDGER_REQUIRE_ENCODER=1` says the model must be
/// there, when it panics instead.
pub fn encoder_model_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("RESEARCH_LEDGER_ENCODER_DIR") {
        Some(dir) => Some(std::path::PathBuf::from(dir)),
        None => {
            assert!(
                std::env::var("RESEARCH_LEDGER_REQUIRE_ENCODER").as_deref() != Ok("1"),
                "RESEARCH_LEDGER_REQUIRE_ENCODER=1 but RESEARCH_LEDGER_ENCODER_DIR is not set"
            );
            eprintln!("RESEARCH_LEDGER_ENCODER_DIR is not set: skipped");
            None
        }
    }
}

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};

/// A running stand-in; it stops with the test process.
#[derive(Debug)]
pub struct LegacyApi {
    /// Where it listens.
    pub addr: SocketAddr,
}

impl LegacyApi {
    /// Starts the stand-in on a free loopback port.
    #[allow(clippy::unwrap_used)]
    pub fn start() -> LegacyApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let _ = serve(stream);
                });
            }
        });
        LegacyApi { addr }
    }

    /// The URL of a path on the stand-in.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        if header.trim().is_empty() {
            break;
        }
        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let args: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let (status, reply) = route(path, query, &args);
    let text = reply.to_string();
    write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()
}

/// Evidence items as the knowledge base returns them.
pub fn items(n: u64, query: &str) -> Vec<Value> {
    (1..=n)
        .map(|i| {
            json!({
                "id": format!("kb-{i}"),
                "text": format!("Knowledge base note {i} on {query}: mine output grew 9% in 2024 while demand grew 6%."),
                "url": format!("https://kb.example.org/notes/{i}"),
                "publisher": "Example Mining Institute",
                "date": format!("2024-0{}-15", 1 + i % 9),
                "type": "institutional_report",
                "stance": "supports",
                "score": 0.9 - i as f64 * 0.1,
            })
        })
        .collect()
}

fn route(path: &str, query: &str, args: &Value) -> (u16, Value) {
    match path {
        "/search" => {
            let n = args["top_k"].as_u64().unwrap_or(3);
            let q = args["query"].as_str().unwrap_or("");
            (
                200,
                json!({"contract_version": "2.1", "results": items(n, q)}),
            )
        }
        "/echo" => (
            200,
            json!({"contract_version": "2.1", "results": [], "received": args}),
        ),
        "/missing-tag" => {
            let mut results = items(2, "x");
            if let Some(first) = results.get_mut(1).and_then(Value::as_object_mut) {
                first.remove("text");
            }
            (200, json!({"contract_version": "2.1", "results": results}))
        }
        "/old-version" => (
            200,
            json!({"contract_version": "1.0", "results": items(1, "x")}),
        ),
        "/no-version" => (200, json!({"results": items(1, "x")})),
        "/slow" => {
            std::thread::sleep(Duration::from_secs(5));
            (200, json!({"contract_version": "2.1", "results": []}))
        }
        "/error" => (500, json!({"message": "the database is down"})),
        "/weather" => {
            let city = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("city="))
                .unwrap_or("?");
            (
                200,
                json!({"contract_version": "1", "current": {"temp": 21.5, "condition": format!("sunny in {city}")}}),
            )
        }
        _ => (404, json!({"message": "no such route"})),
    }
}
