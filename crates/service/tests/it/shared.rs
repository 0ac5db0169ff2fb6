//! Two services over one PostgreSQL database, as two nodes: the contracts, the pipeline jobs
//! and the corpus's documents are the database's, so each node sees what the other wrote.
//! Real throwaway clusters (`test_support::postgres`); without PostgreSQL these tests say so
//! and pass, unless `RESEARCH_LEDGER_REQUIRE_POSTGRES` is set.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use service::{Service, ServiceError, ServiceOptions};
use test_support::postgres::{PgCluster, database_or_skip};

use super::{alice, call, open_task};

fn node(dir: &Path, url: &str) -> Service {
    let mut options = ServiceOptions::new(dir);
    options.ledger.checkpoint_interval = None;
    options.storage_url = Some(url.to_owned());
    Service::open(options).unwrap()
}

/// Two nodes on the database at `url`, each with a data directory of its own; the directories
/// come first, so that they outlive the nodes when the caller's bindings are dropped.
fn two_nodes(url: &str) -> ([tempfile::TempDir; 2], Service, Service) {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (a, b) = (node(dirs[0].path(), url), node(dirs[1].path(), url));
    (dirs, a, b)
}

fn sql(cluster: &PgCluster, url: &str, statement: &str) -> String {
    cluster.psql_url(url, statement).unwrap()
}

fn contract(name: &str) -> String {
    format!(
        r#"name: {name}
description: Searches the team's knowledge base for evidence on a question.
endpoint: http://127.0.0.1:9/search
contract_version: "2.1"
timeout_ms: 1000
input_schema:
  query: {{ type: string, semantic_tag: search_query }}
output_schema:
  results:
    type: array
    items:
      type: object
      properties:
        id: {{ type: string, semantic_tag: result_id }}
        text: {{ type: string, semantic_tag: evidence_content }}
"#
    )
}

fn tool_names(service: &Service) -> Vec<String> {
    service
        .tools()
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with("kb_"))
        .collect()
}

#[test]
fn a_contract_registered_on_one_node_is_served_by_the_other_and_removed_from_both() {
    let Some((_, url)) = database_or_skip("a_contract_registered_on_one_node") else {
        return;
    };
    let (dirs, a, b) = two_nodes(&url);
    assert_eq!(
        a.register_tool(&alice(), &contract("kb_search")).unwrap(),
        "kb_search"
    );
    // Nothing of it in either data directory: it is the database's.
    assert!(
        !dirs[0]
            .path()
            .join("contracts/tools/kb_search.yaml")
            .exists()
    );
    assert!(tool_names(&b).is_empty());
    assert!(b.refresh_tools());
    assert_eq!(tool_names(&b), ["kb_search"]);
    assert!(!b.refresh_tools(), "nothing moved since");

    // Removed through the other node: gone from both.
    b.unregister_tool(&alice(), "kb_search").unwrap();
    assert!(a.refresh_tools());
    assert!(tool_names(&a).is_empty());
    assert!(matches!(
        a.unregister_tool(&alice(), "kb_search"),
        Err(ServiceError::NotFound { .. })
    ));
    // A third node starting now reads the same (empty) set, and an invalid contract is
    // refused before anything is written.
    a.register_tool(&alice(), &contract("kb_other")).unwrap();
    assert!(
        a.register_tool(
            &alice(),
            &contract("kb_bad").replace("result_id", "no_such_tag")
        )
        .is_err()
    );
    let c_dir = tempfile::tempdir().unwrap();
    assert_eq!(tool_names(&node(c_dir.path(), &url)), ["kb_other"]);
}

