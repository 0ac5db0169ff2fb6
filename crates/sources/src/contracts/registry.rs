//! The registered tools: every valid contract in a directory, the fallback map, and the
//! allow-list of endpoints.
//!
//! The directory holds one YAML contract a file (`*.yaml`, `*.yml`), an optional
//! `semantic-tags.yaml` extending the dictionary and an optional `fallbacks.yaml`:
//!
//! ```yaml
//! fallbacks:
//!   printer_repair_manual: kb_search   # an unknown name is sent to a registered tool
//! ```
//!
//! Loading never fails: a contract with problems is left out and its problems are reported, so
//! one bad file does not take the others down.
//!
//! Contracts registered through the API live in a folder of their own, [`TOOLS_DIR`]
//! (`contracts/tools/NAME.yaml`, written durably), so no tool's name can make its file one of
//! the directory's own: a tool named `fallbacks` is `tools/fallbacks.yaml`, never the fallback
//! map. Contracts placed by hand beside the directory's own files are still read. A reserved
//! file that holds a contract — what registering such a name did before the folder existed —
//! is moved into the folder when the directory is read, and the server's file is free again.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::schema::{Contract, ContractLimits, ContractProblem};
use super::tags::TagDictionary;

/// The dictionary file's name in a contracts directory.
pub const TAGS_FILE: &str = "semantic-tags.yaml";
/// The fallback map's file name in a contracts directory.
pub const FALLBACKS_FILE: &str = "fallbacks.yaml";
/// The folder of a contracts directory that registration writes into.
pub const TOOLS_DIR: &str = "tools";

/// Which endpoints tools may live at: `scheme://host` (any port), `scheme://host:port`, or
/// `scheme://*.domain` (any subdomain). Requests never go anywhere else, whatever a contract
/// says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointAllowList {
    rules: Vec<String>,
}

impl Default for EndpointAllowList {
    /// Loopback only.
    fn default() -> Self {
        EndpointAllowList {
            rules: vec![
                "http://127.0.0.1".into(),
                "http://localhost".into(),
                "http://[::1]".into(),
            ],
        }
    }
}

/// `(scheme, host, port)` of an http(s) URL.
fn authority(url: &str) -> Option<(&str, &str, Option<&str>)> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') || authority.is_empty() {
        return None;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let close = v6.find(']')?;
        let host = &authority[..close + 2];
        let port = authority[close + 2..].strip_prefix(':');
        (host, port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    Some((scheme, host, port))
}

impl EndpointAllowList {
    /// An allow-list of these rules.
    pub fn new(rules: Vec<String>) -> Self {
        EndpointAllowList { rules }
    }

    /// The rules.
    pub fn rules(&self) -> &[String] {
        &self.rules
    }

