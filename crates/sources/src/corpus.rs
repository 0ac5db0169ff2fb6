//! The embedded corpus: a tantivy index of documents, searched with BM25.
//!
//! Reproducibility is the design goal. One writer thread indexes documents, merges are never left
//! to a background policy, and after every ingest the index is left as one segment without
//! deleted documents (rebuilt from its stored documents when a document was replaced), so BM25's
//! statistics (document count, document frequencies, average length) are exactly those of the
//! live documents and do not depend on the order or the batches they came in. Hits with equal scores are ordered by document id. The [`IndexState`] id is a
//! hash of what the index holds (every document's id and fingerprint, the tokenizer, the index
//! format and the index layout), so a search recorded with it can be reproduced: the same state
//! and the same query give the same ids, order and scores, after a restart or on another machine.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use chrono::NaiveDate;
use research::rules::{QuestionTerm, RuleSet, SourceType, idf_coverage, reliability};
use serde::{Deserialize, Serialize};
use tantivy::collector::sort_key::{SortBySimilarityScore, SortByString};
use tantivy::collector::{DocSetCollector, TopDocs};
use tantivy::directory::MmapDirectory;
use tantivy::indexer::NoMergePolicy;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    FAST, Field as IndexField, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions, Value as _,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{
    DocAddress, Index, IndexReader, IndexWriter, Order, ReloadPolicy, Searcher, TantivyDocument,
    Term,
};

use crate::blobs::{ContentHash, content_hash};
use crate::document::{DefaultedFields, Defaults, Document, Field};
use crate::ingest::{self, IngestError, IngestWarning};
use crate::limits::CorpusLimits;
use crate::summary::summarize;
use crate::tokenize::{CorpusTokenizer, TOKENIZER_VERSION, tokenize};

/// Version of the index layout below; part of every index state id.
const INDEX_FORMAT: &str = "research-ledger-corpus-v1";

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

/// Identifies what the index held when a search ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexState {
    /// 64 hex digits: blake3 of the index format, the tokenizer, the search engine's version,
    /// the segment layout and every live document's id and fingerprint, in id order.
    pub id: String,
    /// Live documents.
    pub documents: u64,
}

/// A term of the research question with the number of corpus documents whose text holds it:
/// what an auditor needs to recompute a hit's relevance from its content blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TermFrequency {
    /// The term, as [`tokenize`] gives it.
    pub term: String,
    /// Documents whose content holds it.
    pub doc_freq: u64,
}

/// One hit of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// Place in BM25 order, from 1.
    pub rank: u32,
    /// Document id.
    pub id: String,
    /// BM25 score as the index computed it (an `f32`, widened exactly).
    pub raw_score: f64,
    /// `raw_score / top raw_score`: 1 for the first hit, in (0, 1] for the others.
    pub normalised_score: f64,
    /// SPEC §4 relevance: IDF-weighted coverage of the research question's distinct terms in
    /// the full text, with this corpus's document count and document frequencies.
    pub relevance: f64,
    /// SPEC §4 reliability pre-score from the source type's authority and the citation count.
    pub reliability: f64,
    /// For each of [`SearchResult::question_terms`], in that order, whether the full text holds
    /// it: what rule set `v2`'s topicality is computed from.
    pub terms_found: Vec<bool>,
    /// At most `summary_chars_max` characters of the text, cut at a sentence end.
    pub summary: String,
    /// Title; may be empty.
    pub title: String,
    /// Publisher as given.
    pub source: Option<String>,
    /// Where it can be read.
    pub url: Option<String>,
    /// Publication date (see `defaulted`).
    pub publish_date: NaiveDate,
    /// Kind of publisher.
    pub source_type: SourceType,
    /// Citations, when known.
    pub citation_count: Option<u64>,
    /// blake3 of the full text.
    pub content_hash: ContentHash,
    /// Fields that hold ingest defaults.
    pub defaulted: DefaultedFields,
    /// Other documents with exactly this text, folded into this one (the earliest published),
    /// in id order.
    pub folded_ids: Vec<String>,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    /// The query as given.
    pub query: String,
    /// The index the search ran on.
    pub index_state: IndexState,
    /// Documents in the corpus (`N` of the IDF).
    pub corpus_docs: u64,
    /// The research question's distinct terms with their document frequencies.
    pub question_terms: Vec<TermFrequency>,
    /// Hits in BM25 order: score descending, then id ascending (for a folded group, the
    /// smallest id among its members). Documents with identical text appear once.
    pub hits: Vec<SearchHit>,
}

