//! Export bundles: a self-contained JSON file of some tasks or the whole ledger, and the offline
//! check of one.
//!
//! A bundle holds each event's stored bytes (base64) with a decoded view for people, an
//! inclusion proof of each event against one checkpoint that covers them all, the whole
//! checkpoint log (keys, rotations, checkpoints) from the first key to the current one, the
//! content blobs the events cite, and a manifest signed by the ledger's key that lists exactly
//! which events, task heads, blobs and idempotency keys it holds. `docs/bundle-format.md` gives
//! the format; [`verify_bundle`] checks everything in it with no data directory, and says where
//! the first problem is.
//!
//! The ledger knows nothing of research, so the caller supplies the decoded view of a payload
//! and the content hashes an event cites; verification asks the same functions again and
//! compares, which is how a doctored view is caught.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use ledger_proof::{
    Checkpoint, Fingerprint, IdempotencyLine, KeyChain, Manifest, MerkleHasher, PublicKey, Sha256,
    SignedManifest, Timestamp, VerifierKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::{Digest, RecordedEvent, decode_stored};
use crate::error::{ProofError, ReadError, SigningError};
use crate::key_history::KeyHistory;
use crate::ledger::Ledger;
use crate::storage::{CheckpointEntry, IdempotencyRecord, RawEvent, Standing};
use crate::tree::StoredNodes;

/// The format name every bundle carries.
pub const BUNDLE_FORMAT: &str = "research-ledger/bundle/v1";

/// Which events a bundle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every event of the ledger up to the covering checkpoint.
    All,
    /// Every event of these tasks (streams) up to the covering checkpoint.
    Tasks(Vec<String>),
}

impl Scope {
    fn manifest_text(&self, without_content: bool) -> String {
        let base = match self {
            Scope::All => "all".to_owned(),
            Scope::Tasks(tasks) => format!("tasks:{}", tasks.join(",")),
        };
        if without_content {
            format!("{base}+no-content")
        } else {
            base
        }
    }
}

/// Bytes written as standard base64 in JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base64(pub Vec<u8>);

impl Serialize for Base64 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Base64 {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Base64)
            .map_err(serde::de::Error::custom)
    }
}

/// One event in a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleEvent {
    /// Its seq.
    pub seq: u64,
    /// Its hash.
    pub hash: Digest,
    /// Its stored bytes, exactly as the log holds them.
    pub stored: Base64,
    /// The same event decoded, for people. Checked against `stored`.
    pub decoded: Value,
    /// Its inclusion proof (audit path) against the bundle's checkpoint.
    pub proof: Vec<Digest>,
}

/// A content blob an event cites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentBlob {
    /// blake3 of the bytes.
    pub hash: Digest,
    /// The bytes.
    pub bytes: Base64,
}

/// An export bundle. See the module documentation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// When it was made.
    pub created_at: Timestamp,
    /// Which events it holds.
    pub scope: Scope,
    /// True when the content blobs were left out on purpose.
    pub without_content: bool,
    /// The whole checkpoint log, in order: keys introduced, rotations, checkpoints.
    pub checkpoint_log: Vec<CheckpointEntry>,
    /// The checkpoint every event's proof stands on.
    pub checkpoint: Checkpoint,
    /// The events, in seq order.
    pub events: Vec<BundleEvent>,
    /// The content blobs the events cite.
    pub content: Vec<ContentBlob>,
    /// The idempotency keys of the commits in the bundle (whole-ledger bundles), so that a
    /// restored ledger still answers a retried command with its original receipt.
    pub idempotency: Vec<IdempotencyRecord>,
    /// The signed list of all of the above.
    pub manifest: SignedManifest,
}

/// What the caller supplies that the ledger cannot know.
pub struct ExportSpec<'a> {
    /// Which events.
    pub scope: Scope,
    /// Leave the content blobs out.
    pub without_content: bool,
    /// The decoded view of an event's payload.
    pub payload_view: &'a dyn Fn(&RecordedEvent) -> Result<Value, String>,
    /// The content hashes an event cites.
    pub cited_content: &'a dyn Fn(&RecordedEvent) -> Vec<Digest>,
    /// The bytes of a content blob.
    pub content: &'a dyn Fn(&Digest) -> Result<Vec<u8>, String>,
}

