//! Many writers at once: optimistic concurrency loses no update, and idempotency holds when
//! the same key races with itself.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};

use ledger::{AppendError, ExpectedVersion};

use super::{keyed, open, request};

#[test]
fn racing_writers_on_many_streams_lose_no_update() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let threads = 16;
    let per_thread = 40;
    let streams = 5;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let ledger = ledger.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut conflicts = 0u32;
                let mut written: HashMap<String, u32> = HashMap::new();
                for i in 0..per_thread {
                    let stream = format!("task-{}", (t + i) % streams);
                    loop {
                        let version = ledger.stream_version(&stream).unwrap();
                        let payload = format!("{t}/{i}");
                        match ledger.append(request(
                            &stream,
                            ExpectedVersion::Exact(version),
                            &[payload.as_bytes()],
                        )) {
                            Ok(receipt) => {
                                assert_eq!(receipt.stream_version, version + 1);
                                *written.entry(stream).or_default() += 1;
                                break;
                            }
                            Err(AppendError::VersionConflict { current, .. }) => {
                                assert!(current > version);
                                conflicts += 1;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                (written, conflicts)
            })
        })
        .collect();
    let mut totals: HashMap<String, u32> = HashMap::new();
    let mut conflicts = 0;
    for h in handles {
        let (written, c) = h.join().unwrap();
        conflicts += c;
        for (s, n) in written {
            *totals.entry(s).or_default() += n;
        }
    }
    assert_eq!(totals.values().sum::<u32>() as usize, threads * per_thread);
    for (stream, n) in &totals {
        let events = ledger.read_stream(stream, 1, 10_000).unwrap();
        assert_eq!(events.len() as u32, *n, "{stream}");
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.stream_version, i as u64 + 1);
        }
    }
    assert_eq!(ledger.head().size as usize, threads * per_thread);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
    // Conflicts are expected under this much contention; they prove the check ran.
    assert!(conflicts > 0, "no writer ever conflicted");
}

#[test]
fn the_same_key_racing_with_itself_writes_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let threads = 24;
    for round in 0..10 {
        let barrier = Arc::new(Barrier::new(threads));
        let key = format!("retry-{round}");
        let stream = format!("task-{}", round % 3);
        let results: Vec<_> = (0..threads)
            .map(|t| {
                let ledger = ledger.clone();
                let barrier = barrier.clone();
                let key = key.clone();
                let stream = stream.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    // Half send the same command, half a different one under the same key.
                    let payload: &[u8] = if t % 2 == 0 { b"same" } else { b"other" };
                    (
                        t % 2,
                        ledger.append(keyed(
                            request(&stream, ExpectedVersion::Any, &[payload, payload]),
                            &key,
                        )),
                    )
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let written: Vec<_> = results
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .filter(|r| !r.replayed)
            .collect();
        assert_eq!(written.len(), 1, "exactly one append writes");
        let winner_side = results
            .iter()
            .find(|(_, r)| matches!(r, Ok(r) if !r.replayed))
            .map(|(side, _)| *side)
            .unwrap();
        for (side, result) in &results {
            if *side == winner_side {
                let receipt = result.as_ref().expect("the same command gets the receipt");
                assert_eq!(receipt.events, written[0].events);
            } else {
                assert!(matches!(
                    result,
                    Err(AppendError::IdempotencyKeyReused { .. })
                ));
            }
        }
    }
    assert_eq!(ledger.head().size, 20);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

/// Whatever an acknowledged append wrote can be found at once, by every way of finding it,
/// while other writers keep the log moving: the index may be written after the
/// acknowledgement, but never seen behind it.
#[test]
fn an_acknowledged_append_is_found_at_once_by_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let threads = 12;
    let per_thread = 60;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let ledger = ledger.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let stream = format!("task-{t}");
                for i in 0..per_thread {
                    let payload = format!("{t}/{i}");
                    let mut request = request(&stream, ExpectedVersion::Any, &[payload.as_bytes()]);
                    let key = format!("key-{t}-{i}");
                    if i % 3 == 0 {
                        request = keyed(request, &key);
                    }
                    let receipt = ledger.append(request).unwrap();
                    let written = receipt.events[0].clone();
                    assert_eq!(
                        ledger.stream_version(&stream).unwrap(),
                        receipt.stream_version
                    );
                    let by_stream = ledger
                        .read_stream(&stream, receipt.stream_version, 1)
                        .unwrap();
                    assert_eq!(by_stream.len(), 1, "{stream} v{}", receipt.stream_version);
                    assert_eq!(by_stream[0].hash, written.hash);
                    let by_id = ledger.find_event_id(written.event_id).unwrap().unwrap();
                    assert_eq!(by_id.seq, written.seq);
                    let by_hash = ledger.find_hash(&written.hash).unwrap().unwrap();
                    assert_eq!(by_hash.seq, written.seq);
                    let by_seq = ledger.get(written.seq).unwrap().unwrap();
                    assert_eq!(by_seq.hash, written.hash);
                    ledger.root_at(written.seq + 1).unwrap();
                    if i % 3 == 0 {
                        let record = ledger.idempotency(&key).unwrap().unwrap();
                        assert_eq!(record.first_seq, written.seq);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(ledger.head().size as usize, threads * per_thread);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

/// Past `append_queue_max` an append waits for room: with room for one, many writers at once
/// each get every append acknowledged, none refused.
#[test]
fn a_full_append_queue_makes_appends_wait_and_refuses_none() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = ledger::Ledger::open(
        dir.path(),
        ledger::LedgerOptions {
            limits: ledger::Limits {
                append_queue_max: 1,
                ..ledger::Limits::default()
            },
            ..super::options(7)
        },
    )
    .unwrap();
    let (threads, per_thread) = (16, 30);
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (ledger, barrier) = (ledger.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    let payload = format!("{t}/{i}");
                    ledger
                        .append(request(
                            &format!("s-{t}"),
                            ExpectedVersion::Any,
                            &[payload.as_bytes()],
                        ))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(ledger.head().size as usize, threads * per_thread);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

/// Limits a ledger cannot work with as given — a queue larger than its semaphore counts, a
/// subscription buffer too large to allocate, segments smaller than a header — are brought to
/// the nearest it can: the ledger opens, appends, feeds a subscriber and reopens.
#[test]
fn limits_past_what_the_ledger_can_use_are_brought_within_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = || ledger::LedgerOptions {
        limits: ledger::Limits {
            append_queue_max: usize::MAX,
            subscription_buffer_events: usize::MAX,
            segment_bytes_max: 0,
            ..ledger::Limits::default()
        },
        ..super::options(8)
    };
    let ledger = ledger::Ledger::open(dir.path(), options()).unwrap();
    let mut subscription = ledger.subscribe(0);
    for i in 0..20u8 {
        ledger
            .append(request("t", ExpectedVersion::Any, &[&[i; 300]]))
            .unwrap();
    }
    for seq in 0..20 {
        assert_eq!(subscription.next_blocking().unwrap().seq, seq);
    }
    drop(subscription);
    ledger.shutdown();
    drop(ledger);
    // Each segment holds at least a frame or two: not one file per byte.
    let segments = super::segment_files(dir.path()).len();
    assert!((2..=20).contains(&segments), "{segments} segments");
    let ledger = ledger::Ledger::open(dir.path(), options()).unwrap();
    assert_eq!(ledger.read_range(0, 100).unwrap().len(), 20);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}
