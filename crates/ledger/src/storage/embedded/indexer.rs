//! The indexer thread: the index of each group commit is written after its frame is durable,
//! off the path that acknowledges appends, and readers wait until it covers the head.

use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};

use super::EmbeddedStorage;
use super::head_record;
use super::index::{IndexBatch, Tail};
use super::index_tree::IndexTree;
use crate::storage::{Storage, StorageError};

/// One group commit's index writes, on their way to sled, and where the log ends after it.
pub(super) struct IndexJob {
    pub(super) batch: IndexBatch,
    pub(super) tail: Tail,
    /// The frame's number among those written since the backend opened, from 1.
    pub(super) job: u64,
}

/// Group commits whose frames are durable but not yet indexed, at most: past it, the writer
/// waits for the indexer, so that the index never falls far behind the log.
pub(super) const INDEX_QUEUE_JOBS: usize = 4;

/// How far the index has caught up with the log, shared by the backend and its indexer thread.
#[derive(Debug, Default)]
pub(super) struct IndexProgress {
    pub(super) state: Mutex<IndexState>,
    pub(super) changed: Condvar,
}

#[derive(Debug, Default)]
pub(super) struct IndexState {
    /// Events the index covers.
    pub(super) indexed: u64,
    /// Frames written since the backend opened that the index covers (a frame of content alone
    /// moves no seq, so this, not `indexed`, says whether its blobs are in the index).
    pub(super) jobs: u64,
    /// Why the index stopped following the log, if it did: a batch could not be written.
    pub(super) failed: Option<String>,
}

impl IndexProgress {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, IndexState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The indexer thread: writes the index of each group commit after its frame is durable, off
/// the path that acknowledges appends, and merges whatever jobs wait into one sled batch.
pub(super) fn run_indexer(
    tree: Arc<IndexTree>,
    progress: Arc<IndexProgress>,
    jobs: Receiver<IndexJob>,
    head_sync: Option<(PathBuf, File)>,
) {
    /// However the thread ends, a reader still waiting for it is told rather than left waiting.
    struct Stopped<'a>(&'a IndexProgress);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            let mut state = self.0.lock();
            if state.failed.is_none() {
                state.failed = Some("the indexer has stopped".into());
            }
            drop(state);
            self.0.changed.notify_all();
        }
    }
    let _stopped = Stopped(&progress);
    let mut last_head_sync = std::time::Instant::now();
    while let Ok(IndexJob {
        mut batch,
        mut tail,
        mut job,
    }) = jobs.recv()
    {
        while let Ok(later) = jobs.try_recv() {
            batch.append(later.batch);
            tail = later.tail;
            job = later.job;
        }
        let written = batch.apply(&tree, &tail);
        // The head record was written (not synced) when the frames were acknowledged; syncing
        // it here, off the acknowledgement's path, bounds how far a power loss can set it back.
        if let Some((path, file)) = &head_sync
            && last_head_sync.elapsed()
                >= std::time::Duration::from_millis(head_record::HEAD_SYNC_EVERY_MS)
        {
            if let Err(e) = file.sync_data() {
                tracing::warn!(error = %e, path = %path.display(), "the head record could not be synced");
            }
            last_head_sync = std::time::Instant::now();
        }
        let mut state = progress.lock();
        match written {
            Ok(()) => {
                state.indexed = tail.next_seq;
                state.jobs = job;
            }
            Err(e) => {
                state.failed = Some(format!(
                    "the index could not be written at seq {}: {e}",
                    state.indexed
                ));
            }
        }
        let failed = state.failed.is_some();
        drop(state);
        progress.changed.notify_all();
        if failed {
            // Dropping the queue refuses every later frame: the log must not run ahead of an
            // index that cannot follow it.
            return;
        }
    }
}

