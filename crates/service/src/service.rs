//! The service: one ledger, its read models, the corpus, and the write path every command
//! takes.
//!
//! A write goes: idempotency key first (a retry of a command that succeeded is answered from the
//! events it wrote, even if the same command would now be refused), then the expected version,
//! then `research::decide` on the task's state, then one conditional append, then the
//! projection folds the events the ledger's writer hands it, so the caller reads its own write
//! without the events being read back. Each check is made once: the key is looked up by the
//! ledger's writer as it appends, or by the service when the command is refused before the
//! append. The full texts a command's events cite travel with its append: the ledger makes them
//! durable with the events, by the same sync ([`crate::content`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ledger::{
    AppendError, AppendRequest, Causation, Clock, Digest, ExpectedVersion, Idempotency, Ledger,
    LedgerOptions, NewEvent,
};
use projections::{Projector, ProjectorOptions};
use research::command::Command;
use research::{CommandContext, TaskState};
use serde_json::Value;
use sources::{BlobOptions, BlobStore, Corpus, CorpusLimits};

use crate::content::Attachments;

use crate::error::ServiceError;
use crate::jobs::{JobLimits, Jobs};
use crate::tokens::Role;

/// Where the service keeps what, inside the data directory.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The ledger.
    pub ledger: PathBuf,
    /// Projection snapshots.
    pub projections: PathBuf,
    /// The content store of earlier versions, read for texts written before the ledger kept
    /// content; nothing is written there.
    pub blobs: PathBuf,
    /// The embedded corpus.
    pub corpus: PathBuf,
    /// Pipeline jobs.
    pub jobs: PathBuf,
    /// Contracts of registered external tools.
    pub contracts: PathBuf,
    /// The passages' vectors, when the search ranks by meaning (derived; computed again when
    /// missing).
    pub vectors: PathBuf,
}

impl Layout {
    /// The standard layout under `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Layout {
            ledger: data_dir.join("ledger"),
            projections: data_dir.join("projections"),
            blobs: data_dir.join("blobs"),
            corpus: data_dir.join("corpus"),
            jobs: data_dir.join("jobs"),
            contracts: data_dir.join("contracts"),
            vectors: data_dir.join("vectors"),
        }
    }
}

/// Everything the service is opened with.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Where things are.
    pub layout: Layout,
    /// The ledger's options (limits, clock, checkpoints).
    pub ledger: LedgerOptions,
    /// Limits of the read models.
    pub projections: projections::Limits,
    /// Limits of the research domain.
    pub research: research::Limits,
    /// The bound on a full text (`content_bytes_max`), for what is attached to writes and what
    /// is read from the content store of earlier versions.
    pub blobs: BlobOptions,
    /// The corpus's limits.
    pub corpus: CorpusLimits,
    /// Results per source when a search does not say.
    pub search_results_default: u32,
    /// How often a write without an expected version is decided again after another writer
    /// got there first.
    pub write_attempts_max: u32,
    /// Where registered tools may live; requests go nowhere else.
    pub tool_endpoint_allow: sources::contracts::EndpointAllowList,
    /// Limits on contracts.
    pub contract_limits: sources::contracts::ContractLimits,
    /// Largest reply an external tool may send.
    pub tool_reply_bytes_max: u64,
    /// Bounds on pipeline jobs.
    pub jobs: JobLimits,
    /// The shared database (`postgres://USER@HOST:PORT/DB`) that holds the ledger and its
    /// content instead of the data directory, when there is one (the access tokens, kept
    /// there too, are opened by the front end). The data directory keeps the rest: the signing
    /// key, the read models' snapshots, the corpus, jobs and contracts.
    pub storage_url: Option<String>,
    /// The folder of a sentence encoder's model: with one, searches of the corpus rank by
    /// meaning too ([`sources::Similarity`]), the passages' vectors kept in `layout.vectors`.
    /// A read-only service searches nothing and does not read it.
    pub encoder: Option<PathBuf>,
}

impl ServiceOptions {
    /// The defaults, with everything under `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        ServiceOptions {
            layout: Layout::new(data_dir),
            ledger: LedgerOptions::default(),
            projections: projections::Limits::default(),
            research: research::Limits::default(),
            blobs: BlobOptions::default(),
            corpus: CorpusLimits::default(),
            search_results_default: 10,
            write_attempts_max: 5,
            tool_endpoint_allow: sources::contracts::EndpointAllowList::default(),
            contract_limits: sources::contracts::ContractLimits::default(),
            tool_reply_bytes_max: 4 * 1024 * 1024,
            jobs: JobLimits::default(),
            storage_url: None,
            encoder: None,
        }
    }
}

/// Who is calling: the actor of every event the call writes, and what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The name recorded as the actor.
    pub actor: String,
    /// What the caller may do.
    pub role: Role,
    /// Whether a decision the caller sends is a person's or an assistant's, and through which
    /// client: what a decision on a conflict records.
    pub decider: research::event::Decider,
}

impl Caller {
    /// A local caller named `actor`, with every right: the command line, stdio, and a server
    /// that has no access tokens and so listens on loopback only.
    pub fn new(actor: impl Into<String>) -> Self {
        Caller::with_role(actor, Role::Admin)
    }

    /// A caller named `actor` with `role`: the holder of an access token.
    pub fn with_role(actor: impl Into<String>, role: Role) -> Self {
        Caller {
            actor: actor.into(),
            role,
            decider: research::event::Decider {
                by: research::event::DecidedBy::Person,
                via: "cli".into(),
            },
        }
    }

    /// The same caller, its decisions recorded as made by `by` through `via`.
    pub fn deciding(mut self, by: research::event::DecidedBy, via: impl Into<String>) -> Self {
        self.decider = research::event::Decider {
            by,
            via: via.into(),
        };
        self
    }

    /// Refuses unless the caller's role includes `needed`; `what` names what was asked.
    pub fn require(&self, needed: Role, what: &str) -> Result<(), ServiceError> {
        if self.role >= needed {
            return Ok(());
        }
        Err(ServiceError::Forbidden(format!(
            "{what} needs the role {} or above; {} has the role {}",
            needed.name(),
            self.actor,
            self.role.name()
        )))
    }
}

