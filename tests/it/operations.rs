//! What an operator relies on: metrics, the request log, the configuration file, and a
//! shutdown that leaves a checkpoint.

use std::path::Path;

use serde_json::{Value, json};

use crate::server::{Server, call_tool, get_json, request};

fn call(server: &Server, name: &str, arguments: Value) -> (u16, Value) {
    call_tool(server.addr, name, arguments)
}

fn open_task(server: &Server) -> String {
    let (status, out) = call(
        server,
        "research_open_task",
        json!({"question": "Does the Greenland ice sheet lose mass?"}),
    );
    assert_eq!(status, 200, "{out}");
    out["result"]["task_id"].as_str().unwrap().to_owned()
}

fn evidence(task_id: &str, summary: &str) -> Value {
    json!({
        "task_id": task_id,
        "source": "nasa.gov",
        "publish_date": "2023-05-01",
        "source_type": "government",
        "content": "GRACE measurements show the ice sheet lost about 270 gigatonnes a year.",
        "summary": summary,
        "stance": "supports",
    })
}

#[test]
fn metrics_count_appends_and_tool_calls_by_outcome() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    open_task(&server);
    let (status, _) = call(&server, "research_open_task", json!({"question": ""}));
    assert_eq!(status, 400);
    let (status, body) = request(server.addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    for line in [
        "research_ledger_tool_calls_total{tool=\"research_open_task\",outcome=\"ok\"} 1",
        "research_ledger_tool_calls_total{tool=\"research_open_task\",outcome=\"invalid_argument\"} 1",
        "research_ledger_appends_total 1",
        "research_ledger_append_duration_seconds_count 1",
        "# TYPE research_ledger_append_duration_seconds histogram",
        "research_ledger_projection_lag_events",
        "research_ledger_verification_failures_total 0",
        "# TYPE research_ledger_conflicts_total counter",
        "# TYPE research_ledger_conclusions_total counter",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    // The one append was made durable by a sync the counter saw.
    let syncs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("research_ledger_storage_syncs_total "))
        .unwrap_or_else(|| panic!("no storage syncs in\n{text}"))
        .parse()
        .unwrap();
    assert!(syncs >= 1, "{text}");
    server.stop();
}

/// Prometheus's own checker (`promtool check metrics`, Debian's `prometheus`) reads what
/// `/metrics` serves after a task ran to its verdict: every family parses, and its lints (names,
/// units, `_total` on counters, help texts) pass. Then what promtool does not judge: each
/// histogram's buckets only grow and end at its count, and the counters say what was done.
#[test]
fn prometheus_reads_the_metrics_of_a_task_run_to_its_verdict() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let task = open_task(&server);
    let mut calls = 1;
    let mut called = |name: &str, arguments: Value| {
        calls += 1;
        let (status, out) = call(&server, name, arguments);
        assert_eq!(status, 200, "{name}: {out}");
    };
    called(
        "retrieval_add_evidence",
        evidence(&task, "The ice sheet loses mass."),
    );
    let mut opposing = evidence(&task, "The ice sheet gains mass.");
    opposing["source"] = json!("blog.example.com");
    opposing["source_type"] = json!("blog");
    opposing["stance"] = json!("opposes");
    opposing["content"] = json!("A blog says the ice is growing.");
    called("retrieval_add_evidence", opposing);
    called(
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [
            {"evidence_id": "ev-1", "adopt": true}, {"evidence_id": "ev-2", "adopt": true}]}),
    );
    for tool in [
        "evaluation_conflict_resolution",
        "evaluation_build_decision_matrix",
        "evaluation_generate_conclusion",
    ] {
        called(tool, json!({"task_id": task}));
    }
    let (status, _) = call(&server, "no\"such\\tool\n", json!({}));
    assert_eq!(status, 404);
    calls += 1;

    let (status, body) = request(server.addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    server.stop();

    if let Some(Err(said)) = promtool_check(&text) {
        panic!("promtool refused the metrics: {said}\n{text}");
    }

    let samples: Vec<(&str, f64)> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name, value.parse::<f64>().unwrap())
        })
        .collect();
    let value = |name: &str| {
        samples
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .1
    };
    let sum = |prefix: &str| -> f64 {
        samples
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    };
    let buckets: Vec<(&str, f64)> = samples
        .iter()
        .filter(|(n, _)| n.starts_with("research_ledger_append_duration_seconds_bucket{"))
        .copied()
        .collect();
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{text}");
    let (last, in_all) = *buckets.last().unwrap();
    assert!(last.ends_with("{le=\"+Inf\"}"), "{last}");
    let appends = value("research_ledger_appends_total");
    assert_eq!(in_all, appends);
    assert_eq!(
        value("research_ledger_append_duration_seconds_count"),
        appends
    );
    // One append for each successful call: the task, two items, the screening, the conflicts,
    // the matrix and the verdict.
    assert_eq!(appends, 7.0, "{text}");
    assert_eq!(
        sum("research_ledger_tool_calls_total{"),
        f64::from(calls),
        "{text}"
    );
    assert_eq!(
        value("research_ledger_tool_calls_total{tool=\"unknown\",outcome=\"not_found\"}"),
        1.0
    );
    assert_eq!(
        value("research_ledger_conflicts_total{tier=\"authority\"}"),
        1.0
    );
    assert_eq!(sum("research_ledger_conclusions_total{"), 1.0, "{text}");
    assert_eq!(
        value("research_ledger_size_events"),
        value("research_ledger_events_appended_total")
    );
}

