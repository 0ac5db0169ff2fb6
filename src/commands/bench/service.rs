//! `research-ledger bench service`: the service as its callers meet it, through real
//! transports, beside the ledger's own figures measured in the same run.
//!
//! The run, in order:
//!
//! 1. the ledger alone: concurrent durable appends at each connection count, in a directory of
//!    its own — the engine the writes below are compared with;
//! 2. `serve` spawned on a new data directory; concurrent `retrieval_add_evidence` calls on
//!    distinct tasks over REST and over MCP Streamable HTTP (2025-11-25 sessions) at each
//!    connection count, each client on one kept-alive connection;
//! 3. read tool calls (`research_summarize_state`) over REST and MCP in both eras, and a
//!    GraphQL task query: p50 and p99 at 1 and at 16 connections;
//! 4. for each generated ledger size: a data directory written through the tools, in process,
//!    then `serve` started on it — time to `/health` answering, its resident memory, a task
//!    read and a `tasks` page.

mod client;
mod generate;
mod load;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde::Serialize;
use serde_json::{Value, json};

use self::client::{Client, Transport};
use super::ledger::{append_concurrently, open_ledger};
use super::stats::{quantile, rate};
use super::{Scratch, phase};
use crate::Outcome;

/// Arguments of `bench service`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Connection counts the writes are measured at.
    #[arg(long, value_name = "N,…", value_delimiter = ',', default_values_t = [1, 8, 32, 128],
          value_parser = clap::value_parser!(u16).range(1..=2048))]
    connections: Vec<u16>,
    /// How long each write run lasts, in seconds: the engine's, in process, over REST and over MCP.
    #[arg(long, value_name = "SECS", default_value_t = 3.0, value_parser = write_secs)]
    write_secs: f64,
    /// Read calls per connection in each read run.
    #[arg(long, value_name = "N", default_value_t = 400,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    reads: u32,
    /// Sizes of the generated ledgers, in events.
    #[arg(long, value_name = "N,…", value_delimiter = ',', default_values_t = [10_000, 100_000, 1_000_000],
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    sizes: Vec<u64>,
    /// Keep everything in this new or empty directory instead of a temporary one.
    #[arg(long, value_name = "DIR")]
    scratch: Option<PathBuf>,
}

/// A latency distribution.
#[derive(Debug, Serialize)]
struct Latency {
    p50_ms: f64,
    p99_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Latency {
            p50_ms: ms(quantile(&samples, 0.5)),
            p99_ms: ms(quantile(&samples, 0.99)),
        }
    }
}

/// Writes at one connection count.
#[derive(Debug, Serialize)]
struct WriteRun {
    connections: usize,
    engine_appends_per_s: f64,
    /// CPU time this process used per engine append, in milliseconds.
    engine_cpu_ms_per_append: f64,
    /// The same tool called in process by as many threads, on a service of its own: the
    /// writes' cost without a transport.
    in_process_writes_per_s: f64,
    /// CPU time the process used per in-process write, in milliseconds.
    in_process_cpu_ms_per_write: f64,
    rest_writes_per_s: f64,
    rest_latency: Latency,
    rest_ratio: f64,
    mcp_writes_per_s: f64,
    mcp_latency: Latency,
    mcp_ratio: f64,
    /// Appends per durable sync the server made during the REST writes: how many writes each
    /// group commit carried.
    rest_appends_per_sync: f64,
    /// CPU time the server used per REST write, in milliseconds.
    server_cpu_ms_per_write: f64,
    /// CPU time the load generator (this process) used per REST write, in milliseconds.
    client_cpu_ms_per_write: f64,
}

/// Reads of one kind at 1 and 16 connections.
#[derive(Debug, Serialize)]
struct ReadRun {
    what: String,
    one: Latency,
    sixteen: Latency,
}

