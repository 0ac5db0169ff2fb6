//! Tampering with the log on disk, each way, is caught at the right seq; a torn tail left by a
//! crash is cut and kept, and damage elsewhere is never mistaken for one.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use super::frame::{self, FrameCommit, SEGMENT_HEADER_LEN};
use crate::envelope::{Envelope, decode_stored};
use crate::{AppendError, ExpectedVersion, Ledger, LedgerOptions, NewEvent, SteppingClock};

const EVENTS: u64 = 30;

fn options() -> LedgerOptions {
    LedgerOptions {
        clock: Arc::new(SteppingClock::new(
            chrono::DateTime::from_timestamp(1_760_000_000, 0).expect("time"),
            1_000,
        )),
        id_seed: Some(4),
        ..LedgerOptions::default()
    }
}

fn append(ledger: &Ledger, stream: &str, payloads: &[&[u8]]) {
    ledger
        .append(crate::AppendRequest {
            stream: stream.into(),
            expected: ExpectedVersion::Any,
            actor: "tester".into(),
            events: payloads
                .iter()
                .map(|p| NewEvent {
                    kind: "noted".into(),
                    payload: p.to_vec(),
                    causation: vec![],
                })
                .collect(),
            idempotency: None,
            content: Vec::new(),
        })
        .expect("append");
}

/// A ledger of `EVENTS` events in frames of two, over three streams; returns each event's
/// stored bytes.
fn build(dir: &Path) -> Vec<Vec<u8>> {
    let ledger = Ledger::open(dir, options()).expect("open");
    for i in 0..EVENTS / 2 {
        let a = format!("payload {i} a").into_bytes();
        let b = format!("payload {i} b").into_bytes();
        append(&ledger, &format!("task-{}", i % 3), &[&a, &b]);
    }
    let raw = ledger.read_raw_range(0, 1000).expect("read");
    raw.iter().map(|r| r.bytes.to_vec()).collect()
}

/// Rewrites the log as an attacker who knows the format would: one fresh segment, frames of
/// three events with correct checksums.
fn rewrite(dir: &Path, events: &[Vec<u8>]) {
    let log = dir.join("log");
    for entry in fs::read_dir(&log).expect("list") {
        fs::remove_file(entry.expect("entry").path()).expect("remove");
    }
    let mut file = frame::encode_segment_header(0).to_vec();
    let mut first_seq = 0u64;
    for chunk in events.chunks(3) {
        let refs: Vec<&[u8]> = chunk.iter().map(|e| e.as_slice()).collect();
        let commits = vec![FrameCommit {
            event_count: chunk.len() as u32,
            idempotency: None,
        }];
        let (body, _) = frame::encode_frame_body(first_seq, &commits, &refs).expect("body");
        file.extend_from_slice(&frame::encode_frame_header(&body).expect("header"));
        file.extend_from_slice(&body);
        first_seq += chunk.len() as u64;
    }
    fs::write(log.join(format!("{:020}.seg", 0)), file).expect("write");
}

fn first_bad_seq(dir: &Path) -> Option<u64> {
    let ledger = Ledger::open(dir, options()).expect("open");
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    report.failure.map(|f| f.seq)
}

/// Runs a tampering twice: once with the index left as it was, once with it deleted so that
/// the ledger rebuilds it from the doctored log.
fn check(tamper: impl Fn(&Path, &[Vec<u8>]), expected_seq: u64) {
    for lose_index in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = build(dir.path());
        tamper(dir.path(), &events);
        if lose_index {
            fs::remove_dir_all(dir.path().join("index")).expect("remove index");
        }
        assert_eq!(
            first_bad_seq(dir.path()),
            Some(expected_seq),
            "lose_index = {lose_index}"
        );
        // And the ledger refuses to write on a damaged record.
        let ledger = Ledger::open(dir.path(), options()).expect("open");
        let _ = ledger.verify_from_scratch(&mut |_, _| {});
        let refused = ledger.append(crate::AppendRequest {
            stream: "t".into(),
            expected: ExpectedVersion::Any,
            actor: "a".into(),
            events: vec![NewEvent {
                kind: "k".into(),
                payload: vec![1],
                causation: vec![],
            }],
            idempotency: None,
            content: Vec::new(),
        });
        assert!(
            matches!(refused, Err(AppendError::Poisoned(_))),
            "{refused:?}"
        );
    }
}

#[test]
fn an_untouched_log_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let events = build(dir.path());
    rewrite(dir.path(), &events);
    assert_eq!(first_bad_seq(dir.path()), None);
    fs::remove_dir_all(dir.path().join("index")).expect("remove index");
    assert_eq!(first_bad_seq(dir.path()), None);
}

