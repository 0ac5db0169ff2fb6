//! Content blobs travel with the append that cites them: one sync makes an append's events and
//! its content durable; a blob is stored once and a damaged copy replaced; the content of a
//! torn last frame is cut with it; damaged or redacted content elsewhere is never damage to the
//! chain; a restore writes content before the events; a log of the first segment format goes
//! on in a segment that may hold content.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ledger::bundle::{ExportSpec, Scope};
use ledger::storage::content_hash;
use ledger::storage::frame;
use ledger::storage::memory::{Faults, MemoryStorage};
use ledger::{
    AppendError, AppendRequest, Digest, ExpectedVersion, Ledger, LedgerOptions, ReadError,
    RecordedEvent,
};
use serde_json::Value;

use super::{options, quiet, request, segment_files, small_segments};

/// A text of `n` bytes that appears nowhere else in the log.
fn text(label: &str, n: usize) -> Vec<u8> {
    let mut out = format!("<<{label}>>").into_bytes();
    while out.len() < n {
        out.push(b'a' + (out.len() % 26) as u8);
    }
    out
}

/// An append of one event citing `content` (its payload the hash's hex), carrying it.
fn citing(stream: &str, content: &[&[u8]]) -> AppendRequest {
    let payload: Vec<u8> = content
        .iter()
        .map(|c| content_hash(c).to_string())
        .collect::<Vec<_>>()
        .join(",")
        .into_bytes();
    let mut req = request(stream, ExpectedVersion::Any, &[&payload]);
    req.content = content.iter().map(|c| c.to_vec()).collect();
    req
}

/// Where `needle` starts in the log's last segment, each time it occurs.
fn occurrences(dir: &Path, needle: &[u8]) -> Vec<(PathBuf, usize)> {
    let mut out = Vec::new();
    for path in segment_files(dir) {
        let bytes = fs::read(&path).unwrap();
        out.extend(
            bytes
                .windows(needle.len())
                .enumerate()
                .filter(|(_, w)| *w == needle)
                .map(|(i, _)| (path.clone(), i)),
        );
    }
    out
}

fn overwrite(path: &Path, at: usize, bytes: &[u8]) {
    let mut all = fs::read(path).unwrap();
    all[at..at + bytes.len()].copy_from_slice(bytes);
    fs::write(path, all).unwrap();
}

#[test]
fn one_sync_makes_an_appends_events_and_its_content_durable() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"first"]))
        .unwrap();
    let (a, b) = (text("one", 5000), text("two", 300));
    let before = ledger.storage_syncs();
    let receipt = ledger.append(citing("t", &[&a, &b])).unwrap();
    assert_eq!(
        ledger.storage_syncs() - before,
        1,
        "the events and both blobs share one fdatasync"
    );
    assert_eq!(ledger.blob(&content_hash(&a)).unwrap(), Some(a.clone()));
    assert_eq!(ledger.blob(&content_hash(&b)).unwrap(), Some(b.clone()));
    // In the very frame of the event that cites them, after its body.
    let event_at = occurrences(dir.path(), &receipt.events[0].hash.0)[0].1;
    let blob_at = occurrences(dir.path(), &a)[0].1;
    assert!(blob_at > event_at && blob_at - event_at < 200);

    // Many writers at once: each group commit one sync, whatever its appends carry.
    let before = ledger.storage_syncs();
    std::thread::scope(|scope| {
        for i in 0..16 {
            let ledger = ledger.clone();
            scope.spawn(move || {
                let c = text(&format!("writer {i}"), 2000);
                ledger.append(citing(&format!("w{i}"), &[&c])).unwrap();
            });
        }
    });
    let syncs = ledger.storage_syncs() - before;
    assert!((1..=16).contains(&syncs), "{syncs} syncs for 16 appends");
    for i in 0..16 {
        let c = text(&format!("writer {i}"), 2000);
        assert_eq!(ledger.blob(&content_hash(&c)).unwrap(), Some(c));
    }
    // And after a reopen, from the log alone (the index rebuilt).
    ledger.shutdown();
    drop(ledger);
    fs::remove_dir_all(dir.path().join("index")).unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert_eq!(ledger.blob(&content_hash(&a)).unwrap(), Some(a));
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn content_is_durable_exactly_when_the_group_that_carries_it_is() {
    // A sync that fails leaves some prefix of its group durable: the content with the first
    // commit, since it is in the same frame.
    for seed in 0..40u64 {
        let storage = Arc::new(MemoryStorage::new(Faults::default(), seed));
        let ledger = Ledger::with_storage(storage.clone(), options(seed));
        ledger
            .append(citing("t", &[b"kept" as &[u8]]))
            .expect("a clean append");
        storage.set_faults(Faults {
            sync_fails_per_mille: 1000,
            ..Faults::default()
        });
        let c = text(&format!("seed {seed}"), 64);
        assert!(ledger.append(citing("t", &[&c])).is_err());
        let after = storage.crash();
        let durable: Vec<Digest> = after.durable_blobs().iter().map(|b| b.hash).collect();
        assert!(durable.contains(&content_hash(b"kept")));
        let event_durable = after.durable_size() == 2;
        assert_eq!(
            durable.contains(&content_hash(&c)),
            event_durable,
            "seed {seed}: content durable without its event, or the other way"
        );
    }
}

