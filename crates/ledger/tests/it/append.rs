//! Appends, reads, conflicts, idempotency and limits on the embedded backend.

use ledger::storage::StorageError;
use ledger::{AppendError, Causation, Digest, ExpectedVersion, Ledger, LedgerOptions, Limits};

use super::{
    assert_times_never_decrease, caused_by, event, keyed, open, options, options_at, request,
    segment_files, small_segments, start_time,
};

#[test]
fn appends_are_read_back_every_way() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let a = ledger
        .append(request(
            "task-a",
            ExpectedVersion::Exact(0),
            &[b"one", b"two"],
        ))
        .unwrap();
    let b = ledger
        .append(request("task-b", ExpectedVersion::Any, &[b"three"]))
        .unwrap();
    assert_eq!(a.stream_version, 2);
    assert_eq!(a.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(b.events[0].seq, 2);
    assert!(!a.replayed);

    let all = ledger.read_range(0, 100).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].payload, b"one");
    assert_eq!(all[1].prev_hash, all[0].hash);
    assert_eq!(all[2].prev_hash, all[1].hash);
    assert_eq!(all[0].prev_hash, Digest::ZERO);
    assert_eq!(all[2].stream, "task-b");
    assert_eq!(all[2].stream_version, 1);

    let stream = ledger.read_stream("task-a", 2, 10).unwrap();
    assert_eq!(stream.len(), 1);
    assert_eq!(stream[0].payload, b"two");

    let by_id = ledger.find_event_id(a.events[1].event_id).unwrap().unwrap();
    assert_eq!(by_id.seq, 1);
    let by_hash = ledger.find_hash(&b.events[0].hash).unwrap().unwrap();
    assert_eq!(by_hash.seq, 2);
    assert_eq!(ledger.get(1).unwrap().unwrap().payload, b"two");
    assert!(ledger.get(3).unwrap().is_none());
    assert_eq!(ledger.stream_version("task-a").unwrap(), 2);
    assert_eq!(ledger.stream_version("nobody").unwrap(), 0);
    assert_eq!(ledger.head().size, 3);
    assert_eq!(ledger.head().last_hash, b.events[0].hash);
}

#[test]
fn a_stale_version_is_a_conflict_carrying_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    ledger
        .append(request("t", ExpectedVersion::Exact(0), &[b"a", b"b"]))
        .unwrap();
    let err = ledger
        .append(request("t", ExpectedVersion::Exact(1), &[b"c"]))
        .unwrap_err();
    assert!(
        matches!(err, AppendError::VersionConflict { ref stream, expected: 1, current: 2 } if stream == "t"),
        "{err:?}"
    );
    let err = ledger
        .append(request("t", ExpectedVersion::Exact(0), &[b"c"]))
        .unwrap_err();
    assert!(matches!(
        err,
        AppendError::VersionConflict { current: 2, .. }
    ));
    assert_eq!(ledger.head().size, 2, "a refused append writes nothing");
}

#[test]
fn idempotency_key_is_checked_before_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let first = ledger
        .append(keyed(
            request("t", ExpectedVersion::Exact(0), &[b"a"]),
            "k1",
        ))
        .unwrap();
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"later"]))
        .unwrap();
    // The same command again, with its now stale expected version: the original receipt.
    let retry = ledger
        .append(keyed(
            request("t", ExpectedVersion::Exact(0), &[b"a"]),
            "k1",
        ))
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.events, first.events);
    assert_eq!(retry.stream_version, 1);
    assert_eq!(ledger.head().size, 2);
    // The same key for another command is refused.
    let err = ledger
        .append(keyed(request("t", ExpectedVersion::Any, &[b"other"]), "k1"))
        .unwrap_err();
    assert!(matches!(err, AppendError::IdempotencyKeyReused { ref key } if key == "k1"));
    // Event ids of keyed commands derive from the key.
    assert_eq!(first.events[0].event_id.get_version_num(), 8);
}

