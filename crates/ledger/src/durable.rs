//! The file-system steps that make a write durable, in one place for the crate: a directory
//! entry survives power loss only once its directory is synced, and a file's bytes only once
//! the file is.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use crate::storage::StorageError;

/// Creates a directory (and its parents) and makes its entry durable in its parent.
pub(crate) fn create_dir_durable(path: &Path) -> Result<(), StorageError> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        create_dir_durable(parent)?;
    }
    fs::create_dir(path)
        .or_else(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(|e| StorageError::io("create directory", path, e))?;
    if let Some(parent) = path.parent() {
        sync_dir(if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        })?;
    }
    Ok(())
}

/// `fsync` on a directory, so that entries created in it survive power loss.
pub(crate) fn sync_dir(path: &Path) -> Result<(), StorageError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io("sync directory", path, e))
}
