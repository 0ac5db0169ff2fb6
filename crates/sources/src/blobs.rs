//! The content store of earlier versions, read-only: the full texts written before the ledger
//! kept content, each under its blake3 hash.
//!
//! An evidence event records only a summary and the content hash (SPEC §4). Today the full text
//! travels with the append of the event that cites it and the ledger keeps it; before, the
//! service wrote it here first. Those texts stay here, and the service reads them when the
//! ledger does not hold a text. Nothing writes here any more.
//!
//! Layout: `DIR/ab/cdef…`, the first two hex digits of the hash naming a folder and the other
//! 62 the file. A text may also still sit in a journal the last run of an earlier version left
//! (`DIR/.journal/<generation>.log`: records `"RLBJ" | length u32 LE | blake3 hash | bytes`),
//! its file not yet written when that run stopped: the journals found at open are read too, and
//! a record cut short, or whose bytes do not hash to its name, ends a journal's intact part.
//! Every read re-hashes the bytes, so a damaged or altered text is reported, never returned.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use research::Hash32;

/// blake3 of a full evidence text; the name of its blob.
pub type ContentHash = Hash32;

/// The content hash of `bytes`.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    Hash32(*blake3::hash(bytes).as_bytes())
}

/// Bounds of the content store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// Largest text accepted or read (bytes). 1 MiB by default: an evidence text, not a data
    /// set.
    pub content_bytes_max: u64,
}

impl Default for BlobOptions {
    fn default() -> Self {
        Self {
            content_bytes_max: 1024 * 1024,
        }
    }
}

/// Why a text could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// The stored text is larger than the store reads. Raise `content_bytes_max`.
    #[error("content of {bytes} bytes exceeds content_bytes_max ({limit} bytes)")]
    TooLarge {
        /// Size of the content.
        bytes: u64,
        /// The limit in force.
        limit: u64,
    },
    /// No text has this hash here.
    #[error("no blob {0}")]
    NotFound(ContentHash),
    /// The stored bytes do not hash to their name: the file was altered or damaged. They are
    /// never returned.
    #[error("blob {expected} is damaged: its bytes hash to {actual}")]
    Damaged {
        /// The hash the blob is stored under.
        expected: ContentHash,
        /// The hash of the bytes found.
        actual: ContentHash,
    },
    /// The file system failed.
    #[error("blob store I/O at {path}: {source}")]
    Io {
        /// The file or folder involved.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BlobError + '_ {
    move |source| BlobError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The bytes at the start of every journal record.
const RECORD_MAGIC: &[u8; 4] = b"RLBJ";
/// A record's header: magic, length, hash.
const RECORD_HEADER_LEN: usize = 4 + 4 + 32;

/// Where a text's bytes lie in its journal.
#[derive(Debug, Clone, Copy)]
struct Record {
    offset: u64,
    len: u64,
}

/// A journal an earlier run left, and the intact records it holds.
#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: File,
    records: HashMap<ContentHash, Record>,
}

/// The content store of earlier versions over one folder, read-only. See the module
/// documentation.
#[derive(Debug)]
pub struct BlobStore {
    dir: PathBuf,
    options: BlobOptions,
    journals: Vec<Journal>,
}

