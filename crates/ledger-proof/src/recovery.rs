//! Signed recovery statements: what was done to the log when it was found shorter or damaged.
//!
//! A ledger never changes its record silently. When recovery cuts the bytes of a torn write,
//! or an operator accepts that events are gone, the ledger's key signs a statement saying so,
//! and the statement is kept in the checkpoint log beside the checkpoints, visible to every
//! later verification. The signature covers exactly the text
//!
//! ```text
//! research-ledger recovery v1\n{action}\n{tree_size}\n{root_hex}\n{time}\n{claimed_size}\n{disowned}\n{detail}\n{reason}\n
//! ```
//!
//! where `action` is `torn_write_cut` or `loss_accepted`, `tree_size` and `root` are the log
//! kept (so a statement is also a checkpoint of it), `claimed_size` the largest size any
//! durable record claimed the log had, `disowned` the checkpoint-log entry numbers (1-based,
//! comma-separated, empty for none) the statement declares void, and `detail` and `reason` are
//! single lines of text: what was found and done, and why the operator accepted it.
//!
//! A `loss_accepted` statement at tree size N says that the log is now its first N events:
//! entries before it that sign a larger tree describe history that was given up, and are no
//! longer compared with the log; entries it disowns are not checked at all.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::keys::{BadSignature, Fingerprint, PublicKey, Signature, SigningKey};
use crate::{Digest, Timestamp};

/// What a recovery statement records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// The bytes of a torn write, which no durable record shows acknowledged, were cut from
    /// the end of the log and kept aside.
    TornWriteCut,
    /// An operator accepted that the log holds less than a durable record says it held (or is
    /// damaged past its first N events), and the ledger goes on from the first N.
    LossAccepted,
}

impl RecoveryAction {
    /// The word used for the action in the signed text and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryAction::TornWriteCut => "torn_write_cut",
            RecoveryAction::LossAccepted => "loss_accepted",
        }
    }
}

/// What a statement says, before it is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryFacts {
    /// What was done.
    pub action: RecoveryAction,
    /// Size of the log kept.
    pub tree_size: u64,
    /// Root of the log kept.
    pub root: Digest,
    /// When.
    pub time: Timestamp,
    /// The largest size a durable record claimed the log had (at least `tree_size`).
    pub claimed_size: u64,
    /// Entries of the checkpoint log (1-based) this statement declares void.
    pub disowned_entries: Vec<u64>,
    /// What was found and done: one line.
    pub detail: String,
    /// Why the operator accepted it: one line; empty for a cut made by recovery itself.
    pub reason: String,
}

/// A signed recovery statement.
///
/// JSON: `{"action": "loss_accepted", "tree_size": 835, "root": "<64 hex>", "time":
/// "2026-12-01T10:00:00Z", "claimed_size": 836, "disowned_entries": [], "detail": "…",
/// "reason": "…", "key_fingerprint": "<16 hex>", "signature": "<128 hex>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryStatement {
    /// What was done.
    pub action: RecoveryAction,
    /// Size of the log kept.
    pub tree_size: u64,
    /// Root of the log kept.
    pub root: Digest,
    /// When.
    pub time: Timestamp,
    /// The largest size a durable record claimed the log had.
    pub claimed_size: u64,
    /// Entries of the checkpoint log (1-based) this statement declares void.
    pub disowned_entries: Vec<u64>,
    /// What was found and done.
    pub detail: String,
    /// Why the operator accepted it.
    pub reason: String,
    /// Fingerprint of the key that signed it.
    pub key_fingerprint: Fingerprint,
    /// Ed25519 signature over [`RecoveryStatement::signed_text`].
    pub signature: Signature,
}

/// Why a recovery statement could not be made or was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// A text field holds a line break, which would make the signed text ambiguous.
    #[error("the statement's {field} must be one line")]
    NotOneLine {
        /// Which field.
        field: &'static str,
    },
    /// The statement claims less than it keeps.
    #[error("a statement that keeps {tree_size} events cannot claim the log held {claimed_size}")]
    ClaimBelowKept {
        /// The size kept.
        tree_size: u64,
        /// The size claimed.
        claimed_size: u64,
    },
    /// The statement names another key than the one it is checked with.
    #[error("the statement names key {named}, but is checked with key {key}")]
    WrongKey {
        /// Fingerprint the statement names.
        named: Fingerprint,
        /// Fingerprint of the key it was checked with.
        key: Fingerprint,
    },
    /// The signature does not cover the statement as it stands.
    #[error("the signature of the recovery statement at tree size {tree_size} does not verify")]
    BadSignature {
        /// The tree size the statement states.
        tree_size: u64,
    },
}

impl RecoveryFacts {
    fn check(&self) -> Result<(), RecoveryError> {
        for (field, text) in [("detail", &self.detail), ("reason", &self.reason)] {
            if text.contains(['\n', '\r']) {
                return Err(RecoveryError::NotOneLine { field });
            }
        }
        if self.claimed_size < self.tree_size {
            return Err(RecoveryError::ClaimBelowKept {
                tree_size: self.tree_size,
                claimed_size: self.claimed_size,
            });
        }
        Ok(())
    }

