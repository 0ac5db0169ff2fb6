//! `bench ledger --storage-url`: durable appends of the ledger on PostgreSQL, one writer and
//! many sharing group commits, and two ledgers (two nodes) on one database, next to a raw
//! baseline measured in the same run on the same server: a plain durable conditional insert
//! per append (autocommit, `synchronous_commit` on, refused if its stream version is taken),
//! on one connection and on as many connections as there are writers.
//!
//! Everything is written in a scratch database created on the server for the run and dropped
//! afterwards, so the URL's own database is only used to create it (the user needs CREATEDB).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use ledger::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, NewEvent};
use serde::Serialize;
use tokio_postgres::Client;

use super::super::phase;
use super::super::stats::rate;
use crate::Outcome;

/// Payload bytes per event, as in the embedded run.
const PAYLOAD_BYTES: usize = 256;

/// What the run measured.
#[derive(Debug, Serialize)]
struct Report {
    bench: &'static str,
    storage: &'static str,
    sequential_appends: u64,
    concurrent_appends: u64,
    writers: usize,
    figures: Figures,
    ratios: Vec<(String, f64)>,
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Figures {
    raw_conditional_insert_1_client_per_s: f64,
    raw_conditional_insert_n_clients_per_s: f64,
    durable_appends_1_writer_per_s: f64,
    durable_appends_concurrent_per_s: f64,
    durable_appends_two_nodes_per_s: f64,
    concurrent_events_per_transaction: f64,
    two_nodes_events_per_transaction: f64,
}

/// The runtime the raw baseline's clients run on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start a runtime for the baseline")
}