impl BlobStore {
    /// Opens the store in `dir` to read it, changing nothing there; a missing folder reads as
    /// an empty store. The journals earlier runs left are read, for texts whose files were
    /// never written.
    pub fn open(dir: impl Into<PathBuf>, options: BlobOptions) -> Self {
        let dir = dir.into();
        let journals = match journals_in(&dir.join(".journal")) {
            Ok(found) => found,
            Err(BlobError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, "the content journals could not be listed; texts only they hold will not be found");
                Vec::new()
            }
        };
        BlobStore {
            dir,
            options,
            journals,
        }
    }

    /// The folder of the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bounds in force.
    pub fn options(&self) -> &BlobOptions {
        &self.options
    }

    /// Where the file of the text `hash` is.
    pub fn path_of(&self, hash: &ContentHash) -> PathBuf {
        let hex = hash.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// The bytes of the text `hash`, checked against the hash: from its file, or from a
    /// journal that holds it when it has none.
    pub fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        match self.read_file(hash) {
            Err(BlobError::NotFound(_)) => {}
            found => return found,
        }
        for journal in &self.journals {
            if let Some(record) = journal.records.get(hash) {
                return self.read_record(journal, hash, *record);
            }
        }
        Err(BlobError::NotFound(*hash))
    }

    /// Whether a text named `hash` is here. The bytes are not checked; [`BlobStore::get`] does.
    pub fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError> {
        if self.journals.iter().any(|j| j.records.contains_key(hash)) {
            return Ok(true);
        }
        let path = self.path_of(hash);
        match fs::metadata(&path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(BlobError::Io { path, source: e }),
        }
    }

    fn read_file(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        let path = self.path_of(hash);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::NotFound(*hash));
            }
            Err(e) => return Err(io_at(&path)(e)),
        };
        let limit = self.options.content_bytes_max;
        let mut bytes = Vec::new();
        // One byte past the limit tells an oversized file from one exactly at the limit without
        // reading an arbitrarily large file into memory.
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_at(&path))?;
        if bytes.len() as u64 > limit {
            let size = fs::metadata(&path).map_err(io_at(&path))?.len();
            return Err(BlobError::TooLarge { bytes: size, limit });
        }
        checked(hash, bytes)
    }

    fn read_record(
        &self,
        journal: &Journal,
        hash: &ContentHash,
        record: Record,
    ) -> Result<Vec<u8>, BlobError> {
        let limit = self.options.content_bytes_max;
        if record.len > limit {
            return Err(BlobError::TooLarge {
                bytes: record.len,
                limit,
            });
        }
        let mut bytes = vec![0u8; record.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&journal.file, &mut bytes, record.offset)
            .map_err(io_at(&journal.path))?;
        checked(hash, bytes)
    }
}

/// `bytes` if they hash to `hash`; [`BlobError::Damaged`] otherwise.
fn checked(hash: &ContentHash, bytes: Vec<u8>) -> Result<Vec<u8>, BlobError> {
    let actual = content_hash(&bytes);
    if actual != *hash {
        return Err(BlobError::Damaged {
            expected: *hash,
            actual,
        });
    }
    Ok(bytes)
}

/// The journals in `dir`, oldest first, each with its intact records; one that cannot be read
/// is passed over with a warning.
fn journals_in(dir: &Path) -> Result<Vec<Journal>, BlobError> {
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_at(dir))? {
        let path = entry.map_err(io_at(dir))?.path();
        let generation = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(generation) = generation {
            found.push((generation, path));
        }
    }
    found.sort();
    let mut journals = Vec::with_capacity(found.len());
    for (_, path) in found {
        let read = fs::read(&path).and_then(|bytes| Ok((bytes, File::open(&path)?)));
        match read {
            Ok((bytes, file)) => journals.push(Journal {
                records: intact_records(&bytes).into_iter().collect(),
                path,
                file,
            }),
            Err(e) => {
                tracing::warn!(error = %e, journal = %path.display(), "a content journal could not be read; texts only it holds will not be found");
            }
        }
    }
    Ok(journals)
}

/// The intact records of a journal's bytes, in order. A record cut short, or whose bytes do
/// not hash to its name, ends them: it, and anything after it, belongs to a write that never
/// returned.
fn intact_records(bytes: &[u8]) -> Vec<(ContentHash, Record)> {
    let mut records = Vec::new();
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + RECORD_HEADER_LEN) {
        if &header[..4] != RECORD_MAGIC {
            break;
        }
        let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&header[8..40]);
        let hash = Hash32(hash);
        let start = at + RECORD_HEADER_LEN;
        let Some(content) = bytes.get(start..start + len) else {
            break;
        };
        if content_hash(content) != hash {
            break;
        }
        records.push((
            hash,
            Record {
                offset: start as u64,
                len: len as u64,
            },
        ));
        at = start + len;
    }
    records
}
