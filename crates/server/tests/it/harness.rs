//! An app over a fresh data directory with a fixed clock and the bundled sample corpus, and
//! helpers to send it requests and to make its answers comparable from run to run.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use chrono::TimeZone as _;
use serde_json::{Value, json};
use server::auth::Auth;
use server::hosts::HostAllowList;
use server::{AppOptions, HttpLimits};
use service::tokens::TokenStore;
use service::{Service, ServiceOptions};
use tower::ServiceExt as _;

/// The app, the service under it and the directory they live in.
pub(crate) struct App {
    pub(crate) router: Router,
    pub(crate) service: Service,
    _dir: tempfile::TempDir,
}

/// The limits of a default `serve`.
pub(crate) fn limits() -> HttpLimits {
    HttpLimits {
        request_bytes_max: 1 << 20,
        request_time_max: Duration::from_secs(30),
        requests_in_flight_max: 64,
        body_read_time_max: Duration::from_secs(10),
    }
}

impl App {
    /// A tokenless app on loopback over the sample corpus.
    pub(crate) fn new() -> App {
        App::with_limits(limits())
    }

    pub(crate) fn with_limits(limits: HttpLimits) -> App {
        App::in_dir(tempfile::tempdir().unwrap(), limits)
    }

    /// An app on `dir`, with the tokens its `tokens.json` holds.
    pub(crate) fn in_dir(dir: tempfile::TempDir, limits: HttpLimits) -> App {
        let mut options = ServiceOptions::new(dir.path());
        options.ledger.checkpoint_interval = None;
        options.ledger.id_seed = Some(7);
        let start = chrono::Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
        options.ledger.clock = Arc::new(ledger::SteppingClock::new(start, 1_000));
        let service = Service::open(options).unwrap();
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus/sample/documents");
        let report = service
            .corpus()
            .ingest(&[sample], &sources::Defaults::default(), &mut |_| {})
            .unwrap();
        assert!(report.added > 0, "{report:?}");
        let auth = Arc::new(Auth::new(
            TokenStore::new(dir.path().join("tokens.json")),
            true,
        ));
        let app_options = AppOptions {
            graphql: graphql::Options::default(),
            bridge: mcp_bridge::BridgeOptions::default(),
            auth,
            limits,
            hosts: Arc::new(HostAllowList::new(&[])),
            export_concurrent_max: 2,
        };
        let router = server::app(&service, &app_options);
        App {
            router,
            service,
            _dir: dir,
        }
    }

    /// Sends `request` through the whole app; the status and the body read as JSON (or as a
    /// string when it is not JSON).
    pub(crate) async fn send(&self, request: Request<Body>) -> (StatusCode, Value) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, body)
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(
            Request::get(path)
                .header(header::HOST, "localhost")
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.send(
            Request::post(path)
                .header(header::HOST, "localhost")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_string()))
                .unwrap(),
        )
        .await
    }

    /// Calls a tool over REST; the status and the whole answer.
    pub(crate) async fn call(&self, tool: &str, arguments: Value) -> (StatusCode, Value) {
        self.post(
            "/v1/tools/call",
            &json!({"name": tool, "arguments": arguments}),
        )
        .await
    }

    /// Calls a tool that must succeed; its result.
    pub(crate) async fn ok(&self, tool: &str, arguments: Value) -> Value {
        let (status, body) = self.call(tool, arguments).await;
        assert_eq!(status, StatusCode::OK, "{tool}: {body}");
        body["result"].clone()
    }
}

/// The body of a `GET` through the app, as bytes.
pub(crate) trait BytesOf {
    async fn oneshot_bytes(self, path: &str) -> Vec<u8>;
}

impl BytesOf for Router {
    async fn oneshot_bytes(self, path: &str) -> Vec<u8> {
        let request = Request::get(path)
            .header(header::HOST, "localhost")
            .body(Body::empty())
            .unwrap();
        let response = self.oneshot(request).await.unwrap();
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec()
    }
}

/// `value` with what differs between runs — ids, hashes, keys and signatures — replaced by
/// placeholders numbered by first appearance, so the same id reads the same everywhere in a
/// snapshot and a changed structure still shows.
pub(crate) fn stable(value: &Value) -> Value {
    let mut seen: Vec<String> = Vec::new();
    redact(value, &mut seen)
}

fn redact(value: &Value, seen: &mut Vec<String>) -> Value {
    match value {
        Value::String(s) => Value::String(redact_text(s, seen)),
        Value::Array(items) => Value::Array(items.iter().map(|v| redact(v, seen)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match k.as_str() {
                    // A job's times are the wall clock's, not the ledger's.
                    "started_at" | "updated_at" if v.is_string() => {
                        (k.clone(), Value::String("<time>".into()))
                    }
                    _ => (k.clone(), redact(v, seen)),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Every volatile word of `text` replaced: a UUID (`<id-N>`), a run of 12 or more hex digits
/// (`<hex-N>`: hashes, short hashes, job ids after their `job-`), a run of 40 or more base64
/// characters (`<b64-N>`).
fn redact_text(text: &str, seen: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String, seen: &mut Vec<String>| {
        if let Some(kind) = volatile(word) {
            let n = match seen.iter().position(|s| s == word) {
                Some(i) => i,
                None => {
                    seen.push(word.clone());
                    seen.len() - 1
                }
            };
            out.push_str(&format!("<{kind}-{n}>"));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '+' || c == '/' || c == '=' {
            word.push(c);
        } else {
            flush(&mut word, &mut out, seen);
            out.push(c);
        }
    }
    flush(&mut word, &mut out, seen);
    out
}

fn volatile(word: &str) -> Option<&'static str> {
    let is_uuid = word.len() == 36
        && word.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if is_uuid {
        return Some("id");
    }
    let hex = |w: &str| w.len() >= 12 && w.chars().all(|c| c.is_ascii_hexdigit());
    if hex(word) || word.strip_prefix("job-").is_some_and(hex) {
        return Some("hex");
    }
    let base64 = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '=';
    if word.len() >= 40 && word.chars().all(base64) && word.chars().any(|c| c.is_ascii_digit()) {
        return Some("b64");
    }
    None
}

/// The snapshot text of a JSON value: pretty, with a trailing newline.
pub(crate) fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap();
    text.push('\n');
    text
}

#[test]
fn redaction_numbers_ids_by_first_appearance_and_keeps_the_rest() {
    let value = json!({
        "task_id": "0195f7a1-0000-7000-8000-000000000001",
        "again": "task 0195f7a1-0000-7000-8000-000000000001 at version 2.",
        "hash": "ab".repeat(32),
        "word": "research_open_task",
    });
    assert_eq!(
        stable(&value),
        json!({
            "task_id": "<id-0>",
            "again": "task <id-0> at version 2.",
            "hash": "<hex-1>",
            "word": "research_open_task",
        })
    );
}