/// How a write is guarded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Refuse unless the task is at this version.
    pub expected_version: Option<u64>,
    /// The command's idempotency key.
    pub idempotency_key: Option<String>,
}

/// What a write did.
#[derive(Debug, Clone)]
pub struct Written {
    /// The task.
    pub task_id: String,
    /// The task's version after the write (the session version).
    pub session_version: u64,
    /// The events the command wrote, with their seq and hash.
    pub events: Vec<(u64, Digest, research::Event)>,
    /// True when this is the original result of an earlier call with the same idempotency key.
    pub replayed: bool,
    /// The task as the write left it.
    pub state: Arc<TaskState>,
}

/// The task a write is for.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A task that does not exist yet.
    New(&'a str),
    /// An existing task.
    Existing(&'a str),
}

impl Target<'_> {
    fn id(&self) -> &str {
        match self {
            Target::New(id) | Target::Existing(id) => id,
        }
    }
}

/// How many locks the writes of different tasks are spread over.
const TASK_LOCK_SHARDS: usize = 256;

pub(crate) struct Inner {
    /// Writes to one task are decided one at a time in this process, so concurrent callers
    /// queue rather than decide on a state that is about to move. (Writers elsewhere, on a
    /// shared backend, still meet the ledger's version check.)
    task_locks: Vec<tokio::sync::Mutex<()>>,
    pub(crate) ledger: Ledger,
    pub(crate) projector: Projector,
    /// The content store of earlier versions, read-only, for texts written before the ledger
    /// kept content; none on PostgreSQL, where the ledger reads that store's very table.
    pub(crate) earlier_content: Option<BlobStore>,
    pub(crate) corpus: Corpus,
    /// The corpus's documents in the storage database, when there is one: `corpus` is this
    /// node's index of them.
    pub(crate) shared_corpus: Option<sources::SharedCorpus>,
    pub(crate) options: ServiceOptions,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) registry: std::sync::RwLock<sources::contracts::Registry>,
    /// The contracts in the storage database, when there is one.
    pub(crate) shared_contracts: Option<crate::shared_contracts::SharedContracts>,
    pub(crate) tools_version: tokio::sync::watch::Sender<u64>,
    pub(crate) metrics: crate::metrics::Metrics,
    pub(crate) jobs: Jobs,
    /// Why the embedded corpus cannot serve the searches the ledger records, when it cannot.
    pub(crate) corpus_missing: Option<String>,
    /// Folds what other nodes commit into the read models, on a shared ledger.
    pub(crate) follower: std::sync::Mutex<Option<Follower>>,
    /// The idempotency keys of calls under way that work beyond the ledger before they write
    /// ([`Service::hold_key`]).
    pub(crate) held_keys: std::sync::Mutex<std::collections::HashMap<String, Arc<KeyedCall>>>,
}

/// A call under way that holds an idempotency key; it ends when its [`HeldKey`] drops.
#[derive(Default)]
pub(crate) struct KeyedCall {
    ended: std::sync::Mutex<bool>,
    end: std::sync::Condvar,
}

impl KeyedCall {
    fn wait(&self) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        while !*ended {
            ended = self.end.wait(ended).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// An idempotency key held by the call that will write under it. Dropping it, however the call
/// ends (written, refused, failed), lets the calls waiting on the key go on.
pub(crate) struct HeldKey {
    service: Service,
    key: String,
    call: Arc<KeyedCall>,
}

impl Drop for HeldKey {
    fn drop(&mut self) {
        {
            let mut held = self
                .service
                .inner
                .held_keys
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if held
                .get(&self.key)
                .is_some_and(|c| Arc::ptr_eq(c, &self.call))
            {
                held.remove(&self.key);
            }
        }
        *self.call.ended.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.call.end.notify_all();
    }
}

/// What [`Service::hold_key`] found.
pub(crate) enum KeyHold {
    /// The key was committed for this very command: its original result.
    Earlier(Written),
    /// The key is this call's until the value drops (`None`: the call gave no key).
    Held(Option<HeldKey>),
}

/// The service. Cheap to clone; every clone is the same service.
#[derive(Clone)]
pub struct Service {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("ledger", &self.inner.options.layout.ledger)
            .finish_non_exhaustive()
    }
}

/// An empty corpus under a ledger whose searches ran on a corpus of documents: the corpus
/// folder was deleted or replaced. Reported rather than searched, since an empty corpus would
/// answer every search with nothing, silently. Only the tasks whose searches asked the corpus
/// are read (the task index knows them), so an open does not read the whole ledger.
fn missing_corpus(projector: &Projector, corpus: &Corpus) -> Option<String> {
    let empty = corpus.index_state();
    if empty.documents > 0 {
        return None;
    }
    let mut last: Option<(u64, String)> = None;
    let mut count = 0u64;
    for task in projector.tasks_that_searched_the_corpus() {
        let state = match projector.state(&task) {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(error = %e, %task, "a task's searches could not be read");
                continue;
            }
        };
        for search in state.searches() {
            if search.event.sources.iter().any(|s| s == "corpus")
                && search.event.index_state != empty.id
            {
                count += 1;
                let seq = search.provenance.cite.seq;
                if last.as_ref().is_none_or(|(at, _)| *at < seq) {
                    last = Some((seq, search.event.index_state.clone()));
                }
            }
        }
    }
    let (seq, state) = last?;
    Some(format!(
        "the corpus in {} is empty, but {count} searches recorded in the ledger ran on a corpus of documents (the last at seq {seq}, index state {state}): the folder was deleted or replaced; ingest the collection again, or restore the folder from a backup",
        corpus.dir().display()
    ))
}