#[test]
fn content_is_stored_once_and_a_damaged_copy_is_replaced_by_a_later_append() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    let x = text("the same text", 3000);
    ledger.append(citing("a", &[&x, &x])).unwrap();
    ledger.append(citing("b", &[&x])).unwrap();
    // Twice in one group: appends queued together, each carrying it.
    std::thread::scope(|scope| {
        for i in 0..4 {
            let (ledger, x) = (ledger.clone(), x.clone());
            scope.spawn(move || ledger.append(citing(&format!("c{i}"), &[&x])).unwrap());
        }
    });
    assert_eq!(occurrences(dir.path(), &x).len(), 1, "stored once");

    // Damaged on disk: a read refuses it, and the next append carrying it writes it again.
    let (path, at) = occurrences(dir.path(), &x)[0].clone();
    overwrite(&path, at + 100, b"XXXX");
    let hash = content_hash(&x);
    assert!(matches!(
        ledger.blob(&hash),
        Err(ReadError::ContentDamaged { .. })
    ));
    ledger.append(citing("d", &[&x])).unwrap();
    assert_eq!(ledger.blob(&hash).unwrap(), Some(x.clone()));
    assert_eq!(occurrences(dir.path(), &x).len(), 1, "one good copy more");
    ledger.shutdown();
    drop(ledger);
    // The index rebuilt from the log points at the later, good copy.
    fs::remove_dir_all(dir.path().join("index")).unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    assert_eq!(ledger.blob(&hash).unwrap(), Some(x));
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn a_blob_over_the_limit_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = quiet(3);
    opts.limits.blob_bytes_max = 100;
    let ledger = Ledger::open(dir.path(), opts).unwrap();
    let refused = ledger.append(citing("t", &[&text("long", 101)]));
    assert!(
        matches!(
            refused,
            Err(AppendError::LimitExceeded {
                limit: "blob_bytes_max",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(ledger.head().size, 0);
}

/// A ledger whose last frame carries `last`, and the head record as it was before that frame:
/// what a power loss before the frame's sync leaves (the record is written after the sync).
fn torn_setup(dir: &Path, last: &[u8]) -> Vec<u8> {
    let ledger = Ledger::open(dir, quiet(3)).unwrap();
    for i in 0..5u8 {
        ledger
            .append(citing("t", &[&text(&format!("early {i}"), 500)]))
            .unwrap();
    }
    ledger.checkpoint().unwrap();
    let head_before = fs::read(dir.join("head")).unwrap();
    ledger.append(citing("t", &[last])).unwrap();
    ledger.shutdown();
    drop(ledger);
    head_before
}

#[test]
fn content_torn_in_a_last_frame_never_acknowledged_is_cut_with_its_frame() {
    for zero in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let last = text("last", 4000);
        let head_before = torn_setup(dir.path(), &last);
        fs::write(dir.path().join("head"), head_before).unwrap();
        fs::remove_dir_all(dir.path().join("index")).unwrap();
        let (path, at) = occurrences(dir.path(), &last)[0].clone();
        if zero {
            // The content's pages never reached the disk: zeros where the file grew.
            overwrite(&path, at + 1000, &[0u8; 3000]);
        } else {
            let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len((at + 1000) as u64).unwrap();
        }

        let read_only = Ledger::open(
            dir.path(),
            LedgerOptions {
                read_only: true,
                ..quiet(3)
            },
        )
        .unwrap();
        let report = read_only.verify_from_scratch(&mut |_, _| {});
        assert!(report.is_intact(), "zero {zero}: {report:?}");
        assert!(
            report.notes.iter().any(|n| n.contains("torn write")),
            "zero {zero}: a torn write, not a loss: {:?}",
            report.notes
        );
        drop(read_only);

        let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
        assert!(
            ledger.poisoned().is_none(),
            "zero {zero}: {:?}",
            ledger.poisoned()
        );
        assert_eq!(ledger.head().size, 5, "zero {zero}: the torn frame is cut");
        assert_eq!(ledger.blob(&content_hash(&last)).unwrap(), None);
        let report = ledger.verify_from_scratch(&mut |_, _| {});
        assert!(report.is_intact(), "{report:?}");
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("a torn write was cut"))
        );
        ledger.append(citing("t", &[&last])).unwrap();
        assert_eq!(ledger.blob(&content_hash(&last)).unwrap(), Some(last));
    }
}

