//! Live update: following the ledger, read-your-writes, events handed over out of order, and
//! stopping before an event that cannot be folded.

use std::time::Duration;

use ledger::{AppendRequest, ExpectedVersion, NewEvent};
use projections::{Applied, ApplyError, QueryError, Stall, TaskQuery};
use research::rules::{Mode, Stance};

use crate::support::*;

#[tokio::test]
async fn a_follower_makes_each_write_visible_and_waiters_see_it() {
    let ledger = memory_ledger(51);
    let mut world = World::new(&ledger);
    let projector = projector(&ledger);
    let follower = tokio::spawn({
        let projector = projector.clone();
        async move { projector.follow().await }
    });
    let mut last = 0;
    for command in [
        open_task("live", "Is it live?", &[], Mode::ToolConstrained),
        add(vec![
            item(
                "a.example.org",
                "blog",
                "2025-06-01",
                Some(Stance::Supports),
            ),
            item(
                "b.example.org",
                "blog",
                "2025-05-01",
                Some(Stance::Supports),
            ),
        ]),
    ] {
        let request = world.request("live", &command).unwrap();
        let receipt = ledger.append_async(request).await.unwrap();
        world.record(&receipt);
        last = receipt.events.last().unwrap().seq;
        tokio::time::timeout(Duration::from_secs(10), projector.wait_for(last))
            .await
            .expect("the follower folds the write")
            .unwrap();
        assert_eq!(
            projector.session_version("live").unwrap(),
            receipt.stream_version
        );
    }
    assert_eq!(projector.caught_up_to(), Some(last));
    assert_eq!(projector.lag(), 0);
    assert_eq!(
        projector.state("live").unwrap().canonical_bytes(),
        world.states["live"].canonical_bytes()
    );
    assert!(!follower.is_finished());
    follower.abort();
}

#[test]
fn the_write_path_reads_its_own_writes_in_any_order() {
    let ledger = memory_ledger(52);
    let mut world = World::new(&ledger);
    let projector = projector(&ledger);
    let opened = world.ok("t", open_task("t", "Q?", &[], Mode::ToolConstrained));
    let added = world.ok(
        "t",
        add(vec![
            item("a.example.org", "blog", "2025-06-01", None),
            item("b.example.org", "blog", "2025-05-01", None),
            item("c.example.org", "blog", "2025-04-01", None),
        ]),
    );
    assert_eq!(projector.caught_up_to(), None);
    assert_eq!(projector.lag(), 4);
    // The last event first: the projector pulls the gap from the ledger.
    assert_eq!(projector.apply(&added[2]).unwrap(), Applied::Folded);
    assert_eq!(projector.caught_up_to(), Some(added[2].seq));
    assert_eq!(
        projector.apply(&opened[0]).unwrap(),
        Applied::AlreadyApplied
    );
    assert_eq!(projector.apply(&added[1]).unwrap(), Applied::AlreadyApplied);
    assert_eq!(projector.session_version("t").unwrap(), 4);
    // Catching up to a seq is the write path's call after an append.
    let more = world.ok("t", tool_call_command(1));
    assert_eq!(projector.catch_up_to(more[0].seq).unwrap(), 1);
    assert_eq!(projector.catch_up_to(more[0].seq).unwrap(), 0);
    assert_eq!(projector.session_version("t").unwrap(), 5);
}

#[test]
fn an_event_of_another_ledger_is_refused_and_the_projector_recovers() {
    let ledger = memory_ledger(53);
    let mut world = World::new(&ledger);
    world.ok("t", open_task("t", "Q?", &[], Mode::ToolConstrained));
    let projector = projector(&ledger);

    let elsewhere = memory_ledger(54);
    let mut other = World::new(&elsewhere);
    other.ok("t", open_task("t", "Q?", &[], Mode::ToolConstrained));
    let foreign = other.ok("t", tool_call_command(2));
    world.ok("t", tool_call_command(2));
    // Same seq, same task, same version: only the chain tells them apart.
    assert_eq!(foreign[0].seq, projector.next_seq());
    let refused = projector.apply(&foreign[0]);
    assert!(
        matches!(refused, Err(ApplyError::ChainBroken { seq, .. }) if seq == foreign[0].seq),
        "{refused:?}"
    );
    assert_eq!(projector.session_version("t").unwrap(), 1);
    assert!(projector.stall().is_some());
    // The ledger's own event folds, and the stall is gone.
    assert_eq!(projector.catch_up().unwrap(), 1);
    assert_eq!(projector.stall(), None);
    assert_eq!(
        projector.state("t").unwrap().canonical_bytes(),
        world.states["t"].canonical_bytes()
    );
}