impl std::fmt::Debug for ExportSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportSpec")
            .field("scope", &self.scope)
            .field("without_content", &self.without_content)
            .finish_non_exhaustive()
    }
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// A task asked for has no events.
    #[error("there is no task {0}")]
    UnknownTask(String),
    /// The manifest could not be signed.
    #[error("cannot sign the bundle's manifest: {0}")]
    Signing(#[from] SigningError),
    /// The ledger has no checkpoint yet for the bundle to stand on.
    #[error(
        "the ledger has no signed checkpoint yet; a server writes one within its checkpoint interval, or run `research-ledger checkpoint`"
    )]
    NoCheckpoint,
    /// Reading the log failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A proof could not be made.
    #[error(transparent)]
    Proof(#[from] ProofError),
    /// The decoded view of an event could not be made.
    #[error("seq {seq}: {detail}")]
    View {
        /// Where.
        seq: u64,
        /// What.
        detail: String,
    },
    /// A cited content blob could not be read.
    #[error("content {hash}: {detail}")]
    Content {
        /// Which.
        hash: Digest,
        /// What.
        detail: String,
    },
}

/// The decoded view of an event: its envelope, and the payload as the caller decodes it.
pub fn event_view(event: &RecordedEvent, payload: Value) -> Value {
    serde_json::json!({
        "seq": event.seq,
        "stream": event.stream,
        "stream_version": event.stream_version,
        "event_id": event.event_id.to_string(),
        "kind": event.kind,
        "recorded_at": event.recorded_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "actor": event.actor,
        "causation": event.causation.iter().map(|d| d.to_hex()).collect::<Vec<_>>(),
        "prev_hash": event.prev_hash.to_hex(),
        "hash": event.hash.to_hex(),
        "payload": payload,
    })
}

impl Ledger {
    /// Makes an export bundle. It stands on the latest checkpoint, and holds the events that
    /// checkpoint covers: when it does not cover the head yet, the export waits for the
    /// periodic checkpointer (at most one interval of it). An export never writes a
    /// checkpoint itself.
    pub fn export(&self, spec: &ExportSpec<'_>) -> Result<Bundle, ExportError> {
        let head = self.head().size;
        let checkpoint = self
            .await_checkpoint(head)?
            .ok_or(ExportError::NoCheckpoint)?;
        let size = checkpoint.tree_size;
        let raw = self.events_in_scope(&spec.scope, size)?;
        let (events, heads, cited) = self.bundle_events(spec, &raw, size)?;
        let mut content = Vec::new();
        if !spec.without_content {
            for hash in &cited {
                let bytes = (spec.content)(hash).map_err(|detail| ExportError::Content {
                    hash: *hash,
                    detail,
                })?;
                content.push(ContentBlob {
                    hash: *hash,
                    bytes: Base64(bytes),
                });
            }
        }
        let idempotency = match spec.scope {
            Scope::All => self
                .idempotency_records()?
                .into_iter()
                .filter(|r| r.first_seq + u64::from(r.event_count) <= size)
                .collect(),
            Scope::Tasks(_) => Vec::new(),
        };
        let created_at = Timestamp::from_datetime(chrono::Utc::now())
            .map_err(|e| SigningError::Time(e.to_string()))?;
        let checkpoint_log = self.checkpoint_entries()?;
        let manifest = Manifest {
            scope: spec.scope.manifest_text(spec.without_content),
            created_at,
            tree_size: size,
            root: checkpoint.root,
            events: events.iter().map(|e| (e.seq, e.hash)).collect(),
            tasks: heads
                .iter()
                .map(|(task, (version, hash))| (task.clone(), *version, *hash))
                .collect(),
            content: content.iter().map(|c| c.hash).collect(),
            idempotency: idempotency.iter().map(idempotency_line).collect(),
            checkpoint_log: checkpoint_log.iter().map(log_line).collect(),
        };
        let manifest = self.sign_manifest(manifest)?;
        Ok(Bundle {
            format: BUNDLE_FORMAT.into(),
            created_at,
            scope: spec.scope.clone(),
            without_content: spec.without_content,
            checkpoint_log,
            checkpoint,
            events,
            content,
            idempotency,
            manifest,
        })
    }

