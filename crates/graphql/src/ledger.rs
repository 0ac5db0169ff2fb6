//! The ledger as auditors see it: events exactly as stored, its size and root, the signed
//! checkpoints and the key that signs them, the verification report, and inclusion and
//! consistency proofs in the file format `research-ledger verify-proof` checks offline.

use async_graphql::{ComplexObject, Context, Enum, ID, Json, Object, SimpleObject};
use chrono::{DateTime, Utc};
use serde_json::Value;
use service::ServiceError;
use service::ledger::ledger_proof::{
    Checkpoint as SignedCheckpoint, ConsistencyProofFile, Cosignature as SignedCosignature,
    InclusionProofFile, ProofFile,
};
use service::ledger::{CheckpointEntry, RecordedEvent, VerifyReport};
use service::projections::AuditEntry;

use crate::context;
use crate::error::{blocking, from_proof, from_read};
use crate::limits::{page_complexity, page_size_of};
use crate::views::json_of;

/// An event exactly as the ledger holds it.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct LedgerEvent {
    /// Its position in the ledger, from 0.
    pub(crate) seq: u64,
    /// The task (stream) it belongs to.
    pub(crate) task_id: ID,
    /// Its position in the task's stream, from 1.
    pub(crate) stream_version: u64,
    /// Its id (a UUID).
    pub(crate) event_id: String,
    /// What happened, e.g. `conclusion_issued`.
    pub(crate) kind: String,
    /// Who caused it.
    pub(crate) actor: String,
    /// When the ledger recorded it.
    pub(crate) recorded_at: DateTime<Utc>,
    /// Its chain hash (hex): covers the previous event's hash and its own stored bytes.
    pub(crate) hash: String,
    /// The hash of the event before it in the ledger (zero for the first).
    pub(crate) prev_hash: String,
    /// The hashes of the events it was derived from.
    pub(crate) causation: Vec<String>,
    /// The payload decoded (tagged by `type`); none when this build cannot read it.
    pub(crate) payload: Option<Json<Value>>,
    /// Why the payload does not decode, when it does not.
    pub(crate) payload_error: Option<String>,
}

impl LedgerEvent {
    pub(crate) fn of_trail(task_id: &str, entry: &AuditEntry) -> Self {
        LedgerEvent {
            seq: entry.seq,
            task_id: ID(task_id.to_owned()),
            stream_version: entry.stream_version,
            event_id: entry.event_id.clone(),
            kind: entry.kind.clone(),
            actor: entry.actor.clone(),
            recorded_at: entry.recorded_at,
            hash: entry.hash.to_hex(),
            prev_hash: entry.prev_hash.to_hex(),
            causation: entry.causation.iter().map(|h| h.to_hex()).collect(),
            payload: entry.payload.clone().map(Json),
            payload_error: entry.payload_error.clone(),
        }
    }

    pub(crate) fn of_recorded(event: &RecordedEvent) -> Self {
        let (payload, payload_error) = match service::audit::payload_view(event) {
            Ok(value) => (Some(Json(value)), None),
            Err(e) => (None, Some(e)),
        };
        LedgerEvent {
            seq: event.seq,
            task_id: ID(event.stream.clone()),
            stream_version: event.stream_version,
            event_id: event.event_id.to_string(),
            kind: event.kind.clone(),
            actor: event.actor.clone(),
            recorded_at: event.recorded_at,
            hash: event.hash.to_string(),
            prev_hash: event.prev_hash.to_string(),
            causation: event.causation.iter().map(ToString::to_string).collect(),
            payload,
            payload_error,
        }
    }
}

/// A signed checkpoint: the root of the tree of the first `treeSize` events, signed.
#[derive(SimpleObject, Debug, Clone)]
#[graphql(complex)]
pub(crate) struct Checkpoint {
    /// The log's origin: the checkpoint note's first line and the name of the key that signs.
    pub(crate) origin: String,
    /// Events in the tree.
    pub(crate) tree_size: u64,
    /// The tree's root (hex).
    pub(crate) root: String,
    /// When it was signed (RFC 3339, as signed).
    pub(crate) time: String,
    /// The first 16 hex digits of blake3 of the signing key.
    pub(crate) key_fingerprint: String,
    /// Ed25519 signature of the C2SP checkpoint note `{origin}\n{treeSize}\n{base64 root}\ntime {time}\n`.
    pub(crate) signature: String,
    /// The checkpoint as `research-ledger checkpoint` prints it: keep it, and
    /// `research-ledger verify-proof --since` proves later that the ledger only grew.
    pub(crate) json: Json<Value>,
    /// Its entry number in the checkpoint log, from 1, when it was read as one of a page of
    /// `checkpoints`: what `beforeEntry` takes to ask for the page before.
    pub(crate) entry: Option<u64>,
    #[graphql(skip)]
    pub(crate) signed: SignedCheckpoint,
    /// Its cosignatures, when they were read with it.
    #[graphql(skip)]
    pub(crate) cosigned: Option<Vec<SignedCosignature>>,
}

