//! Searching: the sample's questions, English and Chinese queries, determinism across reopening
//! and rebuilding, folding of identical texts, scores, summaries and limits.

use research::rules::{QuestionTerm, idf_coverage};
use serde_json::Value;
use sources::{
    Corpus, CorpusLimits, Defaults, SearchError, SearchResult, content_hash, summarize, tokenize,
};

use crate::{ingest_into, sample_corpus, sample_default_date, sample_dir, write};

fn questions() -> Vec<Value> {
    let text = std::fs::read_to_string(sample_dir().join("questions.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    all["questions"].as_array().unwrap().clone()
}

fn ids(result: &SearchResult) -> Vec<&str> {
    result.hits.iter().map(|h| h.id.as_str()).collect()
}

/// Every id a result shows, folded ones included.
fn found_ids(result: &SearchResult) -> Vec<&str> {
    result
        .hits
        .iter()
        .flat_map(|h| std::iter::once(h.id.as_str()).chain(h.folded_ids.iter().map(String::as_str)))
        .collect()
}

fn search_question(corpus: &Corpus, question: &str, limit: usize) -> SearchResult {
    corpus.search(question, limit, &tokenize(question)).unwrap()
}

#[test]
fn every_sample_question_finds_all_its_documents() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    for q in questions() {
        let question = q["question"].as_str().unwrap();
        let result = search_question(&corpus, question, 20);
        let found = found_ids(&result);
        for row in q["screening"].as_array().unwrap() {
            let id = row["doc_id"].as_str().unwrap();
            assert!(
                found.contains(&id),
                "{question}: {id} not found in {found:?}"
            );
        }
        // The best hits are the question's own documents, whatever their language.
        let prefix = &q["screening"][0]["doc_id"].as_str().unwrap()[..3];
        for hit in &result.hits[..10] {
            assert!(
                hit.id.starts_with(prefix),
                "{question}: {} in the top 10",
                hit.id
            );
        }
    }
}

#[test]
fn sample_relevance_reaches_what_each_expected_stance_needs() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    for q in questions() {
        let question = q["question"].as_str().unwrap();
        let result = search_question(&corpus, question, 50);
        let evidence: Vec<&str> = q["expected"]["conclusion"]["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let relevance: Vec<f64> = evidence
            .iter()
            .map(|id| {
                result
                    .hits
                    .iter()
                    .find(|h| h.id == *id)
                    .unwrap_or_else(|| panic!("{id} not among the hits"))
                    .relevance
            })
            .collect();
        let mean = relevance.iter().sum::<f64>() / relevance.len() as f64;
        let needed = q["expected"]["conclusion"]["min_relevance_for_stance"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(
            mean >= needed,
            "{question}: mean relevance {mean} below the {needed} its stance needs"
        );
        assert!(relevance.iter().all(|r| (0.0..=1.0).contains(r)));
    }
}

#[test]
fn chinese_queries_find_chinese_documents() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let result = corpus.search("共享单车", 5, &[]).unwrap();
    assert_eq!(result.hits.len(), 5);
    assert!(
        result.hits.iter().all(|h| h.id.starts_with("qcb-")),
        "{:?}",
        ids(&result)
    );

    let result = corpus.search("地铁三号线 停车收费", 3, &[]).unwrap();
    assert_eq!(ids(&result)[0], "qcb-acad-2024-metro");

    // The Chinese documents about Lake Varden, by its Chinese name and a term only they use.
    let result = corpus.search("瓦登湖 污水厂溢流", 3, &[]).unwrap();
    let mut top = ids(&result);
    top.sort_unstable();
    assert_eq!(
        top,
        [
            "lv-acad-2024-zh-timing",
            "lv-inst-2023-zh-plant",
            "lv-news-2024-zh-sewage"
        ]
    );
    // A name written without its last character still matches through character pairs.
    let result = corpus.search("青川", 20, &[]).unwrap();
    assert!(result.hits.len() >= 10);
}

#[test]
fn english_queries_find_english_documents() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let result = corpus
        .search("sediment phosphorus release", 3, &[])
        .unwrap();
    assert_eq!(ids(&result)[0], "lv-acad-2025-sediment");
    // Plurals fold: `booking` and `date` find a text that says `bookings` and `dates`.
    let result = corpus
        .search("placebo adoption date, contract booking", 1, &[])
        .unwrap();
    assert_eq!(ids(&result), ["fwd-acad-2024-did"]);
}

