//! The on-disk layout of the embedded log: segment headers and frames, byte by byte.
//!
//! A frame is what one group commit writes with one `write` and makes durable with one
//! `fdatasync`: the commits of every append the writer gathered, and the content blobs their
//! events cite. Because frame `n + 1` is written only after frame `n` was synced, a crash can
//! damage only the last frame of the last segment; a damaged frame with an intact frame after it
//! is not a torn write but damage or tampering. `docs/ledger-format.md` gives the full argument.
//!
//! A frame that carries content (magic `RLFC`) lists each blob's hash and length in its body,
//! under the body's checksum, and holds the blobs' bytes after the body, outside it: each blob
//! is checked by its blake3 hash instead, so its bytes can later be overwritten (a redaction)
//! without breaking any checksum of the chain. A frame without content (`RLFR`) is byte for
//! byte what it was before content frames existed.
//!
//! All integers are little-endian. Every length is checked against the bytes present before it
//! is used, so no input can make decoding read out of bounds or allocate without limit.

use crate::envelope::{Digest, HASH_LEN};

/// Bytes at the start of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"RLLOGSEG";
/// Segment format version written into new segments: 2, which may hold content frames.
pub const SEGMENT_VERSION: u32 = 2;
/// The first segment format, still read: frames without content only.
pub const SEGMENT_VERSION_FIRST: u32 = 1;
/// Length of a segment header.
pub const SEGMENT_HEADER_LEN: u64 = 32;
/// Bytes at the start of every frame without content.
pub const FRAME_MAGIC: &[u8; 4] = b"RLFR";
/// Bytes at the start of every frame that carries content blobs after its body.
pub const CONTENT_FRAME_MAGIC: &[u8; 4] = b"RLFC";
/// Bytes a content table entry takes: a blake3 hash and a length.
pub const CONTENT_ENTRY_LEN: usize = 32 + 4;
/// Length of a frame header.
pub const FRAME_HEADER_LEN: u64 = 16;

/// Encodes a segment header:
/// `magic[8] | version u32 | reserved u32 = 0 | first_seq u64 | crc32(bytes 0..24) u32 | reserved u32 = 0`.
pub fn encode_segment_header(first_seq: u64) -> [u8; SEGMENT_HEADER_LEN as usize] {
    let mut out = [0u8; SEGMENT_HEADER_LEN as usize];
    out[0..8].copy_from_slice(SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
    out[16..24].copy_from_slice(&first_seq.to_le_bytes());
    let crc = crc32fast::hash(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The seq of the segment's first frame (also in the file name).
    pub first_seq: u64,
    /// Its format version: [`SEGMENT_VERSION_FIRST`] or [`SEGMENT_VERSION`].
    pub version: u32,
}

impl SegmentHeader {
    /// Whether the segment may hold content frames.
    pub fn holds_content(&self) -> bool {
        self.version >= SEGMENT_VERSION
    }
}

/// Decodes a segment header of either version.
pub fn decode_segment_header(bytes: &[u8]) -> Result<SegmentHeader, String> {
    if bytes.len() < SEGMENT_HEADER_LEN as usize {
        return Err(format!(
            "segment header is {} bytes, expected 32",
            bytes.len()
        ));
    }
    if &bytes[0..8] != SEGMENT_MAGIC {
        return Err("segment header has the wrong magic".into());
    }
    let crc = u32_at(bytes, 24);
    if crc32fast::hash(&bytes[0..24]) != crc {
        return Err("segment header checksum mismatch".into());
    }
    let version = u32_at(bytes, 8);
    if version != SEGMENT_VERSION && version != SEGMENT_VERSION_FIRST {
        return Err(format!("segment format version {version} is not supported"));
    }
    Ok(SegmentHeader {
        first_seq: u64_at(bytes, 16),
        version,
    })
}

/// What follows a frame's header: its body alone, or its body and content blobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// `RLFR`: the body holds the commits and events.
    Events,
    /// `RLFC`: the body ends in a content table, and the blobs it lists follow the body.
    Content,
}

impl FrameKind {
    fn magic(self) -> &'static [u8; 4] {
        match self {
            FrameKind::Events => FRAME_MAGIC,
            FrameKind::Content => CONTENT_FRAME_MAGIC,
        }
    }
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Length of the body that follows the header.
    pub body_len: u32,
    /// crc32 of the body.
    pub body_crc: u32,
    /// Whether content blobs follow the body.
    pub kind: FrameKind,
}

