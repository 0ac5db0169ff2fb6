//! What the writer signs: the key it adopts at open (introduced, or a rotation a crash
//! interrupted, finished), checkpoints, and key rotations.

use std::sync::Arc;

use ledger_proof::{Blake3, Checkpoint, KeyRotation, PublicKey, SigningKey, Timestamp};

use super::Writer;
use crate::error::SigningError;
use crate::keys::random_key;
use crate::storage::CheckpointEntry;

impl Writer {
    /// Makes sure `key` is the key the checkpoint log names as current (introducing it if the
    /// log is empty, finishing a rotation a crash interrupted), or records why not.
    pub(super) fn set_up_key(&mut self, key: Option<SigningKey>) {
        let Some(key) = key else {
            *self.core.signer.write().unwrap_or_else(|p| p.into_inner()) =
                Err("there is no signing key in the data directory".into());
            return;
        };
        self.unadopted = Some(SigningKey::from_secret_bytes(&key.to_secret_bytes()));
        let outcome = self.adopt_key(key);
        let mut signer = self.core.signer.write().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(key) => {
                *signer = Ok(key.public_key());
                self.key = Some(key);
            }
            Err(reason) => {
                tracing::error!(%reason, "checkpoints cannot be signed");
                *signer = Err(reason);
            }
        }
    }

    pub(super) fn adopt_key(&mut self, key: SigningKey) -> Result<SigningKey, String> {
        let entries = self
            .core
            .storage
            .checkpoint_entries()
            .map_err(|e| e.to_string())?;
        let mut current: Option<PublicKey> = None;
        for entry in &entries {
            match entry {
                CheckpointEntry::KeyIntroduced {
                    public_key,
                    tree_size,
                    time,
                    ..
                } => {
                    current = Some(*public_key);
                    self.last_signed = Some((*tree_size, *time));
                }
                CheckpointEntry::Checkpoint(c) => self.last_signed = Some((c.tree_size, c.time)),
                CheckpointEntry::Recovery(r) => self.last_signed = Some((r.tree_size, r.time)),
                CheckpointEntry::Rotation(r) => {
                    current = Some(r.new_public_key);
                    self.last_signed = Some((r.tree_size, r.time));
                }
            }
        }
        let staged = match &self.files {
            Some(files) => files.staged().map_err(|e| e.to_string())?,
            None => None,
        };
        match current {
            None if self.core.storage.is_read_only() => Err(
                "the checkpoint log names no signing key, and the ledger may not write one".into(),
            ),
            None => {
                let time = self.signing_time()?;
                let entry = CheckpointEntry::KeyIntroduced {
                    public_key: key.public_key(),
                    tree_size: self.frontier.size(),
                    time,
                    reason: "the ledger's first signing key".into(),
                };
                self.core
                    .storage
                    .append_checkpoint_entry(&entry)
                    .map_err(|e| e.to_string())?;
                self.last_signed = Some((self.frontier.size(), time));
                Ok(key)
            }
            Some(current) if current == key.public_key() => {
                // A key staged by a rotation that never happened; left alone by an open that
                // may not write.
                if let Some(files) = &self.files
                    && !self.core.storage.is_read_only()
                {
                    files.discard_staged().map_err(|e| e.to_string())?;
                }
                Ok(key)
            }
            Some(current) => match (staged, &self.files) {
                (Some(staged), Some(files)) if staged.public_key() == current => {
                    // A rotation was recorded but the crash came before the new key replaced
                    // the old: finish it.
                    files.commit_staged().map_err(|e| e.to_string())?;
                    Ok(staged)
                }
                _ => Err(format!(
                    "the signing key on disk ({}) is not the key the checkpoint log names ({})",
                    key.fingerprint(),
                    current.fingerprint()
                )),
            },
        }
    }

    /// The time for a checkpoint or rotation: now, to the second, never before the last one.
    pub(super) fn signing_time(&self) -> Result<Timestamp, String> {
        let now = Timestamp::from_datetime(self.clock.now()).map_err(|e| e.to_string())?;
        Ok(match self.last_signed {
            Some((_, last)) if last > now => last,
            _ => now,
        })
    }

    pub(super) fn write_checkpoint(&mut self) -> Result<Checkpoint, SigningError> {
        if let Some(reason) = self.core.poisoned() {
            return Err(SigningError::Poisoned(reason));
        }
        let key = self.key.as_ref().ok_or_else(|| {
            SigningError::NoKey(
                self.core
                    .signer
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
                    .err()
                    .unwrap_or_default(),
            )
        })?;
        let time = self.signing_time().map_err(SigningError::Time)?;
        let size = self.frontier.size();
        let checkpoint = Checkpoint::sign(key, size, self.frontier.root(&Blake3), time);
        if let Err(e) = self
            .core
            .storage
            .append_checkpoint_entry(&CheckpointEntry::Checkpoint(checkpoint.clone()))
        {
            let e = Arc::new(e);
            self.core
                .poison(format!("a checkpoint could not be written: {e}"));
            return Err(SigningError::Storage(e));
        }
        self.last_signed = Some((size, time));
        Ok(checkpoint)
    }

    pub(super) fn rotate(&mut self) -> Result<KeyRotation, SigningError> {
        if let Some(reason) = self.core.poisoned() {
            return Err(SigningError::Poisoned(reason));
        }
        let Some(old) = self.key.take() else {
            return Err(SigningError::NoKey("there is no key to rotate from".into()));
        };
        let result = self.rotate_from(&old);
        match result {
            Ok((statement, new)) => {
                *self.core.signer.write().unwrap_or_else(|p| p.into_inner()) = Ok(new.public_key());
                self.key = Some(new);
                self.last_signed = Some((statement.tree_size, statement.time));
                Ok(statement)
            }
            Err(e) => {
                self.key = Some(old);
                Err(e)
            }
        }
    }

    pub(super) fn rotate_from(
        &mut self,
        old: &SigningKey,
    ) -> Result<(KeyRotation, SigningKey), SigningError> {
        let new = random_key().map_err(|e| SigningError::Storage(Arc::new(e)))?;
        if let Some(files) = &self.files {
            files
                .stage(&new)
                .map_err(|e| SigningError::Storage(Arc::new(e)))?;
        }
        let time = self.signing_time().map_err(SigningError::Time)?;
        let statement = KeyRotation::sign(
            old,
            new.public_key(),
            self.frontier.size(),
            self.frontier.root(&Blake3),
            time,
        );
        if let Err(e) = self
            .core
            .storage
            .append_checkpoint_entry(&CheckpointEntry::Rotation(statement.clone()))
        {
            let e = Arc::new(e);
            self.core
                .poison(format!("a key rotation could not be written: {e}"));
            return Err(SigningError::Storage(e));
        }
        if let Some(files) = &self.files
            && let Err(e) = files.commit_staged()
        {
            // The statement is durable; the next open finishes the rename. Until then,
            // nothing signs.
            let e = Arc::new(e);
            self.core
                .poison(format!("the rotated key could not be put in place: {e}"));
            return Err(SigningError::Storage(e));
        }
        Ok((statement, new))
    }
}
