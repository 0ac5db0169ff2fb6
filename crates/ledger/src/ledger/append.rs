//! One group commit's appends: each checked alone (idempotency key first, then the expected
//! version), chained and sealed, written together with the content blobs they carry, then
//! answered.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use ledger_proof::{Frontier, Sha256};

use super::{AppendJob, AppendRequest, Causation, ExpectedVersion, Receipt, ReceiptEvent, Writer};

/// Where an append's answer goes.
pub(super) type Reply = tokio::sync::oneshot::Sender<Result<Receipt, AppendError>>;
use crate::clock::idempotent_event_id;
use crate::envelope::{Digest, Envelope, RecordedEvent};
use crate::error::{AppendError, ReadError};
use crate::limits::Limits;
use crate::storage::{
    Blob, ChainHead, Commit, HeldHead, IdempotencyRecord, SealedEvent, StorageError, TreeGrowth,
};

/// What becomes of one queued append within a group.
pub(super) enum Plan {
    /// Answered without writing.
    Done(Result<Receipt, AppendError>),
    /// Written as the group's commit at this index; `replayed` when it is a retry of that
    /// commit within the same group.
    Commit { index: usize, replayed: bool },
}

/// The commits of one group commit, and what they change if the write succeeds.
#[derive(Default)]
pub(super) struct Group {
    pub(super) commits: Vec<Commit>,
    recorded: Vec<Vec<RecordedEvent>>,
    versions: HashMap<String, u64>,
    /// Stream versions read from storage while the group was planned. They join the writer's
    /// only once the group is written: a read made without the append lock may see commits of
    /// other writers past the head the group was planned on, and only a write that found the
    /// head unmoved shows that it did not.
    read: HashMap<String, u64>,
    keys: HashMap<String, (Digest, usize)>,
    hashes: HashMap<Digest, ()>,
    /// The content blobs of the group's commits, each once.
    pub(super) content: Vec<Blob>,
    content_hashes: HashSet<Digest>,
    pub(super) head: ChainHead,
    events: usize,
}

impl Group {
    /// An empty group, to be written on `head`.
    pub(super) fn on(head: ChainHead) -> Group {
        Group {
            head,
            ..Group::default()
        }
    }

    /// Adds the content blobs of a planned commit, each once.
    fn add_content(&mut self, content: Vec<Blob>) {
        for blob in content {
            if self.content_hashes.insert(blob.hash) {
                self.content.push(blob);
            }
        }
    }

    /// Adds a planned commit of `request`'s sealed events on a stream at version `current`;
    /// returns its index in the group.
    fn add(
        &mut self,
        request: AppendRequest,
        current: u64,
        head: ChainHead,
        sealed: Vec<SealedEvent>,
        recorded: Vec<RecordedEvent>,
    ) -> usize {
        let count = recorded.len();
        let first_seq = self.head.size;
        self.head = head;
        self.events += count;
        self.versions
            .insert(request.stream.clone(), current + count as u64);
        for event in &recorded {
            self.hashes.insert(event.hash, ());
        }
        let index = self.commits.len();
        let idempotency = request.idempotency.map(|idem| {
            self.keys
                .insert(idem.key.clone(), (idem.fingerprint, index));
            IdempotencyRecord {
                key: idem.key,
                fingerprint: idem.fingerprint,
                stream: request.stream.clone(),
                first_seq,
                event_count: count as u32,
                stream_version: current + count as u64,
            }
        });
        self.commits.push(Commit {
            stream: request.stream,
            base_version: current,
            events: sealed,
            idempotency,
        });
        self.recorded.push(recorded);
        index
    }
}

