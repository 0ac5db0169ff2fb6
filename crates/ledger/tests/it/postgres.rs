//! The ledger on the PostgreSQL backend, against throwaway clusters: reads every way after a
//! reopen, group commit in one transaction per group committed in seq order, gap-free tailing
//! by a second reader, tampering through SQL caught at its seq, recovery that refuses to write
//! over a loss, two writers following each other, and no acknowledged append lost when the
//! server crashes under load.
//!
//! Without PostgreSQL installed these tests say so and pass, unless
//! `RESEARCH_LEDGER_REQUIRE_POSTGRES` is set (as `scripts/test` sets it).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use ledger::ledger_proof::{Frontier, MemoryTree, NodeSource, Sha256};
use ledger::storage::postgres::{PostgresOptions, PostgresStorage};
use ledger::storage::{Blob, Commit, SealedEvent, Storage, StorageError, TreeGrowth, content_hash};
use ledger::{AppendError, Digest, ExpectedVersion, Ledger, LedgerOptions};
use test_support::postgres::{PgCluster, cluster_or_skip, database_or_skip};

use super::{assert_times_never_decrease, keyed, options, options_at, request, start_time};

fn open(url: &str, keys: &Path, seed: u64) -> Ledger {
    Ledger::open_postgres(url, keys, options(seed)).expect("ledger opens on PostgreSQL")
}

fn sql(cluster: &PgCluster, url: &str, statement: &str) -> String {
    cluster.psql_url(url, statement).expect("sql")
}

fn append_any(
    ledger: &Ledger,
    stream: &str,
    payload: &[u8],
) -> Result<ledger::Receipt, AppendError> {
    ledger.append(request(stream, ExpectedVersion::Any, &[payload]))
}

fn first_bad_seq(ledger: &Ledger) -> Option<u64> {
    ledger
        .verify_from_scratch(&mut |_, _| {})
        .failure
        .map(|f| f.seq)
}

#[test]
fn appends_are_read_back_every_way_and_survive_reopening() {
    let Some((cluster, url)) = database_or_skip("appends_are_read_back") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let (a, b, key_receipt) = {
        let ledger = open(&url, keys.path(), 1);
        let a = ledger
            .append(request(
                "task-a",
                ExpectedVersion::Exact(0),
                &[b"one", b"two"],
            ))
            .unwrap();
        let b = ledger
            .append(request("task-b", ExpectedVersion::Any, &[b"three"]))
            .unwrap();
        let keyed_receipt = ledger
            .append(keyed(
                request("task-a", ExpectedVersion::Exact(2), &[b"four"]),
                "key-1",
            ))
            .unwrap();
        let err = ledger
            .append(request("task-a", ExpectedVersion::Exact(1), &[b"late"]))
            .unwrap_err();
        assert!(
            matches!(err, AppendError::VersionConflict { current: 3, .. }),
            "{err:?}"
        );
        ledger.checkpoint().unwrap();
        (a, b, keyed_receipt)
    };
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM ledger_events"),
        "4"
    );
    assert_eq!(
        sql(cluster, &url, "SELECT max(version) FROM ledger_schema"),
        "6"
    );

    let ledger = open(&url, keys.path(), 2);
    assert_eq!(ledger.head().size, 4);
    assert_eq!(ledger.head().last_hash, key_receipt.events[0].hash);
    let all = ledger.read_range(0, 100).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[0].payload, b"one");
    assert_eq!(all[0].prev_hash, Digest::ZERO);
    assert_eq!(all[1].prev_hash, all[0].hash);
    assert_eq!(all[2].stream, "task-b");
    let stream = ledger.read_stream("task-a", 2, 10).unwrap();
    assert_eq!(
        stream.iter().map(|e| e.payload.clone()).collect::<Vec<_>>(),
        [b"two".to_vec(), b"four".to_vec()]
    );
    assert_eq!(
        ledger
            .find_event_id(a.events[1].event_id)
            .unwrap()
            .unwrap()
            .seq,
        1
    );
    assert_eq!(ledger.find_hash(&b.events[0].hash).unwrap().unwrap().seq, 2);
    assert!(ledger.get(4).unwrap().is_none());
    assert_eq!(ledger.stream_version("task-a").unwrap(), 3);
    assert_eq!(ledger.stream_version("nobody").unwrap(), 0);

    // The idempotency key outlives the process: the retry gets the original receipt.
    let retry = ledger
        .append(keyed(
            request("task-a", ExpectedVersion::Exact(2), &[b"four"]),
            "key-1",
        ))
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.events, key_receipt.events);
    let reused = ledger
        .append(keyed(
            request("task-a", ExpectedVersion::Any, &[b"other"]),
            "key-1",
        ))
        .unwrap_err();
    assert!(
        matches!(reused, AppendError::IdempotencyKeyReused { .. }),
        "{reused:?}"
    );

    // The tree and the checkpoint log come back from the database: proofs against the
    // checkpoint written before the reopen verify.
    let key = ledger.public_key().unwrap();
    for seq in 0..4 {
        let proof = ledger.inclusion_proof(seq, Some(4)).unwrap();
        ledger::ledger_proof::verify_proof_file(
            &ledger::ledger_proof::ProofFile::Inclusion(proof),
            &key,
        )
        .unwrap();
    }
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
    assert_eq!(report.size, 4);
    assert!(report.checkpoints_checked >= 1);
}

#[test]
fn concurrent_appends_share_transactions_committed_in_seq_order() {
    let Some((cluster, url)) = database_or_skip("concurrent_appends") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = open(&url, keys.path(), 3);
    let threads = 16;
    let per_thread = 25;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let ledger = ledger.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                (0..per_thread)
                    .map(|i| {
                        let key = format!("k-{t}-{i}");
                        let receipt = ledger
                            .append(keyed(
                                request(
                                    &format!("task-{}", t % 4),
                                    ExpectedVersion::Any,
                                    &[key.as_bytes()],
                                ),
                                &key,
                            ))
                            .unwrap();
                        (key, receipt.events[0].seq)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let acknowledged: Vec<(String, u64)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let total = threads * per_thread;
    assert_eq!(acknowledged.len(), total);
    let seqs: HashSet<u64> = acknowledged.iter().map(|(_, s)| *s).collect();
    assert_eq!(seqs.len(), total, "every append has a seq of its own");
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM ledger_events"),
        total.to_string()
    );
    // Events written by one transaction share its xmin: fewer transactions than appends is the
    // group commit.
    let transactions: usize = sql(
        cluster,
        &url,
        "SELECT count(DISTINCT xmin::text) FROM ledger_events",
    )
    .parse()
    .unwrap();
    assert!(
        transactions < total,
        "{transactions} transactions for {total} appends: no group commit"
    );
    // Each group's events lie in one transaction and later seqs in later transactions: along
    // seq the transaction ids never decrease.
    let xids: Vec<u64> = sql(
        cluster,
        &url,
        "SELECT xmin::text FROM ledger_events ORDER BY seq",
    )
    .lines()
    .map(|l| l.parse().unwrap())
    .collect();
    assert!(
        xids.windows(2).all(|w| w[0] <= w[1]),
        "commit order is not seq order"
    );
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
}

#[test]
fn a_reader_tailing_by_seq_never_sees_a_gap() {
    let Some((_, url)) = database_or_skip("a_reader_tailing") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = open(&url, keys.path(), 4);
    // A second process's view: its own backend on the same database, reading only.
    let tail = PostgresStorage::open(
        &url,
        PostgresOptions {
            read_only: true,
            ..PostgresOptions::default()
        },
    )
    .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|t| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    append_any(&ledger, &format!("s{t}"), format!("{t}/{i}").as_bytes()).unwrap();
                }
            })
        })
        .collect();
    let reader = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut next = 0u64;
            loop {
                let finished = done.load(Ordering::SeqCst);
                let chunk = tail.read_range(next, 7).unwrap();
                for event in &chunk {
                    assert_eq!(event.seq, next, "a gap before seq {}", event.seq);
                    next += 1;
                }
                if finished && chunk.is_empty() {
                    return next;
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    assert_eq!(reader.join().unwrap(), 320);
}

/// A ledger of 30 events in appends of two over three streams, with a checkpoint at the end.
fn build(url: &str, keys: &Path) {
    let ledger = open(url, keys, 5);
    for i in 0..15 {
        ledger
            .append(request(
                &format!("task-{}", i % 3),
                ExpectedVersion::Any,
                &[
                    format!("payload {i} a").as_bytes(),
                    format!("payload {i} b").as_bytes(),
                ],
            ))
            .unwrap();
    }
    ledger.checkpoint().unwrap();
}

/// Builds a ledger, tampers with it through SQL, and checks that verification names
/// `expected_seq` and that the ledger then refuses to write.
fn check_tampering(test: &str, tamper: &str, expected_seq: u64) {
    let Some((cluster, url)) = database_or_skip(test) else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    build(&url, keys.path());
    sql(cluster, &url, tamper);
    let ledger = open(&url, keys.path(), 6);
    assert_eq!(first_bad_seq(&ledger), Some(expected_seq), "{test}");
    let refused = append_any(&ledger, "t", b"more");
    assert!(
        matches!(refused, Err(AppendError::Poisoned(_))),
        "{test}: {refused:?}"
    );
}

#[test]
fn a_flipped_bit_is_caught_at_its_seq() {
    check_tampering(
        "a_flipped_bit",
        "UPDATE ledger_events SET bytes = set_byte(bytes, 40, get_byte(bytes, 40) # 1) \
         WHERE seq = 13",
        13,
    );
}

#[test]
fn a_removed_event_is_caught_at_its_seq() {
    // The attacker closes the gap so that seqs stay dense (dropping a constraint to do it).
    check_tampering(
        "a_removed_event",
        "ALTER TABLE ledger_events DROP CONSTRAINT ledger_events_seq_check; \
         DELETE FROM ledger_events WHERE seq = 9; \
         UPDATE ledger_events SET seq = -seq WHERE seq > 9; \
         UPDATE ledger_events SET seq = -seq - 1 WHERE seq < 0; \
         UPDATE ledger_head SET size = 29, last_hash = (SELECT hash FROM ledger_events WHERE seq = 28)",
        9,
    );
}

#[test]
fn swapped_events_are_caught_at_the_first() {
    check_tampering(
        "swapped_events",
        "UPDATE ledger_events e SET bytes = o.bytes FROM ledger_events o \
         WHERE (e.seq, o.seq) IN ((17, 18), (18, 17))",
        17,
    );
}

#[test]
fn an_inserted_event_is_caught_at_its_seq() {
    // A copy of event 4 inserted at 12 (with a fresh id and hash column, as constraints ask).
    check_tampering(
        "an_inserted_event",
        "ALTER TABLE ledger_events DROP CONSTRAINT ledger_events_seq_check; \
         UPDATE ledger_events SET seq = -seq - 1 WHERE seq >= 12; \
         UPDATE ledger_events SET seq = -seq WHERE seq < 0; \
         INSERT INTO ledger_events SELECT 12, stream, 99, gen_random_uuid(), \
         decode(repeat('ab', 32), 'hex'), bytes FROM ledger_events WHERE seq = 4; \
         UPDATE ledger_head SET size = 31, last_hash = (SELECT hash FROM ledger_events WHERE seq = 30)",
        12,
    );
}

#[test]
fn a_log_cut_short_with_its_head_row_is_caught_by_the_signed_checkpoint() {
    let Some((cluster, url)) = database_or_skip("a_log_cut_short") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    build(&url, keys.path());
    sql(
        cluster,
        &url,
        "DELETE FROM ledger_events WHERE seq >= 25; \
         UPDATE ledger_head SET size = 25, last_hash = (SELECT hash FROM ledger_events WHERE seq = 24)",
    );
    let ledger = open(&url, keys.path(), 7);
    let reason = ledger.poisoned().expect("the ledger refuses to write");
    assert!(reason.contains("30"), "{reason}");
    assert!(matches!(
        append_any(&ledger, "t", b"x"),
        Err(AppendError::Poisoned(_))
    ));
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM ledger_events"),
        "25",
        "nothing is written over the loss"
    );
}

