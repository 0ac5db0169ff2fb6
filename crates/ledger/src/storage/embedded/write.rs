//! The write path of the embedded backend: a group commit's frame is checked, written and
//! synced, the head record covers it, and its index writes go to the indexer; the checkpoint
//! log's lines are made durable one by one.

use std::collections::{BTreeMap, HashMap};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use super::head_record::HeadRecord;
use super::index::{IndexBatch, IndexedEvent, Location, Tail};
use super::indexer::IndexJob;
use super::{EmbeddedStorage, Segment, segment_path};
use crate::durable::sync_dir;
use crate::storage::frame::{self, FRAME_HEADER_LEN, FrameCommit, SEGMENT_HEADER_LEN};
use crate::storage::{ChainHead, CheckpointEntry, Commit, Storage, StorageError, TreeGrowth};

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
        self.segments
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                first_seq,
                Arc::new(Segment {
                    first_seq,
                    path,
                    file,
                }),
            );
        writer.segment = first_seq;
        writer.end = SEGMENT_HEADER_LEN;
        writer.frames_in_segment = 0;
        Ok(())
    }

    pub(super) fn write_frame(
        &self,
        commits: &[Commit],
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
        let result = self.write_frame_locked(&mut writer, commits, tree);
        if let Err(e) = &result {
            writer.failed = Some(e.to_string());
        }
        result
    }

    pub(super) fn write_frame_locked(
        &self,
        writer: &mut Writer,
        commits: &[Commit],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        let head = self.head();
        let Some(first_seq) = commits
            .first()
            .and_then(|c| c.events.first())
            .map(|e| e.seq)
        else {
            return Ok(());
        };
        let (expected, versions) = self.check_links(writer, commits, &head)?;
        let (bytes, offsets) = encode_frame(first_seq, commits)?;
        let frame_len = bytes.len() as u64;
        if self.segments_snapshot().is_empty() {
            self.roll_segment(writer, 0)?;
        } else if writer.frames_in_segment > 0 && writer.end + frame_len > self.segment_bytes_max {
            self.roll_segment(writer, first_seq)?;
        }
        let segments = self.segments_snapshot();
        let seg = segments
            .get(&writer.segment)
            .ok_or_else(|| StorageError::Failed("the active segment is not open".into()))?;
        seg.file
            .write_all_at(&bytes, writer.end)
            .map_err(|e| StorageError::io("write frame", &seg.path, e))?;
        seg.file
            .sync_data()
            .map_err(|e| StorageError::io("sync segment", &seg.path, e))?;
        let frame_offset = writer.end;
        writer.end += frame_len;
        writer.frames_in_segment += 1;
        let last_hash = commits
            .iter()
            .flat_map(|c| c.events.last())
            .last()
            .map(|e| e.hash)
            .unwrap_or(head.last_hash);
        // Before anyone is told the append succeeded: the head record covers it, so a log found
        // shorter at the next open is known to have lost it.
        if let Some(head_file) = &mut *self.head_file.lock().unwrap_or_else(|p| p.into_inner()) {
            let record = HeadRecord {
                next_seq: expected,
                last_hash,
                ..head_file.record()
            };
            head_file.write(record)?;
        }
        for (stream, version) in versions {
            match writer.versions.get_mut(stream) {
                Some(v) => *v = version,
                None => {
                    writer.versions.insert(stream.to_owned(), version);
                }
            }
        }

        // Durable. Now index it; a crash from here on is repaired by the next open's catch-up.
        let mut batch = index_batch(commits, seg.first_seq, frame_offset, &offsets);
        let tail = Tail {
            next_seq: expected,
            last_hash,
            segment: seg.first_seq,
            offset: writer.end,
        };
        batch.merkle(&tree.nodes, tree.size);
        self.hand_to_indexer(writer, batch, tail)
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
    /// indexer thread; a read that needs it waits until it covers this head.
    fn hand_to_indexer(
        &self,
        writer: &Writer,
        batch: IndexBatch,
        tail: Tail,
    ) -> Result<(), StorageError> {
        *self.head.write().unwrap_or_else(|p| p.into_inner()) = ChainHead {
            size: tail.next_seq,
            last_hash: tail.last_hash,
        };
        let queue = writer
            .queue
            .as_ref()
            .ok_or_else(|| StorageError::Failed("the indexer has stopped".into()))?;
        queue
            .send(IndexJob { batch, tail })
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
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|e| StorageError::io("write checkpoint", &log.path, e))?;
        if created && let Some(dir) = log.path.parent() {
            sync_dir(dir)?;
        }
        log.entries.push(entry.clone());
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

/// The frame of `commits`, header and body, and where each event starts in the body.
fn encode_frame(first_seq: u64, commits: &[Commit]) -> Result<(Vec<u8>, Vec<usize>), StorageError> {
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
    let (body, offsets) =
        frame::encode_frame_body(first_seq, &frame_commits, &events).map_err(corrupt)?;
    let header = frame::encode_frame_header(&body).map_err(corrupt)?;
    let mut bytes = Vec::with_capacity(FRAME_HEADER_LEN as usize + body.len());
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(&body);
    Ok((bytes, offsets))
}

/// The index writes of a durable frame at `frame_offset` of segment `segment`.
fn index_batch(
    commits: &[Commit],
    segment: u64,
    frame_offset: u64,
    offsets: &[usize],
) -> IndexBatch {
    let mut batch = IndexBatch::default();
    batch.frame(
        commits
            .first()
            .and_then(|c| c.events.first())
            .map_or(0, |e| e.seq),
        segment,
        frame_offset,
    );
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
        let refused = storage.append(&[], &TreeGrowth::default());
        assert!(
            matches!(&refused, Err(StorageError::Failed(reason)) if reason.contains("panicked")),
            "{refused:?}"
        );
        assert!(storage.failure().is_some_and(|r| r.contains("panicked")));
    }
}