impl Writer {
    pub(super) fn process(&mut self, jobs: Vec<AppendJob>) {
        if self.shared {
            return self.process_shared(jobs);
        }
        if let Some(reason) = self.core.poisoned() {
            for job in jobs {
                let _ = job.reply.send(Err(AppendError::Poisoned(reason.clone())));
            }
            return;
        }
        let now = self.tick();
        let mut group = Group {
            head: self.head,
            ..Group::default()
        };
        let mut waiting = Vec::with_capacity(jobs.len());
        for job in jobs {
            let plan = self.plan(job.request, job.content, now, &mut group);
            waiting.push((job.reply, plan));
        }
        if group.commits.is_empty() {
            for (reply, plan) in waiting {
                if let Plan::Done(result) = plan {
                    let _ = reply.send(result);
                }
            }
            return;
        }
        // The Merkle nodes the group completes are computed before the write, on a copy of the
        // frontier, so that storage indexes them with the events in one write; the copy
        // replaces the frontier only once the write succeeded.
        let mut frontier = self.frontier.clone();
        match self.write_group(&group, &mut frontier, None) {
            Ok(()) => self.written(group, frontier, waiting),
            Err((reason, e)) => {
                let e = Arc::new(e);
                self.core.poison(reason);
                for (reply, plan) in waiting {
                    let result = match plan {
                        Plan::Done(result) => result,
                        Plan::Commit { .. } => Err(AppendError::Storage(Arc::clone(&e))),
                    };
                    let _ = reply.send(result);
                }
            }
        }
    }

    /// Takes a group that was written as the new head, hands its events to subscribers and
    /// answers its appends; then writes the checkpoint that is due, if this ledger leads them.
    pub(super) fn written(
        &mut self,
        mut group: Group,
        frontier: Frontier,
        waiting: Vec<(Reply, Plan)>,
    ) {
        self.head = group.head;
        self.frontier = frontier;
        // Written on the store's head: whatever others committed before was followed first.
        self.follow_due = false;
        self.versions.extend(group.read.drain());
        self.versions.extend(group.versions.drain());
        let receipts = receipts(&group.commits);
        for event in group.recorded.into_iter().flatten() {
            // No subscriber is not an error.
            let _ = self.core.events.send(Arc::new(event));
        }
        for (reply, plan) in waiting {
            let result = match plan {
                Plan::Done(result) => result,
                Plan::Commit { index, replayed } => {
                    receipts
                        .get(index)
                        .cloned()
                        .map_or(Err(AppendError::Closed), |mut r| {
                            r.replayed = replayed;
                            Ok(r)
                        })
                }
            };
            let _ = reply.send(result);
        }
        if let Some(every) = self.checkpoint_every_events
            && self.frontier.size() - self.last_signed.map_or(0, |(size, _)| size) >= every
            && self.leads
            && let Err(e) = self.write_checkpoint()
        {
            tracing::warn!(error = %e, "the periodic checkpoint was not written");
        }
    }

    /// Grows `frontier` by the group's events and writes the group with the nodes they
    /// complete. Nothing is written when the tree cannot grow (it holds u64::MAX leaves): the
    /// log could never again be checked against a signed root.
    /// On a shared store the group is written through `held`, the append lock it was planned
    /// under.
    pub(super) fn write_group(
        &self,
        group: &Group,
        frontier: &mut Frontier,
        held: Option<Box<dyn HeldHead + '_>>,
    ) -> Result<(), (String, StorageError)> {
        let mut nodes = Vec::with_capacity(group.events * 2);
        let grown = group
            .recorded
            .iter()
            .flatten()
            .try_for_each(|e| frontier.push_into(&Sha256, e.hash.as_bytes(), &mut nodes));
        if let Err(e) = grown {
            let reason = format!("the Merkle tree cannot take more events: {e}");
            return Err((reason.clone(), StorageError::Failed(reason)));
        }
        let tree = TreeGrowth {
            nodes,
            size: frontier.size(),
        };
        match held {
            Some(held) => held.append(&group.commits, &group.content, &tree),
            None => self
                .core
                .storage
                .append(&group.commits, &group.content, &tree),
        }
        .map_err(|e| {
            let reason = match e {
                // Nothing was written, but this writer's view is not the store's.
                StorageError::HeadMoved => "the store's head or a stream's version was not \
                        the one this group was planned on, so nothing of it was written"
                    .to_owned(),
                _ => format!("a write to storage failed, so its outcome is unknown: {e}"),
            };
            (reason, e)
        })
    }

