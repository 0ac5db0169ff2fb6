//! The write path of the embedded backend: a group commit's frame — its events, and the content
//! blobs they cite that the log does not already hold intact — is checked, written and synced
//! with one `write` and one `fdatasync`, the head record covers it, and its index writes go to
//! the indexer; the checkpoint log's lines are made durable one by one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;

use super::head_record::HeadRecord;
use super::index::{ContentLocation, IndexBatch, IndexedEvent, Location, Tail};
use super::indexer::IndexJob;
use super::{EmbeddedStorage, Segment, segment_path};
use crate::durable::sync_dir;
use crate::envelope::Digest;
use crate::storage::frame::{
    self, ContentEntry, FRAME_HEADER_LEN, FrameCommit, FrameKind, SEGMENT_HEADER_LEN,
    SEGMENT_VERSION,
};
use crate::storage::{
    Blob, ChainHead, CheckpointEntry, Commit, Storage, StorageError, TreeGrowth, content_hash,
};

#[derive(Debug)]
pub(super) struct Writer {
    /// First seq of the segment being written.
    pub(super) segment: u64,
    /// Where the next frame goes in it.
    pub(super) end: u64,
    /// Frames in the active segment; a segment is never left empty by a roll-over.
    pub(super) frames_in_segment: u64,
    /// Set by a failed write or sync: the file's state is then unknown, so nothing more is
    /// written until the ledger is reopened and recovery has looked at the tail.
    pub(super) failed: Option<String>,
    /// The version of every stream this backend wrote to or looked up since it opened, as its
    /// log holds it: the check of each commit's base version before a frame is written asks
    /// this, not the index, which may still be catching up. A stream missing here was never
    /// written since the backend opened, so the index holds all of it.
    pub(super) versions: HashMap<String, u64>,
    /// Where each durable frame's index writes go: the indexer thread.
    pub(super) queue: Option<SyncSender<IndexJob>>,
    /// Frames handed to the indexer since the backend opened.
    pub(super) jobs: u64,
}

impl Writer {
    /// The writer of an empty log, before recovery sets it where the log ends.
    pub(super) fn at_start() -> Writer {
        Writer {
            segment: 0,
            end: SEGMENT_HEADER_LEN,
            frames_in_segment: 0,
            failed: None,
            versions: HashMap::new(),
            queue: None,
            jobs: 0,
        }
    }
}

/// A frame encoded: header, body and content bytes in one buffer, as one `write` puts them.
struct Encoded {
    bytes: Vec<u8>,
    /// Where each event's stored bytes start in the body.
    offsets: Vec<usize>,
    /// Where the content bytes start in `bytes`.
    content_at: u64,
}

