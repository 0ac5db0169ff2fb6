//! Writing the corpus: ingest from files, documents added by a client, one writer, and the
//! index left as one segment after every change.

use super::*;

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
pub(super) struct Added {
    pub(super) added: u64,
    pub(super) replaced: u64,
    pub(super) unchanged: u64,
}

/// Documents going into the index, through one writer, compared with what the index held when
/// it started: what every ingest does with each document it is given.
pub(super) struct Adding<'a> {
    pub(super) corpus: &'a Corpus,
    pub(super) writer: IndexWriter<TantivyDocument>,
    /// Every id the index held, with its fingerprint.
    pub(super) existing: HashMap<String, String>,
    pub(super) counts: Added,
}

impl Adding<'_> {
    /// Adds a document, replaces the one of its id if that one differs, or leaves it alone.
    pub(super) fn add(&mut self, document: &Document) -> Result<(), CorpusError> {
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

    /// Commits what was added, leaves the index as one segment, and shows it to searches
    /// (encoding the new passages first when the search ranks by meaning).
    pub(super) fn finish(
        self,
        progress: &mut dyn FnMut(IngestProgress<'_>),
    ) -> Result<Added, CorpusError> {
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
        corpus.refresh_with(progress)?;
        Ok(counts)
    }
}

impl Corpus {
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
        let added = adding.finish(progress)?;
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
        let added = adding.finish(&mut |_| {})?;
        Ok(AddReport {
            added: added.added,
            replaced: added.replaced,
            unchanged: added.unchanged,
            rejected,
            index_state: self.index_state(),
        })
    }

    /// Starts adding documents; the caller holds the writing lock until it finishes.
    pub(super) fn adding(&self) -> Result<Adding<'_>, CorpusError> {
        let existing: HashMap<String, String> =
            compute_state(&self.dir, &self.current().searcher, &self.ranking)?
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

    pub(super) fn writer(&self) -> Result<IndexWriter<TantivyDocument>, CorpusError> {
        let budget = self.limits.writer_memory_bytes_max.clamp(
            crate::limits::WRITER_MEMORY_BYTES_MIN,
            crate::limits::WRITER_MEMORY_BYTES_MAX,
        );
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
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
    pub(super) fn compact(
        &self,
        mut writer: IndexWriter<TantivyDocument>,
    ) -> Result<(), CorpusError> {
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

    pub(super) fn add(
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
        doc.add_text(f.title_search, &document.title);
        doc.add_text(f.content_search, &document.content);
        doc.add_text(f.title_group, schema::title_group(document));
        doc.add_text(f.content_hash, document.content_hash.to_hex());
        doc.add_text(f.fingerprint, fingerprint);
        writer
            .add_document(doc)
            .map(|_| ())
            .map_err(|e| index_error(&self.dir, e))
    }
}
