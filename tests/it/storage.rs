//! `--storage-url`: the ledger and the content store in a PostgreSQL database rather than the
//! data directory, so a second data directory over the same database reads the same ledger and
//! the same evidence texts. Run whenever PostgreSQL is installed, whatever backend the rest of
//! the suite is on; without it these tests say so and pass, unless
//! `RESEARCH_LEDGER_REQUIRE_POSTGRES` is set (as `scripts/test` sets it).

use std::path::Path;

use serde_json::Value;
use test_support::postgres::database_or_skip;

use super::{run_with_env, stderr, stdout};

fn with_url(data: &Path, url: &str, args: &[&str]) -> std::process::Output {
    run_with_env(data, args, &[("RESEARCH_LEDGER_STORAGE_URL", url)])
}

fn files_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            if e.path().is_dir() {
                files_under(&e.path())
            } else {
                1
            }
        })
        .sum()
}

#[test]
fn a_second_data_directory_over_the_same_database_reads_the_ledger_and_the_content() {
    let Some((cluster, url)) = database_or_skip("a_second_data_directory_over_the_same_database")
    else {
        return;
    };
    let first = tempfile::tempdir().unwrap();
    let out = with_url(
        first.path(),
        &url,
        &["demo", "--json", "--question", "lake-varden-blooms"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = report["tasks"][0]["task_id"].as_str().unwrap().to_owned();

    // Nothing of the ledger or the content is in the data directory: the key is.
    assert!(!first.path().join("ledger/log").exists());
    assert_eq!(files_under(&first.path().join("blobs")), 0);
    assert!(first.path().join("ledger/keys/signing.key").exists());
    let events: u64 = cluster
        .psql_url(&url, "SELECT count(*) FROM ledger_events")
        .unwrap()
        .parse()
        .unwrap();
    let blobs: u64 = cluster
        .psql_url(&url, "SELECT count(*) FROM content_blobs")
        .unwrap()
        .parse()
        .unwrap();
    assert!(events > 0 && blobs > 0, "{events} events, {blobs} blobs");

    // Another data directory, empty, over the same database.
    let second = tempfile::tempdir().unwrap();
    let out = with_url(second.path(), &url, &["verify", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let verified: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verified["size"], events);
    let out = with_url(second.path(), &url, &["replay", &task, "--check"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    // With the key (per node, in the data directory), the second exports every text.
    std::fs::create_dir_all(second.path().join("ledger/keys")).unwrap();
    std::fs::copy(
        first.path().join("ledger/keys/signing.key"),
        second.path().join("ledger/keys/signing.key"),
    )
    .unwrap();
    let bundle = second.path().join("all.json");
    let out = with_url(
        second.path(),
        &url,
        &["export", "--all", "--out", bundle.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let exported: Value = serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert_eq!(
        exported["content"].as_array().map(Vec::len),
        Some(blobs as usize),
        "every text, read from the database"
    );

    // Without the URL, the second directory holds no ledger at all.
    let out = super::run(second.path(), &["verify", "--json"]);
    let alone: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_ne!(alone["size"], events, "{}", stderr(&out));
}

#[test]
fn a_changed_text_in_the_database_is_never_exported_and_repair_refuses_the_url() {
    let Some((cluster, url)) = database_or_skip("a_changed_text_in_the_database") else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let out = with_url(
        data.path(),
        &url,
        &["demo", "--json", "--question", "four-day-week-eastvale"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task = report["tasks"][0]["task_id"].as_str().unwrap().to_owned();
    let bundle = data.path().join("all.json");
    let export = ["export", "--all", "--out", bundle.to_str().unwrap()];
    let out = with_url(data.path(), &url, &export);
    assert!(out.status.success(), "{}", stderr(&out));
    cluster
        .psql_url(
            &url,
            "UPDATE content_blobs SET bytes = bytes || 'and more'::bytea",
        )
        .unwrap();
    let out = with_url(data.path(), &url, &export);
    assert!(!out.status.success(), "an altered text was exported");
    assert!(stderr(&out).contains("damaged"), "{}", stderr(&out));
    // The task's own export says the same.
    let out = with_url(
        data.path(),
        &url,
        &["export", &task, "--out", bundle.to_str().unwrap()],
    );
    assert!(stderr(&out).contains("damaged"), "{}", stderr(&out));

    for command in [&["repair"][..], &["bench", "search"][..]] {
        let out = with_url(data.path(), &url, command);
        assert_eq!(out.status.code(), Some(2), "{command:?}");
        assert!(stderr(&out).contains("--storage-url"), "{}", stderr(&out));
    }
}

#[test]
fn a_token_made_beside_one_data_directory_is_honoured_and_revoked_on_another() {
    let Some((cluster, url)) = database_or_skip("a_token_made_beside_one_data_directory") else {
        return;
    };
    let first = tempfile::tempdir().unwrap();
    let out = with_url(
        first.path(),
        &url,
        &["token", "add", "alice", "--role", "writer"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    assert!(!first.path().join("tokens.json").exists());
    let kept = cluster
        .psql_url(
            &url,
            "SELECT body FROM shared_documents WHERE name = 'tokens'",
        )
        .unwrap();
    let hash = blake3::hash(token.as_bytes()).to_hex().to_string();
    assert!(kept.contains(&hash) && !kept.contains(&token), "{kept}");

    let second = tempfile::tempdir().unwrap();
    let server = crate::server::Server::start_with(
        second.path(),
        &[],
        &[("RESEARCH_LEDGER_STORAGE_URL", &url)],
    );
    let task = crate::auth::open_task(server.addr, &token, "Does the shared token work?");
    assert!(!task.is_empty());
    let auth = crate::auth::bearer(&token);
    let (status, _) = crate::server::request(
        server.addr,
        "GET",
        "/metrics",
        &[("Authorization", &auth)],
        b"",
    );
    assert_ne!(status, 401);

    // Revoked beside the first directory: refused by the server of the second at once.
    let out = with_url(first.path(), &url, &["token", "revoke", "alice"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (status, _) = crate::server::request(
        server.addr,
        "GET",
        "/metrics",
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(status, 401);
    // And the list beside the second says so too.
    let out = with_url(second.path(), &url, &["token", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!listed["tokens"][0]["revoked_at"].is_null(), "{listed}");
    server.stop();
}

/// A run of the binary on `data` with exactly the storage URL given (none: the data
/// directory's own storage), whatever backend the rest of the suite is on.
fn bare(data: &Path, url: Option<&str>, args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_research-ledger"));
    command
        .env_remove("RESEARCH_LEDGER_STORAGE_URL")
        .env_remove("RESEARCH_LEDGER_DATA_DIR")
        .env_remove("RESEARCH_LEDGER_SERVER")
        .env_remove("RESEARCH_LEDGER_TOKEN");
    if let Some(url) = url {
        command.env("RESEARCH_LEDGER_STORAGE_URL", url);
    }
    command
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}{}", stdout(out), stderr(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// The bundle of the whole ledger at `data` (over `url`), checked offline against `key`.
fn whole_bundle(data: &Path, url: Option<&str>, key: &str) -> Value {
    let file = data.join("whole.json");
    let out = bare(
        data,
        url,
        &["export", "--all", "--out", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let checked = bare(
        data,
        None,
        &["verify-bundle", file.to_str().unwrap(), "--public-key", key],
    );
    assert!(
        checked.status.success(),
        "{}{}",
        stdout(&checked),
        stderr(&checked)
    );
    let bundle: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    std::fs::remove_file(&file).unwrap();
    bundle
}

#[test]
fn migrate_moves_a_whole_ledger_into_a_database_and_back_and_it_still_verifies() {
    let Some((cluster, url)) = database_or_skip("migrate_moves_a_whole_ledger") else {
        return;
    };
    let first = tempfile::tempdir().unwrap();
    let d1 = first.path();
    let out = bare(
        d1,
        None,
        &["demo", "--json", "--question", "lake-varden-blooms"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = bare(d1, None, &["token", "add", "alice", "--role", "writer"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::create_dir_all(d1.join("contracts/tools")).unwrap();
    let contract = crate::external::kb_contract("kb_search", "http://127.0.0.1:9/s", 1000);
    std::fs::write(d1.join("contracts/tools/kb_search.yaml"), &contract).unwrap();
    let job = run_one_job(d1);
    let shown = bare(d1, None, &["key", "show"]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let key = super::first_line(&stdout(&shown));
    let before = whole_bundle(d1, None, &key);
    let events = before["events"].as_array().unwrap().len();

    // Into the database, the key staying in the data directory.
    let to_db = |node: &Path| {
        bare(
            node,
            None,
            &["migrate", "--from", d1.to_str().unwrap(), "--to", &url],
        )
    };
    let out = to_db(d1);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.contains(&format!("{events} events")), "{text}");
    assert!(!text.contains("MISMATCH"), "{text}");
    // Into a database that holds something already: refused, nothing written.
    let again = to_db(d1);
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("is not empty"),
        "{}",
        stderr(&again)
    );
    let size = cluster
        .psql_url(&url, "SELECT count(*) FROM ledger_events")
        .unwrap();
    assert_eq!(size, events.to_string());

    // Over the database: it verifies, exports the same ledger under the same signed
    // checkpoint, and keeps the tokens, the contract and the corpus.
    let verified = json_of(&bare(d1, Some(&url), &["verify", "--json"]));
    assert_eq!(verified["size"], events);
    let moved = whole_bundle(d1, Some(&url), &key);
    for field in [
        "events",
        "checkpoint",
        "checkpoint_log",
        "idempotency",
        "content",
    ] {
        assert_eq!(moved[field], before[field], "{field}");
    }
    let tokens = json_of(&bare(d1, Some(&url), &["token", "list", "--json"]));
    assert_eq!(tokens["tokens"][0]["name"], "alice", "{tokens}");
    let stored = cluster
        .psql_url(
            &url,
            "SELECT body FROM shared_documents WHERE name = 'contracts'",
        )
        .unwrap();
    assert!(stored.contains("kb_search"), "{stored}");
    let docs = cluster
        .psql_url(&url, "SELECT count(*) FROM corpus_documents")
        .unwrap();
    assert_eq!(docs, "47");
    let jobs = cluster
        .psql_url(&url, "SELECT job_id FROM pipeline_jobs")
        .unwrap();
    assert_eq!(jobs, job);

    // And back into a new data directory, which then stands alone.
    let second = tempfile::tempdir().unwrap();
    let d2 = second.path().join("back");
    let back = bare(
        d1,
        None,
        &["migrate", "--from", &url, "--to", d2.to_str().unwrap()],
    );
    let text_back = stdout(&back);
    assert!(back.status.success(), "{text_back}{}", stderr(&back));
    assert!(!text_back.contains("MISMATCH"), "{text_back}");
    let state = |text: &str| {
        text.lines()
            .find(|l| l.contains("index state"))
            .map(str::to_owned)
    };
    assert_eq!(state(&text_back), state(&text));
    let verified = json_of(&bare(&d2, None, &["verify", "--json"]));
    assert_eq!(verified["size"], events);
    assert_eq!(
        whole_bundle(&d2, None, &key)["checkpoint"],
        before["checkpoint"]
    );
    assert_eq!(
        std::fs::read_to_string(d2.join("contracts/tools/kb_search.yaml")).unwrap(),
        contract
    );
    let tokens = json_of(&bare(&d2, None, &["token", "list", "--json"]));
    assert_eq!(tokens["tokens"][0]["name"], "alice");
    assert!(d2.join(format!("jobs/{job}.json")).exists());
    // A data directory that holds anything is refused as a destination.
    let refused = bare(
        d1,
        None,
        &["migrate", "--from", &url, "--to", d2.to_str().unwrap()],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("is not empty"),
        "{}",
        stderr(&refused)
    );
}

/// Runs one pipeline job to its stop on the data directory's own storage; its id.
fn run_one_job(data: &Path) -> String {
    let mut options = service::ServiceOptions::new(data);
    options.ledger.checkpoint_interval = None;
    let service = service::Service::open(options).unwrap();
    let caller = service::Caller::new("alice");
    let call = |name: &str, arguments: Value| {
        service
            .call_tool(&caller, name, &arguments)
            .unwrap()
            .structured
    };
    let opened = call(
        "research_open_task",
        serde_json::json!({"question": "Did the lake blooms grow?", "research_date": "2025-06-30"}),
    );
    let started = call(
        "research_run_pipeline",
        serde_json::json!({"task_id": opened["task_id"]}),
    );
    let job = started["job_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while call("research_job_status", serde_json::json!({"job_id": job}))["status"] == "running" {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    service.shutdown();
    job
}

fn write_documents(dir: &Path) {
    for (name, id, source, body) in [
        (
            "silt.md",
            "silt-1",
            "Port Authority",
            "The harbour silt grows each winter as the river floods.",
        ),
        (
            "reef.md",
            "reef-2",
            "Reef Institute",
            "Divers found the reef recovering where the harbour silt thinned.",
        ),
    ] {
        std::fs::write(
            dir.join(name),
            format!("---\nid: {id}\ntitle: {id}\nsource: {source}\nsource_type: government\npublish_date: 2024-03-01\n---\n{body}\n"),
        )
        .unwrap();
    }
}

#[test]
fn two_servers_on_one_database_serve_the_same_contracts_and_corpus() {
    let Some((_, url)) = database_or_skip("two_servers_on_one_database") else {
        return;
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env = [("RESEARCH_LEDGER_STORAGE_URL", url.as_str())];
    let a = crate::server::Server::start_with(a_dir.path(), &[], &env);
    crate::nodes::copy_key(a_dir.path(), b_dir.path());
    let b = crate::server::Server::start_with(b_dir.path(), &[], &env);

    // A contract registered through one server is listed by the other.
    let contract = crate::external::kb_contract("kb_search", "http://127.0.0.1:9/s", 1000);
    let (status, body) = crate::server::request(
        a.addr,
        "POST",
        "/v1/tools/register",
        &[("Content-Type", "application/json")],
        crate::external::register_body(&contract).as_bytes(),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let listed = |addr| {
        let (_, list) = crate::server::get_json(addr, "/v1/tools/list");
        list.to_string().contains("\"kb_search\"")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !listed(b.addr) {
        assert!(
            std::time::Instant::now() < deadline,
            "the other server never listed the tool"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // Documents ingested beside a third data directory are searched by both servers, on the
    // same index state as the ingest reported.
    let docs = tempfile::tempdir().unwrap();
    write_documents(docs.path());
    let c_dir = tempfile::tempdir().unwrap();
    let report = json_of(&bare(
        c_dir.path(),
        Some(&url),
        &["ingest", docs.path().to_str().unwrap(), "--json"],
    ));
    assert_eq!(report["added"], 2, "{report}");
    let state = report["index_state"]["id"].as_str().unwrap().to_owned();
    for server in [&a, &b] {
        let (_, health) = crate::server::get_json(server.addr, "/health");
        assert_eq!(health["corpus"]["index_state"], state.as_str(), "{health}");
    }
    let (_, opened) = crate::server::call_tool(
        b.addr,
        "research_open_task",
        serde_json::json!({"question": "Does the harbour silt grow?", "research_date": "2025-06-30"}),
    );
    let task = opened["result"]["task_id"].as_str().unwrap().to_owned();
    let (status, found) = crate::server::call_tool(
        b.addr,
        "retrieval_search_evidence",
        serde_json::json!({"task_id": task, "sources": ["corpus"], "query": "harbour silt"}),
    );
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["result"]["index_state"], state.as_str(), "{found}");
    assert_eq!(
        found["result"]["candidates"].as_array().unwrap().len(),
        2,
        "{found}"
    );
    a.stop();
    b.stop();
}

/// A contracts folder with a tag of its own, a tool that uses it and a fallback to the tool.
fn pushable_folder(dir: &Path) {
    std::fs::create_dir_all(dir.join("tools")).unwrap();
    std::fs::write(
        dir.join("semantic-tags.yaml"),
        "tags:\n  ticket_ref:\n    description: A ticket of the team's tracker.\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("fallbacks.yaml"),
        "fallbacks:\n  printer_manual: kb_tickets\n",
    )
    .unwrap();
    let contract = crate::external::kb_contract("kb_tickets", "http://127.0.0.1:9/s", 1000)
        .replacen("semantic_tag: result_id", "semantic_tag: ticket_ref", 1);
    assert!(contract.contains("ticket_ref"), "{contract}");
    std::fs::write(dir.join("tools/kb_tickets.yaml"), contract).unwrap();
}

#[test]
fn contracts_push_stores_a_folder_for_every_node_and_unshared_files_are_refused() {
    let Some((_, url)) = database_or_skip("contracts_push") else {
        return;
    };
    let (a_dir, b_dir, folder) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    pushable_folder(folder.path());
    let folder_arg = folder.path().to_str().unwrap();

    // A fallback to no tool: nothing is stored, exit 1.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(
        bad.path().join("fallbacks.yaml"),
        "fallbacks:\n  x: no_such_tool\n",
    )
    .unwrap();
    let out = with_url(
        a_dir.path(),
        &url,
        &["contracts", "push", bad.path().to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nothing was stored"),
        "{}",
        stdout(&out)
    );

    let out = with_url(a_dir.path(), &url, &["contracts", "push", folder_arg]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("kb_tickets"), "{}", stdout(&out));

    // A server over another data directory serves the pushed tool and fallback.
    let env = [("RESEARCH_LEDGER_STORAGE_URL", url.as_str())];
    let a = crate::server::Server::start_with(a_dir.path(), &[], &env);
    let (_, list) = crate::server::get_json(a.addr, "/v1/tools/list");
    assert!(list.to_string().contains("\"kb_tickets\""), "{list}");
    drop(a);

    // A data directory with a contract file the database does not hold: serve refuses.
    crate::nodes::copy_key(a_dir.path(), b_dir.path());
    let hand = b_dir.path().join("contracts");
    std::fs::create_dir_all(&hand).unwrap();
    std::fs::write(
        hand.join("fallbacks.yaml"),
        "fallbacks:\n  other_manual: kb_tickets\n",
    )
    .unwrap();
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_research-ledger"))
        .arg("--data-dir")
        .arg(b_dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("RESEARCH_LEDGER_STORAGE_URL", &url)
        .env_remove("RESEARCH_LEDGER_DATA_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = crate::exit_within(&mut serve, 60) else {
        let _ = serve.kill();
        panic!("serve started over a contracts folder the database does not hold");
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("fallbacks.yaml"), "{err}");
    assert!(err.contains("contracts push"), "{err}");
}
