//! Ingesting: every format, every bad field, defaults, re-ingesting, the sample corpus.

use std::path::Path;

use chrono::NaiveDate;
use research::rules::SourceType;
use sources::{Corpus, CorpusLimits, Defaults, Field, IngestError, IngestReport};

use crate::{ingest_into, sample_corpus, sample_default_date, write};

const FRONT: &str = "---\nid: {id}\ntitle: A title\nsource: Example Daily\nurl: https://daily.example.org/a\npublish_date: 2024-03-01\nsource_type: news_original\ncitation_count: 2\n---\n";

fn markdown(id: &str, body: &str) -> String {
    format!("{}{body}\n", FRONT.replace("{id}", id))
}

fn json_doc(id: &str, content: &str) -> String {
    format!(
        r#"{{"id":"{id}","source":"Example Journal","publish_date":"2023-05-06","source_type":"academic_paper","content":"{content}"}}"#
    )
}

/// The error for the document at `file` (and `line`), if any.
fn error_at<'a>(report: &'a IngestReport, file: &str, line: Option<u64>) -> Vec<&'a IngestError> {
    report
        .errors
        .iter()
        .filter(|e| e.location.path.ends_with(file) && e.location.line == line)
        .collect()
}

fn assert_error(
    report: &IngestReport,
    file: &str,
    line: Option<u64>,
    field: Option<Field>,
    words: &str,
) {
    let found = error_at(report, file, line);
    assert_eq!(found.len(), 1, "{file}:{line:?}: {:#?}", report.errors);
    let error = found[0];
    assert_eq!(error.field, field, "{error}");
    assert!(error.problem.contains(words), "{error}");
    let shown = error.to_string();
    assert!(shown.contains(file), "{shown}");
    if let Some(field) = field {
        assert!(shown.contains(field.name()), "{shown}");
    }
    if let Some(line) = line {
        assert!(shown.contains(&format!(":{line}")), "{shown}");
    }
}

#[test]
fn every_format_is_read_with_its_metadata() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "a.md", &markdown("md-doc", "Markdown body."));
    write(
        docs.path(),
        "notes/plain.txt",
        "A text file without front matter.\r\nSecond line.\n",
    );
    write(
        docs.path(),
        "one.json",
        &json_doc("json-one", "One JSON object."),
    );
    write(
        docs.path(),
        "many.json",
        &format!(
            "[{}, {}]",
            json_doc("json-array-0", "First of an array."),
            r#"{"source":"https://www.example.net/x","publish_date":"2022-01-01T23:30:00-02:00","source_type":"blog","content":"No id here."}"#
        ),
    );
    write(
        docs.path(),
        "lines.jsonl",
        &format!(
            "{}\n\n{}\n",
            json_doc("jsonl-1", "First line."),
            r#"{"url":"https://stats.example.gov/t","publish_date":"2021-07-08","source_type":"government","citation_count":12,"content":"Third line."}"#
        ),
    );
    write(docs.path(), "ignored.csv", "not,a,document\n");
    write(
        docs.path(),
        ".hidden/x.md",
        &markdown("hidden", "Never read."),
    );
    let corpus_dir = tempfile::tempdir().unwrap();
    let defaults = Defaults {
        publish_date: NaiveDate::from_ymd_opt(2020, 2, 2),
        source_type: Some(SourceType::Other),
        source: Some("Example Notes".into()),
    };
    let (corpus, report) = ingest_into(corpus_dir.path(), &[docs.path().to_path_buf()], &defaults);
    assert!(report.is_clean(), "{:#?}", report.errors);
    assert_eq!((report.files, report.documents, report.added), (5, 7, 7));

    let md = corpus.document("md-doc").unwrap().unwrap();
    assert_eq!(md.title, "A title");
    assert_eq!(md.source.as_deref(), Some("Example Daily"));
    assert_eq!(md.url.as_deref(), Some("https://daily.example.org/a"));
    assert_eq!(
        md.publish_date,
        NaiveDate::from_ymd_opt(2024, 3, 1).unwrap()
    );
    assert_eq!(md.source_type, SourceType::NewsOriginal);
    assert_eq!(md.citation_count, Some(2));
    assert_eq!(md.content, "Markdown body.");
    assert!(!md.defaulted.any());

    // No front matter: the id comes from the path, every other field from the defaults, and
    // the document says so. Line endings are normalised before hashing.
    let txt = corpus.document("notes/plain.txt").unwrap().unwrap();
    assert_eq!(
        txt.content,
        "A text file without front matter.\nSecond line."
    );
    assert_eq!(
        txt.defaulted.names(),
        ["publish_date", "source_type", "source"]
    );
    assert_eq!(txt.source.as_deref(), Some("Example Notes"));

    assert!(corpus.document("json-one").unwrap().is_some());
    assert!(corpus.document("json-array-0").unwrap().is_some());
    let derived = corpus.document("many.json[1]").unwrap().unwrap();
    assert_eq!(
        derived.publish_date,
        NaiveDate::from_ymd_opt(2022, 1, 2).unwrap()
    );
    assert_eq!(derived.source.as_deref(), Some("https://www.example.net/x"));
    assert!(!derived.defaulted.source);
    assert!(corpus.document("jsonl-1").unwrap().is_some());
    let line3 = corpus.document("lines.jsonl:3").unwrap().unwrap();
    assert_eq!(line3.citation_count, Some(12));
    assert_eq!(line3.source, None);
    assert_eq!(line3.url.as_deref(), Some("https://stats.example.gov/t"));
    assert_eq!(corpus.document("hidden").unwrap(), None);
}

