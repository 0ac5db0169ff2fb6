//! The log as the transparency-log ecosystem reads it, checked with tools this project did not
//! write: Go's `golang.org/x/mod/sumdb/note` and `tlog` (through `verifiers/go`) read
//! `GET /checkpoint`, the tiles, the entry bundles, consistency proofs and an export bundle's
//! proofs and notes; and `witness serve` cosigns a growing log, while refusing a fork and a
//! rollback.
//!
//! Go is required when `RESEARCH_LEDGER_REQUIRE_GO` is set (as `scripts/test` does once it has
//! installed it); elsewhere the Go checks say they did not run.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::server::{Server, request, send};
use super::{run, stderr, stdout};

/// Runs the demo for one question, or for all three with `None`.
fn demo(data: &Path, question: Option<&str>) {
    let mut args = vec!["demo", "--json"];
    if let Some(question) = question {
        args.extend(["--question", question]);
    }
    let out = run(data, &args);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The log's verifier key, the second line `key show` prints.
fn verifier_key(data: &Path) -> String {
    let out = run(data, &["key", "show"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .nth(1)
        .expect("a verifier key")
        .to_owned()
}

fn get_text(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, body) = request(addr, "GET", path, &[], b"");
    (status, String::from_utf8(body).expect("text"))
}

/// The Go checker, built once from `verifiers/go` with the system's `x/mod`; `None` when Go is
/// not installed and not required.
fn go_checker() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let required = std::env::var_os("RESEARCH_LEDGER_REQUIRE_GO").is_some();
            let gopath = Path::new("/usr/share/gocode/src/golang.org/x/mod/sumdb/tlog");
            let go = Command::new("go").arg("version").output();
            if go.is_err() || !gopath.is_dir() {
                assert!(
                    !required,
                    "Go and golang.org/x/mod (Debian: golang-go golang-golang-x-mod-dev) are required"
                );
                eprintln!("Go is not installed: the checks with Go's tlog did not run");
                return None;
            }
            // Inside the target directory, reused by every run: Go caches what it built there.
            let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tlogcheck");
            std::fs::create_dir_all(&out_dir).unwrap();
            let binary = out_dir.join("tlogcheck");
            let built = Command::new("go")
                .args(["build", "-o"])
                .arg(&binary)
                .arg("./verifiers/go")
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .env("GO111MODULE", "off")
                .env("GOPATH", "/usr/share/gocode")
                .env("GOCACHE", out_dir.join("cache"))
                .env("GOFLAGS", "")
                .output()
                .expect("go runs");
            assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
            Some(binary)
        })
        .as_deref()
}

