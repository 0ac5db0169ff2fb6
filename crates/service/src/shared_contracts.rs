//! The registered tools' contracts in the storage database: the shared document `contracts`
//! (`{"tools": {NAME: CONTRACT TEXT}}`), changed under its row lock like the tokens, so a
//! registration through any node lands and every node reads the same tools. A node compares
//! the document's version on every refresh of its tools (each second in `serve`) and reloads
//! them when it moved. The tag dictionary, the fallback map and contract files placed by hand
//! stay in each data directory, per node.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::shared::{SharedDocuments, SharedError};

/// The document's name in `shared_documents`.
pub(crate) const DOCUMENT: &str = "contracts";

/// The document's text.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContractsDocument {
    /// Each tool's contract as it was registered, by name.
    pub(crate) tools: BTreeMap<String, String>,
}

/// Why a change to the shared contracts failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ContractsError {
    /// The database failed.
    #[error(transparent)]
    Shared(#[from] SharedError),
    /// The document does not read as contracts.
    #[error("the contracts document in the database is damaged: {0}")]
    Damaged(String),
    /// No tool of that name is registered.
    #[error("no registered tool {0}")]
    NotFound(String),
}

fn parse(body: Option<&str>) -> Result<ContractsDocument, ContractsError> {
    match body {
        None => Ok(ContractsDocument::default()),
        Some(text) => {
            serde_json::from_str(text).map_err(|e| ContractsError::Damaged(e.to_string()))
        }
    }
}

/// The contracts of one database, and the version this node read last.
#[derive(Debug)]
pub(crate) struct SharedContracts {
    documents: SharedDocuments,
    seen: Mutex<u64>,
}

impl SharedContracts {
    pub(crate) fn open(url: &str) -> Result<SharedContracts, SharedError> {
        Ok(SharedContracts {
            documents: SharedDocuments::open(url)?,
            seen: Mutex::new(0),
        })
    }

    /// Every contract's text, by name, as the database holds them now.
    pub(crate) fn read(&self) -> Result<BTreeMap<String, String>, ContractsError> {
        let (version, body) = self.documents.read(DOCUMENT)?;
        let tools = parse(body.as_deref())?.tools;
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = version;
        Ok(tools)
    }

    /// The texts when the document moved since this node last read it.
    pub(crate) fn changed(&self) -> Result<Option<BTreeMap<String, String>>, ContractsError> {
        let (version, _) = self.documents.read(DOCUMENT)?;
        if version == *self.seen.lock().unwrap_or_else(PoisonError::into_inner) {
            return Ok(None);
        }
        self.read().map(Some)
    }

    /// Changes the tools under the row lock, then reads them back.
    pub(crate) fn change(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), ContractsError>,
    ) -> Result<BTreeMap<String, String>, ContractsError> {
        self.documents.modify(DOCUMENT, |body| {
            let mut document = parse(body.as_deref())?;
            change(&mut document.tools)?;
            serde_json::to_string(&document).map_err(|e| ContractsError::Damaged(e.to_string()))
        })??;
        self.read()
    }
}
