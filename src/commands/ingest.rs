//! `research-ledger ingest`: adds documents to the embedded corpus of a data directory.
//!
//! Exit status 0 when every document went in, 1 when some could not be ingested (the others
//! still were; each failure is named on stderr with its file, line and field), 2 when the
//! corpus itself could not be opened or written.
//!
//! With `--server URL` the files are read and checked here all the same, and the documents go
//! to the server that holds the data directory (`POST /v1/corpus/documents`, admins only).
//!
//! With `--storage-url` the documents go into the storage database, which every node's index
//! follows; this data directory's index is brought up to date with it as well.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::NaiveDate;
use research::rules::SourceType;
use sources::{
    AddReport, Corpus, CorpusLimits, Defaults, IndexState, IngestError, IngestProgress,
    IngestReport, Location,
};

use crate::Outcome;
use crate::remote::{Remote, ServerArgs};

/// Most documents sent to a server in one request: under its default `add_documents_max`.
const BATCH_DOCUMENTS_MAX: usize = 500;

/// Bytes of documents gathered before a request goes: under the default `request_bytes_max`
/// of 4 MiB. A document larger than this goes alone.
const BATCH_BYTES_MAX: usize = 3 * 1024 * 1024;

/// Arguments of `ingest`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Files (.md, .txt, .json, .jsonl) or folders, walked recursively in name order.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,

    /// Publish date (YYYY-MM-DD) for documents that have none. Recorded as a default.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = parse_date)]
    default_publish_date: Option<NaiveDate>,

    /// Source type for documents that have none: primary_data, government, academic_paper,
    /// institutional_report, news_original, news_reprint, blog, social or other. Recorded as a
    /// default.
    #[arg(long, value_name = "TYPE", value_parser = parse_source_type)]
    default_source_type: Option<SourceType>,

    /// Publisher for documents that name neither a source nor a URL. Recorded as a default.
    #[arg(long, value_name = "PUBLISHER")]
    default_source: Option<String>,

    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    remote: ServerArgs,
}

fn parse_date(text: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|e| format!("expected YYYY-MM-DD: {e}"))
}

fn parse_source_type(text: &str) -> Result<SourceType, String> {
    text.parse().map_err(|_| {
        format!(
            "unknown source type; known: {}",
            SourceType::ALL.map(SourceType::name).join(", ")
        )
    })
}

/// The corpus folder inside a data directory.
pub(crate) fn corpus_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("corpus")
}

impl Args {
    pub(crate) fn defaults(&self) -> Defaults {
        Defaults {
            publish_date: self.default_publish_date,
            source_type: self.default_source_type,
            source: self.default_source.clone(),
        }
    }
}

/// Ingests `paths` into `corpus` with a progress bar on a terminal.
pub(crate) fn ingest_with_progress(
    corpus: &Corpus,
    paths: &[PathBuf],
    defaults: &Defaults,
) -> anyhow::Result<IngestReport> {
    let bar = super::progress_bar(0, "ingesting");
    let report = corpus.ingest(paths, defaults, &mut |progress| match progress {
        IngestProgress::Started { files } => bar.set_length(files),
        IngestProgress::FileDone { done, .. } => bar.set_position(done),
        IngestProgress::Committing => bar.set_message("committing"),
        IngestProgress::Encoding { done, total } => {
            bar.set_message("encoding passages");
            bar.set_length(total);
            bar.set_position(done);
        }
        _ => {}
    });
    bar.finish_and_clear();
    report.with_context(|| format!("cannot ingest into {}", corpus.dir().display()))
}

