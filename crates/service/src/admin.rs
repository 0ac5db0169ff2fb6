//! What only an admin may ask of a running service besides tools and tokens: a signed
//! checkpoint now, and documents for the embedded corpus.

use ledger::ledger_proof::Checkpoint;
use sources::{AddReport, Document};

use crate::error::ServiceError;
use crate::service::{Caller, Service};
use crate::tokens::Role;

impl Service {
    /// Writes a signed checkpoint of the ledger as it stands (admin only).
    pub fn checkpoint(&self, caller: &Caller) -> Result<Checkpoint, ServiceError> {
        caller.require(Role::Admin, "writing a checkpoint")?;
        self.ledger()
            .checkpoint()
            .map_err(ServiceError::unavailable)
    }

    /// Adds documents a client read and checked to the embedded corpus (admin only), at most
    /// `add_documents_max` in one call. Each is checked again here, against this service's
    /// limits ([`sources::Corpus::add_documents`]); the report names the ones rejected by
    /// their position in `documents`.
    pub fn ingest_documents(
        &self,
        caller: &Caller,
        documents: &[Document],
    ) -> Result<AddReport, ServiceError> {
        caller.require(Role::Admin, "ingesting documents")?;
        let max = self.corpus().limits().add_documents_max;
        if documents.len() as u64 > max {
            return Err(ServiceError::LimitExceeded {
                limit: "add_documents_max".into(),
                max,
                actual: documents.len() as u64,
            });
        }
        match &self.inner.shared_corpus {
            Some(shared) => shared
                .add_documents(&self.inner.corpus, documents)
                .map_err(ServiceError::unavailable),
            None => self
                .corpus()
                .add_documents(documents)
                .map_err(ServiceError::unavailable),
        }
    }
}
