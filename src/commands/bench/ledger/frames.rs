//! Counting the frames of the embedded log, to learn how many events each sync carried.
//!
//! The embedded backend writes each group commit as one frame with one `write` and one
//! `fdatasync`, so the frames in the segment files are a count of the syncs the appends cost,
//! read after the fact without instrumenting the ledger. The log's layout is the ledger's
//! published format (segment header, then frames of `header ‖ body`, little-endian), which an
//! operator may read without the ledger's code; only the fields needed here are read, and every
//! checksum is checked so that a change of format is refused rather than miscounted.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const SEGMENT_MAGIC: &[u8; 8] = b"RLLOGSEG";
const SEGMENT_VERSION: u32 = 1;
const SEGMENT_HEADER_LEN: usize = 32;
const FRAME_MAGIC: &[u8; 4] = b"RLFR";
const FRAME_HEADER_LEN: usize = 16;
/// A frame body starts with `first_seq u64 | commit_count u32 | event_count u32`.
const BODY_PREFIX_LEN: usize = 16;
/// Length of the fingerprint that follows an idempotency key in a commit record.
const FINGERPRINT_LEN: usize = 32;

/// One frame: one group commit, one sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Frame {
    /// Seq of its first event.
    pub(super) first_seq: u64,
    /// How many events it holds.
    pub(super) events: u64,
    /// The stored bytes of those events (envelope and hash each), without framing.
    pub(super) event_bytes: u64,
}

/// How a run of frames grouped its events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Grouping {
    /// Frames, hence syncs of the log.
    pub(super) syncs: u64,
    /// Events in them.
    pub(super) events: u64,
    /// Events in the fullest frame.
    pub(super) largest: u64,
}

impl Grouping {
    /// The frames whose first seq lies in one of `runs`.
    pub(super) fn of(frames: &[Frame], runs: &[Range<u64>]) -> Grouping {
        let mut g = Grouping {
            syncs: 0,
            events: 0,
            largest: 0,
        };
        for f in frames
            .iter()
            .filter(|f| runs.iter().any(|r| r.contains(&f.first_seq)))
        {
            g.syncs += 1;
            g.events += f.events;
            g.largest = g.largest.max(f.events);
        }
        g
    }

    /// Mean events per sync.
    pub(super) fn events_per_sync(&self) -> f64 {
        self.events as f64 / self.syncs.max(1) as f64
    }
}