fn wait_stopped(service: &Service, job_id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = call(service, "research_job_status", json!({"job_id": job_id})).unwrap();
        if job["status"] != "running" {
            return job;
        }
        assert!(Instant::now() < deadline, "the job never stopped: {job}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The claim key of a job, as the nodes compute it.
fn claim_key(job_id: &str) -> i64 {
    let hash = blake3::hash(format!("research-ledger job claim\0{job_id}").as_bytes());
    i64::from_le_bytes(hash.as_bytes()[..8].try_into().unwrap())
}

fn set_running(cluster: &PgCluster, url: &str, job_id: &str) {
    sql(
        cluster,
        url,
        &format!(
            "UPDATE pipeline_jobs SET status = 'running', \
             body = jsonb_set(body::jsonb, '{{job,status}}', '\"running\"')::text \
             WHERE job_id = '{job_id}'"
        ),
    );
}

#[test]
fn a_job_runs_on_one_node_only_and_a_job_whose_node_died_is_recovered() {
    let Some((cluster, url)) = database_or_skip("a_job_runs_on_one_node_only") else {
        return;
    };
    let a_dir = tempfile::tempdir().unwrap();
    let a = node(a_dir.path(), &url);
    let task = open_task(&a);
    let start = json!({"task_id": task, "idempotency_key": "pipeline-1"});
    let started = call(&a, "research_run_pipeline", start.clone()).unwrap();
    let job_id = started["job_id"].as_str().unwrap().to_owned();
    let stopped = wait_stopped(&a, &job_id);
    let rows = |c: &PgCluster| sql(c, &url, "SELECT count(*) FROM pipeline_jobs");
    assert_eq!(rows(cluster), "1");

    // The other node answers the same key with the same job, and knows it.
    let b_dir = tempfile::tempdir().unwrap();
    let b = node(b_dir.path(), &url);
    let again = call(&b, "research_run_pipeline", start).unwrap();
    assert_eq!(again["job_id"], job_id.as_str());
    assert_eq!(again["replayed"], true);
    assert_eq!(again["status"], stopped["status"]);
    // The same key in another caller's call is refused.
    let reused = b.call_tool(
        &service::Caller::new("bob"),
        "research_run_pipeline",
        &json!({"task_id": task, "idempotency_key": "pipeline-1"}),
    );
    assert!(
        matches!(reused, Err(ServiceError::IdempotencyKeyReused { .. })),
        "{:?}",
        reused.map(|o| o.structured)
    );
    assert_eq!(rows(cluster), "1");

    // A node that holds the job's claim is alive: the job reads running everywhere and a
    // start on its task gets it rather than a second run.
    set_running(cluster, &url, &job_id);
    let mut holder =
        std::process::Command::new(test_support::postgres::bin_dir().unwrap().join("psql"))
            .args(["-X", "-q", "-d", &url])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    {
        use std::io::{BufRead as _, Write as _};
        let stdin = holder.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "SELECT pg_advisory_lock({}); SELECT 'held';",
            claim_key(&job_id)
        )
        .unwrap();
        stdin.flush().unwrap();
        let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("held") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "psql stopped");
        }
    }
    let running = call(&b, "research_job_status", json!({"job_id": job_id})).unwrap();
    assert_eq!(running["status"], "running", "{running}");
    // A node following a job another node runs sees it move.
    let followed = a.watch_job(&job_id).unwrap();
    assert_eq!(followed.borrow().status, service::JobStatus::Running);
    // Following it opens no session per look (it looks every 250 ms): the job and its held
    // claim are read on the node's shared session. (The psql of the first count is counted.)
    let sessions = || {
        sql(
            cluster,
            &url,
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()",
        )
        .parse::<u64>()
        .unwrap()
    };
    let before = sessions();
    std::thread::sleep(Duration::from_millis(1500));
    let opened = sessions() - before;
    assert!(
        opened <= 2,
        "{opened} sessions opened in 1.5 s of following a job"
    );
    sql(
        cluster,
        &url,
        &format!(
            "UPDATE pipeline_jobs SET status = 'waiting', \
             body = jsonb_set(body::jsonb, '{{job,status}}', '\"waiting\"')::text \
             WHERE job_id = '{job_id}'"
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while followed.borrow().status == service::JobStatus::Running {
        assert!(
            Instant::now() < deadline,
            "the follower never saw the job move"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(followed.borrow().status, service::JobStatus::Waiting);
    set_running(cluster, &url, &job_id);
    let second = call(&b, "research_run_pipeline", json!({"task_id": task})).unwrap();
    assert_eq!(second["job_id"], job_id.as_str(), "{second}");
    assert_eq!(rows(cluster), "1");

    // That node dies: its session ends and the claim with it. The job now reads interrupted
    // on every node, and running the pipeline again starts a new job that resumes the task.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let recovered = loop {
        let job = call(&b, "research_job_status", json!({"job_id": job_id})).unwrap();
        if job["status"] != "running" || Instant::now() > deadline {
            break job;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(recovered["status"], "interrupted", "{recovered}");
    assert_eq!(stored_status(cluster, &url, &job_id), "interrupted");
    let resumed = call(&b, "research_run_pipeline", json!({"task_id": task})).unwrap();
    assert_ne!(resumed["job_id"], job_id.as_str());
    let done = wait_stopped(&b, resumed["job_id"].as_str().unwrap());
    assert_eq!(done["status"], stopped["status"], "{done}");
    assert_eq!(rows(cluster), "2");
    // And the first node reads the second's job from the database.
    let seen = a.job(resumed["job_id"].as_str().unwrap()).unwrap();
    assert_eq!(
        serde_json::to_value(&seen).unwrap()["status"],
        done["status"]
    );
}

fn documents(dir: &Path) -> Vec<std::path::PathBuf> {
    let texts = [
        (
            "harbour.md",
            "id: harbour-1\ntitle: Harbour silt\nsource: Port Authority\nsource_type: government\npublish_date: 2024-03-01",
            "The harbour silt grows each winter as the river floods the estuary.",
        ),
        (
            "reef.md",
            "id: reef-2\ntitle: Reef survey\nsource: Reef Institute\nsource_type: academic_paper\npublish_date: 2023-07-12",
            "Survey divers found the reef recovering where the harbour silt thinned.",
        ),
        (
            "ferry.md",
            "id: ferry-3\ntitle: Ferry log\nsource: Ferry Times\nsource_type: news_original\npublish_date: 2022-11-30",
            "The ferry ran late all winter; the estuary froze twice.",
        ),
    ];
    texts
        .iter()
        .map(|(name, meta, body)| {
            let path = dir.join(name);
            std::fs::write(&path, format!("---\n{meta}\n---\n{body}\n")).unwrap();
            path
        })
        .collect()
}

fn hits(service: &Service, query: &str) -> (String, Vec<(String, u64)>) {
    let result = service.corpus().search(query, 10, &[]).unwrap();
    (
        result.index_state.id,
        result
            .hits
            .iter()
            .map(|h| (h.id.clone(), h.raw_score.to_bits()))
            .collect(),
    )
}

#[test]
fn documents_ingested_through_one_node_are_searched_by_the_other_with_the_same_hits() {
    let Some((cluster, url)) = database_or_skip("documents_ingested_through_one_node") else {
        return;
    };
    let (_dirs, a, b) = two_nodes(&url);
    assert_eq!(b.corpus().len(), 0);
    let files = tempfile::tempdir().unwrap();
    let paths = documents(files.path());
    let report = a
        .ingest_files(&paths[..2], &sources::Defaults::default(), &mut |_| {})
        .unwrap();
    assert_eq!((report.added, report.failed), (2, 0), "{:?}", report.errors);
    let stored = sql(
        cluster,
        &url,
        "SELECT string_agg(id, ',' ORDER BY id) FROM corpus_documents",
    );
    assert_eq!(stored, "harbour-1,reef-2");

    // The other node's next search sees them, with the same state and the same hits.
    let (state_b, hits_b) = hits(&b, "harbour silt");
    let (state_a, hits_a) = hits(&a, "harbour silt");
    assert_eq!(state_a, report.index_state.id);
    assert_eq!((state_b, &hits_b), (state_a.clone(), &hits_a));
    assert_eq!(hits_b.len(), 2);

    // Through the other node, one more (and one the same as before): the first follows.
    let docs: Vec<sources::Document> = sources::Corpus::in_memory(sources::CorpusLimits::default())
        .map(|c| {
            c.ingest(&paths, &sources::Defaults::default(), &mut |_| {})
                .unwrap();
            c.documents().unwrap()
        })
        .unwrap();
    let added = b.ingest_documents(&alice(), &docs).unwrap();
    assert_eq!((added.added, added.unchanged), (1, 2));
    let (state_a2, hits_a2) = hits(&a, "estuary winter");
    let (state_b2, hits_b2) = hits(&b, "estuary winter");
    assert_ne!(state_a2, state_a);
    assert_eq!((state_a2.clone(), hits_a2.clone()), (state_b2, hits_b2));
    // The same documents in a corpus of the data directory alone: the same state and hits.
    let alone = sources::Corpus::in_memory(sources::CorpusLimits::default()).unwrap();
    alone.add_documents(&docs).unwrap();
    let reference = alone.search("estuary winter", 10, &[]).unwrap();
    assert_eq!(reference.index_state.id, state_a2);
    assert_eq!(
        reference
            .hits
            .iter()
            .map(|h| (h.id.clone(), h.raw_score.to_bits()))
            .collect::<Vec<_>>(),
        hits_a2
    );

    // A node whose index holds a document the database does not rebuilds it from the database.
    let stray = tempfile::tempdir().unwrap();
    let own = sources::Corpus::open(
        stray.path().join("corpus"),
        sources::CorpusLimits::default(),
    )
    .unwrap();
    own.add_documents(&docs[..1]).unwrap();
    let mut changed = docs[0].clone();
    changed.id = "stray-9".into();
    own.add_documents(&[changed]).unwrap();
    drop(own);
    let c = node(stray.path(), &url);
    assert_eq!(hits(&c, "estuary winter"), (state_a2, hits_a2));

    // A row altered in the database is refused, never indexed.
    sql(
        cluster,
        &url,
        "UPDATE corpus_documents SET document = replace(document, 'froze twice', 'never froze') WHERE id = 'ferry-3'",
    );
    let fresh = tempfile::tempdir().unwrap();
    let mut options = ServiceOptions::new(fresh.path());
    options.storage_url = Some(url.clone());
    let refused = Service::open(options).unwrap_err().to_string();
    assert!(
        refused.contains("ferry-3") && refused.contains("damaged"),
        "{refused}"
    );
}

#[test]
fn a_newer_shared_schema_is_refused() {
    let Some((cluster, url)) = database_or_skip("a_newer_shared_schema_is_refused") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    drop(node(dir.path(), &url));
    let versions = sql(
        cluster,
        &url,
        "SELECT string_agg(component || '=' || version, ',' ORDER BY component, version) FROM shared_schema",
    );
    assert_eq!(versions, "corpus=1,service=1,service=2");
    for component in ["service", "corpus"] {
        sql(
            cluster,
            &url,
            &format!(
                "INSERT INTO shared_schema (component, version, description) VALUES ('{component}', 99, 'from the future')"
            ),
        );
        let mut options = ServiceOptions::new(dir.path());
        options.storage_url = Some(url.clone());
        let refused = Service::open(options).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("{component} schema is at version 99")),
            "{refused}"
        );
        sql(
            cluster,
            &url,
            "DELETE FROM shared_schema WHERE version = 99",
        );
    }
}

#[test]
fn a_node_on_a_shared_database_lets_go_of_its_data_directory_when_it_goes_away() {
    let Some((_, url)) = database_or_skip("a_node_lets_go_of_its_data_directory") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Dropped without a shutdown, and shut down then dropped: either way the next open of the
    // same directory finds nothing of the old node holding it (its read models' store).
    drop(node(dir.path(), &url));
    let again = node(dir.path(), &url);
    again.shutdown();
    drop(again);
    drop(node(dir.path(), &url));
}

/// A contracts folder with a tag of its own, a tool that uses it and a fallback to the tool.
fn folder_with(tag: &str, fallback_from: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("semantic-tags.yaml"),
        format!("tags:\n  {tag}:\n    description: A ticket of the team's tracker.\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("fallbacks.yaml"),
        format!("fallbacks:\n  {fallback_from}: kb_tickets\n"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("tools")).unwrap();
    std::fs::write(
        dir.path().join("tools/kb_tickets.yaml"),
        contract("kb_tickets").replace("semantic_tag: result_id", &format!("semantic_tag: {tag}")),
    )
    .unwrap();
    dir
}

fn options_of(dir: &Path, url: &str) -> ServiceOptions {
    let mut options = ServiceOptions::new(dir);
    options.ledger.checkpoint_interval = None;
    options.storage_url = Some(url.to_owned());
    options
}

#[test]
fn a_dictionary_and_fallbacks_pushed_through_one_node_are_served_by_the_other() {
    let Some((_, url)) = database_or_skip("a_dictionary_and_fallbacks_pushed") else {
        return;
    };
    let (dirs, a, b) = two_nodes(&url);
    let folder = folder_with("ticket_ref", "printer_manual");
    // The tag is in no dictionary yet: the tool is refused through either node.
    let text = std::fs::read_to_string(folder.path().join("tools/kb_tickets.yaml")).unwrap();
    assert!(a.register_tool(&alice(), &text).is_err());

    let tools = service::push_contracts(&options_of(dirs[0].path(), &url), folder.path()).unwrap();
    assert_eq!(tools, ["kb_tickets"]);
    // The other node serves the tool, its tag and the fallback after its next refresh.
    assert!(b.refresh_tools());
    assert_eq!(tool_names(&b), ["kb_tickets"]);
    assert!(b.has_tool("printer_manual"));
    assert!(b.tool_problems().is_empty(), "{:?}", b.tool_problems());
    assert!(a.refresh_tools());
    assert!(a.has_tool("printer_manual"));
    // A tool registered through B may use the pushed tag.
    b.register_tool(&alice(), &text.replace("kb_tickets", "kb_tickets_two"))
        .unwrap();
    assert!(a.refresh_tools());
    assert_eq!(tool_names(&a), ["kb_tickets", "kb_tickets_two"]);

    // A new fallback map pushed through B: A sends the new name, not the old one.
    let changed = folder_with("ticket_ref", "old_manual");
    service::push_contracts(&options_of(dirs[1].path(), &url), changed.path()).unwrap();
    assert!(a.refresh_tools());
    assert!(a.has_tool("old_manual"));
    assert!(!a.has_tool("printer_manual"));

    // A dictionary that drops a tag a kept tool uses is refused whole: nothing changes.
    let dropped = folder_with("other_tag", "old_manual");
    std::fs::remove_dir_all(dropped.path().join("tools")).unwrap();
    let err = service::push_contracts(&options_of(dirs[1].path(), &url), dropped.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nothing was stored"), "{err}");
    assert!(err.contains("ticket_ref"), "{err}");
    assert!(!a.refresh_tools(), "the document did not move");
    assert!(a.has_tool("old_manual"));

    // A third node starts with the same set, from the database alone.
    let c_dir = tempfile::tempdir().unwrap();
    let c = node(c_dir.path(), &url);
    assert_eq!(tool_names(&c), ["kb_tickets", "kb_tickets_two"]);
    assert!(c.has_tool("old_manual"));
}

#[test]
fn files_placed_by_hand_are_refused_unless_the_database_holds_them() {
    let Some((_, url)) = database_or_skip("files_placed_by_hand") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let contracts = dir.path().join("contracts");
    let folder = folder_with("ticket_ref", "printer_manual");
    std::fs::create_dir_all(contracts.join("tools")).unwrap();
    for name in [
        "semantic-tags.yaml",
        "fallbacks.yaml",
        "tools/kb_tickets.yaml",
    ] {
        std::fs::copy(folder.path().join(name), contracts.join(name)).unwrap();
    }
    let refused = match Service::open(options_of(dir.path(), &url)) {
        Ok(_) => panic!("a node over files the database does not hold opened"),
        Err(e) => e.to_string(),
    };
    for part in [
        "the contract of kb_tickets",
        "semantic-tags.yaml",
        "fallbacks.yaml",
        "contracts push",
    ] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    // Pushed, the same files are the database's: the node opens and serves them.
    service::push_contracts(&options_of(dir.path(), &url), &contracts).unwrap();
    let service = node(dir.path(), &url);
    assert_eq!(tool_names(&service), ["kb_tickets"]);
    assert!(service.has_tool("printer_manual"));
    drop(service);
    // Edited by hand afterwards: refused again, naming the file.
    std::fs::write(contracts.join("fallbacks.yaml"), "fallbacks: {}\n").unwrap();
    let refused = match Service::open(options_of(dir.path(), &url)) {
        Ok(_) => panic!("an edited fallback map was taken"),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("fallbacks.yaml"), "{refused}");
    assert!(!refused.contains("kb_tickets"), "{refused}");
}

/// A task's version as a node's read models have it.
/// Runs `work` while the database terminates every session of every node, again and again.
fn while_sessions_drop<R>(cluster: &PgCluster, url: &str, work: impl FnOnce() -> R) -> R {
    /// Stops the terminations when `work` ends, returning or panicking.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = cluster.psql_url(
                    url,
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                     AND application_name = 'research-ledger'",
                );
                std::thread::sleep(Duration::from_millis(15));
            }
        });
        let _stop = Stop(&stop);
        work()
    })
}