#[test]
fn content_damaged_in_a_middle_frame_is_not_damage_to_the_chain() {
    for lose_index in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
        let middle = text("middle", 2000);
        ledger.append(citing("t", &[&text("first", 100)])).unwrap();
        ledger.append(citing("t", &[&middle])).unwrap();
        ledger.append(citing("u", &[&text("after", 100)])).unwrap();
        ledger.shutdown();
        drop(ledger);
        let (path, at) = occurrences(dir.path(), &middle)[0].clone();
        // Redacted: every byte overwritten with zeros.
        overwrite(&path, at, &vec![0u8; middle.len()]);
        if lose_index {
            fs::remove_dir_all(dir.path().join("index")).unwrap();
        }
        let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
        assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
        let report = ledger.verify_from_scratch(&mut |_, _| {});
        assert!(report.is_intact(), "{report:?}");
        assert!(matches!(
            ledger.blob(&content_hash(&middle)),
            Err(ReadError::ContentDamaged { .. })
        ));
        assert_eq!(
            ledger.blob(&content_hash(&text("after", 100))).unwrap(),
            Some(text("after", 100))
        );
        ledger
            .append(request("u", ExpectedVersion::Any, &[b"goes on"]))
            .unwrap();
        assert!(ledger.poisoned().is_none());
    }
}

