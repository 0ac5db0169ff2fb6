//! Several ledgers on one shared store: the writer follows what the others commit, checking
//! each event's hash and its link to the chain as it folds it into its head, its streams'
//! versions and its Merkle tree, and hands it to subscribers in seq order, as it hands out its
//! own. Each group is planned and written while the writer holds the store's append lock, on
//! the head it has caught up to under that lock.

use std::sync::Arc;
use std::time::Duration;

use super::append::{Group, Plan, Reply};
use super::{AppendJob, AppendRequest, Writer};
use crate::error::AppendError;
use crate::storage::{Blob, ChainHead, StorageError};
use ledger_proof::{Frontier, Sha256};

/// How often, by default, a ledger on a shared store reads what other ledgers committed when
/// no notification from the store woke it sooner. Notified, an event committed by another node
/// reaches this node's subscribers and read models after the notification, one read and fold
/// (or after the group this writer is busy with); without, within about this interval more.
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_millis(50);

/// How many events one read of the follower takes.
const FOLLOW_BATCH_EVENTS: usize = 1024;

impl Writer {
    /// Reads, checks and folds every event other ledgers appended past this writer's head, and
    /// hands each to subscribers. Returns how many there were. Damage (an event whose hash is
    /// not the hash of its bytes, or that does not link to the chain) stops every later write.
    pub(super) fn follow(&mut self) -> Result<u64, StorageError> {
        self.follow_due = false;
        let mut folded = 0u64;
        loop {
            let raw = self
                .core
                .storage
                .read_range(self.head.size, FOLLOW_BATCH_EVENTS)?;
            let mut events = Vec::with_capacity(raw.len());
            for stored in &raw {
                let event = self
                    .core
                    .decode(stored)
                    .map_err(|e| StorageError::Corrupt {
                        seq: Some(stored.seq),
                        detail: e.to_string(),
                    })?;
                if event.seq != self.head.size || event.prev_hash != self.head.last_hash {
                    return Err(self.damaged(
                        stored.seq,
                        "it does not link to the head of the chain before it",
                    ));
                }
                if let Some(known) = self.versions.get(&event.stream)
                    && event.stream_version != known + 1
                {
                    return Err(self.damaged(
                        stored.seq,
                        &format!(
                            "it is version {} of {}, which was at {known}",
                            event.stream_version, event.stream
                        ),
                    ));
                }
                self.frontier
                    .push(&Sha256, event.hash.as_bytes())
                    .map_err(|e| StorageError::Failed(format!("Merkle tree: {e}")))?;
                self.versions
                    .insert(event.stream.clone(), event.stream_version);
                self.head = ChainHead {
                    size: event.seq + 1,
                    last_hash: event.hash,
                };
                if self.last_time.is_none_or(|t| t < event.recorded_at) {
                    self.last_time = Some(event.recorded_at);
                }
                events.push(Arc::new(event));
            }
            folded += events.len() as u64;
            // Readers learn the head first, so that none waits on the live feed for an event
            // it can already read.
            self.core.storage.followed(self.head);
            for event in events {
                // No subscriber is not an error.
                let _ = self.core.events.send(event);
            }
            if raw.len() < FOLLOW_BATCH_EVENTS {
                return Ok(folded);
            }
        }
    }

    fn damaged(&self, seq: u64, detail: &str) -> StorageError {
        let reason = format!("the event another writer committed at seq {seq} is wrong: {detail}");
        self.core.poison(reason.clone());
        StorageError::Corrupt {
            seq: Some(seq),
            detail: reason,
        }
    }

    /// [`Writer::follow`] as the periodic follower runs it: a failure is logged (damage has
    /// already stopped writes) and the next round tries again.
    pub(super) fn follow_quietly(&mut self) {
        if let Err(e) = self.follow() {
            tracing::warn!(error = %e, "could not read what other nodes appended");
        }
    }

    /// One group on a shared store. Unless another ledger wrote lately, it is first planned on
    /// this writer's head without the append lock and written on condition that the store's
    /// head is still that head (one round trip). When the store finds the head moved, nothing
    /// was written, and the group is planned again under the lock ([`Writer::process_held`]).
    pub(super) fn process_shared(&mut self, jobs: Vec<AppendJob>) {
        if let Some(reason) = self.core.poisoned() {
            for job in jobs {
                let _ = job.reply.send(Err(AppendError::Poisoned(reason.clone())));
            }
            return;
        }
        let (requests, replies): (Vec<(AppendRequest, Vec<Blob>)>, Vec<Reply>) = jobs
            .into_iter()
            .map(|j| ((j.request, j.content), j.reply))
            .unzip();
        if !self.contended {
            match self.try_on_own_head(&requests) {
                Unlocked::Written(written, plans) => {
                    let (group, frontier) = *written;
                    return self.written(group, frontier, replies.into_iter().zip(plans).collect());
                }
                Unlocked::Unwritten(plans) => {
                    return answer_unwritten(replies.into_iter().zip(plans).collect());
                }
                Unlocked::Failed(plans, e) => {
                    tracing::warn!(error = %e, "a group commit failed; the next write learns its outcome");
                    return refuse_all(replies, plans, &e);
                }
                Unlocked::Moved => self.contended = true,
            }
        }
        self.process_held(requests, replies);
    }

