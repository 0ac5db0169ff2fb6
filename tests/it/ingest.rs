//! `research-ledger ingest` and `bench search` through the spawned binary: the sample corpus,
//! a folder with bad documents, and a small search bench.

use std::path::{Path, PathBuf};

use sources::{Corpus, CorpusLimits, tokenize};

use super::{run, stderr, stdout};

fn sample_documents() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/sample/documents")
}

fn open_corpus(data: &Path) -> Corpus {
    Corpus::open(data.join("corpus"), CorpusLimits::default()).unwrap()
}

#[test]
fn the_sample_ingests_cleanly_and_again_changes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let docs = sample_documents();
    let docs = docs.to_str().unwrap();
    let out = run(
        data.path(),
        &["ingest", docs, "--default-publish-date", "2019-01-01"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(
            "read 44 files: 47 documents ingested (47 added, 0 replaced, 0 unchanged), 0 failed"
        ),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));

    let out = run(
        data.path(),
        &[
            "ingest",
            docs,
            "--default-publish-date",
            "2019-01-01",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["unchanged"], 47);
    assert_eq!(report["added"], 0);
    assert_eq!(report["index_state"]["documents"], 47);

    // What the command wrote is the corpus the service searches.
    let corpus = open_corpus(data.path());
    assert_eq!(
        corpus.index_state().id,
        report["index_state"]["id"].as_str().unwrap()
    );
    let question = "共享单车是否减少了青川市的短途汽车出行？";
    let result = corpus.search(question, 11, &tokenize(question)).unwrap();
    assert!(result.hits.iter().all(|h| h.id.starts_with("qcb-")));
    let leaflet = corpus
        .document("qcb-other-undated-leaflet")
        .unwrap()
        .unwrap();
    assert!(leaflet.defaulted.publish_date);
    assert_eq!(leaflet.publish_date.to_string(), "2019-01-01");
}

#[test]
fn without_a_default_date_the_undated_documents_fail_and_the_rest_go_in() {
    let data = tempfile::tempdir().unwrap();
    let docs = sample_documents();
    let out = run(data.path(), &["ingest", docs.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("44 documents ingested (44 added"),
        "{}",
        stdout(&out)
    );
    assert!(stdout(&out).contains("3 failed"), "{}", stdout(&out));
    let errors = stderr(&out);
    for name in [
        "fwd-blog-undated-manifesto.md",
        "qcb-other-undated-leaflet.md",
        "lv-blog-undated-angler.md",
    ] {
        let line = errors
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} not named in:\n{errors}"));
        assert!(line.starts_with("error: "), "{line}");
        assert!(line.contains("field `publish_date`: missing"), "{line}");
    }
    assert!(errors.contains("hint: --default-publish-date"), "{errors}");
    assert_eq!(open_corpus(data.path()).len(), 44);
}

#[test]
fn a_folder_with_bad_documents_ingests_the_good_ones_and_names_the_bad() {
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    let front = |id: &str, source_type: &str| {
        format!(
            "---\nid: {id}\nsource: Example Daily\npublish_date: 2024-03-01\nsource_type: {source_type}\n---\nThe text of {id}.\n"
        )
    };
    std::fs::write(docs.path().join("good.md"), front("good", "news_original")).unwrap();
    std::fs::write(docs.path().join("bad.md"), front("bad", "pamphlet")).unwrap();
    std::fs::write(
        docs.path().join("lines.jsonl"),
        concat!(
            r#"{"id":"line-1","url":"https://example.org/1","publish_date":"2024-01-01","source_type":"blog","content":"First."}"#,
            "\n",
            r#"{"id":"line-2","citation_count":"#,
            "\n",
            r#"{"id":"line-3","url":"https://example.org/3","publish_date":"2024-01-01","source_type":"blog","citation_count":-1,"content":"Third."}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = run(data.path(), &["ingest", docs.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("2 documents ingested (2 added, 0 replaced, 0 unchanged), 3 failed"),
        "{}",
        stdout(&out)
    );
    let errors = stderr(&out);
    let line_of = |needle: &str| {
        errors
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not named in:\n{errors}"))
            .to_string()
    };
    assert!(line_of("bad.md").contains("field `source_type`: unknown source type `pamphlet`"));
    assert!(line_of("lines.jsonl:2").contains("invalid JSON"));
    assert!(line_of("lines.jsonl:3").contains("field `citation_count`: must not be negative"));

    let corpus = open_corpus(data.path());
    assert_eq!(corpus.len(), 2);
    assert!(corpus.document("good").unwrap().is_some());
    assert!(corpus.document("line-1").unwrap().is_some());
    assert!(corpus.document("bad").unwrap().is_none());
}

#[test]
fn bad_flags_are_refused_before_anything_is_read() {
    let data = tempfile::tempdir().unwrap();
    let docs = sample_documents();
    let out = run(
        data.path(),
        &[
            "ingest",
            docs.to_str().unwrap(),
            "--default-publish-date",
            "2019-13-01",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("YYYY-MM-DD"), "{}", stderr(&out));
    let out = run(
        data.path(),
        &[
            "ingest",
            docs.to_str().unwrap(),
            "--default-source-type",
            "tabloid",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("academic_paper"), "{}", stderr(&out));
    assert!(!data.path().join("corpus").exists());
}

#[test]
fn the_search_bench_prints_its_figures() {
    let data = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let evidence = files.path().join("evidence.jsonl");
    let claims = files.path().join("claims.jsonl");
    std::fs::write(
        &evidence,
        concat!(
            r#"{"id":"Glacier:1","source":"en.example.org","source_type":"other","content":"Glaciers are retreating almost everywhere."}"#,
            "\n",
            r#"{"id":"Ocean:2","source":"en.example.org","source_type":"other","content":"Ocean heat content has risen."}"#,
            "\n"
        ),
    )
    .unwrap();
    std::fs::write(
        &claims,
        concat!(
            r#"{"claim":"glaciers are retreating","evidences":[{"evidence_id":"Glacier:1","evidence_label":"SUPPORTS"}]}"#,
            "\n",
            r#"{"claim":"ocean heat has risen","evidences":[{"evidence_id":"Ocean:2","evidence_label":"NOT_ENOUGH_INFO"}]}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = run(
        data.path(),
        &[
            "bench",
            "search",
            "--evidence",
            evidence.to_str().unwrap(),
            "--claims",
            claims.to_str().unwrap(),
            "--top",
            "1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("ingest:  2 documents"), "{text}");
    assert!(text.contains("search:  2 claims, top 1"), "{text}");
    assert!(text.contains("quality: 100.0% of claims"), "{text}");
    assert!(
        text.contains("(50.0% one labelled SUPPORTS or REFUTES)"),
        "{text}"
    );
    assert!(
        !data.path().join("corpus").exists(),
        "the bench never touches the data directory"
    );
}