impl SearchResult {
    /// The hits as candidates: by reliability pre-score, highest first; equal pre-scores keep
    /// BM25 order. Each hit keeps its BM25 `rank`.
    pub fn candidates(&self) -> Vec<&SearchHit> {
        let mut out: Vec<&SearchHit> = self.hits.iter().collect();
        out.sort_by(|a, b| {
            b.reliability
                .total_cmp(&a.reliability)
                .then(a.rank.cmp(&b.rank))
        });
        out
    }
}

/// How far an ingest has come, for a progress display.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum IngestProgress<'a> {
    /// The files to read are known.
    Started {
        /// How many.
        files: u64,
    },
    /// One more file was read.
    FileDone {
        /// Its path.
        path: &'a Path,
        /// Files done so far.
        done: u64,
    },
    /// The documents are in; the index is being committed and compacted.
    Committing,
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngestReport {
    /// Files read.
    pub files: u64,
    /// Documents read and valid.
    pub documents: u64,
    /// New ids added.
    pub added: u64,
    /// Ids whose text or metadata changed, replaced.
    pub replaced: u64,
    /// Ids already in the corpus exactly as given, left alone.
    pub unchanged: u64,
    /// Documents (or whole files) that could not be ingested.
    pub failed: u64,
    /// Why, for each of them (at most `ingest_problems_listed_max` are listed).
    pub errors: Vec<IngestError>,
    /// Oddities that did not stop a document (at most `ingest_problems_listed_max`).
    pub warnings: Vec<IngestWarning>,
    /// The index after the ingest.
    pub index_state: IndexState,
}

impl IngestReport {
    /// Whether every document went in.
    pub fn is_clean(&self) -> bool {
        self.failed == 0
    }
}

/// What [`Corpus::add_documents`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddReport {
    /// New ids added.
    pub added: u64,
    /// Ids whose text or metadata changed, replaced.
    pub replaced: u64,
    /// Ids already in the corpus exactly as given, left alone.
    pub unchanged: u64,
    /// The documents that were not added, one entry per problem.
    pub rejected: Vec<Rejected>,
    /// The index after the call.
    pub index_state: IndexState,
}

/// A document [`Corpus::add_documents`] did not add, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// Its position in the call (0-based).
    pub index: usize,
    /// Its id.
    pub document_id: String,
    /// The field at fault.
    pub field: Option<Field>,
    /// What is wrong, in words.
    pub problem: String,
}

/// How many documents an ingest added, replaced and left alone.
#[derive(Debug, Clone, Copy, Default)]
struct Added {
    added: u64,
    replaced: u64,
    unchanged: u64,
}

/// Documents going into the index, through one writer, compared with what the index held when
/// it started: what every ingest does with each document it is given.
struct Adding<'a> {
    corpus: &'a Corpus,
    writer: IndexWriter<TantivyDocument>,
    /// Every id the index held, with its fingerprint.
    existing: HashMap<String, String>,
    counts: Added,
}

impl Adding<'_> {
    /// Adds a document, replaces the one of its id if that one differs, or leaves it alone.
    fn add(&mut self, document: &Document) -> Result<(), CorpusError> {
        let corpus = self.corpus;
        let fingerprint = document.fingerprint();
        match self.existing.get(&document.id) {
            Some(stored) if *stored == fingerprint => {
                self.counts.unchanged += 1;
                Ok(())
            }
            Some(_) => {
                self.counts.replaced += 1;
                self.writer
                    .delete_term(Term::from_field_text(corpus.fields.id, &document.id));
                corpus.add(&self.writer, document, &fingerprint)
            }
            None => {
                self.counts.added += 1;
                corpus.add(&self.writer, document, &fingerprint)
            }
        }
    }

    /// Commits what was added, leaves the index as one segment, and shows it to searches.
    fn finish(self) -> Result<Added, CorpusError> {
        let Adding {
            corpus,
            mut writer,
            counts,
            ..
        } = self;
        if counts.added + counts.replaced > 0 {
            writer.commit().map_err(|e| index_error(&corpus.dir, e))?;
        }
        corpus.compact(writer)?;
        corpus.refresh()?;
        Ok(counts)
    }
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    id: IndexField,
    title: IndexField,
    source: IndexField,
    url: IndexField,
    publish_date: IndexField,
    defaulted: IndexField,
    source_type: IndexField,
    citation_count: IndexField,
    content: IndexField,
    content_hash: IndexField,
    fingerprint: IndexField,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    // Frequencies without positions: BM25 needs no more, and phrase queries are not offered.
    let text = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER_VERSION)
                .set_index_option(IndexRecordOption::WithFreqs),
        )
        .set_stored();
    let fields = Fields {
        id: builder.add_text_field("id", STRING | STORED | FAST),
        title: builder.add_text_field("title", STORED),
        source: builder.add_text_field("source", STORED),
        url: builder.add_text_field("url", STORED),
        publish_date: builder.add_text_field("publish_date", STORED),
        defaulted: builder.add_text_field("defaulted", STORED),
        source_type: builder.add_text_field("source_type", STRING | STORED),
        citation_count: builder.add_u64_field("citation_count", STORED),
        content: builder.add_text_field("content", text),
        content_hash: builder.add_text_field("content_hash", STRING | STORED | FAST),
        fingerprint: builder.add_text_field("fingerprint", STRING | STORED | FAST),
    };
    (builder.build(), fields)
}

