//! The full texts evidence cites: attached to the write whose events cite them, so the ledger
//! makes them durable with those events by the same sync, and read back through the ledger —
//! or, for texts written before the ledger kept them, from the content store of earlier
//! versions (the data directory's `blobs/`; on PostgreSQL the ledger reads the very table that
//! store used).

use research::{Event, Hash32};

use crate::error::ServiceError;
use crate::service::Service;

/// The full texts a command offers to its write. Only those the decided events cite go into
/// the append: a text offered for a hit that becomes no new item (a preview, an item the task
/// holds already) is not stored again.
#[derive(Debug, Clone, Default)]
pub struct Attachments {
    limit: u64,
    texts: Vec<(Hash32, Vec<u8>)>,
}

impl Attachments {
    /// No text yet; each may be at most `limit` bytes (`content_bytes_max`).
    pub(crate) fn new(limit: u64) -> Attachments {
        Attachments {
            limit,
            texts: Vec::new(),
        }
    }

    /// Offers `bytes` as a full text the command may cite; answers its content hash, or refuses
    /// a text longer than `content_bytes_max`.
    pub fn attach(&mut self, bytes: Vec<u8>) -> Result<Hash32, ServiceError> {
        let size = bytes.len() as u64;
        if size > self.limit {
            return Err(ServiceError::LimitExceeded {
                limit: "content_bytes_max".into(),
                max: self.limit,
                actual: size,
            });
        }
        let hash = sources::content_hash(&bytes);
        if !self.texts.iter().any(|(h, _)| *h == hash) {
            self.texts.push((hash, bytes));
        }
        Ok(hash)
    }

    /// Offers every text `other` holds.
    pub(crate) fn attach_all(&mut self, other: &Attachments) {
        for (hash, bytes) in &other.texts {
            if !self.texts.iter().any(|(h, _)| h == hash) {
                self.texts.push((*hash, bytes.clone()));
            }
        }
    }

    /// Forgets what was offered, before a command is built again.
    pub(crate) fn clear(&mut self) {
        self.texts.clear();
    }

    /// The texts `decided` cites, each once: what the append carries.
    pub(crate) fn cited_by(&mut self, decided: &[research::NewEvent]) -> Vec<Vec<u8>> {
        let cited: Vec<Hash32> = decided.iter().filter_map(|e| cited(&e.event)).collect();
        std::mem::take(&mut self.texts)
            .into_iter()
            .filter(|(hash, _)| cited.contains(hash))
            .map(|(_, bytes)| bytes)
            .collect()
    }
}

/// The content a research event cites, if any: the full text behind an evidence item.
pub(crate) fn cited(event: &Event) -> Option<Hash32> {
    match event {
        Event::EvidenceAdded(e) => Some(e.content_hash),
        _ => None,
    }
}

/// Why a full text could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContentError {
    /// Neither the ledger nor the content store of earlier versions holds it.
    #[error("no content {0}")]
    NotFound(Hash32),
    /// Its stored bytes do not hash to its name: damaged, or overwritten on purpose (a
    /// redaction). They are never returned.
    #[error("content {hash} is damaged or redacted: its stored bytes hash to {actual}")]
    Damaged {
        /// The content's name.
        hash: Hash32,
        /// The hash of the bytes found.
        actual: Hash32,
    },
    /// Storage could not be read.
    #[error("content {hash} could not be read: {detail}")]
    Unavailable {
        /// The content's name.
        hash: Hash32,
        /// What failed.
        detail: String,
    },
}

impl From<ContentError> for ServiceError {
    fn from(e: ContentError) -> Self {
        ServiceError::unavailable(e)
    }
}

impl Service {
    /// The full text named `hash`, checked against it: from the ledger, or, for a text written
    /// before the ledger kept content, from the content store of earlier versions. A text the
    /// ledger holds damaged (or redacted) is reported so, never looked for elsewhere.
    pub fn content(&self, hash: &Hash32) -> Result<Vec<u8>, ContentError> {
        let unavailable = |detail: String| ContentError::Unavailable {
            hash: *hash,
            detail,
        };
        match self.ledger().blob(&ledger::Digest(hash.0)) {
            Ok(Some(bytes)) => return Ok(bytes),
            Ok(None) => {}
            Err(ledger::ReadError::ContentDamaged { actual, .. }) => {
                return Err(ContentError::Damaged {
                    hash: *hash,
                    actual: Hash32(actual.0),
                });
            }
            Err(e) => return Err(unavailable(e.to_string())),
        }
        let Some(earlier) = &self.inner.earlier_content else {
            return Err(ContentError::NotFound(*hash));
        };
        earlier.get(hash).map_err(|e| match e {
            sources::BlobError::NotFound(_) => ContentError::NotFound(*hash),
            sources::BlobError::Damaged { actual, .. } => ContentError::Damaged {
                hash: *hash,
                actual,
            },
            other => unavailable(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_texts_the_decided_events_cite_go_with_the_append() {
        let mut attached = Attachments::new(10);
        let a = attached.attach(b"cited".to_vec()).unwrap();
        attached.attach(b"not cited".to_vec()).unwrap();
        assert_eq!(attached.attach(b"cited".to_vec()).unwrap(), a);
        assert!(matches!(
            attached.attach(vec![0; 11]),
            Err(ServiceError::LimitExceeded { .. })
        ));
        assert_eq!(attached.texts.len(), 2);
        assert_eq!(attached.cited_by(&[]), Vec::<Vec<u8>>::new());
    }
}
