//! The ranking: every score is the documented BM25F over text, title and title group, a passage
//! is found through the rest of its article, and queries of stop words only match texts alone.

use std::collections::BTreeMap;

use sources::corpus::RANKING;
use sources::{Corpus, Defaults, search_terms};

use crate::{ingest_into, jsonl_of};

/// `(id, title, text)` as one JSON Lines file, ingested into a new corpus in `dir`.
fn corpus_of(dir: &std::path::Path, documents: &[(&str, &str, &str)]) -> Corpus {
    let file = jsonl_of(dir, documents);
    let (corpus, report) = ingest_into(&dir.join("corpus"), &[file], &Defaults::default());
    assert!(report.is_clean(), "{report:?}");
    corpus
}

#[test]
fn the_ranking_is_named_with_its_parameters() {
    // Part of every index state id: a change of formula or parameter changes every state.
    assert_eq!(
        RANKING.name(),
        "research-ledger-rank-v1: bm25f k1=1.2 b=0.75 title=0.5 group=0.05 group_b=0.5"
    );
}

const ICE: [(&str, &str, &str); 4] = [
    ("a1", "Ice shelves", "Ice shelf collapse accelerated."),
    (
        "a2",
        "Ice shelves",
        "Warm water melts the shelf from below.",
    ),
    ("b1", "Tides", "Tides rise and fall twice daily."),
    ("c1", "", "Warm summers melt ice, and ice melts warm."),
];

/// The score `docs/rules.md` and `rank.rs` give, computed from the documents themselves, in the
/// same order of operations.
fn expected_scores(query: &[&str]) -> BTreeMap<&'static str, f64> {
    let n = ICE.len() as f64;
    let texts: Vec<Vec<String>> = ICE.iter().map(|d| search_terms(d.2)).collect();
    let titles: Vec<Vec<String>> = ICE.iter().map(|d| search_terms(d.1)).collect();
    let count = |terms: &[String], t: &str| terms.iter().filter(|x| *x == t).count() as f64;
    let avg_text = texts.iter().map(Vec::len).sum::<usize>() as f64 / n;
    let avg_title = titles.iter().map(Vec::len).sum::<usize>() as f64 / n;
    // Groups: the two "Ice shelves" passages, "Tides", and the untitled c1 on its own.
    let group = |i: usize| -> Vec<usize> {
        match ICE[i].1 {
            "" => vec![i],
            title => (0..ICE.len()).filter(|j| ICE[*j].1 == title).collect(),
        }
    };
    let avg_members = n / 3.0;
    let norm = |b: f64, len: f64, avg: f64| 1.0 - b + b * len / avg;
    let r = RANKING;
    let mut out = BTreeMap::new();
    for (i, document) in ICE.iter().enumerate() {
        let members = group(i);
        let text_norm = norm(r.b, texts[i].len() as f64, avg_text);
        let title_norm = norm(r.b, titles[i].len() as f64, avg_title);
        let group_norm = norm(r.group_b, members.len() as f64, avg_members);
        let mut score = 0.0;
        let mut matched = false;
        for t in query {
            let df = texts.iter().filter(|x| count(x, t) > 0.0).count() as f64;
            let idf = libm::log(1.0 + (n - df + 0.5) / (df + 0.5));
            let in_group: f64 = members.iter().map(|j| count(&texts[*j], t)).sum();
            matched |= count(&texts[i], t) > 0.0 || count(&titles[i], t) > 0.0;
            let mut x = 0.0;
            x += count(&texts[i], t) / text_norm;
            x += r.title_weight * count(&titles[i], t) / title_norm;
            x += r.group_weight * in_group / group_norm;
            if x > 0.0 {
                score += idf * x * (r.k1 + 1.0) / (x + r.k1);
            }
        }
        if matched {
            out.insert(document.0, score);
        }
    }
    out
}

#[test]
fn every_score_is_the_documented_bm25f() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus_of(dir.path(), &ICE);
    let result = corpus.search("Does warm ice melt?", 10, &[]).unwrap();
    let expected = expected_scores(&["warm", "ice", "melt"]);
    let found: BTreeMap<&str, f64> = result
        .hits
        .iter()
        .map(|h| (h.id.as_str(), h.raw_score))
        .collect();
    // b1 holds no query term in its text or title: it is no hit, though it is scored nowhere.
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (id, score) in &expected {
        assert_eq!(found[id].to_bits(), score.to_bits(), "{id}: {found:?}");
    }
    // a1 holds only `ice`, in its text and its title: one term, saturated once across them.
    assert!(
        found["c1"] > found["a2"] && found["a2"] > found["a1"],
        "{found:?}"
    );
}

#[test]
fn a_passage_is_found_through_the_rest_of_its_article() {
    // Two passages alike but for a year; the query's subject is named only elsewhere in one of
    // their articles. Without the title group they tie and the tie goes to the smaller id.
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus_of(
        dir.path(),
        &[
            (
                "b-ice",
                "Patagonian ice fields",
                "Its retreat speed doubled after 1990.",
            ),
            (
                "b-ice-2",
                "Patagonian ice fields",
                "Every glacier there has thinned since the survey.",
            ),
            (
                "a-coast",
                "Coastal erosion",
                "Its retreat speed doubled after 1991.",
            ),
            (
                "a-coast-2",
                "Coastal erosion",
                "Storm surges reshaped the dunes since the survey.",
            ),
        ],
    );
    let result = corpus.search("glacier retreat speed", 10, &[]).unwrap();
    let rank = |id: &str| result.hits.iter().position(|h| h.id == id).unwrap();
    assert!(rank("b-ice") < rank("a-coast"), "{:?}", result.hits);
    let score = |id: &str| result.hits[rank(id)].raw_score;
    assert!(score("b-ice") > score("a-coast"));
    // The other passages of an article are not hits for its terms alone.
    assert!(result.hits.iter().all(|h| h.id != "a-coast-2"));
}

#[test]
fn a_query_of_stop_words_only_is_matched_in_texts_alone() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus_of(
        dir.path(),
        &[
            ("x", "Being an orchard", "Apples fall from trees."),
            ("y", "Pears", "To be ripe or not."),
        ],
    );
    // `Being` in x's title is the stem `be`; a query of stop words keeps its words but matches
    // no title, since a title's function words say nothing.
    let result = corpus.search("to be or not to be", 10, &[]).unwrap();
    let ids: Vec<&str> = result.hits.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["y"]);
    // With a content term, the title counts.
    let result = corpus.search("orchard", 10, &[]).unwrap();
    let ids: Vec<&str> = result.hits.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["x"]);
}