/// Every frame of the log in `log_dir`, in seq order.
pub(super) fn read_log(log_dir: &Path) -> anyhow::Result<Vec<Frame>> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(log_dir)
        .with_context(|| format!("cannot list {}", log_dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot list {}", log_dir.display()))?;
    segments.retain(|p| p.extension().is_some_and(|e| e == "seg"));
    // Segment names are the first seq in 20 digits, so name order is seq order.
    segments.sort();
    let mut frames = Vec::new();
    for path in &segments {
        read_segment(path, &mut frames)
            .with_context(|| format!("cannot count the frames of {}", path.display()))?;
    }
    for pair in frames.windows(2) {
        if pair[0].first_seq + pair[0].events != pair[1].first_seq {
            bail!(
                "the frame at seq {} does not follow the one at seq {}",
                pair[1].first_seq,
                pair[0].first_seq
            );
        }
    }
    Ok(frames)
}

fn read_segment(path: &Path, frames: &mut Vec<Frame>) -> anyhow::Result<()> {
    let mut file = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    file.read_exact(&mut header)?;
    if &header[0..8] != SEGMENT_MAGIC
        || crc32fast::hash(&header[0..24]) != u32_at(&header, 24)
        || u32_at(&header, 8) != SEGMENT_VERSION
    {
        bail!("not a segment of the log format this harness reads");
    }
    let mut body = Vec::new();
    loop {
        let mut header = [0u8; FRAME_HEADER_LEN];
        match read_full(&mut file, &mut header)? {
            0 => return Ok(()),
            FRAME_HEADER_LEN => {}
            n => bail!("the log ends {n} bytes into a frame header"),
        }
        if &header[0..4] != FRAME_MAGIC || crc32fast::hash(&header[0..12]) != u32_at(&header, 12) {
            bail!("a frame header does not check out");
        }
        let body_len = u32_at(&header, 4) as usize;
        body.resize(body_len, 0);
        file.read_exact(&mut body)?;
        if crc32fast::hash(&body) != u32_at(&header, 8) {
            bail!("a frame body does not check out");
        }
        frames.push(frame_of(&body)?);
    }
}

/// The counts of one frame body (`first_seq u64 | commit_count u32 | event_count u32`, then the
/// commit records, then `len u32 ‖ bytes` per event).
fn frame_of(body: &[u8]) -> anyhow::Result<Frame> {
    if body.len() < BODY_PREFIX_LEN {
        bail!("a frame body of {} bytes", body.len());
    }
    let first_seq = u64_at(body, 0);
    let commits = u32_at(body, 8);
    let events = u32_at(body, 12);
    let mut at = BODY_PREFIX_LEN;
    for _ in 0..commits {
        let key_len = u16::from_le_bytes(take::<2>(body, at + 4)?) as usize;
        at += 6;
        if key_len > 0 {
            at += key_len + FINGERPRINT_LEN;
        }
    }
    let mut event_bytes = 0u64;
    for _ in 0..events {
        let len = u32::from_le_bytes(take::<4>(body, at)?) as usize;
        at += 4 + len;
        event_bytes += len as u64;
    }
    if at != body.len() {
        bail!("a frame body's events do not fill it");
    }
    Ok(Frame {
        first_seq,
        events: u64::from(events),
        event_bytes,
    })
}

/// Reads until `buf` is full or the input ends; the count of bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

fn take<const N: usize>(bytes: &[u8], at: usize) -> anyhow::Result<[u8; N]> {
    bytes
        .get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| anyhow::anyhow!("a frame body ends inside a field at byte {at}"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::{AppendRequest, ExpectedVersion, Ledger, LedgerOptions, NewEvent};

    #[test]
    fn one_frame_per_sequential_append_and_the_sizes_of_what_was_stored() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path(), LedgerOptions::default()).unwrap();
        for i in 0..5u8 {
            ledger
                .append(AppendRequest {
                    stream: "s".into(),
                    expected: ExpectedVersion::Any,
                    actor: "a".into(),
                    events: vec![
                        NewEvent {
                            kind: "k".into(),
                            payload: vec![i; 10],
                            causation: vec![],
                        };
                        usize::from(i % 2) + 1
                    ],
                    idempotency: None,
                })
                .unwrap();
        }
        let stored: u64 = ledger
            .read_raw_range(0, 100)
            .unwrap()
            .iter()
            .map(|r| r.bytes.len() as u64)
            .sum();
        ledger.shutdown();
        let frames = read_log(&dir.path().join("log")).unwrap();
        assert_eq!(
            frames.iter().map(|f| f.events).collect::<Vec<_>>(),
            vec![1, 2, 1, 2, 1]
        );
        assert_eq!(frames.iter().map(|f| f.event_bytes).sum::<u64>(), stored);
        let all = Grouping::of(&frames, std::slice::from_ref(&(0..u64::MAX)));
        assert_eq!((all.syncs, all.events, all.largest), (5, 7, 2));
        let tail = Grouping::of(&frames, std::slice::from_ref(&(3..u64::MAX)));
        assert_eq!((tail.syncs, tail.events), (3, 4));
        let ends = Grouping::of(&frames, &[0..1, 6..7]);
        assert_eq!((ends.syncs, ends.events), (2, 2));
        assert!((all.events_per_sync() - 1.4).abs() < 1e-12);
    }

    #[test]
    fn a_damaged_frame_is_refused_rather_than_counted() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path(), LedgerOptions::default()).unwrap();
        ledger
            .append(AppendRequest {
                stream: "s".into(),
                expected: ExpectedVersion::Any,
                actor: "a".into(),
                events: vec![NewEvent {
                    kind: "k".into(),
                    payload: vec![1; 10],
                    causation: vec![],
                }],
                idempotency: None,
            })
            .unwrap();
        ledger.shutdown();
        let segment = dir.path().join("log/00000000000000000000.seg");
        let mut bytes = std::fs::read(&segment).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&segment, bytes).unwrap();
        assert!(read_log(&dir.path().join("log")).is_err());
    }
}
