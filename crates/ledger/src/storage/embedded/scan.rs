//! The scan an open makes of the log: it reads frames forward from a point, checks each one
//! (checksums, structure, each event's seq, chain link and stream version, and the content of
//! the log's last frame), indexes what checks out, and stops at the first defect.
//!
//! Content blobs lie outside the frames' checksums, so the scan checks them only where a crash
//! can tear them: in the last frame of the log, written by the last `write`, whose content a
//! power loss may have left short or unwritten. There a blob that does not hash to its name is
//! a torn write, unless a durable record shows the frame's events were acknowledged (then the
//! frame was synced whole, and the blob was damaged or redacted since: the frame is kept and a
//! read of that blob reports it damaged). A blob cut short by the end of the file is bytes the
//! log held and no longer holds: a torn write, or, with such a record, a reported loss. In any
//! earlier frame a blob's bytes are not read at open at all: their damage is not damage to the
//! chain, and only a read of that blob finds it.

use super::cursor::ReadFrame;
use super::{
    ContentLocation, EmbeddedStorage, IndexBatch, IndexedEvent, Location, Segment, Tail,
    defect_text, idempotency_records, read_frame,
};
use crate::chain::{ChainBreak, ChainChecker};
use crate::envelope::EventRef;
use crate::storage::frame::{self, FRAME_HEADER_LEN, FrameDefect, SEGMENT_HEADER_LEN};
use crate::storage::{StorageError, content_hash};

/// What is wrong with a content blob of the last frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlobDefect {
    /// The file ends before the blob does.
    CutShort,
    /// Whole in length, its bytes do not hash to its name.
    Altered,
}

impl BlobDefect {
    fn text(self) -> &'static str {
        match self {
            BlobDefect::CutShort => "is cut short",
            BlobDefect::Altered => "does not hash to its name",
        }
    }
}

/// Entries an index batch of the scan gathers before it is written.
const SCAN_BATCH_ENTRIES: usize = 8192;

/// The outcome of reading frames forward from a position.
pub(super) enum Scan {
    /// Reached the end of the log cleanly.
    End,
    /// Found a defect.
    Defect(Defect),
}

/// A defect a scan stopped at, at byte `offset` of the segment starting at `segment`.
pub(super) struct Defect {
    pub(super) segment: u64,
    pub(super) offset: u64,
    /// The seq the defective frame would have started at.
    pub(super) seq: u64,
    pub(super) detail: String,
    /// True when the defect is in a frame whose checksum held: damage, never a torn write.
    pub(super) structural: bool,
    /// Where a frame written after the defective one would start at the earliest: past
    /// the frame when its body checked out (its content may be torn), else the next byte.
    pub(super) later_from: u64,
}

impl Scan {
    fn defect(segment: u64, tail: &Tail, seq: u64, detail: String, structural: bool) -> Scan {
        Scan::Defect(Defect {
            segment,
            offset: tail.offset,
            seq,
            detail,
            structural,
            later_from: tail.offset + 1,
        })
    }
}

/// What a scan found: where the log ends, how the scan ended, and what it noted.
pub(super) struct Scanned {
    pub(super) tail: Tail,
    pub(super) outcome: Scan,
    /// Content found damaged in the last frame, whose events were acknowledged.
    pub(super) notes: Vec<String>,
}

impl EmbeddedStorage {
    /// Reads and indexes frames from `start` to the end of the log, checking each frame's
    /// checksum and structure, each event's seq, chain link and stream version, and the
    /// content of the last frame. Stops at the first defect; the frame holding it is not
    /// indexed.
    pub(super) fn scan_and_index(&self, start: Tail) -> Result<Scanned, StorageError> {
        let segments = self.segments_snapshot();
        let last_segment = segments.keys().next_back().copied();
        let mut scan = Scanned {
            tail: start,
            outcome: Scan::End,
            notes: Vec::new(),
        };
        let mut checker = ChainChecker::new(start.next_seq, start.last_hash);
        let mut batch = IndexBatch::default();
        for (&first, seg) in segments.range(start.segment..) {
            let tail = &mut scan.tail;
            if first != tail.segment {
                // Moving on to the next segment: it must begin exactly where the last ended.
                if first != tail.next_seq {
                    let detail = format!(
                        "segment starts at seq {first} but the log before it ends at {}",
                        tail.next_seq
                    );
                    scan.outcome = Scan::Defect(Defect {
                        segment: first,
                        offset: 0,
                        seq: tail.next_seq,
                        detail,
                        structural: true,
                        later_from: tail.offset + 1,
                    });
                    break;
                }
                tail.segment = first;
                tail.offset = SEGMENT_HEADER_LEN;
            }
            let last = Some(first) == last_segment;
            if let Some(defect) =
                self.scan_segment(seg, last, &mut scan, &mut checker, &mut batch)?
            {
                scan.outcome = defect;
                break;
            }
        }
        batch.apply(&self.index.tree, &scan.tail)?;
        Ok(scan)
    }