/// The built-in tools' names, which no contract may take.
fn built_in_names() -> Vec<String> {
    crate::tools::tool_specs()
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// A registry that takes everything from the storage database's contracts document.
pub(crate) fn stored_registry(options: &ServiceOptions) -> sources::contracts::Registry {
    let built_in = built_in_names();
    let reserved: Vec<&str> = built_in.iter().map(String::as_str).collect();
    sources::contracts::Registry::stored(
        options.tool_endpoint_allow.clone(),
        options.contract_limits,
        &reserved,
    )
}

/// The registered tools' contracts, none named like a built-in tool.
fn load_registry(options: &ServiceOptions) -> sources::contracts::Registry {
    let built_in = built_in_names();
    let reserved: Vec<&str> = built_in.iter().map(String::as_str).collect();
    let registry = sources::contracts::Registry::load(
        &options.layout.contracts,
        options.tool_endpoint_allow.clone(),
        options.contract_limits,
        &reserved,
    );
    for problem in registry.problems() {
        tracing::warn!(%problem, "a contract is left out");
    }
    registry
}

/// The ranking by meaning the options name (`encoder`, its vectors in `layout.vectors`), if
/// any: what the service's corpus searches with, and what a command that ingests without a
/// service gives the corpus it opens.
pub fn open_similarity(
    options: &ServiceOptions,
) -> Result<Option<Arc<sources::Similarity>>, sources::SimilarityError> {
    let Some(model) = &options.encoder else {
        return Ok(None);
    };
    let similarity = sources::Similarity::open(model, &options.layout.vectors)?;
    Ok(Some(Arc::new(similarity)))
}

/// The corpus: an empty one in memory for a read-only service; with a storage database, this
/// node's index brought up to the database's documents; otherwise the data directory's.
fn open_corpus(
    options: &ServiceOptions,
) -> Result<(Corpus, Option<sources::SharedCorpus>), OpenError> {
    let limits = options.corpus.clone();
    if options.ledger.read_only {
        return Ok((Corpus::in_memory(limits)?, None));
    }
    let similarity = open_similarity(options)?;
    let Some(url) = &options.storage_url else {
        let corpus = Corpus::open_with(&options.layout.corpus, limits, similarity)?;
        return Ok((corpus, None));
    };
    let store =
        sources::PostgresDocuments::open(url).map_err(|e| OpenError::Shared(e.to_string()))?;
    let (shared, corpus) =
        sources::SharedCorpus::open(&options.layout.corpus, limits, store, similarity)
            .map_err(|e| OpenError::Shared(e.to_string()))?;
    Ok((corpus, Some(shared)))
}

/// The jobs: the storage database's when there is one (and writes are allowed), else the
/// data directory's.
fn open_jobs(options: &ServiceOptions) -> Result<Jobs, OpenError> {
    let read_only = options.ledger.read_only;
    match (&options.storage_url, read_only) {
        (Some(url), false) => {
            let db =
                crate::jobs_db::JobsDb::open(url).map_err(|e| OpenError::Shared(e.to_string()))?;
            Ok(Jobs::shared(Some(db), options.jobs.clone()))
        }
        _ => Ok(Jobs::open(
            &options.layout.jobs,
            options.jobs.clone(),
            read_only,
        )?),
    }
}

/// With a storage database (and writes allowed), the registered tools come from it.
fn shared_contracts(
    options: &ServiceOptions,
    registry: &mut sources::contracts::Registry,
) -> Result<Option<crate::shared_contracts::SharedContracts>, OpenError> {
    let (Some(url), false) = (&options.storage_url, options.ledger.read_only) else {
        return Ok(None);
    };
    let shared = crate::shared_contracts::SharedContracts::open(url)
        .map_err(|e| OpenError::Shared(e.to_string()))?;
    let document = shared
        .read()
        .map_err(|e| OpenError::Shared(e.to_string()))?;
    // Every node serves what the database holds; a file placed by hand in this node's folder
    // would make it serve something else, so the node refuses to start over one the database
    // does not hold as it is.
    let unshared = crate::shared_contracts::unshared_files(&options.layout.contracts, &document);
    if !unshared.is_empty() {
        return Err(OpenError::Shared(format!(
            "{} holds {} that the storage database does not: with a storage database every \
             node serves the contracts, tag dictionary and fallback map the database holds; \
             store the folder for every node with `research-ledger --storage-url URL contracts \
             push {}`, or remove the files",
            options.layout.contracts.display(),
            unshared.join(", "),
            options.layout.contracts.display()
        )));
    }
    *registry = stored_registry(options);
    let extras = document.extras();
    registry.use_stored(document.tools, extras);
    for problem in registry.problems() {
        tracing::warn!(%problem, "a contract is left out");
    }
    Ok(Some(shared))
}

/// Stores a contracts folder in the storage database for every node: its dictionary and its
/// fallback map replace the database's (none when the folder has none), and its contracts
/// join the registered ones, replacing those of the same name. Everything is checked first,
/// the tools the database keeps included, against the new dictionary and the options'
/// allow-list; on any problem nothing is stored. Answers the tools served after it.
pub fn push_contracts(
    options: &ServiceOptions,
    dir: &std::path::Path,
) -> Result<Vec<String>, crate::shared_contracts::PushError> {
    use crate::shared_contracts::{ContractsError, SharedContracts, read_folder};
    let url = options.storage_url.as_deref().ok_or_else(|| {
        ContractsError::Invalid(
            "contracts are pushed into a storage database (--storage-url)".into(),
        )
    })?;
    let folder = read_folder(dir)?;
    let shared = SharedContracts::open(url).map_err(ContractsError::from)?;
    let document = shared.change(|document| {
        let mut next = crate::shared_contracts::ContractsDocument {
            tools: document.tools.clone(),
            tags: folder.tags.clone(),
            fallbacks: folder.fallbacks.clone(),
        };
        next.tools.extend(folder.tools.clone());
        let mut registry = stored_registry(options);
        let extras = next.extras();
        registry.use_stored(next.tools.clone(), extras);
        let problems = registry.problems();
        if !problems.is_empty() {
            return Err(ContractsError::Invalid(
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            ));
        }
        *document = next;
        Ok(())
    })?;
    Ok(document.tools.into_keys().collect())
}

/// The content store of earlier versions, read as it is: the data directory's folder. With a
/// storage database there is none to read apart: the ledger keeps its content in the table that
/// store kept it in.
fn earlier_content(options: &ServiceOptions) -> Option<BlobStore> {
    match &options.storage_url {
        Some(_) => None,
        None => Some(BlobStore::open(
            &options.layout.blobs,
            options.blobs.clone(),
        )),
    }
}

/// Opens the ledger the options name, taking every text the service accepts.
fn open_ledger(options: &ServiceOptions) -> Result<Ledger, OpenError> {
    let mut ledger = options.ledger.clone();
    let accepted = usize::try_from(options.blobs.content_bytes_max).unwrap_or(usize::MAX);
    ledger.limits.blob_bytes_max = ledger.limits.blob_bytes_max.max(accepted);
    Ok(match &options.storage_url {
        Some(url) => Ledger::open_postgres(url, &options.layout.ledger.join("keys"), ledger)?,
        None => Ledger::open(&options.layout.ledger, ledger)?,
    })
}

/// Why the service could not open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The ledger could not open (its directory is locked by another process, or damaged).
    #[error("the ledger: {0}")]
    Ledger(#[from] ledger::StorageError),
    /// The read models could not open.
    #[error("the projections: {0}")]
    Projections(#[from] projections::OpenError),
    /// The corpus could not open.
    #[error("the corpus: {0}")]
    Corpus(#[from] sources::CorpusError),
    /// The sentence encoder (or the vectors it gave) could not be read.
    #[error("the search by meaning: {0}")]
    Similarity(#[from] sources::SimilarityError),
    /// The jobs folder could not be read.
    #[error("{0}")]
    Jobs(#[from] crate::jobs::JobsOpenError),
    /// What the storage database shares (contracts, jobs, the corpus's documents) could not
    /// be read.
    #[error("the storage database: {0}")]
    Shared(String),
}

impl Service {
    /// Opens the service over its data directory, creating what is missing.
    ///
    /// With `options.ledger.read_only` the service changes nothing in the data directory: the
    /// ledger opens read-only, the read models live in memory only, the content store is read
    /// as it is, the corpus is an empty one in memory (an audit reads the ledger's record of
    /// each search; it does not search), and jobs are read as they are. Every write is refused.
    pub fn open(options: ServiceOptions) -> Result<Service, OpenError> {
        let read_only = options.ledger.read_only;
        let started = std::time::Instant::now();
        let ledger = open_ledger(&options)?;
        let ledger_opened = started.elapsed();
        let projector = Projector::open(
            ledger.clone(),
            ProjectorOptions {
                limits: options.projections.clone(),
                snapshot_dir: (!read_only).then(|| options.layout.projections.clone()),
            },
        )?;
        let projections_opened = started.elapsed();
        let follower = Follower::start(&ledger, &projector);
        if let Some(stall) = projector.stall() {
            tracing::error!(?stall, "the projection stopped at an event it cannot fold");
        }
        let earlier_content = earlier_content(&options);
        let (corpus, shared_corpus) = open_corpus(&options)?;
        let clock = Arc::clone(&options.ledger.clock);
        let mut registry = load_registry(&options);
        let shared_contracts = shared_contracts(&options, &mut registry)?;
        let (tools_version, _) = tokio::sync::watch::channel(0);
        let jobs = open_jobs(&options)?;
        let corpus_missing = if read_only {
            None
        } else {
            missing_corpus(&projector, &corpus)
        };
        // Where an open's time goes, for an operator waiting on a large ledger.
        tracing::info!(
            events = ledger.head().size,
            tasks = projector.status().tasks,
            ledger_ms = ledger_opened.as_millis() as u64,
            read_models_ms = (projections_opened - ledger_opened).as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "the service is open"
        );
        if let Some(why) = &corpus_missing {
            tracing::error!(%why, "the corpus is missing");
        }
        Ok(Service {
            inner: Arc::new(Inner {
                task_locks: (0..TASK_LOCK_SHARDS)
                    .map(|_| tokio::sync::Mutex::new(()))
                    .collect(),
                ledger,
                projector,
                earlier_content,
                corpus,
                shared_corpus,
                options,
                clock,
                registry: std::sync::RwLock::new(registry),
                shared_contracts,
                tools_version,
                metrics: crate::metrics::Metrics::default(),
                jobs,
                corpus_missing,
                follower: std::sync::Mutex::new(follower),
                held_keys: Default::default(),
            }),
        })
    }

    /// The embedded corpus as `/health` shows it: its documents, its index state, the sentence
    /// encoder its searches rank by meaning with (null when they rank by terms alone), and,
    /// when the ledger records searches of a corpus that is no longer there, why it is missing.
    pub fn corpus_health(&self) -> serde_json::Value {
        let state = self.corpus().index_state();
        serde_json::json!({
            "documents": state.documents,
            "index_state": state.id,
            "encoder": self.corpus().similarity().map(|s| s.encoder_id()),
            "missing": self.corpus_missing(),
        })
    }

    /// Why the corpus cannot be searched, when it cannot: it was found empty under searches of
    /// documents, and nothing has been ingested since.
    pub(crate) fn corpus_missing(&self) -> Option<&str> {
        if self.inner.corpus.index_state().documents > 0 {
            return None;
        }
        self.inner.corpus_missing.as_deref()
    }

    /// Why the service refuses writes, if it does: the ledger refuses appends (see
    /// [`Ledger::poisoned`]).
    pub fn refusing_writes(&self) -> Option<String> {
        self.inner.ledger.poisoned()
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.inner.ledger
    }

    /// The read models.
    pub fn projector(&self) -> &Projector {
        &self.inner.projector
    }

    /// The corpus this node searches. With a storage database it first catches up with the
    /// database's documents (one query when nothing moved), so a document stored through any
    /// node is searched here from the next call on; when the database cannot be read, the
    /// index is searched as it stands and the failure logged.
    pub fn corpus(&self) -> &Corpus {
        if let Some(shared) = &self.inner.shared_corpus
            && let Err(e) = shared.catch_up(&self.inner.corpus)
        {
            tracing::warn!(error = %e, "the corpus could not catch up with the storage database");
        }
        &self.inner.corpus
    }

    /// Reads every document under `paths` and adds it to the corpus: through the storage
    /// database when there is one, so every node's index gets it.
    pub fn ingest_files(
        &self,
        paths: &[std::path::PathBuf],
        defaults: &sources::Defaults,
        progress: &mut dyn FnMut(sources::IngestProgress<'_>),
    ) -> Result<sources::IngestReport, ServiceError> {
        match &self.inner.shared_corpus {
            Some(shared) => shared
                .ingest(&self.inner.corpus, paths, defaults, progress)
                .map_err(ServiceError::unavailable),
            None => self
                .inner
                .corpus
                .ingest(paths, defaults, progress)
                .map_err(ServiceError::unavailable),
        }
    }

    /// What the service counts, in the Prometheus text format.
    pub fn metrics(&self) -> String {
        let mut text = self
            .inner
            .metrics
            .render(self.inner.ledger.head().size, self.inner.projector.lag());
        // Whether this node can sign checkpoints: 0 when its key is not the one the checkpoint
        // log names (another node rotated it), so an alert can ask for the new key.
        let usable = u8::from(self.inner.ledger.public_key().is_ok());
        text.push_str(
            "# HELP research_ledger_signing_key_usable 1 when this node holds the key the checkpoint log names.\n\
             # TYPE research_ledger_signing_key_usable gauge\n",
        );
        text.push_str(&format!("research_ledger_signing_key_usable {usable}\n"));
        // Appends over syncs is the group commit's size: how many writes share each sync.
        text.push_str(
            "# HELP research_ledger_storage_syncs_total Durable syncs (or commits) made by storage's write path since the ledger opened.\n\
             # TYPE research_ledger_storage_syncs_total counter\n",
        );
        let syncs = self.inner.ledger.storage_syncs();
        text.push_str(&format!("research_ledger_storage_syncs_total {syncs}\n"));
        text
    }

    /// Verifies what was appended since the last verification, counting failures.
    pub fn verify(&self) -> ledger::VerifyReport {
        let report = self.inner.ledger.verify();
        if !report.is_intact() {
            self.count_failed_verification();
        }
        report
    }

    /// Counts a verification that found the ledger damaged.
    pub(crate) fn count_failed_verification(&self) {
        self.inner.metrics.verification_failed();
    }

    /// The options the service was opened with.
    pub fn options(&self) -> &ServiceOptions {
        &self.inner.options
    }

    /// Stops running pipeline jobs between two steps (they read `interrupted`), persists
    /// derived state and stops the ledger's writer; nothing acknowledged is lost without it,
    /// but the next open has less to do.
    pub fn shutdown(&self) {
        self.inner.jobs.stop_all();
        if let Some(mut follower) = self
            .inner
            .follower
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            follower.stop();
        }
        if !self.inner.options.ledger.read_only
            && let Err(e) = self.inner.projector.snapshot()
        {
            tracing::warn!(error = %e, "no projection snapshot on shutdown");
        }
        // A signed checkpoint of everything appended, so the next audit starts from it.
        let ledger = &self.inner.ledger;
        let covered = ledger
            .latest_checkpoint()
            .ok()
            .flatten()
            .map_or(0, |c| c.tree_size);
        if ledger.head().size > covered && ledger.poisoned().is_none() {
            match ledger.checkpoint() {
                Ok(c) => tracing::info!(tree_size = c.tree_size, "checkpoint written on shutdown"),
                Err(e) => tracing::error!(error = %e, "no checkpoint on shutdown"),
            }
        }
        ledger.shutdown();
    }

    /// A task's state now.
    pub fn state(&self, task_id: &str) -> Result<Arc<TaskState>, ServiceError> {
        Ok(self.inner.projector.state(task_id)?)
    }

    /// A task's state at a version (time travel), or now.
    pub fn state_at(
        &self,
        task_id: &str,
        version: Option<u64>,
    ) -> Result<Arc<TaskState>, ServiceError> {
        match version {
            None => self.state(task_id),
            Some(v) => Ok(self.inner.projector.state_at(task_id, v)?),
        }
    }

    /// Runs one command: idempotency, expected version, decide, append, catch up. `make`
    /// builds the command from the task's current state and may be called again if another
    /// writer moved the task first (only when the caller gave no expected version). Blocking;
    /// from async code use [`Service::write_with_content_async`].
    pub fn write(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        target: Target<'_>,
        guard: &WriteOptions,
        make: &mut dyn FnMut(&TaskState) -> Result<Command, ServiceError>,
    ) -> Result<Written, ServiceError> {
        let mut make = |state: &TaskState, _: &mut Attachments| make(state);
        self.write_with_content(caller, tool, arguments, target, guard, &mut make)
    }

    /// [`Service::write`] of a command that cites full texts: `make` attaches them as it builds
    /// the command, and those the decided events cite go into the append, durable with the
    /// events by the same sync. Blocking; from async code use
    /// [`Service::write_with_content_async`].
    pub fn write_with_content(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        target: Target<'_>,
        guard: &WriteOptions,
        make: &mut dyn FnMut(&TaskState, &mut Attachments) -> Result<Command, ServiceError>,
    ) -> Result<Written, ServiceError> {
        pollster::block_on(
            self.write_with_content_async(caller, tool, arguments, target, guard, make),
        )
    }

    /// [`Service::write_with_content`], resolving when the events and their content are
    /// durable (or refused). The one implementation of a write: the blocking forms wait on it.
    /// Everything but the append is done without waiting (a task's state, the decision, the
    /// fold of what was written); a write to a task whose state is not in memory, or on a
    /// ledger other nodes also write, may read a disk or the database on the way, and is for a
    /// thread that may block.
    pub async fn write_with_content_async<M>(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        target: Target<'_>,
        guard: &WriteOptions,
        make: &mut M,
    ) -> Result<Written, ServiceError>
    where
        M: FnMut(&TaskState, &mut Attachments) -> Result<Command, ServiceError> + ?Sized,
    {
        let inner = &self.inner;
        let task_id = target.id().to_owned();
        let _task = self.task_lock(&task_id).lock().await;
        let idempotency = self.idempotency(caller, tool, arguments, guard)?;
        let refused = |error: ServiceError| self.refused(idempotency.as_ref(), error);

        let mut attached = Attachments::new(inner.options.blobs.content_bytes_max);
        let mut attempts = 0;
        let mut synced = false;
        loop {
            attempts += 1;
            let state = match self.expected_state(target, guard.expected_version, &mut synced) {
                Ok(Some(state)) => state,
                Ok(None) => continue,
                Err(e) => return refused(e),
            };
            let current = state.version();
            attached.clear();
            let decided = match make(&state, &mut attached).and_then(|c| self.decide(&state, &c)) {
                Ok(decided) => decided,
                Err(e) => return refused(e),
            };
            // The state is not held across the append: the fold that follows changes the
            // cached state in place only when no one else holds it, and would copy it whole
            // otherwise.
            drop(state);
            let mut request = append_request(caller, &task_id, current, &decided, &idempotency);
            request.content = attached.cited_by(&decided);
            let started = std::time::Instant::now();
            match inner.ledger.append_async(request).await {
                Ok(receipt) => return self.written(task_id, receipt, decided, started),
                Err(AppendError::VersionConflict { current: now, .. }) => {
                    let retry = guard.expected_version.is_none()
                        && attempts < inner.options.write_attempts_max
                        && !matches!(target, Target::New(_));
                    if !retry {
                        return Err(ServiceError::SessionConflict {
                            task_id,
                            expected_version: current,
                            current_version: now,
                        });
                    }
                    // Another writer moved the task: catch up and decide again.
                    inner
                        .projector
                        .catch_up()
                        .map_err(ServiceError::unavailable)?;
                }
                Err(e) => return Err(append_refused(e)),
            }
        }
    }

    /// [`Service::write_state`], refused with a session conflict when the caller expected
    /// another version.
    fn expected_state(
        &self,
        target: Target<'_>,
        expected: Option<u64>,
        synced: &mut bool,
    ) -> Result<Option<Arc<TaskState>>, ServiceError> {
        let Some(state) = self.write_state(target, expected, synced)? else {
            return Ok(None);
        };
        match expected {
            Some(expected) if expected != state.version() => Err(ServiceError::SessionConflict {
                task_id: target.id().to_owned(),
                expected_version: expected,
                current_version: state.version(),
            }),
            _ => Ok(Some(state)),
        }
    }

    /// Whether a write to `task_id` can be made on an async task's own thread: its state is in
    /// memory and the ledger is this node's alone, so nothing on the way but the append waits.
    pub(crate) fn writes_without_blocking(&self, task_id: &str) -> bool {
        !self.inner.ledger.is_shared() && self.inner.projector.holds_state(task_id)
    }

    /// The task's state a write decides on; `None` when a ledger other nodes also write was
    /// just followed because the task was unknown here or not at the expected version, and the
    /// state is to be read again.
    fn write_state(
        &self,
        target: Target<'_>,
        expected: Option<u64>,
        synced: &mut bool,
    ) -> Result<Option<Arc<TaskState>>, ServiceError> {
        let state = match target {
            Target::New(_) => Arc::new(TaskState::new()),
            Target::Existing(id) => match self.state(id) {
                Ok(state) => state,
                Err(ServiceError::NotFound { .. }) if !*synced && self.sync_shared()? => {
                    *synced = true;
                    return Ok(None);
                }
                Err(e) => return Err(e),
            },
        };
        if expected.is_some_and(|v| v != state.version()) && !*synced && self.sync_shared()? {
            *synced = true;
            return Ok(None);
        }
        Ok(Some(state))
    }

    /// On a ledger other nodes also write, reads what they committed into the read models, so
    /// that a command decided here sees a task another node opened or moved; false (nothing to
    /// do) on a ledger of its own.
    fn sync_shared(&self) -> Result<bool, ServiceError> {
        let ledger = &self.inner.ledger;
        if !ledger.is_shared() {
            return Ok(false);
        }
        let head = ledger.sync().map_err(ServiceError::unavailable)?;
        if head.size > 0 {
            self.inner
                .projector
                .catch_up_to(head.size - 1)
                .map_err(ServiceError::unavailable)?;
        }
        Ok(true)
    }

    /// The lock that serialises writes to one task (one of a fixed set of shards). An async
    /// lock: a write holds it across its append, which it awaits.
    fn task_lock(&self, task_id: &str) -> &tokio::sync::Mutex<()> {
        let shard = blake3::hash(task_id.as_bytes()).as_bytes()[0] as usize % TASK_LOCK_SHARDS;
        &self.inner.task_locks[shard]
    }

    /// The write's idempotency key with the fingerprint of what it asks, after checking the
    /// key's length.
    fn idempotency(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        guard: &WriteOptions,
    ) -> Result<Option<Idempotency>, ServiceError> {
        let Some(key) = &guard.idempotency_key else {
            return Ok(None);
        };
        let max = self.inner.ledger.limits().idempotency_key_bytes_max;
        if key.is_empty() || key.len() > max {
            return Err(ServiceError::invalid(
                "idempotency_key",
                format!("an idempotency key is 1 to {max} bytes"),
            ));
        }
        Ok(Some(Idempotency {
            key: key.clone(),
            fingerprint: fingerprint(tool, arguments, &caller.actor),
        }))
    }

    /// The events a command decides on the state, at the service's clock and limits.
    fn decide(
        &self,
        state: &TaskState,
        command: &Command,
    ) -> Result<Vec<research::NewEvent>, ServiceError> {
        let context = CommandContext {
            now: self.inner.clock.now(),
            limits: self.inner.options.research.clone(),
        };
        Ok(research::decide(state, command, &context)?)
    }

    /// The result of an append the ledger accepted: the original result when the key was used
    /// before for this very command, else the events just written, folded into the read model.
    fn written(
        &self,
        task_id: String,
        receipt: ledger::Receipt,
        decided: Vec<research::NewEvent>,
        started: std::time::Instant,
    ) -> Result<Written, ServiceError> {
        if receipt.replayed {
            // The key was used before, for this very command: its original result, from the
            // receipt the ledger answered with.
            let first = receipt.events.first().map_or(0, |e| e.seq);
            return self.replay(
                &receipt.stream,
                receipt.stream_version,
                first,
                receipt.events.len(),
            );
        }
        self.count_written(receipt.events.len(), started.elapsed(), &decided);
        // Durable from here on: a failure to show the result is no failure to write.
        let last = receipt.events.last().map_or(0, |e| e.seq);
        // The events just written, folded from the writer's memory: nothing is read back,
        // decoded or encoded again.
        self.inner
            .projector
            .fold_appended(last)
            .map_err(ServiceError::outcome_unknown)?;
        let state = self.state(&task_id)?;
        let events = receipt
            .events
            .iter()
            .zip(decided)
            .map(|(r, d)| (r.seq, r.hash, d.event))
            .collect();
        Ok(Written {
            task_id,
            session_version: receipt.stream_version,
            events,
            replayed: false,
            state,
        })
    }

    /// The answer to a command refused before its append. The key is checked before anything
    /// else, but only where the answer can differ: a command that is decided and appended
    /// carries its key to the ledger, whose writer checks it (once, atomically with the append)
    /// and answers a retry with the original receipt; a command refused before the append
    /// looks the key up here, once, since a retry of a command that succeeded must get its
    /// original result even when the same command would now be refused.
    fn refused(
        &self,
        idempotency: Option<&Idempotency>,
        error: ServiceError,
    ) -> Result<Written, ServiceError> {
        let Some(idem) = idempotency else {
            return Err(error);
        };
        self.committed(idem)?.ok_or(error)
    }

    /// For a tool that works beyond the ledger before it writes (asking registered sources):
    /// the original result when the call's idempotency key was committed for this very command,
    /// else the key, held for this call until it has written. A retry of a write that landed
    /// must not repeat that work, which would take as long as the first time and record calls
    /// again; nor must a retry sent while the first call is still at it (after a 504, the first
    /// goes on): it waits for that call to end, then answers from its record, or, when the
    /// first ended without writing, does the work itself. Keys are held in this process: on a
    /// shared database, another node's call with the same key is not waited for (its write is
    /// still recorded once).
    pub(crate) fn hold_key(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        guard: &WriteOptions,
    ) -> Result<KeyHold, ServiceError> {
        let Some(idem) = self.idempotency(caller, tool, arguments, guard)? else {
            return Ok(KeyHold::Held(None));
        };
        let held = loop {
            let running = {
                let mut held = self
                    .inner
                    .held_keys
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                match held.get(&idem.key) {
                    Some(call) => call.clone(),
                    None => {
                        let call = Arc::new(KeyedCall::default());
                        held.insert(idem.key.clone(), call.clone());
                        break HeldKey {
                            service: self.clone(),
                            key: idem.key.clone(),
                            call,
                        };
                    }
                }
            };
            running.wait();
        };
        // Looked up with the key held: a call that held it before has written or never will.
        match self.committed(&idem)? {
            Some(written) => Ok(KeyHold::Earlier(written)),
            None => Ok(KeyHold::Held(Some(held))),
        }
    }

    /// The original result of the command the key was committed for, when it is this one;
    /// refused when the key was used for another command; `None` when it is not committed.
    fn committed(&self, idem: &Idempotency) -> Result<Option<Written>, ServiceError> {
        match self
            .inner
            .ledger
            .idempotency(&idem.key)
            .map_err(ServiceError::unavailable)?
        {
            Some(record) if record.fingerprint == idem.fingerprint => self
                .replay(
                    &record.stream,
                    record.stream_version,
                    record.first_seq,
                    record.event_count as usize,
                )
                .map(Some),
            Some(_) => Err(ServiceError::IdempotencyKeyReused {
                key: idem.key.clone(),
            }),
            None => Ok(None),
        }
    }

    /// Counts an append and the verdicts and adjudications it recorded.
    fn count_written(
        &self,
        events: usize,
        took: std::time::Duration,
        decided: &[research::NewEvent],
    ) {
        let metrics = &self.inner.metrics;
        metrics.append(events as u64, took);
        for event in decided {
            match &event.event {
                research::Event::ConflictsAdjudicated(c) => {
                    for a in &c.adjudications {
                        metrics.conflict(a.tier.name());
                    }
                }
                research::Event::ConflictResolved(_) | research::Event::AdjudicationAppealed(_) => {
                    metrics.conflict("human");
                }
                research::Event::ConclusionIssued(c) => {
                    metrics.conclusion(c.stance.name());
                }
                _ => {}
            }
        }
    }

    /// The original result of a command, rebuilt from the events it wrote: `count` events of
    /// `stream` from `first_seq`, which left the stream at `version`.
    fn replay(
        &self,
        stream: &str,
        version: u64,
        first_seq: u64,
        count: usize,
    ) -> Result<Written, ServiceError> {
        let inner = &self.inner;
        let last = first_seq + (count.max(1) as u64) - 1;
        inner
            .projector
            .catch_up_to(last)
            .map_err(ServiceError::unavailable)?;
        let recorded = inner
            .ledger
            .read_range(first_seq, count)
            .map_err(ServiceError::unavailable)?;
        if recorded.len() != count || recorded.iter().any(|e| e.stream != stream) {
            return Err(ServiceError::unavailable(format!(
                "the original events of a retried command are not at seq {first_seq}"
            )));
        }
        let mut events = Vec::with_capacity(recorded.len());
        for e in recorded {
            let event = research::decode(&e.kind, &e.payload).map_err(ServiceError::unavailable)?;
            events.push((e.seq, e.hash, event));
        }
        let state = inner.projector.state_at(stream, version)?;
        Ok(Written {
            task_id: stream.to_owned(),
            session_version: version,
            events,
            replayed: true,
            state,
        })
    }
}

/// The service's error for an append the ledger refused for a reason other than a lost race.
fn append_refused(error: AppendError) -> ServiceError {
    match error {
        AppendError::IdempotencyKeyReused { key } => ServiceError::IdempotencyKeyReused { key },
        AppendError::LimitExceeded { limit, max, actual } => ServiceError::LimitExceeded {
            limit: limit.to_owned(),
            max,
            actual,
        },
        e => ServiceError::from(e),
    }
}

/// The append of a decided command: the task's new events, conditional on the version they were
/// decided on.
fn append_request(
    caller: &Caller,
    task_id: &str,
    version: u64,
    decided: &[research::NewEvent],
    idempotency: &Option<Idempotency>,
) -> AppendRequest {
    AppendRequest {
        stream: task_id.to_owned(),
        expected: ExpectedVersion::Exact(version),
        actor: caller.actor.clone(),
        events: new_events(decided),
        idempotency: idempotency.clone(),
        content: Vec::new(),
    }
}

/// The ledger's form of decided events: kind, encoded payload and causes.
fn new_events(decided: &[research::NewEvent]) -> Vec<NewEvent> {
    decided
        .iter()
        .map(|e| NewEvent {
            kind: e.event.kind().to_owned(),
            payload: research::encode(&e.event),
            causation: e
                .causation
                .iter()
                .map(|c| match c {
                    research::Cause::Event(hash) => Causation::Event(Digest(*hash)),
                    research::Cause::InBatch(i) => Causation::InBatch(*i),
                })
                .collect(),
        })
        .collect()
}

/// The fingerprint of a command: its tool, its arguments other than the expected version and
/// the key (in a canonical JSON form, keys sorted), and the actor.
pub fn fingerprint(tool: &str, arguments: &Value, actor: &str) -> Digest {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"research-ledger/command/v1\0");
    hasher.update(tool.as_bytes());
    hasher.update(b"\0");
    let mut canonical = String::new();
    write_canonical(arguments, true, &mut canonical);
    hasher.update(canonical.as_bytes());
    hasher.update(b"\0");
    hasher.update(actor.as_bytes());
    Digest(*hasher.finalize().as_bytes())
}

/// A value's canonical JSON text: object keys sorted, no whitespace.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, false, &mut out);
    out
}

fn write_canonical(value: &Value, top: bool, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|k| !(top && (*k == "expected_version" || *k == "idempotency_key")))
                .collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*key).clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(*key) {
                    write_canonical(v, false, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, false, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// On a ledger other nodes also write, the thread that folds what they commit into the read
/// models as the ledger's writer follows it, so that a read on this node sees another node's
/// write within the follow bound even when this node writes nothing. A read or a fold that
/// fails (the database lost, a session it dropped) is tried again from where the read models
/// stand, after a pause that grows from [`FOLLOW_RETRY_FIRST`] to [`FOLLOW_RETRY_MAX`]: the
/// thread ends only when the service shuts down or goes away (its subscription holds the
/// ledger, so the ledger's end alone would never come).
#[derive(Debug)]
pub(crate) struct Follower {
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The first pause before the read models try again to follow other nodes after a failure.
pub(crate) const FOLLOW_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest such pause, however long the failures last.
pub(crate) const FOLLOW_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

impl Follower {
    fn start(ledger: &Ledger, projector: &Projector) -> Option<Follower> {
        if !ledger.is_shared() {
            return None;
        }
        let (ledger, projector) = (ledger.clone(), projector.clone());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        let started = runtime.map_err(|e| e.to_string()).and_then(|runtime| {
            std::thread::Builder::new()
                .name("projection-follower".into())
                .spawn(move || runtime.block_on(follow_other_nodes(ledger, projector, stopped)))
                .map_err(|e| e.to_string())
        });
        match started {
            Ok(thread) => Some(Follower {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "the read models do not follow other nodes");
                None
            }
        }
    }

    /// Stops the thread and waits for it: a fold in progress finishes first.
    fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The follower's loop: each event other nodes committed, as the ledger's writer hands it out,
/// folded with everything before it; after a failure, a pause and a new subscription from
/// where the read models stand. Said once when following fails and once when it works again.
async fn follow_other_nodes(
    ledger: Ledger,
    projector: Projector,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let mut pause = FOLLOW_RETRY_FIRST;
    let mut failing = false;
    loop {
        let mut subscription = ledger.subscribe(projector.next_seq());
        let failure = loop {
            let event = tokio::select! {
                _ = stopped.changed() => return,
                event = subscription.next() => event,
            };
            let folded = match event {
                Ok(event) => projector.catch_up_to(event.seq).map_err(|e| e.to_string()),
                Err(ledger::SubscriptionError::Closed) => return,
                Err(e) => Err(e.to_string()),
            };
            match folded {
                Ok(_) if failing => {
                    tracing::info!("the read models follow other nodes again");
                    (failing, pause) = (false, FOLLOW_RETRY_FIRST);
                }
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        if !failing {
            tracing::warn!(error = %failure, "the read models could not follow other nodes; trying again");
            failing = true;
        }
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(FOLLOW_RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_fingerprint_ignores_key_order_and_the_guard_arguments() {
        let a = json!({"task_id": "t", "query": "q", "limit": 3, "expected_version": 4, "idempotency_key": "k"});
        let b = json!({"limit": 3, "query": "q", "task_id": "t"});
        assert_eq!(fingerprint("x", &a, "alice"), fingerprint("x", &b, "alice"));
        assert_ne!(fingerprint("x", &a, "alice"), fingerprint("x", &a, "bob"));
        assert_ne!(fingerprint("x", &a, "alice"), fingerprint("y", &a, "alice"));
        let c = json!({"limit": 4, "query": "q", "task_id": "t"});
        assert_ne!(fingerprint("x", &b, "alice"), fingerprint("x", &c, "alice"));
        // Nested keys named like the guards are arguments like any other.
        let d = json!({"rules": {"expected_version": 1}});
        let e = json!({"rules": {}});
        assert_ne!(fingerprint("x", &d, "a"), fingerprint("x", &e, "a"));
    }
}