#[test]
fn every_bad_field_is_named_with_its_file_and_the_rest_goes_in() {
    let docs = tempfile::tempdir().unwrap();
    let d = docs.path();
    write(d, "good.md", &markdown("good-md", "A good document."));
    write(
        d,
        "no-date.md",
        &markdown("no-date", "Body.").replace("publish_date: 2024-03-01\n", ""),
    );
    write(
        d,
        "bad-date.md",
        &markdown("bad-date", "Body.").replace("2024-03-01", "2024-02-30"),
    );
    write(
        d,
        "bad-type.md",
        &markdown("bad-type", "Body.").replace("news_original", "tabloid"),
    );
    write(
        d,
        "negative.md",
        &markdown("negative", "Body.").replace("citation_count: 2", "citation_count: -4"),
    );
    write(
        d,
        "wordy.md",
        &markdown("wordy", "Body.").replace("citation_count: 2", "citation_count: several"),
    );
    write(d, "empty-body.md", &markdown("empty-body", "  \n"));
    write(
        d,
        "unclosed.md",
        "---\nid: unclosed\ntitle: No end\nBody.\n",
    );
    write(d, "bad-yaml.md", "---\nid: [unclosed\n---\nBody.\n");
    write(
        d,
        "lines.jsonl",
        &[
            json_doc("line-1", "Fine."),
            "{\"id\": \"line-2\", \"content\": ".to_string(),
            r#"{"id":"line-3","source":"s","publish_date":"2023-01-01","source_type":"blog"}"#
                .to_string(),
            json_doc("line-4", "Also fine."),
            "[1, 2]".to_string(),
        ]
        .join("\n"),
    );
    write(d, "broken.json", "{\"id\": ");
    let corpus_dir = tempfile::tempdir().unwrap();
    let (corpus, report) = ingest_into(corpus_dir.path(), &[d.to_path_buf()], &Defaults::default());

    assert_error(
        &report,
        "no-date.md",
        None,
        Some(Field::PublishDate),
        "missing",
    );
    assert_error(
        &report,
        "bad-date.md",
        None,
        Some(Field::PublishDate),
        "not a date",
    );
    assert_error(
        &report,
        "bad-type.md",
        None,
        Some(Field::SourceType),
        "tabloid",
    );
    assert_error(
        &report,
        "negative.md",
        None,
        Some(Field::CitationCount),
        "negative",
    );
    assert_error(
        &report,
        "wordy.md",
        None,
        Some(Field::CitationCount),
        "got a string",
    );
    assert_error(
        &report,
        "empty-body.md",
        None,
        Some(Field::Content),
        "empty",
    );
    assert_error(
        &report,
        "unclosed.md",
        None,
        Some(Field::FrontMatter),
        "never closed",
    );
    assert_error(
        &report,
        "bad-yaml.md",
        None,
        Some(Field::FrontMatter),
        "invalid YAML",
    );
    assert_error(&report, "lines.jsonl", Some(2), None, "invalid JSON");
    assert_error(
        &report,
        "lines.jsonl",
        Some(3),
        Some(Field::Content),
        "missing",
    );
    assert_error(&report, "lines.jsonl", Some(5), None, "one JSON object");
    assert_error(&report, "broken.json", Some(1), None, "invalid JSON");
    assert_eq!(report.failed, 12);
    assert_eq!(report.errors.len(), 12);
    assert!(!report.is_clean());

    // The good documents went in, and only they.
    assert_eq!((report.documents, report.added), (3, 3));
    assert_eq!(corpus.len(), 3);
    for id in ["good-md", "line-1", "line-4"] {
        assert!(corpus.document(id).unwrap().is_some(), "{id}");
    }
    // A document with a bad field carries its id in the error.
    let negative = error_at(&report, "negative.md", None)[0];
    assert_eq!(negative.document_id.as_deref(), Some("negative"));
}