fn version_on(service: &Service, task: &str) -> u64 {
    service.projector().session_version(task).unwrap_or(0)
}

#[test]
fn the_read_models_follow_other_nodes_again_after_the_database_drops_their_sessions() {
    let Some((cluster, url)) = database_or_skip("the_read_models_follow_other_nodes_again") else {
        return;
    };
    let (_dirs, a, b) = two_nodes(&url);
    let task = open_task(&a);
    let written = |i: usize| {
        // A write whose session the database dropped is retried under its key.
        let key = format!("storm-{i}");
        let args = json!({
            "task_id": task, "source": format!("source-{i}.example.org"),
            "publish_date": "2025-01-10", "source_type": "government",
            "content": format!("Report {i} says that lithium supply grows faster than demand."),
            "stance": "supports", "idempotency_key": key,
        });
        for _ in 0..200 {
            if call(&a, "retrieval_add_evidence", args.clone()).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("write {i} never succeeded");
    };
    let caught_up = |want: u64, within: Duration| {
        let deadline = Instant::now() + within;
        while version_on(&b, &task) < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        version_on(&b, &task)
    };
    written(0);
    assert_eq!(caught_up(2, Duration::from_secs(10)), 2);

    // While node A writes, the database drops every session of both nodes again and again,
    // reads of node B's read models among them.
    while_sessions_drop(cluster, &url, || {
        for i in 1..=60 {
            written(i);
        }
    });

    // Then node A alone writes on; node B, which writes nothing, must show every write within
    // the follow bound.
    for i in 61..=65 {
        written(i);
    }
    let want = version_on(&a, &task);
    assert_eq!(want, 67, "node A's own read models hold every write");
    assert_eq!(
        caught_up(want, Duration::from_secs(10)),
        want,
        "node B's read models stopped following node A"
    );
}

#[test]
fn subscribers_from_the_past_miss_nothing_while_the_database_drops_their_sessions() {
    let Some((cluster, url)) = database_or_skip("subscribers_from_the_past_miss_nothing") else {
        return;
    };
    let (_dirs, a, b) = two_nodes(&url);
    let task = open_task(&a);
    for i in 0..40 {
        let args = json!({
            "task_id": task, "source": format!("source-{i}.example.org"),
            "publish_date": "2025-01-10", "source_type": "government",
            "content": format!("Report {i} says that lithium supply grows faster than demand."),
            "stance": "supports",
        });
        call(&a, "retrieval_add_evidence", args).unwrap();
    }
    let head = a.ledger().head().size;
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.projector().next_seq() < head && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        b.projector().next_seq(),
        head,
        "node B folded node A's writes"
    );

    // Subscribers on node B start from the first event, again and again, and catch up from the
    // database while it drops their sessions; each must see every event, in order, and wait
    // through the failures rather than end.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rounds = while_sessions_drop(cluster, &url, || {
        runtime.block_on(async {
            let started = Instant::now();
            let mut rounds = 0;
            while started.elapsed() < Duration::from_secs(3) {
                let mut updates = b.updates(0);
                for seq in 0..head {
                    let update = tokio::time::timeout(Duration::from_secs(20), updates.next())
                        .await
                        .unwrap_or_else(|_| panic!("round {rounds}: no event {seq} in 20 s"))
                        .unwrap_or_else(|e| panic!("round {rounds}: event {seq}: {e}"));
                    assert_eq!(update.seq, seq, "round {rounds}: events out of order");
                }
                rounds += 1;
            }
            rounds
        })
    });
    assert!(rounds > 0);
}

