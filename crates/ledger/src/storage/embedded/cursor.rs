//! Reading the log: the cursor that scans frames through large reads, the one-frame read of
//! recovery, and the words for what is wrong with a damaged frame. Both step over the content
//! blobs that follow a content frame's body: events are read without them.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::Segment;
use crate::envelope::{EventRef, decode_stored};
use crate::storage::frame::{
    self, FRAME_HEADER_LEN, FrameBody, FrameDefect, FrameKind, SEGMENT_HEADER_LEN,
};
use crate::storage::{IdempotencyRecord, StorageError};

/// The idempotency records a checked frame carries.
pub(super) fn idempotency_records(
    body: &FrameBody,
    events: &[EventRef<'_>],
) -> Vec<IdempotencyRecord> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for commit in &body.commits {
        let n = commit.event_count as usize;
        if let (Some((key, fingerprint)), Some(last)) =
            (&commit.idempotency, events.get(at + n.saturating_sub(1)))
            && n > 0
        {
            out.push(IdempotencyRecord {
                key: key.clone(),
                fingerprint: *fingerprint,
                stream: last.stream.to_owned(),
                first_seq: body.first_seq + at as u64,
                event_count: commit.event_count,
                stream_version: last.stream_version,
            });
        }
        at += n;
    }
    out
}

/// The first read of a [`FrameCursor`]: a frame of a full group, for a point read...
pub(super) const READ_AHEAD_MIN: usize = 16 * 1024;
/// ...and the largest, doubling from the first, for a scan of the log: large enough that the
/// system calls do not count, small enough that what was read is still in the processor's
/// cache when it is checked (1 MiB reads made verification slower).
pub(super) const READ_AHEAD_MAX: usize = 256 * 1024;

/// Reads frames forward through the segments into one buffer, refilled by large reads: a scan
/// of the log costs one `pread` a megabyte rather than two a frame, no `stat`, and no copy of
/// an event unless the caller makes one.
pub(super) struct FrameCursor {
    pub(super) segments: BTreeMap<u64, Arc<Segment>>,
    pub(super) seg: Arc<Segment>,
    /// Bytes of `seg` from byte `buf_at` on; `buf[..filled]` hold them.
    pub(super) buf: Vec<u8>,
    pub(super) buf_at: u64,
    pub(super) filled: usize,
    /// Where the next frame starts in `seg`.
    pub(super) offset: u64,
    pub(super) read_ahead: usize,
    /// No frame is read that starts at or after this seq: the head when the read began. A
    /// frame past it may still be being written.
    pub(super) end: u64,
    /// The last frame read: its body's decoded layout (vectors reused) and where the body
    /// starts in `buf`.
    pub(super) body: FrameBody,
    pub(super) body_at: usize,
    /// The seq that follows the last frame read, to say where damage lies.
    pub(super) next_seq: Option<u64>,
}