/// `promtool check metrics` on `text`: `None` when promtool is not installed and not required
/// (`RESEARCH_LEDGER_REQUIRE_PROMTOOL`, set by the test script once it installed it).
fn promtool_check(text: &str) -> Option<Result<(), String>> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            assert!(
                std::env::var_os("RESEARCH_LEDGER_REQUIRE_PROMTOOL").is_none(),
                "promtool (Debian: prometheus) is required: {e}"
            );
            eprintln!("promtool is not installed: the metrics were not checked with it");
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Some(if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

#[test]
fn json_logs_have_one_line_per_request_with_its_duration() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &["--log-format", "json"]);
    let (status, _) = get_json(server.addr, "/v1/tools/list");
    assert_eq!(status, 200);
    let (status, _) = get_json(server.addr, "/v1/sessions/no-such-task");
    assert_eq!(status, 404);
    // A 2026-07-28 MCP call: the MCP SDK serves it with a service of its own, whose start and
    // end it narrates at info; the request is still logged once, by its own line.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "research_summarize_state", "arguments": {"task_id": "no-such-task"},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "logs", "version": "1"},
    }}});
    let (status, body) = request(
        server.addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "research_summarize_state"),
        ],
        call.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (exit, stderr) = server.stop_with_stderr();
    assert!(exit.success());
    let sdk_info: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|l| {
                l["level"] == "INFO" && l["target"].as_str().is_some_and(|t| t.starts_with("rmcp"))
            })
        })
        .collect();
    assert!(sdk_info.is_empty(), "{sdk_info:#?}");
    let lines: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "request")
        .collect();
    let list = lines
        .iter()
        .find(|l| l["path"] == "/v1/tools/list")
        .unwrap_or_else(|| panic!("no request line for /v1/tools/list in\n{stderr}"));
    assert_eq!(list["method"], "GET");
    assert_eq!(list["status"], 200);
    assert!(list["duration_ms"].as_f64().unwrap() >= 0.0);
    assert!(list["timestamp"].is_string() && list["level"] == "INFO");
    assert!(
        lines
            .iter()
            .any(|l| l["path"] == "/v1/sessions/no-such-task" && l["status"] == 404),
        "{stderr}"
    );
    assert_eq!(
        lines.iter().filter(|l| l["path"] == "/mcp").count(),
        1,
        "{stderr}"
    );
}

/// The allocator hands memory back and takes it again; with transparent huge pages each fault
/// would zero 2 MiB, so the server turns them off for itself.
#[cfg(target_os = "linux")]
#[test]
fn the_server_runs_without_transparent_huge_pages() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    server.stop();
    // Kernels before 6.0 do not report it.
    let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) else {
        eprintln!("this kernel does not report THP_enabled; nothing to check");
        return;
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}