    /// Scans one segment from `scan.tail`; answers the defect it stops at, if any.
    fn scan_segment(
        &self,
        seg: &Segment,
        last_segment: bool,
        scan: &mut Scanned,
        checker: &mut ChainChecker,
        batch: &mut IndexBatch,
    ) -> Result<Option<Scan>, StorageError> {
        let len = seg
            .file
            .metadata()
            .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
            .len();
        let first = seg.first_seq;
        while scan.tail.offset < len {
            let tail = scan.tail;
            let frame = match read_frame(seg, tail.offset, len)? {
                Ok(frame) => frame,
                Err(defect) => {
                    let seq = match defect {
                        FrameDefect::BadBody(Some(seq)) => seq,
                        _ => tail.next_seq,
                    };
                    let structural = matches!(defect, FrameDefect::Malformed(_));
                    return Ok(Some(Scan::defect(
                        first,
                        &tail,
                        seq,
                        defect_text(&defect),
                        structural,
                    )));
                }
            };
            let end = tail.offset + frame.len();
            let last = last_segment && end >= len;
            if end > len && !last {
                let detail = "the segment ends inside the frame's content".to_owned();
                return Ok(Some(Scan::defect(
                    first,
                    &tail,
                    tail.next_seq,
                    detail,
                    false,
                )));
            }
            if let Some(defect) = self.check_content(seg, &frame, &tail, last, scan)? {
                return Ok(Some(defect));
            }
            // Everything indexed counts: the head is set once the scan is done.
            let mut scratch = checker.clone();
            let events = match self.check_events(&frame, &mut scratch, first, &tail) {
                Ok(events) => events,
                Err(defect) => return Ok(Some(defect)),
            };
            *checker = scratch;
            index_frame(batch, first, &tail, &frame, &events);
            scan.tail.next_seq = checker.next_seq;
            scan.tail.last_hash = checker.last_hash;
            scan.tail.offset = end;
            if batch.entries.len() >= SCAN_BATCH_ENTRIES {
                std::mem::take(batch).apply(&self.index.tree, &scan.tail)?;
            }
        }
        Ok(None)
    }