#[ComplexObject]
impl Checkpoint {
    /// The witness cosignatures the ledger keeps of this checkpoint (C2SP `tlog-cosignature`),
    /// each with the witness's verifier key, so that it can be checked without trusting the
    /// server.
    async fn cosignatures(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Cosignature>> {
        let all = match &self.cosigned {
            Some(all) => all.clone(),
            None => {
                let service = context::service(ctx)?.clone();
                let signed = self.signed.clone();
                blocking(move || service.ledger().cosignatures_of(&signed).map_err(from_read))
                    .await?
            }
        };
        Ok(all
            .iter()
            .map(|c| Cosignature {
                witness: c.witness.to_string(),
                timestamp: c.timestamp,
                signature: c.signature.to_string(),
            })
            .collect())
    }
}

/// A witness's cosignature of a checkpoint: the witness signed
/// `cosignature/v1\ntime {timestamp}\n{the checkpoint note's text}`.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Cosignature {
    /// The witness's C2SP verifier key, `name+keyID+base64(0x04 ‖ key)`.
    pub(crate) witness: String,
    /// When the witness signed, in POSIX seconds.
    pub(crate) timestamp: u64,
    /// The Ed25519 signature (hex).
    pub(crate) signature: String,
}

/// How a key entered the chain of signing keys.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyChainLinkKind {
    /// A key that starts a chain: the ledger's first, or one started after an import without
    /// the previous key (a break in the chain, with its reason).
    Introduced,
    /// A handover to a new key, signed by the old one over the rotation note.
    Rotation,
}

/// One link of the chain of signing keys, oldest first.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct KeyChainLink {
    /// How the key entered the chain.
    pub(crate) kind: KeyChainLinkKind,
    /// The key that signs from here on (64 hex digits).
    pub(crate) public_key: String,
    /// Its fingerprint.
    pub(crate) key_fingerprint: String,
    /// The log's origin.
    pub(crate) origin: String,
    /// The tree size at the handover (or when the key was introduced).
    pub(crate) tree_size: u64,
    /// The tree's root at the handover, for a rotation (hex).
    pub(crate) root: Option<String>,
    /// When.
    pub(crate) time: String,
    /// The key that signed the handover, for a rotation.
    pub(crate) old_key_fingerprint: Option<String>,
    /// The old key's Ed25519 signature over the rotation note
    /// `{origin}\n{treeSize}\n{base64 root}\ntime {time}\nrotate-to {verifier key}\n` (hex).
    pub(crate) signature: Option<String>,
    /// Why a key was introduced (the first key, or why the chain starts over).
    pub(crate) reason: Option<String>,
}

impl KeyChainLink {
    fn of(entry: &CheckpointEntry) -> Option<Self> {
        match entry {
            CheckpointEntry::KeyIntroduced {
                public_key,
                tree_size,
                time,
                reason,
                origin,
            } => Some(KeyChainLink {
                kind: KeyChainLinkKind::Introduced,
                public_key: public_key.to_string(),
                key_fingerprint: public_key.fingerprint().to_string(),
                origin: origin.clone(),
                tree_size: *tree_size,
                root: None,
                time: time.to_string(),
                old_key_fingerprint: None,
                signature: None,
                reason: Some(reason.clone()),
            }),
            CheckpointEntry::Rotation(r) => Some(KeyChainLink {
                kind: KeyChainLinkKind::Rotation,
                public_key: r.new_public_key.to_string(),
                key_fingerprint: r.new_public_key.fingerprint().to_string(),
                origin: r.origin.clone(),
                tree_size: r.tree_size,
                root: Some(r.root.to_string()),
                time: r.time.to_string(),
                old_key_fingerprint: Some(r.old_key_fingerprint.to_string()),
                signature: Some(r.signature.to_string()),
                reason: None,
            }),
            _ => None,
        }
    }
}