#[test]
fn several_problems_of_one_document_are_all_listed() {
    let docs = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "all-wrong.json",
        r#"{"id":"w","source_type":"rumour","citation_count":-1,"content":"Text."}"#,
    );
    let corpus_dir = tempfile::tempdir().unwrap();
    let (_, report) = ingest_into(
        corpus_dir.path(),
        &[docs.path().to_path_buf()],
        &Defaults::default(),
    );
    let fields: Vec<Option<Field>> = report.errors.iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        [
            Some(Field::Source),
            Some(Field::PublishDate),
            Some(Field::SourceType),
            Some(Field::CitationCount)
        ]
    );
    assert_eq!(report.failed, 1, "one document failed, for four reasons");
}

#[test]
fn paths_that_cannot_be_used_are_reported() {
    let docs = tempfile::tempdir().unwrap();
    let good = write(docs.path(), "good.md", &markdown("good", "Fine."));
    let csv = write(docs.path(), "table.csv", "a,b\n");
    let missing = docs.path().join("absent");
    let corpus_dir = tempfile::tempdir().unwrap();
    let (corpus, report) = ingest_into(
        corpus_dir.path(),
        &[missing, csv, good],
        &Defaults::default(),
    );
    assert_error(&report, "absent", None, None, "cannot read");
    assert_error(&report, "table.csv", None, None, "unsupported file type");
    assert_eq!(corpus.len(), 1);
}

#[test]
fn unknown_fields_are_warnings_not_failures() {
    let docs = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "extra.md",
        &markdown("extra", "Body.")
            .replace("title: A title\n", "title: A title\nauthor: Someone\n"),
    );
    let corpus_dir = tempfile::tempdir().unwrap();
    let (corpus, report) = ingest_into(
        corpus_dir.path(),
        &[docs.path().to_path_buf()],
        &Defaults::default(),
    );
    assert!(report.is_clean());
    assert_eq!(report.warnings.len(), 1);
    assert!(
        report.warnings[0]
            .to_string()
            .contains("unknown field `author`")
    );
    assert!(corpus.document("extra").unwrap().is_some());
}