    /// Whether a request may go to `url`.
    pub fn allows(&self, url: &str) -> bool {
        let Some((scheme, host, port)) = authority(url) else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        self.rules.iter().any(|rule| {
            let Some((r_scheme, r_host, r_port)) = authority(rule) else {
                return false;
            };
            let r_host = r_host.to_ascii_lowercase();
            let host_ok = match r_host.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => host == r_host,
            };
            scheme.eq_ignore_ascii_case(r_scheme) && host_ok && (r_port.is_none() || r_port == port)
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FallbacksFile {
    #[serde(default)]
    fallbacks: BTreeMap<String, String>,
}

/// The registered tools. See the module documentation.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: Option<PathBuf>,
    dictionary: TagDictionary,
    tools: BTreeMap<String, Contract>,
    fallbacks: BTreeMap<String, String>,
    problems: Vec<ContractProblem>,
    allow: EndpointAllowList,
    limits: ContractLimits,
    reserved: Vec<String>,
    stamp: Vec<(PathBuf, u64, u128)>,
    /// The contracts of registered tools as texts by name, when registration keeps them
    /// elsewhere than the directory (in the storage database); they stand beside the
    /// directory's own files, and win over a file that defines the same tool.
    texts: Option<BTreeMap<String, String>>,
    /// The dictionary's and the fallback map's texts, when they are kept elsewhere than a
    /// directory (in the storage database, with the contracts): then no directory is read.
    stored: Option<StoredExtras>,
}

/// What a stored contract set holds beside the contracts: the texts a directory keeps in
/// [`TAGS_FILE`] and [`FALLBACKS_FILE`], each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredExtras {
    /// The tag dictionary's text (the built-in tags when none).
    pub tags: Option<String>,
    /// The fallback map's text (no fallbacks when none).
    pub fallbacks: Option<String>,
}

/// How a problem in a stored dictionary or fallback map names where it is.
fn stored_origin(file: &str) -> PathBuf {
    PathBuf::from(format!("(storage database) {file}"))
}

/// Why a registration or removal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The contract has problems; nothing was registered.
    #[error("the contract has {} problem(s): {}", .0.len(), .0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<ContractProblem>),
    /// The registry has no directory to keep contracts in.
    #[error("no contracts directory is configured")]
    NoDirectory,
    /// No tool of that name is registered.
    #[error("no registered tool {0}")]
    NotFound(String),
    /// Writing or removing the contract's file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn stamp_of(dir: &Path) -> Vec<(PathBuf, u64, u128)> {
    let mut out = Vec::new();
    for folder in [dir.to_path_buf(), dir.join(TOOLS_DIR)] {
        let Ok(entries) = fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                continue;
            }
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.push((path, meta.len(), modified));
        }
    }
    out.sort();
    out
}

fn is_contract_file(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    // In the tools folder every name is a tool's: the directory's own files are beside it.
    let in_tools = path
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|p| p == TOOLS_DIR);
    (name.ends_with(".yaml") || name.ends_with(".yml"))
        && (in_tools || (name != TAGS_FILE && name != FALLBACKS_FILE))
        && !name.starts_with('.')
}

impl Registry {
    /// No tools, no directory.
    pub fn empty(allow: EndpointAllowList, limits: ContractLimits) -> Registry {
        Registry {
            dir: None,
            dictionary: TagDictionary::default(),
            tools: BTreeMap::new(),
            fallbacks: BTreeMap::new(),
            problems: Vec::new(),
            allow,
            limits,
            reserved: Vec::new(),
            stamp: Vec::new(),
            texts: None,
            stored: None,
        }
    }

    /// A registry whose contracts, dictionary and fallback map are all given as texts
    /// ([`Registry::use_stored`]), with no directory. `reserved` are the built-in tools' names.
    pub fn stored(allow: EndpointAllowList, limits: ContractLimits, reserved: &[&str]) -> Registry {
        let mut registry = Registry::empty(allow, limits);
        registry.reserved = reserved.iter().map(|s| (*s).to_owned()).collect();
        registry.stored = Some(StoredExtras::default());
        registry.texts = Some(BTreeMap::new());
        registry
    }

    /// Takes the contracts, the dictionary and the fallback map from these texts from now on.
    pub fn use_stored(&mut self, tools: BTreeMap<String, String>, extras: StoredExtras) {
        self.texts = Some(tools);
        self.stored = Some(extras);
        self.reload();
    }

    /// Every valid contract in `dir` (which may not exist yet). `reserved` are the built-in
    /// tools' names, which no contract may take.
    pub fn load(
        dir: &Path,
        allow: EndpointAllowList,
        limits: ContractLimits,
        reserved: &[&str],
    ) -> Registry {
        let mut registry = Registry::empty(allow, limits);
        registry.dir = Some(dir.to_path_buf());
        registry.reserved = reserved.iter().map(|s| (*s).to_owned()).collect();
        registry.reload();
        registry
    }