#[test]
fn folding_stops_before_an_event_it_cannot_read() {
    let ledger = memory_ledger(55);
    let mut world = World::new(&ledger);
    world.ok("t", open_task("t", "Q?", &[], Mode::ToolConstrained));
    let projector = projector(&ledger);
    let receipt = ledger
        .append(AppendRequest {
            stream: "t".into(),
            expected: ExpectedVersion::Exact(1),
            actor: "newer-build".into(),
            events: vec![NewEvent {
                kind: "evidence_weighed".into(),
                payload: vec![1, 0, 7],
                causation: vec![],
            }],
            idempotency: None,
            content: Vec::new(),
        })
        .unwrap();
    let bad = receipt.events[0].seq;
    world.ok("u", open_task("u", "Later?", &[], Mode::ToolConstrained));

    let stopped = projector.catch_up();
    assert!(
        matches!(&stopped, Err(ApplyError::Undecodable { seq, kind, .. }) if *seq == bad && kind == "evidence_weighed"),
        "{stopped:?}"
    );
    assert_eq!(projector.caught_up_to(), Some(bad - 1));
    assert_eq!(projector.lag(), 2);
    assert!(matches!(projector.stall(), Some(Stall { seq, .. }) if seq == bad));
    // A waiter for the event, or anything after it, is told at once.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let waited = runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(5), projector.wait_for(bad + 1)).await
        })
        .unwrap();
    assert!(matches!(waited, Err(Stall { seq, .. }) if seq == bad));
    // What came before is still served; nothing after is folded.
    assert_eq!(projector.session_version("t").unwrap(), 1);
    assert!(matches!(
        projector.state("u"),
        Err(QueryError::TaskNotFound { .. })
    ));
    // Opening over the same ledger reports the same stall instead of failing.
    let reopened = crate::support::projector(&ledger);
    assert!(matches!(&reopened.open_report().stall, Some(Stall { seq, .. }) if *seq == bad));
    assert_eq!(reopened.status().stall.map(|s| s.seq), Some(bad));
}

#[test]
fn streams_that_are_not_tasks_are_skipped() {
    let ledger = memory_ledger(56);
    let mut world = World::new(&ledger);
    let tool = world.tool_call(1);
    world.ok("t", open_task("t", "Q?", &[], Mode::ToolConstrained));
    world.tool_call(2);
    let projector = projector(&ledger);
    assert_eq!(projector.apply(&tool).unwrap(), Applied::AlreadyApplied);
    let status = projector.status();
    assert_eq!(status.other_events, 2);
    assert_eq!(status.tasks, 1);
    assert_eq!(status.next_seq, 3);
    assert!(matches!(
        projector.state("tools"),
        Err(QueryError::TaskNotFound { .. })
    ));
    let page = projector.tasks(&TaskQuery::default()).unwrap();
    assert_eq!(page.tasks.len(), 1);
    // Its trail is the ledger's nonetheless.
    assert_eq!(
        projector
            .audit_trail("tools", 1, None)
            .unwrap()
            .events
            .len(),
        2
    );
}

#[test]
fn unknown_tasks_and_future_versions_are_typed_errors() {
    let ledger = memory_ledger(57);
    let mut world = World::new(&ledger);
    world.ok("t", open_task("t", "Q?", &[], Mode::ToolConstrained));
    world.ok("t", tool_call_command(1));
    let projector = projector(&ledger);
    assert!(matches!(
        projector.state("nope"),
        Err(QueryError::TaskNotFound { task_id }) if task_id == "nope"
    ));
    assert!(matches!(
        projector.session_version("nope"),
        Err(QueryError::TaskNotFound { .. })
    ));
    assert!(matches!(
        projector.state_at("nope", 1),
        Err(QueryError::TaskNotFound { .. })
    ));
    assert!(matches!(
        projector.state_at("t", 3),
        Err(QueryError::VersionBeyondHead {
            requested: 3,
            head: 2,
            ..
        })
    ));
    assert!(matches!(
        projector.task_hash("nope"),
        Err(QueryError::TaskNotFound { .. })
    ));
    assert_eq!(projector.state_at("t", 1).unwrap().version(), 1);
}