    /// The stored events of `scope` below `size`, in seq order.
    fn events_in_scope(&self, scope: &Scope, size: u64) -> Result<Vec<RawEvent>, ExportError> {
        let core = self.core();
        let mut raw: Vec<RawEvent> = Vec::new();
        match scope {
            Scope::All => {
                let mut next = 0;
                while next < size {
                    let chunk = core
                        .storage
                        .read_range(next, 4096)
                        .map_err(ReadError::from)?;
                    let Some(last) = chunk.last() else { break };
                    next = last.seq + 1;
                    raw.extend(chunk.into_iter().filter(|r| r.seq < size));
                }
            }
            Scope::Tasks(tasks) => {
                for task in tasks {
                    let mut from = 1;
                    let before = raw.len();
                    loop {
                        let chunk = core
                            .storage
                            .read_stream(task, from, 4096)
                            .map_err(ReadError::from)?;
                        if chunk.is_empty() {
                            break;
                        }
                        from += chunk.len() as u64;
                        raw.extend(chunk.into_iter().filter(|r| r.seq < size));
                    }
                    if raw.len() == before && self.stream_version(task)? == 0 {
                        return Err(ExportError::UnknownTask(task.clone()));
                    }
                }
                raw.sort_by_key(|r| r.seq);
                raw.dedup_by_key(|r| r.seq);
            }
        }
        Ok(raw)
    }

    /// Each event with its view and proof, each task's head, and the blobs they cite.
    #[allow(clippy::type_complexity)]
    fn bundle_events(
        &self,
        spec: &ExportSpec<'_>,
        raw: &[RawEvent],
        size: u64,
    ) -> Result<
        (
            Vec<BundleEvent>,
            BTreeMap<String, (u64, Digest)>,
            Vec<Digest>,
        ),
        ExportError,
    > {
        let core = self.core();
        let nodes = StoredNodes(&*core.storage);
        let mut events = Vec::with_capacity(raw.len());
        let mut heads: BTreeMap<String, (u64, Digest)> = BTreeMap::new();
        let mut cited: Vec<Digest> = Vec::new();
        let mut seen = BTreeSet::new();
        for stored in raw {
            let event = core.decode(stored)?;
            let payload = (spec.payload_view)(&event).map_err(|detail| ExportError::View {
                seq: event.seq,
                detail,
            })?;
            let path =
                ledger_proof::inclusion_proof(&Sha256, &nodes, event.seq, size).map_err(|e| {
                    ExportError::View {
                        seq: event.seq,
                        detail: format!("no inclusion proof: {e}"),
                    }
                })?;
            heads.insert(event.stream.clone(), (event.stream_version, event.hash));
            for hash in (spec.cited_content)(&event) {
                if seen.insert(hash) {
                    cited.push(hash);
                }
            }
            events.push(BundleEvent {
                seq: event.seq,
                hash: event.hash,
                stored: Base64(stored.bytes.to_vec()),
                decoded: event_view(&event, payload),
                proof: path,
            });
        }
        Ok((events, heads, cited))
    }
}

fn idempotency_line(r: &IdempotencyRecord) -> IdempotencyLine {
    (
        Digest(*blake3::hash(r.key.as_bytes()).as_bytes()),
        r.fingerprint,
        r.stream.clone(),
        r.first_seq,
        r.event_count,
        r.stream_version,
    )
}

/// The manifest's words for one checkpoint-log entry: what kind it is, the tree size it
/// states, and what covers the rest — its signature, or, for a key introduced (which nothing
/// signs), every field.
pub fn log_line(entry: &CheckpointEntry) -> String {
    match entry {
        CheckpointEntry::KeyIntroduced {
            public_key,
            tree_size,
            time,
            reason,
            origin,
        } => format!("key_introduced {tree_size} {time} {public_key} {origin} {reason}"),
        CheckpointEntry::Checkpoint(c) => format!("checkpoint {} {}", c.tree_size, c.signature),
        CheckpointEntry::Rotation(r) => format!("rotation {} {}", r.tree_size, r.signature),
        CheckpointEntry::Recovery(r) => format!("recovery {} {}", r.tree_size, r.signature),
        CheckpointEntry::Cosignature(c) => format!(
            "cosignature {} {} {} {}",
            c.tree_size, c.witness, c.timestamp, c.signature
        ),
    }
}

/// What the checker of a bundle supplies: the same decoding the exporter used, and what it
/// trusts.
pub struct BundleCheck<'a> {
    /// The key the auditor trusts; `None` trusts the first key inside the bundle (and says so).
    pub trusted_key: Option<PublicKey>,
    /// Witnesses whose cosignature of the bundle's checkpoint the auditor requires.
    pub witnesses: Vec<VerifierKey>,
    /// The decoded view of an event's payload.
    pub payload_view: &'a dyn Fn(&RecordedEvent) -> Result<Value, String>,
    /// The content hashes an event cites.
    pub cited_content: &'a dyn Fn(&RecordedEvent) -> Vec<Digest>,
}