#[test]
fn events_missing_behind_the_head_row_are_a_problem_at_open() {
    let Some((cluster, url)) = database_or_skip("events_missing") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    build(&url, keys.path());
    sql(cluster, &url, "DELETE FROM ledger_events WHERE seq >= 28");
    let ledger = open(&url, keys.path(), 8);
    let reason = ledger.poisoned().expect("the ledger refuses to write");
    assert!(reason.contains("records 30 events"), "{reason}");
    assert_eq!(ledger.head().size, 28);
}

/// Appends `n` keyed events on `ledger` from one thread, and `n` more that each read the
/// counter stream's version and append at exactly that version, retrying on a conflict.
fn load(ledger: &Ledger, name: &str, n: usize) -> std::thread::JoinHandle<Vec<(String, u64)>> {
    let ledger = ledger.clone();
    let name = name.to_owned();
    std::thread::spawn(move || {
        let mut acknowledged = Vec::new();
        for i in 0..n {
            let key = format!("{name}-{i}");
            let receipt = ledger
                .append(keyed(
                    request(
                        &format!("s{}", i % 3),
                        ExpectedVersion::Any,
                        &[key.as_bytes()],
                    ),
                    &key,
                ))
                .expect("an append on a shared database is retried, not refused");
            acknowledged.push((key, receipt.events[0].seq));
            loop {
                let at = ledger.stream_version("counter").unwrap();
                let payload = format!("{name}-counter-{i}");
                match ledger.append(request(
                    "counter",
                    ExpectedVersion::Exact(at),
                    &[payload.as_bytes()],
                )) {
                    Ok(receipt) => {
                        acknowledged.push((payload, receipt.events[0].seq));
                        break;
                    }
                    Err(AppendError::VersionConflict { current, .. }) => assert!(current > at),
                    Err(e) => panic!("{e}"),
                }
            }
        }
        acknowledged
    })
}