impl From<&SignedCheckpoint> for Checkpoint {
    fn from(c: &SignedCheckpoint) -> Self {
        Checkpoint {
            origin: c.origin.clone(),
            signed: c.clone(),
            tree_size: c.tree_size,
            root: c.root.to_string(),
            time: c.time.to_string(),
            key_fingerprint: c.key_fingerprint.to_string(),
            signature: c.signature.to_string(),
            json: json_of(c),
            entry: None,
            cosigned: None,
        }
    }
}

/// The ledger as a whole.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LedgerInfo;

#[Object(name = "Ledger")]
impl LedgerInfo {
    /// Events in the ledger.
    async fn size(&self, ctx: &Context<'_>) -> async_graphql::Result<u64> {
        Ok(context::service(ctx)?.ledger().head().size)
    }

    /// The hash of the last event (hex; zero when empty).
    async fn head_hash(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        Ok(context::service(ctx)?.ledger().head().last_hash.to_string())
    }

    /// The root of the Merkle tree over every event (hex).
    async fn root(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        let service = context::service(ctx)?.clone();
        blocking(move || {
            let ledger = service.ledger();
            ledger
                .root_at(ledger.head().size)
                .map(|d| d.to_string())
                .map_err(from_proof)
        })
        .await
    }

    /// The public key that signs checkpoints now (64 hex digits).
    async fn public_key(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        let service = context::service(ctx)?.clone();
        blocking(move || {
            service
                .ledger()
                .public_key()
                .map(|k| k.to_string())
                .map_err(ServiceError::Unavailable)
        })
        .await
    }

    /// Its fingerprint: the first 16 hex digits of blake3 of the key.
    async fn key_fingerprint(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        let service = context::service(ctx)?.clone();
        blocking(move || {
            service
                .ledger()
                .public_key()
                .map(|k| k.fingerprint().to_string())
                .map_err(ServiceError::Unavailable)
        })
        .await
    }

    /// The newest `last` signed checkpoints (20 unless asked), oldest first, each with its
    /// cosignatures; with `beforeEntry`, the newest of those recorded before that entry of the
    /// checkpoint log (a checkpoint's `entry`: so the page before is asked for with the first
    /// one's). Checkpoints of history given up by an accepted loss are not among them. A ledger
    /// written all day signs one a second: `checkpointCount` says how many there are, and the
    /// export bundle carries the whole checkpoint log.
    #[graphql(complexity = "page_complexity(last, child_complexity)")]
    async fn checkpoints(
        &self,
        ctx: &Context<'_>,
        last: Option<i32>,
        before_entry: Option<i64>,
    ) -> async_graphql::Result<Vec<Checkpoint>> {
        let last = page_size_of("last", last, context::limits(ctx)?)?;
        let before_entry = before_entry
            .map(|e| crate::error::unsigned("beforeEntry", e))
            .transpose()?;
        let service = context::service(ctx)?.clone();
        let page = blocking(move || {
            service
                .ledger()
                .checkpoint_page(last, before_entry)
                .map_err(from_read)
        })
        .await?;
        Ok(page
            .checkpoints
            .into_iter()
            .map(|p| Checkpoint {
                entry: Some(p.entry),
                cosigned: Some(p.cosignatures),
                ..Checkpoint::from(&p.checkpoint)
            })
            .collect())
    }

    /// How many signed checkpoints there are (not counting those of history given up by an
    /// accepted loss).
    async fn checkpoint_count(&self, ctx: &Context<'_>) -> async_graphql::Result<u64> {
        let service = context::service(ctx)?.clone();
        blocking(move || service.ledger().checkpoint_count().map_err(from_read)).await
    }

    /// The latest signed checkpoint.
    async fn latest_checkpoint(
        &self,
        ctx: &Context<'_>,
    ) -> async_graphql::Result<Option<Checkpoint>> {
        let service = context::service(ctx)?.clone();
        blocking(move || service.ledger().latest_checkpoint().map_err(from_read))
            .await
            .map(|c| c.as_ref().map(Checkpoint::from))
    }

    /// The log's origin: the first line of its checkpoints and the name of its key.
    async fn origin(&self, ctx: &Context<'_>) -> async_graphql::Result<String> {
        Ok(context::service(ctx)?.ledger().origin())
    }