/// Waits (up to 20 s) until `query` counts exactly one row's worth: `what` names it if never.
fn until_one(cluster: &PgCluster, url: &str, what: &str, query: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while sql(cluster, url, query) != "1" {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A job's status as its row in the database says.
fn stored_status(cluster: &PgCluster, url: &str, job_id: &str) -> String {
    sql(
        cluster,
        url,
        &format!("SELECT status FROM pipeline_jobs WHERE job_id = '{job_id}'"),
    )
}

/// Runs `read` on a thread of its own while a transaction holds `table` locked after making
/// `change` to it, and cuts the session named `application` once, while it waits for that
/// lock: the database terminates it, as in a failover. Returns what `read` returned once the
/// transaction committed.
fn read_cut_once_behind_a_change<R: Send>(
    cluster: &PgCluster,
    url: &str,
    (table, change): (&str, &str),
    application: &str,
    read: impl FnOnce() -> R + Send,
) -> R {
    std::thread::scope(|s| {
        let locked = format!(
            "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE; {change}; \
             SELECT pg_sleep(2); COMMIT;"
        );
        let holder = s.spawn(move || cluster.psql_url(url, &locked));
        until_one(
            cluster,
            url,
            "the change holds the lock",
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event = 'PgSleep' AND query LIKE 'BEGIN; LOCK TABLE%'",
        );
        let reader = s.spawn(read);
        let waiting = format!(
            "FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = '{application}' AND wait_event_type = 'Lock'"
        );
        until_one(
            cluster,
            url,
            "the read waits for the lock",
            &format!("SELECT count(*) {waiting}"),
        );
        let cut = sql(
            cluster,
            url,
            &format!("SELECT count(pg_terminate_backend(pid)) {waiting}"),
        );
        assert_eq!(cut, "1", "one session cut");
        holder.join().unwrap().unwrap();
        reader.join().unwrap()
    })
}

#[test]
fn a_revocation_reaches_a_node_whose_session_was_cut_while_it_read_the_tokens() {
    let Some((cluster, url)) =
        database_or_skip("a_revocation_reaches_a_node_whose_session_was_cut")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store =
        service::tokens::TokenStore::in_database(&url, dir.path().join("tokens.json")).unwrap();
    let token = store.add("alice", service::Role::Writer).unwrap();
    let mut table = service::tokens::TokenTable::default();
    assert!(table.refresh(&store).unwrap());
    assert!(table.holder(&token).is_some());
    // Revoked by another node, which holds the row's table while the cut happens: the read
    // that was cut must come back with the revocation, not leave the node on what it had (a
    // node that cannot read the tokens keeps the ones it read last).
    let revoke = "UPDATE shared_documents SET version = version + 1, \
                  body = jsonb_set(body::jsonb, '{tokens,0,revoked_at}', \
                  '\"2026-12-07T10:00:00Z\"')::text WHERE name = 'tokens'";
    let read = read_cut_once_behind_a_change(
        cluster,
        &url,
        ("shared_documents", revoke),
        "research-ledger shared documents",
        || table.refresh(&store),
    );
    assert!(matches!(read, Ok(true)), "{read:?}");
    assert!(
        table.holder(&token).is_none(),
        "a revoked token still works"
    );
    let listed = store.list().unwrap();
    assert!(listed[0].revoked_at.is_some(), "{listed:?}");
}

#[test]
fn a_corpus_version_read_on_a_cut_session_is_read_again() {
    let Some((cluster, url)) = database_or_skip("a_corpus_version_read_on_a_cut_session") else {
        return;
    };
    let documents = sources::PostgresDocuments::open(&url).unwrap();
    assert_eq!(documents.version().unwrap(), 0);
    let read = read_cut_once_behind_a_change(
        cluster,
        &url,
        (
            "corpus_head",
            "UPDATE corpus_head SET version = 7 WHERE id = 1",
        ),
        "research-ledger corpus",
        || documents.version(),
    );
    assert_eq!(read.unwrap(), 7);
}

/// Cuts every node's job sessions on the database (their claims' among them) and waits (up to
/// 5 s each) until their backends are gone, so that their advisory locks are let go by the time
/// it returns; says how many.
fn cut_jobs_sessions(cluster: &PgCluster, url: &str) -> String {
    sql(
        cluster,
        url,
        "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'research-ledger jobs'",
    )
}

/// Starts the pipeline on `task` through `node` while a transaction holds the ledger's head
/// row, so that the job's first ledger write waits; cuts the node's job sessions meanwhile, runs
/// `meanwhile` with the job's id, and lets the head go. Returns the job's id.
fn start_a_job_and_cut_its_claim(
    cluster: &PgCluster,
    url: &str,
    node: &Service,
    task: &str,
    meanwhile: impl FnOnce(&str),
) -> String {
    std::thread::scope(|s| {
        let holder = s.spawn(|| {
            cluster.psql_url(
                url,
                "BEGIN; SELECT size FROM ledger_head WHERE id = 1 FOR UPDATE; \
                 SELECT pg_sleep(2); COMMIT;",
            )
        });
        let held = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                    AND wait_event = 'PgSleep' AND query LIKE 'BEGIN; SELECT size%'";
        until_one(cluster, url, "the head row held", held);
        let started = call(node, "research_run_pipeline", json!({"task_id": task})).unwrap();
        let job_id = started["job_id"].as_str().unwrap().to_owned();
        let waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                       AND application_name = 'research-ledger' AND wait_event_type = 'Lock'";
        until_one(cluster, url, "the job writing to the ledger", waiting);
        assert_ne!(cut_jobs_sessions(cluster, url), "0");
        meanwhile(&job_id);
        holder.join().unwrap().unwrap();
        job_id
    })
}

#[test]
fn a_job_whose_claim_was_cut_stops_interrupted_and_the_node_claims_again() {
    let Some((cluster, url)) = database_or_skip("a_job_whose_claim_was_cut") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = node(dir.path(), &url);
    // Cut while no job runs: the next start claims on a new session.
    assert_ne!(cut_jobs_sessions(cluster, &url), "0");
    let task = open_task(&a);
    let first = call(&a, "research_run_pipeline", json!({"task_id": task})).unwrap();
    let done = wait_stopped(&a, first["job_id"].as_str().unwrap());
    assert_ne!(done["status"], "failed", "{done}");
    assert_ne!(done["status"], "interrupted", "{done}");

    // Cut while a job runs: its first ledger write waits behind a transaction that holds the
    // head row, and the node's job sessions (its claim's among them) are cut meanwhile. The
    // job must not run on unclaimed, where another node may already read it interrupted and
    // start the task's pipeline again: it stops, interrupted, at its next step.
    let task = open_task(&a);
    let job_id = start_a_job_and_cut_its_claim(cluster, &url, &a, &task, |_| {});
    let stopped = wait_stopped(&a, &job_id);
    assert_eq!(stopped["status"], "interrupted", "{stopped}");
    assert!(
        stopped.to_string().contains("claim on the job was cut"),
        "{stopped}"
    );
    assert_eq!(stored_status(cluster, &url, &job_id), "interrupted");
    // Running it again resumes the task on this node.
    let again = call(&a, "research_run_pipeline", json!({"task_id": task})).unwrap();
    assert_ne!(again["job_id"], job_id.as_str());
    let resumed = wait_stopped(&a, again["job_id"].as_str().unwrap());
    assert_eq!(resumed["status"], done["status"], "{resumed}");
}

#[test]
fn a_job_another_node_marked_interrupted_never_reads_running_again() {
    let Some((cluster, url)) = database_or_skip("a_job_another_node_marked_interrupted") else {
        return;
    };
    let (_dirs, a, b) = two_nodes(&url);
    // Every status a job's row takes, in order.
    sql(
        cluster,
        &url,
        "CREATE TABLE job_history (n bigserial, job_id text, status text); \
         CREATE FUNCTION log_job() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO job_history (job_id, status) VALUES (NEW.job_id, NEW.status); \
         RETURN NEW; END $$; \
         CREATE TRIGGER job_history AFTER INSERT OR UPDATE ON pipeline_jobs \
         FOR EACH ROW EXECUTE FUNCTION log_job();",
    );
    let task = open_task(&a);
    // While the job's node has lost its claim and its step still waits, the other node reads
    // the job, finds its claim free and marks it interrupted. The step then finishes on the
    // first node, which writes the job's progress: it must not bring the row back to running.
    let job_id = start_a_job_and_cut_its_claim(cluster, &url, &a, &task, |job_id| {
        let seen = b.job(job_id).unwrap();
        assert_eq!(seen.status, service::JobStatus::Interrupted);
    });
    let stopped = wait_stopped(&a, &job_id);
    assert_eq!(stopped["status"], "interrupted", "{stopped}");
    let history = sql(
        cluster,
        &url,
        &format!(
            "SELECT string_agg(status, ' ' ORDER BY n) FROM job_history WHERE job_id = '{job_id}'"
        ),
    );
    let after = history
        .split_once("interrupted")
        .map(|(_, after)| after.trim())
        .unwrap_or_else(|| panic!("never interrupted: {history}"));
    assert_eq!(
        after, "",
        "the row moved after it read interrupted: {history}"
    );
    assert_eq!(stored_status(cluster, &url, &job_id), "interrupted");
}
