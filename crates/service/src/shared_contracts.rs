//! The tools' contracts in the storage database: the shared document `contracts`
//! (`{"tools": {NAME: CONTRACT TEXT}, "tags": TEXT, "fallbacks": TEXT}` — the last two are
//! the texts a contracts directory keeps in `semantic-tags.yaml` and `fallbacks.yaml`),
//! changed under its row lock like the tokens, so a registration or a push through any node
//! lands and every node serves the same tools with the same tags and fallbacks. A node
//! compares the document's version on every refresh of its tools (each second in `serve`) and
//! reloads them when it moved.
//!
//! A node over the database reads no contracts directory. Files placed by hand in its
//! `DATA_DIR/contracts/` are refused at open unless the database holds exactly them already
//! (as after `migrate`): `contracts push DIR` stores a folder's contracts, dictionary and
//! fallback map for every node.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sources::contracts::StoredExtras;
use sources::contracts::registry::{FALLBACKS_FILE, TAGS_FILE, TOOLS_DIR};

use crate::shared::{SharedDocuments, SharedError};

/// The document's name in `shared_documents`.
pub(crate) const DOCUMENT: &str = "contracts";

/// The document's text.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContractsDocument {
    /// Each tool's contract as it was registered, by name.
    pub(crate) tools: BTreeMap<String, String>,
    /// The tag dictionary's text, as `semantic-tags.yaml` holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tags: Option<String>,
    /// The fallback map's text, as `fallbacks.yaml` holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fallbacks: Option<String>,
}

impl ContractsDocument {
    /// The dictionary and fallback map, as a registry takes them.
    pub(crate) fn extras(&self) -> StoredExtras {
        StoredExtras {
            tags: self.tags.clone(),
            fallbacks: self.fallbacks.clone(),
        }
    }
}

/// Why a change to the shared contracts failed.
#[derive(Debug, thiserror::Error)]
pub enum ContractsError {
    /// The database failed.
    #[error(transparent)]
    Shared(#[from] SharedError),
    /// The document does not read as contracts.
    #[error("the contracts document in the database is damaged: {0}")]
    Damaged(String),
    /// No tool of that name is registered.
    #[error("no registered tool {0}")]
    NotFound(String),
    /// What a push would store does not check: nothing was stored.
    #[error("nothing was stored: {0}")]
    Invalid(String),
    /// A contracts folder could not be read.
    #[error("{0}")]
    Folder(String),
}

/// Why `contracts push` stored nothing.
pub type PushError = ContractsError;

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

    /// The whole document, as the database holds it now.
    pub(crate) fn read(&self) -> Result<ContractsDocument, ContractsError> {
        let (version, body) = self.documents.read(DOCUMENT)?;
        let document = parse(body.as_deref())?;
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner) = version;
        Ok(document)
    }

    /// The document when it moved since this node last read it.
    pub(crate) fn changed(&self) -> Result<Option<ContractsDocument>, ContractsError> {
        let (version, _) = self.documents.read(DOCUMENT)?;
        if version == *self.seen.lock().unwrap_or_else(PoisonError::into_inner) {
            return Ok(None);
        }
        self.read().map(Some)
    }

    /// Changes the document under the row lock, then reads it back.
    pub(crate) fn change(
        &self,
        change: impl FnOnce(&mut ContractsDocument) -> Result<(), ContractsError>,
    ) -> Result<ContractsDocument, ContractsError> {
        self.documents.modify(DOCUMENT, |body| {
            let mut document = parse(body.as_deref())?;
            change(&mut document)?;
            serde_json::to_string(&document).map_err(|e| ContractsError::Damaged(e.to_string()))
        })??;
        self.read()
    }
}

/// What a contracts folder holds, as the document keeps it: its contracts (beside it and in
/// its `tools/` folder) by name, its dictionary and its fallback map. Hidden files are left
/// out, as the registry leaves them out.
pub(crate) fn read_folder(dir: &Path) -> Result<ContractsDocument, ContractsError> {
    let mut document = ContractsDocument::default();
    for folder in [dir.to_path_buf(), dir.join(TOOLS_DIR)] {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ContractsError::Folder(format!("{}: {e}", folder.display()))),
        };
        for entry in entries {
            let path = entry
                .map_err(|e| ContractsError::Folder(format!("{}: {e}", folder.display())))?
                .path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            if !path.is_file() || name.starts_with('.') {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|e| ContractsError::Folder(format!("{}: {e}", path.display())))?;
            if folder == dir && name == TAGS_FILE {
                document.tags = Some(text);
            } else if folder == dir && name == FALLBACKS_FILE {
                document.fallbacks = Some(text);
            } else {
                let contract = sources::contracts::Contract::parse(&text, Some(&path))
                    .map_err(|p| ContractsError::Folder(p.to_string()))?;
                document.tools.insert(contract.name, text);
            }
        }
    }
    Ok(document)
}

/// What of a node's own contracts folder the database does not hold as it is (each a line
/// for the operator); empty when the folder is missing or every file in it is the database's.
pub(crate) fn unshared_files(dir: &Path, stored: &ContractsDocument) -> Vec<String> {
    let found = match read_folder(dir) {
        Ok(found) => found,
        Err(e) => return vec![e.to_string()],
    };
    let mut out = Vec::new();
    for (name, text) in &found.tools {
        if stored.tools.get(name) != Some(text) {
            out.push(format!("the contract of {name}"));
        }
    }
    if found.tags.is_some() && found.tags != stored.tags {
        out.push(TAGS_FILE.to_owned());
    }
    if found.fallbacks.is_some() && found.fallbacks != stored.fallbacks {
        out.push(FALLBACKS_FILE.to_owned());
    }
    out
}