thread_local! {
    /// The read buffer of the last [`FrameCursor`] this thread dropped: a point read or a run of
    /// chunked reads allocates (and zeroes) it once, not once per call.
    static READ_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Drop for FrameCursor {
    fn drop(&mut self) {
        // A buffer grown for an unusually large frame is let go rather than kept.
        if self.buf.len() <= READ_AHEAD_MAX {
            let buf = std::mem::take(&mut self.buf);
            READ_BUFFER.with(|b| b.set(buf));
        }
    }
}

impl FrameCursor {
    pub(super) fn new(
        segments: BTreeMap<u64, Arc<Segment>>,
        seg: Arc<Segment>,
        offset: u64,
        end: u64,
        read_ahead: usize,
    ) -> FrameCursor {
        FrameCursor {
            segments,
            seg,
            buf: READ_BUFFER.with(|b| b.take()),
            buf_at: offset,
            filled: 0,
            offset,
            read_ahead: read_ahead.clamp(READ_AHEAD_MIN, READ_AHEAD_MAX),
            end,
            body: FrameBody::default(),
            body_at: 0,
            next_seq: None,
        }
    }

    /// Makes `need` bytes of the segment from byte `at` on available in the buffer, as many as
    /// the file holds; returns how many are.
    pub(super) fn fill(&mut self, at: u64, need: usize) -> Result<usize, StorageError> {
        let held_end = self.buf_at + self.filled as u64;
        if at >= self.buf_at && at + need as u64 <= held_end {
            return Ok(need);
        }
        // Keep what is held from `at` on and read after it.
        if at >= self.buf_at && at <= held_end {
            let from = (at - self.buf_at) as usize;
            self.buf.copy_within(from..self.filled, 0);
            self.filled -= from;
        } else {
            self.filled = 0;
        }
        self.buf_at = at;
        let want = need.max(self.read_ahead);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.filled < need {
            match self
                .seg
                .file
                .read_at(&mut self.buf[self.filled..want], at + self.filled as u64)
            {
                Ok(0) => break,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(StorageError::io("read segment", &self.seg.path, e)),
            }
        }
        self.read_ahead = (self.read_ahead * 2).min(READ_AHEAD_MAX);
        Ok(self.filled.min(need))
    }

    /// Reads the next frame, checked (header and body checksums, layout) into `body` and
    /// `body_at`. False at the end of the log, or when the next frame starts at `end`.
    pub(super) fn next_frame(&mut self) -> Result<bool, StorageError> {
        loop {
            if self.next_seq.is_some_and(|next| next >= self.end) {
                return Ok(false);
            }
            let header_len = FRAME_HEADER_LEN as usize;
            let held = self.fill(self.offset, header_len)?;
            if held == 0 {
                // The end of this segment; the log goes on in the next, if there is one.
                let Some(next) = self
                    .segments
                    .range(self.seg.first_seq + 1..)
                    .next()
                    .map(|(_, s)| Arc::clone(s))
                else {
                    return Ok(false);
                };
                self.seg = next;
                self.offset = SEGMENT_HEADER_LEN;
                self.buf_at = SEGMENT_HEADER_LEN;
                self.filled = 0;
                continue;
            }
            let at = (self.offset - self.buf_at) as usize;
            if held < header_len {
                let defect = if self.buf[at..at + held].iter().all(|b| *b == 0) {
                    FrameDefect::Zeroed
                } else {
                    FrameDefect::BadHeader
                };
                return Err(self.damaged(&defect));
            }
            let mut header = [0u8; FRAME_HEADER_LEN as usize];
            header.copy_from_slice(&self.buf[at..at + header_len]);
            let header = match frame::decode_frame_header(&header) {
                Ok(header) => header,
                Err(defect) => return Err(self.damaged(&defect)),
            };
            if let Err(defect) = content_allowed(&self.seg, header.kind) {
                return Err(self.damaged(&defect));
            }
            let body_len = header.body_len as usize;
            let body_offset = self.offset + FRAME_HEADER_LEN;
            if self.fill(body_offset, body_len)? < body_len {
                return Err(self.damaged(&FrameDefect::BadBody(None)));
            }
            let start = (body_offset - self.buf_at) as usize;
            let body = &self.buf[start..start + body_len];
            if crc32fast::hash(body) != header.body_crc {
                let defect = FrameDefect::BadBody(first_damaged_event(header.kind, body));
                return Err(self.damaged(&defect));
            }
            if let Err(detail) = frame::decode_frame_body_into(header.kind, body, &mut self.body) {
                return Err(self.damaged(&FrameDefect::Malformed(detail)));
            }
            self.body_at = start;
            // The content blobs after the body are stepped over, unread.
            self.offset = body_offset + body_len as u64 + self.body.content_len();
            self.next_seq = Some(self.body.first_seq + self.body.events.len() as u64);
            return Ok(true);
        }
    }

    /// The stored bytes of event `i` of the last frame read.
    pub(super) fn event(&self, i: usize) -> Option<&[u8]> {
        let (at, n) = *self.body.events.get(i)?;
        self.buf.get(self.body_at + at..self.body_at + at + n)
    }

    /// The error for a damaged frame at the cursor: where, and the first seq it affects.
    pub(super) fn damaged(&self, defect: &FrameDefect) -> StorageError {
        let located = match defect {
            FrameDefect::BadBody(Some(seq)) => Some(*seq),
            _ => None,
        };
        StorageError::Corrupt {
            seq: located.or(self.next_seq),
            detail: format!(
                "{} at byte {} of {}",
                defect_text(defect),
                self.offset,
                self.seg.path.display()
            ),
        }
    }
}

/// A frame read whole but for its content blobs: its body's bytes and their layout.
pub(super) struct ReadFrame {
    pub(super) header_body_len: u32,
    pub(super) bytes: Vec<u8>,
    pub(super) body: FrameBody,
}

impl ReadFrame {
    /// Bytes the frame takes in the segment: header, body and content.
    pub(super) fn len(&self) -> u64 {
        FRAME_HEADER_LEN + u64::from(self.header_body_len) + self.body.content_len()
    }
}

/// A content frame is refused in a segment of the first format, which cannot hold one: an
/// older build would have written none there.
fn content_allowed(seg: &Segment, kind: FrameKind) -> Result<(), FrameDefect> {
    if kind == FrameKind::Content && seg.version < frame::SEGMENT_VERSION {
        return Err(FrameDefect::Malformed(format!(
            "a content frame in a segment of format {}",
            seg.version
        )));
    }
    Ok(())
}

pub(super) fn defect_text(defect: &FrameDefect) -> String {
    match defect {
        FrameDefect::Zeroed => "zero bytes where a frame header should be".into(),
        FrameDefect::BadHeader => "frame header checksum mismatch".into(),
        FrameDefect::BadBody(Some(seq)) => {
            format!("frame body checksum mismatch; seq {seq} fails its own hash")
        }
        FrameDefect::BadBody(None) => "frame body checksum mismatch".into(),
        FrameDefect::Malformed(detail) => format!("malformed frame: {detail}"),
    }
}

/// In a body whose checksum failed but whose structure decodes, the seq of the first event whose
/// stored hash is not the hash of its bytes: where the damage is.
pub(super) fn first_damaged_event(kind: FrameKind, body: &[u8]) -> Option<u64> {
    let decoded = frame::decode_frame_body_of(kind, body).ok()?;
    decoded
        .events
        .iter()
        .position(|(at, n)| decode_stored(&body[*at..at + n]).is_err())
        .map(|i| decoded.first_seq + i as u64)
}

/// Reads the frame at `offset` of a segment `len` bytes long. The outer error is I/O; the inner
/// one says what is wrong with the bytes.
pub(super) fn read_frame(
    seg: &Segment,
    offset: u64,
    len: u64,
) -> Result<Result<ReadFrame, FrameDefect>, StorageError> {
    if len - offset < FRAME_HEADER_LEN {
        let mut rest = vec![0u8; (len - offset) as usize];
        seg.file
            .read_exact_at(&mut rest, offset)
            .map_err(|e| StorageError::io("read frame", &seg.path, e))?;
        return Ok(Err(if rest.iter().all(|b| *b == 0) {
            FrameDefect::Zeroed
        } else {
            FrameDefect::BadHeader
        }));
    }
    let mut header = [0u8; FRAME_HEADER_LEN as usize];
    seg.file
        .read_exact_at(&mut header, offset)
        .map_err(|e| StorageError::io("read frame header", &seg.path, e))?;
    let header = match frame::decode_frame_header(&header) {
        Ok(h) => h,
        Err(defect) => return Ok(Err(defect)),
    };
    if let Err(defect) = content_allowed(seg, header.kind) {
        return Ok(Err(defect));
    }
    if u64::from(header.body_len) > len - offset - FRAME_HEADER_LEN {
        return Ok(Err(FrameDefect::BadBody(None)));
    }
    let mut bytes = vec![0u8; header.body_len as usize];
    seg.file
        .read_exact_at(&mut bytes, offset + FRAME_HEADER_LEN)
        .map_err(|e| StorageError::io("read frame body", &seg.path, e))?;
    if crc32fast::hash(&bytes) != header.body_crc {
        return Ok(Err(FrameDefect::BadBody(first_damaged_event(
            header.kind,
            &bytes,
        ))));
    }
    match frame::decode_frame_body_of(header.kind, &bytes) {
        Ok(body) => Ok(Ok(ReadFrame {
            header_body_len: header.body_len,
            bytes,
            body,
        })),
        Err(detail) => Ok(Err(FrameDefect::Malformed(detail))),
    }
}
