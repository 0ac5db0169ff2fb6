//! Named bounds on everything the corpus reads, stores and answers, each with its unit last.
//!
//! The metadata bounds match the research domain's own (`research::Limits`), so a document the
//! corpus accepts is never refused when it becomes evidence.

use serde::{Deserialize, Serialize};

/// The least `writer_memory_bytes_max` the index writer (tantivy) works with: the memory its
/// arena needs before the first document. A smaller value is raised to it.
pub const WRITER_MEMORY_BYTES_MIN: u64 = 15_000_000;

/// The most `writer_memory_bytes_max` the index writer works with: its arena is addressed with
/// 32 bits, less a margin. A larger value is lowered to it.
pub const WRITER_MEMORY_BYTES_MAX: u64 = u32::MAX as u64 - 1_000_000 - 1;

/// The bounds the corpus enforces. `CorpusLimits::default()` holds the product's defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CorpusLimits {
    /// Size of a document's text (bytes; 1 MiB), the same bound as the blob store's, so every
    /// document can be kept as a content blob.
    pub content_bytes_max: u64,
    /// Size of one file read whole: Markdown, text or a JSON array (bytes).
    pub file_bytes_max: u64,
    /// Size of one line of a JSON Lines file (bytes): a document plus its metadata.
    pub jsonl_line_bytes_max: u64,
    /// Length of a document id (characters), as for a search result id in the research domain.
    pub id_chars_max: u64,
    /// Length of a title (characters).
    pub title_chars_max: u64,
    /// Length of a publisher name (characters).
    pub source_chars_max: u64,
    /// Length of a URL (characters).
    pub url_chars_max: u64,
    /// Length of a search query (characters).
    pub query_chars_max: u64,
    /// Hits one search may ask for.
    pub search_results_max: u64,
    /// Distinct terms of a research question whose coverage gives relevance.
    pub question_terms_max: u64,
    /// Length of a hit's summary (characters; SPEC §4: 800).
    pub summary_chars_max: u64,
    /// Memory the index writer may buffer before it writes a segment (bytes), from
    /// [`WRITER_MEMORY_BYTES_MIN`] to [`WRITER_MEMORY_BYTES_MAX`].
    pub writer_memory_bytes_max: u64,
    /// Errors, and separately warnings, an ingest report lists; past this only the count of
    /// failed documents grows.
    pub ingest_problems_listed_max: u64,
    /// Documents one request of an ingest through a server may carry
    /// ([`crate::Corpus::add_documents`]); a client sends larger collections in batches.
    pub add_documents_max: u64,
}

impl Default for CorpusLimits {
    fn default() -> Self {
        let research = research::Limits::default();
        Self {
            content_bytes_max: 1024 * 1024,
            file_bytes_max: 256 * 1024 * 1024,
            jsonl_line_bytes_max: 1024 * 1024 + 64 * 1024,
            id_chars_max: research.name_chars_max,
            title_chars_max: 1_000,
            source_chars_max: research.source_chars_max,
            url_chars_max: research.url_chars_max,
            query_chars_max: research.query_chars_max,
            search_results_max: research.search_results_max,
            question_terms_max: 4_096,
            summary_chars_max: research.summary_chars_max,
            writer_memory_bytes_max: 64 * 1024 * 1024,
            ingest_problems_listed_max: 10_000,
            add_documents_max: 1_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::schema::{Schema, TEXT};
    use tantivy::{Index, IndexWriter, TantivyDocument};

    /// Whether tantivy opens a writer with `bytes` of memory.
    fn opens_with(bytes: u64) -> bool {
        let mut schema = Schema::builder();
        schema.add_text_field("text", TEXT);
        let index = Index::create_in_ram(schema.build());
        let budget = usize::try_from(bytes).expect("fits");
        let writer: tantivy::Result<IndexWriter<TantivyDocument>> =
            index.writer_with_num_threads(1, budget);
        writer.is_ok()
    }

    #[test]
    fn the_writer_memory_bounds_are_the_index_writers_own() {
        assert!(opens_with(WRITER_MEMORY_BYTES_MIN));
        assert!(!opens_with(WRITER_MEMORY_BYTES_MIN - 1));
        assert!(opens_with(WRITER_MEMORY_BYTES_MAX));
        assert!(!opens_with(WRITER_MEMORY_BYTES_MAX + 1));
        let default = CorpusLimits::default().writer_memory_bytes_max;
        assert!((WRITER_MEMORY_BYTES_MIN..=WRITER_MEMORY_BYTES_MAX).contains(&default));
    }
}