/// A generated ledger, and `serve` started on it.
#[derive(Debug, Serialize)]
struct ScaleRun {
    events: u64,
    tasks: u64,
    generated_secs: f64,
    /// The first start after the ledger was written (sled then replays its own log).
    cold_start_first_ms: f64,
    /// A restart after a clean stop: the median of three.
    cold_start_ms: f64,
    /// Resident memory after the reads below.
    rss_mib: f64,
    task_read: Latency,
    tasks_page: Latency,
}

#[derive(Debug, Serialize)]
struct Report {
    goals: Value,
    writes: Vec<WriteRun>,
    reads: Vec<ReadRun>,
    scale: Vec<ScaleRun>,
}

/// Reads `--write-secs`: a finite number of seconds above 0 and at most an hour.
fn write_secs(text: &str) -> Result<f64, String> {
    let secs: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
        return Err(format!(
            "{secs} is not a number of seconds above 0 and at most 3600"
        ));
    }
    Ok(secs)
}

pub(super) fn run(args: &Args) -> anyhow::Result<Outcome> {
    let scratch = Scratch::new(args.scratch.as_deref())?;
    let root = scratch.path().to_owned();
    let connections: Vec<usize> = args.connections.iter().copied().map(usize::from).collect();
    let per_client = args.reads as usize;

    phase("the ledger's own concurrent appends");
    let engine = engine_rates(&root, &connections, args.write_secs)?;

    phase("the same writes in process");
    let in_process = in_process_rates(&root.join("in-process"), &connections, args.write_secs)?;

    phase("writes through the server");
    let server = Served::start(&root.join("writes"))?;
    let writes = write_runs(&server, &connections, &engine, &in_process, args.write_secs)?;

    phase("reads through the server");
    let reads = read_runs(&server.base, per_client)?;
    server.stop()?;

    let mut scale = Vec::new();
    for &events in &args.sizes {
        phase(&format!("a generated ledger of {events} events"));
        scale.push(scale_run(
            &root.join(format!("ledger-{events}")),
            events,
            per_client,
        )?);
    }

    let report = Report {
        goals: json!({
            "writes_32_connections_ratio_min": 0.5,
            "read_tool_p50_ms_1_connection_max": 0.3,
            "read_tool_p99_ms_16_connections_max": 5.0,
            "cold_start_ms_1m_events_max": 2000.0,
            "rss_mib_1m_events_max": 512.0,
        }),
        writes,
        reads,
        scale,
    };
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if scratch.kept() {
        tell!("kept in {}", root.display());
    }
    Ok(Outcome::Passed)
}

/// The ledger's own concurrent durable appends at each connection count, each count in a
/// directory of its own, for `secs` of appending like the writes they are compared with (in
/// rounds, each of its writers appending in turn until all are done; a fixed count of appends
/// took a fifth of a second at 32 writers, too short a run for a baseline): appends/s and this
/// process's CPU time per append in milliseconds.
fn engine_rates(root: &Path, connections: &[usize], secs: f64) -> anyhow::Result<Vec<(f64, f64)>> {
    let duration = Duration::from_secs_f64(secs);
    let mut engine = Vec::new();
    for &c in connections {
        let dir = root.join(format!("engine-{c}"));
        let ledger = open_ledger(&dir)?;
        let round = (c as u64 * 200).clamp(2_000, 20_000);
        let (mut appends, mut elapsed) = (0u64, Duration::ZERO);
        let cpu_before = own_cpu_secs()?;
        while appends == 0 || elapsed < duration {
            let (took, _) = append_concurrently(&ledger, c, round)?;
            appends += round;
            elapsed += took;
        }
        let cpu = own_cpu_secs()? - cpu_before;
        ledger.shutdown();
        engine.push((rate(appends, elapsed), cpu * 1e3 / appends as f64));
    }
    Ok(engine)
}