impl std::fmt::Debug for BundleCheck<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BundleCheck")
            .field("trusted_key", &self.trusted_key)
            .field("witnesses", &self.witnesses)
            .finish_non_exhaustive()
    }
}

/// What a bundle was found to hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BundleReport {
    /// The key trust started from.
    pub trusted_key: PublicKey,
    /// True when that key was taken from the bundle itself rather than given.
    pub trusted_key_from_bundle: bool,
    /// Size of the checkpoint the bundle stands on.
    pub tree_size: u64,
    /// Events checked.
    pub events: u64,
    /// Task heads checked.
    pub tasks: Vec<(String, u64)>,
    /// Content blobs checked.
    pub content: u64,
    /// Checkpoints whose signatures were checked.
    pub checkpoints: u64,
    /// Witnesses whose cosignature of the bundle's checkpoint was checked.
    pub witnesses: Vec<String>,
    /// Breaks in the chain of signing keys, stated so nobody misses them.
    pub key_chain_breaks: Vec<String>,
}

/// The first problem found in a bundle, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{location}: {problem}")]
pub struct BundleFailure {
    /// Where: "event #3 (seq 17)", "manifest", "checkpoint log entry 2", …
    pub location: String,
    /// What is wrong.
    pub problem: String,
}

fn fail<T>(location: impl Into<String>, problem: impl Into<String>) -> Result<T, BundleFailure> {
    Err(BundleFailure {
        location: location.into(),
        problem: problem.into(),
    })
}

/// Parses and checks a bundle. Largest accepted text: `bytes_max`.
pub fn verify_bundle_text(
    text: &str,
    bytes_max: usize,
    check: &BundleCheck<'_>,
) -> Result<(Bundle, BundleReport), BundleFailure> {
    if text.len() > bytes_max {
        return fail(
            "the bundle",
            format!("{} bytes is over the limit of {bytes_max}", text.len()),
        );
    }
    let bundle = parse_bundle(text)?;
    let report = verify_bundle(&bundle, check)?;
    Ok((bundle, report))
}

/// Reads a bundle's text, refusing a field the format does not have anywhere. A refusal gives
/// the line and column, and the path of the value that is wrong (`idempotency[0]`,
/// `checkpoint_log[2]`, …) when it is not the whole bundle.
fn parse_bundle(text: &str) -> Result<Bundle, BundleFailure> {
    let refused = |path: Option<String>, e: serde_json::Error| BundleFailure {
        location: format!("the bundle, line {} column {}", e.line(), e.column()),
        problem: match path {
            Some(path) => format!("not a bundle: {path}: {e}"),
            None => format!("not a bundle: {e}"),
        },
    };
    let mut reader = serde_json::Deserializer::from_str(text);
    let bundle: Bundle = serde_path_to_error::deserialize(&mut reader).map_err(|e| {
        let path = e.path().to_string();
        refused((path != ".").then_some(path), e.into_inner())
    })?;
    reader.end().map_err(|e| refused(None, e))?;
    Ok(bundle)
}

/// The keys a bundle's check trusts: the chain of the era that holds the trusted key, and
/// which of its keys may sign what the bundle stands on.
struct Trust {
    chain: KeyChain,
    trusted: PublicKey,
    from_bundle: bool,
    /// Index of the era's `key_introduced` entry: the checkpoint log is checked from there.
    era_start: usize,
    /// Position of the trusted key in the chain: the bundle's checkpoint and manifest must be
    /// signed by it or a key after it.
    rank: usize,
    breaks: Vec<String>,
}

impl Trust {
    /// The position in the chain of the key with this fingerprint, if it may sign what the
    /// bundle stands on.
    fn signer(&self, fingerprint: &Fingerprint) -> Result<&PublicKey, String> {
        let (rank, epoch) = self
            .chain
            .epochs()
            .enumerate()
            .find(|(_, e)| e.fingerprint() == *fingerprint)
            .ok_or_else(|| format!("signed by key {fingerprint}, which is not in the chain"))?;
        if rank < self.rank {
            return Err(format!(
                "signed by key {fingerprint}, which the trusted key {} replaced",
                self.trusted.fingerprint()
            ));
        }
        Ok(epoch.key())
    }
}