    /// Moves a contract found in one of the directory's own files (left there by registering
    /// a tool of that name before registration had a folder of its own) into the folder, so
    /// the file is the server's again.
    fn migrate_reserved(&mut self, dir: &Path) {
        for reserved in [TAGS_FILE, FALLBACKS_FILE] {
            let path = dir.join(reserved);
            let Ok(text) = fs::read_to_string(&path) else {
                continue;
            };
            let Ok(contract) = Contract::parse(&text, None) else {
                continue;
            };
            let target = dir.join(TOOLS_DIR).join(format!("{}.yaml", contract.name));
            let moved = fs::create_dir_all(dir.join(TOOLS_DIR))
                .and_then(|()| {
                    if target.exists() {
                        // The folder has the tool already: the copy in the server's file goes.
                        fs::remove_file(&path)
                    } else {
                        fs::rename(&path, &target)
                    }
                })
                .and_then(|()| fs::File::open(dir)?.sync_all());
            if let Err(e) = moved {
                self.problems.push(ContractProblem {
                    file: Some(path),
                    field: "name".into(),
                    problem: format!(
                        "holds the contract of {} rather than the server's own file, and cannot be moved to {}: {e}",
                        contract.name,
                        target.display()
                    ),
                });
            }
        }
    }

    /// Reads the directory (or the stored texts) again.
    pub fn reload(&mut self) {
        let dir = match (&self.stored, &self.dir) {
            (Some(_), _) => None,
            (None, Some(dir)) => Some(dir.clone()),
            (None, None) => return,
        };
        self.problems.clear();
        if let Some(dir) = &dir {
            self.migrate_reserved(dir);
            self.stamp = stamp_of(dir);
        }
        self.tools.clear();
        self.fallbacks.clear();
        self.dictionary = TagDictionary::default();
        let (tags, fallbacks) = match (&self.stored, &dir) {
            (Some(stored), _) => (
                stored.tags.clone().map(|t| (t, stored_origin(TAGS_FILE))),
                stored
                    .fallbacks
                    .clone()
                    .map(|t| (t, stored_origin(FALLBACKS_FILE))),
            ),
            (None, Some(dir)) => {
                let read = |name: &str| {
                    let path = dir.join(name);
                    fs::read_to_string(&path).ok().map(|text| (text, path))
                };
                (read(TAGS_FILE), read(FALLBACKS_FILE))
            }
            (None, None) => (None, None),
        };
        if let Some((text, tags)) = tags {
            match TagDictionary::with_file(&text, &tags) {
                Ok(d) => self.dictionary = d,
                Err(p) => self.problems.push(p),
            }
        }
        if dir.is_some() {
            self.read_files();
        }
        if let Some(texts) = self.texts.clone() {
            self.read_texts(&texts);
        }
        if let Some((text, fallbacks)) = fallbacks {
            match serde_saphyr::from_str::<FallbacksFile>(&text) {
                Ok(f) => {
                    for (from, to) in f.fallbacks {
                        if !self.tools.contains_key(&to) && !self.reserved.contains(&to) {
                            self.problems.push(ContractProblem {
                                file: Some(fallbacks.clone()),
                                field: format!("fallbacks.{from}"),
                                problem: format!("{to} is not a tool"),
                            });
                            continue;
                        }
                        self.fallbacks.insert(from, to);
                    }
                }
                Err(e) => self.problems.push(ContractProblem {
                    file: Some(fallbacks),
                    field: "fallbacks".into(),
                    problem: format!("not a fallback map: {e}"),
                }),
            }
        }
    }

    fn read_files(&mut self) {
        let mut files: Vec<PathBuf> = self
            .stamp
            .iter()
            .map(|(p, _, _)| p.clone())
            .filter(|p| is_contract_file(p))
            .collect();
        files.sort();
        for file in files {
            match self.read_contract(&file) {
                Ok(contract) => {
                    if let Some(other) = self.tools.get(&contract.name) {
                        self.problems.push(ContractProblem {
                            file: Some(file.clone()),
                            field: "name".into(),
                            problem: format!(
                                "tool {} is already defined by another file",
                                other.name
                            ),
                        });
                        continue;
                    }
                    self.tools.insert(contract.name.clone(), contract);
                }
                Err(problems) => self.problems.extend(problems),
            }
        }
    }

