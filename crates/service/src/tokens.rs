//! Access tokens and roles.
//!
//! A token is 32 random bytes shown once, as `rl_` and 64 hex digits; only its blake3 hash is
//! kept, in `DATA_DIR/tokens.json` (mode 0600), so a copy of the file grants nothing. Each token
//! has a name — the actor of every event its holder causes — and a role. Roles include the ones
//! before them:
//!
//! | role | may |
//! |---|---|
//! | `auditor` | read: queries, resources, read-only tools, export, metrics |
//! | `writer` | also write: the research tools and mutations |
//! | `reviewer` | also decide conflicts: resolutions and appeals |
//! | `admin` | also administer: register tools, manage tokens, checkpoints, ingest |
//!
//! The server re-reads the file when it changes, so `research-ledger token add|revoke` take
//! effect on a running server without a restart.
//!
//! The file also records that tokens are required. The first token sets it, and revoking
//! every token does not clear it: a server whose last token was revoked serves no one, rather
//! than falling back to serving every caller on loopback as the local user. Only
//! [`TokenStore::open_mode`] (`research-ledger token open-mode`, run on the data directory)
//! clears it. A file from before the record counts as requiring tokens once it lists any.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// What a caller may do. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads.
    Auditor,
    /// Writes.
    Writer,
    /// Decides conflicts.
    Reviewer,
    /// Administers.
    Admin,
}

impl Role {
    /// The role's name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Auditor => "auditor",
            Role::Writer => "writer",
            Role::Reviewer => "reviewer",
            Role::Admin => "admin",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auditor" => Ok(Role::Auditor),
            "writer" => Ok(Role::Writer),
            "reviewer" => Ok(Role::Reviewer),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "{other:?} is not a role: auditor, writer, reviewer or admin"
            )),
        }
    }
}

/// One token as kept: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEntry {
    /// The holder's name: the actor of the events they cause.
    pub name: String,
    /// What they may do.
    pub role: Role,
    /// blake3 of the token, hex.
    pub hash: String,
    /// When it was made (RFC 3339).
    pub created_at: String,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<TokenEntry>,
    /// Whether callers need a token even with none in force; absent in files written before
    /// it was recorded, where it follows from whether any token was ever made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokens_required: Option<bool>,
}

impl TokenFile {
    fn tokens_required(&self) -> bool {
        self.tokens_required.unwrap_or(!self.tokens.is_empty())
    }
}

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The name is taken by a token that is not revoked.
    #[error("a token named {0} exists; revoke it first")]
    NameTaken(String),
    /// The name is not usable as an actor.
    #[error("{0:?} is not a token name: 1 to 64 letters, digits, '_', '-', '.' or '@'")]
    BadName(String),
    /// No token has this name.
    #[error("no token named {0}")]
    NotFound(String),
    /// Open mode was asked for while tokens are in force: revoke them first.
    #[error("tokens are in force ({0}); revoke every one before returning to open mode")]
    TokensInForce(String),
    /// The shared database could not be read or written.
    #[error("the tokens in the database: {0}")]
    Database(String),
    /// The file could not be read or written.
    #[error("{path}: {detail}")]
    File {
        /// The file.
        path: PathBuf,
        /// What happened.
        detail: String,
    },
}

/// The tokens: the token file of a data directory, or the document `tokens` in the shared
/// database (same contents, every node reading the same).
#[derive(Debug, Clone)]
pub struct TokenStore {
    path: PathBuf,
    shared: Option<Arc<crate::shared::SharedDocuments>>,
}

/// The shared document that holds the tokens.
const SHARED_NAME: &str = "tokens";

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'))
}

fn hash_of(token: &str) -> String {
    blake3::hash(token.as_bytes()).to_hex().to_string()
}

impl TokenStore {
    /// The store at `path` (usually `DATA_DIR/tokens.json`).
    pub fn new(path: PathBuf) -> Self {
        TokenStore { path, shared: None }
    }

    /// The tokens kept in the PostgreSQL database at `url`, shared by every node that opens it;
    /// `path` names them in messages.
    pub fn in_database(url: &str, path: PathBuf) -> Result<Self, TokenError> {
        let shared = crate::shared::SharedDocuments::open(url)
            .map_err(|e| TokenError::Database(e.to_string()))?;
        Ok(TokenStore {
            path,
            shared: Some(Arc::new(shared)),
        })
    }

    fn parse(&self, text: &str) -> Result<TokenFile, TokenError> {
        serde_json::from_str(text).map_err(|e| TokenError::File {
            path: self.path.clone(),
            detail: format!("not a token file: {e}"),
        })
    }

