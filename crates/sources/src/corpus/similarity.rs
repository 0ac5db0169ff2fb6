//! Ranking by meaning: a sentence encoder's cosine between the query and each passage, mixed
//! with BM25F.
//!
//! When the corpus is opened with a [`Similarity`], every live document is scored
//!
//! ```text
//! score(d) = (1 − w) · bm25f(d) / max bm25f + w · min(1, max(0, cos(q, v(d))))
//! ```
//!
//! with `w` = [`SIMILARITY_WEIGHT`], `bm25f` the lexical score (`rank.rs`; 0 for a document that
//! holds no query term), `max bm25f` the highest of the query's lexical scores (the lexical part
//! is 0 when nothing matched), `q` the encoder's unit vector of the query as given and `v(d)` that
//! of the passage's title and text (`title: text`, or the text alone when it has no title). A
//! document whose score is 0 is not a hit. The arithmetic is f64 over the encoder's f32 values,
//! summed in index order (`encoder::cosine`), and the encoder's vectors have the same bits on
//! every platform, so a score does too; equal scores still go by document id.
//!
//! Why mix rather than replace: the encoder alone ranks worse than BM25F on the claims it was
//! measured on, and BM25F alone misses passages that say the same thing in other words
//! (`docs/rules.md`, "How the search was chosen", where `w` was chosen on claims outside the
//! samples the benchmark reports). Why clamp the cosine to [0, 1]: a passage less similar to the
//! query than an unrelated one says nothing more against it, and a unit vector's cosine can pass
//! 1 by a rounding; the clamp keeps every score in [0, 1].
//!
//! The encoder's id and `w` are part of the index state id, so a search recorded under this
//! ranking names the model that ranked it. The passages' vectors are derived data, computed
//! once per passage and kept in a file per encoder ([`super::vectors`]).

use std::sync::Mutex;

use encoder::Encoder;

use super::vectors::{VectorFile, passage_key};
use super::*;

/// Weight of the encoder's cosine in a hit's score; chosen on Climate-FEVER claims outside the
/// benchmark's samples (`docs/rules.md`).
pub const SIMILARITY_WEIGHT: f64 = 0.7;

/// Query vectors kept, so that the same query searched again is not encoded again.
const QUERY_VECTORS_MAX: usize = 256;

/// Passages encoded between two appends to the vector file (and progress reports).
const ENCODE_BATCH: usize = 64;

/// Why the ranking by meaning could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimilarityError {
    /// The model folder could not be read as a sentence encoder. Give the folder that holds
    /// the model as its publisher ships it (`config.json`, `model.safetensors`,
    /// `tokenizer.json`).
    #[error("the sentence encoder in {dir} cannot be used: {error}")]
    Encoder {
        /// The model folder.
        dir: PathBuf,
        /// What is wrong (in the message, so not also given as its source).
        error: encoder::EncoderError,
    },
    /// The folder of passage vectors could not be read or written.
    #[error(transparent)]
    Vectors(#[from] super::vectors::VectorFileError),
}

/// A sentence encoder and the vectors it gave the passages: what ranks a search by meaning.
pub struct Similarity {
    encoder: Encoder,
    vectors: Mutex<VectorFile>,
    queries: Mutex<HashMap<String, Arc<[f32]>>>,
    threads: usize,
}

impl std::fmt::Debug for Similarity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Similarity")
            .field("encoder", &self.encoder.id())
            .finish_non_exhaustive()
    }
}

impl Similarity {
    /// Reads the model in `model_dir`, and the vectors it already gave, from `vectors_dir`.
    pub fn open(model_dir: &Path, vectors_dir: &Path) -> Result<Self, SimilarityError> {
        let encoder = Encoder::open(model_dir).map_err(|error| SimilarityError::Encoder {
            dir: model_dir.to_path_buf(),
            error,
        })?;
        let vectors = VectorFile::open(vectors_dir, encoder.id(), encoder.dimensions())?;
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(Self {
            encoder,
            vectors: Mutex::new(vectors),
            queries: Mutex::new(HashMap::new()),
            threads,
        })
    }