/// Why a frame header or body is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameDefect {
    /// The header is all zero bytes: space the file system allocated but nobody wrote.
    Zeroed,
    /// The header's magic or checksum is wrong.
    BadHeader,
    /// The body's checksum is wrong, or it runs past the end of the file. Carries the seq of
    /// the first event that fails its own hash, when the body's structure still decodes.
    BadBody(Option<u64>),
    /// The body's checksum is right but its structure is not.
    Malformed(String),
}

/// Encodes the header of a frame without content:
/// `magic[4] | body_len u32 | body_crc u32 | crc32(bytes 0..12) u32`.
pub fn encode_frame_header(body: &[u8]) -> Result<[u8; FRAME_HEADER_LEN as usize], String> {
    encode_frame_header_of(FrameKind::Events, body)
}

/// Encodes the header of a frame of `kind`, whose magic says whether content follows the body.
pub fn encode_frame_header_of(
    kind: FrameKind,
    body: &[u8],
) -> Result<[u8; FRAME_HEADER_LEN as usize], String> {
    let body_len = u32::try_from(body.len()).map_err(|_| "frame body over 4 GiB".to_owned())?;
    let mut out = [0u8; FRAME_HEADER_LEN as usize];
    out[0..4].copy_from_slice(kind.magic());
    out[4..8].copy_from_slice(&body_len.to_le_bytes());
    out[8..12].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    let crc = crc32fast::hash(&out[0..12]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a frame header.
pub fn decode_frame_header(
    bytes: &[u8; FRAME_HEADER_LEN as usize],
) -> Result<FrameHeader, FrameDefect> {
    if bytes.iter().all(|b| *b == 0) {
        return Err(FrameDefect::Zeroed);
    }
    let kind = match &bytes[0..4] {
        m if m == FRAME_MAGIC => FrameKind::Events,
        m if m == CONTENT_FRAME_MAGIC => FrameKind::Content,
        _ => return Err(FrameDefect::BadHeader),
    };
    if crc32fast::hash(&bytes[0..12]) != u32_at(bytes, 12) {
        return Err(FrameDefect::BadHeader);
    }
    Ok(FrameHeader {
        body_len: u32_at(bytes, 4),
        body_crc: u32_at(bytes, 8),
        kind,
    })
}

/// One commit inside a frame, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameCommit {
    /// How many of the frame's events belong to this commit.
    pub event_count: u32,
    /// The idempotency key and command fingerprint, when the command carried a key.
    pub idempotency: Option<(String, Digest)>,
}

/// One content blob of a frame, as its table lists it: the blob's bytes follow the body, in
/// table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentEntry {
    /// blake3 of the blob's bytes: its name, and what checks them.
    pub hash: Digest,
    /// Its length in bytes.
    pub len: u32,
}

/// A decoded frame body: its commits, where each event's bytes lie within the body, and the
/// content blobs that follow it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FrameBody {
    /// Seq of the first event in the frame (for a frame of content alone, the seq the next
    /// event will have).
    pub first_seq: u64,
    /// The commits, in order; their event counts sum to `events.len()`.
    pub commits: Vec<FrameCommit>,
    /// `(offset within the body, length)` of each event's stored bytes.
    pub events: Vec<(usize, usize)>,
    /// The content blobs after the body, in order; empty for a frame without content.
    pub content: Vec<ContentEntry>,
}

impl FrameBody {
    /// Bytes the content blobs take after the body.
    pub fn content_len(&self) -> u64 {
        self.content.iter().map(|c| u64::from(c.len)).sum()
    }
}

/// Encodes a frame body:
///
/// ```text
/// first_seq u64 | commit_count u32 | event_count u32
/// commit_count × ( event_count u32 | key_len u16 | key[key_len] | fingerprint[32] if key_len > 0 )
/// event_count  × ( len u32 | stored event bytes[len] )
/// ```
///
/// Returns the body and the offset within it of each event's stored bytes.
pub fn encode_frame_body(
    first_seq: u64,
    commits: &[FrameCommit],
    events: &[&[u8]],
) -> Result<(Vec<u8>, Vec<usize>), String> {
    let total: usize = events.iter().map(|e| e.len() + 4).sum();
    encode_events(first_seq, commits, events, total)
}

