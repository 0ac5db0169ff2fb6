//! The index's schema, and reading a stored document back from it.

use super::*;

#[derive(Debug, Clone, Copy)]
pub(super) struct Fields {
    pub(super) id: IndexField,
    pub(super) title: IndexField,
    pub(super) source: IndexField,
    pub(super) url: IndexField,
    pub(super) publish_date: IndexField,
    pub(super) defaulted: IndexField,
    pub(super) source_type: IndexField,
    pub(super) citation_count: IndexField,
    pub(super) content: IndexField,
    pub(super) content_hash: IndexField,
    pub(super) fingerprint: IndexField,
    /// The title under the search analyzer (stemmed), not stored: what a query's terms find a
    /// document's subject by.
    pub(super) title_search: IndexField,
    /// The text under the search analyzer (stemmed), not stored: what BM25 ranks the text by.
    pub(super) content_search: IndexField,
    /// The document's title group ([`title_group`]), indexed whole and as a fast column, not
    /// stored: how the ranking finds the other passages of a document's article.
    pub(super) title_group: IndexField,
}

/// The key of a document's title group: the documents that share its title, exactly as stored,
/// are the passages of one article. A document without a title is a group of its own.
pub(super) fn title_group(document: &Document) -> String {
    if document.title.is_empty() {
        format!("id:{}", document.id)
    } else {
        format!("title:{}", document.title)
    }
}

/// The title a [`title_group`] key was made from ("" for a document without one).
pub(super) fn title_of_group(group: &str) -> &str {
    group.strip_prefix("title:").unwrap_or("")
}

/// The schema of index format `v1`, which had no searchable title or stemmed text: how a folder
/// written in that format is recognised, to be rebuilt.
pub(super) fn schema_v1() -> Schema {
    let mut builder = Schema::builder();
    stored_fields(&mut builder);
    builder.build()
}

/// The schema of index format `v2`, which had no title group: how a folder written in that
/// format is recognised, to be rebuilt.
pub(super) fn schema_v2() -> Schema {
    let mut builder = Schema::builder();
    searchable_fields(&mut builder);
    builder.build()
}

/// The schema of the current format (`v3`): `v2`'s fields, with the same ids, and then the title
/// group. A `v1` or `v2` document therefore reads back through these [`Fields`].
pub(super) fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let searchable = searchable_fields(&mut builder);
    let fields = Fields {
        title_group: builder.add_text_field("title_group", STRING | FAST),
        ..searchable
    };
    (builder.build(), fields)
}

/// The fields of format `v2`: `v1`'s, and then the title and the text under the search analyzer.
fn searchable_fields(builder: &mut tantivy::schema::SchemaBuilder) -> Fields {
    let stored = stored_fields(builder);
    let search = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(SEARCH_ANALYZER_VERSION)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    Fields {
        title_search: builder.add_text_field("title_search", search.clone()),
        content_search: builder.add_text_field("content_search", search),
        ..stored
    }
}

/// The fields of format `v1`, added to `builder` in their order; the fields added since are
/// placeholders the callers fill.
fn stored_fields(builder: &mut tantivy::schema::SchemaBuilder) -> Fields {
    // Frequencies without positions: BM25 needs no more, and phrase queries are not offered.
    let text = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(TOKENIZER_VERSION)
                .set_index_option(IndexRecordOption::WithFreqs),
        )
        .set_stored();
    Fields {
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
        title_search: IndexField::from_field_id(u32::MAX),
        content_search: IndexField::from_field_id(u32::MAX),
        title_group: IndexField::from_field_id(u32::MAX),
    }
}

impl Corpus {
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

    /// The document whose full text has blake3 hash `hash`, if the corpus holds one: how a
    /// stored item finds its title again.
    pub fn document_with_content(
        &self,
        hash: &ContentHash,
    ) -> Result<Option<Document>, CorpusError> {
        let snapshot = self.current();
        self.find_one(&snapshot.searcher, self.fields.content_hash, &hash.to_hex())
    }

    pub(super) fn find_one(
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
    pub(super) fn read(
        &self,
        searcher: &Searcher,
        address: DocAddress,
    ) -> Result<Document, CorpusError> {
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

    pub(super) fn damaged(&self, detail: String) -> CorpusError {
        CorpusError::Damaged {
            dir: self.dir.clone(),
            detail,
        }
    }
}