    fn read_texts(&mut self, texts: &BTreeMap<String, String>) {
        for (name, text) in texts {
            match self.validate(text, None) {
                Ok(contract) if contract.name == *name => {
                    // A registered contract wins over a file of the same tool.
                    self.tools.insert(contract.name.clone(), contract);
                }
                Ok(contract) => self.problems.push(ContractProblem {
                    file: None,
                    field: "name".into(),
                    problem: format!("the contract kept as {name} names {}", contract.name),
                }),
                Err(problems) => self.problems.extend(problems.into_iter().map(|mut p| {
                    p.problem = format!("{name}: {}", p.problem);
                    p
                })),
            }
        }
    }

    /// Takes the registered tools' contracts from `texts` (by name) from now on, beside the
    /// directory's files; the directory's tag dictionary and fallback map apply to both.
    pub fn use_texts(&mut self, texts: BTreeMap<String, String>) {
        self.texts = Some(texts);
        self.reload();
    }

    /// The contracts' texts by name, when they are taken from texts ([`Registry::use_texts`]).
    pub fn texts(&self) -> Option<&BTreeMap<String, String>> {
        self.texts.as_ref()
    }

    fn read_contract(&self, file: &Path) -> Result<Contract, Vec<ContractProblem>> {
        let problem = |field: &str, text: String| ContractProblem {
            file: Some(file.to_path_buf()),
            field: field.into(),
            problem: text,
        };
        let size = fs::metadata(file)
            .map_err(|e| vec![problem("contract", e.to_string())])?
            .len();
        if size > self.limits.contract_bytes_max as u64 {
            return Err(vec![problem(
                "contract",
                format!(
                    "{size} bytes is above contract_bytes_max = {}",
                    self.limits.contract_bytes_max
                ),
            )]);
        }
        let text =
            fs::read_to_string(file).map_err(|e| vec![problem("contract", e.to_string())])?;
        self.validate(&text, Some(file))
    }

    /// Parses and checks a contract's text.
    pub fn validate(
        &self,
        text: &str,
        file: Option<&Path>,
    ) -> Result<Contract, Vec<ContractProblem>> {
        if text.len() > self.limits.contract_bytes_max {
            return Err(vec![ContractProblem {
                file: file.map(Path::to_path_buf),
                field: "contract".into(),
                problem: format!(
                    "{} bytes is above contract_bytes_max = {}",
                    text.len(),
                    self.limits.contract_bytes_max
                ),
            }]);
        }
        let contract = Contract::parse(text, file).map_err(|p| vec![p])?;
        let mut problems = contract.problems(&self.dictionary, &self.limits, file);
        if self.reserved.contains(&contract.name) {
            problems.push(ContractProblem {
                file: file.map(Path::to_path_buf),
                field: "name".into(),
                problem: format!("{} is a built-in tool", contract.name),
            });
        }
        if !self.allow.allows(&contract.endpoint) {
            problems.push(ContractProblem {
                file: file.map(Path::to_path_buf),
                field: "endpoint".into(),
                problem: format!(
                    "{} is not on the allow-list ({})",
                    contract.endpoint,
                    self.allow.rules().join(", ")
                ),
            });
        }
        if problems.is_empty() {
            Ok(contract)
        } else {
            Err(problems)
        }
    }

    /// Whether the directory changed since it was read.
    pub fn changed(&self) -> bool {
        self.dir
            .as_deref()
            .is_some_and(|dir| stamp_of(dir) != self.stamp)
    }

    /// The valid contracts, by name.
    pub fn tools(&self) -> &BTreeMap<String, Contract> {
        &self.tools
    }

    /// A registered tool.
    pub fn get(&self, name: &str) -> Option<&Contract> {
        self.tools.get(name)
    }

    /// Where an unknown name is sent, if anywhere.
    pub fn fallback(&self, name: &str) -> Option<&str> {
        self.fallbacks.get(name).map(String::as_str)
    }

    /// The problems found when the directory was read.
    pub fn problems(&self) -> &[ContractProblem] {
        &self.problems
    }

    /// The tag dictionary in force.
    pub fn dictionary(&self) -> &TagDictionary {
        &self.dictionary
    }

    /// The endpoint allow-list.
    pub fn allow_list(&self) -> &EndpointAllowList {
        &self.allow
    }

