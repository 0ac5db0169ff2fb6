//! `--storage-url`: the ledger and the content store in a PostgreSQL database rather than the
//! data directory, so a second data directory over the same database reads the same ledger and
//! the same evidence texts. Run whenever PostgreSQL is installed, whatever backend the rest of
//! the suite is on; without it these tests say so and pass, unless
//! `RESEARCH_LEDGER_REQUIRE_POSTGRES` is set (as `scripts/test` sets it).

use std::path::Path;

use serde_json::Value;
use test_support::postgres::cluster_or_skip;

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
    let Some(cluster) = cluster_or_skip("a_second_data_directory_over_the_same_database") else {
        return;
    };
    let url = cluster.create_database().unwrap();
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
    let Some(cluster) = cluster_or_skip("a_changed_text_in_the_database") else {
        return;
    };
    let url = cluster.create_database().unwrap();
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
    let Some(cluster) = cluster_or_skip("a_token_made_beside_one_data_directory") else {
        return;
    };
    let url = cluster.create_database().unwrap();
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
