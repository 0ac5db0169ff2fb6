//! The embedded corpus: a tantivy index of documents, searched with BM25F.
//!
//! A query's content terms (its stop words out, unless it has nothing else) are matched, under
//! the search analyzer (the corpus tokenizer with English words stemmed,
//! [`crate::tokenize::search_terms`]), against each document's text, its title and its title
//! group (the documents that share its title), weighted and saturated together (`rank.rs`).
//! Relevance and the statistics recorded for it are computed from the unstemmed terms of the
//! text, as the rule sets define them, and do not depend on how the search ranks.
//!
//! Reproducibility is the design goal. One writer thread indexes documents, merges are never left
//! to a background policy, and after every ingest the index is left as one segment without
//! deleted documents (rebuilt from its stored documents when a document was replaced), so BM25's
//! statistics (document count, document frequencies, average length) are exactly those of the
//! live documents and do not depend on the order or the batches they came in. Hits with equal
//! scores are ordered by document id. The [`IndexState`] id is a hash of what the index holds
//! (every document's id and fingerprint, the tokenizer, the index format, the ranking and its
//! parameters, and the index layout), so a search recorded with it can be reproduced: the same
//! state and the same query give the same ids, order and scores, after a restart or on another
//! machine.
//!
//! A folder written in an older index format (`v1`: no searchable title or stemmed text; `v2`:
//! no title group) is rebuilt when it is opened, from the documents it stores, into exactly the
//! index an ingest of those documents gives (`upgrade.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use chrono::NaiveDate;
use research::rules::{QuestionTerm, RuleSet, SourceType, idf_coverage, reliability};
use serde::{Deserialize, Serialize};
use tantivy::collector::DocSetCollector;
use tantivy::directory::MmapDirectory;
use tantivy::indexer::NoMergePolicy;
use tantivy::query::TermQuery;
use tantivy::schema::{
    FAST, Field as IndexField, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions, Value as _,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{
    DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term,
};

use crate::blobs::{ContentHash, content_hash};
use crate::document::{DefaultedFields, Defaults, Document, Field};
use crate::ingest::{self, IngestError, IngestWarning};
use crate::limits::CorpusLimits;
use crate::summary::summarize;
use crate::tokenize::{
    CorpusTokenizer, SEARCH_ANALYZER_VERSION, SearchTokenizer, TOKENIZER_VERSION,
    query_terms_and_kind, tokenize,
};

mod documents;
mod groups;
mod rank;
mod schema;
mod search;
mod similarity;
mod state;
mod upgrade;
mod vectors;
mod write;

use groups::TitleGroups;
use rank::Scored;
pub use rank::{Bm25f, RANKING};
use schema::{Fields, schema};
use search::Ranked;
pub use search::{IngestProgress, SearchHit, SearchResult, TermFrequency};
use similarity::PassageVectors;
pub use similarity::{SIMILARITY_WEIGHT, Similarity, SimilarityError};
pub use state::IndexState;
use state::compute_state;
pub use vectors::VectorFileError;
pub use write::{AddReport, IngestReport, Rejected};

/// Version of the index layout below; part of every index state id.
const INDEX_FORMAT: &str = "research-ledger-corpus-v3";

/// Why the corpus could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorpusError {
    /// Another process is writing to this corpus. Wait for it, or ingest through it.
    #[error("the corpus in {dir} is being written by another process")]
    Locked {
        /// The corpus folder.
        dir: PathBuf,
    },
    /// The folder holds an index written under other rules (another tokenizer or layout).
    /// Ingest the collection again into an empty folder.
    #[error("the corpus in {dir} was written under other rules: {detail}")]
    Incompatible {
        /// The corpus folder.
        dir: PathBuf,
        /// What differs.
        detail: String,
    },
    /// A stored document does not read back as one: the index is damaged. Rebuild it by
    /// ingesting the collection into an empty folder.
    #[error("the corpus in {dir} is damaged: {detail}")]
    Damaged {
        /// The corpus folder.
        dir: PathBuf,
        /// What was found.
        detail: String,
    },
    /// The index failed to read or write.
    #[error("corpus index error in {dir}: {detail}")]
    Index {
        /// The corpus folder.
        dir: PathBuf,
        /// The underlying error.
        detail: String,
    },
}