impl EmbeddedStorage {
    /// Starts a new segment at `first_seq`: header written and synced, directory entry synced,
    /// before any frame goes into it.
    pub(super) fn roll_segment(
        &self,
        writer: &mut Writer,
        first_seq: u64,
    ) -> Result<(), StorageError> {
        let path = segment_path(&self.log_dir, first_seq);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| StorageError::io("create segment", &path, e))?;
        file.write_all_at(&frame::encode_segment_header(first_seq), 0)
            .and_then(|()| file.sync_all())
            .map_err(|e| StorageError::io("write segment header", &path, e))?;
        sync_dir(&self.log_dir)?;
        self.syncs.fetch_add(2, Ordering::Relaxed);
        self.segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                first_seq,
                Arc::new(Segment {
                    first_seq,
                    version: SEGMENT_VERSION,
                    path,
                    file,
                }),
            );
        writer.segment = first_seq;
        writer.end = SEGMENT_HEADER_LEN;
        writer.frames_in_segment = 0;
        Ok(())
    }

    /// Rewrites the header of the active segment, which holds no frame yet, as one of the
    /// current version, so that content frames may go into it.
    fn upgrade_empty_segment(&self, writer: &Writer) -> Result<(), StorageError> {
        let segments = self.segments_snapshot();
        let seg = segments
            .get(&writer.segment)
            .ok_or_else(|| StorageError::Failed("the active segment is not open".into()))?;
        seg.file
            .write_all_at(&frame::encode_segment_header(seg.first_seq), 0)
            .and_then(|()| seg.file.sync_data())
            .map_err(|e| StorageError::io("write segment header", &seg.path, e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let upgraded = Segment {
            first_seq: seg.first_seq,
            version: SEGMENT_VERSION,
            path: seg.path.clone(),
            file: seg
                .file
                .try_clone()
                .map_err(|e| StorageError::io("open segment", &seg.path, e))?,
        };
        self.segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seg.first_seq, Arc::new(upgraded));
        Ok(())
    }

    /// The segment a frame of `len` bytes starting at `first_seq` goes into: a new one when it
    /// would take the active one past `segment_bytes_max`, or when it carries content and the
    /// active one is of the first format (so that an older build refuses the log as too new,
    /// rather than calling it damaged). Segments are named by their first seq, and a frame of
    /// content alone moves no seq: one is started only at a seq above the active one's.
    fn segment_for(
        &self,
        writer: &mut Writer,
        first_seq: u64,
        len: u64,
        content: bool,
    ) -> Result<Arc<Segment>, StorageError> {
        if self.segments_snapshot().is_empty() {
            self.roll_segment(writer, 0)?;
        }
        let active = self
            .segments_snapshot()
            .get(&writer.segment)
            .map(|s| s.version)
            .ok_or_else(|| StorageError::Failed("the active segment is not open".into()))?;
        let full = writer.end + len > self.segment_bytes_max;
        let old = content && active < SEGMENT_VERSION;
        if writer.frames_in_segment > 0 && (full || old) && first_seq > writer.segment {
            self.roll_segment(writer, first_seq)?;
        } else if old && writer.frames_in_segment == 0 {
            self.upgrade_empty_segment(writer)?;
        } else if old {
            return Err(StorageError::Failed(format!(
                "segment {:020} is of the first format and cannot be followed at seq {first_seq}",
                writer.segment
            )));
        }
        self.segments_snapshot()
            .get(&writer.segment)
            .cloned()
            .ok_or_else(|| StorageError::Failed("the active segment is not open".into()))
    }

    /// The blobs of `content` the frame must carry: each once, and none the log already holds
    /// intact. A blob held damaged (or that cannot be read back) is written again, so that a
    /// later write of the right bytes repairs it.
    fn fresh_content<'b>(&self, content: &'b [Blob]) -> Vec<&'b Blob> {
        let mut seen = HashSet::new();
        content
            .iter()
            .filter(|blob| seen.insert(blob.hash))
            .filter(|blob| {
                !matches!(self.read_blob(&blob.hash), Ok(Some(bytes)) if content_hash(&bytes) == blob.hash)
            })
            .collect()
    }

    pub(super) fn write_frame(
        &self,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        // A panic while the writer was held left the log's end in an unknown state, as a
        // failed write does: nothing more is written (fail closed, not on).
        let mut writer = match self.writer.lock() {
            Ok(writer) => writer,
            Err(poisoned) => {
                let mut writer = poisoned.into_inner();
                let reason = writer.failed.get_or_insert_with(|| {
                    "a write panicked while it held the log's writer; what it left is unknown, so nothing more is written".into()
                });
                return Err(StorageError::Failed(reason.clone()));
            }
        };
        if let Some(reason) = &writer.failed {
            return Err(StorageError::Failed(reason.clone()));
        }
        // Nothing is written past an index that stopped following the log.
        if let Some(reason) = self.index_failure() {
            return Err(StorageError::Index(reason));
        }
        // A new frame would overwrite a torn write that is not yet recorded and kept aside.
        if let Some(cut) = &*self.pending_cut.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(StorageError::Failed(format!(
                "a torn write of {} bytes at the end of the log awaits its cut",
                cut.bytes
            )));
        }
        let result = self.write_frame_locked(&mut writer, commits, content, tree);
        if let Err(e) = &result {
            writer.failed = Some(e.to_string());
        }
        result
    }

    pub(super) fn write_frame_locked(
        &self,
        writer: &mut Writer,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        let head = self.head();
        let fresh = self.fresh_content(content);
        let first_event = commits.iter().find_map(|c| c.events.first());
        if first_event.is_none() && fresh.is_empty() {
            return Ok(());
        }
        let first_seq = first_event.map_or(head.size, |e| e.seq);
        let (expected, versions) = self.check_links(writer, commits, &head)?;
        let encoded = encode_frame(first_seq, commits, &fresh)?;
        let frame_len = encoded.bytes.len() as u64;
        let seg = self.segment_for(writer, first_seq, frame_len, !fresh.is_empty())?;
        seg.file
            .write_all_at(&encoded.bytes, writer.end)
            .map_err(|e| StorageError::io("write frame", &seg.path, e))?;
        seg.file
            .sync_data()
            .map_err(|e| StorageError::io("sync segment", &seg.path, e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let frame_offset = writer.end;
        writer.end += frame_len;
        writer.frames_in_segment += 1;
        let last_hash = commits
            .iter()
            .flat_map(|c| c.events.last())
            .last()
            .map_or(head.last_hash, |e| e.hash);
        self.record_head(expected, last_hash)?;
        for (stream, version) in versions {
            match writer.versions.get_mut(stream) {
                Some(v) => *v = version,
                None => {
                    writer.versions.insert(stream.to_owned(), version);
                }
            }
        }

        // Durable. Now index it; a crash from here on is repaired by the next open's catch-up.
        let mut batch = index_batch(commits, seg.first_seq, frame_offset, &encoded.offsets);
        let placed = place_content(&fresh, seg.first_seq, frame_offset + encoded.content_at);
        for (hash, loc) in &placed {
            batch.content(hash, loc);
        }
        batch.merkle(&tree.nodes, tree.size);
        let tail = Tail {
            next_seq: expected,
            last_hash,
            segment: seg.first_seq,
            offset: writer.end,
        };
        self.hand_to_indexer(writer, batch, tail, placed)
    }

    /// Before anyone is told the append succeeded: the head record covers it, so a log found
    /// shorter at the next open is known to have lost it.
    fn record_head(&self, next_seq: u64, last_hash: Digest) -> Result<(), StorageError> {
        if let Some(head_file) = &mut *self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            let record = HeadRecord {
                next_seq,
                last_hash,
                ..head_file.record()
            };
            head_file.write(record)?;
        }
        Ok(())
    }

    /// Checks the links of `commits` once more before they become permanent: seqs, chain and
    /// versions. Returns the seq after them and each stream's version after them.
    fn check_links<'c>(
        &self,
        writer: &Writer,
        commits: &'c [Commit],
        head: &ChainHead,
    ) -> Result<(u64, BTreeMap<&'c str, u64>), StorageError> {
        let mut expected = head.size;
        let mut prev = head.last_hash;
        let mut versions: BTreeMap<&str, u64> = BTreeMap::new();
        for commit in commits {
            let mut version = match versions.get(commit.stream.as_str()) {
                Some(v) => *v,
                None => match writer.versions.get(&commit.stream) {
                    Some(v) => *v,
                    None => self.indexed_version(&commit.stream, head.size)?,
                },
            };
            let broken = |seq: u64, detail: String| StorageError::Corrupt {
                seq: Some(seq),
                detail,
            };
            if version != commit.base_version {
                return Err(broken(
                    expected,
                    format!(
                        "append to {} at version {} when it is at {version}",
                        commit.stream, commit.base_version
                    ),
                ));
            }
            for event in &commit.events {
                if event.seq != expected || event.prev_hash != prev {
                    return Err(broken(
                        event.seq,
                        format!(
                            "append of seq {} does not continue the chain at {expected}",
                            event.seq
                        ),
                    ));
                }
                if event.stream_version != version + 1 {
                    return Err(broken(
                        event.seq,
                        format!(
                            "stream version {} does not follow {version}",
                            event.stream_version
                        ),
                    ));
                }
                version = event.stream_version;
                prev = event.hash;
                expected += 1;
            }
            versions.insert(&commit.stream, version);
        }
        Ok((expected, versions))
    }

    /// The frame is durable: the append is, and can be acknowledged. The index follows on the
    /// indexer thread; a read that needs it waits until it covers this head, and the frame's
    /// blobs are found in `content_pending` until it covers the frame.
    fn hand_to_indexer(
        &self,
        writer: &mut Writer,
        batch: IndexBatch,
        tail: Tail,
        placed: Vec<(Digest, ContentLocation)>,
    ) -> Result<(), StorageError> {
        writer.jobs += 1;
        let job = writer.jobs;
        {
            let indexed = self.progress.lock().jobs;
            let mut pending = self
                .content_pending
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            pending.retain(|_, (_, frame)| *frame > indexed);
            for (hash, loc) in placed {
                pending.insert(hash, (loc, job));
            }
        }
        *self.head.write().unwrap_or_else(|p| p.into_inner()) = ChainHead {
            size: tail.next_seq,
            last_hash: tail.last_hash,
        };
        let queue = writer
            .queue
            .as_ref()
            .ok_or_else(|| StorageError::Failed("the indexer has stopped".into()))?;
        queue
            .send(IndexJob { batch, tail, job })
            .map_err(|_| match self.index_failure() {
                Some(reason) => StorageError::Index(reason),
                None => StorageError::Failed("the indexer has stopped".into()),
            })
    }

    /// Appends one entry to the checkpoint log: the line synced (and the directory, when the
    /// file is new) before it counts, then the head record's count of the log's bytes.
    pub(super) fn append_checkpoint_line(
        &self,
        entry: &CheckpointEntry,
    ) -> Result<(), StorageError> {
        let mut log = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        let mut line = serde_json::to_vec(entry)
            .map_err(|e| StorageError::Index(format!("checkpoint entry: {e}")))?;
        line.push(b'\n');
        let created = !log.path.exists();
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log.path)
            .map_err(|e| StorageError::io("open", &log.path, e))?;
        // Where the line goes: the file's end, which is past the entries counted when an open
        // found a line that does not parse (and writes then are only statements of recovery).
        let offset = file
            .metadata()
            .map_err(|e| StorageError::io("read the length of", &log.path, e))?
            .len();
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|e| StorageError::io("write checkpoint", &log.path, e))?;
        if created && let Some(dir) = log.path.parent() {
            sync_dir(dir)?;
        }
        log.spans.push((offset, line.len() as u64));
        log.last = Some(entry.clone());
        log.bytes += line.len() as u64;
        if let Some(head_file) = &mut *self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            let record = HeadRecord {
                checkpoint_log_bytes: log.bytes,
                ..head_file.record()
            };
            head_file.write(record)?;
            head_file.sync()?;
        }
        Ok(())
    }
}