async fn client(url: &str) -> anyhow::Result<Client> {
    let connector = pg_connect::Connector::parse(url)?;
    let (client, connection) = connector
        .connect()
        .await
        .with_context(|| format!("cannot connect to {url}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client.batch_execute("SET synchronous_commit TO on").await?;
    Ok(client)
}

/// `url` with its database replaced by `db` (its query string kept).
fn with_database(url: &str, db: &str) -> anyhow::Result<String> {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let rest = base
        .strip_prefix("postgres://")
        .or_else(|| base.strip_prefix("postgresql://"))
        .ok_or_else(|| anyhow!("the storage URL is not postgres://…"))?;
    let host = rest.split_once('/').map_or(rest, |(host, _)| host);
    Ok(match query {
        Some(query) => format!("postgres://{host}/{db}?{query}"),
        None => format!("postgres://{host}/{db}"),
    })
}

/// `count` conditional inserts on `clients` connections at once, each client its own stream.
async fn raw_inserts(url: &str, clients: usize, count: u64) -> anyhow::Result<Duration> {
    let mut connections = Vec::with_capacity(clients);
    for _ in 0..clients {
        connections.push(client(url).await?);
    }
    let per = count.div_ceil(clients as u64);
    let payload = vec![7u8; PAYLOAD_BYTES];
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, connection) in connections.into_iter().enumerate() {
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let stream = format!("raw-{clients}-{c}");
            let insert = connection
                .prepare(
                    "INSERT INTO raw_appends (stream, version, bytes) VALUES ($1, $2, $3) \
                     ON CONFLICT (stream, version) DO NOTHING",
                )
                .await?;
            for version in 1..=per as i64 {
                connection
                    .execute(&insert, &[&stream, &version, &payload])
                    .await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// `count` appends on `ledgers` from `writers` threads at once (spread over the ledgers), each
/// thread its own stream.
fn ledger_appends(
    ledgers: &[Ledger],
    writers: usize,
    count: u64,
    tag: &str,
) -> anyhow::Result<Duration> {
    let per = count.div_ceil(writers as u64);
    let barrier = Arc::new(std::sync::Barrier::new(writers + 1));
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let ledger = ledgers[w % ledgers.len()].clone();
            let barrier = Arc::clone(&barrier);
            let stream = format!("{tag}-{w}");
            std::thread::spawn(move || -> Result<(), ledger::AppendError> {
                barrier.wait();
                for _ in 0..per {
                    ledger.append(AppendRequest {
                        stream: stream.clone(),
                        expected: ExpectedVersion::Any,
                        actor: "bench".into(),
                        events: vec![NewEvent {
                            kind: "bench".into(),
                            payload: vec![7u8; PAYLOAD_BYTES],
                            causation: Vec::new(),
                        }],
                        idempotency: None,
                        content: Vec::new(),
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    for thread in threads {
        thread
            .join()
            .map_err(|_| anyhow!("a writer thread panicked"))??;
    }
    Ok(started.elapsed())
}

/// Events per transaction among the events from `from` on: the events of one transaction
/// share its `xmin`.
async fn per_transaction(url: &str, from: u64) -> anyhow::Result<f64> {
    let c = client(url).await?;
    let from = i64::try_from(from)?;
    let row = c
        .query_one(
            "SELECT count(*), count(DISTINCT xmin::text) FROM ledger_events WHERE seq >= $1",
            &[&from],
        )
        .await?;
    let (events, transactions): (i64, i64) = (row.get(0), row.get(1));
    Ok(events as f64 / (transactions.max(1) as f64))
}

fn options() -> LedgerOptions {
    LedgerOptions {
        checkpoint_interval: None,
        checkpoint_every_events: None,
        ..LedgerOptions::default()
    }
}

pub(super) fn run(url: &str, json: bool, events: u64, writers: usize) -> anyhow::Result<Outcome> {
    let rt = runtime()?;
    let db = format!("research_ledger_bench_{}", std::process::id());
    let scratch = with_database(url, &db)?;
    rt.block_on(async {
        let admin = client(url).await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .await?;
        client(&scratch)
            .await?
            .batch_execute(
                "CREATE TABLE raw_appends (seq bigserial PRIMARY KEY, stream text NOT NULL, \
                 version bigint NOT NULL, bytes bytea NOT NULL, UNIQUE (stream, version))",
            )
            .await?;
        Ok::<_, anyhow::Error>(())
    })?;
    let measured = measure(&rt, &scratch, events, writers);
    let dropped = rt.block_on(async {
        let admin = client(url).await?;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
            .await?;
        Ok::<_, anyhow::Error>(())
    });
    let report = measured?;
    dropped.with_context(|| format!("the scratch database {db} was not dropped"))?;
    if json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::output::text(&text(&report));
    }
    Ok(Outcome::Passed)
}

fn measure(
    rt: &tokio::runtime::Runtime,
    url: &str,
    events: u64,
    writers: usize,
) -> anyhow::Result<Report> {
    let sequential = (events / 10).max(1);
    let keys = tempfile::tempdir()?;
    phase("raw inserts, one client");
    let raw_one = rt.block_on(raw_inserts(url, 1, sequential))?;
    phase("raw inserts, many clients");
    let raw_many = rt.block_on(raw_inserts(url, writers, events))?;
    let ledger = Ledger::open_postgres(url, keys.path(), options())?;
    phase("ledger appends, one writer");
    let one = ledger_appends(std::slice::from_ref(&ledger), 1, sequential, "one")?;
    let before_many = ledger.head().size;
    phase("ledger appends, many writers");
    let many = ledger_appends(std::slice::from_ref(&ledger), writers, events, "many")?;
    let before_two = ledger.head().size;
    let second = Ledger::open_postgres(url, keys.path(), options())?;
    phase("ledger appends, two ledgers on the database");
    let two = ledger_appends(&[ledger.clone(), second.clone()], writers, events, "two")?;
    let many_grouping = rt.block_on(per_transaction_between(url, before_many, before_two))?;
    let two_grouping = rt.block_on(per_transaction(url, before_two))?;
    drop((ledger, second));
    let per_writer = events.div_ceil(writers as u64) * writers as u64;
    let figures = Figures {
        raw_conditional_insert_1_client_per_s: rate(sequential, raw_one),
        raw_conditional_insert_n_clients_per_s: rate(per_writer, raw_many),
        durable_appends_1_writer_per_s: rate(sequential, one),
        durable_appends_concurrent_per_s: rate(per_writer, many),
        durable_appends_two_nodes_per_s: rate(per_writer, two),
        concurrent_events_per_transaction: many_grouping,
        two_nodes_events_per_transaction: two_grouping,
    };
    let ratios = vec![
        (
            "durable_appends_1_writer / raw_conditional_insert_1_client".to_owned(),
            figures.durable_appends_1_writer_per_s / figures.raw_conditional_insert_1_client_per_s,
        ),
        (
            format!("durable_appends_concurrent / raw_conditional_insert_{writers}_clients"),
            figures.durable_appends_concurrent_per_s
                / figures.raw_conditional_insert_n_clients_per_s,
        ),
        (
            format!("durable_appends_two_nodes / raw_conditional_insert_{writers}_clients"),
            figures.durable_appends_two_nodes_per_s
                / figures.raw_conditional_insert_n_clients_per_s,
        ),
    ];
    Ok(Report {
        bench: "ledger",
        storage: "postgres",
        sequential_appends: sequential,
        concurrent_appends: per_writer,
        writers,
        figures,
        ratios,
        notes: notes(writers),
    })
}

async fn per_transaction_between(url: &str, from: u64, to: u64) -> anyhow::Result<f64> {
    let c = client(url).await?;
    let (from, to) = (i64::try_from(from)?, i64::try_from(to)?);
    let row = c
        .query_one(
            "SELECT count(*), count(DISTINCT xmin::text) FROM ledger_events \
             WHERE seq >= $1 AND seq < $2",
            &[&from, &to],
        )
        .await?;
    let (events, transactions): (i64, i64) = (row.get(0), row.get(1));
    Ok(events as f64 / (transactions.max(1) as f64))
}

fn notes(writers: usize) -> Vec<String> {
    vec![
        format!("Every append carries one event of {PAYLOAD_BYTES} payload bytes on a stream of its writer's own and expects any version; each caller waits for its acknowledgement before the next. Rates exclude opening the ledger."),
        format!("Raw baseline: on the same server, in the same scratch database, one INSERT … ON CONFLICT (stream, version) DO NOTHING per append in its own transaction (autocommit, synchronous_commit on): the least a durable conditional append costs without the ledger, on 1 and on {writers} connections."),
        "Ledger: one transaction per group commit on one writer connection, sent with its COMMIT in one round trip (BEGIN, the head moved on condition that it is the head the group was planned on, the events, Merkle nodes, COMMIT). Two nodes: two ledgers on the same database sharing the writers; a group that finds the head moved writes nothing, and is planned again under the head row's lock after reading what the other committed.".to_owned(),
        "Events per transaction: events over distinct xmin among the run's events.".to_owned(),
    ]
}

fn text(report: &Report) -> String {
    let f = &report.figures;
    let w = report.writers;
    let mut out = format!(
        "bench ledger on PostgreSQL ({} sequential, {} concurrent appends, {w} writers)\n",
        report.sequential_appends, report.concurrent_appends
    );
    for (name, value) in [
        (
            "raw conditional insert, 1 client",
            f.raw_conditional_insert_1_client_per_s,
        ),
        (
            &format!("raw conditional insert, {w} clients") as &str,
            f.raw_conditional_insert_n_clients_per_s,
        ),
        ("ledger, 1 writer", f.durable_appends_1_writer_per_s),
        (
            &format!("ledger, {w} writers") as &str,
            f.durable_appends_concurrent_per_s,
        ),
        (
            &format!("ledger, {w} writers on two ledgers") as &str,
            f.durable_appends_two_nodes_per_s,
        ),
    ] {
        out.push_str(&format!("  {name:<44} {value:>10.0} appends/s\n"));
    }
    out.push_str(&format!(
        "  events per transaction: {:.1} ({w} writers), {:.1} (two ledgers)\n",
        f.concurrent_events_per_transaction, f.two_nodes_events_per_transaction
    ));
    for (name, ratio) in &report.ratios {
        out.push_str(&format!("  {name}: {ratio:.2}\n"));
    }
    out
}