#[test]
fn reingesting_replaces_only_what_changed_and_never_duplicates() {
    let docs = tempfile::tempdir().unwrap();
    let path = write(docs.path(), "a.md", &markdown("a", "First version."));
    write(docs.path(), "b.md", &markdown("b", "Stays the same."));
    let corpus_dir = tempfile::tempdir().unwrap();
    let (corpus, first) = ingest_into(
        corpus_dir.path(),
        &[docs.path().to_path_buf()],
        &Defaults::default(),
    );
    assert_eq!((first.added, first.replaced, first.unchanged), (2, 0, 0));

    let again = corpus
        .ingest(
            &[docs.path().to_path_buf()],
            &Defaults::default(),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!((again.added, again.replaced, again.unchanged), (0, 0, 2));
    assert_eq!(again.index_state, first.index_state, "nothing changed");

    std::fs::write(&path, markdown("a", "Second version.")).unwrap();
    let changed = corpus
        .ingest(
            &[docs.path().to_path_buf()],
            &Defaults::default(),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(
        (changed.added, changed.replaced, changed.unchanged),
        (0, 1, 1)
    );
    assert_ne!(changed.index_state, first.index_state);
    assert_eq!(corpus.len(), 2);
    assert_eq!(
        corpus.document("a").unwrap().unwrap().content,
        "Second version."
    );
    let result = corpus.search("version", 10, &[]).unwrap();
    assert_eq!(result.hits.len(), 1, "the old text is gone from the index");

    // The same text under another id is its own document.
    write(docs.path(), "c.md", &markdown("c", "Second version."));
    let copy = corpus
        .ingest(
            &[docs.path().to_path_buf()],
            &Defaults::default(),
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(copy.added, 1);
    assert_eq!(corpus.len(), 3);
    let result = corpus.search("version", 10, &[]).unwrap();
    assert_eq!(result.hits.len(), 1);
    assert_eq!(result.hits[0].folded_ids, ["c"]);
}

#[test]
fn a_changed_default_is_a_change() {
    let docs = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "u.md",
        &markdown("u", "Undated.").replace("publish_date: 2024-03-01\n", ""),
    );
    let corpus_dir = tempfile::tempdir().unwrap();
    let on = |y| Defaults {
        publish_date: NaiveDate::from_ymd_opt(y, 1, 1),
        ..Defaults::default()
    };
    let (corpus, _) = ingest_into(corpus_dir.path(), &[docs.path().to_path_buf()], &on(2019));
    let again = corpus
        .ingest(&[docs.path().to_path_buf()], &on(2020), &mut |_| {})
        .unwrap();
    assert_eq!(again.replaced, 1);
    let doc = corpus.document("u").unwrap().unwrap();
    assert_eq!(
        doc.publish_date,
        NaiveDate::from_ymd_opt(2020, 1, 1).unwrap()
    );
    assert!(doc.defaulted.publish_date);
}

#[test]
fn one_id_twice_in_one_ingest_keeps_the_first() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "1.md", &markdown("same", "One text."));
    write(docs.path(), "2.md", &markdown("same", "Another text."));
    write(docs.path(), "3.md", &markdown("same", "One text."));
    let corpus_dir = tempfile::tempdir().unwrap();
    let (corpus, report) = ingest_into(
        corpus_dir.path(),
        &[docs.path().to_path_buf()],
        &Defaults::default(),
    );
    assert_error(&report, "2.md", None, Some(Field::Id), "already used by");
    assert!(report.errors[0].problem.contains("1.md"));
    assert_eq!((report.added, report.unchanged, report.failed), (1, 1, 1));
    assert_eq!(
        corpus.document("same").unwrap().unwrap().content,
        "One text."
    );
}

#[test]
fn oversized_content_is_refused_by_its_limit() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "big.md", &markdown("big", &"x ".repeat(600)));
    write(docs.path(), "small.md", &markdown("small", "Short."));
    let corpus_dir = tempfile::tempdir().unwrap();
    let corpus = Corpus::open(
        corpus_dir.path(),
        CorpusLimits {
            content_bytes_max: 1_000,
            ..CorpusLimits::default()
        },
    )
    .unwrap();
    let report = corpus
        .ingest(
            &[docs.path().to_path_buf()],
            &Defaults::default(),
            &mut |_| {},
        )
        .unwrap();
    assert_error(
        &report,
        "big.md",
        None,
        Some(Field::Content),
        "content_bytes_max",
    );
    assert_eq!(corpus.len(), 1);
}