    /// The encoder's id: its network and the hashes of the files it was read from.
    pub fn encoder_id(&self) -> &str {
        self.encoder.id()
    }

    /// The ranking, as the index state id names it.
    pub fn ranking_name(&self) -> String {
        format!(
            "research-ledger-rank-v2: (1 - w) * bm25f / max + w * clamp(cosine, 0, 1) w={} bm25f=[{}] encoder=[{}]",
            SIMILARITY_WEIGHT,
            RANKING.name(),
            self.encoder.id()
        )
    }

    /// The unit vector of `query`.
    pub(super) fn query_vector(&self, dir: &Path, query: &str) -> Result<Arc<[f32]>, CorpusError> {
        if let Some(found) = lock(&self.queries).get(query) {
            return Ok(Arc::clone(found));
        }
        let vector: Arc<[f32]> = self
            .encoder
            .embed(query)
            .map_err(|e| encoder_failed(dir, &e))?
            .into();
        let mut queries = lock(&self.queries);
        if queries.len() >= QUERY_VECTORS_MAX {
            queries.clear();
        }
        queries.insert(query.to_owned(), Arc::clone(&vector));
        Ok(vector)
    }

    /// The vector of every live document `searcher` shows, encoding (and keeping) those not
    /// encoded yet.
    pub(super) fn passage_vectors(
        &self,
        corpus: &Corpus,
        searcher: &Searcher,
        progress: &mut dyn FnMut(IngestProgress<'_>),
    ) -> Result<PassageVectors, CorpusError> {
        let keys = passage_keys(corpus, searcher)?;
        self.encode_missing(corpus, searcher, &keys, progress)?;
        let vectors = lock(&self.vectors);
        let mut rows = Vec::with_capacity(keys.len());
        for segment in &keys {
            let mut segment_rows = Vec::with_capacity(segment.len());
            for key in segment {
                let vector = match key {
                    Some(key) => Some(Arc::clone(vectors.get(key).ok_or_else(|| {
                        corpus.damaged("a passage was encoded but its vector is not kept".into())
                    })?)),
                    None => None,
                };
                segment_rows.push(vector);
            }
            rows.push(segment_rows);
        }
        Ok(PassageVectors { rows })
    }

    /// Encodes the live documents whose key has no vector yet, a batch at a time, keeping each
    /// batch before the next.
    fn encode_missing(
        &self,
        corpus: &Corpus,
        searcher: &Searcher,
        keys: &[Vec<Option<[u8; 32]>>],
        progress: &mut dyn FnMut(IngestProgress<'_>),
    ) -> Result<(), CorpusError> {
        let mut missing: Vec<(DocAddress, [u8; 32])> = Vec::new();
        {
            let vectors = lock(&self.vectors);
            let mut seen = HashSet::new();
            for (segment_ord, segment) in keys.iter().enumerate() {
                let segment_ord = u32::try_from(segment_ord).unwrap_or(u32::MAX);
                for (doc, key) in segment.iter().enumerate() {
                    let Some(key) = key else { continue };
                    if vectors.get(key).is_none() && seen.insert(*key) {
                        let doc = u32::try_from(doc).unwrap_or(u32::MAX);
                        missing.push((DocAddress::new(segment_ord, doc), *key));
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let total = missing.len() as u64;
        tracing::info!(passages = total, encoder = %self.encoder.id(), "encoding passages for the search by meaning");
        let mut done = 0u64;
        for batch in missing.chunks(ENCODE_BATCH) {
            let mut texts = Vec::with_capacity(batch.len());
            for (address, _) in batch {
                let document = corpus.read(searcher, *address)?;
                texts.push(encoder_input(&document.title, &document.content));
            }
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let encoded = self
                .encoder
                .embed_all(&refs, self.threads)
                .map_err(|e| encoder_failed(corpus.dir(), &e))?;
            let records: Vec<([u8; 32], Vec<f32>)> =
                batch.iter().map(|(_, key)| *key).zip(encoded).collect();
            lock(&self.vectors)
                .append(records)
                .map_err(|e| CorpusError::Index {
                    dir: corpus.dir().to_path_buf(),
                    detail: e.to_string(),
                })?;
            done += batch.len() as u64;
            progress(IngestProgress::Encoding { done, total });
        }
        Ok(())
    }

    /// Every live document's score: the lexical scores of `lexical` (the query's matches) mixed
    /// with the cosine of `query` and the document's vector. Documents scoring 0 are left out.
    pub(super) fn mix(
        &self,
        lexical: &[Scored],
        vectors: &PassageVectors,
        query: &[f32],
    ) -> Vec<Scored> {
        let max = lexical.iter().fold(0.0f64, |m, s| m.max(s.score));
        let mut by_address: HashMap<DocAddress, f64> = HashMap::with_capacity(lexical.len());
        for s in lexical {
            by_address.insert(s.address, s.score);
        }
        let mut out = Vec::new();
        for (segment_ord, rows) in vectors.rows.iter().enumerate() {
            let segment_ord = u32::try_from(segment_ord).unwrap_or(u32::MAX);
            for (doc, vector) in rows.iter().enumerate() {
                let Some(vector) = vector else { continue };
                let address = DocAddress::new(segment_ord, u32::try_from(doc).unwrap_or(u32::MAX));
                let bm25f = by_address.get(&address).copied().unwrap_or(0.0);
                let cosine = encoder::cosine(query, vector);
                let score = mixed(bm25f, max, cosine);
                if score > 0.0 {
                    out.push(Scored {
                        address,
                        score,
                        lexical: bm25f,
                        similarity: Some(cosine),
                    });
                }
            }
        }
        out
    }
}

/// The formula of the module's documentation for one document.
pub(super) fn mixed(bm25f: f64, max_bm25f: f64, cosine: f64) -> f64 {
    let lexical = if max_bm25f > 0.0 {
        bm25f / max_bm25f
    } else {
        0.0
    };
    (1.0 - SIMILARITY_WEIGHT) * lexical + SIMILARITY_WEIGHT * cosine.clamp(0.0, 1.0)
}

/// What the encoder reads of a passage: its title and its text, or the text alone.
pub(super) fn encoder_input(title: &str, content: &str) -> String {
    if title.is_empty() {
        content.to_owned()
    } else {
        format!("{title}: {content}")
    }
}

/// The vectors of the live documents of one snapshot, by segment and document (none for a
/// deleted one), shared with the vector file's memory rather than copied.
#[derive(Debug)]
pub(super) struct PassageVectors {
    rows: Vec<Vec<Option<Arc<[f32]>>>>,
}

/// Each live document's vector key, by segment and document id (none for a deleted one).
fn passage_keys(
    corpus: &Corpus,
    searcher: &Searcher,
) -> Result<Vec<Vec<Option<[u8; 32]>>>, CorpusError> {
    let mut out = Vec::with_capacity(searcher.segment_readers().len());
    for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
        let segment_ord = u32::try_from(segment_ord).unwrap_or(u32::MAX);
        let mut keys = vec![None; segment.max_doc() as usize];
        for doc in segment.doc_ids_alive() {
            let address = DocAddress::new(segment_ord, doc);
            let group = corpus.fast_text(searcher, address, "title_group")?;
            let title = schema::title_of_group(&group);
            let hash = corpus.fast_text(searcher, address, "content_hash")?;
            let hash = ContentHash::from_hex(&hash)
                .ok_or_else(|| corpus.damaged(format!("a content hash that is not one: {hash}")))?;
            if let Some(slot) = keys.get_mut(doc as usize) {
                *slot = Some(passage_key(title, &hash.0));
            }
        }
        out.push(keys);
    }
    Ok(out)
}

fn encoder_failed(dir: &Path, error: &encoder::EncoderError) -> CorpusError {
    CorpusError::Index {
        dir: dir.to_path_buf(),
        detail: format!("the sentence encoder failed: {error}"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
