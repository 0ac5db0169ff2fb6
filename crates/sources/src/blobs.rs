//! The content blob store: every evidence text, kept whole under its blake3 hash.
//!
//! An evidence event records only a summary and the content hash (SPEC §4); the full text lives
//! here and is read on demand. The service writes the blob first and appends the event that
//! cites it only after [`BlobStore::put`] returned, so a durable event never cites a blob that a
//! crash could lose.
//!
//! Layout: `DIR/ab/cdef…`, the first two hex digits of the hash naming a folder and the other
//! 62 the file, so no folder grows past 1/256 of the store. A blob is written to a temporary file
//! in `DIR/.tmp/`, synced, renamed into place and its folder synced: a crash leaves either no
//! blob or the whole blob, never a prefix under the final name. Every read re-hashes the bytes,
//! so a damaged or altered blob is reported, never returned.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use research::Hash32;

/// blake3 of a full evidence text; the name of its blob.
pub type ContentHash = Hash32;

/// The content hash of `bytes`.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    Hash32(*blake3::hash(bytes).as_bytes())
}

/// Bounds of the blob store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// Largest blob accepted or returned (bytes). 1 MiB by default: an evidence text, not a data
    /// set.
    pub content_bytes_max: u64,
    /// Age after which a leftover temporary file of an interrupted write is removed when the
    /// store opens (seconds). Far longer than any write takes, so a write in progress elsewhere
    /// is never disturbed.
    pub stale_temp_secs_max: u64,
}

impl Default for BlobOptions {
    fn default() -> Self {
        Self {
            content_bytes_max: 1024 * 1024,
            stale_temp_secs_max: 3_600,
        }
    }
}

/// Why a blob could not be stored or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// The content is larger than the store accepts. Shorten it, or raise `content_bytes_max`.
    #[error("content of {bytes} bytes exceeds content_bytes_max ({limit} bytes)")]
    TooLarge {
        /// Size of the content.
        bytes: u64,
        /// The limit in force.
        limit: u64,
    },
    /// No blob has this hash. The event citing it refers to content this store never received.
    #[error("no blob {0}")]
    NotFound(ContentHash),
    /// The stored bytes do not hash to their name: the file was altered or damaged. It is never
    /// returned; restore it from a backup or an export bundle, or `put` the original again.
    #[error("blob {expected} is damaged: its bytes hash to {actual}")]
    Damaged {
        /// The hash the blob is stored under.
        expected: ContentHash,
        /// The hash of the bytes found.
        actual: ContentHash,
    },
    /// The store was opened read-only (an audit): nothing can be stored.
    #[error("the content store was opened read-only")]
    ReadOnly,
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

/// A content-addressed store of evidence texts in one folder.
#[derive(Debug)]
pub struct BlobStore {
    dir: PathBuf,
    temp_dir: PathBuf,
    options: BlobOptions,
    read_only: bool,
}