#[test]
fn content_redacted_in_an_acknowledged_last_frame_keeps_the_frame() {
    let dir = tempfile::tempdir().unwrap();
    let last = text("last", 4000);
    torn_setup(dir.path(), &last);
    let (path, at) = occurrences(dir.path(), &last)[0].clone();
    overwrite(&path, at, &vec![0u8; last.len()]);
    fs::remove_dir_all(dir.path().join("index")).unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert_eq!(ledger.head().size, 6, "the head record covers it: kept");
    assert!(matches!(
        ledger.blob(&content_hash(&last)),
        Err(ReadError::ContentDamaged { .. })
    ));
    let report = ledger.verify_from_scratch(&mut |_, _| {});
    assert!(report.is_intact(), "{report:?}");
    assert!(
        report.notes.iter().any(|n| n.contains("does not hash")),
        "the open notes the blob: {:?}",
        report.notes
    );
    let after = text("after", 300);
    ledger.append(citing("t", &[&after])).unwrap();
    ledger.shutdown();
    drop(ledger);
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert_eq!(ledger.head().size, 7);
    assert_eq!(ledger.blob(&content_hash(&after)).unwrap(), Some(after));
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn content_of_an_acknowledged_last_frame_cut_off_the_file_is_a_reported_loss() {
    let dir = tempfile::tempdir().unwrap();
    let last = text("last", 4000);
    torn_setup(dir.path(), &last);
    let (path, at) = occurrences(dir.path(), &last)[0].clone();
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len((at + 100) as u64).unwrap();
    drop(file);
    for _ in 0..2 {
        let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
        let refused = ledger.poisoned().expect("appends are refused");
        assert!(refused.contains("cut short"), "{refused}");
        assert_eq!(ledger.head().size, 5);
        assert!(!ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            (at + 100) as u64,
            "nothing is cut"
        );
    }
}

fn view(event: &RecordedEvent) -> Result<Value, String> {
    Ok(Value::String(
        String::from_utf8_lossy(&event.payload).into_owned(),
    ))
}

/// The content an event of [`citing`] cites: the hashes in its payload.
fn cited(event: &RecordedEvent) -> Vec<Digest> {
    std::str::from_utf8(&event.payload)
        .unwrap_or_default()
        .split(',')
        .filter_map(|h| h.parse().ok())
        .collect()
}

#[test]
fn a_restore_writes_the_content_before_the_events_and_reads_it_back() {
    let source = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(source.path(), quiet(3)).unwrap();
    let texts: Vec<Vec<u8>> = (0..6).map(|i| text(&format!("text {i}"), 700)).collect();
    for t in &texts {
        ledger.append(citing("t", &[t])).unwrap();
    }
    ledger.checkpoint().unwrap();
    let read = |hash: &Digest| -> Result<Vec<u8>, String> {
        ledger
            .blob(hash)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "missing".to_owned())
    };
    let bundle = ledger
        .export(&ExportSpec {
            scope: Scope::All,
            without_content: false,
            payload_view: &view,
            cited_content: &cited,
            content: &read,
        })
        .unwrap();
    assert_eq!(bundle.content.len(), 6);

    let target = tempfile::tempdir().unwrap();
    let mut opts = quiet(3);
    // Small groups: the content goes in several frames of content alone.
    opts.limits.group_bytes_max = 1500;
    let (restored, report) = Ledger::restore(target.path(), &bundle, None, opts).unwrap();
    assert_eq!(report.content, 6);
    for t in &texts {
        assert_eq!(restored.blob(&content_hash(t)).unwrap(), Some(t.clone()));
    }
    restored.shutdown();
    drop(restored);
    let first_event = occurrences(target.path(), &bundle.events[0].stored.0)[0].1;
    for t in &texts {
        assert!(
            occurrences(target.path(), t)[0].1 < first_event,
            "content first"
        );
    }
    fs::remove_dir_all(target.path().join("index")).unwrap();
    let reopened = Ledger::open(target.path(), quiet(3)).unwrap();
    assert!(reopened.poisoned().is_none(), "{:?}", reopened.poisoned());
    assert!(reopened.verify_from_scratch(&mut |_, _| {}).is_intact());
    assert_eq!(
        reopened.blob(&content_hash(&texts[3])).unwrap(),
        Some(texts[3].clone())
    );
}

/// Rewrites a segment's header as the first format's.
fn make_first_format(path: &Path) {
    let mut bytes = fs::read(path).unwrap();
    bytes[8..12].copy_from_slice(&frame::SEGMENT_VERSION_FIRST.to_le_bytes());
    let crc = crc32fast::hash(&bytes[0..24]);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_log_of_the_first_segment_format_goes_on_in_a_segment_that_may_hold_content() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    for i in 0..4u8 {
        ledger
            .append(request("t", ExpectedVersion::Any, &[&[i]]))
            .unwrap();
    }
    ledger.shutdown();
    drop(ledger);
    let first = segment_files(dir.path())[0].clone();
    make_first_format(&first);

    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"plain"]))
        .unwrap();
    assert_eq!(
        segment_files(dir.path()).len(),
        1,
        "a frame without content goes on in it"
    );
    let c = text("content", 300);
    ledger.append(citing("t", &[&c])).unwrap();
    let all = segment_files(dir.path());
    assert_eq!(all.len(), 2, "content starts a segment of the new format");
    let header = frame::decode_segment_header(&fs::read(&all[1]).unwrap()).unwrap();
    assert_eq!(
        (header.first_seq, header.version),
        (5, frame::SEGMENT_VERSION)
    );
    assert_eq!(
        frame::decode_segment_header(&fs::read(&all[0]).unwrap())
            .unwrap()
            .version,
        1
    );
    ledger.shutdown();
    drop(ledger);
    fs::remove_dir_all(dir.path().join("index")).unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    assert!(ledger.poisoned().is_none(), "{:?}", ledger.poisoned());
    assert_eq!(ledger.blob(&content_hash(&c)).unwrap(), Some(c));
    assert!(ledger.verify_from_scratch(&mut |_, _| {}).is_intact());
}