#[test]
fn a_flipped_bit_is_caught_at_its_seq() {
    // Flipped in place, checksums left as they are.
    for k in [0u64, 7, 20] {
        check(
            |dir, events| {
                let path = dir.join("log").join(format!("{:020}.seg", 0));
                let mut bytes = fs::read(&path).expect("read");
                let target = &events[k as usize];
                let at = bytes
                    .windows(target.len())
                    .position(|w| w == target.as_slice())
                    .expect("event bytes are in the segment");
                bytes[at + target.len() / 2] ^= 0x10;
                fs::write(&path, bytes).expect("write");
            },
            k,
        );
    }
}

#[test]
fn a_flipped_bit_with_checksums_fixed_is_caught_at_its_seq() {
    for k in [0u64, 13, 29] {
        check(
            |dir, events| {
                let mut events = events.to_vec();
                let e = &mut events[k as usize];
                let mid = e.len() / 2;
                e[mid] ^= 0x01;
                rewrite(dir, &events);
            },
            k,
        );
    }
}

#[test]
fn a_removed_event_is_caught_at_its_seq() {
    for k in [0u64, 11, 28] {
        check(
            |dir, events| {
                let mut events = events.to_vec();
                events.remove(k as usize);
                rewrite(dir, &events);
            },
            k,
        );
    }
}

#[test]
fn swapped_events_are_caught_at_the_first() {
    for k in [0u64, 16, 28] {
        check(
            |dir, events| {
                let mut events = events.to_vec();
                events.swap(k as usize, k as usize + 1);
                rewrite(dir, &events);
            },
            k,
        );
    }
}

#[test]
fn an_inserted_event_is_caught_at_its_seq() {
    for k in [1u64, 9, 29] {
        check(
            |dir, events| {
                // A forged event that fits where it is put: the right seq, the previous
                // event's hash, a correct hash of its own.
                let before = decode_stored(&events[k as usize - 1]).expect("decode");
                let forged = Envelope {
                    seq: k,
                    stream: "task-forged".into(),
                    stream_version: 1,
                    event_id: uuid::Uuid::from_u128(42),
                    kind: "noted".into(),
                    recorded_at: before.recorded_at,
                    actor: "mallory".into(),
                    causation: vec![],
                    payload: b"forged".to_vec(),
                    prev_hash: before.hash,
                };
                let mut events = events.to_vec();
                events.insert(k as usize, forged.seal().0);
                rewrite(dir, &events);
            },
            k,
        );
    }
}

#[test]
fn a_log_cut_short_is_caught_where_it_now_ends() {
    // Without the index as a witness only a checkpoint can show that the end was removed;
    // with it, the open notices.
    let dir = tempfile::tempdir().expect("tempdir");
    let events = build(dir.path());
    rewrite(dir.path(), &events[..25]);
    assert_eq!(first_bad_seq(dir.path()), Some(25));
}

#[test]
fn a_duplicated_event_is_caught_where_it_repeats() {
    check(
        |dir, events| {
            let mut events = events.to_vec();
            let copy = events[5].clone();
            events.insert(6, copy);
            rewrite(dir, &events);
        },
        6,
    );
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    let mut segs: Vec<_> = fs::read_dir(dir.join("log"))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .collect();
    segs.sort();
    segs.pop().expect("a segment")
}

#[test]
fn a_torn_tail_is_cut_kept_and_writing_goes_on() {
    let tails: [&[u8]; 3] = [
        // A header that promises more than was written.
        &[b'R', b'L', b'F', b'R', 0xff, 0x03, 0, 0, 1, 2, 3, 4, 5, 6],
        // Space the file system allocated but nobody wrote.
        &[0u8; 4096],
        // A few bytes of a header.
        b"RLF",
    ];
    for tail in tails {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = build(dir.path());
        let path = last_segment(dir.path());
        let mut bytes = fs::read(&path).expect("read");
        let before = bytes.len();
        bytes.extend_from_slice(tail);
        fs::write(&path, &bytes).expect("write");
        fs::remove_dir_all(dir.path().join("index")).expect("remove index");

        let ledger = Ledger::open(dir.path(), options()).expect("open");
        assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
        assert_eq!(ledger.head().size, EVENTS);
        assert_eq!(fs::metadata(&path).expect("stat").len() as usize, before);
        let kept: Vec<_> = fs::read_dir(dir.path().join("recovered"))
            .expect("list")
            .collect();
        assert_eq!(kept.len(), 1, "the cut bytes are kept");
        append(&ledger, "task-0", &[b"after recovery"]);
        let report = ledger.verify_from_scratch(&mut |_, _| {});
        assert!(report.is_intact(), "{report:?}");
        assert_eq!(report.size, EVENTS + 1);
        drop(ledger);
        assert_eq!(events.len() as u64, EVENTS);
    }
}