    /// Applies `change` to the tokens as one change: under the lock file beside the token file,
    /// or the locked row of the shared database.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut TokenFile) -> Result<T, TokenError>,
    ) -> Result<T, TokenError> {
        let Some(shared) = &self.shared else {
            let _locked = self.lock()?;
            let mut file = self.read()?;
            let value = change(&mut file)?;
            self.write(&file)?;
            return Ok(value);
        };
        let mut value = None;
        shared
            .modify(SHARED_NAME, |body: Option<String>| {
                let mut file = match body {
                    Some(text) => self.parse(&text)?,
                    None => TokenFile::default(),
                };
                value = Some(change(&mut file)?);
                serde_json::to_string_pretty(&file).map_err(|e| TokenError::Database(e.to_string()))
            })
            .map_err(|e| TokenError::Database(e.to_string()))??;
        value.ok_or_else(|| TokenError::Database("the change was not applied".into()))
    }

    /// What tells one read of the tokens from the next: the file's size and time, or the
    /// shared document's version.
    fn stamp(&self) -> Result<Option<(u64, std::time::SystemTime)>, TokenError> {
        Ok(match &self.shared {
            None => fs::metadata(&self.path)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?))),
            Some(shared) => {
                let (version, _) = shared
                    .read(SHARED_NAME)
                    .map_err(|e| TokenError::Database(e.to_string()))?;
                (version > 0).then_some((version, std::time::UNIX_EPOCH))
            }
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Result<TokenFile, TokenError> {
        if let Some(shared) = &self.shared {
            let (_, body) = shared
                .read(SHARED_NAME)
                .map_err(|e| TokenError::Database(e.to_string()))?;
            return match body {
                Some(text) => self.parse(&text),
                None => Ok(TokenFile::default()),
            };
        }
        match fs::read_to_string(&self.path) {
            Ok(text) => self.parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TokenFile::default()),
            Err(e) => Err(TokenError::File {
                path: self.path.clone(),
                detail: e.to_string(),
            }),
        }
    }

    fn write(&self, file: &TokenFile) -> Result<(), TokenError> {
        let err = |e: std::io::Error| TokenError::File {
            path: self.path.clone(),
            detail: e.to_string(),
        };
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        fs::create_dir_all(dir).map_err(err)?;
        let temp = self.path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(file).map_err(|e| TokenError::File {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(err)?;
        out.write_all(&text)
            .and_then(|()| out.sync_all())
            .map_err(err)?;
        fs::rename(&temp, &self.path).map_err(err)?;
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(err)
    }

    /// Takes the lock file beside the token file (`tokens.json.lock`), waiting for whoever
    /// holds it; it is let go when the returned file is dropped. Every change of the token file
    /// (read, change, write the temporary file, rename) happens under it, so two changes at once
    /// both land, whether they come from two processes (a `token add` beside a running server)
    /// or two requests of one: each takes the lock through a descriptor of its own, and
    /// `flock` sets such descriptors against each other even within a process.
    fn lock(&self) -> Result<fs::File, TokenError> {
        let err = |e: std::io::Error| TokenError::File {
            path: self.path.with_extension("json.lock"),
            detail: format!("cannot lock the token file: {e}"),
        };
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        fs::create_dir_all(dir).map_err(err)?;
        let file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.path.with_extension("json.lock"))
            .map_err(err)?;
        file.lock().map_err(err)?;
        Ok(file)
    }

    /// Every token, revoked ones included.
    pub fn list(&self) -> Result<Vec<TokenEntry>, TokenError> {
        Ok(self.read()?.tokens)
    }

    /// Whether any token is in force: without one, the server is for loopback only.
    pub fn any_active(&self) -> Result<bool, TokenError> {
        Ok(self.read()?.tokens.iter().any(|t| t.revoked_at.is_none()))
    }

    /// Whether callers need a token even when none is in force: once a token has been made,
    /// until [`TokenStore::open_mode`].
    pub fn tokens_required(&self) -> Result<bool, TokenError> {
        Ok(self.read()?.tokens_required())
    }

    /// Returns the server to open mode, where a server on loopback serves callers without a
    /// token as the local user: refused while any token is in force. Only the holder of the
    /// data directory may do this; no route of the server offers it.
    pub fn open_mode(&self) -> Result<(), TokenError> {
        self.change(|file| {
            let active: Vec<&str> = file
                .tokens
                .iter()
                .filter(|t| t.revoked_at.is_none())
                .map(|t| t.name.as_str())
                .collect();
            if !active.is_empty() {
                return Err(TokenError::TokensInForce(active.join(", ")));
            }
            file.tokens_required = Some(false);
            Ok(())
        })
    }

    /// Makes a token: returns it, to be shown once; only its hash is kept.
    pub fn add(&self, name: &str, role: Role) -> Result<String, TokenError> {
        if !valid_name(name) {
            return Err(TokenError::BadName(name.to_owned()));
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| TokenError::File {
            path: self.path.clone(),
            detail: format!("no randomness for a token: {e}"),
        })?;
        let token = format!("rl_{}", hex::encode(secret));
        self.change(|file| {
            if file
                .tokens
                .iter()
                .any(|t| t.name == name && t.revoked_at.is_none())
            {
                return Err(TokenError::NameTaken(name.to_owned()));
            }
            file.tokens.push(TokenEntry {
                name: name.to_owned(),
                role,
                hash: hash_of(&token),
                created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                revoked_at: None,
            });
            file.tokens_required = Some(true);
            Ok(())
        })?;
        Ok(token)
    }

    /// Revokes the token of this name.
    pub fn revoke(&self, name: &str) -> Result<(), TokenError> {
        self.change(|file| {
            let Some(entry) = file
                .tokens
                .iter_mut()
                .find(|t| t.name == name && t.revoked_at.is_none())
            else {
                return Err(TokenError::NotFound(name.to_owned()));
            };
            entry.revoked_at =
                Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            Ok(())
        })
    }
}