#[test]
fn concurrent_writers_each_read_their_own_writes() {
    let ledger = memory_ledger(58);
    let projector = projector(&ledger);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let ledger = ledger.clone();
            let projector = projector.clone();
            std::thread::spawn(move || {
                let task = format!("w-{w}");
                let mut world = World::new(&ledger);
                world.ok(&task, open_task(&task, "Q?", &[], Mode::AgentLed));
                for i in 0..25u8 {
                    let recorded = world.ok(&task, tool_call_command(i));
                    let last = recorded.last().unwrap();
                    // The write path: catch up to the append, then read it back at once, however
                    // the other writers' appends interleave with it.
                    projector.catch_up_to(last.seq).unwrap();
                    assert!(projector.caught_up_to() >= Some(last.seq));
                    assert_eq!(
                        projector.session_version(&task).unwrap(),
                        last.stream_version
                    );
                }
                world.states.remove(&task).unwrap()
            })
        })
        .collect();
    let states: Vec<research::TaskState> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(projector.lag(), 0);
    for (w, state) in states.iter().enumerate() {
        assert_eq!(
            projector.task_hash(&format!("w-{w}")).unwrap(),
            projections::state_hash(state)
        );
    }
    assert_eq!(
        projector.projection_hash(),
        crate::support::projector(&ledger).projection_hash()
    );
}

/// Storage that counts the reads of events, so a test can tell folding the writer's events
/// from reading them back.
#[derive(Debug)]
struct CountingStorage {
    inner: ledger::storage::memory::MemoryStorage,
    reads: std::sync::atomic::AtomicU64,
}

