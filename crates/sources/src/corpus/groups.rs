//! Title groups: the documents that share a title (exactly as stored) are the passages of one
//! article, and the ranking reads each passage's group ([`super::rank`]). Worked out once per
//! snapshot of the index, from each segment's `title_group` column.

use tantivy::columnar::StrColumn;

use super::*;

/// Every live document's title group, as a dense index, and each group's live documents.
#[derive(Debug)]
pub(super) struct TitleGroups {
    /// Each segment's `title_group` column.
    columns: Vec<StrColumn>,
    /// Per segment, the group of each of the column's values, by the value's ordinal.
    group_of_ord: Vec<Vec<usize>>,
    /// Live documents per group.
    members: Vec<u64>,
    /// Groups with a live document.
    count: u64,
}

impl TitleGroups {
    /// The groups of what `searcher` shows. A value met in several segments is one group.
    pub(super) fn of(dir: &Path, searcher: &Searcher) -> Result<Self, CorpusError> {
        let damaged = |detail: String| CorpusError::Damaged {
            dir: dir.to_path_buf(),
            detail,
        };
        let mut columns = Vec::new();
        let mut values: Vec<(Vec<u8>, usize, usize)> = Vec::new();
        for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
            let column = segment
                .fast_fields()
                .str("title_group")
                .map_err(|e| index_error(dir, e))?
                .ok_or_else(|| damaged("no `title_group` column".into()))?;
            let mut stream = column.dictionary().stream().map_err(|e| {
                damaged(format!("the `title_group` column does not read back: {e}"))
            })?;
            let mut ord = 0;
            while stream.advance() {
                values.push((stream.key().to_vec(), segment_ord, ord));
                ord += 1;
            }
            columns.push(column);
        }
        values.sort_unstable();
        let mut group_of_ord: Vec<Vec<usize>> = columns
            .iter()
            .map(|c| vec![0; c.dictionary().num_terms()])
            .collect();
        let mut groups = 0;
        for (at, (key, segment_ord, ord)) in values.iter().enumerate() {
            if at > 0 && values[at - 1].0 != *key {
                groups += 1;
            }
            if let Some(slot) = group_of_ord
                .get_mut(*segment_ord)
                .and_then(|s| s.get_mut(*ord))
            {
                *slot = groups;
            }
        }
        let mut out = Self {
            members: vec![0; if values.is_empty() { 0 } else { groups + 1 }],
            columns,
            group_of_ord,
            count: 0,
        };
        out.count_members(dir, searcher)?;
        Ok(out)
    }

    fn count_members(&mut self, dir: &Path, searcher: &Searcher) -> Result<(), CorpusError> {
        for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
            let segment_ord = u32::try_from(segment_ord).unwrap_or(u32::MAX);
            for doc_id in segment.doc_ids_alive() {
                let group = self.group_of(dir, DocAddress::new(segment_ord, doc_id))?;
                if let Some(members) = self.members.get_mut(group) {
                    *members += 1;
                }
            }
        }
        self.count = self.members.iter().filter(|m| **m > 0).count() as u64;
        Ok(())
    }

    /// Groups with a live document.
    pub(super) fn count(&self) -> u64 {
        self.count
    }

    /// Live documents of a group.
    pub(super) fn members(&self, group: usize) -> u64 {
        self.members.get(group).copied().unwrap_or(0)
    }

    /// The group of a document.
    pub(super) fn group_of(&self, dir: &Path, address: DocAddress) -> Result<usize, CorpusError> {
        let damaged = |detail: &str| CorpusError::Damaged {
            dir: dir.to_path_buf(),
            detail: detail.to_string(),
        };
        let segment = address.segment_ord as usize;
        let ord = self
            .columns
            .get(segment)
            .and_then(|column| column.term_ords(address.doc_id).next())
            .ok_or_else(|| damaged("a document without a title group"))?;
        usize::try_from(ord)
            .ok()
            .and_then(|ord| self.group_of_ord.get(segment)?.get(ord).copied())
            .ok_or_else(|| damaged("a title group outside its column's values"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn document(id: &str, title: &str) -> Document {
        let content = format!("Passage {id} of its article.");
        Document {
            id: id.into(),
            title: title.into(),
            source: None,
            url: None,
            publish_date: NaiveDate::from_ymd_opt(2024, 1, 1).unwrap(),
            source_type: SourceType::Other,
            citation_count: None,
            content_hash: content_hash(content.as_bytes()),
            content,
            defaulted: DefaultedFields::default(),
        }
    }

    #[test]
    fn a_title_met_in_several_segments_is_one_group() {
        // Every ingest leaves one segment, but a reader may look between a commit and the
        // merge: the groups must not depend on where the documents sit.
        let corpus = Corpus::in_memory(CorpusLimits::default()).unwrap();
        let mut writer = corpus.writer().unwrap();
        for batch in [
            [document("a", "Glaciers"), document("b", "")],
            [document("c", "Glaciers"), document("d", "")],
        ] {
            for d in &batch {
                corpus.add(&writer, d, &d.fingerprint()).unwrap();
            }
            writer.commit().unwrap();
        }
        corpus.reader.reload().unwrap();
        let searcher = corpus.reader.searcher();
        assert_eq!(searcher.segment_readers().len(), 2);
        let groups = TitleGroups::of(Path::new(""), &searcher).unwrap();
        // "Glaciers", and each untitled document on its own.
        assert_eq!(groups.count(), 3);
        let mut by_id = HashMap::new();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            for doc in segment.doc_ids_alive() {
                let address = DocAddress::new(u32::try_from(ord).unwrap(), doc);
                let id = corpus.fast_text(&searcher, address, "id").unwrap();
                by_id.insert(id, groups.group_of(Path::new(""), address).unwrap());
            }
        }
        assert_eq!(by_id["a"], by_id["c"]);
        assert_eq!(groups.members(by_id["a"]), 2);
        assert_ne!(by_id["b"], by_id["d"]);
        assert_eq!(groups.members(by_id["b"]), 1);
    }
}