/// The tokens in force, for checking requests; reloaded when the file changes.
#[derive(Debug, Default)]
pub struct TokenTable {
    by_hash: std::collections::HashMap<String, (String, Role)>,
    required: bool,
    stamp: Option<(u64, std::time::SystemTime)>,
    generation: u64,
}

impl TokenTable {
    /// Reads the store if it changed since the last read; true when it was read. A file that
    /// is still missing is no change: every reader of the table would otherwise hear of one on
    /// every read, and a stream that re-checks its caller on each change would never rest.
    pub fn refresh(&mut self, store: &TokenStore) -> Result<bool, TokenError> {
        let stamp = store.stamp()?;
        if stamp == self.stamp && self.generation > 0 {
            return Ok(false);
        }
        let file = store.read()?;
        self.required = file.tokens_required();
        self.by_hash = file
            .tokens
            .into_iter()
            .filter(|t| t.revoked_at.is_none())
            .map(|t| (t.hash, (t.name, t.role)))
            .collect();
        self.stamp = stamp;
        self.generation += 1;
        Ok(true)
    }

    /// Whether any token is in force.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// Whether callers without a token are served (as the local user, where the address
    /// allows): no token in force, and none required since the last open mode.
    pub fn is_open(&self) -> bool {
        self.by_hash.is_empty() && !self.required
    }

    /// How many times the table was read: a change means a token may have been made or
    /// revoked, so long-lived streams check their caller again.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The holder of a presented token, if it is in force.
    pub fn holder(&self, token: &str) -> Option<(&str, Role)> {
        self.by_hash
            .get(&hash_of(token))
            .map(|(name, role)| (name.as_str(), *role))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_at_once_in_one_process_all_land() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokens.json");
        let adders: Vec<_> = (0..8)
            .map(|i| {
                let store = TokenStore::new(path.clone());
                std::thread::spawn(move || store.add(&format!("holder-{i}"), Role::Writer))
            })
            .collect();
        for adder in adders {
            adder.join().expect("joined").expect("added");
        }
        let listed = TokenStore::new(path).list().expect("listed");
        assert_eq!(listed.len(), 8, "{listed:?}");
    }

    #[test]
    fn tokens_are_kept_as_hashes_and_revoked_ones_stop_working() {
        let dir = tempfile::tempdir().expect("dir");
        let store = TokenStore::new(dir.path().join("tokens.json"));
        let token = store.add("alice", Role::Writer).expect("added");
        assert!(token.starts_with("rl_") && token.len() == 67);
        let text = fs::read_to_string(store.path()).expect("read");
        assert!(
            !text.contains(&token[3..]),
            "the token itself is never kept"
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &fs::metadata(store.path()).expect("stat").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let mut table = TokenTable::default();
        table.refresh(&store).expect("refresh");
        assert_eq!(table.holder(&token), Some(("alice", Role::Writer)));
        assert_eq!(table.holder("rl_nope"), None);
        assert!(matches!(
            store.add("alice", Role::Admin),
            Err(TokenError::NameTaken(_))
        ));
        assert!(matches!(
            store.add("bad name", Role::Admin),
            Err(TokenError::BadName(_))
        ));
        store.revoke("alice").expect("revoked");
        std::thread::sleep(std::time::Duration::from_millis(10));
        table.refresh(&store).expect("refresh");
        assert_eq!(table.holder(&token), None);
        assert!(matches!(
            store.revoke("alice"),
            Err(TokenError::NotFound(_))
        ));
        assert!(!table.is_open(), "revoking the last token does not reopen");
        assert!(store.tokens_required().expect("read"));
        store.open_mode().expect("open mode");
        std::thread::sleep(std::time::Duration::from_millis(10));
        table.refresh(&store).expect("refresh");
        assert!(table.is_open());
        let again = store.add("bob", Role::Auditor).expect("added");
        assert!(matches!(
            store.open_mode(),
            Err(TokenError::TokensInForce(_))
        ));
        std::thread::sleep(std::time::Duration::from_millis(10));
        table.refresh(&store).expect("refresh");
        assert_eq!(table.holder(&again), Some(("bob", Role::Auditor)));
        assert!(
            Role::Admin > Role::Reviewer
                && Role::Reviewer > Role::Writer
                && Role::Writer > Role::Auditor
        );
    }

    #[test]
    fn a_token_file_that_stays_missing_is_no_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TokenStore::new(dir.path().join("tokens.json"));
        let mut table = TokenTable::default();
        assert!(table.refresh(&store).expect("first read"), "read once");
        let generation = table.generation();
        for _ in 0..3 {
            assert!(
                !table.refresh(&store).expect("refresh"),
                "no file, no change"
            );
        }
        assert_eq!(table.generation(), generation);
        store.add("alice", Role::Writer).expect("add");
        assert!(table.refresh(&store).expect("refresh"), "the file appeared");
    }
}