/// The chain of keys of the era of the checkpoint log that holds `trusted` (or, when none is
/// given, of the first era, from its first key), and the breaks.
fn key_chain(log: &[CheckpointEntry], trusted: Option<PublicKey>) -> Result<Trust, BundleFailure> {
    if !matches!(log.first(), Some(CheckpointEntry::KeyIntroduced { .. })) {
        return fail(
            "checkpoint log entry 1",
            "the log does not start with a signing key",
        );
    }
    let history = KeyHistory::of(log);
    let breaks: Vec<String> = history
        .breaks()
        .iter()
        .map(|era| {
            format!(
                "checkpoint log entry {}: key {} starts a new chain at tree size {}: {}",
                era.entry + 1,
                era.first.fingerprint(),
                era.tree_size,
                era.reason
            )
        })
        .collect();
    let (trusted, from_bundle) = match (trusted, history.eras.first()) {
        (Some(key), _) => (key, false),
        (None, Some(era)) => (era.first, true),
        (None, None) => return fail("checkpoint log", "no key is introduced"),
    };
    let Some(at) = history.eras.iter().rposition(|era| era.holds(&trusted)) else {
        return fail(
            "checkpoint log",
            format!(
                "the trusted key {} is not in the bundle's chain of keys",
                trusted.fingerprint()
            ),
        );
    };
    if let Some(next) = history.eras.get(at + 1) {
        return fail(
            format!("checkpoint log entry {}", next.entry + 1),
            format!(
                "the chain of keys breaks here (key {} is not introduced by the trusted key); verify from that key with --public-key if you trust it",
                next.first.fingerprint()
            ),
        );
    }
    let era = &history.eras[at];
    let chain = era.chain().map_err(|(entry, e)| BundleFailure {
        location: format!("checkpoint log entry {}", entry + 1),
        problem: e.to_string(),
    })?;
    let rank = chain
        .epochs()
        .position(|e| *e.key() == trusted)
        .unwrap_or(0);
    Ok(Trust {
        chain,
        trusted,
        from_bundle,
        era_start: era.entry,
        rank,
        breaks,
    })
}

/// Checks a bundle; see the module documentation for what, and [`BundleFailure`] for how the
/// first problem is reported.
pub fn verify_bundle(
    bundle: &Bundle,
    check: &BundleCheck<'_>,
) -> Result<BundleReport, BundleFailure> {
    if bundle.format != BUNDLE_FORMAT {
        return fail(
            "the bundle",
            format!("format {:?} is not {BUNDLE_FORMAT}", bundle.format),
        );
    }
    let trust = key_chain(&bundle.checkpoint_log, check.trusted_key)?;
    let checkpoints = check_checkpoint_log(bundle, &trust)?;
    check_manifest(bundle, &trust)?;
    let m = &bundle.manifest.manifest;
    check_event_list(bundle, m)?;
    let decoded = check_events(bundle, check)?;
    if bundle.scope == Scope::All {
        check_whole_chain(bundle, &decoded)?;
    }
    let listed = check_tasks(bundle, m, &decoded)?;
    check_content(bundle, m, check, &decoded)?;
    check_idempotency(bundle, m, &decoded)?;
    let witnesses = check_witnesses(bundle, &check.witnesses)?;
    Ok(BundleReport {
        trusted_key: trust.trusted,
        trusted_key_from_bundle: trust.from_bundle,
        tree_size: bundle.checkpoint.tree_size,
        events: bundle.events.len() as u64,
        tasks: listed,
        content: bundle.content.len() as u64,
        checkpoints,
        witnesses,
        key_chain_breaks: trust.breaks,
    })
}

/// Every entry of the trusted era of the checkpoint log: checkpoints and recovery statements
/// under the chain, cosignatures under their witness, in order; and the checkpoint the bundle
/// stands on among them, signed by the trusted key or a later one.
fn check_checkpoint_log(bundle: &Bundle, trust: &Trust) -> Result<u64, BundleFailure> {
    let mut walk = LogWalk {
        origin: KeyHistory::of(&bundle.checkpoint_log)
            .origin()
            .unwrap_or_default()
            .to_owned(),
        ..LogWalk::default()
    };
    let standing = crate::storage::standings(&bundle.checkpoint_log);
    for (i, entry) in bundle
        .checkpoint_log
        .iter()
        .enumerate()
        .skip(trust.era_start)
    {
        let at = format!("checkpoint log entry {}", i + 1);
        match (entry, standing[i]) {
            (_, Standing::Disowned { .. }) => {}
            (CheckpointEntry::Recovery(r), _) => walk.recovery(trust, r, &at)?,
            (CheckpointEntry::Checkpoint(c), standing) => {
                walk.checkpoint(trust, c, &at)?;
                if c == &bundle.checkpoint {
                    if standing != Standing::Counts {
                        return fail(
                            at,
                            "the bundle stands on a checkpoint of history given up by an accepted loss",
                        );
                    }
                    trust
                        .signer(&c.key_fingerprint)
                        .or_else(|e| fail("checkpoint", e))?;
                    walk.covering_listed = true;
                }
            }
            (CheckpointEntry::Cosignature(c), _) => {
                c.verify().or_else(|e| fail(&at, e.to_string()))?;
                if !walk.bodies.contains(&c.body()) {
                    return fail(
                        at,
                        "a cosignature of a checkpoint the log does not hold before it",
                    );
                }
            }
            _ => {}
        }
    }
    if !walk.covering_listed {
        return fail(
            "checkpoint",
            "the checkpoint the bundle stands on is not in its checkpoint log",
        );
    }
    Ok(walk.checkpoints)
}

