//! `research-ledger ingest`: adds documents to the embedded corpus of a data directory.
//!
//! Exit status 0 when every document went in, 1 when some could not be ingested (the others
//! still were; each failure is named on stderr with its file, line and field), 2 when the
//! corpus itself could not be opened or written.

use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::NaiveDate;
use research::rules::SourceType;
use sources::{Corpus, CorpusLimits, Defaults, IngestProgress, IngestReport};

use crate::Outcome;

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
        _ => {}
    });
    bar.finish_and_clear();
    report.with_context(|| format!("cannot ingest into {}", corpus.dir().display()))
}

pub(crate) fn run(data_dir: &Path, args: &Args) -> anyhow::Result<Outcome> {
    let dir = corpus_dir(data_dir);
    let corpus = Corpus::open(&dir, CorpusLimits::default())
        .with_context(|| format!("cannot open the corpus in {}", dir.display()))?;
    let report = ingest_with_progress(&corpus, &args.paths, &args.defaults())?;
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    for error in &report.errors {
        eprintln!("error: {error}");
    }
    let missing = |field: sources::Field| {
        report
            .errors
            .iter()
            .any(|e| e.field == Some(field) && e.problem.starts_with("missing"))
    };
    if missing(sources::Field::PublishDate) && args.default_publish_date.is_none() {
        eprintln!(
            "hint: --default-publish-date YYYY-MM-DD records a default for undated documents"
        );
    }
    if missing(sources::Field::SourceType) && args.default_source_type.is_none() {
        eprintln!("hint: --default-source-type TYPE records a default for untyped documents");
    }
    let listed_max = corpus.limits().ingest_problems_listed_max;
    if report.errors.len() as u64 >= listed_max {
        eprintln!(
            "error: only the first {listed_max} problems are listed; {} documents failed in all",
            report.failed
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "read {} files: {} documents ingested ({} added, {} replaced, {} unchanged), {} failed",
            report.files,
            report.documents,
            report.added,
            report.replaced,
            report.unchanged,
            report.failed
        );
        println!(
            "corpus {}: {} documents, index state {}",
            dir.display(),
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