#[test]
fn a_graceful_shutdown_signs_a_checkpoint_of_everything_acknowledged() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let task = open_task(&server);
    let (status, out) = call(&server, "retrieval_add_evidence", evidence(&task, "Loss."));
    assert_eq!(status, 200, "{out}");
    let size = get_json(server.addr, "/health").1["ledger"]["size"]
        .as_u64()
        .unwrap();
    assert!(server.stop().success());

    let server = Server::start(data.path(), &[]);
    let (_, health) = get_json(server.addr, "/health");
    assert_eq!(health["ledger"]["size"], size);
    assert_eq!(
        health["ledger"]["last_checkpoint"]["tree_size"], size,
        "{health}"
    );
    server.stop();
    assert!(crate::run(data.path(), &["verify"]).status.success());
}

#[test]
fn the_configuration_file_sets_limits_and_flags_and_refuses_unknown_keys() {
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("research-ledger.toml");
    std::fs::write(
        &config,
        "[serve]\nrequests_in_flight_max = 64\n\n[limits.research]\nsummary_chars_max = 10\n",
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    let server = Server::start(data.path(), &["--config", config_arg]);
    let task = open_task(&server);
    let (status, out) = call(
        &server,
        "retrieval_add_evidence",
        evidence(&task, "A summary longer than ten characters."),
    );
    assert_eq!(status, 422, "{out}");
    assert_eq!(out["error"], "limit_exceeded", "{out}");
    let (status, out) = call(&server, "retrieval_add_evidence", evidence(&task, "Short."));
    assert_eq!(status, 200, "{out}");
    server.stop();

    std::fs::write(&config, "[serve]\nrequests_in_flight = 64\n").unwrap();
    let out = crate::run(data.path(), &["--config", config_arg, "verify"]);
    assert_eq!(out.status.code(), Some(2));
    let err = crate::stderr(&out);
    assert!(err.contains("requests_in_flight"), "{err}");
}

/// A reader that stops reading (`research-ledger token list | head -1`) ends the command
/// quietly, with the status of a process stopped by SIGPIPE, not with a panic's message.
#[test]
fn output_to_a_reader_that_went_away_ends_the_command_quietly() {
    let data = tempfile::tempdir().unwrap();
    for name in ["first", "second"] {
        let made = crate::run(data.path(), &["token", "add", name, "--role", "auditor"]);
        assert!(made.status.success(), "{}", crate::stderr(&made));
    }
    let listed = |close_early: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_research-ledger"));
        crate::server::with_storage(&mut command, data.path());
        let mut child = command
            .arg("--data-dir")
            .arg(data.path())
            .args(["token", "list"])
            .env_remove("RESEARCH_LEDGER_SERVER")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The read end closed before the command writes a byte: its first write fails.
        if close_early {
            drop(child.stdout.take());
        }
        child.wait_with_output().unwrap()
    };
    let whole = listed(false);
    assert!(whole.status.success(), "{}", crate::stderr(&whole));
    assert!(crate::stdout(&whole).contains("second"));
    let cut = listed(true);
    assert_eq!(cut.status.code(), Some(141), "{}", crate::stderr(&cut));
    assert_eq!(
        crate::stderr(&cut),
        "",
        "the command said something on stderr"
    );
}

/// Text logs written to a file or a pipe (a service manager's journal, a log file) are plain
/// text: no terminal colour codes, and a request's duration written to the microsecond.
#[test]
fn text_logs_to_a_pipe_are_plain_lines() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), &[]);
    let (status, _) = get_json(server.addr, "/health");
    assert_eq!(status, 200);
    let (exit, stderr) = server.stop_with_stderr();
    assert!(exit.success());
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in the log: {stderr:?}"
    );
    let line = stderr
        .lines()
        .find(|l| l.contains("request") && l.contains("path=/health"))
        .unwrap_or_else(|| panic!("no request line: {stderr}"));
    let duration = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("duration_ms="))
        .unwrap_or_else(|| panic!("no duration: {line}"));
    let decimals = duration.split('.').nth(1).map_or(0, str::len);
    assert!(
        duration.parse::<f64>().is_ok() && decimals <= 3,
        "duration {duration} in {line}"
    );
}