    /// Plans `requests` on this writer's head and writes them on condition that the store's
    /// head is still that head. Plans are kept only when they cannot depend on a head this
    /// writer has not seen: after a write that found the head unmoved, or when nothing is
    /// written and no append was refused for its version.
    fn try_on_own_head(&mut self, requests: &[(AppendRequest, Vec<Blob>)]) -> Unlocked {
        let now = self.tick();
        let mut group = Group::on(self.head);
        let plans: Vec<Plan> = requests
            .iter()
            .map(|(r, content)| self.plan(r.clone(), content.clone(), now, &mut group))
            .collect();
        if group.commits.is_empty() {
            let stale = plans
                .iter()
                .any(|p| matches!(p, Plan::Done(Err(AppendError::VersionConflict { .. }))));
            return if stale {
                Unlocked::Moved
            } else {
                Unlocked::Unwritten(plans)
            };
        }
        let mut frontier = self.frontier.clone();
        match self.write_group(&group, &mut frontier, None) {
            Ok(()) => Unlocked::Written(Box::new((group, frontier)), plans),
            Err((_, StorageError::HeadMoved)) => Unlocked::Moved,
            Err((_, e)) => Unlocked::Failed(plans, e),
        }
    }

    /// One group planned and written under the store's append lock: the writer first reads
    /// and folds what other ledgers committed up to the locked head, so the group is planned
    /// on the chain's true head and every stream's true version, and its write cannot find the
    /// head moved. A group that gets the lock is written; a version conflict it finds is one
    /// the caller must hear. A write that failed otherwise refuses the group's appends without
    /// stopping the ledger: the next group finds the head moved if its commit did land, and
    /// follows it, so a group that landed is followed, not rewritten, and a retry with the
    /// same idempotency key gets its receipt.
    fn process_held(&mut self, requests: Vec<(AppendRequest, Vec<Blob>)>, replies: Vec<Reply>) {
        let storage = Arc::clone(&self.core.storage);
        let held = match storage.hold_head() {
            Ok(Some(held)) => held,
            Ok(None) => {
                let e = StorageError::Failed(
                    "the shared store cannot lock the head of its log for an append".into(),
                );
                return refuse_all(replies, Vec::new(), &e);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not lock the head of the shared log");
                return refuse_all(replies, Vec::new(), &e);
            }
        };
        let locked = held.head();
        // Nobody else wrote since this writer's last look: the next group may try its own head.
        self.contended = locked != self.head;
        if locked != self.head {
            // Nobody appends while the lock is held, and every commit is visible before its
            // lock is released: reading on from this writer's head reaches the locked head.
            if let Err(e) = self.follow() {
                return refuse_all(replies, Vec::new(), &e);
            }
            if locked != self.head {
                let e = StorageError::Failed(format!(
                    "the shared log's head row says {} events, but {} could be read",
                    locked.size, self.head.size
                ));
                return refuse_all(replies, Vec::new(), &e);
            }
        }
        let now = self.tick();
        let mut group = Group::on(self.head);
        let plans: Vec<Plan> = requests
            .into_iter()
            .map(|(r, content)| self.plan(r, content, now, &mut group))
            .collect();
        if group.commits.is_empty() {
            // Dropping the hold releases the lock, having written nothing.
            drop(held);
            return answer_unwritten(replies.into_iter().zip(plans).collect());
        }
        let mut frontier = self.frontier.clone();
        match self.write_group(&group, &mut frontier, Some(held)) {
            Ok(()) => self.written(group, frontier, replies.into_iter().zip(plans).collect()),
            Err((_, e)) => {
                tracing::warn!(error = %e, "a group commit failed; the next write learns its outcome");
                refuse_all(replies, plans, &e);
            }
        }
    }
}

/// What became of a group tried on the writer's own head without the append lock.
enum Unlocked {
    /// Written: the head was the writer's.
    Written(Box<(Group, Frontier)>, Vec<Plan>),
    /// Nothing to write, and every answer stands whatever the head.
    Unwritten(Vec<Plan>),
    /// The write failed otherwise; its outcome is unknown.
    Failed(Vec<Plan>, StorageError),
    /// The head moved, or an answer may rest on a head the writer has not seen: nothing was
    /// written, plan again under the lock.
    Moved,
}

/// Answers a group none of whose appends is written: each its refusal or its replayed receipt.
fn answer_unwritten(waiting: Vec<(Reply, Plan)>) {
    for (reply, plan) in waiting {
        if let Plan::Done(result) = plan {
            let _ = reply.send(result);
        }
    }
}

/// Refuses every append still to be written with `e`; those already answered get their answer.
fn refuse_all(replies: Vec<Reply>, plans: Vec<Plan>, e: &StorageError) {
    let e = Arc::new(match e {
        StorageError::HeadMoved => StorageError::HeadMoved,
        other => StorageError::Failed(other.to_string()),
    });
    let mut plans = plans.into_iter();
    for reply in replies {
        let _ = reply.send(match plans.next() {
            Some(Plan::Done(result)) => result,
            _ => Err(AppendError::Storage(Arc::clone(&e))),
        });
    }
}