/// What the walk through the checkpoint log has seen so far.
#[derive(Default)]
struct LogWalk<'a> {
    origin: String,
    previous: Option<&'a Checkpoint>,
    bodies: BTreeSet<String>,
    checkpoints: u64,
    covering_listed: bool,
}

impl<'a> LogWalk<'a> {
    /// A recovery statement: signed by a key of the chain; an accepted loss starts the order of
    /// checkpoints over.
    fn recovery(
        &mut self,
        trust: &Trust,
        r: &ledger_proof::RecoveryStatement,
        at: &str,
    ) -> Result<(), BundleFailure> {
        let Some(epoch) = trust
            .chain
            .epochs()
            .find(|e| e.fingerprint() == r.key_fingerprint)
        else {
            return fail(
                at,
                format!(
                    "a recovery statement signed by key {}, which is not in the chain",
                    r.key_fingerprint
                ),
            );
        };
        r.verify(epoch.key()).or_else(|e| fail(at, e.to_string()))?;
        if r.action == ledger_proof::RecoveryAction::LossAccepted {
            self.previous = None;
        }
        Ok(())
    }

    /// A checkpoint: under the chain, of the log's origin, not older than the one before.
    fn checkpoint(
        &mut self,
        trust: &Trust,
        c: &'a Checkpoint,
        at: &str,
    ) -> Result<(), BundleFailure> {
        trust
            .chain
            .verify_checkpoint(c)
            .or_else(|e| fail(at, e.to_string()))?;
        if c.origin != self.origin {
            return fail(
                at,
                format!("the checkpoint names origin {:?}, not the log's", c.origin),
            );
        }
        if let Some(p) = self.previous
            && (c.tree_size < p.tree_size || c.time < p.time)
        {
            return fail(at, "a checkpoint older than the one before it");
        }
        self.bodies.insert(c.body());
        self.previous = Some(c);
        self.checkpoints += 1;
        Ok(())
    }
}

/// The manifest: signed by the trusted key or a later one, and about this bundle.
fn check_manifest(bundle: &Bundle, trust: &Trust) -> Result<(), BundleFailure> {
    let manifest = &bundle.manifest;
    let key = trust
        .signer(&manifest.key_fingerprint)
        .or_else(|e| fail("manifest", e))?;
    manifest
        .verify(key)
        .or_else(|e| fail("manifest", e.to_string()))?;
    let m = &manifest.manifest;
    if m.tree_size != bundle.checkpoint.tree_size || m.root != bundle.checkpoint.root {
        return fail(
            "manifest",
            "it names another checkpoint than the one the bundle stands on",
        );
    }
    if m.scope != bundle.scope.manifest_text(bundle.without_content) {
        return fail(
            "manifest",
            format!("its scope {:?} is not the bundle's", m.scope),
        );
    }
    if m.created_at != bundle.created_at {
        return fail("manifest", "its time is not the bundle's");
    }
    let lines: Vec<String> = bundle.checkpoint_log.iter().map(log_line).collect();
    if let Some(at) = (0..lines.len().max(m.checkpoint_log.len()))
        .find(|i| lines.get(*i) != m.checkpoint_log.get(*i))
    {
        return fail(
            format!("checkpoint log entry {}", at + 1),
            "the checkpoint log is not the one the manifest lists: an entry was removed, added, reordered or altered",
        );
    }
    Ok(())
}

