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
use crate::storage::{CheckpointEntry, SignedAppend};

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
        let entries = self.checkpoint_log().map_err(|e| e.to_string())?;
        let history = KeyHistory::of(&entries);
        self.last_signed = history.last_signed;
        self.entries_seen = entries.len() as u64;
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
        let body = cosignature.body();
        // Most often of the latest checkpoint: then the view knows whether the witness
        // cosigned it already, without reading the whole log.
        let of_latest = self
            .core
            .checkpoint_view(|v| {
                v.latest().filter(|l| l.body() == body).map(|_| {
                    v.cosignatures()
                        .iter()
                        .any(|c| c.witness == cosignature.witness)
                })
            })
            .map_err(|e| SigningError::Storage(Arc::new(e)))?;
        let already = match of_latest {
            Some(already) => already,
            None => {
                let entries = self
                    .core
                    .storage
                    .checkpoint_entries()
                    .map_err(|e| SigningError::Storage(Arc::new(e)))?;
                if !entries
                    .iter()
                    .any(|e| matches!(e, CheckpointEntry::Checkpoint(c) if c.body() == body))
                {
                    return Err(SigningError::Cosignature(format!(
                        "it cosigns a checkpoint of size {} the log does not hold",
                        cosignature.tree_size
                    )));
                }
                entries.iter().any(|e| {
                    matches!(e, CheckpointEntry::Cosignature(c)
                        if c.witness == cosignature.witness && c.body() == body)
                })
            }
        };
        if already {
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

    /// Signs a checkpoint of the tree as it stands. On a shared store, a key another node
    /// retired is dropped, and the key the log names taken from this node's key folder when
    /// the operator put it there; otherwise nothing is signed ([`SigningError::KeyRetired`]).
    pub(super) fn write_checkpoint(&mut self) -> Result<Checkpoint, SigningError> {
        if self.shared
            && self.key.is_none()
            && self.core.poisoned().is_none()
            && !self.core.storage.is_read_only()
        {
            // Retired earlier: the operator may have put the new key in place since.
            self.take_key_from_disk()?;
        }
        match self.sign_checkpoint()? {
            Some(checkpoint) => Ok(checkpoint),
            None => {
                self.key_changed()?;
                self.sign_checkpoint()?.ok_or_else(|| {
                    SigningError::KeyRetired(
                        "the checkpoint log's key changed again while this node took the new one"
                            .into(),
                    )
                })
            }
        }
    }

    /// Signs and appends a checkpoint with the key held; `None` when the log's key changed
    /// since this writer last read it (nothing written).
    fn sign_checkpoint(&mut self) -> Result<Option<Checkpoint>, SigningError> {
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
        match self.core.storage.append_signed_entry(
            &CheckpointEntry::Checkpoint(checkpoint.clone()),
            self.entries_seen,
        ) {
            Ok(SignedAppend::Appended { entries }) => self.entries_seen = entries,
            Ok(SignedAppend::KeyChanged) => return Ok(None),
            Err(e) => {
                let e = Arc::new(e);
                self.core
                    .poison(format!("a checkpoint could not be written: {e}"));
                return Err(SigningError::Storage(e));
            }
        }
        self.last_signed = Some((size, time));
        Ok(Some(checkpoint))
    }

    /// Another node rotated the log's key: the key held is dropped at once (it is never used
    /// again), and the key the log names is taken from this node's key folder if it is there.
    pub(super) fn key_changed(&mut self) -> Result<(), SigningError> {
        if let Some(retired) = self.key.take() {
            tracing::warn!(
                retired = %retired.public_key().fingerprint(),
                "the checkpoint log names another signing key: this node's key is retired"
            );
        }
        self.take_key_from_disk()
    }

    /// Reads this node's key folder and adopts the key there if the checkpoint log names it;
    /// otherwise the node signs nothing, lets go of the checkpoint lead and says why.
    pub(super) fn take_key_from_disk(&mut self) -> Result<(), SigningError> {
        let on_disk = match &self.files {
            Some(files) => files.load().map_err(|e| e.to_string()),
            None => Err("this ledger has no key folder".into()),
        };
        self.tried_key = on_disk
            .as_ref()
            .ok()
            .and_then(|k| k.as_ref().map(|k| k.public_key()));
        let outcome = match on_disk {
            Ok(Some(key)) => self.adopt_key(key),
            Ok(None) => Err("there is no signing key in the data directory".into()),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(key) => {
                tracing::info!(
                    key = %key.public_key().fingerprint(),
                    "took the signing key the checkpoint log names from the key folder"
                );
                *self.core.signer.write().unwrap_or_else(|p| p.into_inner()) = Ok(key.public_key());
                self.key = Some(key);
                Ok(())
            }
            Err(reason) => {
                let reason = format!(
                    "{reason}; this node signs nothing until the key the log names is put in \
                     its key folder (DATA_DIR/ledger/keys/signing.key), where it is taken at \
                     the next checkpoint or checkpoint interval"
                );
                tracing::error!(%reason, "checkpoints cannot be signed");
                *self.core.signer.write().unwrap_or_else(|p| p.into_inner()) = Err(reason.clone());
                self.key = None;
                if self.shared {
                    self.leads = false;
                    self.core.storage.resign_checkpoint_lead();
                }
                Err(SigningError::KeyRetired(reason))
            }
        }
    }

    /// Shared stores, at each checkpoint interval: finds a rotation another node recorded
    /// (dropping the retired key), and takes a key the operator put in the key folder since
    /// the last look.
    pub(super) fn check_key(&mut self) {
        if self.core.poisoned().is_some() || self.core.storage.is_read_only() {
            return;
        }
        if self.key.is_none() {
            let on_disk = self
                .files
                .as_ref()
                .and_then(|files| files.load().ok().flatten())
                .map(|k| k.public_key());
            if on_disk.is_some() && on_disk != self.tried_key {
                let _ = self.take_key_from_disk();
            }
            return;
        }
        match self.core.storage.checkpoint_entries_from(self.entries_seen) {
            Ok(entries) => {
                if entries.iter().any(|e| {
                    matches!(
                        e,
                        CheckpointEntry::KeyIntroduced { .. } | CheckpointEntry::Rotation(_)
                    )
                }) {
                    let _ = self.key_changed();
                } else {
                    self.entries_seen += entries.len() as u64;
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not read the checkpoint log's keys"),
        }
    }

    pub(super) fn rotate(&mut self) -> Result<KeyRotation, SigningError> {
        if let Some(reason) = self.core.poisoned() {
            return Err(SigningError::Poisoned(reason));
        }
        let Some(old) = self.key.take() else {
            return Err(SigningError::NoKey("there is no key to rotate from".into()));
        };
        let result = self.rotate_from(&old);
        if let Err(SigningError::KeyRetired(_)) = &result {
            // Another node rotated first: the old key is retired, not put back.
            let _ = self.key_changed();
            return result.map(|(statement, _)| statement);
        }
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
        match self.core.storage.append_signed_entry(
            &CheckpointEntry::Rotation(statement.clone()),
            self.entries_seen,
        ) {
            Ok(SignedAppend::Appended { entries }) => self.entries_seen = entries,
            Ok(SignedAppend::KeyChanged) => {
                // Never recorded: the staged key goes.
                if let Some(files) = &self.files {
                    files
                        .discard_staged()
                        .map_err(|e| SigningError::Storage(Arc::new(e)))?;
                }
                return Err(SigningError::KeyRetired(
                    "another node rotated the key first; nothing was rotated here".into(),
                ));
            }
            Err(e) => {
                let e = Arc::new(e);
                self.core
                    .poison(format!("a key rotation could not be written: {e}"));
                return Err(SigningError::Storage(e));
            }
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
