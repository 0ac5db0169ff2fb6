//! Counting the frames of the embedded log, to learn how many events each sync carried.
//!
//! The embedded backend writes each group commit as one frame with one `write` and one
//! `fdatasync`, so the frames in the segment files are a count of the syncs the appends cost,
//! read after the fact without instrumenting the ledger. The files are read with the ledger's
//! own decoders of its published format (`ledger::storage::frame`): every checksum is checked,
//! so damage is refused rather than miscounted.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ledger::storage::frame::{
    FRAME_HEADER_LEN, SEGMENT_HEADER_LEN, decode_frame_body_of, decode_frame_header,
    decode_segment_header,
};

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
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    file.read_exact(&mut header)?;
    decode_segment_header(&header).map_err(anyhow::Error::msg)?;
    let mut body = Vec::new();
    loop {
        let mut header = [0u8; FRAME_HEADER_LEN as usize];
        match read_full(&mut file, &mut header)? {
            0 => return Ok(()),
            n if n == header.len() => {}
            n => bail!("the log ends {n} bytes into a frame header"),
        }
        let header = decode_frame_header(&header)
            .map_err(|defect| anyhow::anyhow!("a frame header does not check out: {defect:?}"))?;
        body.resize(header.body_len as usize, 0);
        file.read_exact(&mut body)?;
        if crc32fast::hash(&body) != header.body_crc {
            bail!("a frame body does not check out");
        }
        let decoded = decode_frame_body_of(header.kind, &body).map_err(anyhow::Error::msg)?;
        // The content blobs after the body are not counted: only the events' grouping is.
        let skipped = io::copy(
            &mut (&mut file).take(decoded.content_len()),
            &mut io::sink(),
        )?;
        if skipped != decoded.content_len() {
            bail!("the log ends inside a frame's content");
        }
        if decoded.events.is_empty() {
            continue;
        }
        frames.push(Frame {
            first_seq: decoded.first_seq,
            events: decoded.events.len() as u64,
            event_bytes: decoded.events.iter().map(|(_, len)| *len as u64).sum(),
        });
    }
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
                    content: Vec::new(),
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
                content: Vec::new(),
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