    /// The events of a frame, checked against the chain so far.
    fn check_events<'f>(
        &self,
        frame: &'f ReadFrame,
        checker: &mut ChainChecker,
        segment: u64,
        tail: &Tail,
    ) -> Result<Vec<EventRef<'f>>, Scan> {
        let mut base = |stream: &str| {
            self.indexed_version(stream, u64::MAX)
                .map_err(|e| e.to_string())
        };
        let mut events = Vec::with_capacity(frame.body.events.len());
        for (offset, n) in &frame.body.events {
            match checker.check(&frame.bytes[*offset..offset + n], &mut base) {
                Ok(event) => events.push(event),
                Err(ChainBreak { seq, problem }) => {
                    return Err(Scan::defect(segment, tail, seq, problem, true));
                }
            }
        }
        if frame.body.first_seq != tail.next_seq {
            let detail = format!(
                "frame says it starts at seq {} where seq {} is next",
                frame.body.first_seq, tail.next_seq
            );
            return Err(Scan::defect(segment, tail, tail.next_seq, detail, true));
        }
        Ok(events)
    }

    /// Checks the content of a frame where a crash can tear it: in the last frame of the log, a
    /// blob cut short or that does not hash to its name is a torn write (the defect answered).
    /// A blob whole in length that does not hash to its name, in a frame whose events a durable
    /// record shows acknowledged, is not: the frame was synced whole, so the blob was damaged
    /// or redacted since, and the frame is kept. (A blob cut short there is bytes the log held
    /// and lost: the defect is answered, and the record makes it a reported loss.) An earlier
    /// frame's content is not read.
    fn check_content(
        &self,
        seg: &Segment,
        frame: &ReadFrame,
        tail: &Tail,
        last: bool,
        scan: &mut Scanned,
    ) -> Result<Option<Scan>, StorageError> {
        if frame.body.content.is_empty() || !last {
            return Ok(None);
        }
        let content_at = tail.offset + FRAME_HEADER_LEN + u64::from(frame.header_body_len);
        let Some((hash, defect)) = self.damaged_blob(seg, frame, content_at)? else {
            return Ok(None);
        };
        let events = frame.body.events.len() as u64;
        let detail = format!("content blob {hash} of the last frame {}", defect.text());
        let whole = defect == BlobDefect::Altered;
        if whole && events > 0 && self.claimed >= tail.next_seq + events {
            // Synced with its events, which were acknowledged: damaged or redacted since.
            scan.notes.push(format!(
                "{detail}; the frame's events were acknowledged, so it is kept and a read of that blob reports it damaged"
            ));
            return Ok(None);
        }
        Ok(Some(Scan::Defect(Defect {
            segment: seg.first_seq,
            offset: tail.offset,
            seq: tail.next_seq,
            detail,
            structural: false,
            later_from: content_at + frame.body.content_len(),
        })))
    }

    /// The first blob of a frame whose bytes, from `content_at` on, are cut short or do not
    /// hash to its name, with what is wrong.
    fn damaged_blob(
        &self,
        seg: &Segment,
        frame: &ReadFrame,
        content_at: u64,
    ) -> Result<Option<(crate::envelope::Digest, BlobDefect)>, StorageError> {
        let mut at = content_at;
        for entry in &frame.body.content {
            let loc = ContentLocation {
                segment: seg.first_seq,
                offset: at,
                len: entry.len,
            };
            let bytes = self.read_content(&loc)?;
            if bytes.len() < entry.len as usize {
                return Ok(Some((entry.hash, BlobDefect::CutShort)));
            }
            if content_hash(&bytes) != entry.hash {
                return Ok(Some((entry.hash, BlobDefect::Altered)));
            }
            at += u64::from(entry.len);
        }
        Ok(None)
    }

    /// True when a frame with a valid header and body checksum starts anywhere from `from` on.
    pub(super) fn valid_frame_from(&self, segment: u64, from: u64) -> Result<bool, StorageError> {
        let segments = self.segments_snapshot();
        let Some(seg) = segments.get(&segment) else {
            return Ok(false);
        };
        let len = seg
            .file
            .metadata()
            .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
            .len();
        let mut bytes = vec![0u8; len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&seg.file, &mut bytes, 0)
            .map_err(|e| StorageError::io("read segment", &seg.path, e))?;
        let mut at = from as usize;
        while at + FRAME_HEADER_LEN as usize <= bytes.len() {
            let magic = &bytes[at..at + 4];
            if (magic == frame::FRAME_MAGIC || magic == frame::CONTENT_FRAME_MAGIC)
                && read_frame(seg, at as u64, len)?.is_ok()
            {
                return Ok(true);
            }
            at += 1;
        }
        Ok(false)
    }
}

/// The index entries of a checked frame at `tail.offset` of segment `segment`: the frame (when
/// it holds events), its events, its idempotency keys and its content blobs.
fn index_frame(
    batch: &mut IndexBatch,
    segment: u64,
    tail: &Tail,
    frame: &ReadFrame,
    events: &[EventRef<'_>],
) {
    if !events.is_empty() {
        batch.frame(frame.body.first_seq, segment, tail.offset);
    }
    for (e, (offset, len)) in events.iter().zip(&frame.body.events) {
        batch.event(&IndexedEvent {
            loc: Location {
                seq: e.seq,
                segment,
                offset: tail.offset + FRAME_HEADER_LEN + *offset as u64,
                len: *len as u32,
            },
            stream: e.stream,
            stream_version: e.stream_version,
            event_id: e.event_id,
            hash: e.hash,
        });
    }
    for record in idempotency_records(&frame.body, events) {
        batch.key(&record);
    }
    let mut at = tail.offset + FRAME_HEADER_LEN + u64::from(frame.header_body_len);
    for entry in &frame.body.content {
        let loc = ContentLocation {
            segment,
            offset: at,
            len: entry.len,
        };
        batch.content(&entry.hash, &loc);
        at += u64::from(entry.len);
    }
}
