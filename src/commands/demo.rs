//! `research-ledger demo`: research tasks on the bundled sample corpus, start to finish, with
//! the conclusion cards, the explanations and the verification of the ledger they left.
//!
//! The tasks run through the real MCP bridge as a client would: an MCP client (the official
//! SDK) speaks the protocol to the bridge over an in-process pipe, and every event is recorded
//! with the client's name as its actor.

use std::path::Path;

use anyhow::{Context, bail};
use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{RoleServer, ServiceExt};
use serde_json::Value;
use service::Service;

use crate::Outcome;
use crate::demo::{self, Tools};

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Run only this question of the sample (by id: four-day-week-eastvale,
    /// gongxiang-danche-qingchuan, lake-varden-blooms).
    #[arg(long)]
    question: Option<String>,
    /// Print the outcome as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The client name the demo's MCP client introduces itself with: the actor of its events.
const DEMO_CLIENT: &str = "demo-assistant";

/// Bytes buffered each way on the pipe between the demo's client and the bridge.
const PIPE_BYTES: usize = 1 << 20;

/// The tools as an MCP client reaches them: through the bridge, over an in-process pipe.
struct OverMcp {
    runtime: tokio::runtime::Runtime,
    client: RunningService<RoleClient, ClientConfig>,
    server: RunningService<RoleServer, mcp_bridge::Bridge>,
}

impl OverMcp {
    fn connect(service: &Service) -> anyhow::Result<OverMcp> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let (client_end, server_end) = tokio::io::duplex(PIPE_BYTES);
        let bridge = mcp_bridge::Bridge::new(service.clone(), mcp_bridge::BridgeOptions::default());
        let config = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(DEMO_CLIENT, env!("CARGO_PKG_VERSION")),
        );
        let (server, client) = runtime.block_on(async {
            // The server answers the client's handshake, so both start together.
            let server = tokio::spawn(bridge.serve(server_end));
            let client = config
                .serve(client_end)
                .await
                .context("the MCP client could not connect to the bridge")?;
            let server = server
                .await
                .context("the bridge stopped")?
                .context("the bridge did not start")?;
            anyhow::Ok((server, client))
        })?;
        Ok(OverMcp {
            runtime,
            client,
            server,
        })
    }

    fn close(self) {
        let OverMcp {
            runtime,
            mut client,
            mut server,
        } = self;
        runtime.block_on(async {
            let _ = client.close().await;
            let _ = server.close().await;
        });
    }
}

impl Tools for OverMcp {
    fn call(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        let Value::Object(arguments) = arguments else {
            bail!("{name}: the arguments must be a JSON object");
        };
        let request = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let result = self
            .runtime
            .block_on(self.client.call_tool(request))
            .with_context(|| format!("{name}: the MCP call failed"))?;
        let structured = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            bail!("{name}: {structured}");
        }
        Ok(structured)
    }
}