impl EmbeddedStorage {
    /// Starts the indexer thread, once recovery has brought the index up to the log.
    pub(super) fn start_indexer(&mut self) -> Result<(), StorageError> {
        self.progress.lock().indexed = self.head().size;
        let (queue, jobs) = std::sync::mpsc::sync_channel(INDEX_QUEUE_JOBS);
        let tree = Arc::clone(&self.index.tree);
        let progress = Arc::clone(&self.progress);
        let head_sync = match &*self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(head) => Some(head.sync_handle()?),
            None => None,
        };
        let thread = std::thread::Builder::new()
            .name("ledger-indexer".into())
            .spawn(move || run_indexer(tree, progress, jobs, head_sync))
            .map_err(|e| StorageError::io("start the indexer thread", &self.log_dir, e))?;
        *self.indexer.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).queue = Some(queue);
        Ok(())
    }

    /// Makes every later write of the index fail, as a failing disk would make sled's.
    #[cfg(test)]
    pub(crate) fn fail_index_writes(&self) {
        self.index.tree.refuse_batches();
    }

    /// Why the index stopped following the log, if it did.
    pub(super) fn index_failure(&self) -> Option<String> {
        self.progress.lock().failed.clone()
    }

    /// Waits until the index covers the first `size` events (at most the time the indexer takes
    /// for the groups queued before them), so that whatever an acknowledged append wrote can be
    /// found by stream, id or hash as soon as the acknowledgement is given.
    pub(super) fn wait_indexed(&self, size: u64) -> Result<(), StorageError> {
        let mut state = self.progress.lock();
        loop {
            if state.indexed >= size {
                return Ok(());
            }
            if let Some(reason) = &state.failed {
                return Err(StorageError::Index(reason.clone()));
            }
            state = self
                .progress
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until the index covers every event appended so far.
    pub(super) fn index_caught_up(&self) -> Result<u64, StorageError> {
        let size = self.head().size;
        self.wait_indexed(size)?;
        Ok(size)
    }

    /// Stops the indexer once it has written every queued job.
    pub(super) fn stop_indexer(&self) {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .queue
            .take();
        if let Some(thread) = self
            .indexer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::ledger_proof::SigningKey;
    use crate::storage::embedded::{EmbeddedOptions, EmbeddedStorage};
    use crate::storage::{Blob, Storage, StorageError, TreeGrowth};
    use crate::{
        AppendError, AppendRequest, Digest, ExpectedVersion, Idempotency, Ledger, LedgerOptions,
        NewEvent, Receipt,
    };

    fn options() -> LedgerOptions {
        LedgerOptions {
            checkpoint_interval: None,
            checkpoint_every_events: None,
            signing_key: Some(Arc::new(SigningKey::from_secret_bytes(&[3; 32]))),
            id_seed: Some(8),
            ..LedgerOptions::default()
        }
    }

    /// One event on `stream`, sent with the idempotency key `key`.
    fn command(stream: &str, key: &str) -> AppendRequest {
        AppendRequest {
            stream: stream.into(),
            expected: ExpectedVersion::Any,
            actor: "tester".into(),
            events: vec![NewEvent {
                kind: "noted".into(),
                payload: format!("{stream} {key}").into_bytes(),
                causation: vec![],
            }],
            idempotency: Some(Idempotency {
                key: key.into(),
                fingerprint: Digest(*blake3::hash(key.as_bytes()).as_bytes()),
            }),
            content: Vec::new(),
        }
    }

    fn log_bytes(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir.join("log"))
            .expect("log")
            .map(|e| e.expect("entry").metadata().expect("metadata").len())
            .sum()
    }

    /// sled fails a batch after the frame it indexes was made durable: no frame is written
    /// after it, every read that needs the index is refused rather than answered from what the
    /// index holds, a retried command is not written a second time, and the next open indexes
    /// the durable events from the log.
    #[test]
    fn an_index_that_cannot_be_written_stops_the_log_and_refuses_what_it_cannot_answer() {
        let dir = tempfile::tempdir().expect("dir");
        let storage =
            Arc::new(EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).expect("open"));
        let ledger = Ledger::with_storage(storage.clone(), options());
        ledger.append(command("a", "first")).expect("append");
        storage.fail_index_writes();
        // The frame is durable before it is indexed: the append is acknowledged.
        let second: Receipt = ledger.append(command("b", "second")).expect("append");
        let started = Instant::now();
        while storage.failure().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the index failure is never reported"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let written = log_bytes(dir.path());

        // The retry of the acknowledged command: its key is in the frame, not in the index.
        match ledger.append(command("b", "second")) {
            Err(AppendError::Storage(e)) => {
                assert!(e.to_string().contains("injected fault"), "{e}")
            }
            other => panic!("a retry past a failed index: {other:?}"),
        }
        match ledger.append(command("c", "third")) {
            Err(e @ (AppendError::Storage(_) | AppendError::Poisoned(_))) => {
                assert!(e.to_string().contains("injected fault"), "{e}")
            }
            Err(e) => panic!("refused for another reason: {e}"),
            Ok(receipt) => panic!("a frame was written past a failed index: {receipt:?}"),
        }
        // Nor a frame of content alone, as a restore writes before the events: no read of the
        // index stands in its way.
        let refused = storage.append(
            &[],
            &[Blob::new(&b"a blob of its own"[..])],
            &TreeGrowth::default(),
        );
        assert!(
            matches!(&refused, Err(StorageError::Index(reason)) if reason.contains("injected fault")),
            "{refused:?}"
        );
        assert_eq!(log_bytes(dir.path()), written, "a frame was written");

        // Reads that need what the index lacks are refused, not answered short.
        let event = &second.events[0];
        assert!(ledger.idempotency("second").is_err());
        assert!(ledger.read_stream("b", 1, 10).is_err());
        assert!(ledger.stream_version("b").is_err());
        assert!(ledger.find_event_id(event.event_id).is_err());
        assert!(ledger.find_hash(&event.hash).is_err());
        assert!(ledger.get(event.seq).is_err());
        ledger.shutdown();
        drop(ledger);
        drop(storage);

        // The events are durable; the next open indexes them from the log.
        let storage = Arc::new(
            EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).expect("reopen"),
        );
        let ledger = Ledger::with_storage(storage, options());
        assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
        let again = ledger.append(command("b", "second")).expect("retry");
        assert!(again.replayed, "{again:?}");
        assert_eq!(again.events, second.events);
        assert_eq!(ledger.read_stream("b", 1, 10).expect("read").len(), 1);
        assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
        ledger.shutdown();
    }
}
