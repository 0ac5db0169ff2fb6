//! Tests of the `sources` crate through its public API, on real files in temporary folders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod blobs;
mod contracts;
mod database;
mod ingest;
mod rank;
mod search;
mod similarity;
mod summary;
mod upgrade;

use std::path::{Path, PathBuf};

use chrono::NaiveDate;
use sources::{Corpus, CorpusLimits, Defaults, IngestReport};

/// The sample corpus that ships with the repository.
pub fn sample_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus/sample")
}

/// The default publish date the sample's three undated documents are ingested with: the first
/// day of the window its questions admit evidence from (2019 to the research date), so an
/// undated document is never treated as fresher than dated evidence.
pub fn sample_default_date() -> NaiveDate {
    NaiveDate::from_ymd_opt(2019, 1, 1).unwrap()
}

/// Ingests `paths` into the corpus in `dir` with `defaults`.
pub fn ingest_into(dir: &Path, paths: &[PathBuf], defaults: &Defaults) -> (Corpus, IngestReport) {
    let corpus = Corpus::open(dir, CorpusLimits::default()).unwrap();
    let report = corpus.ingest(paths, defaults, &mut |_| {}).unwrap();
    (corpus, report)
}

/// A corpus of the sample documents in `dir`.
pub fn sample_corpus(dir: &Path) -> (Corpus, IngestReport) {
    ingest_into(
        dir,
        &[sample_dir().join("documents")],
        &Defaults {
            publish_date: Some(sample_default_date()),
            ..Defaults::default()
        },
    )
}

/// `(id, title, text)` documents, dated and typed alike, as one JSON Lines file in `dir`.
pub fn jsonl_of(dir: &Path, documents: &[(&str, &str, &str)]) -> PathBuf {
    let lines: Vec<String> = documents
        .iter()
        .map(|(id, title, text)| {
            serde_json::json!({
                "id": id, "title": title, "content": text, "source": "Example Survey",
                "source_type": "government", "publish_date": "2024-01-01",
            })
            .to_string()
        })
        .collect();
    write(dir, "documents.jsonl", &lines.join("\n"))
}

/// Writes `text` to `dir/name`, creating folders on the way.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    path
}

/// The service shares one corpus and one content store between request handlers.
#[test]
fn corpus_and_blob_store_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Corpus>();
    shared::<sources::BlobStore>();
    shared::<sources::SearchResult>();
}
