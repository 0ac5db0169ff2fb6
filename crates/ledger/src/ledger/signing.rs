//! What the writer signs: the key it adopts at open (introduced, or a rotation a crash
//! interrupted, finished), checkpoints, and key rotations.

use std::sync::Arc;

use ledger_proof::{
    Checkpoint, Cosignature, KeyRotation, PublicKey, Sha256, SigningKey, Timestamp,
};

use super::Writer;
use crate::error::SigningError;
use crate::key_history::KeyHistory;
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
        *self.core.origin.write().unwrap_or_else(|p| p.into_inner()) = self.origin.clone();
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
        let history = KeyHistory::of(&entries);
        self.last_signed = history.last_signed;
        if let Some(origin) = history.origin() {
            if let Some(configured) = &self.configured_origin
                && configured != origin
            {
                tracing::warn!(
                    %configured, recorded = %origin,
                    "the log's origin is the one its first key was introduced with; the configured origin is not used"
                );
            }
            self.origin = origin.to_owned();
        }
        let staged = match &self.files {
            Some(files) => files.staged().map_err(|e| e.to_string())?,
            None => None,
        };
        match history.current() {
            None if self.core.storage.is_read_only() => Err(
                "the checkpoint log names no signing key, and the ledger may not write one".into(),
            ),
            None if self.shared => {
                // Nodes starting together on a new database: the key one of them introduced
                // first is the log's, and a node given another key finds out here.
                let copy = SigningKey::from_secret_bytes(&key.to_secret_bytes());
                self.introduce_first_key(key)?;
                self.adopt_key(copy)
            }
            None => self.introduce_first_key(key),
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

    /// Records the ledger's first key, with the log's origin: the configured one, or one made
    /// from the key's fingerprint.
    fn introduce_first_key(&mut self, key: SigningKey) -> Result<SigningKey, String> {
        let time = self.signing_time()?;
        self.origin = match &self.configured_origin {
            Some(origin) => origin.clone(),
            None => default_origin(&key.public_key()),
        };
        ledger_proof::note::check_key_name(&self.origin).map_err(|e| e.to_string())?;
        let entry = CheckpointEntry::KeyIntroduced {
            public_key: key.public_key(),
            tree_size: self.frontier.size(),
            time,
            reason: "the ledger's first signing key".into(),
            origin: self.origin.clone(),
        };
        let storage = &self.core.storage;
        // On a shared store another ledger may have introduced its key first: the caller
        // adopts whichever the log names.
        let introduced = if self.shared {
            storage.append_first_key(&entry)
        } else {
            storage.append_checkpoint_entry(&entry).map(|()| true)
        }
        .map_err(|e| e.to_string())?;
        if introduced {
            self.last_signed = Some((self.frontier.size(), time));
        }
        Ok(key)
    }

    /// Keeps a witness's cosignature, once it verifies and cosigns a checkpoint of the log
    /// that no cosignature of the same witness already covers.
    pub(super) fn keep_cosignature(
        &mut self,
        cosignature: Cosignature,
    ) -> Result<(), SigningError> {
        if let Some(reason) = self.core.poisoned() {
            return Err(SigningError::Poisoned(reason));
        }
        cosignature
            .verify()
            .map_err(|e| SigningError::Cosignature(e.to_string()))?;
        let entries = self
            .core
            .storage
            .checkpoint_entries()
            .map_err(|e| SigningError::Storage(Arc::new(e)))?;
        let body = cosignature.body();
        if !entries
            .iter()
            .any(|e| matches!(e, CheckpointEntry::Checkpoint(c) if c.body() == body))
        {
            return Err(SigningError::Cosignature(format!(
                "it cosigns a checkpoint of size {} the log does not hold",
                cosignature.tree_size
            )));
        }
        if entries.iter().any(|e| {
            matches!(e, CheckpointEntry::Cosignature(c)
                if c.witness == cosignature.witness && c.body() == body)
        }) {
            return Ok(());
        }
        self.core
            .storage
            .append_checkpoint_entry(&CheckpointEntry::Cosignature(cosignature))
            .map_err(|e| SigningError::Storage(Arc::new(e)))
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
        let checkpoint =
            Checkpoint::sign(key, &self.origin, size, self.frontier.root(&Sha256), time)
                .map_err(|e| SigningError::NoKey(e.to_string()))?;
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
                // The latest checkpoint is then the new key's, so `GET /checkpoint` and the
                // witnesses, who trust keys, see the key that signs from now on.
                if let Err(e) = self.write_checkpoint() {
                    tracing::warn!(error = %e, "no checkpoint of the new key after the rotation");
                }
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
            &self.origin,
            new.public_key(),
            self.frontier.size(),
            self.frontier.root(&Sha256),
            time,
        )
        .map_err(|e| SigningError::NoKey(e.to_string()))?;
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

/// The origin of a log whose operator configured none: `research-ledger/` and the fingerprint of
/// its first key, a name no other ledger has.
pub(crate) fn default_origin(first_key: &PublicKey) -> String {
    format!("research-ledger/{}", first_key.fingerprint())
}