    pub(super) fn current_version(
        &self,
        group: &mut Group,
        stream: &str,
    ) -> Result<u64, StorageError> {
        if let Some(v) = group
            .versions
            .get(stream)
            .or_else(|| group.read.get(stream))
        {
            return Ok(*v);
        }
        if let Some(v) = self.versions.get(stream) {
            return Ok(*v);
        }
        let v = self.core.storage.stream_version(stream)?;
        group.read.insert(stream.to_owned(), v);
        Ok(v)
    }

    pub(super) fn plan(
        &mut self,
        mut request: AppendRequest,
        content: Vec<Blob>,
        now: DateTime<Utc>,
        group: &mut Group,
    ) -> Plan {
        if let Err(e) = validate(&request, &self.core.limits) {
            return Plan::Done(Err(e));
        }
        let limits = &self.core.limits;
        if group.events + request.events.len()
            > limits.group_events_max.max(limits.batch_events_max)
        {
            // Cannot happen with the group size checks in `run`; refuse rather than overfill.
            return Plan::Done(Err(AppendError::LimitExceeded {
                limit: "group_events_max",
                max: limits.group_events_max as u64,
                actual: (group.events + request.events.len()) as u64,
            }));
        }
        // The idempotency key is checked before the version: a retry of a command that
        // succeeded must get its original receipt even though the stream has moved on.
        if let Some(idem) = &request.idempotency
            && let Some(plan) = self.known_key(idem, group)
        {
            return plan;
        }
        let current = match self.current_version(group, &request.stream) {
            Ok(v) => v,
            Err(e) => return Plan::Done(Err(AppendError::Storage(Arc::new(e)))),
        };
        if let ExpectedVersion::Exact(expected) = request.expected
            && expected != current
        {
            return Plan::Done(Err(AppendError::VersionConflict {
                stream: request.stream,
                expected,
                current,
            }));
        }
        let events = std::mem::take(&mut request.events);
        let (sealed, recorded, head) = match self.seal_all(&request, events, current, now, group) {
            Ok(sealed) => sealed,
            Err(e) => return Plan::Done(Err(e)),
        };
        group.add_content(content);
        let index = group.add(request, current, head, sealed, recorded);
        Plan::Commit {
            index,
            replayed: false,
        }
    }

    /// Chains and seals `events` of `request` on the group's head, its stream at version
    /// `current`: the sealed events, as recorded, and the head after them.
    fn seal_all(
        &mut self,
        request: &AppendRequest,
        events: Vec<super::NewEvent>,
        current: u64,
        now: DateTime<Utc>,
        group: &Group,
    ) -> Result<(Vec<SealedEvent>, Vec<RecordedEvent>, ChainHead), AppendError> {
        let limits = self.core.limits.clone();
        let mut head = group.head;
        let mut sealed: Vec<SealedEvent> = Vec::with_capacity(events.len());
        let mut recorded: Vec<RecordedEvent> = Vec::with_capacity(events.len());
        let mut total_bytes = 0usize;
        for (i, event) in events.into_iter().enumerate() {
            let causation = self.causes(i, &event.causation, &recorded, group)?;
            let event_id = match &request.idempotency {
                Some(idem) => idempotent_event_id(&idem.key, i as u32),
                None => self.ids.v7(now),
            };
            let envelope = Envelope {
                seq: head.size,
                stream: request.stream.clone(),
                stream_version: current + 1 + i as u64,
                event_id,
                kind: event.kind,
                recorded_at: now,
                actor: request.actor.clone(),
                causation,
                payload: event.payload,
                prev_hash: head.last_hash,
            };
            let (one, hash) = seal_within(envelope, &limits, &mut total_bytes)?;
            sealed.push(one.0);
            head = ChainHead {
                size: head.size + 1,
                last_hash: hash,
            };
            recorded.push(one.1);
        }
        Ok((sealed, recorded, head))
    }

