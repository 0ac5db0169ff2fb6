//! What the index holds, as one id: the state a recorded search names, so that it can be
//! reproduced.

use super::*;

/// Identifies what the index held when a search ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexState {
    /// 64 hex digits: blake3 of the index format, the tokenizer, the search analyzer, the search
    /// engine's version, the ranking with its parameters ([`super::Bm25f::name`], or
    /// [`super::Similarity::ranking_name`] when the search ranks by meaning too), the segment
    /// layout and every live document's id and fingerprint, in id order.
    pub id: String,
    /// Live documents.
    pub documents: u64,
}

/// The state id of what `searcher` shows, and every live document's id with its fingerprint.
pub(super) fn compute_state(
    dir: &Path,
    searcher: &Searcher,
    ranking: &str,
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
    let state = IndexState {
        id: state_id(&layout, &documents, ranking),
        documents: documents.len() as u64,
    };
    Ok((state, documents))
}

/// The hash [`IndexState::id`] describes, of a canonical layout and the live documents.
fn state_id(layout: &[(u32, u32)], documents: &BTreeMap<String, String>, ranking: &str) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in [
        "research-ledger/corpus-state/v1",
        INDEX_FORMAT,
        TOKENIZER_VERSION,
        SEARCH_ANALYZER_VERSION,
        tantivy::version_string(),
        ranking,
    ] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(&(layout.len() as u64).to_le_bytes());
    for (max_doc, deleted) in layout {
        hasher.update(&u64::from(*max_doc).to_le_bytes());
        hasher.update(&u64::from(*deleted).to_le_bytes());
    }
    hasher.update(&(documents.len() as u64).to_le_bytes());
    for (id, fingerprint) in documents {
        for part in [id, fingerprint] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
    }
    hasher.finalize().to_hex().to_string()
}