/// What searches read: one searcher and the state it shows.
#[derive(Debug)]
struct Snapshot {
    searcher: Searcher,
    state: IndexState,
}

/// The embedded full-text corpus in one folder.
pub struct Corpus {
    dir: PathBuf,
    index: Index,
    reader: IndexReader,
    fields: Fields,
    limits: CorpusLimits,
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
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| CorpusError::Index {
            dir: dir.clone(),
            detail: format!("cannot create the folder: {e}"),
        })?;
        let (schema, fields) = schema();
        let directory = MmapDirectory::open(&dir).map_err(|e| CorpusError::Index {
            dir: dir.clone(),
            detail: e.to_string(),
        })?;
        let index = Index::open_or_create(directory, schema).map_err(|e| match e {
            tantivy::TantivyError::SchemaError(detail) => CorpusError::Incompatible {
                dir: dir.clone(),
                detail,
            },
            other => index_error(&dir, other),
        })?;
        Self::over(dir, index, fields, limits)
    }

    /// An empty corpus that lives in memory only and writes nothing anywhere: what a read-only
    /// audit opens, which reads the ledger's record of every search and searches nothing.
    pub fn in_memory(limits: CorpusLimits) -> Result<Self, CorpusError> {
        let (schema, fields) = schema();
        let index = Index::create_in_ram(schema);
        Self::over(PathBuf::new(), index, fields, limits)
    }

    fn over(
        dir: PathBuf,
        index: Index,
        fields: Fields,
        limits: CorpusLimits,
    ) -> Result<Self, CorpusError> {
        index.tokenizers().register(
            TOKENIZER_VERSION,
            TextAnalyzer::from(CorpusTokenizer::default()),
        );
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| index_error(&dir, e))?;
        let searcher = reader.searcher();
        let state = compute_state(&dir, &searcher)?.0;
        Ok(Self {
            snapshot: RwLock::new(Arc::new(Snapshot { searcher, state })),
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

    /// Picks up what another process committed since this one last looked.
    pub fn refresh(&self) -> Result<(), CorpusError> {
        self.reader
            .reload()
            .map_err(|e| index_error(&self.dir, e))?;
        let searcher = self.reader.searcher();
        let state = compute_state(&self.dir, &searcher)?.0;
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(Snapshot { searcher, state });
        Ok(())
    }

    fn current(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshot.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads every document under `paths` (files, or folders walked recursively) and adds it.
    ///
    /// A document that cannot be read or fails a check is reported in the result and skipped;
    /// the others go in. A document whose id is already in the corpus replaces it only when its
    /// text or metadata differ. The returned error is for the corpus itself failing.
    pub fn ingest(
        &self,
        paths: &[PathBuf],
        defaults: &Defaults,
        progress: &mut dyn FnMut(IngestProgress<'_>),
    ) -> Result<IngestReport, CorpusError> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut adding = self.adding()?;
        let read = ingest::read_documents(
            paths,
            defaults,
            &self.limits,
            progress,
            &mut |_, document| adding.add(&document),
        )?;
        progress(IngestProgress::Committing);
        let added = adding.finish()?;
        Ok(IngestReport {
            files: read.files,
            documents: read.documents,
            added: added.added,
            replaced: added.replaced,
            unchanged: added.unchanged + read.repeated,
            failed: read.failed,
            errors: read.errors,
            warnings: read.warnings,
            index_state: self.index_state(),
        })
    }

    /// Adds documents read and checked elsewhere — by a client that read its files with
    /// [`crate::ingest::read_documents`] and sent the documents over the network — as
    /// [`Corpus::ingest`] adds the documents it reads. Each is checked again against this
    /// corpus's limits ([`Document::check`]); one that does not check out, or whose id an
    /// earlier document of the same call took, is rejected and named by its position, and the
    /// others go in. The returned error is for the corpus itself failing.
    pub fn add_documents(&self, documents: &[Document]) -> Result<AddReport, CorpusError> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut adding = self.adding()?;
        let mut rejected = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (index, document) in documents.iter().enumerate() {
            if let Err(problems) = document.check(&self.limits) {
                rejected.extend(problems.into_iter().map(|p| Rejected {
                    index,
                    document_id: document.id.clone(),
                    field: Some(p.field),
                    problem: p.problem,
                }));
                continue;
            }
            if let Some(first) = seen.get(document.id.as_str()) {
                rejected.push(Rejected {
                    index,
                    document_id: document.id.clone(),
                    field: Some(Field::Id),
                    problem: format!("id already used by document #{first} of this request"),
                });
                continue;
            }
            seen.insert(&document.id, index);
            adding.add(document)?;
        }
        let added = adding.finish()?;
        Ok(AddReport {
            added: added.added,
            replaced: added.replaced,
            unchanged: added.unchanged,
            rejected,
            index_state: self.index_state(),
        })
    }

    /// Starts adding documents; the caller holds the writing lock until it finishes.
    fn adding(&self) -> Result<Adding<'_>, CorpusError> {
        let existing: HashMap<String, String> = compute_state(&self.dir, &self.current().searcher)?
            .1
            .into_iter()
            .collect();
        Ok(Adding {
            corpus: self,
            writer: self.writer()?,
            existing,
            counts: Added::default(),
        })
    }

    fn writer(&self) -> Result<IndexWriter<TantivyDocument>, CorpusError> {
        let budget = usize::try_from(self.limits.writer_memory_bytes_max).unwrap_or(usize::MAX);
        // One indexing thread: documents land in one segment in the order given, which is what
        // makes two runs over the same input produce the same index.
        let writer = self
            .index
            .writer_with_num_threads(1, budget)
            .map_err(|e| match e {
                tantivy::TantivyError::LockFailure(_, _) => CorpusError::Locked {
                    dir: self.dir.clone(),
                },
                other => index_error(&self.dir, other),
            })?;
        // Merges run when this module asks, never in the background between searches.
        writer.set_merge_policy(Box::new(NoMergePolicy));
        Ok(writer)
    }

    /// Leaves the index as one segment without deleted documents, then releases the writer.
    ///
    /// Deleted documents are never merged away: tantivy then estimates the merged segment's
    /// token count from quantised lengths, which would make BM25's average length, and so every
    /// score, depend on the ingest history. After a replacement the index is instead rebuilt
    /// from its stored documents, which counts every token exactly; segments without deletions
    /// merge exactly.
    fn compact(&self, mut writer: IndexWriter<TantivyDocument>) -> Result<(), CorpusError> {
        let metas = self
            .index
            .searchable_segment_metas()
            .map_err(|e| index_error(&self.dir, e))?;
        if metas.iter().any(|m| m.num_deleted_docs() > 0) {
            self.reader
                .reload()
                .map_err(|e| index_error(&self.dir, e))?;
            // The searcher keeps the old segments readable while the writer replaces them.
            let old = self.reader.searcher();
            writer
                .delete_all_documents()
                .map_err(|e| index_error(&self.dir, e))?;
            for (ord, segment) in old.segment_readers().iter().enumerate() {
                let segment_ord = u32::try_from(ord).unwrap_or(u32::MAX);
                for doc_id in segment.doc_ids_alive() {
                    let document = self.read(&old, DocAddress::new(segment_ord, doc_id))?;
                    self.add(&writer, &document, &document.fingerprint())?;
                }
            }
            writer.commit().map_err(|e| index_error(&self.dir, e))?;
        }
        let metas = self
            .index
            .searchable_segment_metas()
            .map_err(|e| index_error(&self.dir, e))?;
        if metas.len() > 1 {
            let ids: Vec<_> = metas.iter().map(|m| m.id()).collect();
            writer
                .merge(&ids)
                .wait()
                .map_err(|e| index_error(&self.dir, e))?;
        }
        writer
            .wait_merging_threads()
            .map_err(|e| index_error(&self.dir, e))?;
        Ok(())
    }

    fn add(
        &self,
        writer: &IndexWriter<TantivyDocument>,
        document: &Document,
        fingerprint: &str,
    ) -> Result<(), CorpusError> {
        let f = &self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.id, &document.id);
        doc.add_text(f.title, &document.title);
        if let Some(source) = &document.source {
            doc.add_text(f.source, source);
        }
        if let Some(url) = &document.url {
            doc.add_text(f.url, url);
        }
        doc.add_text(
            f.publish_date,
            document.publish_date.format("%Y-%m-%d").to_string(),
        );
        doc.add_text(f.defaulted, document.defaulted.names().join(","));
        doc.add_text(f.source_type, document.source_type.name());
        if let Some(count) = document.citation_count {
            doc.add_u64(f.citation_count, count);
        }
        doc.add_text(f.content, &document.content);
        doc.add_text(f.content_hash, document.content_hash.to_hex());
        doc.add_text(f.fingerprint, fingerprint);
        writer
            .add_document(doc)
            .map(|_| ())
            .map_err(|e| index_error(&self.dir, e))
    }

    /// Searches with the rule set `v1` authority table for the reliability pre-score.
    ///
    /// `question_terms` are the research question's terms as [`tokenize`] gives them; each hit's
    /// relevance is their IDF-weighted coverage in the hit's full text (none give 0).
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        question_terms: &[String],
    ) -> Result<SearchResult, SearchError> {
        self.search_with_rules(query, limit, question_terms, &RuleSet::v1())
    }

    /// [`Corpus::search`] with a task's own rule set, whose authority table may differ from
    /// `v1`'s, for the reliability pre-score.
    pub fn search_with_rules(
        &self,
        query: &str,
        limit: usize,
        question_terms: &[String],
        rules: &RuleSet,
    ) -> Result<SearchResult, SearchError> {
        let chars = research::text::char_count(query);
        if chars > self.limits.query_chars_max {
            return Err(SearchError::QueryTooLong {
                chars,
                limit: self.limits.query_chars_max,
            });
        }
        if limit == 0 || limit as u64 > self.limits.search_results_max {
            return Err(SearchError::LimitOutOfRange {
                requested: limit as u64,
                limit: self.limits.search_results_max,
            });
        }
        let mut question: Vec<&str> = Vec::new();
        for term in question_terms {
            if !question.contains(&term.as_str()) {
                question.push(term);
            }
            if question.len() as u64 > self.limits.question_terms_max {
                return Err(SearchError::TooManyQuestionTerms {
                    terms: question.len() as u64,
                    limit: self.limits.question_terms_max,
                });
            }
        }
        let mut terms = tokenize(query);
        let mut distinct = HashSet::new();
        terms.retain(|t| distinct.insert(t.clone()));
        if terms.is_empty() {
            return Err(SearchError::NoTerms);
        }

        let snapshot = self.current();
        let searcher = &snapshot.searcher;
        let f = self.fields;
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        // The text alone is searched, not the title: a score is then a function of the text
        // the content hash covers, so identical texts score identically and fold cleanly, and
        // an editorial title ("reprinted from …") cannot lift a copy above its original.
        for term in &terms {
            clauses.push((
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.content, term),
                    IndexRecordOption::WithFreqs,
                )),
            ));
        }
        let query_tree = BooleanQuery::new(clauses);

        let corpus_docs = searcher.num_docs();
        let mut question_stats = Vec::with_capacity(question.len());
        for term in &question {
            let doc_freq = searcher
                .doc_freq(&Term::from_field_text(f.content, term))
                .map_err(|e| index_error(&self.dir, e))?;
            question_stats.push(TermFrequency {
                term: (*term).to_string(),
                doc_freq,
            });
        }
        let weights: Vec<QuestionTerm<'_>> = question_stats
            .iter()
            .map(|t| QuestionTerm {
                term: &t.term,
                doc_freq: t.doc_freq,
            })
            .collect();

        // Collect a prefix of the ranking long enough to give `limit` distinct texts: folded
        // duplicates do not use up the limit.
        let all = usize::try_from(corpus_docs).unwrap_or(usize::MAX).max(1);
        let mut wanted = limit.min(all);
        let (ranked, representatives) = loop {
            let ranked = self.ranked(searcher, &query_tree, wanted)?;
            let representatives = first_of_each_text(&ranked);
            let exhausted = ranked.len() < wanted || wanted >= all;
            if representatives.len() >= limit || exhausted {
                break (ranked, representatives);
            }
            wanted = wanted.saturating_mul(2).min(all);
        };
        let top_score = ranked.first().map_or(0.0, |r| f64::from(r.score));

        let mut hits = Vec::with_capacity(limit);
        for (rank, &at) in representatives.iter().take(limit).enumerate() {
            let found = &ranked[at];
            let first = self.read(searcher, found.address)?;
            let (document, folded_ids) = self.original_of(searcher, first)?;
            let in_text: HashSet<String> = tokenize(&document.content).into_iter().collect();
            let terms_found: Vec<bool> = question.iter().map(|t| in_text.contains(*t)).collect();
            let question_found: Vec<&str> = question
                .iter()
                .copied()
                .filter(|t| in_text.contains(*t))
                .collect();
            let raw_score = f64::from(found.score);
            hits.push(SearchHit {
                rank: u32::try_from(rank + 1).unwrap_or(u32::MAX),
                id: document.id,
                raw_score,
                normalised_score: if top_score > 0.0 {
                    raw_score / top_score
                } else {
                    0.0
                },
                relevance: idf_coverage(&weights, &question_found, corpus_docs),
                reliability: reliability(
                    rules.authority_of(document.source_type),
                    document.citation_count,
                ),
                terms_found,
                summary: summarize(&document.content, summary_budget(&self.limits)),
                title: document.title,
                source: document.source,
                url: document.url,
                publish_date: document.publish_date,
                source_type: document.source_type,
                citation_count: document.citation_count,
                content_hash: document.content_hash,
                defaulted: document.defaulted,
                folded_ids,
            });
        }
        Ok(SearchResult {
            query: query.to_string(),
            index_state: snapshot.state.clone(),
            corpus_docs,
            question_terms: question_stats,
            hits,
        })
    }

    /// The first `wanted` matches by score, descending, then id, ascending. Ties are broken
    /// inside the collector, so which of several equal-scored documents make the cut never
    /// depends on where they sit in the index.
    fn ranked(
        &self,
        searcher: &Searcher,
        query: &dyn Query,
        wanted: usize,
    ) -> Result<Vec<Ranked>, CorpusError> {
        let collector = TopDocs::with_limit(wanted.max(1)).order_by((
            (SortBySimilarityScore, Order::Desc),
            (SortByString::for_field("id"), Order::Asc),
        ));
        let found = searcher
            .search(query, &collector)
            .map_err(|e| index_error(&self.dir, e))?;
        let mut ranked = Vec::with_capacity(found.len());
        for ((score, _id), address) in found {
            let hash = self.fast_text(searcher, address, "content_hash")?;
            ranked.push(Ranked {
                address,
                score,
                content_hash: hash,
            });
        }
        Ok(ranked)
    }

    fn fast_text(
        &self,
        searcher: &Searcher,
        address: DocAddress,
        column: &str,
    ) -> Result<String, CorpusError> {
        let segment = searcher.segment_reader(address.segment_ord);
        let values = segment
            .fast_fields()
            .str(column)
            .map_err(|e| index_error(&self.dir, e))?
            .ok_or_else(|| self.damaged(format!("no `{column}` column")))?;
        let mut out = String::new();
        let ord = values
            .term_ords(address.doc_id)
            .next()
            .ok_or_else(|| self.damaged(format!("a document without `{column}`")))?;
        values
            .ord_to_str(ord, &mut out)
            .map_err(|e| self.damaged(e.to_string()))?;
        Ok(out)
    }

    /// The document that stands for every document with the same text as `first`, and the ids
    /// of the others, in id order.
    ///
    /// Identical texts score identically (only the text is searched), so any of them could
    /// stand for the group without changing the ranking; the one chosen is the original: the
    /// earliest given publish date (a defaulted date says nothing about precedence), then the
    /// smallest id. A reprint is thus folded into what it reprints.
    fn original_of(
        &self,
        searcher: &Searcher,
        first: Document,
    ) -> Result<(Document, Vec<String>), CorpusError> {
        let query = TermQuery::new(
            Term::from_field_text(self.fields.content_hash, &first.content_hash.to_hex()),
            IndexRecordOption::Basic,
        );
        let mut addresses: Vec<DocAddress> = searcher
            .search(&query, &DocSetCollector)
            .map_err(|e| index_error(&self.dir, e))?
            .into_iter()
            .collect();
        if addresses.len() <= 1 {
            return Ok((first, Vec::new()));
        }
        addresses.sort();
        let mut group = Vec::with_capacity(addresses.len());
        for address in addresses {
            let member = self.read(searcher, address)?;
            if member.content_hash != first.content_hash {
                return Err(self.damaged(format!(
                    "document {} is listed under another text's hash",
                    member.id
                )));
            }
            group.push(member);
        }
        group.sort_by(|a, b| {
            (a.defaulted.publish_date, a.publish_date, &a.id).cmp(&(
                b.defaulted.publish_date,
                b.publish_date,
                &b.id,
            ))
        });
        let mut members = group.into_iter();
        let Some(original) = members.next() else {
            return Ok((first, Vec::new()));
        };
        let mut folded: Vec<String> = members.map(|d| d.id).collect();
        folded.sort();
        folded.truncate(usize::try_from(self.limits.search_results_max).unwrap_or(usize::MAX));
        Ok((original, folded))
    }

    /// The document with this id, if the corpus holds one.
    pub fn document(&self, id: &str) -> Result<Option<Document>, CorpusError> {
        let snapshot = self.current();
        self.find_one(&snapshot.searcher, self.fields.id, id)
    }

    /// The full text whose blake3 hash is `hash`, if a document of the corpus has it: what the
    /// service stores as a content blob before it records the evidence.
    pub fn content(&self, hash: &ContentHash) -> Result<Option<String>, CorpusError> {
        let snapshot = self.current();
        let found = self.find_one(&snapshot.searcher, self.fields.content_hash, &hash.to_hex())?;
        Ok(found.map(|d| d.content))
    }

    fn find_one(
        &self,
        searcher: &Searcher,
        field: IndexField,
        value: &str,
    ) -> Result<Option<Document>, CorpusError> {
        let query = TermQuery::new(
            Term::from_field_text(field, value),
            IndexRecordOption::Basic,
        );
        let found = searcher
            .search(&query, &DocSetCollector)
            .map_err(|e| index_error(&self.dir, e))?;
        match found.into_iter().min() {
            Some(address) => self.read(searcher, address).map(Some),
            None => Ok(None),
        }
    }

    /// Reads a stored document back and checks it: the text must hash to its recorded hash.
    fn read(&self, searcher: &Searcher, address: DocAddress) -> Result<Document, CorpusError> {
        let stored: TantivyDocument = searcher
            .doc(address)
            .map_err(|e| index_error(&self.dir, e))?;
        let f = &self.fields;
        let text = |field: IndexField| -> Option<String> {
            stored
                .get_first(field)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let id = text(f.id).ok_or_else(|| self.damaged("a document without an id".into()))?;
        let field = |name: &str| self.damaged(format!("document {id}: bad or missing `{name}`"));
        let publish_date = text(f.publish_date)
            .and_then(|d| NaiveDate::parse_from_str(&d, "%Y-%m-%d").ok())
            .ok_or_else(|| field("publish_date"))?;
        let source_type = text(f.source_type)
            .and_then(|t| t.parse::<SourceType>().ok())
            .ok_or_else(|| field("source_type"))?;
        let content = text(f.content).ok_or_else(|| field("content"))?;
        let recorded = text(f.content_hash)
            .and_then(|h| ContentHash::from_hex(&h))
            .ok_or_else(|| field("content_hash"))?;
        let actual = content_hash(content.as_bytes());
        if actual != recorded {
            return Err(self.damaged(format!(
                "document {id}: its text hashes to {actual}, not the recorded {recorded}"
            )));
        }
        let defaulted = text(f.defaulted).unwrap_or_default();
        Ok(Document {
            title: text(f.title).unwrap_or_default(),
            source: text(f.source),
            url: text(f.url),
            publish_date,
            source_type,
            citation_count: stored.get_first(f.citation_count).and_then(|v| v.as_u64()),
            content,
            content_hash: recorded,
            defaulted: DefaultedFields::from_names(defaulted.split(',')),
            id,
        })
    }

    fn damaged(&self, detail: String) -> CorpusError {
        CorpusError::Damaged {
            dir: self.dir.clone(),
            detail,
        }
    }

    /// The document frequency of each term in the corpus's texts, and the corpus size: the
    /// inputs of IDF coverage, for relevance computed outside a search.
    pub fn term_frequencies(
        &self,
        terms: &[String],
    ) -> Result<(u64, Vec<TermFrequency>), CorpusError> {
        let snapshot = self.current();
        let searcher = &snapshot.searcher;
        let mut out = Vec::with_capacity(terms.len());
        for term in terms {
            let doc_freq = searcher
                .doc_freq(&Term::from_field_text(self.fields.content, term))
                .map_err(|e| index_error(&self.dir, e))?;
            out.push(TermFrequency {
                term: term.clone(),
                doc_freq,
            });
        }
        Ok((searcher.num_docs(), out))
    }
}