    /// What a command whose key is known already gets: its original receipt (or, in this
    /// group, a share in its commit), or a refusal when the key came with another command.
    fn known_key(&self, idem: &super::Idempotency, group: &Group) -> Option<Plan> {
        if let Some((fingerprint, index)) = group.keys.get(&idem.key) {
            return Some(if *fingerprint == idem.fingerprint {
                Plan::Commit {
                    index: *index,
                    replayed: true,
                }
            } else {
                Plan::Done(Err(AppendError::IdempotencyKeyReused {
                    key: idem.key.clone(),
                }))
            });
        }
        match self.core.storage.idempotency(&idem.key) {
            Err(e) => Some(Plan::Done(Err(AppendError::Storage(Arc::new(e))))),
            Ok(Some(record)) => Some(Plan::Done(if record.fingerprint == idem.fingerprint {
                self.replay(&record)
            } else {
                Err(AppendError::IdempotencyKeyReused {
                    key: idem.key.clone(),
                })
            })),
            Ok(None) => None,
        }
    }

    /// The hashes of event `i`'s causes: earlier events of its batch, or events the ledger (or
    /// this group) holds.
    fn causes(
        &self,
        i: usize,
        causes: &[Causation],
        recorded: &[RecordedEvent],
        group: &Group,
    ) -> Result<Vec<Digest>, AppendError> {
        let mut causation = Vec::with_capacity(causes.len());
        for cause in causes {
            match cause {
                Causation::InBatch(j) => match recorded.get(*j as usize) {
                    Some(earlier) if (*j as usize) < i => causation.push(earlier.hash),
                    _ => {
                        return Err(AppendError::Invalid(format!(
                            "event {i} names event {j} of its batch as a cause; only earlier events can be"
                        )));
                    }
                },
                Causation::Event(hash) => {
                    let known = group.hashes.contains_key(hash)
                        || self
                            .core
                            .storage
                            .find_hash(hash)
                            .map_err(|e| AppendError::Storage(Arc::new(e)))?
                            .is_some();
                    if !known {
                        return Err(AppendError::Invalid(format!(
                            "event {i} names {hash} as a cause, which is not in the ledger"
                        )));
                    }
                    causation.push(*hash);
                }
            }
        }
        Ok(causation)
    }

    /// The original receipt of a command, rebuilt from the events it wrote.
    pub(super) fn replay(&self, record: &IdempotencyRecord) -> Result<Receipt, AppendError> {
        let read =
            |e: ReadError| AppendError::Invalid(format!("cannot read the original append: {e}"));
        let events = self
            .core
            .read_range(record.first_seq, record.event_count as usize)
            .map_err(read)?;
        if events.len() != record.event_count as usize
            || events.iter().any(|e| e.stream != record.stream)
        {
            return Err(AppendError::Invalid(format!(
                "the events of idempotency key {:?} are not where its record says",
                record.key
            )));
        }
        Ok(Receipt {
            stream: record.stream.clone(),
            stream_version: record.stream_version,
            events: events
                .iter()
                .map(|e| ReceiptEvent {
                    seq: e.seq,
                    stream_version: e.stream_version,
                    event_id: e.event_id,
                    hash: e.hash,
                })
                .collect(),
            replayed: true,
        })
    }
}