/// Why a search was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// The query is longer than `query_chars_max`. Shorten it.
    #[error("the query has {chars} characters; query_chars_max is {limit}")]
    QueryTooLong {
        /// Its length (characters).
        chars: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The query has no searchable terms (only punctuation, spaces or overlong words).
    #[error("the query has no searchable terms")]
    NoTerms,
    /// `limit` is 0 or above `search_results_max`.
    #[error("limit {requested} is outside 1..={limit} (search_results_max)")]
    LimitOutOfRange {
        /// The limit asked for.
        requested: u64,
        /// The largest allowed.
        limit: u64,
    },
    /// The research question has more distinct terms than `question_terms_max`.
    #[error("the research question has {terms} distinct terms; question_terms_max is {limit}")]
    TooManyQuestionTerms {
        /// Distinct terms given.
        terms: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The corpus failed.
    #[error(transparent)]
    Corpus(#[from] CorpusError),
}

/// What searches read: one searcher, the state it shows, its title groups, and, when the
/// search ranks by meaning too, its documents' vectors.
#[derive(Debug)]
struct Snapshot {
    searcher: Searcher,
    state: IndexState,
    groups: TitleGroups,
    vectors: Option<PassageVectors>,
}

/// The embedded full-text corpus in one folder.
pub struct Corpus {
    dir: PathBuf,
    index: Index,
    reader: IndexReader,
    fields: Fields,
    limits: CorpusLimits,
    /// The ranking by meaning, when the corpus was opened with one.
    similarity: Option<Arc<Similarity>>,
    /// The ranking's name, as the index state id holds it.
    ranking: String,
    snapshot: RwLock<Arc<Snapshot>>,
    /// One ingest at a time within this process; tantivy's lock file keeps other processes out.
    writing: Mutex<()>,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus")
            .field("dir", &self.dir)
            .field("state", &self.index_state())
            .finish_non_exhaustive()
    }
}

impl Corpus {
    /// Opens the corpus in `dir`, creating an empty one when the folder holds none.
    pub fn open(dir: impl Into<PathBuf>, limits: CorpusLimits) -> Result<Self, CorpusError> {
        Self::open_with(dir, limits, None)
    }

    /// [`Corpus::open`], searching by meaning too when `similarity` is given: every live
    /// document gets a vector (those not encoded before are encoded now, which takes a while
    /// for a large corpus) and searches mix its cosine with BM25F (`similarity.rs`).
    pub fn open_with(
        dir: impl Into<PathBuf>,
        limits: CorpusLimits,
        similarity: Option<Arc<Similarity>>,
    ) -> Result<Self, CorpusError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| CorpusError::Index {
            dir: dir.clone(),
            detail: format!("cannot create the folder: {e}"),
        })?;
        let (_, fields) = schema();
        let index = upgrade::open_index(&dir, &limits)?;
        let corpus = Self::over(dir, index, fields, limits, similarity)?;
        corpus.attach_vectors()?;
        Ok(corpus)
    }

    /// An empty corpus that lives in memory only and writes nothing anywhere: what a read-only
    /// audit opens, which reads the ledger's record of every search and searches nothing.
    pub fn in_memory(limits: CorpusLimits) -> Result<Self, CorpusError> {
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        Self::over(PathBuf::new(), index, fields, limits, None)
    }

    /// The corpus over `index`; its first snapshot has no vectors, which the caller attaches
    /// ([`Corpus::attach_vectors`]) before anything searches when `similarity` is given.
    fn over(
        dir: PathBuf,
        index: Index,
        fields: Fields,
        limits: CorpusLimits,
        similarity: Option<Arc<Similarity>>,
    ) -> Result<Self, CorpusError> {
        index.tokenizers().register(
            TOKENIZER_VERSION,
            TextAnalyzer::from(CorpusTokenizer::default()),
        );
        index.tokenizers().register(
            SEARCH_ANALYZER_VERSION,
            TextAnalyzer::from(SearchTokenizer::default()),
        );
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| index_error(&dir, e))?;
        let ranking = similarity
            .as_ref()
            .map_or_else(|| RANKING.name(), |s| s.ranking_name());
        let snapshot = Snapshot::of(&dir, reader.searcher(), &ranking)?;
        Ok(Self {
            snapshot: RwLock::new(Arc::new(snapshot)),
            similarity,
            ranking,
            dir,
            index,
            reader,
            fields,
            limits,
            writing: Mutex::new(()),
        })
    }

    /// The corpus folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bounds in force.
    pub fn limits(&self) -> &CorpusLimits {
        &self.limits
    }

    /// What the index holds now.
    pub fn index_state(&self) -> IndexState {
        self.current().state.clone()
    }

    /// Live documents.
    pub fn len(&self) -> u64 {
        self.current().state.documents
    }

    /// Whether the corpus holds no document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives the first snapshot its vectors, when the corpus ranks by meaning: the snapshot
    /// [`Corpus::over`] made is still this corpus's alone, so it is completed in place rather
    /// than computed again.
    fn attach_vectors(&self) -> Result<(), CorpusError> {
        let Some(similarity) = &self.similarity else {
            return Ok(());
        };
        let mut current = self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match Arc::get_mut(&mut current) {
            Some(snapshot) => {
                let vectors = similarity.passage_vectors(self, &snapshot.searcher, &mut |_| {})?;
                snapshot.vectors = Some(vectors);
                Ok(())
            }
            None => {
                drop(current);
                self.refresh()
            }
        }
    }

    /// The ranking by meaning the corpus searches with, if any.
    pub fn similarity(&self) -> Option<&Arc<Similarity>> {
        self.similarity.as_ref()
    }

    /// Picks up what another process committed since this one last looked.
    pub fn refresh(&self) -> Result<(), CorpusError> {
        self.refresh_with(&mut |_| {})
    }

    /// [`Corpus::refresh`], reporting the passages it encodes.
    pub(crate) fn refresh_with(
        &self,
        progress: &mut dyn FnMut(IngestProgress<'_>),
    ) -> Result<(), CorpusError> {
        self.reader
            .reload()
            .map_err(|e| index_error(&self.dir, e))?;
        let searcher = self.reader.searcher();
        let mut snapshot = Snapshot::of(&self.dir, searcher, &self.ranking)?;
        if let Some(similarity) = &self.similarity {
            snapshot.vectors =
                Some(similarity.passage_vectors(self, &snapshot.searcher, progress)?);
        }
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(snapshot);
        Ok(())
    }

    fn current(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Snapshot {
    fn of(dir: &Path, searcher: Searcher, ranking: &str) -> Result<Self, CorpusError> {
        let state = compute_state(dir, &searcher, ranking)?.0;
        let groups = TitleGroups::of(dir, &searcher)?;
        Ok(Self {
            searcher,
            state,
            groups,
            vectors: None,
        })
    }
}

fn index_error(dir: &Path, error: tantivy::TantivyError) -> CorpusError {
    CorpusError::Index {
        dir: dir.to_path_buf(),
        detail: error.to_string(),
    }
}