#[test]
fn a_content_frame_inside_a_segment_of_the_first_format_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    ledger.append(citing("t", &[&text("c", 100)])).unwrap();
    ledger
        .append(request("t", ExpectedVersion::Any, &[b"after"]))
        .unwrap();
    ledger.shutdown();
    drop(ledger);
    make_first_format(&segment_files(dir.path())[0]);
    fs::remove_dir_all(dir.path().join("index")).unwrap();
    let ledger = Ledger::open(dir.path(), quiet(3)).unwrap();
    let refused = ledger.poisoned().expect("refuses appends");
    assert!(
        refused.contains("content frame in a segment of format 1"),
        "{refused}"
    );
}

/// Every file of the log directory with its bytes.
fn log_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    segment_files(dir)
        .into_iter()
        .map(|path| {
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn damage_across_segments_opens_read_only_names_it_and_changes_no_file() {
    let template = tempfile::tempdir().unwrap();
    let small = || small_segments(quiet(3));
    {
        let ledger = Ledger::open(template.path(), small()).unwrap();
        for i in 0..30 {
            let body = text(&format!("item {i}"), 600);
            ledger.append(citing("s", &[&body])).unwrap();
        }
    }
    let names = segment_files(template.path());
    assert!(names.len() >= 4, "{names:?}");
    let name = |path: &PathBuf| path.file_name().unwrap().to_owned();
    type Damage<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(&str, Damage, &str)> = vec![
        (
            "a middle segment cut inside its last frame's content",
            Box::new(|dir: &Path| {
                let path = dir.join("log").join(name(&names[names.len() - 2]));
                let bytes = fs::read(&path).unwrap();
                fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
            }),
            "inside the content of its last frame",
        ),
        (
            "a middle segment removed",
            Box::new(|dir: &Path| {
                fs::remove_file(dir.join("log").join(name(&names[1]))).unwrap();
            }),
            "a segment between them was removed",
        ),
        (
            "a segment renamed to start at another seq",
            Box::new(|dir: &Path| {
                let from = dir.join("log").join(name(&names[2]));
                let stem: u64 = from.file_stem().unwrap().to_str().unwrap().parse().unwrap();
                fs::rename(&from, dir.join("log").join(format!("{:020}.seg", stem + 1))).unwrap();
            }),
            "says it starts at seq",
        ),
        (
            "the first segment removed",
            Box::new(|dir: &Path| {
                fs::remove_file(dir.join("log").join(name(&names[0]))).unwrap();
            }),
            "not 0",
        ),
    ];
    // With the index the open reads only the last segment and trusts what the index says of
    // the others; without it, it reads the whole log.
    for (case, damage, expected) in &cases {
        for lose_index in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(template.path(), dir.path());
            damage(dir.path());
            if lose_index {
                fs::remove_dir_all(dir.path().join("index")).unwrap();
            }
            let case = format!("{case} (index lost: {lose_index})");
            let before = log_files(dir.path());
            let ledger = Ledger::open(dir.path(), small()).unwrap();
            let problems = ledger.problems();
            let expected = if lose_index { "" } else { *expected };
            assert!(
                problems.iter().any(|p| p.contains(expected)),
                "{case}: {problems:?}"
            );
            assert!(ledger.poisoned().is_some(), "{case}: writes go on");
            assert!(
                ledger.append(citing("s", &[b"more"])).is_err(),
                "{case}: an append was taken"
            );
            drop(ledger);
            assert!(
                log_files(dir.path()) == before,
                "{case}: the open changed the log"
            );
        }
    }
}