#[test]
fn the_same_search_gives_the_same_result_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let question = "Did agricultural runoff cause the algae blooms in Lake Varden?";
    let queries = [
        question,
        "共享单车是否减少了青川市的短途汽车出行？",
        "four-day week",
    ];
    let first: Vec<SearchResult> = {
        let (corpus, _) = sample_corpus(dir.path());
        let once: Vec<_> = queries
            .iter()
            .map(|q| corpus.search(q, 25, &tokenize(question)).unwrap())
            .collect();
        let twice: Vec<_> = queries
            .iter()
            .map(|q| corpus.search(q, 25, &tokenize(question)).unwrap())
            .collect();
        assert_eq!(once, twice);
        once
    };
    let reopened = Corpus::open(dir.path(), CorpusLimits::default()).unwrap();
    for (query, before) in queries.iter().zip(&first) {
        let after = reopened.search(query, 25, &tokenize(question)).unwrap();
        assert_eq!(&after, before, "{query}");
        for (a, b) in after.hits.iter().zip(&before.hits) {
            assert_eq!(a.raw_score.to_bits(), b.raw_score.to_bits());
            assert_eq!(a.relevance.to_bits(), b.relevance.to_bits());
        }
    }
}

#[test]
fn the_same_documents_give_the_same_state_and_scores_however_they_were_ingested() {
    let documents = sample_dir().join("documents");
    let defaults = Defaults {
        publish_date: Some(sample_default_date()),
        ..Defaults::default()
    };
    let (one_go_dir, in_parts_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (one_go, _) = ingest_into(
        one_go_dir.path(),
        std::slice::from_ref(&documents),
        &defaults,
    );

    // In three batches, in another order, with a document first ingested in another version and
    // then corrected: the corpus ends up holding the same documents.
    let scratch = tempfile::tempdir().unwrap();
    let stale = std::fs::read_to_string(documents.join("lv-acad-2025-sediment.md"))
        .unwrap()
        .replace("publish_date: 2025-02-10", "publish_date: 2025-02-11");
    let stale = write(scratch.path(), "lv-acad-2025-sediment.md", &stale);
    let (in_parts, _) = ingest_into(
        in_parts_dir.path(),
        &[documents.join("extra.jsonl"), stale],
        &defaults,
    );
    let mut markdown: Vec<_> = std::fs::read_dir(&documents)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    markdown.sort();
    markdown.reverse();
    let (first_half, second_half) = markdown.split_at(markdown.len() / 2);
    let second = in_parts
        .ingest(second_half, &defaults, &mut |_| {})
        .unwrap();
    let third = in_parts.ingest(first_half, &defaults, &mut |_| {}).unwrap();
    assert_eq!(
        second.replaced + third.replaced,
        1,
        "the corrected document replaces the stale one"
    );

    assert_eq!(one_go.index_state(), in_parts.index_state());
    let question =
        "Did the four-day work week raise output at mid-sized software firms in Eastvale?";
    let (a, b) = (
        one_go.search(question, 30, &tokenize(question)).unwrap(),
        in_parts.search(question, 30, &tokenize(question)).unwrap(),
    );
    assert_eq!(a, b);
}

#[test]
fn identical_texts_fold_into_the_earliest_published() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let result = corpus
        .search(
            "Forty-two mid-sized software firms began a six-month pilot",
            1,
            &[],
        )
        .unwrap();
    assert_eq!(result.hits.len(), 1);
    let hit = &result.hits[0];
    assert_eq!(hit.id, "fwd-news-2023-pilot-launch");
    assert_eq!(hit.folded_ids, ["fwd-reprint-2023-pilot-launch"]);

    // Folded copies do not use up the limit: three copies and one other text, limit 2.
    let scratch = tempfile::tempdir().unwrap();
    let text = "Tidal power output rose sharply in the bay.";
    let line = |id: &str, date: Option<&str>| {
        let date = date.map_or(String::new(), |d| format!(r#","publish_date":"{d}""#));
        format!(
            r#"{{"id":"{id}","source":"Example Tides","source_type":"blog"{date},"content":"{text}"}}"#
        )
    };
    let body = [
        line("a-copy", Some("2021-05-02")),
        line("b-original", Some("2021-05-01")),
        line("c-undated", None),
        r#"{"id":"d-other","source":"Example Tides","source_type":"blog","publish_date":"2020-01-01","content":"Tidal power in the bay."}"#.to_string(),
    ]
    .join("\n");
    let corpus_dir = tempfile::tempdir().unwrap();
    let (tides, report) = ingest_into(
        corpus_dir.path(),
        &[write(scratch.path(), "tides.jsonl", &body)],
        &Defaults {
            // Earlier than both given dates: a default never makes a copy the original.
            publish_date: chrono::NaiveDate::from_ymd_opt(2000, 1, 1),
            ..Defaults::default()
        },
    );
    assert_eq!(report.added, 4, "{report:?}");
    let result = tides.search("tidal power bay", 2, &[]).unwrap();
    let mut shown = ids(&result);
    shown.sort_unstable();
    assert_eq!(shown, ["b-original", "d-other"]);
    let group = result.hits.iter().find(|h| h.id == "b-original").unwrap();
    assert_eq!(group.folded_ids, ["a-copy", "c-undated"]);
}

#[test]
fn scores_are_ordered_normalised_and_ties_go_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let result = corpus.search("Eastvale output", 30, &[]).unwrap();
    assert_eq!(result.hits[0].normalised_score, 1.0);
    for (rank, pair) in result.hits.windows(2).enumerate() {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(a.rank as usize, rank + 1);
        assert!(
            a.raw_score > b.raw_score || (a.raw_score == b.raw_score && a.id < b.id),
            "{} before {}",
            a.id,
            b.id
        );
        assert!(b.normalised_score > 0.0 && b.normalised_score <= a.normalised_score);
        assert_eq!(b.normalised_score, b.raw_score / result.hits[0].raw_score);
    }

    // Equal texts under different titles tie; the tie goes to the smaller id.
    let scratch = tempfile::tempdir().unwrap();
    let doc = |id: &str, text: &str| {
        format!(
            r#"{{"id":"{id}","source":"s","source_type":"blog","publish_date":"2024-01-01","content":"{text}"}}"#
        )
    };
    let body = [
        doc("zeta", "glacier melt one"),
        doc("alpha", "glacier melt two"),
        doc("mid", "glacier melt six"),
    ]
    .join("\n");
    let corpus_dir = tempfile::tempdir().unwrap();
    let (ties, _) = ingest_into(
        corpus_dir.path(),
        &[write(scratch.path(), "t.jsonl", &body)],
        &Defaults::default(),
    );
    let result = ties.search("glacier", 2, &[]).unwrap();
    assert_eq!(ids(&result), ["alpha", "mid"]);
    assert_eq!(result.hits[0].raw_score, result.hits[1].raw_score);
}

#[test]
fn relevance_can_be_recomputed_from_the_recorded_inputs_and_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let question = "共享单车是否减少了青川市的短途汽车出行？";
    let result = search_question(&corpus, question, 10);
    assert_eq!(result.corpus_docs, 47);
    assert_eq!(result.index_state.documents, 47);
    let weights: Vec<QuestionTerm<'_>> = result
        .question_terms
        .iter()
        .map(|t| QuestionTerm {
            term: &t.term,
            doc_freq: t.doc_freq,
        })
        .collect();
    for hit in &result.hits {
        let text = corpus.content(&hit.content_hash).unwrap().unwrap();
        assert_eq!(content_hash(text.as_bytes()), hit.content_hash);
        let terms = tokenize(&text);
        let terms: Vec<&str> = terms.iter().map(String::as_str).collect();
        let again = idf_coverage(&weights, &terms, result.corpus_docs);
        assert_eq!(again.to_bits(), hit.relevance.to_bits(), "{}", hit.id);
    }
    // No question terms: relevance 0 and nothing recorded.
    let result = corpus.search(question, 3, &[]).unwrap();
    assert!(result.question_terms.is_empty());
    assert!(result.hits.iter().all(|h| h.relevance == 0.0));
}