#[test]
fn idempotency_survives_reopening_and_a_lost_index() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let ledger = open(dir.path());
        ledger
            .append(keyed(
                request("t", ExpectedVersion::Exact(0), &[b"a", b"b"]),
                "key",
            ))
            .unwrap()
    };
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    let ledger = open(dir.path());
    let retry = ledger
        .append(keyed(
            request("t", ExpectedVersion::Exact(0), &[b"a", b"b"]),
            "key",
        ))
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.events, first.events);
    assert_eq!(ledger.stream_version("t").unwrap(), 2);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn causation_resolves_batch_indexes_and_checks_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let first = ledger
        .append(request("t", ExpectedVersion::Any, &[b"root"]))
        .unwrap();
    let root = first.events[0].hash;
    let mut req = request("t", ExpectedVersion::Any, &[]);
    req.events = vec![
        caused_by(event("derived", b"x"), &[Causation::Event(root)]),
        caused_by(
            event("derived", b"y"),
            &[Causation::InBatch(0), Causation::Event(root)],
        ),
    ];
    let receipt = ledger.append(req).unwrap();
    let events = ledger.read_range(1, 2).unwrap();
    assert_eq!(events[0].causation, vec![root]);
    assert_eq!(events[1].causation, vec![receipt.events[0].hash, root]);

    let mut forward = request("t", ExpectedVersion::Any, &[]);
    forward.events = vec![caused_by(event("derived", b"z"), &[Causation::InBatch(0)])];
    assert!(matches!(
        ledger.append(forward),
        Err(AppendError::Invalid(_))
    ));
    let mut unknown = request("t", ExpectedVersion::Any, &[]);
    unknown.events = vec![caused_by(
        event("derived", b"z"),
        &[Causation::Event(Digest([3; 32]))],
    )];
    assert!(matches!(
        ledger.append(unknown),
        Err(AppendError::Invalid(_))
    ));
    assert_eq!(ledger.head().size, 3);
}

#[test]
fn limits_are_enforced_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(
        dir.path(),
        LedgerOptions {
            limits: Limits {
                event_bytes_max: 1024,
                batch_events_max: 3,
                stream_id_bytes_max: 8,
                ..Limits::default()
            },
            ..options(2)
        },
    )
    .unwrap();
    let big = vec![7u8; 2000];
    let err = ledger
        .append(request("t", ExpectedVersion::Any, &[&big]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            AppendError::LimitExceeded {
                limit: "event_bytes_max",
                ..
            }
        ),
        "{err:?}"
    );
    let err = ledger
        .append(request(
            "t",
            ExpectedVersion::Any,
            &[b"1", b"2", b"3", b"4"],
        ))
        .unwrap_err();
    assert!(matches!(
        err,
        AppendError::LimitExceeded {
            limit: "batch_events_max",
            max: 3,
            actual: 4
        }
    ));
    let err = ledger
        .append(request("much-too-long", ExpectedVersion::Any, &[b"1"]))
        .unwrap_err();
    assert!(matches!(
        err,
        AppendError::LimitExceeded {
            limit: "stream_id_bytes_max",
            ..
        }
    ));
    assert!(matches!(
        ledger.append(request("a\0b", ExpectedVersion::Any, &[b"1"])),
        Err(AppendError::Invalid(_))
    ));
    assert!(matches!(
        ledger.append(request("t", ExpectedVersion::Any, &[])),
        Err(AppendError::Invalid(_))
    ));
    assert!(matches!(
        ledger.append(request("", ExpectedVersion::Any, &[b"x"])),
        Err(AppendError::Invalid(_))
    ));
    assert_eq!(ledger.head().size, 0);
}

#[test]
fn a_second_opener_is_told_who_holds_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _held = Ledger::open(
        dir.path(),
        LedgerOptions {
            lock_note: Some("research-ledger serve on 127.0.0.1:7878".into()),
            ..options(1)
        },
    )
    .unwrap();
    let err = Ledger::open(dir.path(), options(1)).unwrap_err();
    match err {
        StorageError::Locked { holder, .. } => {
            assert!(holder.contains("127.0.0.1:7878"), "{holder}")
        }
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn events_survive_reopening_across_many_segments() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || LedgerOptions {
        limits: Limits {
            segment_bytes_max: 4096,
            ..Limits::default()
        },
        ..options(3)
    };
    let mut hashes = Vec::new();
    {
        let ledger = Ledger::open(dir.path(), opts()).unwrap();
        for i in 0..200u32 {
            let stream = format!("s{}", i % 7);
            let payload = i.to_le_bytes().repeat(20);
            let r = ledger
                .append(request(&stream, ExpectedVersion::Any, &[&payload]))
                .unwrap();
            hashes.push(r.events[0].hash);
        }
    }
    let segments = std::fs::read_dir(dir.path().join("log")).unwrap().count();
    assert!(segments > 5, "expected several segments, found {segments}");
    for lose_index in [false, true] {
        if lose_index {
            std::fs::remove_dir_all(dir.path().join("index")).unwrap();
        }
        let ledger = Ledger::open(dir.path(), opts()).unwrap();
        let all = ledger.read_range(0, 1000).unwrap();
        assert_eq!(all.iter().map(|e| e.hash).collect::<Vec<_>>(), hashes);
        assert_eq!(
            ledger.stream_version("s0").unwrap(),
            29 + u64::from(lose_index)
        );
        let s3 = ledger.read_stream("s3", 1, 1000).unwrap();
        assert_eq!(s3.len(), 29);
        assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
        // And it goes on appending where it stopped.
        let r = ledger
            .append(request(
                "s0",
                ExpectedVersion::Exact(29 + u64::from(lose_index)),
                &[b"more"],
            ))
            .unwrap();
        hashes.push(r.events[0].hash);
    }
}