    /// The exact text a statement's signature covers.
    pub fn signed_text(&self) -> String {
        let disowned: Vec<String> = self.disowned_entries.iter().map(u64::to_string).collect();
        format!(
            "research-ledger recovery v1\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
            self.action.as_str(),
            self.tree_size,
            self.root,
            self.time,
            self.claimed_size,
            disowned.join(","),
            self.detail,
            self.reason
        )
    }

    /// Signs the statement.
    pub fn sign(self, key: &SigningKey) -> Result<RecoveryStatement, RecoveryError> {
        self.check()?;
        let signature = key.sign(self.signed_text().as_bytes());
        Ok(RecoveryStatement {
            action: self.action,
            tree_size: self.tree_size,
            root: self.root,
            time: self.time,
            claimed_size: self.claimed_size,
            disowned_entries: self.disowned_entries,
            detail: self.detail,
            reason: self.reason,
            key_fingerprint: key.fingerprint(),
            signature,
        })
    }
}

impl RecoveryStatement {
    /// What the statement says, without its signature.
    pub fn facts(&self) -> RecoveryFacts {
        RecoveryFacts {
            action: self.action,
            tree_size: self.tree_size,
            root: self.root,
            time: self.time,
            claimed_size: self.claimed_size,
            disowned_entries: self.disowned_entries.clone(),
            detail: self.detail.clone(),
            reason: self.reason.clone(),
        }
    }

    /// Checks that `key` signed the statement as it stands.
    pub fn verify(&self, key: &PublicKey) -> Result<(), RecoveryError> {
        if self.key_fingerprint != key.fingerprint() {
            return Err(RecoveryError::WrongKey {
                named: self.key_fingerprint,
                key: key.fingerprint(),
            });
        }
        let facts = self.facts();
        facts.check().map_err(|_| RecoveryError::BadSignature {
            tree_size: self.tree_size,
        })?;
        key.verify(facts.signed_text().as_bytes(), &self.signature)
            .map_err(|BadSignature| RecoveryError::BadSignature {
                tree_size: self.tree_size,
            })
    }

    /// One line for an operator or auditor: what was done, to which size, and why.
    pub fn summary(&self) -> String {
        let mut text = match self.action {
            RecoveryAction::TornWriteCut => format!(
                "at {} a torn write was cut at tree size {}: {}",
                self.time, self.tree_size, self.detail
            ),
            RecoveryAction::LossAccepted => format!(
                "at {} the loss of events from seq {} on was accepted (durable records claimed {}): {}",
                self.time, self.tree_size, self.claimed_size, self.detail
            ),
        };
        if !self.reason.is_empty() {
            text.push_str("; reason: ");
            text.push_str(&self.reason);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> RecoveryFacts {
        RecoveryFacts {
            action: RecoveryAction::LossAccepted,
            tree_size: 835,
            root: Digest([7; 32]),
            time: Timestamp::from_unix_seconds(1_780_000_000).unwrap(),
            claimed_size: 836,
            disowned_entries: vec![4, 9],
            detail: "the log ends at seq 835; the head record says 836".into(),
            reason: "restored from last night's backup".into(),
        }
    }

    #[test]
    fn the_signed_text_is_exactly_as_documented() {
        assert_eq!(
            facts().signed_text(),
            format!(
                "research-ledger recovery v1\nloss_accepted\n835\n{}\n2026-05-28T20:26:40Z\n836\n4,9\nthe log ends at seq 835; the head record says 836\nrestored from last night's backup\n",
                Digest([7; 32])
            )
        );
    }

    #[test]
    fn a_signed_statement_verifies_and_any_change_breaks_it() {
        let key = SigningKey::from_secret_bytes(&[3; 32]);
        let statement = facts().sign(&key).unwrap();
        statement.verify(&key.public_key()).unwrap();
        let json = serde_json::to_string(&statement).unwrap();
        let back: RecoveryStatement = serde_json::from_str(&json).unwrap();
        back.verify(&key.public_key()).unwrap();

        let mut changed = statement.clone();
        changed.claimed_size = 835;
        assert!(matches!(
            changed.verify(&key.public_key()),
            Err(RecoveryError::BadSignature { .. })
        ));
        let mut changed = statement.clone();
        changed.disowned_entries.clear();
        assert!(changed.verify(&key.public_key()).is_err());
        let mut changed = statement.clone();
        changed.reason.push('!');
        assert!(changed.verify(&key.public_key()).is_err());
        let other = SigningKey::from_secret_bytes(&[4; 32]);
        assert!(matches!(
            statement.verify(&other.public_key()),
            Err(RecoveryError::WrongKey { .. })
        ));
    }

    #[test]
    fn text_that_would_make_the_signed_text_ambiguous_is_refused() {
        let key = SigningKey::from_secret_bytes(&[3; 32]);
        let mut bad = facts();
        bad.reason = "two\nlines".into();
        assert_eq!(
            bad.sign(&key).unwrap_err(),
            RecoveryError::NotOneLine { field: "reason" }
        );
        let mut bad = facts();
        bad.claimed_size = 10;
        assert!(matches!(
            bad.sign(&key),
            Err(RecoveryError::ClaimBelowKept { .. })
        ));
    }
}