/// A setting the server cannot work with is refused before anything is opened, naming it:
/// every limit flag of `serve` at 0, and limits in the file its parts cannot take (a snapshot
/// cache below the least its database takes panicked the server; a subscription buffer past
/// what can be allocated at once ran it out of memory).
#[test]
fn settings_the_server_cannot_work_with_are_refused_before_it_opens_anything() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("data");
    let help = crate::run(&dir, &["serve", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let flags: Vec<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--") && (w.ends_with("-max") || w.ends_with("-max,")))
        .map(|w| w.trim_end_matches(','))
        .collect();
    assert!(flags.len() >= 19, "{flags:?}");
    for flag in flags {
        let out = crate::run_ending_within(
            &dir,
            &["serve", "--listen", "127.0.0.1:0", flag, "0"],
            &[],
            30,
        );
        let err = crate::stderr(&out);
        let name = flag.trim_start_matches("--").replace('-', "_");
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.contains(&format!("{name} must be at least 1")),
            "{flag}: {err}"
        );
        assert!(!dir.exists(), "{flag} opened the data directory");
    }
    let config = data.path().join("research-ledger.toml");
    let config_arg = config.to_str().unwrap();
    for (file, says) in [
        (
            "[limits.projections]\nsnapshot_cache_bytes_max = 0\n",
            "limits.projections.snapshot_cache_bytes_max = 0: at least 256",
        ),
        (
            "[limits.ledger]\nsubscription_buffer_events = 1000000000000\n",
            "limits.ledger.subscription_buffer_events = 1000000000000: at most 1048576",
        ),
        (
            "[limits.corpus]\nwriter_memory_bytes_max = 1000\n",
            "limits.corpus.writer_memory_bytes_max = 1000: at least 15000000",
        ),
    ] {
        std::fs::write(&config, file).unwrap();
        let out = crate::run_ending_within(
            &dir,
            &["--config", config_arg, "serve", "--listen", "127.0.0.1:0"],
            &[],
            30,
        );
        let err = crate::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{file}: {err}");
        assert!(err.contains(says), "{file}: {err}");
        assert!(!dir.exists(), "{file} opened the data directory");
    }
}

/// A closed standard error — a supervisor that stopped reading the logs — loses the log lines
/// and nothing else. With every debug line logged to it, the server opens, answers and stops
/// when asked; before, the first line that could not be written panicked the thread that
/// logged it, midway through opening the ledger, and the server hung. A command's own error
/// still ends it with status 2, not a panic's 101.
#[test]
fn a_closed_standard_error_loses_the_log_lines_and_nothing_else() {
    use std::io::BufRead as _;
    let data = tempfile::tempdir().unwrap();
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let serve = ["serve", "--listen", "127.0.0.1:0"];
    let mut child = crate::command(data.path(), &serve, &[("RESEARCH_LEDGER_LOG", "debug")])
        .stdout(std::process::Stdio::piped())
        .stderr(closed())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (line_tx, line_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = line_tx.send(line);
    });
    let line = match line_rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            panic!("the server never said where it listens");
        }
    };
    let Some(addr) = line.trim().strip_prefix("listening on http://") else {
        let status = child.wait().unwrap();
        panic!("the server stopped ({status}) instead of listening: {line:?}");
    };
    let (status, health) = get_json(addr.parse().unwrap(), "/health");
    assert_eq!(status, 200, "{health}");
    crate::server::terminate(&child);
    let Some(status) = crate::exit_within(&mut child, 60) else {
        let _ = child.kill();
        panic!("the server did not stop when asked");
    };
    assert!(status.success(), "{status}");

    let status = crate::command(data.path(), &["replay", "no-such-task"], &[])
        .stderr(closed())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}