#[test]
fn the_sample_ingests_cleanly_with_a_default_date_for_its_undated_documents() {
    let corpus_dir = tempfile::tempdir().unwrap();
    let (corpus, report) = sample_corpus(corpus_dir.path());
    assert!(report.is_clean(), "{:#?}", report.errors);
    assert!(report.warnings.is_empty(), "{:#?}", report.warnings);
    assert_eq!((report.files, report.documents, report.added), (44, 47, 47));
    for id in [
        "fwd-blog-undated-manifesto",
        "qcb-other-undated-leaflet",
        "lv-blog-undated-angler",
    ] {
        let doc = corpus.document(id).unwrap().unwrap();
        assert!(doc.defaulted.publish_date, "{id}");
        assert_eq!(doc.publish_date, sample_default_date());
    }
    let dated = corpus.document("fwd-gov-2024-output").unwrap().unwrap();
    assert!(!dated.defaulted.any());

    // Without the default, exactly the three undated documents fail.
    let bare_dir = tempfile::tempdir().unwrap();
    let (_, bare) = ingest_into(
        bare_dir.path(),
        &[crate::sample_dir().join("documents")],
        &Defaults::default(),
    );
    let mut failed: Vec<String> = bare
        .errors
        .iter()
        .map(|e| {
            assert_eq!(e.field, Some(Field::PublishDate));
            file_stem(&e.location.path)
        })
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        [
            "fwd-blog-undated-manifesto",
            "lv-blog-undated-angler",
            "qcb-other-undated-leaflet"
        ]
    );
}

fn file_stem(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

#[test]
fn progress_is_reported_per_file() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "a.md", &markdown("a", "A."));
    write(docs.path(), "b.md", &markdown("b", "B."));
    let corpus_dir = tempfile::tempdir().unwrap();
    let corpus = Corpus::open(corpus_dir.path(), CorpusLimits::default()).unwrap();
    let mut seen = Vec::new();
    corpus
        .ingest(
            &[docs.path().to_path_buf()],
            &Defaults::default(),
            &mut |p| {
                seen.push(format!("{p:?}"));
            },
        )
        .unwrap();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen[0].contains("Started { files: 2 }"));
    assert!(seen[2].contains("done: 2"));
    assert!(seen[3].contains("Committing"));
}