fn go_check(args: &[&str]) -> String {
    let Some(checker) = go_checker() else {
        return String::new();
    };
    let out = Command::new(checker)
        .args(args)
        .output()
        .expect("tlogcheck runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "Go's tlog refused: {text}");
    text
}

/// Waits until the server's checkpoint covers `size` events; returns its note.
fn checkpoint_covering(addr: SocketAddr, size: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, note) = get_text(addr, "/checkpoint");
        if status == 200
            && note
                .lines()
                .nth(1)
                .and_then(|l| l.parse::<u64>().ok())
                .is_some_and(|n| n >= size)
        {
            return note;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint of {size} events: {note}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ledger_size(data: &Path) -> u64 {
    let out = run(data, &["verify", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    report["size"].as_u64().unwrap()
}

#[test]
fn the_checkpoint_is_plain_text_revalidated_and_tiles_are_bytes_cached_for_good() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let open = serde_json::json!({"name": "research_open_task",
        "arguments": {"question": "Is the checkpoint fresh?", "research_date": "2025-06-30"}});
    let (status, body) = super::server::post_json(server.addr, "/v1/tools/call", &open);
    assert_eq!(status, 200, "{body}");
    checkpoint_covering(server.addr, 1);
    // A checkpoint changes as the log grows: a cache must ask again before each use.
    let checkpoint = send(server.addr, "GET", "/checkpoint", &[], b"");
    assert_eq!(checkpoint.status, 200, "{}", checkpoint.text());
    assert_eq!(
        checkpoint.header("content-type"),
        Some("text/plain; charset=utf-8"),
        "{}",
        checkpoint.head
    );
    assert_eq!(
        checkpoint.header("cache-control"),
        Some("no-cache"),
        "{}",
        checkpoint.head
    );
    // A tile never changes once a checkpoint covers it.
    for path in ["/tile/0/000.p/1", "/tile/entries/000.p/1"] {
        let tile = send(server.addr, "GET", path, &[], b"");
        assert_eq!(tile.status, 200, "{path}: {}", tile.text());
        assert_eq!(
            tile.header("content-type"),
            Some("application/octet-stream"),
            "{path}: {}",
            tile.head
        );
        assert_eq!(
            tile.header("cache-control"),
            Some("public, max-age=31536000, immutable"),
            "{path}: {}",
            tile.head
        );
    }
}

#[test]
fn the_checkpoint_tiles_and_proofs_are_what_go_s_tlog_reads() {
    let data = tempfile::tempdir().unwrap();
    demo(data.path(), None);
    let vkey = verifier_key(data.path());
    let first = ledger_size(data.path());
    let server = Server::start(data.path(), &[]);
    let old = checkpoint_covering(server.addr, first);
    server.stop();
    demo(data.path(), None);
    let size = ledger_size(data.path());
    assert!(size > 256, "enough events for a full tile: {size}");
    let server = Server::start(data.path(), &[]);
    let note = checkpoint_covering(server.addr, size);

    // The note: body lines, a blank line, the log's signature line.
    let lines: Vec<&str> = note.lines().collect();
    assert_eq!(lines[0], vkey.split('+').next().unwrap());
    assert_eq!(lines[1], size.to_string());
    assert!(lines[3].starts_with("time "));
    assert_eq!(lines[4], "");
    assert!(lines[5].starts_with(&format!("\u{2014} {} ", lines[0])));

    // Tiles: a full tile is 8,192 bytes and cacheable for good; a tile no checkpoint covers is
    // not served; a partial tile of the signed size is.
    let full = send(server.addr, "GET", "/tile/0/000", &[], b"");
    assert_eq!(full.status, 200);
    assert_eq!(full.body.len(), 8192);
    assert!(full.header("cache-control").unwrap().contains("immutable"));
    let width = size % 256;
    let (status, partial) = request(
        server.addr,
        "GET",
        &format!("/tile/0/001.p/{width}"),
        &[],
        b"",
    );
    assert_eq!((status, partial.len() as u64), (200, width * 32));
    let (status, _) = request(
        server.addr,
        "GET",
        &format!("/tile/0/001.p/{}", width + 1),
        &[],
        b"",
    );
    assert_eq!(status, 404, "a tile wider than the signed tree");
    let (status, _) = request(server.addr, "GET", "/tile/0/1", &[], b"");
    assert_eq!(status, 404, "not a C2SP tile path");
    let (status, entries) = request(server.addr, "GET", "/tile/entries/000", &[], b"");
    assert_eq!((status, entries.len()), (200, 256 * 34));

    let saved = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(saved.path(), &old).unwrap();
    let url = format!("http://{}", server.addr);
    let checked = go_check(&[
        "-url",
        &url,
        "-vkey",
        &vkey,
        "-old",
        saved.path().to_str().unwrap(),
    ]);
    if go_checker().is_some() {
        assert!(checked.contains("tlog.CheckTree"), "{checked}");
    }
    // A doctored note is refused by Go as by us.
    let (_, body) = get_text(server.addr, "/checkpoint");
    let doctored = body.replacen(&format!("\n{size}\n"), &format!("\n{}\n", size + 1), 1);
    std::fs::write(saved.path(), doctored).unwrap();
    if let Some(checker) = go_checker() {
        let out = Command::new(checker)
            .args([
                "-url",
                &url,
                "-vkey",
                &vkey,
                "-old",
                saved.path().to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(!out.status.success(), "Go accepted a doctored note");
    }
    server.stop();

    // The export bundle: every inclusion proof by tlog.CheckRecord, every checkpoint as a note.
    let bundle = tempfile::NamedTempFile::new().unwrap();
    let out = run(
        data.path(),
        &["export", "--all", "--out", bundle.path().to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The demo opens its tasks on v2's defaults, which record the query cap: their openings
    // are schema version 4, and Go checks their records like any other.
    let exported: Value = serde_json::from_slice(&std::fs::read(bundle.path()).unwrap()).unwrap();
    let capped = exported["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["decoded"]["kind"] == "task_opened")
        .map(|e| &e["decoded"]["payload"]["rules"]["v2"]["query_cap"])
        .collect::<Vec<_>>();
    assert!(
        !capped.is_empty() && capped.iter().all(|c| **c == 2.0),
        "{capped:?}"
    );
    let checked = go_check(&["-vkey", &vkey, "-bundle", bundle.path().to_str().unwrap()]);
    if go_checker().is_some() {
        assert!(checked.contains("note.Open verified"), "{checked}");
    }
}

#[test]
fn the_origin_is_configurable_and_a_log_keeps_the_one_it_began_with() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--origin", "ledger.example.org/audits"]);
    let out = super::run_with_env(data.path(), &["key", "show"], &[]);
    if !crate::server::on_postgres() {
        assert!(!out.status.success(), "the server holds the directory");
    }
    server.stop();
    let vkey = verifier_key(data.path());
    assert!(vkey.starts_with("ledger.example.org/audits+"), "{vkey}");
    // Another origin asked for later is not taken: the log's identity does not change.
    let server = Server::start(data.path(), &["--origin", "other.example.org/log"]);
    server.stop();
    assert_eq!(verifier_key(data.path()), vkey);
    // By default the origin is made from the first key's fingerprint.
    let fresh = tempfile::tempdir().unwrap();
    demo(fresh.path(), Some("lake-varden-blooms"));
    let shown = run(fresh.path(), &["key", "show"]);
    let err = stderr(&shown);
    let fingerprint = err
        .lines()
        .find_map(|l| l.strip_prefix("fingerprint "))
        .unwrap();
    assert!(verifier_key(fresh.path()).starts_with(&format!("research-ledger/{fingerprint}+")));
    // An origin that cannot name a key is refused: nothing is signed under it.
    let bad = tempfile::tempdir().unwrap();
    let out = super::run_with_env(
        bad.path(),
        &["checkpoint"],
        &[("RESEARCH_LEDGER_ORIGIN", "not a name")],
    );
    assert!(!out.status.success());
}

/// A running `research-ledger witness serve`.
struct Witness {
    child: Child,
    addr: SocketAddr,
    vkey: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Witness {
    fn start(dir: &Path, logs: &[&str]) -> Witness {
        let mut command = Command::new(env!("CARGO_BIN_EXE_research-ledger"));
        command
            .args([
                "witness",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--name",
                "witness.example/w1",
                "--dir",
            ])
            .arg(dir);
        for log in logs {
            command.args(["--log", log]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap()
            .parse()
            .unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let vkey = line.trim().strip_prefix("witness ").unwrap().to_owned();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        let mut stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Witness {
            child,
            addr,
            vkey,
            log,
        }
    }

    fn stderr(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// What the witness said on stderr, once it holds `needle` (it logs a refusal as it
    /// answers, and the copy is read from a pipe), or after 20 s.
    fn stderr_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = self.stderr();
            if text.contains(needle) || Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the witness with SIGKILL, as a crash would, and waits until it is gone.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("the witness is gone");
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the server's checkpoint of at least `size` events carries a line by `name`.
fn cosigned_checkpoint(addr: SocketAddr, size: u64, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let note = checkpoint_covering(addr, size);
        if note.contains(&format!("\u{2014} {name} ")) {
            return note;
        }
        assert!(
            Instant::now() < deadline,
            "no cosignature by {name}: {note}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_witness_cosigns_a_growing_log_and_refuses_a_fork_and_a_rollback() {
    if crate::server::embedded_only(
        "a_witness_cosigns_a_growing_log_and_refuses_a_fork_and_a_rollback",
    ) {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    demo(data.path(), Some("four-day-week-eastvale"));
    let vkey = verifier_key(data.path());
    let witness_dir = tempfile::tempdir().unwrap();
    let witness = Witness::start(witness_dir.path(), &[&vkey]);
    let target = format!("http://{},{}", witness.addr, witness.vkey);
    let first = ledger_size(data.path());

    // A copy of the log as it stands, for the fork below.
    let copy = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", data.path().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(copied.success());

    let server = Server::start(data.path(), &["--witness", &target]);
    let old = cosigned_checkpoint(server.addr, first, "witness.example/w1");
    server.stop();
    demo(data.path(), Some("lake-varden-blooms"));
    let size = ledger_size(data.path());
    let server = Server::start(data.path(), &["--witness", &target]);
    let note = cosigned_checkpoint(server.addr, size, "witness.example/w1");
    let url = format!("http://{}", server.addr);

    // verify-proof --since a cosigned note, requiring the witness.
    let saved = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(saved.path(), &old).unwrap();
    let since = |witness_key: &str| {
        run(
            data.path(),
            &[
                "verify-proof",
                "--since",
                saved.path().to_str().unwrap(),
                "--public-key",
                &vkey,
                "--witness",
                witness_key,
                "--server",
                &url,
            ],
        )
    };
    let out = since(&witness.vkey);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("only grew"), "{}", stdout(&out));
    let other = "witness.example/w2+00000000+BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    assert_eq!(
        since(other).status.code(),
        Some(2),
        "a witness key that is not one"
    );
    let stranger = Witness::start(tempfile::tempdir().unwrap().path(), &[&vkey]);
    let out = since(&stranger.vkey);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a witness that never cosigned is not accepted"
    );

    // The bundle carries the cosignature; verify-bundle --witness requires it.
    let (status, bundle) = request(server.addr, "GET", "/v1/export?all=true", &[], b"");
    assert_eq!(status, 200);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bundle).unwrap();
    let path = file.path().to_str().unwrap();
    let out = run(
        data.path(),
        &["verify-bundle", path, "--witness", &witness.vkey],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("cosigned by witness witness.example/w1"));
    let out = run(
        data.path(),
        &["verify-bundle", path, "--witness", &stranger.vkey],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    go_check(&["-vkey", &vkey, "-witness", &witness.vkey, "-bundle", path]);
    go_check(&["-url", &url, "-vkey", &vkey, "-witness", &witness.vkey]);
    server.stop();

    // A rollback: the old checkpoint offered again from the size the witness holds.
    let body = format!("old {size}\n\n{old}");
    let (status, answer) = request(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &[],
        body.as_bytes(),
    );
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    let body = format!("old {first}\n\n{old}");
    let conflict = send(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &[],
        body.as_bytes(),
    );
    assert_eq!(conflict.status, 409);
    assert_eq!(String::from_utf8_lossy(&conflict.body), format!("{size}\n"));
    assert_eq!(conflict.header("content-type"), Some("text/x.tlog.size"));

    // A fork: the copy grows another history, signed by the same key.
    demo(copy.path(), Some("lake-varden-blooms"));
    demo(copy.path(), Some("gongxiang-danche-qingchuan"));
    let forked = ledger_size(copy.path());
    assert!(forked > size);
    let server = Server::start(copy.path(), &["--witness", &target]);
    let note_of_fork = checkpoint_covering(server.addr, forked);
    let said = witness.stderr_with("forked");
    assert!(
        said.contains("forked"),
        "the witness did not refuse the fork: {said}"
    );
    assert!(!note_of_fork.contains("witness.example/w1"));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !checkpoint_covering(server.addr, forked).contains("witness.example/w1"),
        "the fork was never cosigned"
    );
    server.stop();
    // The witness still holds the honest log's checkpoint.
    let (status, held) = get_text(
        witness.addr,
        &format!(
            "/{}/checkpoint",
            sha256_hex(vkey.split('+').next().unwrap())
        ),
    );
    assert_eq!(status, 200);
    assert_eq!(held.lines().nth(1), note.lines().nth(1));
}

/// A witness that holds another size than the log's checkpoint log shows it cosigned (here:
/// one it was given by hand, so the server has no cosignature of it) answers the server's push
/// 409 with its size; the server pushes again from that size and keeps the cosignature.
#[test]
fn a_witness_holding_another_size_is_pushed_again_from_it() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let (status, _) = super::server::call_tool(
        server.addr,
        "research_open_task",
        serde_json::json!({"question": "Do heat pumps cut household emissions?"}),
    );
    assert_eq!(status, 200);
    server.stop();
    let vkey = verifier_key(data.path());
    let size = ledger_size(data.path());
    let held = signed_checkpoint(data.path(), size);
    let witness_dir = tempfile::tempdir().unwrap();
    let witness = Witness::start(witness_dir.path(), &[&vkey]);
    let answer = push(&witness, 0, &held);
    assert_eq!(answer.status, 200, "{}", answer.text());

    let target = format!("http://{},{}", witness.addr, witness.vkey);
    let server = Server::start(data.path(), &["--witness", &target]);
    let (status, _) = super::server::call_tool(
        server.addr,
        "research_open_task",
        serde_json::json!({"question": "Does rail freight cut road deaths?"}),
    );
    assert_eq!(status, 200);
    let grown = size + 1;
    let note = cosigned_checkpoint(server.addr, grown, "witness.example/w1");
    assert!(
        note.lines()
            .nth(1)
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n >= grown),
        "{note}"
    );
    let log = witness.log.lock().unwrap().clone();
    // The witness answers a push from another size than it holds 409 (no line on its
    // stderr); without a push again from the size named, nothing past it would be cosigned.
    assert!(log.contains(&format!("at tree size {grown}\n")), "{log}");
    server.stop();
    let out = run(data.path(), &["verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// Pushes a checkpoint to a witness from `old`, without a proof; its status and answer.
fn push(witness: &Witness, old: u64, note: &str) -> super::server::Response {
    let body = format!("old {old}\n\n{note}");
    send(
        witness.addr,
        "POST",
        "/add-checkpoint",
        &[],
        body.as_bytes(),
    )
}

/// The checkpoint a server over `data` signs, of exactly `size` events.
fn signed_checkpoint(data: &Path, size: u64) -> String {
    let server = Server::start(data, &[]);
    let note = checkpoint_covering(server.addr, size);
    server.stop();
    assert_eq!(
        note.lines().nth(1),
        Some(size.to_string().as_str()),
        "{note}"
    );
    note
}

#[test]
fn a_witness_killed_right_after_cosigning_holds_that_checkpoint_and_refuses_other_sizes_and_forks()
{
    if crate::server::embedded_only(
        "a_witness_killed_right_after_cosigning_holds_that_checkpoint_and_refuses_other_sizes_and_forks",
    ) {
        return;
    }
    // Two histories of one log, of the same size: the same question researched again on a copy.
    let data = tempfile::tempdir().unwrap();
    demo(data.path(), Some("four-day-week-eastvale"));
    let vkey = verifier_key(data.path());
    let copy = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", data.path().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(copied.success());
    demo(data.path(), Some("lake-varden-blooms"));
    demo(copy.path(), Some("lake-varden-blooms"));
    let size = ledger_size(data.path());
    assert_eq!(ledger_size(copy.path()), size, "the copy grew as much");
    let note = signed_checkpoint(data.path(), size);
    let fork = signed_checkpoint(copy.path(), size);
    assert_ne!(note.lines().nth(2), fork.lines().nth(2), "another root");

    // Cosigned, then killed the moment it answered: no clean stop writes anything late.
    let dir = tempfile::tempdir().unwrap();
    let witness = Witness::start(dir.path(), &[&vkey]);
    let cosigned = push(&witness, 0, &note);
    witness.kill();
    assert_eq!(cosigned.status, 200, "{}", cosigned.text());
    let line = cosigned.text();
    assert!(line.starts_with("\u{2014} witness.example/w1 "), "{line}");

    let witness = Witness::start(dir.path(), &[&vkey]);
    let origin = vkey.split('+').next().unwrap();
    let (status, held) = get_text(witness.addr, &format!("/{}/checkpoint", sha256_hex(origin)));
    assert_eq!(status, 200, "{held}");
    assert_eq!(held.lines().nth(1), Some(size.to_string().as_str()));
    assert!(held.contains(line.trim_end()), "{held}");
    for old in [0, size - 1] {
        let conflict = push(&witness, old, &note);
        assert_eq!(conflict.status, 409, "old {old}: {}", conflict.text());
        assert_eq!(conflict.text(), format!("{size}\n"));
        assert_eq!(conflict.header("content-type"), Some("text/x.tlog.size"));
    }
    let forked = push(&witness, size, &fork);
    assert_eq!(forked.status, 422, "{}", forked.text());
    let said = witness.stderr_with("forked");
    assert!(said.contains("forked"), "{said}");
    // The checkpoint it holds is the one it cosigned: offered again, it is cosigned again.
    assert_eq!(push(&witness, size, &note).status, 200);
}