/// The summary budget in characters, as a `usize`.
fn summary_budget(limits: &CorpusLimits) -> usize {
    usize::try_from(limits.summary_chars_max).unwrap_or(usize::MAX)
}

#[derive(Debug)]
struct Ranked {
    address: DocAddress,
    score: f32,
    content_hash: String,
}

/// Positions in `ranked` of the first document of each distinct text.
fn first_of_each_text(ranked: &[Ranked]) -> Vec<usize> {
    let mut seen = HashSet::new();
    ranked
        .iter()
        .enumerate()
        .filter(|(_, r)| seen.insert(r.content_hash.as_str()))
        .map(|(at, _)| at)
        .collect()
}

fn index_error(dir: &Path, error: tantivy::TantivyError) -> CorpusError {
    CorpusError::Index {
        dir: dir.to_path_buf(),
        detail: error.to_string(),
    }
}

/// The state id of what `searcher` shows, and every live document's id with its fingerprint.
fn compute_state(
    dir: &Path,
    searcher: &Searcher,
) -> Result<(IndexState, BTreeMap<String, String>), CorpusError> {
    let damaged = |detail: String| CorpusError::Damaged {
        dir: dir.to_path_buf(),
        detail,
    };
    let mut documents = BTreeMap::new();
    let mut layout = Vec::new();
    for segment in searcher.segment_readers() {
        layout.push((segment.max_doc(), segment.num_deleted_docs()));
        let fast = segment.fast_fields();
        let column = |name: &str| {
            fast.str(name)
                .map_err(|e| index_error(dir, e))?
                .ok_or_else(|| damaged(format!("no `{name}` column")))
        };
        let ids = column("id")?;
        let fingerprints = column("fingerprint")?;
        for doc in segment.doc_ids_alive() {
            let (mut id, mut fingerprint) = (String::new(), String::new());
            let id_ord = ids.term_ords(doc).next();
            let fp_ord = fingerprints.term_ords(doc).next();
            match (id_ord, fp_ord) {
                (Some(i), Some(p)) => {
                    ids.ord_to_str(i, &mut id)
                        .map_err(|e| damaged(e.to_string()))?;
                    fingerprints
                        .ord_to_str(p, &mut fingerprint)
                        .map_err(|e| damaged(e.to_string()))?;
                }
                _ => return Err(damaged("a document without id or fingerprint".into())),
            }
            if documents.insert(id.clone(), fingerprint).is_some() {
                return Err(damaged(format!("id {id} is stored twice")));
            }
        }
    }
    // Segment order is not stable across opens; the layout is hashed in a canonical order.
    layout.sort_unstable();
    let mut hasher = blake3::Hasher::new();
    for part in [
        "research-ledger/corpus-state/v1",
        INDEX_FORMAT,
        TOKENIZER_VERSION,
        tantivy::version_string(),
    ] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(&(layout.len() as u64).to_le_bytes());
    for (max_doc, deleted) in &layout {
        hasher.update(&u64::from(*max_doc).to_le_bytes());
        hasher.update(&u64::from(*deleted).to_le_bytes());
    }
    hasher.update(&(documents.len() as u64).to_le_bytes());
    for (id, fingerprint) in &documents {
        for part in [id, fingerprint] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
    }
    let state = IndexState {
        id: hasher.finalize().to_hex().to_string(),
        documents: documents.len() as u64,
    };
    Ok((state, documents))
}