#[test]
fn two_writers_on_one_database_follow_each_other_and_their_subscribers_miss_nothing() {
    let Some((cluster, url)) = database_or_skip("two_writers") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let first = open(&url, keys.path(), 9);
    let second = open(&url, keys.path(), 10);
    let mut subscriptions = [first.subscribe(0), second.subscribe(0)];
    let threads: Vec<_> = (0..3)
        .flat_map(|t| {
            [
                load(&first, &format!("a{t}"), 40),
                load(&second, &format!("b{t}"), 40),
            ]
        })
        .collect();
    // One key sent to both at once: written once, the same receipt from both.
    let racing: Vec<_> = [&first, &second]
        .into_iter()
        .map(|ledger| {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                (0..20)
                    .map(|i| {
                        let key = format!("both-{i}");
                        let r = ledger
                            .append(keyed(
                                request("both", ExpectedVersion::Any, &[key.as_bytes()]),
                                &key,
                            ))
                            .unwrap();
                        r.events[0].seq
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut acknowledged: Vec<(String, u64)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let raced: Vec<Vec<u64>> = racing.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        raced[0], raced[1],
        "both ledgers answer a key with its one commit"
    );
    let total: u64 = sql(cluster, &url, "SELECT count(*) FROM ledger_events")
        .parse()
        .unwrap();
    assert_eq!(
        total as usize,
        acknowledged.len() + 20,
        "every append written once"
    );
    assert_eq!(first.stream_version("counter").unwrap(), 240);
    acknowledged.sort_by_key(|(_, seq)| *seq);
    for (payload, seq) in &acknowledged {
        assert_eq!(
            first.get(*seq).unwrap().unwrap().payload,
            payload.as_bytes()
        );
    }
    for (ledger, subscription) in [&first, &second].into_iter().zip(&mut subscriptions) {
        for seq in 0..total {
            let event = subscription.next_blocking().unwrap();
            assert_eq!(event.seq, seq, "in seq order, without a gap");
            assert_eq!(*event, ledger.get(seq).unwrap().unwrap());
        }
        assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
        assert_eq!(ledger.head().size, total);
        let report = ledger.verify_from_scratch(&mut |_, _| {});
        assert!(report.failure.is_none(), "{report:?}");
    }
    // Each writes on after the other's last append, and a checkpoint covers everything.
    let receipt = append_any(&second, "b", b"after").unwrap();
    assert_eq!(receipt.events[0].seq, total);
    assert_eq!(first.checkpoint().unwrap().tree_size, total + 1);
}

#[test]
fn a_held_head_stops_every_other_writer_until_it_is_let_go_and_then_they_write() {
    let Some((_, url)) = database_or_skip("held_head") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = open(&url, keys.path(), 11);
    append_any(&ledger, "s", b"before").unwrap();
    let other = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let held = other
        .hold_head()
        .unwrap()
        .expect("a shared store holds its head");
    assert_eq!(held.head().size, 1);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let ledger = ledger.clone();
        std::thread::spawn(move || {
            let receipt = append_any(&ledger, "s", b"waited");
            done_tx.send(()).unwrap();
            receipt
        })
    };
    assert!(
        done_rx.recv_timeout(Duration::from_millis(700)).is_err(),
        "an append went through while another writer held the head"
    );
    // Let go unused: nothing was written by the hold, and the waiting append is written.
    drop(held);
    let receipt = writer
        .join()
        .unwrap()
        .expect("the waiting append is written");
    assert_eq!(receipt.events[0].seq, 1);
    assert_eq!(other.read_range(0, 10).unwrap().len(), 2);
    // The next hold sees the head the waiting append moved.
    let held = other.hold_head().unwrap().unwrap();
    assert_eq!(held.head(), ledger.head());
    drop(held);
    assert!(ledger.poisoned().is_none());
}

#[test]
fn a_writer_with_another_key_cannot_sign_the_shared_log() {
    let Some((_, url)) = database_or_skip("another_key") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let first = open(&url, keys.path(), 11);
    append_any(&first, "a", b"x").unwrap();
    let second = open(&url, other.path(), 12);
    let reason = second.public_key().unwrap_err();
    assert!(
        reason.contains("not the key the checkpoint log names"),
        "{reason}"
    );
    assert!(second.checkpoint().is_err());
    // Given the same key, a node signs exactly what the first signs.
    let third = open(&url, keys.path(), 13);
    assert_eq!(third.public_key().unwrap(), first.public_key().unwrap());
    let a = first.checkpoint().unwrap();
    let b = third.checkpoint().unwrap();
    assert_eq!((a.tree_size, a.root), (b.tree_size, b.root));
    b.verify(&first.public_key().unwrap()).unwrap();
    if a.time == b.time {
        // Ed25519 signs deterministically: the same statement, the same signature.
        assert_eq!(a.signature, b.signature);
    }
}

#[test]
fn a_newer_schema_is_refused() {
    let Some((cluster, url)) = database_or_skip("a_newer_schema") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    drop(open(&url, keys.path(), 12));
    sql(
        cluster,
        &url,
        "INSERT INTO ledger_schema (version, description) VALUES (99, 'from the future')",
    );
    let err = Ledger::open_postgres(&url, keys.path(), options(13)).unwrap_err();
    assert!(err.to_string().contains("version 99"), "{err}");
}

#[test]
fn a_server_without_fsync_is_not_written_to() {
    if cluster_or_skip("a_server_without_fsync").is_none() {
        return;
    }
    let cluster = PgCluster::start_with(&[("fsync", "off")]).unwrap();
    let url = cluster.create_database().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let ledger = Ledger::open_postgres(&url, keys.path(), options(14)).unwrap();
    let reason = ledger.poisoned().expect("refused");
    assert!(reason.contains("fsync"), "{reason}");
    assert!(append_any(&ledger, "t", b"x").is_err());
    assert_eq!(
        cluster
            .psql_url(&url, "SELECT count(*) FROM ledger_events")
            .unwrap(),
        "0"
    );
}

/// An append is acknowledged only once its commit is durable where the operator asked: with a
/// synchronous standby named, the commit waits for it, even on a server whose default is not to
/// wait (`synchronous_commit = off`). The standby named never connects, so the append must
/// still be waiting when the commit is seen waiting for it (`SyncRep`); naming none releases it.
#[test]
fn an_append_waits_for_the_synchronous_standby_whatever_the_servers_default() {
    if cluster_or_skip("an_append_waits_for_the_synchronous_standby").is_none() {
        return;
    }
    let cluster = PgCluster::start_with(&[("synchronous_commit", "off")]).unwrap();
    let url = cluster.create_database().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let ledger = Ledger::open_postgres(
        &url,
        keys.path(),
        LedgerOptions {
            checkpoint_interval: None,
            ..options(16)
        },
    )
    .unwrap();
    append_any(&ledger, "s", b"before").unwrap();
    let standby = |names: &str| {
        let named = format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'");
        sql(&cluster, &url, &named);
        sql(&cluster, &url, "SELECT pg_reload_conf()");
    };
    standby("nobody");
    // The server's own default does not wait: a commit of another session returns.
    sql(&cluster, &url, "CREATE TABLE not_waited (x int)");
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                   AND application_name = 'research-ledger' AND wait_event = 'SyncRep'";
    std::thread::scope(|s| {
        let append = s.spawn(|| append_any(&ledger, "s", b"waits for the standby"));
        eventually(
            "the append's commit waits for the synchronous standby",
            || {
                assert!(
                    !append.is_finished(),
                    "the append was acknowledged before the standby had it: {:?}",
                    ledger.head()
                );
                sql(&cluster, &url, waiting) == "1"
            },
        );
        assert!(
            !append.is_finished(),
            "acknowledged while its commit waited"
        );
        standby("");
        let receipt = append.join().unwrap().expect("acknowledged once released");
        assert_eq!(receipt.events[0].seq, 1);
    });
}

#[test]
fn a_server_crash_under_load_loses_no_acknowledged_append() {
    if cluster_or_skip("a_server_crash").is_none() {
        return;
    }
    let cluster = PgCluster::start().unwrap();
    let url = cluster.create_database().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let ledger = Ledger::open_postgres(
        &url,
        keys.path(),
        LedgerOptions {
            checkpoint_interval: None,
            ..options(15)
        },
    )
    .unwrap();
    let acknowledged = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let writers: Vec<_> = (0..8)
        .map(|t| {
            let ledger = ledger.clone();
            let acknowledged = Arc::clone(&acknowledged);
            std::thread::spawn(move || {
                for i in 0.. {
                    let key = format!("w{t}-{i}");
                    match ledger.append(keyed(
                        request(&format!("s{t}"), ExpectedVersion::Any, &[key.as_bytes()]),
                        &key,
                    )) {
                        Ok(receipt) => {
                            acknowledged
                                .lock()
                                .unwrap()
                                .insert(key, receipt.events[0].seq);
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while acknowledged.lock().unwrap().len() < 200 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.crash().unwrap();
    for w in writers {
        w.join().unwrap();
    }
    drop(ledger);
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(
        acknowledged.len() >= 200,
        "{} acknowledged",
        acknowledged.len()
    );
    cluster.restart().unwrap();
    cluster.wait_ready(Duration::from_secs(30)).unwrap();
    let ledger = Ledger::open_postgres(&url, keys.path(), options(16)).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    for (key, seq) in &acknowledged {
        let event = ledger
            .get(*seq)
            .unwrap()
            .expect("an acknowledged event is there");
        assert_eq!(event.payload, key.as_bytes());
    }
    let stored: usize = cluster
        .psql_url(&url, "SELECT count(*) FROM ledger_events")
        .unwrap()
        .parse()
        .unwrap();
    assert!(stored >= acknowledged.len());
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
}

#[test]
fn a_doctored_checkpoint_root_in_the_database_fails_verification() {
    let Some((cluster, url)) = database_or_skip("a_doctored_checkpoint_root") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    build(&url, keys.path());
    // Entry 1 introduces the key; entry 2 is the checkpoint of 30 events.
    let entry = sql(
        cluster,
        &url,
        "SELECT entry FROM ledger_checkpoints WHERE n = 2",
    );
    let mut doctored: serde_json::Value = serde_json::from_str(&entry).unwrap();
    doctored["root"] = serde_json::Value::String("00".repeat(32));
    sql(
        cluster,
        &url,
        &format!(
            "UPDATE ledger_checkpoints SET entry = '{}' WHERE n = 2",
            doctored.to_string().replace('\'', "''")
        ),
    );
    let report = open(&url, keys.path(), 17).verify_from_scratch(&mut |_, _| {});
    let failure = report
        .failure
        .expect("a doctored checkpoint fails verification");
    assert!(failure.problem.contains("entry 2"), "{failure:?}");
}

#[test]
fn a_rewritten_event_with_its_hash_recomputed_is_named_by_the_stored_tree() {
    let Some((cluster, url)) = database_or_skip("a_rewritten_event") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    build(&url, keys.path());
    let original = open(&url, keys.path(), 18)
        .read_range(6, 1)
        .unwrap()
        .remove(0);
    let mut forged = original.envelope.clone();
    forged.payload = b"rewritten".to_vec();
    let (bytes, hash) = forged.seal();
    sql(
        cluster,
        &url,
        &format!(
            "UPDATE ledger_events SET bytes = decode('{}', 'hex'), hash = decode('{}', 'hex') \
             WHERE seq = 6",
            hex::encode(&bytes),
            hex::encode(hash.as_bytes())
        ),
    );
    let report = open(&url, keys.path(), 19).verify_from_scratch(&mut |_, _| {});
    let failure = report.failure.expect("rewritten");
    assert_eq!(failure.seq, 6, "{failure:?}");
    assert!(failure.problem.contains("rewritten"), "{failure:?}");
}

#[test]
fn a_slow_subscriber_catches_up_from_the_database_and_misses_nothing() {
    let Some((_, url)) = database_or_skip("a_slow_subscriber") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = Ledger::open_postgres(
        &url,
        keys.path(),
        LedgerOptions {
            limits: ledger::Limits {
                subscription_buffer_events: 4,
                ..ledger::Limits::default()
            },
            ..options(20)
        },
    )
    .unwrap();
    let mut sub = ledger.subscribe(0);
    for i in 0..150u32 {
        ledger
            .append(request("t", ExpectedVersion::Any, &[&i.to_le_bytes()]))
            .unwrap();
    }
    let mut seen = Vec::new();
    while let Some(event) = sub.try_next().unwrap() {
        seen.push(event.seq);
    }
    assert_eq!(seen, (0..150).collect::<Vec<_>>());
}

#[test]
fn a_read_only_open_of_an_empty_database_reads_an_empty_ledger_and_creates_nothing() {
    let Some((cluster, url)) = database_or_skip("a_read_only_open_of_an_empty_database") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let read_only = LedgerOptions {
        read_only: true,
        ..options(15)
    };
    let reader = Ledger::open_postgres(&url, keys.path(), read_only.clone()).unwrap();
    assert_eq!(reader.head().size, 0);
    assert!(reader.verify_from_scratch(&mut |_, _| {}).failure.is_none());
    assert!(append_any(&reader, "t", b"x").is_err());
    drop(reader);
    assert_eq!(
        sql(
            cluster,
            &url,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ),
        "0",
        "a read-only open creates no table"
    );
    assert!(!keys.path().join("signing.key").exists());
    // Once a writer made the ledger, a read-only open reads what it wrote.
    let writer = open(&url, keys.path(), 16);
    append_any(&writer, "t", b"x").unwrap();
    drop(writer);
    let reader = Ledger::open_postgres(&url, keys.path(), read_only).unwrap();
    assert_eq!(reader.head().size, 1);
}

#[test]
fn only_the_first_key_waits_for_an_empty_log_and_a_later_introduction_is_kept() {
    let Some((_, url)) = database_or_skip("later_key") else {
        return;
    };
    let storage = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let introduce = |seed: u8, reason: &str| ledger::CheckpointEntry::KeyIntroduced {
        public_key: ledger::ledger_proof::SigningKey::from_secret_bytes(&[seed; 32]).public_key(),
        tree_size: 0,
        time: ledger::ledger_proof::Timestamp::from_datetime(chrono::Utc::now()).unwrap(),
        reason: reason.into(),
        origin: "example.org/log".into(),
    };
    assert!(storage.append_first_key(&introduce(1, "first")).unwrap());
    // Another node's first key finds the log taken...
    assert!(!storage.append_first_key(&introduce(2, "racing")).unwrap());
    // ...but a key introduced where the chain of keys breaks (a restore without the old key)
    // is an entry like any other.
    storage
        .append_checkpoint_entry(&introduce(3, "the chain breaks here"))
        .unwrap();
    let entries = storage.checkpoint_entries().unwrap();
    assert_eq!(entries.len(), 2, "{entries:?}");
    match &entries[1] {
        ledger::CheckpointEntry::KeyIntroduced { reason, .. } => {
            assert_eq!(reason, "the chain breaks here");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn content_commits_with_the_events_that_cite_it_or_not_at_all() {
    let Some((cluster, url)) = database_or_skip("content_commits_with_the_events") else {
        return;
    };
    // A database an earlier version wrote: its content store made the table, and a blob in it.
    sql(
        cluster,
        &url,
        "CREATE TABLE content_blobs (hash bytea PRIMARY KEY CHECK (length(hash) = 32), \
         bytes bytea NOT NULL)",
    );
    let old = b"a text stored before the ledger kept content".to_vec();
    sql(
        cluster,
        &url,
        &format!(
            "INSERT INTO content_blobs VALUES ('\\x{}', '\\x{}')",
            content_hash(&old),
            hex_of(&old)
        ),
    );
    let keys = tempfile::tempdir().unwrap();
    let ledger = open(&url, keys.path(), 21);
    assert_eq!(ledger.blob(&content_hash(&old)).unwrap(), Some(old));

    let text = b"the full text of an evidence item".to_vec();
    let mut req = request("s", ExpectedVersion::Any, &[b"cites it"]);
    req.content = vec![text.clone(), text.clone()];
    ledger.append(req.clone()).unwrap();
    ledger.append(req).unwrap();
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM content_blobs"),
        "2"
    );
    let hash = content_hash(&text);
    assert_eq!(ledger.blob(&hash).unwrap(), Some(text.clone()));

    // Damaged in the table: refused on read, and replaced by the next append carrying it.
    sql(cluster, &url, "UPDATE content_blobs SET bytes = 'x'");
    assert!(matches!(
        ledger.blob(&hash),
        Err(ledger::ReadError::ContentDamaged { .. })
    ));
    let mut again = request("s", ExpectedVersion::Any, &[b"cites it again"]);
    again.content = vec![text.clone()];
    ledger.append(again).unwrap();
    assert_eq!(ledger.blob(&hash).unwrap(), Some(text));
    drop(ledger);

    // A group whose transaction fails writes neither its events nor its content.
    let storage = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let head = storage.head();
    let lost = Blob::new(b"content of a group that never commits".to_vec());
    let stale = Commit {
        stream: "s".into(),
        base_version: 0,
        events: vec![SealedEvent {
            seq: head.size,
            stream_version: 1,
            event_id: uuid::Uuid::from_u128(7),
            prev_hash: head.last_hash,
            hash: Digest([7; 32]),
            bytes: Arc::from(&b"not a sealed event"[..]),
        }],
        idempotency: None,
    };
    let tree = TreeGrowth {
        nodes: Vec::new(),
        size: head.size + 1,
    };
    assert!(
        storage
            .append(&[stale], std::slice::from_ref(&lost), &tree)
            .is_err()
    );
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM ledger_events"),
        head.size.to_string()
    );
    assert!(!storage.has_blob(&lost.hash).unwrap());
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM content_blobs"),
        "2"
    );
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One commit of one made-up event on `head`, to drive the storage backend directly: the
/// backend stores bytes and hashes as given.
fn made_up_commit(head: ledger::storage::ChainHead, stream: &str, base: u64) -> Commit {
    let hash =
        Digest(*blake3::hash(&[head.last_hash.as_bytes(), stream.as_bytes()].concat()).as_bytes());
    Commit {
        stream: stream.into(),
        base_version: base,
        events: vec![SealedEvent {
            seq: head.size,
            stream_version: base + 1,
            event_id: uuid::Uuid::from_bytes(hash.as_bytes()[..16].try_into().unwrap()),
            prev_hash: head.last_hash,
            hash,
            bytes: Arc::from(&hash.as_bytes()[..]),
        }],
        idempotency: None,
    }
}

fn tree(size: u64) -> TreeGrowth {
    TreeGrowth {
        nodes: Vec::new(),
        size,
    }
}

#[test]
fn a_group_planned_on_a_moved_head_or_stream_writes_nothing_and_the_writer_writes_on() {
    let Some((cluster, url)) = database_or_skip("a_group_planned_on_a_moved_head") else {
        return;
    };
    let ours = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let theirs = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let start = ours.head();
    theirs
        .append(&[made_up_commit(start, "a", 0)], &[], &tree(1))
        .unwrap();
    // Planned on the head before theirs: refused whole, in the same round trip as its commit.
    let stale = made_up_commit(start, "b", 0);
    let err = ours.append(&[stale], &[], &tree(1)).unwrap_err();
    assert!(matches!(err, StorageError::HeadMoved), "{err}");
    let count = |table: &str| sql(cluster, &url, &format!("SELECT count(*) FROM {table}"));
    assert_eq!(count("ledger_events"), "1");
    assert_eq!(sql(cluster, &url, "SELECT size FROM ledger_head"), "1");
    // On the true head but on a stream version that is not the stream's: refused whole.
    let head = theirs.head();
    let err = ours
        .append(&[made_up_commit(head, "a", 0)], &[], &tree(2))
        .unwrap_err();
    assert!(matches!(err, StorageError::HeadMoved), "{err}");
    assert_eq!(count("ledger_events"), "1");
    // The session was left usable, with no transaction open: the right group is written.
    ours.append(&[made_up_commit(head, "a", 1)], &[], &tree(2))
        .unwrap();
    assert_eq!(count("ledger_events"), "2");
    assert_eq!(ours.head().size, 2);
    // On the true head but on a version the stream never reached, or on a stream that holds
    // nothing at all: refused whole too (no event past the base, none at it either).
    let head = ours.head();
    for (stream, base) in [("a", 5), ("a", 3), ("never-written", 1)] {
        let err = ours
            .append(&[made_up_commit(head, stream, base)], &[], &tree(3))
            .unwrap_err();
        assert!(
            matches!(err, StorageError::HeadMoved),
            "{stream} at {base}: {err}"
        );
    }
    assert_eq!(count("ledger_events"), "2");
    assert_eq!(ours.head().size, 2);
    assert_eq!(
        sql(
            cluster,
            &url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state LIKE 'idle in transaction%'"
        ),
        "0"
    );
}

/// The generic plan of the stream check `ledger_advance_head` runs, as the function holds it:
/// its condition read back from the function's source in the database, prepared with the
/// group's arrays as parameters.
fn stream_check_plan(cluster: &PgCluster, url: &str) -> String {
    sql(
        cluster,
        url,
        r"CREATE FUNCTION pg_temp.stream_check_plan() RETURNS SETOF text LANGUAGE plpgsql AS $f$
          DECLARE
            body text := (SELECT prosrc FROM pg_proc WHERE proname = 'ledger_advance_head');
            check_sql text := substring(body FROM
                'IF EXISTS \((.*)\)\s*THEN\s*RAISE EXCEPTION ''a stream');
          BEGIN
            check_sql := replace(replace(check_sql, 'p_streams', '$1'), 'p_bases', '$2');
            EXECUTE format('PREPARE stream_check(text[], bigint[]) AS %s', check_sql);
            SET LOCAL plan_cache_mode = force_generic_plan;
            RETURN QUERY EXECUTE
                'EXPLAIN EXECUTE stream_check(ARRAY[''a'', ''b''], ARRAY[1, 0]::bigint[])';
          END $f$;
          SELECT * FROM pg_temp.stream_check_plan();",
    )
}

#[test]
fn the_stream_check_probes_the_index_for_each_stream_even_on_a_new_database() {
    let Some((cluster, url)) = database_or_skip("the_stream_check_probes_the_index") else {
        return;
    };
    // A new database: the table is empty when the function's plan is made, and the plan is
    // kept as the table grows, so it must not be one that reads the whole table.
    drop(PostgresStorage::open(&url, PostgresOptions::default()).unwrap());
    let plan = stream_check_plan(cluster, &url);
    assert!(plan.contains("SubPlan"), "{plan}");
    assert!(
        plan.contains("Index Only Scan using ledger_events_stream_stream_version_key"),
        "{plan}"
    );
    assert!(!plan.contains("hashed SubPlan"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
}

#[test]
fn a_writer_behind_another_plans_again_under_the_lock_and_answers_no_stale_conflict() {
    let Some((_, url)) = database_or_skip("a_writer_behind_another") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let first = open(&url, keys.path(), 21);
    let second = open(&url, keys.path(), 22);
    let mut live = second.subscribe(0);
    for round in 0..20u64 {
        // `second` last saw the stream at version 2 * round + 1, which `first` moves on: its
        // own view says conflict, the database says the expected version is the stream's.
        let before = first
            .append(request("s", ExpectedVersion::Exact(2 * round), &[b"first"]))
            .unwrap();
        let after = second
            .append(request(
                "s",
                ExpectedVersion::Exact(2 * round + 1),
                &[b"second"],
            ))
            .expect("written on the stream's true version");
        assert_eq!(after.events[0].seq, before.events[0].seq + 1);
        // A new stream another writer made: its version is read past this writer's head.
        let stream = format!("new-{round}");
        first
            .append(request(&stream, ExpectedVersion::Exact(0), &[b"made"]))
            .unwrap();
        let receipt = second
            .append(request(&stream, ExpectedVersion::Any, &[b"then"]))
            .unwrap();
        assert_eq!(receipt.stream_version, 2);
    }
    assert!(second.poisoned().is_none(), "{:?}", second.poisoned());
    for seq in 0..second.head().size {
        assert_eq!(live.next_blocking().unwrap().seq, seq, "in order, no gap");
    }
    assert!(second.verify_from_scratch(&mut |_, _| {}).failure.is_none());
}

#[test]
fn writer_sessions_killed_under_load_lose_no_acknowledged_append() {
    let Some((cluster, url)) = database_or_skip("writer_sessions_killed") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = Ledger::open_postgres(
        &url,
        keys.path(),
        LedgerOptions {
            checkpoint_interval: None,
            ..options(23)
        },
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..6)
        .map(|w| {
            let ledger = ledger.clone();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) || i < 5 {
                    let key = format!("w{w}-{i}");
                    // Retried with its key until acknowledged: an unknown outcome is learned.
                    let receipt = loop {
                        let r = keyed(request("s", ExpectedVersion::Any, &[key.as_bytes()]), &key);
                        match ledger.append(r) {
                            Ok(receipt) => break receipt,
                            Err(AppendError::Storage(_)) => {
                                std::thread::sleep(Duration::from_millis(5))
                            }
                            Err(e) => panic!("{e}"),
                        }
                    };
                    acknowledged.push((key, receipt.events[0].seq));
                    i += 1;
                }
                acknowledged
            })
        })
        .collect();
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(60));
        sql(
            cluster,
            &url,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND application_name = 'research-ledger'",
        );
    }
    stop.store(true, Ordering::Relaxed);
    let acknowledged: Vec<(String, u64)> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    let total: usize = sql(cluster, &url, "SELECT count(*) FROM ledger_events")
        .parse()
        .unwrap();
    assert_eq!(
        total,
        acknowledged.len(),
        "every append written exactly once"
    );
    for (key, seq) in &acknowledged {
        assert_eq!(ledger.get(*seq).unwrap().unwrap().payload, key.as_bytes());
    }
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
    append_any(&ledger, "after", b"x").expect("the ledger writes on");
}

/// Every session the ledger holds cut by the server, as a failover or an administrator cuts
/// them, again and again under reads of every kind: each read that meets a cut session answers
/// from a new one rather than failing; the writer goes on as before.
#[test]
fn reads_that_meet_cut_sessions_answer_from_new_ones() {
    let Some((cluster, url)) = database_or_skip("reads_that_meet_cut_sessions") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = Ledger::open_postgres(
        &url,
        keys.path(),
        LedgerOptions {
            checkpoint_interval: None,
            ..options(41)
        },
    )
    .unwrap();
    let receipts: Vec<ledger::Receipt> = (0..12u32)
        .map(|i| append_any(&ledger, &format!("s{}", i % 3), &i.to_le_bytes()).unwrap())
        .collect();
    let key = "a-key";
    let keyed_seq = ledger
        .append(keyed(request("k", ExpectedVersion::Any, &[b"keyed"]), key))
        .unwrap()
        .events[0]
        .seq;
    let cut = || {
        let cut: u32 = sql(
            cluster,
            &url,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND application_name = 'research-ledger'",
        )
        .parse()
        .unwrap();
        assert!(cut >= 1, "the ledger's sessions were cut: {cut}");
    };
    // Readers on four threads, every kind of read over and over, while every session is cut
    // ten times: a read in flight, or one that meets a session whose connection has not yet
    // noticed the cut, runs again on a new one. Not one read fails.
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let (ledger, receipts, stop) = (ledger.clone(), receipts.clone(), Arc::clone(&stop));
            std::thread::spawn(move || -> usize {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let receipt = &receipts[(reads + r) % receipts.len()];
                    let event = &receipt.events[0];
                    let by_seq = ledger.get(event.seq).expect("by seq");
                    assert_eq!(by_seq.map(|e| e.hash), Some(event.hash));
                    let by_id = ledger.find_event_id(event.event_id).expect("by id");
                    assert_eq!(by_id.map(|e| e.hash), Some(event.hash));
                    let by_hash = ledger.find_hash(&event.hash).expect("by hash");
                    assert_eq!(by_hash.map(|e| e.seq), Some(event.seq));
                    let in_stream = ledger
                        .read_stream(&receipt.stream, receipt.stream_version, 1)
                        .expect("a stream");
                    assert_eq!(in_stream.first().map(|e| e.hash), Some(event.hash));
                    ledger.root_at(event.seq + 1).expect("a root");
                    let record = ledger.idempotency(key).expect("a key");
                    assert_eq!(record.map(|r| r.first_seq), Some(keyed_seq));
                    assert_eq!(ledger.stream_version("s1").expect("a version"), 4);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(80));
        cut();
    }
    std::thread::sleep(Duration::from_millis(80));
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        let rounds = reader.join().expect("every read answered");
        assert!(rounds > 0, "the reader read");
    }
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    // The writer's own session was cut too: it connects anew and writes on.
    let mut wrote = None;
    for _ in 0..3 {
        match append_any(&ledger, "after", b"x") {
            Ok(receipt) => {
                wrote = Some(receipt);
                break;
            }
            Err(AppendError::Storage(_)) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(wrote.is_some(), "the ledger writes on after the cut");
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
}

/// A read needs a new session after a cut, and that session is cut too while it is still being
/// set up (its statements prepared): nothing was done on it, so it is opened once more and the
/// read answers. The setup is held at the events' table by another transaction's lock, so the
/// cut lands exactly there.
#[test]
fn a_session_cut_while_it_is_set_up_is_opened_again() {
    let Some((cluster, url)) = database_or_skip("a_session_cut_while_it_is_set_up") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    // No poll for other nodes' appends: no session but the read's is opened behind its back.
    let ledger = Ledger::open_postgres(&url, keys.path(), notified_only(43)).unwrap();
    let receipt = append_any(&ledger, "s", b"one").unwrap();
    let event = receipt.events[0].clone();
    let ours = "FROM pg_stat_activity WHERE datname = current_database() \
                AND application_name = 'research-ledger'";
    sql(
        cluster,
        &url,
        &format!("SELECT count(pg_terminate_backend(pid)) {ours}"),
    );
    eventually(
        "every session of the ledger is gone, but its listener's",
        || {
            sql(
                cluster,
                &url,
                &format!("SELECT count(*) {ours} AND query NOT LIKE 'LISTEN%'"),
            ) == "0"
        },
    );
    let found = std::thread::scope(|s| {
        let holder = s.spawn(|| {
            cluster.psql_url(
                &url,
                "BEGIN; LOCK TABLE ledger_events IN ACCESS EXCLUSIVE MODE; \
                 SELECT pg_sleep(2); COMMIT;",
            )
        });
        eventually("the lock is held", || {
            sql(
                cluster,
                &url,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event = 'PgSleep' AND query LIKE 'BEGIN; LOCK TABLE%'",
            ) == "1"
        });
        let reader = s.spawn(|| ledger.find_event_id(event.event_id));
        // Sessions being set up wait at the events' table, preparing its insert (other
        // sessions of the ledger reconnect too); the read is among them, as nothing else of
        // it could wait there. All of them are cut, once.
        let waiting = format!("{ours} AND wait_event_type = 'Lock'");
        let setting_up = format!("{waiting} AND query LIKE 'INSERT INTO ledger_events %'");
        eventually("a new session's setup waits for the lock", || {
            sql(cluster, &url, &format!("SELECT count(*) {setting_up}")) != "0"
        });
        std::thread::sleep(Duration::from_millis(300));
        let cut: u32 = sql(
            cluster,
            &url,
            &format!("SELECT count(pg_terminate_backend(pid)) {waiting}"),
        )
        .parse()
        .unwrap();
        assert!(cut >= 1, "sessions cut while they were set up: {cut}");
        holder.join().unwrap().unwrap();
        reader.join().unwrap()
    });
    let found = found.expect("the read answers from a session opened again");
    assert_eq!(found.map(|e| e.hash), Some(event.hash));
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
}

#[test]
fn a_writer_paused_while_it_holds_the_head_loses_it_and_the_others_write_on() {
    let Some((_, url)) = database_or_skip("a_writer_paused") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let ledger = open(&url, keys.path(), 31);
    append_any(&ledger, "s", b"before").unwrap();
    let paused = PostgresStorage::open(
        &url,
        PostgresOptions {
            idle_in_transaction: Duration::from_secs(1),
            ..PostgresOptions::default()
        },
    )
    .unwrap();
    // Takes the head row's lock and then does nothing, as a node stopped mid-group does.
    let held = paused.hold_head().unwrap().unwrap();
    let held_head = held.head();
    let started = std::time::Instant::now();
    let receipt = append_any(&ledger, "s", b"while paused")
        .expect("written once the paused session lost the lock");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the append waited for the lock the paused session held"
    );
    assert_eq!(receipt.events[0].seq, 1);
    // The paused session's group is refused: its transaction ended with its session.
    let stale = made_up_commit(held_head, "p", 0);
    assert!(held.append(&[stale], &[], &tree(2)).is_err());
    // It takes the lock again on a new session, at the head the others moved.
    let again = paused.hold_head().unwrap().unwrap();
    assert_eq!(again.head(), ledger.head());
    drop(again);
    assert_eq!(append_any(&ledger, "s", b"after").unwrap().events[0].seq, 2);
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
}

/// Options whose poll for other ledgers' appends never fires within a test: only a
/// notification makes the writer follow.
fn notified_only(seed: u64) -> LedgerOptions {
    LedgerOptions {
        follow_every: Duration::ZERO,
        checkpoint_interval: None,
        ..options(seed)
    }
}

#[test]
fn a_commit_on_one_ledger_wakes_the_other_without_its_poll() {
    let Some((cluster, url)) = database_or_skip("a_commit_wakes_the_other") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let first = Ledger::open_postgres(&url, keys.path(), notified_only(41)).unwrap();
    let second = Ledger::open_postgres(&url, keys.path(), notified_only(42)).unwrap();
    let mut live = second.subscribe(0);
    let next = |live: &mut ledger::Subscription| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(event) = live.try_next().unwrap() {
                return event;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the other ledger's commit reached this one without a poll"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    for i in 0..5u64 {
        let receipt = append_any(&first, "s", format!("{i}").as_bytes()).unwrap();
        let event = next(&mut live);
        assert_eq!(event.seq, receipt.events[0].seq);
    }
    // The listening sessions are cut: a commit made while none listens is read once the
    // listener is back, and later ones wake it again.
    sql(
        cluster,
        &url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    );
    for i in 5..8u64 {
        let receipt = append_any(&first, "s", format!("{i}").as_bytes()).unwrap();
        assert_eq!(next(&mut live).seq, receipt.events[0].seq);
    }
    assert!(second.poisoned().is_none(), "{:?}", second.poisoned());
}

/// Copies the signing key of one node's key folder into another's, as an operator does.
fn give_key(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::copy(from.join("signing.key"), to.join("signing.key")).unwrap();
}

/// Waits up to ten seconds for `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_rotation_on_one_node_retires_the_key_on_the_other_until_it_is_given_the_new_one() {
    let Some((_, url)) = database_or_skip("rotation_across_nodes") else {
        return;
    };
    let (a_keys, b_keys) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // B opens first and leads the periodic checkpoints (every second); A has the same key.
    let b = open(&url, b_keys.path(), 21);
    append_any(&b, "s", b"first").unwrap();
    give_key(b_keys.path(), a_keys.path());
    let a = open(&url, a_keys.path(), 22);
    let old = a.public_key().unwrap();
    assert_eq!(b.public_key().unwrap(), old);
    b.checkpoint().unwrap();
    let old_key_file = std::fs::read(b_keys.path().join("signing.key")).unwrap();
    // Both nodes have served the checkpoint once, so what follows reaches their reads as
    // entries another node appended after.
    assert_eq!(a.checkpoint_note().unwrap(), b.checkpoint_note().unwrap());
    assert!(a.key_rotations().unwrap().is_empty());

    let rotation = a.rotate_key().unwrap();
    let new = rotation.new_public_key;
    assert_ne!(new, old);
    assert_eq!(a.public_key().unwrap(), new);

    // B finds the rotation by itself within a checkpoint interval: it says why it cannot sign,
    // and an explicit checkpoint through it is refused, writing nothing.
    eventually("B notices the rotation", || b.public_key().is_err());
    let reason = b.public_key().unwrap_err();
    assert!(
        reason.contains("not the key the checkpoint log names"),
        "{reason}"
    );
    assert!(
        reason.contains("DATA_DIR/ledger/keys/signing.key"),
        "{reason}"
    );
    let entries = a.checkpoint_entries().unwrap().len();
    let err = b.checkpoint().unwrap_err();
    assert!(
        matches!(err, ledger::SigningError::KeyRetired(_)),
        "{err:?}"
    );
    assert_eq!(a.checkpoint_entries().unwrap().len(), entries);

    // The lead passes to A, which signs the periodic checkpoint of what B writes, with the new
    // key.
    let receipt = append_any(&b, "s", b"after the rotation").unwrap();
    let covered = receipt.events[0].seq + 1;
    eventually("A writes the periodic checkpoint with the new key", || {
        a.checkpoint_entries().unwrap().iter().any(|e| {
            matches!(e, ledger::CheckpointEntry::Checkpoint(c)
                if c.tree_size >= covered && c.verify(&new).is_ok())
        })
    });

    // Nothing after the rotation is signed by the old key, and the log verifies.
    let log = a.checkpoint_entries().unwrap();
    let at = log
        .iter()
        .position(|e| matches!(e, ledger::CheckpointEntry::Rotation(_)))
        .unwrap();
    for entry in &log[at + 1..] {
        if let ledger::CheckpointEntry::Checkpoint(c) = entry {
            c.verify(&new).unwrap();
        }
    }
    assert!(first_bad_seq(&a).is_none());

    // Given the new key, B takes it without a restart and signs again.
    give_key(a_keys.path(), b_keys.path());
    eventually("B takes the new key", || b.public_key().is_ok());
    assert_eq!(b.public_key().unwrap(), new);
    append_any(&b, "s", b"signed again").unwrap();
    b.checkpoint().unwrap().verify(&new).unwrap();

    // Whichever node wrote the rotation and the checkpoints, both serve the same latest
    // checkpoint, with the rotation that lets an auditor check it from the first key.
    let latest = b.latest_checkpoint().unwrap().unwrap();
    assert_eq!(a.latest_checkpoint().unwrap(), Some(latest.clone()));
    latest.verify(&new).unwrap();
    assert_eq!(a.key_rotations().unwrap(), vec![rotation.clone()]);
    assert_eq!(b.key_rotations().unwrap(), vec![rotation.clone()]);
    let note = a.checkpoint_note().unwrap().unwrap();
    assert_eq!(b.checkpoint_note().unwrap().as_deref(), Some(note.as_str()));
    assert!(
        note.starts_with(&latest.body()),
        "{note} does not serve {latest:?}"
    );

    // A node started with the retired key is refused its key, as at any open.
    let stale = tempfile::tempdir().unwrap();
    std::fs::write(stale.path().join("signing.key"), &old_key_file).unwrap();
    let c = open(&url, stale.path(), 23);
    let reason = c.public_key().unwrap_err();
    assert!(
        reason.contains("not the key the checkpoint log names"),
        "{reason}"
    );
    assert!(c.checkpoint().is_err());
    assert!(a.poisoned().is_none());
}

#[test]
fn two_nodes_rotating_at_once_record_one_rotation() {
    let Some((_, url)) = database_or_skip("rotation_race") else {
        return;
    };
    let (a_keys, b_keys) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = open(&url, a_keys.path(), 31);
    append_any(&a, "s", b"x").unwrap();
    give_key(a_keys.path(), b_keys.path());
    let b = open(&url, b_keys.path(), 32);
    let first = a.rotate_key().unwrap();
    // B still holds the old key: its rotation would hand over from a retired key.
    let err = b.rotate_key().unwrap_err();
    assert!(
        matches!(err, ledger::SigningError::KeyRetired(_)),
        "{err:?}"
    );
    let rotations = a
        .checkpoint_entries()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, ledger::CheckpointEntry::Rotation(_)))
        .count();
    assert_eq!(rotations, 1);
    // B's staged key of the rotation that never happened is gone; its key folder is as it was.
    assert!(!b_keys.path().join("signing.key.new").exists());
    assert!(b.public_key().is_err());
    assert_eq!(a.public_key().unwrap(), first.new_public_key);
    assert!(first_bad_seq(&a).is_none());
}

/// The event hashes of the database, in seq order: the leaves of its Merkle tree.
fn event_hashes(cluster: &PgCluster, url: &str) -> Vec<Digest> {
    sql(
        cluster,
        url,
        "SELECT encode(hash, 'hex') FROM ledger_events ORDER BY seq",
    )
    .lines()
    .map(|line| {
        let bytes: [u8; 32] = hex::decode(line).unwrap().try_into().unwrap();
        Digest(bytes)
    })
    .collect()
}

/// The tree of `leaves`, computed here rather than read from any store.
fn reference_tree(leaves: &[Digest]) -> MemoryTree<Sha256> {
    let mut tree = MemoryTree::new(Sha256);
    for leaf in leaves {
        tree.push(leaf.as_bytes()).unwrap();
    }
    tree
}

/// Every perfect subtree of the first `size` leaves of `reference`.
fn perfect_nodes(reference: &MemoryTree<Sha256>, size: u64) -> Vec<(u8, u64, Digest)> {
    let mut nodes = Vec::new();
    for level in 0..64u8 {
        if size >> level == 0 {
            break;
        }
        for index in 0..(size >> level) {
            nodes.push((level, index, reference.perfect_node(level, index).unwrap()));
        }
    }
    nodes
}

/// Puts a database this build wrote back into the layout of schema version 3: the Merkle
/// nodes of the first `merkle_size` leaves one a row in `ledger_merkle_nodes` (the table as
/// migration 1 made it), computed from the event hashes, not read from the packed rows, and
/// the migrations from 4 on forgotten.
fn back_to_schema_3(cluster: &PgCluster, url: &str, merkle_size: u64) {
    let reference = reference_tree(&event_hashes(cluster, url));
    sql(
        cluster,
        url,
        &format!(
            "DROP TABLE ledger_merkle_groups; \
             CREATE TABLE ledger_merkle_nodes ( \
                 level smallint NOT NULL, \
                 idx   bigint   NOT NULL, \
                 hash  bytea    NOT NULL CHECK (length(hash) = 32), \
                 PRIMARY KEY (level, idx)); \
             UPDATE ledger_head SET merkle_size = {merkle_size} WHERE id = 1; \
             DELETE FROM ledger_schema WHERE version >= 4"
        ),
    );
    // In parts: one psql argument holds at most 128 KiB.
    for part in perfect_nodes(&reference, merkle_size).chunks(500) {
        let values: Vec<String> = part
            .iter()
            .map(|(level, index, hash)| {
                format!("({level}, {index}, '\\x{}')", hex_of(hash.as_bytes()))
            })
            .collect();
        sql(
            cluster,
            url,
            &format!(
                "INSERT INTO ledger_merkle_nodes (level, idx, hash) VALUES {}",
                values.join(", ")
            ),
        );
    }
}

/// What the ledger proves agrees with the tree recomputed from the events: the root of every
/// tree size up to the head, inclusion proofs of events in each checkpoint's tree and
/// consistency proofs between the checkpoints (each verified against the checkpoint's
/// signature), and a verification from the first event.
fn assert_proves(ledger: &Ledger, reference: &MemoryTree<Sha256>) {
    let size = ledger.head().size;
    assert_eq!(reference.size(), size);
    for n in 1..=size {
        assert_eq!(
            ledger.root_at(n).unwrap(),
            reference.root_at(n).unwrap(),
            "root of {n}"
        );
    }
    let key = ledger.public_key().unwrap();
    let sizes: Vec<u64> = ledger
        .checkpoints()
        .unwrap()
        .iter()
        .map(|c| c.tree_size)
        .collect();
    assert!(sizes.len() >= 2, "{sizes:?}");
    for &tree_size in &sizes {
        for seq in (0..tree_size).step_by(37).chain([tree_size - 1]) {
            let proof = ledger.inclusion_proof(seq, Some(tree_size)).unwrap();
            ledger::ledger_proof::verify_proof_file(
                &ledger::ledger_proof::ProofFile::Inclusion(proof),
                &key,
            )
            .unwrap();
        }
    }
    for pair in sizes.windows(2) {
        let proof = ledger.consistency_proof(pair[0], pair[1]).unwrap();
        ledger::ledger_proof::verify_proof_file(
            &ledger::ledger_proof::ProofFile::Consistency(proof),
            &key,
        )
        .unwrap();
    }
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.failure.is_none(), "{report:?}");
    assert_eq!(report.size, size);
}

/// Every perfect subtree of the tree of `size` leaves, as `storage` reads it.
fn assert_every_node(storage: &PostgresStorage, reference: &MemoryTree<Sha256>, size: u64) {
    for (level, index, hash) in perfect_nodes(reference, size) {
        assert_eq!(
            storage.merkle_node(level, index).unwrap(),
            Some(hash),
            "node ({level}, {index})"
        );
    }
}

fn read_only_storage(url: &str) -> PostgresStorage {
    PostgresStorage::open(
        url,
        PostgresOptions {
            read_only: true,
            ..PostgresOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn a_database_at_schema_3_is_read_as_it_is_and_migrated_by_a_writer_and_still_proves() {
    let Some((cluster, url)) = database_or_skip("a_database_at_schema_3") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    {
        let ledger = open(&url, keys.path(), 30);
        // Appends of different sizes, so the tree grows in groups of 1 to 200 events, some
        // of them across a multiple of 256 leaves; checkpoints along the way.
        for (i, n) in [1usize, 3, 200, 1, 60, 17, 120, 1, 1, 90]
            .into_iter()
            .enumerate()
        {
            let payloads: Vec<Vec<u8>> = (0..n).map(|j| format!("{i}-{j}").into_bytes()).collect();
            let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            ledger
                .append(request("s", ExpectedVersion::Any, &payloads))
                .unwrap();
            if i % 3 == 2 {
                ledger.checkpoint().unwrap();
            }
        }
        ledger.checkpoint().unwrap();
    }
    let size: u64 = 494;
    back_to_schema_3(cluster, &url, size);
    let reference = reference_tree(&event_hashes(cluster, &url));
    assert_eq!(reference.size(), size);

    // Read-only, at version 3: the nodes are read one a row, and nothing is migrated.
    let read_only = LedgerOptions {
        read_only: true,
        ..options(31)
    };
    let reader = Ledger::open_postgres(&url, keys.path(), read_only.clone()).unwrap();
    assert_proves(&reader, &reference);
    assert_every_node(&read_only_storage(&url), &reference, size);
    assert_eq!(
        sql(cluster, &url, "SELECT max(version) FROM ledger_schema"),
        "3"
    );
    assert_eq!(
        sql(cluster, &url, "SELECT count(*) FROM ledger_merkle_nodes"),
        perfect_nodes(&reference, size).len().to_string()
    );

    // A writable open migrates: every node is moved, one row for each size a node ends at
    // (one a leaf), each found, and the old table is gone. Checked on the backend alone, before
    // a ledger's open could rebuild the tree from the events should a node be missing.
    drop(PostgresStorage::open(&url, PostgresOptions::default()).unwrap());
    assert_eq!(
        sql(cluster, &url, "SELECT max(version) FROM ledger_schema"),
        "6"
    );
    assert_eq!(
        sql(
            cluster,
            &url,
            "SELECT to_regclass('ledger_merkle_nodes') IS NULL"
        ),
        "t"
    );
    let moved_rows = || sql(cluster, &url, "SELECT count(*) FROM ledger_merkle_groups");
    assert_eq!(moved_rows(), size.to_string());
    assert_every_node(&read_only_storage(&url), &reference, size);
    // The ledger reads the moved rows as they are (a rebuild would have packed them anew).
    let writer = open(&url, keys.path(), 32);
    assert_proves(&writer, &reference);
    assert_eq!(moved_rows(), size.to_string());
    // The reader opened before the migration reads the old table, which is gone: it says so.
    let stale = reader.root_at(size - 1);
    assert!(
        matches!(&stale, Err(e) if e.to_string().contains("open it again")),
        "{stale:?}"
    );
    // And says so again once its sessions were cut and it connects anew, where preparing the
    // read of the old table is what fails.
    sql(
        cluster,
        &url,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND application_name = 'research-ledger'",
    );
    // A read that meets a cut session runs again on a new one, so the cut itself never shows:
    // every read, the first included, says to reopen.
    for _ in 0..6 {
        let stale = reader.root_at(size - 1);
        assert!(
            matches!(&stale, Err(e) if e.to_string().contains("open it again")),
            "{stale:?}"
        );
    }
    drop(reader);

    // The writer goes on after the moved rows, and proves what it added.
    for i in 0..40u32 {
        append_any(&writer, "t", &i.to_le_bytes()).unwrap();
    }
    writer.checkpoint().unwrap();
    let reference = reference_tree(&event_hashes(cluster, &url));
    assert_proves(&writer, &reference);
    drop(writer);
    let reader = Ledger::open_postgres(&url, keys.path(), read_only).unwrap();
    assert_proves(&reader, &reference);
}

#[test]
fn a_database_at_schema_3_whose_nodes_lag_its_events_is_migrated_and_caught_up() {
    let Some((cluster, url)) = database_or_skip("a_lagging_database_at_schema_3") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    {
        let ledger = open(&url, keys.path(), 33);
        for i in 0..7u32 {
            let payloads: Vec<Vec<u8>> = (0..100u32)
                .map(|j| (i * 1000 + j).to_le_bytes().to_vec())
                .collect();
            let payloads: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
            ledger
                .append(request("s", ExpectedVersion::Any, &payloads))
                .unwrap();
            if i % 2 == 1 {
                ledger.checkpoint().unwrap();
            }
        }
    }
    // Nodes for the first 301 of the 700 leaves: the writer's open moves them, then grows the
    // stored tree from there (its rows start at a size the moved rows end at).
    back_to_schema_3(cluster, &url, 301);
    let reference = reference_tree(&event_hashes(cluster, &url));
    drop(PostgresStorage::open(&url, PostgresOptions::default()).unwrap());
    assert_every_node(&read_only_storage(&url), &reference, 301);
    let writer = open(&url, keys.path(), 34);
    assert_eq!(
        sql(cluster, &url, "SELECT merkle_size FROM ledger_head"),
        "700"
    );
    // The 301 moved rows, and the growth from there in rows keyed 512 and 700: the moved rows
    // were read, not rebuilt.
    assert_eq!(
        sql(
            cluster,
            &url,
            "SELECT count(*), max(size) FILTER (WHERE size <= 301), \
             string_agg(size::text, ' ' ORDER BY size) FILTER (WHERE size > 301) \
             FROM ledger_merkle_groups"
        ),
        "303|301|512 700"
    );
    assert_proves(&writer, &reference);
    assert_every_node(&read_only_storage(&url), &reference, 700);
}

/// Appends made-up groups of the given sizes to `storage`, on one stream, each with the Merkle
/// nodes it completes, adding their hashes to `leaves` (the stream's version is their number).
fn commit_groups(storage: &PostgresStorage, sizes: &[u64], leaves: &mut Vec<Digest>) {
    for &n in sizes {
        let head = storage.head();
        let (commit, hashes) = made_up_group(head, "s", leaves.len() as u64, n);
        leaves.extend(hashes);
        let to = leaves.len() as u64;
        let tree = TreeGrowth {
            nodes: growth_nodes(leaves, head.size, to),
            size: to,
        };
        storage.append(&[commit], &[], &tree).unwrap();
    }
}

/// The keys of `ledger_merkle_groups`, in order, space-separated.
fn row_keys(cluster: &PgCluster, url: &str) -> String {
    sql(
        cluster,
        url,
        "SELECT string_agg(size::text, ' ' ORDER BY size) FROM ledger_merkle_groups",
    )
}

/// The first leaf the row of `ledger_merkle_groups` keyed `size` covers: the index of its
/// first node, the level-0 node of that leaf.
fn first_leaf_of_row(cluster: &PgCluster, url: &str, size: u64) -> String {
    sql(
        cluster,
        url,
        &format!(
            "SELECT ('x' || encode(substring(nodes from 2 for 8), 'hex'))::bit(64)::bigint \
             FROM ledger_merkle_groups WHERE size = {size}"
        ),
    )
}

/// A group of `n` made-up events on `stream` (at version `base`) on `head`, and their hashes.
fn made_up_group(
    head: ledger::storage::ChainHead,
    stream: &str,
    base: u64,
    n: u64,
) -> (Commit, Vec<Digest>) {
    let mut prev = head.last_hash;
    let mut events = Vec::new();
    for i in 0..n {
        let hash = Digest(
            *blake3::hash(&[prev.as_bytes(), stream.as_bytes(), &i.to_le_bytes()].concat())
                .as_bytes(),
        );
        events.push(SealedEvent {
            seq: head.size + i,
            stream_version: base + i + 1,
            event_id: uuid::Uuid::from_bytes(hash.as_bytes()[..16].try_into().unwrap()),
            prev_hash: prev,
            hash,
            bytes: Arc::from(&hash.as_bytes()[..]),
        });
        prev = hash;
    }
    let hashes = events.iter().map(|e| e.hash).collect();
    let commit = Commit {
        stream: stream.into(),
        base_version: base,
        events,
        idempotency: None,
    };
    (commit, hashes)
}

/// The nodes the leaves `from..to` complete (in the order a growth reports them).
fn growth_nodes(leaves: &[Digest], from: u64, to: u64) -> Vec<ledger::ledger_proof::PerfectNode> {
    let mut frontier = Frontier::new();
    let mut nodes = Vec::new();
    for (i, leaf) in leaves[..to as usize].iter().enumerate() {
        let mut completed = Vec::new();
        frontier
            .push_into(&Sha256, leaf.as_bytes(), &mut completed)
            .unwrap();
        if i as u64 >= from {
            nodes.extend(completed);
        }
    }
    nodes
}

/// A writer's group commits and another node's rebuilds of the same leaves write rows of
/// `ledger_merkle_groups` whose spans overlap, the rebuild's keys falling inside the groups'
/// spans and the other way round, and a row already under a key is kept: every node is still
/// found. Why: a row keyed K holds every node completed by the leaves from the previous key
/// of the growth that wrote it (its own previous row, or the size it started from) up to K,
/// and that previous key P is itself a stored key (or 0), since a growth starts where a stored
/// one ended and a row dropped on a conflict leaves one under its key. For a node ending at e
/// (its completing leaf is e - 1), let K be the smallest stored key >= e: P < K is stored, so
/// P < e, and the row K holds the node, whichever growth's rows lie around it.
#[test]
fn group_rows_and_another_nodes_rebuild_overlap_and_every_node_is_found() {
    let Some((cluster, url)) = database_or_skip("group_rows_and_a_rebuild_overlap") else {
        return;
    };
    let ours = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let theirs = PostgresStorage::open(&url, PostgresOptions::default()).unwrap();
    let mut leaves: Vec<Digest> = Vec::new();
    // Ours: rows keyed 100, 256, 300, 301, 361.
    commit_groups(&ours, &[100, 200, 1, 60], &mut leaves);
    // Theirs, rebuilding from the first leaf in two runs: rows keyed 150 (new, inside ours'
    // span 100..256), 256 (kept as ours wrote it), 280 (new, inside ours' 256..300).
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 0, 150), 150)
        .unwrap();
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 150, 280), 280)
        .unwrap();
    // Ours again, from its head: 512, 561, 768, 861.
    commit_groups(&ours, &[200, 300], &mut leaves);
    // Theirs from where its second run ended: 300 and 512 kept as ours wrote them, 700 new,
    // inside ours' 561..768.
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 280, 700), 700)
        .unwrap();
    assert_eq!(
        row_keys(cluster, &url),
        "100 150 256 280 300 301 361 512 561 700 768 861"
    );
    // The rows kept under the shared keys are the group commits': 256 starts at leaf 100.
    assert_eq!(first_leaf_of_row(cluster, &url, 256), "100");
    let reference = reference_tree(&leaves);
    let size = leaves.len() as u64;
    assert_every_node(&ours, &reference, size);
    assert_every_node(&theirs, &reference, size);
    assert_eq!(ours.merkle_size().unwrap(), size);
}