/// Encodes the body of a content frame: [`encode_frame_body`]'s bytes, then the content table
/// `content_count u32 | content_count × ( hash[32] | len u32 )`. The blobs' bytes are not part
/// of the body: they follow it, in table order.
pub fn encode_content_frame_body(
    first_seq: u64,
    commits: &[FrameCommit],
    events: &[&[u8]],
    content: &[ContentEntry],
) -> Result<(Vec<u8>, Vec<usize>), String> {
    let total: usize =
        events.iter().map(|e| e.len() + 4).sum::<usize>() + 4 + content.len() * CONTENT_ENTRY_LEN;
    let (mut out, offsets) = encode_events(first_seq, commits, events, total)?;
    out.extend_from_slice(&len_u32(content.len())?.to_le_bytes());
    for entry in content {
        out.extend_from_slice(&entry.hash.0);
        out.extend_from_slice(&entry.len.to_le_bytes());
    }
    Ok((out, offsets))
}

/// The commits and events of a body, with room for `extra` more bytes.
fn encode_events(
    first_seq: u64,
    commits: &[FrameCommit],
    events: &[&[u8]],
    extra: usize,
) -> Result<(Vec<u8>, Vec<usize>), String> {
    let mut out = Vec::with_capacity(16 + commits.len() * 8 + extra);
    out.extend_from_slice(&first_seq.to_le_bytes());
    out.extend_from_slice(&len_u32(commits.len())?.to_le_bytes());
    out.extend_from_slice(&len_u32(events.len())?.to_le_bytes());
    for commit in commits {
        out.extend_from_slice(&commit.event_count.to_le_bytes());
        match &commit.idempotency {
            None => out.extend_from_slice(&0u16.to_le_bytes()),
            Some((key, fingerprint)) => {
                let key_len = u16::try_from(key.len())
                    .ok()
                    .filter(|l| *l > 0)
                    .ok_or_else(|| format!("idempotency key of {} bytes", key.len()))?;
                out.extend_from_slice(&key_len.to_le_bytes());
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(&fingerprint.0);
            }
        }
    }
    let mut offsets = Vec::with_capacity(events.len());
    for event in events {
        out.extend_from_slice(&len_u32(event.len())?.to_le_bytes());
        offsets.push(out.len());
        out.extend_from_slice(event);
    }
    Ok((out, offsets))
}

/// Decodes the body of a frame without content whose checksum has already been checked.
pub fn decode_frame_body(body: &[u8]) -> Result<FrameBody, String> {
    decode_frame_body_of(FrameKind::Events, body)
}

/// Decodes the body of a frame of `kind` whose checksum has already been checked.
pub fn decode_frame_body_of(kind: FrameKind, body: &[u8]) -> Result<FrameBody, String> {
    let mut decoded = FrameBody::default();
    decode_frame_body_into(kind, body, &mut decoded)?;
    Ok(decoded)
}

/// [`decode_frame_body_of`] into a body decoded before, reusing its vectors: a reader that walks
/// many frames allocates for none but the largest.
pub fn decode_frame_body_into(
    kind: FrameKind,
    body: &[u8],
    decoded: &mut FrameBody,
) -> Result<(), String> {
    decoded.commits.clear();
    decoded.events.clear();
    decoded.content.clear();
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    let first_seq = r.u64()?;
    let commit_count = r.u32()? as usize;
    let event_count = r.u32()? as usize;
    // Each commit takes at least 6 bytes and each event at least 4: bound the counts by the
    // bytes present before allocating for them.
    if commit_count.saturating_mul(6) > body.len() || event_count.saturating_mul(4) > body.len() {
        return Err("frame counts exceed its length".into());
    }
    let counted = decode_commits(&mut r, commit_count, &mut decoded.commits)?;
    if counted != event_count {
        return Err(format!(
            "commits hold {counted} events but the frame says {event_count}"
        ));
    }
    let events = &mut decoded.events;
    events.reserve(event_count);
    for _ in 0..event_count {
        let len = r.u32()? as usize;
        let offset = r.pos;
        r.take(len)?;
        events.push((offset, len));
    }
    if kind == FrameKind::Content {
        decode_content_table(&mut r, &mut decoded.content)?;
    }
    if r.pos != body.len() {
        return Err(format!(
            "{} bytes after the last {}",
            body.len() - r.pos,
            match kind {
                FrameKind::Events => "event",
                FrameKind::Content => "content entry",
            }
        ));
    }
    decoded.first_seq = first_seq;
    Ok(())
}

/// `count` commits of a body into `commits`; answers how many events they hold.
fn decode_commits(
    r: &mut Reader<'_>,
    count: usize,
    commits: &mut Vec<FrameCommit>,
) -> Result<usize, String> {
    commits.reserve(count);
    let mut counted = 0usize;
    for _ in 0..count {
        let n = r.u32()?;
        counted = counted.saturating_add(n as usize);
        let key_len = r.u16()? as usize;
        let idempotency = if key_len == 0 {
            None
        } else {
            let key = std::str::from_utf8(r.take(key_len)?)
                .map_err(|_| "idempotency key is not UTF-8".to_owned())?
                .to_owned();
            let mut fingerprint = [0u8; HASH_LEN];
            fingerprint.copy_from_slice(r.take(HASH_LEN)?);
            Some((key, Digest(fingerprint)))
        };
        commits.push(FrameCommit {
            event_count: n,
            idempotency,
        });
    }
    Ok(counted)
}