/// Documents read on one machine and sent to another go in as if read there.
#[test]
fn documents_read_elsewhere_go_in_as_an_ingest_of_their_files_would() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "a.md", &markdown("a", "First text."));
    write(
        docs.path(),
        "u.md",
        &markdown("u", "Undated.").replace("publish_date: 2024-03-01\n", ""),
    );
    write(
        docs.path(),
        "c.jsonl",
        &format!("{}\n{}\n", json_doc("j1", "One."), json_doc("j2", "Two.")),
    );
    write(docs.path(), "bad.md", &markdown("bad", ""));
    let defaults = Defaults {
        publish_date: NaiveDate::from_ymd_opt(2020, 1, 1),
        ..Defaults::default()
    };
    let paths = [docs.path().to_path_buf()];
    let mut read = Vec::new();
    let report = sources::read_documents(
        &paths,
        &defaults,
        &CorpusLimits::default(),
        &mut |_| {},
        &mut |_, document| -> Result<(), std::convert::Infallible> {
            read.push(document);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!((report.files, report.documents, report.failed), (4, 4, 1));
    assert_error_in(&report.errors, "bad.md", Field::Content);

    // Sent as JSON, as a client sends them.
    let sent: Vec<sources::Document> =
        serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
    let remote_dir = tempfile::tempdir().unwrap();
    let remote = Corpus::open(remote_dir.path(), CorpusLimits::default()).unwrap();
    let added = remote.add_documents(&sent).unwrap();
    assert!(added.rejected.is_empty(), "{:?}", added.rejected);
    assert_eq!((added.added, added.replaced, added.unchanged), (4, 0, 0));
    let local_dir = tempfile::tempdir().unwrap();
    let (_, local) = ingest_into(local_dir.path(), &paths, &defaults);
    assert_eq!(added.index_state, local.index_state, "the same index");
    assert!(
        remote
            .document("u")
            .unwrap()
            .unwrap()
            .defaulted
            .publish_date
    );
    let again = remote.add_documents(&sent).unwrap();
    assert_eq!((again.added, again.unchanged), (0, 4));
}

fn assert_error_in(errors: &[IngestError], file: &str, field: Field) {
    assert!(
        errors
            .iter()
            .any(|e| e.location.path.ends_with(file) && e.field == Some(field)),
        "{errors:#?}"
    );
}

/// A document that does not read back as sent, or repeats an id of the same call, is named
/// by its position and kept out; the rest go in.
#[test]
fn documents_that_do_not_check_out_are_rejected_by_position() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "a.md", &markdown("a", "Some text."));
    let mut read = Vec::new();
    sources::read_documents(
        &[docs.path().to_path_buf()],
        &Defaults::default(),
        &CorpusLimits::default(),
        &mut |_| {},
        &mut |_, document| -> Result<(), std::convert::Infallible> {
            read.push(document);
            Ok(())
        },
    )
    .unwrap();
    let good = read.pop().unwrap();
    let mut forged_hash = good.clone();
    forged_hash.id = "forged".into();
    forged_hash.content = "Other text.".into();
    let mut untrimmed = good.clone();
    untrimmed.id = "untrimmed".into();
    untrimmed.title = " A title ".into();
    let mut false_default = good.clone();
    false_default.id = "false-default".into();
    // A default publisher is only for a document that names neither publisher nor URL.
    false_default.defaulted.source = true;
    let mut too_long = good.clone();
    too_long.id = "x".repeat(500);
    let corpus_dir = tempfile::tempdir().unwrap();
    let corpus = Corpus::open(corpus_dir.path(), CorpusLimits::default()).unwrap();
    let report = corpus
        .add_documents(&[
            good.clone(),
            forged_hash,
            untrimmed,
            false_default,
            too_long,
            good,
        ])
        .unwrap();
    let rejected: Vec<(usize, Option<Field>)> =
        report.rejected.iter().map(|r| (r.index, r.field)).collect();
    assert_eq!(
        rejected,
        [
            (1, Some(Field::Content)),
            (2, Some(Field::Title)),
            (3, Some(Field::Source)),
            (4, Some(Field::Id)),
            (5, Some(Field::Id)),
        ],
        "{:#?}",
        report.rejected
    );
    assert!(report.rejected[4].problem.contains("#0"));
    assert_eq!((report.added, corpus.len()), (1, 1));
}

