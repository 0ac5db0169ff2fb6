//! The signed manifest of an export bundle.
//!
//! A bundle carries events with proofs that each is in a signed tree; what those proofs cannot
//! show is that the bundle holds *all* the events it should. The manifest lists exactly which
//! events (seq and hash), which task heads (task, version, hash of its last event) and which
//! content blobs the bundle holds, with the checkpoint its proofs stand on, and is signed by the
//! ledger's key. Removing, adding, duplicating or reordering anything, even for one task, then
//! disagrees with a signed list.
//!
//! The signature, by the key that signs when the bundle is made (the last key of the chain of
//! keys), covers this text, one item a line, every line ending in `\n`:
//!
//! ```text
//! research-ledger bundle manifest v1
//! scope {scope}
//! created_at {YYYY-MM-DDTHH:MM:SSZ}
//! checkpoint {tree_size} {root hex}
//! event {seq} {hash}                      (one per event, in bundle order)
//! task {task} {version} {hash}            (one per task head, in bundle order)
//! content {hash}                          (one per content blob, in bundle order)
//! idempotency {blake3 of key} {fingerprint} {stream} {first seq} {event count} {stream version}
//! log {entry}                             (one per checkpoint-log entry, in order)
//! ```
//!
//! Idempotency keys are client text, so the manifest names each by its hash. A `log` line says
//! what a checkpoint-log entry is in words that cover every field of it the entry's own
//! signature does not (the ledger writes them; `docs/bundle-format.md` gives each form).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::keys::{Fingerprint, PublicKey, Signature, SigningKey};
use crate::{Digest, Timestamp};

/// What a bundle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// `all`, or `tasks:` and the task ids, comma-separated.
    pub scope: String,
    /// When the bundle was made.
    pub created_at: Timestamp,
    /// Size of the checkpoint the bundle's proofs stand on.
    pub tree_size: u64,
    /// Its root.
    pub root: Digest,
    /// Every event, as `[seq, hash]`, in bundle order.
    pub events: Vec<(u64, Digest)>,
    /// Every task head, as `[task, version, hash of its last event]`.
    pub tasks: Vec<(String, u64, Digest)>,
    /// Every content blob's hash.
    pub content: Vec<Digest>,
    /// Every idempotency key the bundle carries.
    pub idempotency: Vec<IdempotencyLine>,
    /// One line for each entry of the bundle's checkpoint log, in order.
    pub checkpoint_log: Vec<String>,
}

/// A manifest's line for one idempotency key: `[blake3 of the key, command fingerprint,
/// stream, first seq, event count, stream version]`.
pub type IdempotencyLine = (Digest, Digest, String, u64, u32, u64);

/// A manifest with the signature of the key that made the bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedManifest {
    /// What the bundle holds.
    #[serde(flatten)]
    pub manifest: Manifest,
    /// The signing key's fingerprint.
    pub key_fingerprint: Fingerprint,
    /// Ed25519 signature over [`Manifest::signed_text`].
    pub signature: Signature,
}

/// Why a manifest does not verify.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// A task id or the scope contains whitespace or control characters, so its line in the
    /// signed text would be ambiguous.
    #[error("{0:?} cannot appear in a manifest")]
    Unwritable(String),
    /// The manifest names another key than the one it is checked with.
    #[error("the manifest names key {named}, not {key}")]
    WrongKey {
        /// The fingerprint in the manifest.
        named: Fingerprint,
        /// The key it was checked with.
        key: Fingerprint,
    },
    /// The signature does not cover this manifest: something in it was changed.
    #[error("the manifest's signature does not match its contents")]
    BadSignature,
}

fn writable(text: &str) -> Result<&str, ManifestError> {
    if text.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ManifestError::Unwritable(text.chars().take(64).collect()));
    }
    Ok(text)
}