/// Settings that would make a command quietly do something else are refused before it runs,
/// naming them: a log filter that cannot be read (the default filter was used instead, so
/// asking for debug logs with a typo gave none), and a log origin that cannot name a key (the
/// server opened and served, but could never sign a checkpoint). An empty origin is no origin.
#[test]
fn settings_that_would_quietly_do_something_else_are_refused() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("data");
    let serve = ["serve", "--listen", "127.0.0.1:0"];
    for (env, says) in [
        (
            ("RESEARCH_LEDGER_LOG", "research_ledger=debug,sled=["),
            "RESEARCH_LEDGER_LOG=\"research_ledger=debug,sled=[\" is not a log filter",
        ),
        (
            ("RESEARCH_LEDGER_ORIGIN", "research ledger"),
            "\"research ledger\" is not a key name",
        ),
        (
            ("RESEARCH_LEDGER_ORIGIN", "example.org/log+1"),
            "\"example.org/log+1\" is not a key name",
        ),
    ] {
        for args in [&serve[..], &["verify"][..]] {
            let out = crate::run_ending_within(&dir, args, &[env], 30);
            let err = crate::stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{env:?} {args:?}: {err}");
            assert!(err.contains(says), "{env:?} {args:?}: {err}");
            assert!(!dir.exists(), "{env:?} {args:?} opened the data directory");
        }
    }
    let out = crate::run_ending_within(&dir, &["serve", "--origin", "a b"], &[], 30);
    assert_eq!(out.status.code(), Some(2));
    assert!(crate::stderr(&out).contains("is not a key name"));
    // An empty origin is none: the ledger names itself, and signs.
    let server = Server::start_with(&dir, &[], &[("RESEARCH_LEDGER_ORIGIN", "")]);
    server.stop();
    let out = crate::run(&dir, &["checkpoint"]);
    assert!(out.status.success(), "{}", crate::stderr(&out));
    assert!(crate::stdout(&out).contains("research-ledger/"));
}

/// Flags win over environment variables, which win over the file; the file is `--config`, else
/// `$RESEARCH_LEDGER_CONFIG`, else `research-ledger.toml` in the working directory. Each case
/// makes the place that should win hold a value `serve` refuses, naming its key, so a lower
/// place winning instead is seen: the server would start, or name another key.
#[test]
fn settings_come_from_flags_then_the_environment_then_the_file() {
    let folder = tempfile::tempdir().unwrap();
    let dir = folder.path().join("data");
    let write = |name: &str, text: &str| {
        let path = folder.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let good = write("good.toml", "[serve]\nrequests_in_flight_max = 64\n");
    let bad = write("bad.toml", "[serve]\nrequests_in_flight_max = 0\n");
    let other = write("other.toml", "[serve]\ngraphql_page_items_max = 0\n");
    write("research-ledger.toml", "[serve]\nmcp_sessions_max = 0\n");
    let refused_in = |key: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut command = crate::command(&dir, args, env);
        command
            .current_dir(folder.path())
            .env_remove("RESEARCH_LEDGER_CONFIG")
            .env_remove("RESEARCH_LEDGER_REQUESTS_IN_FLIGHT_MAX")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        if crate::exit_within(&mut child, 30).is_none() {
            let _ = child.kill();
            panic!("{args:?} {env:?} started: {key} was not taken from where it should be");
        }
        let out = child.wait_with_output().unwrap();
        let err = crate::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(
            err.contains(&format!("{key} must be at least 1")),
            "{args:?} {env:?}: {err}"
        );
        assert!(!dir.exists(), "{args:?} {env:?} opened the data directory");
    };
    let config = |path: &str| vec!["--config".to_owned(), path.to_owned()];
    let with = |before: &[String], after: &[&'static str]| -> Vec<String> {
        let mut args = before.to_vec();
        args.extend(["serve", "--listen", "127.0.0.1:0"].map(str::to_owned));
        args.extend(after.iter().map(|a| (*a).to_owned()));
        args
    };
    let run = |key: &str, args: Vec<String>, env: &[(&str, &str)]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused_in(key, &args, env);
    };
    // The environment over the file, a flag over the environment.
    let env_zero = [("RESEARCH_LEDGER_REQUESTS_IN_FLIGHT_MAX", "0")];
    let env_fine = [("RESEARCH_LEDGER_REQUESTS_IN_FLIGHT_MAX", "64")];
    run(
        "requests_in_flight_max",
        with(&config(&good), &[]),
        &env_zero,
    );
    run(
        "requests_in_flight_max",
        with(&config(&good), &["--requests-in-flight-max", "0"]),
        &env_fine,
    );
    // Which file: `--config` over `$RESEARCH_LEDGER_CONFIG` over the working directory's.
    run(
        "requests_in_flight_max",
        with(&config(&bad), &[]),
        &[("RESEARCH_LEDGER_CONFIG", &other)],
    );
    run(
        "graphql_page_items_max",
        with(&[], &[]),
        &[("RESEARCH_LEDGER_CONFIG", &other)],
    );
    run("mcp_sessions_max", with(&[], &[]), &[]);
}

