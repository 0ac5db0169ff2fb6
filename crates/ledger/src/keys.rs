//! The signing key on disk: created at first start, readable only by its owner, replaced
//! atomically on rotation.
//!
//! `keys/signing.key` holds the secret as 64 hex digits and a newline, mode 0600. A rotation
//! first writes the new key to `keys/signing.key.new`, then records the rotation statement in
//! the checkpoint log, then renames the new key over the old. A crash between the last two
//! steps leaves a statement naming a key that `signing.key.new` holds; the next open finishes
//! the rename. The old secret is not kept: nothing may sign with a retired key.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ledger_proof::SigningKey;

use crate::durable::sync_dir;
use crate::storage::StorageError;

const KEY_FILE: &str = "signing.key";
const NEW_KEY_FILE: &str = "signing.key.new";

/// Where the signing key lives.
#[derive(Debug, Clone)]
pub(crate) struct KeyFiles {
    dir: PathBuf,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StorageError + 'a {
    move |e| StorageError::io(op, path, e)
}

/// 32 bytes from the operating system's generator.
pub(crate) fn random_key() -> Result<SigningKey, StorageError> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)
        .map_err(|e| StorageError::Failed(format!("no randomness for a key: {e}")))?;
    Ok(SigningKey::from_secret_bytes(&secret))
}

impl KeyFiles {
    pub(crate) fn new(dir: PathBuf) -> Self {
        KeyFiles { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    fn new_path(&self) -> PathBuf {
        self.dir.join(NEW_KEY_FILE)
    }

    /// The current key, created (and made durable) if there is none.
    pub(crate) fn load_or_create(&self) -> Result<SigningKey, StorageError> {
        let path = self.path();
        match self.read(&path)? {
            Some(key) => Ok(key),
            None => {
                let key = random_key()?;
                self.write(&path, &key)?;
                Ok(key)
            }
        }
    }

    /// Keeps `key` as the current key of a ledger that has none yet.
    /// The key on disk, if there is one; creates nothing.
    pub(crate) fn load(&self) -> Result<Option<SigningKey>, StorageError> {
        self.read(&self.path())
    }

    pub(crate) fn write_new(&self, key: &SigningKey) -> Result<(), StorageError> {
        self.write(&self.path(), key)
    }

    /// The staged key of an unfinished rotation, if any.
    pub(crate) fn staged(&self) -> Result<Option<SigningKey>, StorageError> {
        self.read(&self.new_path())
    }

    /// Writes the next key beside the current one, durably, before the rotation is recorded.
    pub(crate) fn stage(&self, key: &SigningKey) -> Result<(), StorageError> {
        let path = self.new_path();
        if path.exists() {
            fs::remove_file(&path).map_err(io_err("remove", &path))?;
        }
        self.write(&path, key)
    }

    /// Makes the staged key the current one.
    pub(crate) fn commit_staged(&self) -> Result<(), StorageError> {
        let (from, to) = (self.new_path(), self.path());
        fs::rename(&from, &to).map_err(io_err("rename", &from))?;
        sync_dir(&self.dir)
    }

    /// Discards a staged key whose rotation was never recorded.
    pub(crate) fn discard_staged(&self) -> Result<(), StorageError> {
        let path = self.new_path();
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::io("remove", &path, e)),
        }
    }

    fn read(&self, path: &Path) -> Result<Option<SigningKey>, StorageError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StorageError::io("read key", path, e)),
        };
        let mode = fs::metadata(path)
            .map_err(io_err("stat key", path))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", mode & 0o777),
                "the signing key is readable by others; it should be 0600"
            );
        }
        let mut secret = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut secret).map_err(|_| StorageError::Corrupt {
            seq: None,
            detail: format!("{} is not a 64-digit hex key", path.display()),
        })?;
        Ok(Some(SigningKey::from_secret_bytes(&secret)))
    }

    fn write(&self, path: &Path, key: &SigningKey) -> Result<(), StorageError> {
        if !self.dir.is_dir() {
            fs::create_dir_all(&self.dir).map_err(io_err("create", &self.dir))?;
            fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))
                .map_err(io_err("chmod", &self.dir))?;
            if let Some(parent) = self.dir.parent() {
                sync_dir(parent)?;
            }
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err("create key", path))?;
        let text = format!("{}\n", hex::encode(key.to_secret_bytes()));
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io_err("write key", path))?;
        sync_dir(&self.dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = KeyFiles::new(dir.path().join("keys"));
        let first = files.load_or_create().expect("created");
        let again = files.load_or_create().expect("loaded");
        assert_eq!(first.public_key(), again.public_key());
        let mode = fs::metadata(dir.path().join("keys/signing.key"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_staged_key_replaces_the_current_one_on_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = KeyFiles::new(dir.path().join("keys"));
        let old = files.load_or_create().expect("created");
        let new = random_key().expect("key");
        files.stage(&new).expect("staged");
        assert_eq!(
            files.staged().expect("read").map(|k| k.public_key()),
            Some(new.public_key())
        );
        assert_eq!(
            files.load_or_create().expect("load").public_key(),
            old.public_key()
        );
        files.commit_staged().expect("commit");
        assert_eq!(
            files.load_or_create().expect("load").public_key(),
            new.public_key()
        );
        assert!(files.staged().expect("read").is_none());
    }
}
