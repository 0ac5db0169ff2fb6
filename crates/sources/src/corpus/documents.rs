//! Every stored document, read back: what moves a corpus from one store to another.

use super::*;

impl Corpus {
    /// Every live document, in id order, each checked as a search reads it.
    pub fn documents(&self) -> Result<Vec<Document>, CorpusError> {
        let snapshot = self.current();
        let searcher = &snapshot.searcher;
        let mut out = Vec::new();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            let segment_ord = u32::try_from(ord).unwrap_or(u32::MAX);
            for doc_id in segment.doc_ids_alive() {
                out.push(self.read(searcher, DocAddress::new(segment_ord, doc_id))?);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }
}