impl Manifest {
    /// The exact text the signature covers.
    pub fn signed_text(&self) -> Result<String, ManifestError> {
        let mut text = String::from("research-ledger bundle manifest v1\n");
        text.push_str(&format!("scope {}\n", writable(&self.scope)?));
        text.push_str(&format!("created_at {}\n", self.created_at));
        text.push_str(&format!("checkpoint {} {}\n", self.tree_size, self.root));
        for (seq, hash) in &self.events {
            text.push_str(&format!("event {seq} {hash}\n"));
        }
        for (task, version, hash) in &self.tasks {
            text.push_str(&format!("task {} {version} {hash}\n", writable(task)?));
        }
        for hash in &self.content {
            text.push_str(&format!("content {hash}\n"));
        }
        for (key, fingerprint, stream, first_seq, count, version) in &self.idempotency {
            text.push_str(&format!(
                "idempotency {key} {fingerprint} {} {first_seq} {count} {version}\n",
                writable(stream)?
            ));
        }
        for line in &self.checkpoint_log {
            if line.is_empty() || line.chars().any(|c| c.is_control()) {
                return Err(ManifestError::Unwritable(line.chars().take(64).collect()));
            }
            text.push_str(&format!("log {line}\n"));
        }
        Ok(text)
    }

    /// Signs the manifest.
    pub fn sign(self, key: &SigningKey) -> Result<SignedManifest, ManifestError> {
        let signature = key.sign(self.signed_text()?.as_bytes());
        Ok(SignedManifest {
            manifest: self,
            key_fingerprint: key.fingerprint(),
            signature,
        })
    }
}

impl SignedManifest {
    /// Checks the signature under `key`.
    pub fn verify(&self, key: &PublicKey) -> Result<(), ManifestError> {
        if self.key_fingerprint != key.fingerprint() {
            return Err(ManifestError::WrongKey {
                named: self.key_fingerprint,
                key: key.fingerprint(),
            });
        }
        let text = self.manifest.signed_text()?;
        key.verify(text.as_bytes(), &self.signature)
            .map_err(|_| ManifestError::BadSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest {
            scope: "tasks:t1".into(),
            created_at: Timestamp::from_unix_seconds(1_760_000_000).expect("time"),
            tree_size: 3,
            root: Digest([1; 32]),
            events: vec![(0, Digest([2; 32])), (2, Digest([3; 32]))],
            tasks: vec![("t1".into(), 2, Digest([3; 32]))],
            content: vec![Digest([4; 32])],
            idempotency: vec![(Digest([5; 32]), Digest([6; 32]), "t1".into(), 0, 1, 1)],
            checkpoint_log: vec!["checkpoint 3 00".into()],
        }
    }

    #[test]
    fn a_signed_manifest_verifies_and_every_change_is_caught() {
        let key = SigningKey::from_secret_bytes(&[7; 32]);
        let signed = manifest().sign(&key).expect("signs");
        signed.verify(&key.public_key()).expect("verifies");
        let text = serde_json::to_string(&signed).expect("json");
        let back: SignedManifest = serde_json::from_str(&text).expect("parses");
        back.verify(&key.public_key())
            .expect("verifies after a round trip");

        let changes: [fn(&mut Manifest); 11] = [
            |m| m.scope = "all".into(),
            |m| m.tree_size = 4,
            |m| {
                m.events.pop();
            },
            |m| m.events.swap(0, 1),
            |m| m.events.push((2, Digest([3; 32]))),
            |m| m.tasks[0].1 = 1,
            |m| m.content.clear(),
            |m| m.idempotency[0].3 = 2,
            |m| m.idempotency[0].5 = 2,
            |m| m.idempotency[0].2 = "t2".into(),
            |m| m.checkpoint_log[0] = "checkpoint 3 01".into(),
        ];
        for change in changes {
            let mut doctored = signed.clone();
            change(&mut doctored.manifest);
            assert_eq!(
                doctored.verify(&key.public_key()),
                Err(ManifestError::BadSignature)
            );
        }
        let other = SigningKey::from_secret_bytes(&[8; 32]);
        assert!(matches!(
            signed.verify(&other.public_key()),
            Err(ManifestError::WrongKey { .. })
        ));
    }

    #[test]
    fn ambiguous_task_ids_are_refused() {
        let key = SigningKey::from_secret_bytes(&[7; 32]);
        let mut m = manifest();
        m.tasks[0].0 = "t1 2".into();
        assert!(matches!(m.sign(&key), Err(ManifestError::Unwritable(_))));
    }
}
