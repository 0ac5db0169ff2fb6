//! Opening a folder: the index in the current format as it is, none as a new empty index, and
//! one written in an older format (`v1` or `v2`) rebuilt from the documents it stores.
//!
//! An older index stores every document whole (its text, metadata and fingerprint), so nothing is
//! lost by rebuilding it: the documents are read back (each checked against its content hash),
//! written in id order into a new index in a staging folder inside the corpus folder, compacted
//! to one segment as every ingest leaves it, and swapped in. The new index then answers exactly
//! as one ingested afresh from the same documents: same hits, same scores, same state id.
//! While it runs, the rebuild holds the writer lock of the old index, so no other process
//! writes to it; a rebuild cut short leaves the old index in place and runs again at the next
//! open.

use std::io;

use tantivy::directory::{Directory, INDEX_WRITER_LOCK};

use super::schema::{schema_v1, schema_v2};
use super::*;

/// Where a rebuild writes the new index before swapping it in.
const STAGING: &str = ".rebuild";

/// The index in `dir`, rebuilt first when it is in an older format.
pub(super) fn open_index(dir: &Path, limits: &CorpusLimits) -> Result<Index, CorpusError> {
    let (schema, _) = schema();
    let directory = mmap(dir)?;
    let exists = Index::exists(&directory).map_err(|e| CorpusError::Index {
        dir: dir.to_path_buf(),
        detail: e.to_string(),
    })?;
    if !exists {
        return Index::create(directory, schema, tantivy::IndexSettings::default())
            .map_err(|e| index_error(dir, e));
    }
    let existing = Index::open(directory).map_err(|e| index_error(dir, e))?;
    if existing.schema() == schema {
        return Ok(existing);
    }
    if existing.schema() != schema_v1() && existing.schema() != schema_v2() {
        return Err(CorpusError::Incompatible {
            dir: dir.to_path_buf(),
            detail: "its fields are those of no index format this version knows".into(),
        });
    }
    rebuild(dir, &existing, limits)?;
    drop(existing);
    let rebuilt = Index::open(mmap(dir)?).map_err(|e| index_error(dir, e))?;
    if rebuilt.schema() != schema {
        return Err(CorpusError::Damaged {
            dir: dir.to_path_buf(),
            detail: "the rebuilt index does not have the current fields".into(),
        });
    }
    Ok(rebuilt)
}

fn mmap(dir: &Path) -> Result<MmapDirectory, CorpusError> {
    MmapDirectory::open(dir).map_err(|e| CorpusError::Index {
        dir: dir.to_path_buf(),
        detail: e.to_string(),
    })
}

/// Writes every live document of `old` into a new index in the staging folder, then swaps it
/// in for `old`'s files.
fn rebuild(dir: &Path, old: &Index, limits: &CorpusLimits) -> Result<(), CorpusError> {
    let _lock = old
        .directory()
        .acquire_lock(&INDEX_WRITER_LOCK)
        .map_err(|_| CorpusError::Locked {
            dir: dir.to_path_buf(),
        })?;
    let staging = dir.join(STAGING);
    let io_error = |what: &str, e: io::Error| CorpusError::Index {
        dir: dir.to_path_buf(),
        detail: format!("rebuilding the index: cannot {what}: {e}"),
    };
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(|e| io_error("clear the staging folder", e))?;
    }
    std::fs::create_dir(&staging).map_err(|e| io_error("create the staging folder", e))?;
    let reader = old
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()
        .map_err(|e| index_error(dir, e))?;
    let searcher = reader.searcher();
    let (schema, fields) = schema();
    let new = Index::create_in_dir(&staging, schema).map_err(|e| index_error(dir, e))?;
    let target = Corpus::over(staging.clone(), new, fields, limits.clone(), None)?;
    let writer = target.writer()?;
    // The older formats' stored fields have the same ids in the current schema, so their
    // documents read back through the current fields.
    for address in addresses_by_id(&target, &searcher)? {
        let document = target.read(&searcher, address)?;
        target.add(&writer, &document, &document.fingerprint())?;
    }
    let mut writer = writer;
    writer.commit().map_err(|e| index_error(dir, e))?;
    target.compact(writer)?;
    drop(target);
    swap_in(dir, &staging).map_err(|e| io_error("swap the rebuilt index in", e))?;
    tracing::info!(
        dir = %dir.display(),
        documents = searcher.num_docs(),
        "rebuilt the corpus index in the current format"
    );
    Ok(())
}

/// Every live document of `searcher`, in id order.
fn addresses_by_id(target: &Corpus, searcher: &Searcher) -> Result<Vec<DocAddress>, CorpusError> {
    let mut found = Vec::new();
    for (ord, segment) in searcher.segment_readers().iter().enumerate() {
        let segment_ord = u32::try_from(ord).unwrap_or(u32::MAX);
        for doc_id in segment.doc_ids_alive() {
            let address = DocAddress::new(segment_ord, doc_id);
            found.push((target.fast_text(searcher, address, "id")?, address));
        }
    }
    found.sort();
    Ok(found.into_iter().map(|(_, address)| address).collect())
}

/// Moves the staged index's files into `dir`, switches to it by replacing `meta.json` (one
/// rename: the old index stays whole until then), and deletes the old index's files.
fn swap_in(dir: &Path, staging: &Path) -> io::Result<()> {
    const META: &str = "meta.json";
    const MANAGED: &str = ".managed.json";
    let old_files = managed_files(dir)?;
    let mut new_files = Vec::new();
    for entry in std::fs::read_dir(staging)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str().map(str::to_owned) else {
            continue;
        };
        if name == META || name == MANAGED || name.starts_with(".tantivy-") {
            continue;
        }
        std::fs::rename(staging.join(&name), dir.join(&name))?;
        new_files.push(name);
    }
    std::fs::rename(staging.join(MANAGED), dir.join(MANAGED))?;
    std::fs::rename(staging.join(META), dir.join(META))?;
    std::fs::File::open(dir)?.sync_all()?;
    for name in old_files {
        if name != META && !new_files.contains(&name) {
            match std::fs::remove_file(dir.join(&name)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    std::fs::remove_dir_all(staging)
}

/// The files tantivy lists as its own in `dir`.
fn managed_files(dir: &Path) -> io::Result<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(".managed.json"))?;
    serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
