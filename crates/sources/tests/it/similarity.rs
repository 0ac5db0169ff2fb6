//! The search by meaning: hits scored by the documented mix of BM25F and the encoder's cosine,
//! found where no term is shared, the same bits after a reopen and after the vectors are lost,
//! passages encoded once, and the encoder named in the index state.
//!
//! The model is not part of the repository: these tests read it from the folder
//! `RESEARCH_LEDGER_ENCODER_DIR` names (`scripts/fetch-encoder`), and pass without running when
//! it is not set, unless `RESEARCH_LEDGER_REQUIRE_ENCODER=1` says the model must be there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sources::{Corpus, CorpusLimits, Defaults, IngestProgress, SIMILARITY_WEIGHT, Similarity};

use crate::{ingest_into, jsonl_of};

const PASSAGES: &[(&str, &str, &str)] = &[
    (
        "g1",
        "Glaciers",
        "Mountain glaciers have been retreating almost everywhere since 1950.",
    ),
    (
        "g2",
        "Glaciers",
        "Meltwater from alpine ice feeds rivers through the dry summer.",
    ),
    (
        "s1",
        "Sea level",
        "Oceans rose about twenty centimetres over the twentieth century.",
    ),
    (
        "c1",
        "Carbon dioxide",
        "Burning coal, oil and gas adds carbon dioxide to the atmosphere.",
    ),
    (
        "f1",
        "Football",
        "The striker scored twice in the second half of the final.",
    ),
    (
        "p1",
        "",
        "Stock prices fell sharply after the central bank raised interest rates.",
    ),
    (
        "g9",
        "Glaciers",
        "Mountain glaciers have been retreating almost everywhere since 1950.",
    ),
];

fn documents_file(dir: &Path) -> PathBuf {
    jsonl_of(dir, PASSAGES)
}

/// The same passages ingested into `dir/name` without an encoder: BM25F alone.
fn lexical(dir: &Path, name: &str) -> Corpus {
    let (corpus, report) = ingest_into(
        &dir.join(name),
        &[documents_file(dir)],
        &Defaults::default(),
    );
    assert!(report.is_clean(), "{report:?}");
    corpus
}

/// The corpus in `dir/corpus`, ranking by meaning with vectors in `vectors`, after an ingest of
/// the passages; and how many passages the ingest encoded.
fn ingest(dir: &Path, model: &Path, vectors: &Path) -> (Corpus, u64) {
    let similarity = Arc::new(Similarity::open(model, vectors).unwrap());
    let corpus = Corpus::open_with(
        dir.join("corpus"),
        CorpusLimits::default(),
        Some(similarity),
    )
    .unwrap();
    let mut encoded = 0;
    let report = corpus
        .ingest(&[documents_file(dir)], &Defaults::default(), &mut |p| {
            if let IngestProgress::Encoding { done, .. } = p {
                encoded = done;
            }
        })
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    (corpus, encoded)
}

fn hits(corpus: &Corpus, query: &str) -> Vec<(String, u64, u64, Option<u64>)> {
    corpus
        .search(query, 10, &[])
        .unwrap()
        .hits
        .iter()
        .map(|h| {
            (
                h.id.clone(),
                h.raw_score.to_bits(),
                h.lexical_score.to_bits(),
                h.similarity.map(f64::to_bits),
            )
        })
        .collect()
}

#[test]
fn a_passage_that_shares_no_term_with_the_query_is_found_by_meaning() {
    let Some(model) = test_support::encoder_model_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = ingest(dir.path(), &model, &dir.path().join("vectors"));
    let query = "ice rivers shrinking in the alps";
    // Lexically, "ice" finds only the meltwater passage; "rivers" finds it again.
    let lexical = lexical(dir.path(), "lexical");
    let lexical_ids: Vec<String> = lexical
        .search(query, 10, &[])
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.id)
        .collect();
    assert!(!lexical_ids.contains(&"g1".to_string()), "{lexical_ids:?}");
    // By meaning, the retreating glaciers come before everything off the subject.
    let result = corpus.search(query, 10, &[]).unwrap();
    let ids: Vec<&str> = result.hits.iter().map(|h| h.id.as_str()).collect();
    // A passage that is not a hit (its score is 0) ranks after every hit.
    let at = |id: &str| ids.iter().position(|x| *x == id).unwrap_or(usize::MAX);
    assert!(at("g1") < ids.len(), "{ids:?}");
    assert!(at("g1") < at("f1") && at("g1") < at("p1"), "{ids:?}");
    assert!(at("g2") < at("f1") && at("g2") < at("p1"), "{ids:?}");
    // The duplicate text is folded into one hit.
    assert!(!ids.contains(&"g9"), "{ids:?}");
    assert_eq!(result.hits[at("g1")].folded_ids, ["g9"]);
}