/// A node whose signing key is not the one its checkpoint log names signs nothing and says
/// so — `/health`'s `signing`, the `research_ledger_signing_key_usable` gauge, a refused
/// explicit checkpoint — while writes go on; given the key back, it signs again.
///
/// On a shared database `serve` refuses such a node at start instead
/// (`nodes::a_node_with_another_signing_key_is_refused`); a node whose key another node
/// rotated while it ran is the ledger's own test of the case there.
#[test]
fn a_node_without_the_key_its_log_names_says_so_and_writes_on() {
    if crate::server::embedded_only("a_node_without_the_key_its_log_names_says_so_and_writes_on") {
        return;
    }
    let folder = tempfile::tempdir().unwrap();
    let (a, b) = (folder.path().join("a"), folder.path().join("b"));
    for data in [&a, &b] {
        let out = crate::run(data, &["checkpoint"]);
        assert!(out.status.success(), "{}", crate::stderr(&out));
    }
    let key = |data: &Path| data.join("ledger/keys/signing.key");
    let gauge = |server: &Server| {
        let (status, body) = request(server.addr, "GET", "/metrics", &[], b"");
        assert_eq!(status, 200);
        let text = String::from_utf8(body).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("research_ledger_signing_key_usable "))
            .unwrap_or_else(|| panic!("no signing gauge in\n{text}"))
            .to_owned()
    };
    let health = |server: &Server| {
        let (status, health) = get_json(server.addr, "/health");
        assert_eq!(status, 200, "{health}");
        health
    };

    let server = Server::start(&a, &[]);
    let told = health(&server);
    let named = told["ledger"]["last_checkpoint"]["key_fingerprint"].clone();
    assert!(named.is_string(), "{told}");
    assert_eq!(told["signing"]["key"], named, "{told}");
    assert_eq!(told["signing"]["reason"], Value::Null, "{told}");
    assert_eq!(gauge(&server), "1");
    server.stop();

    let own = std::fs::read(key(&a)).unwrap();
    std::fs::copy(key(&b), key(&a)).unwrap();
    let server = Server::start(&a, &[]);
    let told = health(&server);
    assert_eq!(told["signing"]["key"], Value::Null, "{told}");
    let reason = told["signing"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        reason.contains("is not the key the checkpoint log names"),
        "{told}"
    );
    assert_eq!(told["status"], "ok", "{told}");
    assert_eq!(gauge(&server), "0");
    open_task(&server);
    let (status, body) = request(server.addr, "POST", "/v1/checkpoints", &[], b"");
    let body = String::from_utf8_lossy(&body);
    assert!(status >= 400, "a checkpoint was signed: {status} {body}");
    assert!(
        body.contains("is not the key the checkpoint log names"),
        "{status} {body}"
    );
    server.stop();

    std::fs::write(key(&a), own).unwrap();
    let server = Server::start(&a, &[]);
    assert_eq!(health(&server)["signing"]["key"], named);
    assert_eq!(gauge(&server), "1");
    let (status, body) = request(server.addr, "POST", "/v1/checkpoints", &[], b"");
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    server.stop();
    let out = crate::run(&a, &["verify"]);
    assert!(out.status.success(), "{}", crate::stderr(&out));
}