#[test]
fn recorded_at_never_decreases_along_the_log_when_the_clock_is_set_back_between_opens() {
    let dir = tempfile::tempdir().unwrap();
    let start = start_time();
    let at = |time| options_at(time, 1);
    {
        let ledger = Ledger::open(dir.path(), at(start)).unwrap();
        for i in 0..5u8 {
            ledger
                .append(request("t", ExpectedVersion::Any, &[&[i]]))
                .unwrap();
        }
    }
    // The machine's clock is an hour behind when the ledger opens again.
    let ledger = Ledger::open(dir.path(), at(start - chrono::Duration::hours(1))).unwrap();
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"after"]))
        .unwrap();
    let events = ledger.read_range(0, 100).unwrap();
    assert_eq!(events.len(), 6);
    assert_times_never_decrease(&events);
}

#[test]
fn a_segment_whose_header_never_completed_is_moved_aside_when_nothing_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = Ledger::open(dir.path(), small_segments(options(3))).unwrap();
        for i in 0..10u8 {
            ledger
                .append(request("s", ExpectedVersion::Any, &[&[i]]))
                .unwrap();
        }
    }
    // What a roll-over that crashed before its header was synced leaves.
    let headless = dir.path().join("log").join(format!("{:020}.seg", 10));
    std::fs::write(&headless, [0x52u8; 10]).unwrap();

    let read_only = LedgerOptions {
        read_only: true,
        ..small_segments(options(3))
    };
    let ledger = Ledger::open(dir.path(), read_only).unwrap();
    assert_eq!(ledger.read_range(0, 100).unwrap().len(), 10);
    drop(ledger);
    assert!(headless.exists(), "a read-only open changed the log");

    let ledger = Ledger::open(dir.path(), small_segments(options(3))).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert!(!headless.exists());
    let kept = dir
        .path()
        .join("recovered")
        .join(format!("{:020}.seg.headless", 10));
    assert_eq!(std::fs::read(&kept).unwrap(), [0x52u8; 10]);
    ledger
        .append(request("s", ExpectedVersion::Exact(10), &[b"after"]))
        .unwrap();
    assert_eq!(ledger.read_range(0, 100).unwrap().len(), 11);
}

#[test]
fn a_segment_of_acknowledged_frames_cut_below_its_header_is_a_loss_and_stays() {
    let dir = tempfile::tempdir().unwrap();
    {
        let ledger = Ledger::open(dir.path(), small_segments(options(3))).unwrap();
        let payload = [7u8; 400];
        for _ in 0..40 {
            ledger
                .append(request("s", ExpectedVersion::Any, &[&payload]))
                .unwrap();
        }
    }
    let names = segment_files(dir.path());
    assert!(names.len() > 2, "{names:?}");
    let last = names.last().unwrap().clone();
    let bytes = std::fs::read(&last).unwrap();
    std::fs::write(&last, &bytes[..20]).unwrap();

    let ledger = Ledger::open(dir.path(), small_segments(options(3))).unwrap();
    let problems = ledger.problems();
    assert!(
        problems.iter().any(|p| p.contains("were lost")),
        "{problems:?}"
    );
    assert!(ledger.poisoned().is_some());
    drop(ledger);
    assert_eq!(
        std::fs::read(&last).unwrap(),
        &bytes[..20],
        "the evidence of the loss was changed or removed"
    );
    assert_eq!(segment_files(dir.path()), names);
}