/// Ingests into the storage database the run names, and brings this data directory's index up
/// to the database's documents.
fn ingest_shared(data_dir: &Path, args: &Args) -> anyhow::Result<(IngestReport, u64)> {
    let url = crate::config::storage_url().context("no storage URL")?;
    let store = sources::PostgresDocuments::open(url)
        .context("cannot open the corpus in the storage database")?;
    let dir = corpus_dir(data_dir);
    let limits = crate::config::limits().corpus.clone();
    let listed_max = limits.ingest_problems_listed_max;
    let similarity = crate::config::similarity(data_dir)?;
    let (shared, corpus) = sources::SharedCorpus::open(&dir, limits, store, similarity)
        .with_context(|| format!("cannot open the corpus index in {}", dir.display()))?;
    let bar = super::progress_bar(0, "ingesting");
    let report =
        shared.ingest(
            &corpus,
            &args.paths,
            &args.defaults(),
            &mut |progress| match progress {
                IngestProgress::Started { files } => bar.set_length(files),
                IngestProgress::FileDone { done, .. } => bar.set_position(done),
                IngestProgress::Committing => bar.set_message("committing"),
                IngestProgress::Encoding { done, total } => {
                    bar.set_message("encoding passages");
                    bar.set_length(total);
                    bar.set_position(done);
                }
                _ => {}
            },
        );
    bar.finish_and_clear();
    Ok((
        report.context("cannot ingest into the storage database")?,
        listed_max,
    ))
}