#[test]
fn reads_that_end_at_the_head_never_look_at_a_frame_being_written() {
    // While the writer writes a frame, the file may already be longer than the bytes that
    // landed in it. A read of the last events must stop at the head and not take that frame
    // for damage.
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path(), options()).expect("open");
    for i in 0..EVENTS / 2 {
        let a = format!("payload {i} a").into_bytes();
        let b = format!("payload {i} b").into_bytes();
        append(&ledger, &format!("task-{}", i % 3), &[&a, &b]);
    }
    let path = last_segment(dir.path());
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open segment");
    // A header that promises a body of which only a few bytes are there yet.
    std::io::Write::write_all(
        &mut file,
        &[b'R', b'L', b'F', b'R', 0xff, 0x03, 0, 0, 1, 2, 3, 4, 5, 6],
    )
    .expect("write");
    let last = ledger.get(EVENTS - 1).expect("the last event reads");
    assert_eq!(last.map(|e| e.seq), Some(EVENTS - 1));
    let all = ledger.read_range(0, 1000).expect("the whole log reads");
    assert_eq!(all.len() as u64, EVENTS);
    let frame_end = ledger
        .read_range(EVENTS - 4, 2)
        .expect("a range ending at a frame");
    assert_eq!(
        frame_end.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [EVENTS - 4, EVENTS - 3]
    );
}

#[test]
fn a_torn_last_frame_that_was_never_acknowledged_is_cut_with_a_signed_statement() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The head record as it stood before the last append: a crash while its frame was
    // written leaves it so, since the record is written only after the frame's sync.
    let ledger = Ledger::open(dir.path(), options()).expect("open");
    for i in 0..EVENTS / 2 - 1 {
        let a = format!("payload {i} a").into_bytes();
        append(&ledger, &format!("task-{}", i % 3), &[&a, b"b"]);
    }
    let head_before = fs::read(dir.path().join("head")).expect("head record");
    append(&ledger, "task-0", &[b"last a", b"last b"]);
    drop(ledger);
    fs::write(dir.path().join("head"), head_before).expect("restore head");
    let path = last_segment(dir.path());
    let mut bytes = fs::read(&path).expect("read");
    // Zero the second half of the last frame's body, as a power cut between sectors would.
    let len = bytes.len();
    for b in &mut bytes[len - 20..] {
        *b = 0;
    }
    fs::write(&path, &bytes).expect("write");
    fs::remove_dir_all(dir.path().join("index")).expect("remove index");
    let ledger = Ledger::open(dir.path(), options()).expect("open");
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert_eq!(
        ledger.head().size,
        EVENTS - 2,
        "only the last frame (two events) is cut"
    );
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.is_intact(), "{report:?}");
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("a torn write was cut at tree size 28")),
        "the cut is signed and shown: {:?}",
        report.notes
    );
    append(&ledger, "task-0", &[b"after the cut"]);
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn a_torn_last_frame_that_was_acknowledged_is_a_loss_not_a_torn_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let path = last_segment(dir.path());
    let mut bytes = fs::read(&path).expect("read");
    let len = bytes.len();
    for b in &mut bytes[len - 20..] {
        *b = 0;
    }
    fs::write(&path, &bytes).expect("write");
    for _ in 0..2 {
        let ledger = Ledger::open(dir.path(), options()).expect("open");
        let refused = ledger.poisoned().expect("appends are refused");
        assert!(refused.contains("acknowledged"), "{refused}");
        assert_eq!(
            fs::metadata(&path).expect("stat").len() as usize,
            len,
            "nothing is cut"
        );
        assert!(!ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
    }
}

#[test]
fn damage_followed_by_intact_frames_is_not_taken_for_a_torn_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let path = last_segment(dir.path());
    let mut bytes = fs::read(&path).expect("read");
    // Zero bytes inside the first frame; every later frame is intact.
    let start = SEGMENT_HEADER_LEN as usize + 30;
    for b in &mut bytes[start..start + 8] {
        *b = 0;
    }
    fs::write(&path, &bytes).expect("write");
    fs::remove_dir_all(dir.path().join("index")).expect("remove index");
    let ledger = Ledger::open(dir.path(), options()).expect("open");
    assert!(ledger.poisoned().is_some(), "damage must block appends");
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert_eq!(report.failure.map(|f| f.seq), Some(0));
    assert_eq!(
        fs::read(&path).expect("read").len(),
        bytes.len(),
        "nothing was cut"
    );
}