/// Seals one event, within the limits on an event's and a batch's stored bytes (`total_bytes`
/// counts the batch so far).
#[allow(clippy::type_complexity)]
fn seal_within(
    envelope: Envelope,
    limits: &Limits,
    total_bytes: &mut usize,
) -> Result<((SealedEvent, RecordedEvent), Digest), AppendError> {
    let (bytes, hash) = envelope.seal();
    if bytes.len() > limits.event_bytes_max {
        return Err(AppendError::LimitExceeded {
            limit: "event_bytes_max",
            max: limits.event_bytes_max as u64,
            actual: bytes.len() as u64,
        });
    }
    *total_bytes += bytes.len();
    if *total_bytes > limits.batch_bytes_max {
        return Err(AppendError::LimitExceeded {
            limit: "batch_bytes_max",
            max: limits.batch_bytes_max as u64,
            actual: *total_bytes as u64,
        });
    }
    let sealed = SealedEvent {
        seq: envelope.seq,
        stream_version: envelope.stream_version,
        event_id: envelope.event_id,
        prev_hash: envelope.prev_hash,
        hash,
        bytes: bytes.into(),
    };
    Ok(((sealed, RecordedEvent { envelope, hash }), hash))
}

/// The receipt of each commit of a group that was written.
fn receipts(commits: &[Commit]) -> Vec<Receipt> {
    commits
        .iter()
        .map(|c| Receipt {
            stream: c.stream.clone(),
            stream_version: c.base_version + c.events.len() as u64,
            events: c
                .events
                .iter()
                .map(|e| ReceiptEvent {
                    seq: e.seq,
                    stream_version: e.stream_version,
                    event_id: e.event_id,
                    hash: e.hash,
                })
                .collect(),
            replayed: false,
        })
        .collect()
}

/// About the bytes an append adds to a group's write: its events and its content.
pub(super) fn request_bytes(request: &AppendRequest, content: &[Blob]) -> usize {
    request
        .events
        .iter()
        .map(|e| e.payload.len() + e.kind.len() + e.causation.len() * 32 + 128)
        .sum::<usize>()
        + request.stream.len()
        + request.actor.len()
        + content.iter().map(|b| b.bytes.len()).sum::<usize>()
}

pub(super) fn check_len(limit: &'static str, max: usize, actual: usize) -> Result<(), AppendError> {
    if actual > max {
        return Err(AppendError::LimitExceeded {
            limit,
            max: max as u64,
            actual: actual as u64,
        });
    }
    Ok(())
}

/// Checks a request against the limits and the format's rules before anything is computed.
pub(super) fn validate(request: &AppendRequest, limits: &Limits) -> Result<(), AppendError> {
    if request.stream.is_empty() {
        return Err(AppendError::Invalid("the stream id is empty".into()));
    }
    check_len(
        "stream_id_bytes_max",
        limits.stream_id_bytes_max,
        request.stream.len(),
    )?;
    if request.stream.chars().any(char::is_control) {
        return Err(AppendError::Invalid(
            "the stream id contains control characters".into(),
        ));
    }
    check_len(
        "actor_bytes_max",
        limits.actor_bytes_max,
        request.actor.len(),
    )?;
    if request.events.is_empty() {
        return Err(AppendError::Invalid(
            "an append needs at least one event".into(),
        ));
    }
    check_len(
        "batch_events_max",
        limits.batch_events_max,
        request.events.len(),
    )?;
    for event in &request.events {
        if event.kind.is_empty() {
            return Err(AppendError::Invalid("an event kind is empty".into()));
        }
        check_len("kind_bytes_max", limits.kind_bytes_max, event.kind.len())?;
        check_len(
            "causation_links_max",
            limits.causation_links_max,
            event.causation.len(),
        )?;
        check_len(
            "event_bytes_max",
            limits.event_bytes_max,
            event.payload.len(),
        )?;
    }
    if let Some(idem) = &request.idempotency {
        if idem.key.is_empty() {
            return Err(AppendError::Invalid("the idempotency key is empty".into()));
        }
        check_len(
            "idempotency_key_bytes_max",
            limits.idempotency_key_bytes_max.min(u16::MAX as usize),
            idem.key.len(),
        )?;
    }
    Ok(())
}