/// Ingests where the run says: through a server, into the storage database, or into the
/// data directory's corpus; the report, where it went, and how many problems it lists.
fn ingest_where(data_dir: &Path, args: &Args) -> anyhow::Result<(IngestReport, String, u64)> {
    Ok(match args.remote.remote()? {
        Some(remote) => {
            let limits = crate::config::limits().corpus.clone();
            let report = ingest_remote(&remote, args, &limits)?;
            let name = format!("of {}", remote.server());
            (report, name, limits.ingest_problems_listed_max)
        }
        None if crate::config::storage_url().is_some() => {
            let (report, listed_max) = ingest_shared(data_dir, args)?;
            let name = format!(
                "in the storage database (index {})",
                corpus_dir(data_dir).display()
            );
            (report, name, listed_max)
        }
        None => {
            let dir = corpus_dir(data_dir);
            let similarity = crate::config::similarity(data_dir)?;
            let corpus =
                Corpus::open_with(&dir, crate::config::limits().corpus.clone(), similarity)
                    .with_context(|| format!("cannot open the corpus in {}", dir.display()))?;
            let report = ingest_with_progress(&corpus, &args.paths, &args.defaults())?;
            let listed_max = corpus.limits().ingest_problems_listed_max;
            (report, dir.display().to_string(), listed_max)
        }
    })
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let (report, corpus_name, listed_max) = ingest_where(data_dir, args)?;
    for warning in &report.warnings {
        tell!("warning: {warning}");
    }
    for error in &report.errors {
        tell!("error: {error}");
    }
    let missing = |field: sources::Field| {
        report
            .errors
            .iter()
            .any(|e| e.field == Some(field) && e.problem.starts_with("missing"))
    };
    if missing(sources::Field::PublishDate) && args.default_publish_date.is_none() {
        tell!("hint: --default-publish-date YYYY-MM-DD records a default for undated documents");
    }
    if missing(sources::Field::SourceType) && args.default_source_type.is_none() {
        tell!("hint: --default-source-type TYPE records a default for untyped documents");
    }
    if report.errors.len() as u64 >= listed_max {
        tell!(
            "error: only the first {listed_max} problems are listed; {} documents failed in all",
            report.failed
        );
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        say!(
            "read {} files: {} documents ingested ({} added, {} replaced, {} unchanged), {} failed",
            report.files,
            report.documents,
            report.added,
            report.replaced,
            report.unchanged,
            report.failed
        );
        say!(
            "corpus {corpus_name}: {} documents, index state {}",
            report.index_state.documents,
            report.index_state.id
        );
    }
    Ok(if report.is_clean() {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// Documents bound for the server, serialised, with where each was read.
#[derive(Debug, Default)]
struct Batch {
    documents: Vec<String>,
    locations: Vec<Location>,
    bytes: usize,
}

/// What the server reported so far.
#[derive(Debug, Default)]
struct Sent {
    requests: u64,
    added: u64,
    replaced: u64,
    unchanged: u64,
    rejected: u64,
    errors: Vec<IngestError>,
    index_state: Option<IndexState>,
}

impl Batch {
    /// Sends the documents gathered (`POST /v1/corpus/documents`) and empties the batch; the
    /// documents the server rejects become errors at the place they were read from.
    fn send(&mut self, remote: &Remote, sent: &mut Sent) -> anyhow::Result<()> {
        let body = format!("{{\"documents\":[{}]}}", self.documents.join(","));
        let answer: AddReport = remote.post_body("/v1/corpus/documents", body)?;
        sent.requests += 1;
        sent.added += answer.added;
        sent.replaced += answer.replaced;
        sent.unchanged += answer.unchanged;
        let mut rejected = BTreeSet::new();
        for r in answer.rejected {
            let location = self.locations.get(r.index).cloned().with_context(|| {
                format!(
                    "the server at {} rejected document #{} of a request of {}",
                    remote.server(),
                    r.index,
                    self.locations.len()
                )
            })?;
            rejected.insert(r.index);
            sent.errors.push(IngestError {
                location,
                document_id: Some(r.document_id),
                field: r.field,
                problem: r.problem,
            });
        }
        sent.rejected += rejected.len() as u64;
        sent.index_state = Some(answer.index_state);
        *self = Batch::default();
        Ok(())
    }
}

/// Reads the files here, exactly as a local ingest does (so a problem is named by its file,
/// line and field alike), and sends the documents to the server in batches of at most
/// [`BATCH_DOCUMENTS_MAX`] documents and about [`BATCH_BYTES_MAX`] bytes; the server checks
/// each again and adds it through its own corpus. Batches land one by one: a failure midway
/// leaves the batches before it ingested, and ingesting again finds them unchanged.
fn ingest_remote(
    remote: &Remote,
    args: &Args,
    limits: &CorpusLimits,
) -> anyhow::Result<IngestReport> {
    let bar = super::progress_bar(0, &format!("ingesting into {}", remote.server()));
    let mut batch = Batch::default();
    let mut sent = Sent::default();
    let read = sources::read_documents(
        &args.paths,
        &args.defaults(),
        limits,
        &mut |progress| match progress {
            IngestProgress::Started { files } => bar.set_length(files),
            IngestProgress::FileDone { done, .. } => bar.set_position(done),
            _ => {}
        },
        &mut |location, document| -> anyhow::Result<()> {
            let text = serde_json::to_string(&document)?;
            let full = batch.documents.len() >= BATCH_DOCUMENTS_MAX
                || batch.bytes + text.len() > BATCH_BYTES_MAX;
            if !batch.documents.is_empty() && full {
                batch.send(remote, &mut sent)?;
            }
            batch.bytes += text.len() + 1;
            batch.documents.push(text);
            batch.locations.push(location.clone());
            Ok(())
        },
    );
    // The last batch goes even when empty and alone: the answer names the index state, and
    // the server refuses a caller who may not ingest even with nothing to send.
    let read = read.and_then(|read| {
        if !batch.documents.is_empty() || sent.requests == 0 {
            batch.send(remote, &mut sent)?;
        }
        Ok(read)
    });
    bar.finish_and_clear();
    let read = read?;
    let mut errors = read.errors;
    let room = usize::try_from(limits.ingest_problems_listed_max)
        .unwrap_or(usize::MAX)
        .saturating_sub(errors.len());
    errors.extend(sent.errors.into_iter().take(room));
    let index_state = sent
        .index_state
        .context("the server did not say what its corpus holds")?;
    Ok(IngestReport {
        files: read.files,
        documents: read.documents.saturating_sub(sent.rejected),
        added: sent.added,
        replaced: sent.replaced,
        unchanged: sent.unchanged + read.repeated,
        failed: read.failed + sent.rejected,
        errors,
        warnings: read.warnings,
        index_state,
    })
}