#[test]
fn hits_carry_metadata_summaries_and_reliability() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let result = corpus
        .search("Eastvale software output panel", 30, &[])
        .unwrap();
    let panel = result
        .hits
        .iter()
        .find(|h| h.id == "fwd-data-2024-output-panel")
        .unwrap();
    // Its first sentence ends after character 800: the summary falls back to a word cut.
    assert!(panel.summary.ends_with('…'), "{}", panel.summary);
    assert!(panel.summary.chars().count() <= 800);
    assert_eq!(panel.source.as_deref(), Some("Northwind Institute"));
    assert_eq!(
        panel.reliability,
        research::rules::reliability(1.0, Some(3))
    );
    assert!(!panel.defaulted.publish_date);

    let undated = corpus
        .search("Calm Shipping four days manifesto", 50, &[])
        .unwrap();
    let manifesto = undated
        .hits
        .iter()
        .find(|h| h.id == "fwd-blog-undated-manifesto")
        .unwrap();
    assert!(manifesto.defaulted.publish_date);
    assert_eq!(manifesto.publish_date, sample_default_date());

    let metro = corpus.search("地铁三号线", 1, &[]).unwrap();
    let metro = &metro.hits[0];
    assert_eq!(metro.id, "qcb-acad-2024-metro");
    assert!(metro.summary.ends_with('。'), "{}", metro.summary);
    assert!(metro.summary.chars().count() <= 800);
    let full = corpus.document(&metro.id).unwrap().unwrap();
    assert!(full.content.chars().count() > 800);
    assert_eq!(metro.summary, summarize(&full.content, 800));

    for hit in &result.hits {
        assert!(hit.summary.chars().count() <= 800);
    }
    // Candidates: reliability first, BM25 rank among equals.
    let candidates = result.candidates();
    assert_eq!(candidates.len(), result.hits.len());
    for pair in candidates.windows(2) {
        assert!(
            pair[0].reliability > pair[1].reliability
                || (pair[0].reliability == pair[1].reliability && pair[0].rank < pair[1].rank)
        );
    }
    let best = result
        .hits
        .iter()
        .map(|h| h.reliability)
        .fold(0.0, f64::max);
    assert_eq!(candidates[0].reliability, best);
}

