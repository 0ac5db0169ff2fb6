//! The on-disk layout of the embedded log: segment headers and frames, byte by byte.
//!
//! A frame is what one group commit writes with one `write` and makes durable with one
//! `fdatasync`: the commits of every append the writer gathered. Because frame `n + 1` is
//! written only after frame `n` was synced, a crash can damage only the last frame of the last
//! segment; a damaged frame with an intact frame after it is not a torn write but damage or
//! tampering. `docs/ledger-format.md` gives the full argument.
//!
//! All integers are little-endian. Every length is checked against the bytes present before it
//! is used, so no input can make decoding read out of bounds or allocate without limit.

use crate::envelope::{Digest, HASH_LEN};

/// Bytes at the start of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"RLLOGSEG";
/// Segment format version.
pub const SEGMENT_VERSION: u32 = 1;
/// Length of a segment header.
pub const SEGMENT_HEADER_LEN: u64 = 32;
/// Bytes at the start of every frame.
pub const FRAME_MAGIC: &[u8; 4] = b"RLFR";
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

/// Decodes a segment header, giving the segment's first seq.
pub fn decode_segment_header(bytes: &[u8]) -> Result<u64, String> {
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
    if version != SEGMENT_VERSION {
        return Err(format!("segment format version {version} is not supported"));
    }
    Ok(u64_at(bytes, 16))
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Length of the body that follows the header.
    pub body_len: u32,
    /// crc32 of the body.
    pub body_crc: u32,
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

/// Encodes a frame header: `magic[4] | body_len u32 | body_crc u32 | crc32(bytes 0..12) u32`.
pub fn encode_frame_header(body: &[u8]) -> Result<[u8; FRAME_HEADER_LEN as usize], String> {
    let body_len = u32::try_from(body.len()).map_err(|_| "frame body over 4 GiB".to_owned())?;
    let mut out = [0u8; FRAME_HEADER_LEN as usize];
    out[0..4].copy_from_slice(FRAME_MAGIC);
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
    if &bytes[0..4] != FRAME_MAGIC || crc32fast::hash(&bytes[0..12]) != u32_at(bytes, 12) {
        return Err(FrameDefect::BadHeader);
    }
    Ok(FrameHeader {
        body_len: u32_at(bytes, 4),
        body_crc: u32_at(bytes, 8),
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

/// A decoded frame body: its commits and where each event's bytes lie within the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameBody {
    /// Seq of the first event in the frame.
    pub first_seq: u64,
    /// The commits, in order; their event counts sum to `events.len()`.
    pub commits: Vec<FrameCommit>,
    /// `(offset within the body, length)` of each event's stored bytes.
    pub events: Vec<(usize, usize)>,
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
    let mut out = Vec::with_capacity(16 + commits.len() * 8 + total);
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

/// Decodes a frame body whose checksum has already been checked.
pub fn decode_frame_body(body: &[u8]) -> Result<FrameBody, String> {
    let mut decoded = FrameBody {
        first_seq: 0,
        commits: Vec::new(),
        events: Vec::new(),
    };
    decode_frame_body_into(body, &mut decoded)?;
    Ok(decoded)
}

/// [`decode_frame_body`] into a body decoded before, reusing its vectors: a reader that walks
/// many frames allocates for none but the largest.
pub fn decode_frame_body_into(body: &[u8], decoded: &mut FrameBody) -> Result<(), String> {
    decoded.commits.clear();
    decoded.events.clear();
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
    let commits = &mut decoded.commits;
    commits.reserve(commit_count);
    let mut counted = 0usize;
    for _ in 0..commit_count {
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
    if r.pos != body.len() {
        return Err(format!("{} bytes after the last event", body.len() - r.pos));
    }
    decoded.first_seq = first_seq;
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
        assert_eq!(decode_segment_header(&seg), Ok(99));
        let mut bad = seg;
        bad[17] ^= 1;
        assert!(decode_segment_header(&bad).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_frame_body(&bytes);
            let _ = decode_segment_header(&bytes);
            if bytes.len() >= 16 {
                let mut h = [0u8; 16];
                h.copy_from_slice(&bytes[..16]);
                let _ = decode_frame_header(&h);
            }
        }
    }
}
