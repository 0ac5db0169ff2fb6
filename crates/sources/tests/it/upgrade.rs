//! A corpus folder written in an older index format (the first, or the second, which had no
//! title group) opens: it is rebuilt from the documents it stores into exactly the index a fresh
//! ingest of them gives, and searches it as the current format does.

use std::path::{Path, PathBuf};

use sources::{Corpus, CorpusLimits, Defaults, tokenize};

use crate::ingest_into;

fn fixture(format: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/corpus-{format}"))
}

/// The older formats, each with the state id its fixture had in it (its README says how it was
/// made). Both fixtures hold the documents of `corpus-v1/documents.jsonl`.
const OLD_FORMATS: [(&str, &str); 2] = [
    (
        "v1",
        "4f6756caf62135fc825bb92b50afe23f67a65a99d62b294c52dfd843c1638445",
    ),
    (
        "v2",
        "49d7283f60f0747a4855e228e33f42620787cc4cb5b08da9a91de685e5d0a137",
    ),
];

/// The state id of those documents in the current format, with the current ranking: a change of
/// format, analyzer, ranking or its parameters changes it, so that a search recorded on one is
/// never taken for a search on the other.
const CURRENT_STATE: &str = "04a506e059a685619836ef586b83cf62a48b2830e2f415be1392f163071bc5df";

/// A copy of the pinned index of `format` in a new folder.
fn old_copy(parent: &Path, format: &str) -> PathBuf {
    let dir = parent.join("corpus");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture(format).join("index")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    dir
}

fn fresh(parent: &Path) -> Corpus {
    let (corpus, report) = ingest_into(
        &parent.join("fresh"),
        &[fixture("v1").join("documents.jsonl")],
        &Defaults::default(),
    );
    assert!(report.is_clean(), "{report:?}");
    corpus
}

#[test]
fn an_old_format_folder_is_rebuilt_at_open_into_what_an_ingest_gives() {
    for (format, state) in OLD_FORMATS {
        rebuilt_at_open(format, state);
    }
}

fn rebuilt_at_open(format: &str, old_state: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = old_copy(tmp.path(), format);
    let old_files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let rebuilt = Corpus::open(&dir, CorpusLimits::default()).unwrap();
    let fresh = fresh(tmp.path());
    assert_eq!(rebuilt.len(), 6);
    assert_ne!(rebuilt.index_state().id, old_state, "{format}");
    assert_eq!(fresh.index_state().id, CURRENT_STATE);
    assert_eq!(rebuilt.index_state(), fresh.index_state());
    // Every document came back whole.
    for id in [
        "arctic-extent",
        "glacier-retreat",
        "coral-bleaching",
        "sea-level",
        "ice-cream",
        "shared-bikes",
    ] {
        assert_eq!(
            rebuilt.document(id).unwrap(),
            fresh.document(id).unwrap(),
            "{id}"
        );
        assert!(rebuilt.document(id).unwrap().is_some(), "{id}");
    }
    // The old segment files are gone, and no staging folder is left.
    let now: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    for name in &old_files {
        let name = name.to_string_lossy();
        if name.contains('.') && !name.starts_with('.') && name != "meta.json" {
            assert!(!now.iter().any(|n| n.to_string_lossy() == name), "{name}");
        }
    }
    assert!(!dir.join(".rebuild").exists());

    // It searches as the current format does: by title and by stem, in English and Chinese.
    for (query, first) in [
        ("Arctic sea ice decline", "arctic-extent"),
        ("glacier retreat", "glacier-retreat"),
        ("共享单车", "shared-bikes"),
    ] {
        let terms = tokenize(query);
        let a = rebuilt.search(query, 3, &terms).unwrap();
        let b = fresh.search(query, 3, &terms).unwrap();
        assert_eq!(a, b, "{format}: {query}");
        assert_eq!(a.hits[0].id, first, "{format}: {query}");
    }

    // Reopened, it is not rebuilt again; a second copy rebuilds to the same state.
    drop(rebuilt);
    let again = Corpus::open(&dir, CorpusLimits::default()).unwrap();
    assert_eq!(again.index_state(), fresh.index_state());
    let other = tempfile::tempdir().unwrap();
    let second = Corpus::open(old_copy(other.path(), format), CorpusLimits::default()).unwrap();
    assert_eq!(second.index_state(), fresh.index_state());
}

#[test]
fn a_rebuild_cut_short_is_done_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = old_copy(tmp.path(), "v2");
    // A staging folder left behind by a rebuild that stopped before the swap.
    std::fs::create_dir_all(dir.join(".rebuild")).unwrap();
    std::fs::write(dir.join(".rebuild/meta.json"), "half written").unwrap();
    let corpus = Corpus::open(&dir, CorpusLimits::default()).unwrap();
    assert_eq!(corpus.index_state(), fresh(tmp.path()).index_state());
    assert!(!dir.join(".rebuild").exists());
}

#[test]
fn an_old_folder_another_process_writes_is_not_rebuilt_under_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = old_copy(tmp.path(), "v1");
    // The writer lock of the old index, held as a writing process holds it.
    let old = tantivy::Index::open_in_dir(&dir).unwrap();
    let writer: tantivy::IndexWriter = old.writer_with_num_threads(1, 15_000_000).unwrap();
    let err = Corpus::open(&dir, CorpusLimits::default()).unwrap_err();
    assert!(
        matches!(err, sources::CorpusError::Locked { .. }),
        "{err:?}"
    );
    drop(writer);
    let corpus = Corpus::open(&dir, CorpusLimits::default()).unwrap();
    assert_eq!(corpus.len(), 6);
}