/// Exactly the events the manifest lists, in its order.
fn check_event_list(bundle: &Bundle, m: &Manifest) -> Result<(), BundleFailure> {
    for (i, expected) in m.events.iter().enumerate() {
        match bundle.events.get(i) {
            None => {
                return fail(
                    format!("event #{i}"),
                    format!(
                        "the manifest lists seq {} ({}) here, but the bundle holds only {} events: it was removed",
                        expected.0,
                        expected.1,
                        bundle.events.len()
                    ),
                );
            }
            Some(found) if (found.seq, found.hash) != *expected => {
                return fail(
                    format!("event #{i}"),
                    format!(
                        "the manifest lists seq {} ({}) here, the bundle holds seq {} ({}): an event was removed, inserted, reordered or altered",
                        expected.0, expected.1, found.seq, found.hash
                    ),
                );
            }
            Some(_) => {}
        }
    }
    if bundle.events.len() > m.events.len() {
        let extra = &bundle.events[m.events.len()];
        return fail(
            format!("event #{} (seq {})", m.events.len(), extra.seq),
            "the bundle holds an event the manifest does not list: it was added",
        );
    }
    Ok(())
}

/// Each event: its bytes, its hash, its place in the signed tree, its decoded view.
fn check_events(
    bundle: &Bundle,
    check: &BundleCheck<'_>,
) -> Result<Vec<RecordedEvent>, BundleFailure> {
    let size = bundle.checkpoint.tree_size;
    let root = bundle.checkpoint.root;
    let mut decoded = Vec::with_capacity(bundle.events.len());
    let mut last_seq: Option<u64> = None;
    for (i, e) in bundle.events.iter().enumerate() {
        let at = format!("event #{i} (seq {})", e.seq);
        let event = match decode_stored(&e.stored.0) {
            Ok(event) => event,
            Err(err) => return fail(at, format!("the stored bytes do not check out: {err}")),
        };
        if event.hash != e.hash || event.seq != e.seq {
            return fail(at, "the stored bytes are another event than the one listed");
        }
        if last_seq.is_some_and(|s| s >= e.seq) {
            return fail(at, "events are not in increasing seq order");
        }
        last_seq = Some(e.seq);
        if e.seq >= size {
            return fail(at, format!("beyond the checkpoint's {size} events"));
        }
        let leaf = Sha256.leaf(e.hash.as_bytes());
        if let Err(err) =
            ledger_proof::verify_inclusion(&Sha256, e.seq, size, &leaf, &e.proof, &root)
        {
            return fail(at, format!("not in the signed tree: {err}"));
        }
        let payload = (check.payload_view)(&event).map_err(|problem| BundleFailure {
            location: at.clone(),
            problem: format!("the payload does not decode: {problem}"),
        })?;
        if event_view(&event, payload) != e.decoded {
            return fail(at, "the decoded view does not match the stored bytes");
        }
        decoded.push(event);
    }
    Ok(decoded)
}

/// A whole-ledger bundle is the whole chain: seqs 0 to the checkpoint's size, linked.
fn check_whole_chain(bundle: &Bundle, decoded: &[RecordedEvent]) -> Result<(), BundleFailure> {
    let size = bundle.checkpoint.tree_size;
    if bundle.events.len() as u64 != size {
        return fail(
            "events",
            format!(
                "a whole-ledger bundle of {size} events holds {}",
                bundle.events.len()
            ),
        );
    }
    let mut prev = Digest::ZERO;
    for (i, event) in decoded.iter().enumerate() {
        if event.seq != i as u64 || event.prev_hash != prev {
            return fail(
                format!("event #{i} (seq {})", event.seq),
                "does not link to the event before it",
            );
        }
        prev = event.hash;
    }
    Ok(())
}

/// Task heads: each task's events are versions 1..=head, ending at the listed hash; a task
/// bundle holds exactly the tasks it says.
fn check_tasks(
    bundle: &Bundle,
    m: &Manifest,
    decoded: &[RecordedEvent],
) -> Result<Vec<(String, u64)>, BundleFailure> {
    // Sorted, so that the first task reported wrong is the same on every run.
    let mut versions: BTreeMap<&str, (u64, Digest)> = BTreeMap::new();
    for (i, event) in decoded.iter().enumerate() {
        let entry = versions
            .entry(event.stream.as_str())
            .or_insert((0, Digest::ZERO));
        if event.stream_version != entry.0 + 1 {
            return fail(
                format!("event #{i} (seq {})", event.seq),
                format!(
                    "task {} version {} follows version {}: an event of the task is missing",
                    event.stream, event.stream_version, entry.0
                ),
            );
        }
        *entry = (event.stream_version, event.hash);
    }
    let listed: BTreeMap<&str, (u64, Digest)> = m
        .tasks
        .iter()
        .map(|(task, version, hash)| (task.as_str(), (*version, *hash)))
        .collect();
    for (task, head) in &versions {
        match listed.get(task) {
            Some(l) if l == head => {}
            Some(l) => {
                return fail(
                    format!("task {task}"),
                    format!(
                        "the manifest says version {} ({}), the events end at version {} ({})",
                        l.0, l.1, head.0, head.1
                    ),
                );
            }
            None => return fail(format!("task {task}"), "not listed in the manifest"),
        }
    }
    if let Some((task, _)) = listed.iter().find(|(t, _)| !versions.contains_key(*t)) {
        return fail(
            format!("task {task}"),
            "listed in the manifest but holds no event",
        );
    }
    if let Scope::Tasks(tasks) = &bundle.scope {
        let asked: BTreeSet<&str> = tasks.iter().map(String::as_str).collect();
        let held: BTreeSet<&str> = versions.keys().copied().collect();
        if asked != held {
            return fail(
                "scope",
                "the tasks held are not the tasks the bundle says it holds",
            );
        }
    }
    Ok(listed
        .iter()
        .map(|(t, (v, _))| ((*t).to_owned(), *v))
        .collect())
}