#[test]
fn limits_and_empty_queries_are_refused_with_their_names() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = sample_corpus(dir.path());
    let long = "word ".repeat(201);
    assert!(matches!(
        corpus.search(&long, 5, &[]),
        Err(SearchError::QueryTooLong {
            chars: 1005,
            limit: 1000
        })
    ));
    assert!(matches!(
        corpus.search("output", 0, &[]),
        Err(SearchError::LimitOutOfRange { requested: 0, .. })
    ));
    assert!(matches!(
        corpus.search("output", 101, &[]),
        Err(SearchError::LimitOutOfRange {
            requested: 101,
            limit: 100
        })
    ));
    assert!(matches!(
        corpus.search(" ?! … ", 5, &[]),
        Err(SearchError::NoTerms)
    ));
    let many: Vec<String> = (0..4097).map(|i| format!("t{i}")).collect();
    assert!(matches!(
        corpus.search("output", 5, &many),
        Err(SearchError::TooManyQuestionTerms { limit: 4096, .. })
    ));
    // Asking for more than there is gives what there is.
    let result = corpus.search("酒店", 100, &[]).unwrap();
    assert!(result.hits.len() < 100);
}

#[test]
fn an_empty_corpus_answers_with_no_hits() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = Corpus::open(dir.path(), CorpusLimits::default()).unwrap();
    assert!(corpus.is_empty());
    let result = corpus
        .search("anything", 10, &tokenize("anything at all"))
        .unwrap();
    assert!(result.hits.is_empty());
    assert_eq!(result.corpus_docs, 0);
    assert_eq!(result.question_terms.len(), 3);
    assert_eq!(corpus.document("nope").unwrap(), None);
}

#[test]
fn stems_titles_and_content_terms_rank_what_a_query_is_about() {
    let dir = tempfile::tempdir().unwrap();
    let docs = write(
        dir.path(),
        "docs.jsonl",
        &[
            r#"{"id": "a-stem", "title": "Mountains", "source": "s", "source_type": "other", "content": "The glaciers were retreating quickly."}"#,
            r#"{"id": "b-title", "title": "Arctic sea ice", "source": "s", "source_type": "other", "content": "It shrank to a record low in 2012."}"#,
            r#"{"id": "c-functions", "title": "Notes", "source": "s", "source_type": "other", "content": "What is it that was in the one that is on the list of the things?"}"#,
            r#"{"id": "d-other", "title": "Oceans", "source": "s", "source_type": "other", "content": "Record heat in the ocean in 2023."}"#,
        ]
        .join("\n"),
    );
    let defaults = Defaults {
        publish_date: Some(sample_default_date()),
        ..Defaults::default()
    };
    let (corpus, _) = ingest_into(&dir.path().join("corpus"), &[docs], &defaults);
    // `glacier retreat` finds `glaciers were retreating` only through their stems.
    let stemmed = corpus.search("glacier retreat", 4, &[]).unwrap();
    assert_eq!(ids(&stemmed), ["a-stem"]);
    // The passage that never names its subject is found by its document's title.
    let titled = corpus.search("arctic ice record", 4, &[]).unwrap();
    assert_eq!(ids(&titled)[0], "b-title");
    assert!(ids(&titled).contains(&"d-other"));
    // A query's function words do not match: the passage made of them is not a hit.
    let worded = corpus
        .search("what is the record of the ocean", 4, &[])
        .unwrap();
    assert!(!ids(&worded).contains(&"c-functions"), "{:?}", ids(&worded));
    assert_eq!(ids(&worded)[0], "d-other");
    // A query of function words only still finds what holds them.
    let only = corpus.search("what is it that was", 4, &[]).unwrap();
    assert_eq!(ids(&only)[0], "c-functions");
    // A title matches content terms only: `the` in a title would not count, and relevance is
    // still that of the unstemmed text, `glacier` being absent from it (`glaciers` → `glacier`
    // by the plural rule is present).
    let question = tokenize("glacier retreat");
    let with_terms = corpus.search("glacier retreat", 4, &question).unwrap();
    assert_eq!(with_terms.hits[0].terms_found, [true, false]);
}