/// CPU time this process has used, in seconds: its process CPU-time clock, to the nanosecond,
/// every thread it ran included. (The clock ticks of `/proc/self/stat` are 10 ms apart, more than
/// the load generator spends in a short run.)
fn own_cpu_secs() -> anyhow::Result<f64> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Ok(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

/// `retrieval_add_evidence` called in process, on distinct tasks, by as many threads as each
/// connection count, for `secs` each, on a service of its own: writes/s and the process's CPU
/// time per write in milliseconds.
fn in_process_rates(
    dir: &Path,
    connections: &[usize],
    secs: f64,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let service = service::Service::open(service::ServiceOptions::new(dir))
        .with_context(|| format!("cannot open a data directory in {}", dir.display()))?;
    let caller = service::Caller::new("bench");
    let duration = Duration::from_secs_f64(secs);
    let open = |name: &str| -> anyhow::Result<String> {
        let arguments: Value = serde_json::from_str(&open_task_arguments(name))?;
        let opened = service.call_tool(&caller, "research_open_task", &arguments)?;
        opened.structured["task_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("an opened task has no id: {}", opened.structured))
    };
    let mut rates = Vec::new();
    for &c in connections {
        let start = std::sync::Barrier::new(c + 1);
        let cpu_before = std::cell::Cell::new(0.0);
        let (count, elapsed) = std::thread::scope(|s| -> anyhow::Result<(u64, Duration)> {
            let handles: Vec<_> = (0..c)
                .map(|w| {
                    let (start, open, service, caller) = (&start, &open, &service, &caller);
                    s.spawn(move || -> anyhow::Result<(u64, Duration)> {
                        let name = format!("in-process-{c}-writer-{w}");
                        let mut task = open(&name)?;
                        start.wait();
                        let began = Instant::now();
                        let mut n = 0u64;
                        while began.elapsed() < duration {
                            if n > 0 && n.is_multiple_of(ADDS_PER_TASK) {
                                task = open(&name)?;
                            }
                            let arguments: Value =
                                serde_json::from_str(&add_arguments(&name, &task, n))?;
                            service.call_tool(caller, "retrieval_add_evidence", &arguments)?;
                            n += 1;
                        }
                        Ok((n, began.elapsed()))
                    })
                })
                .collect();
            start.wait();
            cpu_before.set(own_cpu_secs()?);
            let mut count = 0;
            let mut elapsed = Duration::ZERO;
            for handle in handles {
                let (n, e) = handle
                    .join()
                    .map_err(|_| anyhow!("a writer thread panicked"))??;
                count += n;
                elapsed = elapsed.max(e);
            }
            Ok((count, elapsed))
        })?;
        let cpu = own_cpu_secs()? - cpu_before.get();
        rates.push((rate(count, elapsed), cpu * 1e3 / count.max(1) as f64));
    }
    service.shutdown();
    Ok(rates)
}

/// Writes over REST and MCP at each connection count, beside the engine's rate there and the
/// same writes' in process.
fn write_runs(
    server: &Served,
    connections: &[usize],
    engine: &[(f64, f64)],
    in_process: &[(f64, f64)],
    secs: f64,
) -> anyhow::Result<Vec<WriteRun>> {
    let mut writes = Vec::new();
    for ((&c, &(engine, engine_cpu)), &(in_process, in_process_cpu)) in
        connections.iter().zip(engine).zip(in_process)
    {
        let (appends_before, syncs_before) = server.appends_and_syncs()?;
        let (cpu_before, client_before) = (server.cpu_secs()?, own_cpu_secs()?);
        let (rest, rest_latency) = concurrent_writes(&server.base, Transport::Rest, c, secs)?;
        let cpu = server.cpu_secs()? - cpu_before;
        let client_cpu = own_cpu_secs()? - client_before;
        let (appends, syncs) = server.appends_and_syncs()?;
        let appends_per_sync =
            (appends - appends_before) as f64 / (syncs - syncs_before).max(1) as f64;
        let (mcp, mcp_latency) = concurrent_writes(&server.base, Transport::McpSession, c, secs)?;
        writes.push(WriteRun {
            connections: c,
            engine_appends_per_s: engine,
            engine_cpu_ms_per_append: engine_cpu,
            in_process_writes_per_s: in_process,
            in_process_cpu_ms_per_write: in_process_cpu,
            rest_writes_per_s: rest.0,
            rest_latency,
            rest_ratio: rest.0 / engine.max(1e-9),
            mcp_writes_per_s: mcp.0,
            mcp_latency,
            mcp_ratio: mcp.0 / engine.max(1e-9),
            rest_appends_per_sync: appends_per_sync,
            server_cpu_ms_per_write: cpu * 1e3 / (rest.1.max(1) as f64),
            client_cpu_ms_per_write: client_cpu * 1e3 / (rest.1.max(1) as f64),
        });
    }
    Ok(writes)
}

/// Read tool calls over each transport, and a GraphQL task query, at 1 and 16 connections.
fn read_runs(base: &str, per_client: usize) -> anyhow::Result<Vec<ReadRun>> {
    let task = seeded_task(base)?;
    let summarize = vec![format!(r#"{{"task_id":{}}}"#, load::quoted(&task))];
    let mut reads = Vec::new();
    for transport in [
        Transport::Rest,
        Transport::McpSession,
        Transport::McpStateless,
    ] {
        let read = {
            let summarize = summarize.clone();
            move || Read::tool("research_summarize_state", summarize.clone())
        };
        reads.push(ReadRun {
            what: format!("research_summarize_state over {}", transport.name()),
            one: concurrent_reads(base, transport, 1, per_client, read.clone())?,
            sixteen: concurrent_reads(base, transport, 16, per_client, read)?,
        });
    }
    let query = serde_json::to_string(&json!({
        "query": "query($t: ID!) { task(id: $t) { sessionVersion status evidence { evidenceId source stance status } } }",
        "variables": {"t": task},
    }))?;
    let read = move || Read::Graphql(std::rc::Rc::new(query.clone()));
    reads.push(ReadRun {
        what: "GraphQL task query".into(),
        one: concurrent_reads(base, Transport::Rest, 1, per_client, read.clone())?,
        sixteen: concurrent_reads(base, Transport::Rest, 16, per_client, read)?,
    });
    Ok(reads)
}

/// A ledger of `events` generated in `dir`, then `serve` on it: its first start, reads and
/// memory, and restarts.
fn scale_run(dir: &Path, events: u64, per_client: usize) -> anyhow::Result<ScaleRun> {
    let generated = generate::generate(dir, events)?;
    let (server, cold_start) = Served::start_timed(dir)?;
    let task_ids = first_tasks(&server.base)?;
    // Tasks in turn, across the first pages of the index, so that reads are not all served
    // from one task's state in memory.
    let summarize: Vec<String> = task_ids
        .iter()
        .map(|id| format!(r#"{{"task_id":{}}}"#, load::quoted(id)))
        .collect();
    let task_read = concurrent_reads(&server.base, Transport::Rest, 1, per_client, move || {
        Read::tool("research_summarize_state", summarize.clone())
    })?;
    let page = serde_json::to_string(&json!({
        "query": "{ tasks(first: 20, status: CONCLUDED) { edges { node { id question sessionVersion status } } pageInfo { endCursor } } }",
    }))?;
    let tasks_page = concurrent_reads(&server.base, Transport::Rest, 1, per_client, move || {
        Read::Graphql(std::rc::Rc::new(page.clone()))
    })?;
    let rss = server.rss_bytes()?;
    server.stop()?;
    let mut restarts = Vec::with_capacity(RESTARTS);
    for _ in 0..RESTARTS {
        let (server, took) = Served::start_timed(dir)?;
        restarts.push(took);
        server.stop()?;
    }
    restarts.sort();
    Ok(ScaleRun {
        events: generated.events,
        tasks: generated.tasks,
        generated_secs: generated.elapsed.as_secs_f64(),
        cold_start_first_ms: cold_start.as_secs_f64() * 1e3,
        cold_start_ms: restarts[RESTARTS / 2].as_secs_f64() * 1e3,
        rss_mib: rss as f64 / (1024.0 * 1024.0),
        task_read,
        tasks_page,
    })
}

fn print_writes(writes: &[WriteRun]) {
    say!("writes on distinct tasks (retrieval_add_evidence), beside the ledger's own appends");
    say!("(in parentheses: processor ms per append or write of the process doing it)");
    say!(
        "{:>5} {:>13} {:>12} {:>10} {:>7} {:>16} {:>10} {:>7} {:>16} {:>12} {:>12} {:>12}",
        "conns",
        "engine/s",
        "in-proc/s",
        "rest/s",
        "ratio",
        "rest p50/p99 ms",
        "mcp/s",
        "ratio",
        "mcp p50/p99 ms",
        "cpu ms/write",
        "client ms/w",
        "appends/sync"
    );
    for w in writes {
        say!(
            "{:>5} {:>13} {:>12} {:>10.0} {:>7.3} {:>16} {:>10.0} {:>7.3} {:>16} {:>12.2} {:>12.3} {:>12.1}",
            w.connections,
            with_cpu(w.engine_appends_per_s, w.engine_cpu_ms_per_append),
            with_cpu(w.in_process_writes_per_s, w.in_process_cpu_ms_per_write),
            w.rest_writes_per_s,
            w.rest_ratio,
            format!("{:.2}/{:.2}", w.rest_latency.p50_ms, w.rest_latency.p99_ms),
            w.mcp_writes_per_s,
            w.mcp_ratio,
            format!("{:.2}/{:.2}", w.mcp_latency.p50_ms, w.mcp_latency.p99_ms),
            w.server_cpu_ms_per_write,
            w.client_cpu_ms_per_write,
            w.rest_appends_per_sync,
        );
    }
}

/// A rate with the processor time per operation beside it.
fn with_cpu(rate: f64, cpu_ms: f64) -> String {
    format!("{rate:.0} ({cpu_ms:.2})")
}

fn print_report(report: &Report) {
    print_writes(&report.writes);
    say!();
    say!("reads: p50/p99 ms at 1 and at 16 connections");
    for r in &report.reads {
        say!(
            "{:<52} {:>8.3}/{:<8.3} {:>8.3}/{:<8.3}",
            r.what,
            r.one.p50_ms,
            r.one.p99_ms,
            r.sixteen.p50_ms,
            r.sixteen.p99_ms
        );
    }
    say!();
    say!("generated ledgers, serve started on each");
    say!(
        "{:>9} {:>7} {:>10} {:>14} {:>13} {:>9} {:>18} {:>18}",
        "events",
        "tasks",
        "written s",
        "first start ms",
        "restart ms",
        "RSS MiB",
        "task read p50/p99",
        "tasks page p50/p99"
    );
    for s in &report.scale {
        say!(
            "{:>9} {:>7} {:>10.1} {:>14.0} {:>13.0} {:>9.1} {:>18} {:>18}",
            s.events,
            s.tasks,
            s.generated_secs,
            s.cold_start_first_ms,
            s.cold_start_ms,
            s.rss_mib,
            format!("{:.3}/{:.3}", s.task_read.p50_ms, s.task_read.p99_ms),
            format!("{:.3}/{:.3}", s.tasks_page.p50_ms, s.tasks_page.p99_ms),
        );
    }
    say!();
    say!("goals: {}", report.goals);
}

/// `serve` on a data directory, spawned from this very binary.
struct Served {
    child: Child,
    base: String,
}

impl Served {
    /// [`Served::start`], and how long it took to answer `/health`. The process that wrote
    /// the directory before may still be letting go of its locks (sled does so from a thread
    /// of its own): a start refused for a held lock is tried again, and timed from the try
    /// that succeeded.
    fn start_timed(data: &Path) -> anyhow::Result<(Served, Duration)> {
        let mut tries = 0;
        loop {
            let started = Instant::now();
            match Served::start(data) {
                Ok(server) => return Ok((server, started.elapsed())),
                Err(e) if tries < 20 && format!("{e:#}").contains("lock") => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts `serve` on a free loopback port and waits for `/health` to answer.
    fn start(data: &Path) -> anyhow::Result<Served> {
        let exe = std::env::current_exe().context("cannot find this program")?;
        // What the server says goes beside its data, for when it does not start.
        let log_path = data.with_extension("serve.log");
        let log = std::fs::File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let mut child = Command::new(exe)
            .arg("--data-dir")
            .arg(data)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--requests-in-flight-max",
                "4096",
            ])
            .env_remove("RESEARCH_LEDGER_DATA_DIR")
            .env_remove("RESEARCH_LEDGER_LOG")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("cannot start serve")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .context("serve said nothing")?;
        let Some(addr) = line.trim().strip_prefix("listening on http://") else {
            let _ = child.kill();
            let _ = child.wait();
            let said = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("serve did not start: {line:?}; it said: {said}");
        };
        let base = format!("http://{addr}");
        let probe = Client::connect(&base, Transport::Rest, "bench-health")?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !probe.get_ok("/health") {
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("serve did not become healthy");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(Served { child, base })
    }

    fn proc_file(&self, name: &str) -> anyhow::Result<String> {
        let path = format!("/proc/{}/{name}", self.child.id());
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))
    }

    /// Resident memory of the server process.
    fn rss_bytes(&self) -> anyhow::Result<u64> {
        let status = self.proc_file("status")?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| anyhow!("no VmRSS in /proc status"))?;
        Ok(kib * 1024)
    }

    /// CPU time (user and system) the server used so far, in seconds.
    /// The server's acknowledged appends and storage syncs so far, from its metrics.
    fn appends_and_syncs(&self) -> anyhow::Result<(u64, u64)> {
        let text =
            Client::connect(&self.base, Transport::Rest, "bench-metrics")?.get_text("/metrics")?;
        let counter = |name: &str| -> anyhow::Result<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .ok_or_else(|| anyhow!("the metrics have no {name}"))?
                .trim()
                .parse()
                .with_context(|| format!("{name} is not a count"))
        };
        Ok((
            counter("research_ledger_appends_total")?,
            counter("research_ledger_storage_syncs_total")?,
        ))
    }

    fn cpu_secs(&self) -> anyhow::Result<f64> {
        cpu_secs(&self.proc_file("stat")?)
    }

    /// Stops the server as an operator would (SIGTERM, then it finishes and exits).
    fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                bail!("serve did not stop within a minute of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time (user and system) of the process whose `/proc/PID/stat` line is `stat`, in seconds.
fn cpu_secs(stat: &str) -> anyhow::Result<f64> {
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("unreadable /proc stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Ok((ticks(11) + ticks(12)) / 100.0)
}

/// Opens a task for a client.
fn open_task(client: &mut Client, name: &str) -> anyhow::Result<String> {
    let opened = client.call_tool(
        "research_open_task",
        json!({"question": format!("Does the benchmark hold for {name}?"), "research_date": "2025-06-30"}),
    )?;
    opened["task_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("an opened task has no id: {opened}"))
}

/// Restarts timed on each generated ledger.
const RESTARTS: usize = 3;

/// Evidence adds a task takes before a writer moves to a new one, below the domain's bound on
/// evidence per task.
const ADDS_PER_TASK: u64 = 200;

/// The arguments of `research_open_task` for a client's next task.
fn open_task_arguments(name: &str) -> String {
    format!(
        r#"{{"question":{},"research_date":"2025-06-30"}}"#,
        load::quoted(&format!("Does the benchmark hold for {name}?"))
    )
}

/// Opens a task over a load connection; answers its id.
async fn open_task_on(conn: &mut load::Conn, name: &str) -> anyhow::Result<String> {
    let answer = conn
        .call(load::Call::Tool(
            "research_open_task",
            &open_task_arguments(name),
        ))
        .await?;
    load::string_field(&answer, "task_id").ok_or_else(|| {
        anyhow!(
            "an opened task has no id: {}",
            String::from_utf8_lossy(&answer)
        )
    })
}

/// The arguments of the `n`th evidence add of client `name` to `task`.
fn add_arguments(name: &str, task: &str, n: u64) -> String {
    let content = format!(
        "{name} item {n}: the series shows supply growing faster than demand over five years."
    );
    format!(
        r#"{{"task_id":{},"source":"source-{}.example.org","publish_date":"2025-01-10","source_type":"government","content":{},"stance":"{}"}}"#,
        load::quoted(task),
        n % 5,
        load::quoted(&content),
        if n.is_multiple_of(3) {
            "opposes"
        } else {
            "supports"
        },
    )
}

/// `connections` clients each adding evidence to tasks of their own for `secs`: writes/s and
/// the latencies, with how many writes there were.
fn concurrent_writes(
    base: &str,
    transport: Transport,
    connections: usize,
    secs: f64,
) -> anyhow::Result<((f64, u64), Latency)> {
    let addr = load::address(base)?;
    let duration = Duration::from_secs_f64(secs);
    let clients = load::drive(connections, move |w, start| async move {
        let name = format!("{}-writer-{w}", transport.name());
        let mut conn = load::Conn::open(addr, transport).await?;
        let mut task = open_task_on(&mut conn, &name).await?;
        let began = start.wait().await;
        let mut latencies = Vec::new();
        let mut n = 0u64;
        while began.elapsed() < duration {
            if n > 0 && n.is_multiple_of(ADDS_PER_TASK) {
                task = open_task_on(&mut conn, &name).await?;
            }
            let arguments = add_arguments(&name, &task, n);
            let sent = Instant::now();
            conn.call(load::Call::Tool("retrieval_add_evidence", &arguments))
                .await?;
            latencies.push(sent.elapsed());
            n += 1;
        }
        anyhow::Ok((latencies, began.elapsed()))
    })?;
    let elapsed = clients.iter().map(|(_, e)| *e).max().unwrap_or_default();
    let latencies: Vec<Duration> = clients.into_iter().flat_map(|(l, _)| l).collect();
    let count = latencies.len() as u64;
    Ok(((rate(count, elapsed), count), Latency::of(latencies)))
}

/// What a read run asks: a tool over the run's transport with each of some argument texts in
/// turn, or a GraphQL request body.
#[derive(Clone)]
enum Read {
    Tool(&'static str, std::rc::Rc<Vec<String>>),
    Graphql(std::rc::Rc<String>),
}

impl Read {
    fn tool(name: &'static str, arguments: Vec<String>) -> Read {
        Read::Tool(name, std::rc::Rc::new(arguments))
    }

    fn call(&self, i: usize) -> load::Call<'_> {
        match self {
            Read::Tool(name, arguments) => {
                load::Call::Tool(name, &arguments[i % arguments.len().max(1)])
            }
            Read::Graphql(body) => load::Call::Graphql(body),
        }
    }
}

/// `connections` clients each making `per_client` reads, after a warm-up read each.
fn concurrent_reads(
    base: &str,
    transport: Transport,
    connections: usize,
    per_client: usize,
    read: impl Fn() -> Read + Send + 'static,
) -> anyhow::Result<Latency> {
    let addr = load::address(base)?;
    let clients = load::drive(connections, move |w, start| {
        let read = read();
        async move {
            let mut conn = load::Conn::open(addr, transport).await?;
            conn.call(read.call(w)).await?;
            start.wait().await;
            let mut latencies = Vec::with_capacity(per_client);
            for i in 0..per_client {
                let sent = Instant::now();
                conn.call(read.call(w + i)).await?;
                latencies.push(sent.elapsed());
            }
            anyhow::Ok(latencies)
        }
    })?;
    Ok(Latency::of(clients.into_iter().flatten().collect()))
}

/// A task with some evidence, screened and concluded: what the read runs read.
fn seeded_task(base: &str) -> anyhow::Result<String> {
    let mut client = Client::connect(base, Transport::Rest, "bench-seed")?;
    let task = open_task(&mut client, "the reads")?;
    let mut decisions = Vec::new();
    for (i, (source, stance)) in [
        ("stats.example.org", "supports"),
        ("journal.example.org", "supports"),
        ("daily.example.org", "opposes"),
        ("lab.example.org", "supports"),
    ]
    .into_iter()
    .enumerate()
    {
        let added = client.call_tool(
            "retrieval_add_evidence",
            json!({"task_id": task, "source": source, "publish_date": format!("2025-0{}-10", i + 1),
                   "source_type": "government", "stance": stance,
                   "content": format!("{source} reports on the question, item {i}.")}),
        )?;
        let id = added["evidence"]["evidence_id"]
            .as_str()
            .or_else(|| added["evidence_id"].as_str())
            .ok_or_else(|| anyhow!("added evidence has no id: {added}"))?
            .to_owned();
        decisions.push(json!({"evidence_id": id, "adopt": true}));
    }
    client.call_tool(
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": decisions}),
    )?;
    for step in [
        "evaluation_conflict_resolution",
        "evaluation_build_decision_matrix",
        "evaluation_generate_conclusion",
    ] {
        client.call_tool(step, json!({"task_id": task}))?;
    }
    Ok(task)
}

/// Ids of tasks spread over the generated ledger, read from the task index.
fn first_tasks(base: &str) -> anyhow::Result<Vec<String>> {
    let mut client = Client::connect(base, Transport::Rest, "bench-index")?;
    let mut ids = Vec::new();
    let mut after = Value::Null;
    for _ in 0..20 {
        let data = client.graphql(
            "query($after: String) { tasks(first: 100, after: $after) { edges { node { id } } pageInfo { endCursor hasNextPage } } }",
            json!({"after": after}),
        )?;
        let page = &data["tasks"];
        for edge in page["edges"].as_array().into_iter().flatten() {
            if let Some(id) = edge["node"]["id"].as_str() {
                ids.push(id.to_owned());
            }
        }
        if page["pageInfo"]["hasNextPage"] != json!(true) {
            break;
        }
        after = page["pageInfo"]["endCursor"].clone();
    }
    if ids.is_empty() {
        bail!("the generated ledger lists no task");
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments that panicked the benchmark (a duration of NaN or infinity), ran it out of
    /// threads (100000 connections) or measured nothing (no reads, a ledger of no events) are
    /// refused when parsed, naming the flag.
    #[test]
    fn arguments_that_would_panic_or_measure_nothing_are_refused() {
        use clap::CommandFactory as _;
        let parse = |args: &[&str]| {
            let mut all = vec!["research-ledger", "bench", "service"];
            all.extend_from_slice(args);
            crate::Cli::command().try_get_matches_from(all)
        };
        for (flag, value) in [
            ("--write-secs", "NaN"),
            ("--write-secs", "inf"),
            ("--write-secs", "0"),
            ("--write-secs", "3601"),
            ("--reads", "0"),
            ("--connections", "0"),
            ("--connections", "8,100000"),
            ("--sizes", "0"),
        ] {
            let error = parse(&[flag, value]).unwrap_err().to_string();
            assert!(error.contains(flag), "{flag} {value}: {error}");
        }
        assert!(
            parse(&[
                "--write-secs",
                "0.5",
                "--connections",
                "1,2048",
                "--reads",
                "1"
            ])
            .is_ok()
        );
    }

    /// The load generator's processor time is read finely enough for a short run: the clock's
    /// first step while this thread computes is well under the 10 ms of a clock tick.
    #[test]
    fn the_own_processor_clock_steps_finer_than_a_tick() {
        let start = own_cpu_secs().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut now = start;
        let mut spin = 0u64;
        while now == start && Instant::now() < deadline {
            spin = std::hint::black_box(spin.wrapping_add(1));
            now = own_cpu_secs().unwrap();
        }
        let step = now - start;
        assert!(step > 0.0 && step < 0.002, "the clock stepped by {step} s");
    }
}