/// Ingests the bundled sample into the corpus (a no-op for documents already there).
pub(crate) fn ingest_sample(service: &Service) -> anyhow::Result<()> {
    let scratch = tempfile::tempdir().context("cannot create a temporary folder")?;
    demo::write_documents(scratch.path())?;
    let defaults = sources::Defaults {
        // The sample's undated documents are all rejected at screening; this is the first
        // day of the period its questions accept evidence from.
        publish_date: chrono::NaiveDate::from_ymd_opt(2019, 1, 1),
        ..sources::Defaults::default()
    };
    let report = service
        .ingest_files(&[scratch.path().to_path_buf()], &defaults, &mut |_| {})
        .context("cannot ingest the sample corpus")?;
    if !report.is_clean() {
        bail!(
            "the sample corpus did not ingest cleanly: {:?}",
            report.errors
        );
    }
    Ok(())
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let service = super::open_service(data_dir)?;
    ingest_sample(&service)?;
    let sample = demo::sample()?;
    let questions = select_questions(&sample, args)?;
    if !args.json {
        say!(
            "research-ledger demo: {} research task(s) on the bundled sample corpus (fictional sources), in {}\n",
            questions.len(),
            data_dir.display()
        );
    }
    let mut tools = OverMcp::connect(&service)?;
    let mut tasks = Vec::new();
    let mut outcomes = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let outcome = demo::run_question(&mut tools, q)
            .with_context(|| format!("the demo task {} failed", q.id))?;
        if !args.json {
            print_outcome(i + 1, questions.len(), q, &outcome);
        }
        tasks.push(outcome.task_id.clone());
        outcomes.push(serde_json::json!({
            "question_id": q.id,
            "task_id": outcome.task_id,
            "card": outcome.card,
            "conflicts": outcome.conflicts,
            "human_decisions": outcome.human_decisions,
            "evidence_of": outcome.evidence_of,
        }));
    }

    tools.close();

    // Sign what the run appended, so that the verification below checks a signed root and an
    // auditor can prove any of its events against it.
    let checkpoint = service
        .ledger()
        .checkpoint()
        .context("cannot sign a checkpoint of the run")?;
    let report = service.ledger().verify_from_scratch(&mut |_, _| {});
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "tasks": outcomes,
                "checkpoint": checkpoint,
                "verification": report,
            }))?
        );
        service.shutdown();
        return Ok(if report.is_intact() {
            Outcome::Passed
        } else {
            Outcome::Failed
        });
    }
    print_verification(&checkpoint, &report, data_dir, &tasks);
    service.shutdown();
    Ok(if report.is_intact() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// The sample's questions, or the one `--question` names.
fn select_questions<'a>(
    sample: &'a demo::Sample,
    args: &Args,
) -> anyhow::Result<Vec<&'a demo::Question>> {
    let questions: Vec<&demo::Question> = sample
        .questions
        .iter()
        .filter(|q| args.question.as_ref().is_none_or(|id| *id == q.id))
        .collect();
    if questions.is_empty() {
        bail!(
            "no question {:?} in the sample; it has: {}",
            args.question.as_deref().unwrap_or_default(),
            sample
                .questions
                .iter()
                .map(|q| q.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(questions)
}

/// The run's signed checkpoint, the verification of the ledger, and the commands that audit it.
fn print_verification(
    checkpoint: &ledger_proof::Checkpoint,
    report: &ledger::VerifyReport,
    data_dir: &Path,
    tasks: &[String],
) {
    say!(
        "Signed checkpoint: {} events, root {}, at {}, key {}.",
        checkpoint.tree_size,
        checkpoint.root,
        checkpoint.time,
        checkpoint.key_fingerprint
    );
    match &report.failure {
        None => say!(
            "Ledger: intact. {} events verified (hash chain, Merkle tree, {} signed checkpoint{}), root {}.",
            report.size,
            report.checkpoints_checked,
            if report.checkpoints_checked == 1 {
                ""
            } else {
                "s"
            },
            report.root
        ),
        Some(f) => say!(
            "Ledger: verification FAILED at seq {}: {}",
            f.seq,
            f.problem
        ),
    }
    let data = data_dir.display();
    say!("\nAudit it yourself:");
    for task in tasks {
        say!("  research-ledger --data-dir {data} replay {task} --check");
    }
    if let Some(task) = tasks.first() {
        say!("  research-ledger --data-dir {data} explain {task}");
    }
    say!("  research-ledger --data-dir {data} prove 0");
    say!("  research-ledger --data-dir {data} export --all --out bundle.json");
    say!("  research-ledger verify-bundle bundle.json");
}

fn print_outcome(n: usize, of: usize, q: &demo::Question, o: &demo::Outcome) {
    say!("━━ {n}/{of} · {}", q.question);
    say!(
        "task {} · {} searches, {} candidates: {} adopted, {} rejected",
        o.task_id,
        o.searches,
        o.candidates,
        o.adopted,
        o.rejected
    );
    if o.conflicts.is_empty() {
        say!("conflicts: none");
    } else {
        say!("conflicts:");
        for c in &o.conflicts {
            let scope = c["scope"].as_str().unwrap_or("main question");
            let winner = match (c["winner"].as_str(), c["resolution"].as_str()) {
                (Some(w), _) => format!("{w} wins"),
                (None, Some("both_stand")) => "both stand".to_owned(),
                _ => "pending".to_owned(),
            };
            say!(
                "  {} · {scope} · {} · {winner}",
                c["conflict_id"].as_str().unwrap_or("?"),
                c["tier"].as_str().unwrap_or("?")
            );
        }
    }
    for id in &o.human_decisions {
        say!("  {id} was pending: a reviewer decided that both sides stand, with a reason.");
    }
    say!("\n{}", o.card["markdown"].as_str().unwrap_or_default());
    say!("{}\n", o.explanation);
}