#[test]
fn every_score_is_the_documented_mix_of_bm25f_and_the_cosine() {
    let Some(model) = test_support::encoder_model_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = ingest(dir.path(), &model, &dir.path().join("vectors"));
    let lexical = lexical(dir.path(), "lexical");
    let encoder = encoder::Encoder::open(&model).unwrap();
    for query in [
        "glaciers retreating",
        "carbon dioxide from coal",
        "the final",
    ] {
        let plain = lexical.search(query, 10, &[]).unwrap();
        let max = plain.hits.first().map_or(0.0, |h| h.raw_score);
        let bm25f = |id: &str| {
            plain
                .hits
                .iter()
                .find(|h| h.id == id)
                .map_or(0.0, |h| h.raw_score)
        };
        let q = encoder.embed(query).unwrap();
        let result = corpus.search(query, 10, &[]).unwrap();
        assert!(!result.hits.is_empty());
        let top = result.hits[0].raw_score;
        for hit in &result.hits {
            let (_, title, text) = PASSAGES.iter().find(|p| p.0 == hit.id).unwrap();
            let input = if title.is_empty() {
                (*text).to_string()
            } else {
                format!("{title}: {text}")
            };
            let cosine = encoder::cosine(&q, &encoder.embed(&input).unwrap());
            let lexical_part = if max > 0.0 { bm25f(&hit.id) / max } else { 0.0 };
            let expected = (1.0 - SIMILARITY_WEIGHT) * lexical_part
                + SIMILARITY_WEIGHT * cosine.clamp(0.0, 1.0);
            assert_eq!(
                hit.similarity.unwrap().to_bits(),
                cosine.to_bits(),
                "{query}: {}",
                hit.id
            );
            assert_eq!(hit.lexical_score.to_bits(), bm25f(&hit.id).to_bits());
            assert_eq!(
                hit.raw_score.to_bits(),
                expected.to_bits(),
                "{query}: {}",
                hit.id
            );
            assert_eq!(hit.normalised_score, hit.raw_score / top);
        }
        // Ranked by score, then id.
        for pair in result.hits.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(a.raw_score > b.raw_score || (a.raw_score == b.raw_score && a.id < b.id));
        }
    }
}

#[test]
fn passages_are_encoded_once_and_lost_vectors_give_the_same_bits_again() {
    let Some(model) = test_support::encoder_model_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let vectors = dir.path().join("vectors");
    let (corpus, encoded) = ingest(dir.path(), &model, &vectors);
    // Six distinct passages (the duplicate shares its vector).
    assert_eq!(encoded, 6);
    let query = "glaciers melting";
    let first = hits(&corpus, query);
    let state = corpus.index_state();
    drop(corpus);

    // Another corpus over the same vectors encodes nothing.
    let other = tempfile::tempdir().unwrap();
    let (again, encoded) = ingest(other.path(), &model, &vectors);
    assert_eq!(encoded, 0);
    assert_eq!(hits(&again, query), first);
    assert_eq!(again.index_state().id, state.id);
    drop(again);

    // Without the vectors, and with a torn vector file, the same bits come back.
    let file = std::fs::read_dir(&vectors)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 100]).unwrap();
    let similarity = Arc::new(Similarity::open(&model, &vectors).unwrap());
    let reopened = Corpus::open_with(
        dir.path().join("corpus"),
        CorpusLimits::default(),
        Some(similarity),
    )
    .unwrap();
    assert_eq!(hits(&reopened, query), first);
    drop(reopened);
    std::fs::remove_dir_all(&vectors).unwrap();
    let similarity = Arc::new(Similarity::open(&model, &vectors).unwrap());
    let rebuilt = Corpus::open_with(
        dir.path().join("corpus"),
        CorpusLimits::default(),
        Some(similarity),
    )
    .unwrap();
    assert_eq!(hits(&rebuilt, query), first);
    assert_eq!(rebuilt.index_state().id, state.id);
}

#[test]
fn the_index_state_names_the_ranking_and_the_encoder() {
    let Some(model) = test_support::encoder_model_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (corpus, _) = ingest(dir.path(), &model, &dir.path().join("vectors"));
    let lexical = lexical(dir.path(), "corpus-lexical");
    assert_ne!(corpus.index_state().id, lexical.index_state().id);
    drop(corpus);
    // The same index opened without the encoder is the lexical one again.
    let plain = Corpus::open(dir.path().join("corpus"), CorpusLimits::default()).unwrap();
    assert_eq!(plain.index_state().id, lexical.index_state().id);
    drop(plain);

    // A model whose configuration differs by a byte is another encoder, and another state.
    let copy = dir.path().join("model-copy");
    std::fs::create_dir_all(&copy).unwrap();
    for entry in std::fs::read_dir(&model).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    let mut config = std::fs::read(copy.join("config.json")).unwrap();
    config.push(b'\n');
    std::fs::write(copy.join("config.json"), config).unwrap();
    let a = Similarity::open(&model, &dir.path().join("vectors")).unwrap();
    let b = Similarity::open(&copy, &dir.path().join("vectors")).unwrap();
    assert_ne!(a.encoder_id(), b.encoder_id());
    assert!(a.ranking_name().contains(a.encoder_id()));
    assert!(a.ranking_name().contains(&format!("w={SIMILARITY_WEIGHT}")));
    let reopened = Corpus::open_with(
        dir.path().join("corpus"),
        CorpusLimits::default(),
        Some(Arc::new(b)),
    )
    .unwrap();
    let first = Corpus::open_with(
        dir.path().join("corpus-lexical"),
        CorpusLimits::default(),
        Some(Arc::new(a)),
    )
    .unwrap();
    assert_ne!(reopened.index_state().id, first.index_state().id);
}

#[test]
fn a_model_folder_that_is_not_one_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let error = Similarity::open(dir.path(), &dir.path().join("vectors")).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("config.json"), "{text}");
}