/// Distinguishes temporary files of concurrent writes within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl BlobStore {
    /// Opens the store in `dir`, creating it when absent, and removes temporary files that
    /// interrupted writes left more than `stale_temp_secs_max` ago.
    pub fn open(dir: impl Into<PathBuf>, options: BlobOptions) -> Result<Self, BlobError> {
        let dir = dir.into();
        create_dir_durably(&dir)?;
        let temp_dir = dir.join(".tmp");
        create_dir_durably(&temp_dir)?;
        let store = Self {
            dir,
            temp_dir,
            options,
            read_only: false,
        };
        store.remove_stale_temp_files()?;
        Ok(store)
    }

    /// Opens the store in `dir` to read it, changing nothing there (a missing folder reads as
    /// an empty store): what an audit of a read-only copy needs.
    pub fn open_read_only(dir: impl Into<PathBuf>, options: BlobOptions) -> Self {
        let dir = dir.into();
        Self {
            temp_dir: dir.join(".tmp"),
            dir,
            options,
            read_only: true,
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

    /// Where the blob of `hash` lives.
    pub fn path_of(&self, hash: &ContentHash) -> PathBuf {
        let hex = hash.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Stores `bytes` and returns their hash once they are on stable storage: the file synced,
    /// renamed into place, and the folder holding the new name synced. A blob already stored
    /// with intact bytes is not rewritten; a damaged one is replaced by the good bytes.
    pub fn put(&self, bytes: &[u8]) -> Result<ContentHash, BlobError> {
        if self.read_only {
            return Err(BlobError::ReadOnly);
        }
        let size = bytes.len() as u64;
        if size > self.options.content_bytes_max {
            return Err(BlobError::TooLarge {
                bytes: size,
                limit: self.options.content_bytes_max,
            });
        }
        let hash = content_hash(bytes);
        let path = self.path_of(&hash);
        let shard = self.shard_of(&path)?;
        match self.read_verified(&hash, &path) {
            Ok(_) => {
                // Another writer may have renamed it into place and not yet synced the folder;
                // syncing here too means that whoever returns first, the name is durable.
                sync_dir(shard)?;
                return Ok(hash);
            }
            Err(
                BlobError::NotFound(_) | BlobError::Damaged { .. } | BlobError::TooLarge { .. },
            ) => {}
            Err(other) => return Err(other),
        }
        create_dir_durably(shard)?;
        let temp = self.temp_dir.join(format!(
            "{}.{}.{}",
            hash.to_hex(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = write_synced(&temp, bytes).and_then(|()| {
            fs::rename(&temp, &path).map_err(io_at(&path))?;
            sync_dir(shard)
        });
        if written.is_err() {
            // Best effort: the temporary file is garbage either way and is swept at open.
            let _ = fs::remove_file(&temp);
        }
        written.map(|()| hash)
    }

    /// The bytes of the blob `hash`, checked against the hash.
    pub fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        self.read_verified(hash, &self.path_of(hash))
    }

    /// Whether a blob named `hash` exists. The bytes are not checked; [`BlobStore::get`] does.
    pub fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError> {
        let path = self.path_of(hash);
        match fs::metadata(&path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(BlobError::Io { path, source: e }),
        }
    }

    fn shard_of<'p>(&self, path: &'p Path) -> Result<&'p Path, BlobError> {
        path.parent().ok_or_else(|| BlobError::Io {
            path: path.to_path_buf(),
            source: io::Error::other("a blob path has no folder"),
        })
    }

    fn read_verified(&self, hash: &ContentHash, path: &Path) -> Result<Vec<u8>, BlobError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(BlobError::NotFound(*hash));
            }
            Err(e) => return Err(io_at(path)(e)),
        };
        let limit = self.options.content_bytes_max;
        let mut bytes = Vec::new();
        // One byte past the limit tells an oversized file from one exactly at the limit without
        // reading an arbitrarily large file into memory.
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(io_at(path))?;
        if bytes.len() as u64 > limit {
            let size = fs::metadata(path).map_err(io_at(path))?.len();
            return Err(BlobError::TooLarge { bytes: size, limit });
        }
        let actual = content_hash(&bytes);
        if actual != *hash {
            return Err(BlobError::Damaged {
                expected: *hash,
                actual,
            });
        }
        Ok(bytes)
    }

    fn remove_stale_temp_files(&self) -> Result<(), BlobError> {
        let max_age = Duration::from_secs(self.options.stale_temp_secs_max);
        let now = SystemTime::now();
        let entries = fs::read_dir(&self.temp_dir).map_err(io_at(&self.temp_dir))?;
        for entry in entries {
            let entry = entry.map_err(io_at(&self.temp_dir))?;
            let modified = entry.metadata().and_then(|m| m.modified());
            let stale = match modified {
                Ok(at) => now.duration_since(at).is_ok_and(|age| age > max_age),
                Err(_) => false,
            };
            if stale {
                let path = entry.path();
                fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        Ok(())
    }
}

/// Writes `bytes` to a new file at `path` and syncs its data and size to stable storage.
fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), BlobError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_at(path))?;
    file.write_all(bytes).map_err(io_at(path))?;
    file.sync_all().map_err(io_at(path))
}

/// Creates `dir` (and its parents) when absent and makes the new name durable by syncing the
/// folder that holds it.
fn create_dir_durably(dir: &Path) -> Result<(), BlobError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(io_at(dir))?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Syncs a folder, so that names created in or renamed into it survive a power loss.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// The standard library cannot open a folder for syncing here; on such platforms a new name is
/// durable once the file system's journal is flushed, which this store cannot force.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), BlobError> {
    Ok(())
}