    /// The chain of signing keys as the checkpoint log records it, oldest first: the keys
    /// introduced and every handover, each signed by the key before it.
    async fn key_chain(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<KeyChainLink>> {
        let service = context::service(ctx)?.clone();
        blocking(move || service.ledger().checkpoint_entries().map_err(from_read))
            .await
            .map(|all| all.iter().filter_map(KeyChainLink::of).collect())
    }

    /// Why the ledger refuses appends, when it does (a failed sync or verification).
    async fn refusing_writes(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<String>> {
        Ok(context::service(ctx)?.ledger().poisoned())
    }
}

/// The first event that is not what it should be.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct VerifyFailure {
    /// Its seq.
    pub(crate) seq: u64,
    /// Why, for an auditor.
    pub(crate) problem: String,
}

/// What verification found: the chain, the tree against every signed checkpoint, and every
/// signature. Verification goes on from the prefix verified before, so asking again is cheap.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct Verification {
    /// Whether everything checked.
    pub(crate) intact: bool,
    /// Events in the ledger when verification ran.
    pub(crate) size: u64,
    /// Hash of the last event verified.
    pub(crate) head_hash: String,
    /// Root of the tree over the verified events.
    pub(crate) root: String,
    /// The first seq this run checked (the end of the prefix verified before).
    pub(crate) checked_from: u64,
    /// How many events this run checked.
    pub(crate) checked: u64,
    /// Checkpoints whose root and signature this run checked.
    pub(crate) checkpoints_checked: u64,
    /// Where the chain of signing keys starts over without a statement from the old key.
    pub(crate) key_chain_breaks: Vec<String>,
    /// The first problem, if any.
    pub(crate) failure: Option<VerifyFailure>,
}

impl From<&VerifyReport> for Verification {
    fn from(r: &VerifyReport) -> Self {
        Verification {
            intact: r.is_intact(),
            size: r.size,
            head_hash: r.head_hash.to_string(),
            root: r.root.to_string(),
            checked_from: r.checked_from,
            checked: r.checked,
            checkpoints_checked: r.checkpoints_checked,
            key_chain_breaks: r.key_chain_breaks.clone(),
            failure: r.failure.as_ref().map(|f| VerifyFailure {
                seq: f.seq,
                problem: f.problem.clone(),
            }),
        }
    }
}

/// A proof that one event is in the tree a signed checkpoint covers.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct InclusionProof {
    /// The event's seq: its leaf index.
    pub(crate) seq: u64,
    /// The size of the tree.
    pub(crate) tree_size: u64,
    /// The event's hash.
    pub(crate) event_hash: String,
    /// The Merkle leaf hash `SHA-256(0x00 ‖ eventHash)`.
    pub(crate) leaf_hash: String,
    /// The audit path, from the leaf's sibling upwards.
    pub(crate) path: Vec<String>,
    /// The signed checkpoint the path leads to.
    pub(crate) checkpoint: Checkpoint,
    /// The proof file, as `research-ledger prove` writes it: save it and check it offline
    /// with `research-ledger verify-proof FILE --public-key HEX`.
    pub(crate) file: Json<Value>,
}

impl From<InclusionProofFile> for InclusionProof {
    fn from(p: InclusionProofFile) -> Self {
        InclusionProof {
            seq: p.leaf_index,
            tree_size: p.tree_size,
            event_hash: p.event_hash.to_string(),
            leaf_hash: p.leaf_hash.to_string(),
            path: p.path.iter().map(ToString::to_string).collect(),
            checkpoint: Checkpoint::from(&p.checkpoint),
            file: json_of(&ProofFile::Inclusion(p.clone())),
        }
    }
}

/// A proof that the tree of a later checkpoint extends the tree of an earlier one: the log only
/// grew between them.
#[derive(SimpleObject, Debug, Clone)]
pub(crate) struct ConsistencyProof {
    /// The earlier tree's size.
    pub(crate) first_size: u64,
    /// The later tree's size.
    pub(crate) second_size: u64,
    /// The proof, in RFC 9162 order.
    pub(crate) path: Vec<String>,
    /// The earlier signed checkpoint.
    pub(crate) first_checkpoint: Checkpoint,
    /// The later signed checkpoint.
    pub(crate) second_checkpoint: Checkpoint,
    /// The proof file, as `research-ledger prove --consistency` writes it.
    pub(crate) file: Json<Value>,
}

impl From<ConsistencyProofFile> for ConsistencyProof {
    fn from(p: ConsistencyProofFile) -> Self {
        ConsistencyProof {
            first_size: p.first_size,
            second_size: p.second_size,
            path: p.path.iter().map(ToString::to_string).collect(),
            first_checkpoint: Checkpoint::from(&p.first_checkpoint),
            second_checkpoint: Checkpoint::from(&p.second_checkpoint),
            file: json_of(&ProofFile::Consistency(p.clone())),
        }
    }
}
