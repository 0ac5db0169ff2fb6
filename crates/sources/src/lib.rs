//! Evidence retrieval for research-ledger: the embedded full-text corpus, and the content store
//! of earlier versions.
//!
//! - [`Corpus`]: documents ingested from Markdown, text, JSON and JSON Lines files
//!   ([`Corpus::ingest`]), searched with BM25F ([`Corpus::search`]), and by meaning too when
//!   it is opened with a sentence encoder ([`Similarity`]). Each hit carries its raw and
//!   normalised score, the SPEC §4 relevance of its full text to the research question and
//!   reliability pre-score, a summary cut at a sentence end, and its metadata; every result names
//!   the [`IndexState`] it was computed on, so a recorded search can be reproduced.
//! - [`tokenize`]: the one tokenizer for English and Chinese that the index, queries and
//!   relevance all use.
//! - [`BlobStore`]: the content store of earlier versions, read-only: full texts written before
//!   the ledger kept them, under their blake3 hash, checked on every read ([`content_hash`] is
//!   the hash that names a text everywhere).
//! - [`SharedCorpus`]: with a storage database, the corpus's documents live there
//!   ([`PostgresDocuments`]) and each node's index is rebuilt from them.
//!
//! This crate depends on `research` for the rule set's formulas and vocabulary, and on nothing
//! that knows about the ledger: it records nothing itself.

pub mod blobs;
pub mod contracts;
pub mod corpus;
pub mod database;
pub mod document;
pub mod ingest;
pub mod limits;
pub mod shared_corpus;
pub mod summary;
pub mod tokenize;

pub use blobs::{BlobError, BlobOptions, BlobStore, ContentHash, content_hash};
pub use corpus::{
    AddReport, Corpus, CorpusError, IndexState, IngestProgress, IngestReport, Rejected,
    SIMILARITY_WEIGHT, SearchError, SearchHit, SearchResult, Similarity, SimilarityError,
    TermFrequency, VectorFileError,
};
pub use document::{DefaultedFields, Defaults, Document, Field, FieldProblem};
pub use ingest::{IngestError, IngestWarning, Location, ReadReport, read_documents};
pub use limits::CorpusLimits;
pub use shared_corpus::{PostgresDocuments, PutReport, SharedCorpus, SharedCorpusError};
pub use summary::summarize;
pub use tokenize::{
    SEARCH_ANALYZER_VERSION, TOKENIZER_VERSION, content_terms, query_terms, search_terms,
    terms_found, tokenize,
};