/// Content: each blob is what its hash says, the list is the signed list, nothing cited is
/// missing unless the bundle says content was left out.
fn check_content(
    bundle: &Bundle,
    m: &Manifest,
    check: &BundleCheck<'_>,
    decoded: &[RecordedEvent],
) -> Result<(), BundleFailure> {
    let hashes: Vec<Digest> = bundle.content.iter().map(|c| c.hash).collect();
    if hashes != m.content {
        return fail(
            "content",
            "the blobs held are not the blobs the manifest lists",
        );
    }
    for (i, blob) in bundle.content.iter().enumerate() {
        if Digest(*blake3::hash(&blob.bytes.0).as_bytes()) != blob.hash {
            return fail(
                format!("content #{i} ({})", blob.hash),
                "the bytes do not have this hash",
            );
        }
    }
    if !bundle.without_content {
        let held: BTreeSet<Digest> = hashes.iter().copied().collect();
        for (i, event) in decoded.iter().enumerate() {
            for cited in (check.cited_content)(event) {
                if !held.contains(&cited) {
                    return fail(
                        format!("event #{i} (seq {})", event.seq),
                        format!("cites content {cited}, which the bundle does not hold"),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Idempotency keys: the signed list, each naming one commit of its stream inside the bundle,
/// ending at the stream version it says.
fn check_idempotency(
    bundle: &Bundle,
    m: &Manifest,
    decoded: &[RecordedEvent],
) -> Result<(), BundleFailure> {
    let lines: Vec<_> = bundle.idempotency.iter().map(idempotency_line).collect();
    if lines != m.idempotency {
        return fail(
            "idempotency",
            "the keys held are not the keys the manifest lists",
        );
    }
    let size = bundle.checkpoint.tree_size;
    for (i, record) in bundle.idempotency.iter().enumerate() {
        let first = record.first_seq;
        let count = u64::from(record.event_count);
        let commit: Vec<&RecordedEvent> = decoded
            .iter()
            .filter(|e| e.seq >= first && e.seq < first + count)
            .collect();
        let inside = commit.iter().all(|e| e.stream == record.stream);
        let whole = bundle.scope != Scope::All || commit.len() as u64 == count;
        let version = commit
            .last()
            .is_none_or(|e| e.stream_version == record.stream_version);
        if count == 0 || first + count > size || !inside || !whole || !version {
            return fail(
                format!("idempotency #{i}"),
                format!(
                    "the key names seqs {first}..{} of {} up to version {}, which are not one commit of it",
                    first + count,
                    record.stream,
                    record.stream_version
                ),
            );
        }
    }
    Ok(())
}

/// Each witness the auditor requires has cosigned the bundle's checkpoint.
fn check_witnesses(
    bundle: &Bundle,
    witnesses: &[VerifierKey],
) -> Result<Vec<String>, BundleFailure> {
    let mut out = Vec::new();
    for witness in witnesses {
        let found = bundle.checkpoint_log.iter().any(|e| {
            matches!(e, CheckpointEntry::Cosignature(c)
                if c.witness == *witness && c.cosigns(&bundle.checkpoint) && c.verify().is_ok())
        });
        if !found {
            return fail(
                "checkpoint",
                format!(
                    "no valid cosignature by witness {} of the checkpoint the bundle stands on",
                    witness.name()
                ),
            );
        }
        out.push(witness.to_string());
    }
    Ok(out)
}