/// The frame of `commits` and `content`: header, body, then the content's bytes outside the
/// body (a frame without content is the format's first frame, byte for byte).
fn encode_frame(
    first_seq: u64,
    commits: &[Commit],
    content: &[&Blob],
) -> Result<Encoded, StorageError> {
    let frame_commits: Vec<FrameCommit> = commits
        .iter()
        .map(|c| FrameCommit {
            event_count: c.events.len() as u32,
            idempotency: c
                .idempotency
                .as_ref()
                .map(|r| (r.key.clone(), r.fingerprint)),
        })
        .collect();
    let events: Vec<&[u8]> = commits
        .iter()
        .flat_map(|c| c.events.iter().map(|e| &*e.bytes))
        .collect();
    let corrupt = |detail| StorageError::Corrupt {
        seq: Some(first_seq),
        detail,
    };
    let (kind, (body, offsets)) = if content.is_empty() {
        let body = frame::encode_frame_body(first_seq, &frame_commits, &events);
        (FrameKind::Events, body.map_err(corrupt)?)
    } else {
        let table = content
            .iter()
            .map(|b| {
                u32::try_from(b.bytes.len())
                    .map(|len| ContentEntry { hash: b.hash, len })
                    .map_err(|_| corrupt(format!("a blob of {} bytes", b.bytes.len())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let body = frame::encode_content_frame_body(first_seq, &frame_commits, &events, &table);
        (FrameKind::Content, body.map_err(corrupt)?)
    };
    let header = frame::encode_frame_header_of(kind, &body).map_err(corrupt)?;
    let content_len: usize = content.iter().map(|b| b.bytes.len()).sum();
    let mut bytes = Vec::with_capacity(FRAME_HEADER_LEN as usize + body.len() + content_len);
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(&body);
    let content_at = bytes.len() as u64;
    for blob in content {
        bytes.extend_from_slice(&blob.bytes);
    }
    Ok(Encoded {
        bytes,
        offsets,
        content_at,
    })
}

/// Where each blob of a frame lies once its content bytes start at `at` of `segment`.
fn place_content(content: &[&Blob], segment: u64, at: u64) -> Vec<(Digest, ContentLocation)> {
    let mut offset = at;
    content
        .iter()
        .map(|blob| {
            let loc = ContentLocation {
                segment,
                offset,
                len: blob.bytes.len() as u32,
            };
            offset += blob.bytes.len() as u64;
            (blob.hash, loc)
        })
        .collect()
}

/// The index writes of a durable frame at `frame_offset` of segment `segment`.
fn index_batch(
    commits: &[Commit],
    segment: u64,
    frame_offset: u64,
    offsets: &[usize],
) -> IndexBatch {
    let mut batch = IndexBatch::default();
    // A frame of content alone holds no seq: the by-seq index never points at it.
    if let Some(first) = commits.iter().find_map(|c| c.events.first()) {
        batch.frame(first.seq, segment, frame_offset);
    }
    let mut i = 0usize;
    for commit in commits {
        for event in &commit.events {
            batch.event(&IndexedEvent {
                loc: Location {
                    seq: event.seq,
                    segment,
                    offset: frame_offset + FRAME_HEADER_LEN + offsets[i] as u64,
                    len: event.bytes.len() as u32,
                },
                stream: &commit.stream,
                stream_version: event.stream_version,
                event_id: event.event_id,
                hash: event.hash,
            });
            i += 1;
        }
        if let Some(record) = &commit.idempotency {
            batch.key(record);
        }
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::super::EmbeddedOptions;
    use super::*;

    #[test]
    fn a_panic_while_the_writer_is_held_stops_every_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let storage = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _held = storage.writer.lock().unwrap();
            panic!("a bug while writing");
        }));
        assert!(panicked.is_err());
        let refused = storage.append(&[], &[], &TreeGrowth::default());
        assert!(
            matches!(&refused, Err(StorageError::Failed(reason)) if reason.contains("panicked")),
            "{refused:?}"
        );
        assert!(storage.failure().is_some_and(|r| r.contains("panicked")));
    }
}