impl CountingStorage {
    fn count(&self) {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

use ledger::storage::{Blob, Commit, StorageProblem, TreeGrowth};
use ledger::{ChainHead, CheckpointEntry, Digest, IdempotencyRecord, RawEvent, StorageError};

impl ledger::Storage for CountingStorage {
    fn head(&self) -> ChainHead {
        self.inner.head()
    }
    fn append(
        &self,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        self.inner.append(commits, content, tree)
    }
    fn read_blob(&self, hash: &Digest) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_blob(hash)
    }
    fn has_blob(&self, hash: &Digest) -> Result<bool, StorageError> {
        self.inner.has_blob(hash)
    }
    fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, StorageError> {
        self.count();
        self.inner.read_range(from_seq, max)
    }
    fn visit_range(
        &self,
        from_seq: u64,
        max: usize,
        visit: &mut dyn FnMut(u64, &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<usize, StorageError> {
        self.count();
        self.inner.visit_range(from_seq, max, visit)
    }
    fn stream_version(&self, stream: &str) -> Result<u64, StorageError> {
        self.inner.stream_version(stream)
    }
    fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RawEvent>, StorageError> {
        self.count();
        self.inner.read_stream(stream, from_version, max)
    }
    fn find_event_id(&self, id: uuid::Uuid) -> Result<Option<RawEvent>, StorageError> {
        self.inner.find_event_id(id)
    }
    fn find_hash(&self, hash: &Digest) -> Result<Option<RawEvent>, StorageError> {
        self.inner.find_hash(hash)
    }
    fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        self.inner.idempotency(key)
    }
    fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, StorageError> {
        self.inner.idempotency_records()
    }
    fn problems(&self) -> Vec<StorageProblem> {
        self.inner.problems()
    }
    fn checkpoint_index(&self) -> Result<(), StorageError> {
        self.inner.checkpoint_index()
    }
    fn merkle_size(&self) -> Result<u64, StorageError> {
        self.inner.merkle_size()
    }
    fn put_merkle_nodes(
        &self,
        nodes: &[ledger::ledger_proof::PerfectNode],
        size: u64,
    ) -> Result<(), StorageError> {
        self.inner.put_merkle_nodes(nodes, size)
    }
    fn clear_merkle_nodes(&self) -> Result<(), StorageError> {
        self.inner.clear_merkle_nodes()
    }
    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        self.inner.merkle_node(level, index)
    }
    fn append_checkpoint_entry(&self, entry: &CheckpointEntry) -> Result<(), StorageError> {
        self.inner.append_checkpoint_entry(entry)
    }
    fn checkpoint_entries(&self) -> Result<Vec<CheckpointEntry>, StorageError> {
        self.inner.checkpoint_entries()
    }
}

fn counted_ledger(buffer: usize) -> (ledger::Ledger, std::sync::Arc<CountingStorage>) {
    let storage = std::sync::Arc::new(CountingStorage {
        inner: ledger::storage::memory::MemoryStorage::new(
            ledger::storage::memory::Faults::default(),
            71,
        ),
        reads: std::sync::atomic::AtomicU64::new(0),
    });
    let mut options = ledger_options(71);
    options.limits.subscription_buffer_events = buffer;
    let ledger = ledger::Ledger::with_storage(storage.clone(), options);
    (ledger, storage)
}

#[test]
fn the_write_path_folds_the_writers_events_without_reading_them_back() {
    let (ledger, storage) = counted_ledger(4096);
    let mut world = World::new(&ledger);
    let projector = projector(&ledger);
    let mut last = 0;
    for (task, stance) in [("a", Stance::Supports), ("b", Stance::Opposes)] {
        last = world
            .ok(task, open_task(task, "Read back?", &[], Mode::AgentLed))
            .last()
            .unwrap()
            .seq;
        // The harness reads what it appended; the count starts after it.
        let reads = storage.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(projector.fold_appended(last).unwrap(), 1);
        assert_eq!(
            storage.reads.load(std::sync::atomic::Ordering::Relaxed),
            reads,
            "the events just appended were read back from storage"
        );
        for event in world.ok(
            task,
            add(vec![item(
                "x.example.org",
                "blog",
                "2025-06-01",
                Some(stance),
            )]),
        ) {
            last = event.seq;
        }
        let reads = storage.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(projector.fold_appended(last).unwrap(), 1);
        assert_eq!(
            storage.reads.load(std::sync::atomic::Ordering::Relaxed),
            reads,
            "the events just appended were read back from storage"
        );
        // Folding what was folded already does nothing.
        assert_eq!(projector.fold_appended(last).unwrap(), 0);
    }
    assert_eq!(projector.next_seq(), last + 1);
    let reference = fold_all(&ledger);
    for (task, state) in &reference {
        assert_eq!(
            projector.state(task).unwrap().canonical_bytes(),
            state.canonical_bytes()
        );
    }
}

#[test]
fn events_the_handover_missed_are_read_from_the_ledger() {
    // A buffer of two events: a burst of more goes past it.
    let (ledger, storage) = counted_ledger(2);
    let mut world = World::new(&ledger);
    let projector = projector(&ledger);
    let mut last = 0;
    for i in 0..6 {
        let task = format!("t{i}");
        last = world
            .ok(&task, open_task(&task, "Missed?", &[], Mode::AgentLed))
            .last()
            .unwrap()
            .seq;
    }
    let reads = storage.reads.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(projector.fold_appended(last).unwrap(), 6);
    assert!(storage.reads.load(std::sync::atomic::Ordering::Relaxed) > reads);
    assert_eq!(projector.next_seq(), last + 1);
    assert_eq!(projector.status().tasks, 6);
}

#[test]
fn the_feed_tells_of_an_event_only_once_it_is_folded() {
    // The appends block, so the feed is driven by a runtime of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let ledger = memory_ledger(81);
    let mut world = World::new(&ledger);
    let projector = projector(&ledger);
    let first = world.ok("fed", open_task("fed", "Told late?", &[], Mode::AgentLed));
    projector.fold_appended(first[0].seq).unwrap();
    // A subscriber from the start hears of what was folded before it subscribed.
    let mut feed = projector.feed(0);
    assert_eq!(runtime.block_on(feed.next()).unwrap().seq, first[0].seq);

    // Appended but not folded: nothing is delivered.
    let added = world.ok(
        "fed",
        add(vec![item(
            "x.example.org",
            "blog",
            "2025-06-01",
            Some(Stance::Supports),
        )]),
    );
    let early = runtime
        .block_on(async { tokio::time::timeout(Duration::from_millis(200), feed.next()).await });
    assert!(
        early.is_err(),
        "an event was delivered before it was folded"
    );

    // Folded: delivered, and what the subscriber reads holds it.
    projector.fold_appended(added[0].seq).unwrap();
    let told = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), feed.next()).await })
        .expect("the folded event is delivered")
        .unwrap();
    assert_eq!(told.seq, added[0].seq);
    assert_eq!(
        projector.state("fed").unwrap().version(),
        told.stream_version
    );
    assert_eq!(feed.next_seq(), added[0].seq + 1);
}