/// Two nodes on one database and the interleaving both clear-and-rebuild tests replay: ours
/// commits groups to 561 leaves (the stored size there), theirs clears the stored nodes to
/// rebuild them, and ours commits on from its head to 600, rows keyed 580 (leaves 561..580)
/// and 600 (580..600), where no stored row ends. Ours, theirs, and the leaves.
fn groups_around_a_clear(url: &str) -> (PostgresStorage, PostgresStorage, Vec<Digest>) {
    let ours = PostgresStorage::open(url, PostgresOptions::default()).unwrap();
    let theirs = PostgresStorage::open(url, PostgresOptions::default()).unwrap();
    let mut leaves: Vec<Digest> = Vec::new();
    commit_groups(&ours, &[300, 261], &mut leaves);
    assert_eq!(ours.merkle_size().unwrap(), 561);
    theirs.clear_merkle_nodes().unwrap();
    commit_groups(&ours, &[19, 20], &mut leaves);
    (ours, theirs, leaves)
}

/// A node that clears the stored Merkle nodes to rebuild them while another node commits
/// groups: the other's growth then starts where no stored row ends, its first row keyed
/// inside the rebuild's span and shorter than the rebuild's row under the key they share.
/// The longer row is kept, and a node that the first row at or above its end does not hold is
/// found in the rows after it: none is lost.
#[test]
fn a_rebuild_after_a_clear_racing_another_nodes_groups_loses_no_node() {
    let Some((cluster, url)) = database_or_skip("a_rebuild_racing_group_commits") else {
        return;
    };
    let (ours, theirs, leaves) = groups_around_a_clear(&url);
    // Theirs rebuilds from the first leaf: rows keyed 256, 512 and 600 (512..600), longer
    // than ours' under 600.
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 0, 600), 600)
        .unwrap();
    assert_eq!(row_keys(cluster, &url), "256 512 580 600");
    assert_eq!(first_leaf_of_row(cluster, &url, 600), "512");
    // A node ending at 540 is in the row keyed 600, not in the first at or above its end
    // (580, which starts at 561).
    let reference = reference_tree(&leaves);
    assert_every_node(&ours, &reference, 600);
    assert_every_node(&theirs, &reference, 600);
    assert_eq!(ours.merkle_size().unwrap(), 600);
}