/// Every limit on what one append carries refuses past its bound with its name, its value and
/// what was asked, and writes nothing.
#[test]
fn every_limit_on_an_append_refuses_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(
        dir.path(),
        LedgerOptions {
            limits: Limits {
                actor_bytes_max: 8,
                kind_bytes_max: 8,
                causation_links_max: 2,
                idempotency_key_bytes_max: 8,
                event_bytes_max: 4096,
                batch_bytes_max: 1000,
                blob_bytes_max: 100,
                batch_content_bytes_max: 150,
                ..Limits::default()
            },
            ..options(3)
        },
    )
    .unwrap();
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"first"]))
        .unwrap();
    let one = |edit: &dyn Fn(&mut ledger::AppendRequest)| {
        let mut r = request("t", ExpectedVersion::Any, &[b"x"]);
        edit(&mut r);
        r
    };
    let cases: Vec<(&str, u64, u64, ledger::AppendRequest)> = vec![
        ("actor_bytes_max", 8, 9, one(&|r| r.actor = "a".repeat(9))),
        (
            "kind_bytes_max",
            8,
            9,
            one(&|r| r.events[0].kind = "k".repeat(9)),
        ),
        (
            "causation_links_max",
            2,
            3,
            one(&|r| r.events[0].causation = vec![Causation::Event(Digest([1; 32])); 3]),
        ),
        (
            "idempotency_key_bytes_max",
            8,
            9,
            keyed(request("t", ExpectedVersion::Any, &[b"x"]), "key-of-9b"),
        ),
        (
            "blob_bytes_max",
            100,
            101,
            one(&|r| r.content = vec![vec![1; 101]]),
        ),
        (
            "batch_content_bytes_max",
            150,
            160,
            one(&|r| r.content = vec![vec![1; 80], vec![2; 80]]),
        ),
    ];
    for (limit, max, actual, request) in cases {
        let err = ledger.append(request).unwrap_err();
        assert!(
            matches!(err, AppendError::LimitExceeded { limit: l, max: m, actual: a } if l == limit && m == max && a == actual),
            "{limit}: {err:?}"
        );
    }
    // The bytes of a whole append, each event within its own bound: three events of 400
    // payload bytes make more than 1,000 stored bytes.
    let payload = vec![9u8; 400];
    let err = ledger
        .append(request(
            "t",
            ExpectedVersion::Any,
            &[&payload, &payload, &payload],
        ))
        .unwrap_err();
    assert!(
        matches!(err, AppendError::LimitExceeded { limit: "batch_bytes_max", max: 1000, actual } if actual > 1000),
        "{err:?}"
    );
    assert_eq!(ledger.head().size, 1, "a refused append wrote something");
    assert_eq!(ledger.read_stream("t", 1, 10).unwrap().len(), 1);
}

/// A read asking for more events than `read_events_max` gets that many, from where it asked,
/// by every way of reading; the next page goes on from where the last ended.
#[test]
fn reads_are_bounded_by_read_events_max_and_page_on() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(
        dir.path(),
        LedgerOptions {
            limits: Limits {
                read_events_max: 4,
                ..Limits::default()
            },
            ..options(4)
        },
    )
    .unwrap();
    let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i]).collect();
    let refs: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
    ledger
        .append(request("t", ExpectedVersion::Exact(0), &refs))
        .unwrap();
    let seqs = |events: &[ledger::RecordedEvent]| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&ledger.read_range(0, 100).unwrap()), [0, 1, 2, 3]);
    assert_eq!(seqs(&ledger.read_range(4, 100).unwrap()), [4, 5, 6, 7]);
    assert_eq!(seqs(&ledger.read_range(8, 100).unwrap()), [8, 9]);
    assert_eq!(ledger.read_raw_range(3, 100).unwrap().len(), 4);
    let versions: Vec<u64> = ledger
        .read_stream("t", 5, 100)
        .unwrap()
        .iter()
        .map(|e| e.stream_version)
        .collect();
    assert_eq!(versions, [5, 6, 7, 8]);
    assert_eq!(
        seqs(&ledger.read_range(0, 2).unwrap()),
        [0, 1],
        "a smaller ask is kept"
    );
}