/// The content table at the end of a content frame's body.
fn decode_content_table(r: &mut Reader<'_>, content: &mut Vec<ContentEntry>) -> Result<(), String> {
    let count = r.u32()? as usize;
    // Bound the count by the bytes left before allocating for it.
    if count.saturating_mul(CONTENT_ENTRY_LEN) > r.bytes.len() - r.pos {
        return Err("content count exceeds the frame's length".into());
    }
    content.reserve(count);
    for _ in 0..count {
        let mut hash = [0u8; HASH_LEN];
        hash.copy_from_slice(r.take(HASH_LEN)?);
        let len = r.u32()?;
        content.push(ContentEntry {
            hash: Digest(hash),
            len,
        });
    }
    Ok(())
}

fn len_u32(len: usize) -> Result<u32, String> {
    u32::try_from(len).map_err(|_| format!("length {len} does not fit the frame format"))
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

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("frame ends inside a field at byte {}", self.pos))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u16(&mut self) -> Result<u16, String> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }
    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn body_round_trips() {
        let commits = vec![
            FrameCommit {
                event_count: 2,
                idempotency: Some(("key-1".into(), Digest([7; 32]))),
            },
            FrameCommit {
                event_count: 1,
                idempotency: None,
            },
        ];
        let events: Vec<&[u8]> = vec![b"abc", b"", b"defg"];
        let (body, offsets) = encode_frame_body(42, &commits, &events).expect("encodes");
        let decoded = decode_frame_body(&body).expect("decodes");
        assert_eq!(decoded.first_seq, 42);
        assert_eq!(decoded.commits, commits);
        for ((offset, len), (expected, at)) in
            decoded.events.iter().zip(events.iter().zip(&offsets))
        {
            assert_eq!(&body[*offset..offset + len], *expected);
            assert_eq!(offset, at);
        }
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let header = encode_frame_header(b"hello").expect("encodes");
        let decoded = decode_frame_header(&header).expect("decodes");
        assert_eq!(decoded.body_len, 5);
        assert_eq!(decoded.body_crc, crc32fast::hash(b"hello"));
        let mut bad = header;
        bad[5] ^= 1;
        assert_eq!(decode_frame_header(&bad), Err(FrameDefect::BadHeader));
        assert_eq!(decode_frame_header(&[0; 16]), Err(FrameDefect::Zeroed));

        let seg = encode_segment_header(99);
        assert_eq!(
            decode_segment_header(&seg),
            Ok(SegmentHeader {
                first_seq: 99,
                version: SEGMENT_VERSION
            })
        );
        let mut bad = seg;
        bad[17] ^= 1;
        assert!(decode_segment_header(&bad).is_err());
    }

    /// A frame without content is the format's first frame, byte for byte: what a ledger that
    /// never carried content wrote, and what older builds read.
    #[test]
    fn a_frame_without_content_keeps_its_first_bytes() {
        let commits = vec![FrameCommit {
            event_count: 1,
            idempotency: Some(("k".into(), Digest([9; 32]))),
        }];
        let (body, offsets) = encode_frame_body(5, &commits, &[b"xy"]).expect("encodes");
        let mut expected = Vec::new();
        expected.extend_from_slice(&5u64.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&1u16.to_le_bytes());
        expected.extend_from_slice(b"k");
        expected.extend_from_slice(&[9; 32]);
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(b"xy");
        assert_eq!(body, expected);
        assert_eq!(offsets, vec![expected.len() - 2]);
        let header = encode_frame_header(&body).expect("header");
        assert_eq!(&header[0..4], b"RLFR");
        assert_eq!(
            decode_frame_header(&header).map(|h| h.kind),
            Ok(FrameKind::Events)
        );
    }

    #[test]
    fn a_content_frame_lists_its_blobs_after_the_events() {
        let commits = vec![FrameCommit {
            event_count: 1,
            idempotency: None,
        }];
        let content = vec![
            ContentEntry {
                hash: Digest([1; 32]),
                len: 5,
            },
            ContentEntry {
                hash: Digest([2; 32]),
                len: 0,
            },
        ];
        let (body, _) =
            encode_content_frame_body(3, &commits, &[b"event"], &content).expect("encodes");
        let (plain, _) = encode_frame_body(3, &commits, &[b"event"]).expect("encodes");
        assert_eq!(&body[..plain.len()], &plain[..]);
        assert_eq!(body.len(), plain.len() + 4 + 2 * CONTENT_ENTRY_LEN);
        let decoded = decode_frame_body_of(FrameKind::Content, &body).expect("decodes");
        assert_eq!(decoded.content, content);
        assert_eq!(decoded.content_len(), 5);
        // Read as a frame without content, the table is bytes too many; and the other way, a
        // body without a table is cut short.
        assert!(decode_frame_body(&body).is_err());
        assert!(decode_frame_body_of(FrameKind::Content, &plain).is_err());
        let header = encode_frame_header_of(FrameKind::Content, &body).expect("header");
        assert_eq!(&header[0..4], b"RLFC");
        assert_eq!(
            decode_frame_header(&header).map(|h| h.kind),
            Ok(FrameKind::Content)
        );

        // A frame of content alone: no commit, no event.
        let (alone, _) = encode_content_frame_body(9, &[], &[], &content).expect("encodes");
        let decoded = decode_frame_body_of(FrameKind::Content, &alone).expect("decodes");
        assert!(decoded.events.is_empty() && decoded.commits.is_empty());
        assert_eq!(decoded.first_seq, 9);
        assert_eq!(decoded.content.len(), 2);
    }

    #[test]
    fn segments_of_the_first_version_still_read() {
        let mut seg = encode_segment_header(7);
        seg[8..12].copy_from_slice(&SEGMENT_VERSION_FIRST.to_le_bytes());
        let crc = crc32fast::hash(&seg[0..24]);
        seg[24..28].copy_from_slice(&crc.to_le_bytes());
        let header = decode_segment_header(&seg).expect("decodes");
        assert_eq!(header.version, 1);
        assert!(!header.holds_content());
        seg[8..12].copy_from_slice(&3u32.to_le_bytes());
        let crc = crc32fast::hash(&seg[0..24]);
        seg[24..28].copy_from_slice(&crc.to_le_bytes());
        assert!(decode_segment_header(&seg).is_err());
    }

    fn arb_commits_and_events() -> impl Strategy<Value = (Vec<FrameCommit>, Vec<Vec<u8>>)> {
        proptest::collection::vec(
            (
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
                proptest::option::of(("[a-z]{1,12}", any::<[u8; 32]>())),
            ),
            0..4,
        )
        .prop_map(|commits| {
            let mut frame_commits = Vec::new();
            let mut events = Vec::new();
            for (evs, key) in commits {
                frame_commits.push(FrameCommit {
                    event_count: evs.len() as u32,
                    idempotency: key.map(|(k, f)| (k, Digest(f))),
                });
                events.extend(evs);
            }
            (frame_commits, events)
        })
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_frame_body(&bytes);
            let _ = decode_frame_body_of(FrameKind::Content, &bytes);
            let _ = decode_segment_header(&bytes);
            if bytes.len() >= 16 {
                let mut h = [0u8; 16];
                h.copy_from_slice(&bytes[..16]);
                let _ = decode_frame_header(&h);
            }
        }

        #[test]
        fn content_frames_round_trip(
            (commits, events) in arb_commits_and_events(),
            content in proptest::collection::vec((any::<[u8; 32]>(), any::<u32>()), 0..6),
            first_seq in any::<u64>(),
        ) {
            let content: Vec<ContentEntry> = content
                .into_iter()
                .map(|(hash, len)| ContentEntry { hash: Digest(hash), len })
                .collect();
            let refs: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
            let (body, offsets) =
                encode_content_frame_body(first_seq, &commits, &refs, &content).expect("encodes");
            let decoded = decode_frame_body_of(FrameKind::Content, &body).expect("decodes");
            prop_assert_eq!(decoded.first_seq, first_seq);
            prop_assert_eq!(&decoded.commits, &commits);
            prop_assert_eq!(&decoded.content, &content);
            for (((at, len), expected), offset) in decoded.events.iter().zip(&events).zip(&offsets) {
                prop_assert_eq!(&body[*at..at + len], expected.as_slice());
                prop_assert_eq!(at, offset);
            }
            // Any cut of the body is refused, never misread.
            for cut in [1usize, 4, CONTENT_ENTRY_LEN] {
                if let Some(short) = body.len().checked_sub(cut) {
                    prop_assert!(decode_frame_body_of(FrameKind::Content, &body[..short]).is_err());
                }
            }
        }
    }
}