/// The stored Merkle size counts only nodes stored in one piece from the first leaf: a group
/// committed after another node cleared the nodes does not raise it (its growth starts outside
/// it), nor does a growth that starts past it; a rebuild that stops short leaves it where the
/// rebuild's nodes end, not at the last group's end, so it never claims the nodes between
/// that the rebuild did not reach. A growth from the stored size fills them in.
#[test]
fn a_rebuild_that_stops_short_while_another_node_commits_leaves_the_stored_size_at_its_end() {
    let Some((_, url)) = database_or_skip("a_rebuild_that_stops_short") else {
        return;
    };
    let (ours, theirs, leaves) = groups_around_a_clear(&url);
    // Ours' groups after the clear: the size stays at the clear's 0.
    assert_eq!(ours.merkle_size().unwrap(), 0);
    // Theirs stores the first 300 leaves' nodes and stops there.
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 0, 300), 300)
        .unwrap();
    assert_eq!(ours.merkle_size().unwrap(), 300);
    // The nodes of leaves 300..561 are stored nowhere, and the size does not claim them.
    assert_eq!(ours.merkle_node(0, 400).unwrap(), None);
    assert_eq!(ours.merkle_node(8, 1).unwrap(), None);
    // A growth that starts past the size (at 580, where a row ends) leaves it.
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 580, 600), 600)
        .unwrap();
    assert_eq!(ours.merkle_size().unwrap(), 300);
    // One from it brings it to the log's end, every node found.
    ours.put_merkle_nodes(&growth_nodes(&leaves, 300, 600), 600)
        .unwrap();
    assert_eq!(ours.merkle_size().unwrap(), 600);
    let reference = reference_tree(&leaves);
    assert_every_node(&ours, &reference, 600);
    assert_every_node(&theirs, &reference, 600);
}