    /// Registers a contract given as text: checked, then written into the directory durably
    /// (replacing one of the same name), then in force.
    pub fn register(&mut self, text: &str) -> Result<Contract, RegistryError> {
        let contract = self.validate(text, None).map_err(RegistryError::Invalid)?;
        let root = self.dir.clone().ok_or(RegistryError::NoDirectory)?;
        let dir = root.join(TOOLS_DIR);
        fs::create_dir_all(&dir).map_err(|source| RegistryError::Io {
            path: dir.clone(),
            source,
        })?;
        // A contract of the same name elsewhere (placed by hand) is replaced by this one.
        self.remove_files_of(&root, &contract.name, Some(&dir))?;
        let path = dir.join(format!("{}.yaml", contract.name));
        let temp = dir.join(format!(".{}.yaml.tmp", contract.name));
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&temp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            fs::rename(&temp, &path)?;
            fs::File::open(&dir)?.sync_all()
        };
        write().map_err(|source| RegistryError::Io {
            path: path.clone(),
            source,
        })?;
        self.reload();
        Ok(contract)
    }

    /// Removes every contract file that defines `name`, in the directory and its tools
    /// folder, but for the folder `except`.
    fn remove_files_of(
        &self,
        root: &Path,
        name: &str,
        except: Option<&Path>,
    ) -> Result<(), RegistryError> {
        for folder in [root.to_path_buf(), root.join(TOOLS_DIR)] {
            if Some(folder.as_path()) == except {
                continue;
            }
            let entries = match fs::read_dir(&folder) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(RegistryError::Io {
                        path: folder.clone(),
                        source,
                    });
                }
            };
            let mut removed = false;
            for entry in entries {
                let Ok(entry) = entry else { continue };
                let path = entry.path();
                if !is_contract_file(&path) {
                    continue;
                }
                let names_it = fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| Contract::parse(&t, None).ok())
                    .is_some_and(|c| c.name == name);
                if names_it {
                    fs::remove_file(&path).map_err(|source| RegistryError::Io {
                        path: path.clone(),
                        source,
                    })?;
                    removed = true;
                }
            }
            if removed {
                fs::File::open(&folder)
                    .and_then(|d| d.sync_all())
                    .map_err(|source| RegistryError::Io {
                        path: folder.clone(),
                        source,
                    })?;
            }
        }
        Ok(())
    }

    /// Removes a registered tool and its file.
    pub fn unregister(&mut self, name: &str) -> Result<(), RegistryError> {
        let dir = self.dir.clone().ok_or(RegistryError::NoDirectory)?;
        if !self.tools.contains_key(name) {
            return Err(RegistryError::NotFound(name.to_owned()));
        }
        self.remove_files_of(&dir, name, None)?;
        self.reload();
        Ok(())
    }
}

/// Every problem in a contracts directory: what `research-ledger contracts check` reports.
pub fn check_dir(
    dir: &Path,
    allow: EndpointAllowList,
    limits: ContractLimits,
    reserved: &[&str],
) -> (usize, Vec<ContractProblem>) {
    let registry = Registry::load(dir, allow, limits, reserved);
    (registry.tools.len(), registry.problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_list_matches_scheme_host_and_port() {
        let allow = EndpointAllowList::new(vec![
            "http://127.0.0.1".into(),
            "https://api.example.org:8443".into(),
            "https://*.example.net".into(),
        ]);
        assert!(allow.allows("http://127.0.0.1:9000/search"));
        assert!(allow.allows("http://127.0.0.1/x"));
        assert!(!allow.allows("https://127.0.0.1/x"));
        assert!(allow.allows("https://api.example.org:8443/v1"));
        assert!(!allow.allows("https://api.example.org/v1"));
        assert!(allow.allows("https://tools.example.net/a"));
        assert!(!allow.allows("https://example.net/a"));
        assert!(!allow.allows("https://evil.example.net.attacker.org/a"));
        assert!(!allow.allows("http://user@127.0.0.1/x"));
        assert!(!allow.allows("ftp://127.0.0.1/x"));
        assert!(EndpointAllowList::default().allows("http://[::1]:8080/x"));
    }
}