/// Each bound on what an ingest reads refuses the document (or the file, or the line) that
/// goes past it, naming the bound, and lets the rest in; past `ingest_problems_listed_max` the
/// report stops listing errors but still counts every failed document.
#[test]
fn every_bound_on_what_an_ingest_reads_is_named_and_the_rest_goes_in() {
    let docs = tempfile::tempdir().unwrap();
    let d = docs.path();
    let front = |id: &str, title: &str, source: &str, url: &str| {
        format!(
            "---\nid: {id}\ntitle: {title}\nsource: {source}\nurl: {url}\npublish_date: 2024-03-01\nsource_type: news_original\n---\nBody of {id}.\n"
        )
    };
    write(
        d,
        "fine.md",
        &front("fine", "Short", "Daily", "https://a.b"),
    );
    write(
        d,
        "long-id.md",
        &front("an-id-of-twenty-chars", "Short", "Daily", "https://a.b"),
    );
    write(
        d,
        "long-title.md",
        &front(
            "t",
            "A title of thirty characters..",
            "Daily",
            "https://a.b",
        ),
    );
    write(
        d,
        "long-source.md",
        &front("s", "Short", "The Example Daily Times", "https://a.b"),
    );
    write(
        d,
        "long-url.md",
        &front(
            "u",
            "Short",
            "Daily",
            "https://daily.example.org/a/long/path",
        ),
    );
    write(
        d,
        "big.md",
        &front("big", "Short", "Daily", "https://a.b").repeat(20),
    );
    write(
        d,
        "lines.jsonl",
        &[
            json_doc("line-1", "Fine."),
            json_doc("line-2", &"long ".repeat(100)),
            json_doc("line-3", "Fine."),
        ]
        .join("\n"),
    );
    let limits = CorpusLimits {
        file_bytes_max: 1_000,
        jsonl_line_bytes_max: 300,
        id_chars_max: 12,
        title_chars_max: 20,
        source_chars_max: 16,
        url_chars_max: 30,
        ..CorpusLimits::default()
    };
    let corpus_dir = tempfile::tempdir().unwrap();
    let corpus = Corpus::open(corpus_dir.path(), limits.clone()).unwrap();
    let report = corpus
        .ingest(&[d.to_path_buf()], &Defaults::default(), &mut |_| {})
        .unwrap();
    assert_error(
        &report,
        "long-id.md",
        None,
        Some(Field::Id),
        "id_chars_max (12)",
    );
    assert_error(
        &report,
        "long-title.md",
        None,
        Some(Field::Title),
        "title_chars_max (20)",
    );
    assert_error(
        &report,
        "long-source.md",
        None,
        Some(Field::Source),
        "source_chars_max (16)",
    );
    assert_error(
        &report,
        "long-url.md",
        None,
        Some(Field::Url),
        "url_chars_max (30)",
    );
    assert_error(&report, "big.md", None, None, "file_bytes_max (1000 bytes)");
    assert_error(
        &report,
        "lines.jsonl",
        Some(2),
        None,
        "jsonl_line_bytes_max (300 bytes)",
    );
    assert_eq!(
        (report.failed, report.errors.len()),
        (6, 6),
        "{:#?}",
        report.errors
    );
    assert_eq!(report.added, 3);
    for id in ["fine", "line-1", "line-3"] {
        assert!(corpus.document(id).unwrap().is_some(), "{id}");
    }

    // The same ingest listing at most two problems: all six still fail, two are listed.
    let listed = tempfile::tempdir().unwrap();
    let corpus = Corpus::open(
        listed.path(),
        CorpusLimits {
            ingest_problems_listed_max: 2,
            ..limits
        },
    )
    .unwrap();
    let report = corpus
        .ingest(&[d.to_path_buf()], &Defaults::default(), &mut |_| {})
        .unwrap();
    assert_eq!(
        (report.failed, report.errors.len()),
        (6, 2),
        "{:#?}",
        report.errors
    );
    assert_eq!(report.added, 3);
}

/// Index writer memory outside what the index writer takes is brought within it: below its
/// least and past its most, an ingest goes in as with the default.
#[test]
fn writer_memory_outside_what_the_index_writer_takes_is_brought_within_it() {
    let docs = tempfile::tempdir().unwrap();
    write(docs.path(), "a.jsonl", &json_doc("doc-1", "Some text."));
    for bytes in [0, sources::limits::WRITER_MEMORY_BYTES_MAX + 1, u64::MAX] {
        let limits = CorpusLimits {
            writer_memory_bytes_max: bytes,
            ..CorpusLimits::default()
        };
        let corpus_dir = tempfile::tempdir().unwrap();
        let corpus = Corpus::open(corpus_dir.path(), limits).unwrap();
        let report = corpus
            .ingest(
                &[docs.path().to_path_buf()],
                &Defaults::default(),
                &mut |_| {},
            )
            .unwrap();
        assert_eq!((report.added, report.failed), (1, 0), "{bytes}: {report:?}");
    }
}