/// Appends `n` one-event appends to `ledger` on stream `stream`, then a checkpoint.
fn append_then_checkpoint(ledger: &Ledger, stream: &str, n: u32) {
    for i in 0..n {
        append_any(ledger, stream, &i.to_le_bytes()).unwrap();
    }
    ledger.checkpoint().unwrap();
}

/// Clears the stored Merkle nodes from another node and stores those of the first `to` leaves
/// again, then stops, as a node that died in its rebuild would.
fn rebuild_and_stop(cluster: &PgCluster, url: &str, to: u64) {
    let theirs = PostgresStorage::open(url, PostgresOptions::default()).unwrap();
    let leaves = event_hashes(cluster, url);
    theirs.clear_merkle_nodes().unwrap();
    theirs
        .put_merkle_nodes(&growth_nodes(&leaves, 0, to), to)
        .unwrap();
}

/// Another node clears the stored Merkle nodes, stores some again and stops, while a ledger
/// commits on: the nodes of the leaves between are missing, though the nodes of the tree's
/// right edge are all there. Until they are stored again a root that needs one is refused,
/// never answered wrong. A ledger that opens grows the stored tree from where the stored size
/// stands; one already running does so on its own within seconds. Either way every node is
/// stored again and every root and proof is right.
#[test]
fn nodes_a_stopped_rebuild_left_out_are_stored_again_at_open_and_by_a_running_ledger() {
    let Some((cluster, url)) = database_or_skip("nodes_a_stopped_rebuild_left_out") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let merkle_size = || sql(cluster, &url, "SELECT merkle_size FROM ledger_head");
    {
        // This one does not look for missing nodes while it runs, so that the next open finds
        // them missing.
        let unmending = LedgerOptions {
            mend_every: Duration::ZERO,
            ..options(40)
        };
        let ledger = Ledger::open_postgres(&url, keys.path(), unmending).unwrap();
        append_then_checkpoint(&ledger, "a", 600);
        // Stopped at 520: the subtree of the first 512 leaves is stored, the leaves 520..600
        // are not, and the groups from 600 to 650 store the rest of the right edge at 650.
        rebuild_and_stop(cluster, &url, 520);
        append_then_checkpoint(&ledger, "b", 50);
    }
    // Until they are stored again, a root that needs one of them is refused, never wrong: a
    // read-only ledger stores nothing. The root at 650 needs only the right edge's nodes.
    let reference = reference_tree(&event_hashes(cluster, &url));
    {
        let read_only = LedgerOptions {
            read_only: true,
            ..options(42)
        };
        let reader = Ledger::open_postgres(&url, keys.path(), read_only).unwrap();
        let refused = reader.root_at(600);
        assert!(
            matches!(&refused, Err(e) if e.to_string().contains("is missing")),
            "{refused:?}"
        );
        assert_eq!(
            reader.root_at(650).unwrap(),
            reference.root_at(650).unwrap()
        );
        assert_eq!(merkle_size(), "520");
    }
    let ledger = open(&url, keys.path(), 41);
    assert_eq!(merkle_size(), "650");
    assert_every_node(&read_only_storage(&url), &reference, 650);
    assert_proves(&ledger, &reference);

    // Again while the ledger runs: stopped at 520, the groups to 700 store the right edge but
    // for the subtree of leaves 512..640.
    rebuild_and_stop(cluster, &url, 520);
    append_then_checkpoint(&ledger, "c", 50);
    eventually("the running ledger stores the missing nodes", || {
        merkle_size() == "700"
    });
    let reference = reference_tree(&event_hashes(cluster, &url));
    assert_every_node(&read_only_storage(&url), &reference, 700);
    assert_proves(&ledger, &reference);
}

#[test]
fn recorded_at_never_decreases_along_a_log_two_nodes_with_different_clocks_write() {
    let Some((_, url)) = database_or_skip("recorded_at_never_decreases") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let start = start_time();
    let at = options_at;
    let ahead = Ledger::open_postgres(&url, keys.path(), at(start, 1)).unwrap();
    // Open before the other node writes: it learns of those events only when its append meets
    // the moved head.
    let behind =
        Ledger::open_postgres(&url, keys.path(), at(start - chrono::Duration::hours(1), 2))
            .unwrap();
    for i in 0..3u8 {
        append_any(&ahead, "a", &[i]).unwrap();
    }
    append_any(&behind, "b", b"behind").unwrap();
    drop(behind);
    drop(ahead);
    // Opened after them all, with its clock behind too.
    let late = Ledger::open_postgres(&url, keys.path(), at(start - chrono::Duration::hours(2), 3))
        .unwrap();
    append_any(&late, "c", b"late").unwrap();
    let events = late.read_range(0, 100).unwrap();
    assert_eq!(events.len(), 5);
    assert_times_never_decrease(&events);
}
