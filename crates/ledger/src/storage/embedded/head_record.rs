//! The head record: how many events the log had when the last append was acknowledged.
//!
//! A log that ends cleanly at a frame boundary looks the same whether its last frame was torn
//! by a crash before it was acknowledged or removed later by someone or something. The head
//! record tells the two apart: after every group commit's `fdatasync`, and before any caller is
//! answered, the writer records the new head here with one `pwrite` (no sync of its own). A
//! process that dies leaves the record in the page cache, so after any crash of the process the
//! record covers every acknowledged event, and a log shorter than it has lost acknowledged
//! events. The record is synced in the background (at most [`HEAD_SYNC_EVERY_MS`] after it
//! changed) and when the ledger closes, so after a power loss it lags the acknowledgements by
//! at most that long. It also records how long the checkpoint log was, so that checkpoints cut
//! from its end are found too.
//!
//! The file holds two slots of [`SLOT_LEN`] bytes, written in turn, so a write torn by a power
//! loss leaves the other slot intact. A slot, little-endian:
//!
//! ```text
//! 0   8  magic "RLHEAD01"
//! 8   8  generation: one more than the slot written before
//! 16  8  events acknowledged (the next seq)
//! 24 32  hash of the last event (zero when there is none)
//! 56  8  bytes of the checkpoint log counted
//! 64  4  crc32 of bytes 0..64
//! 68 60  zero
//! ```

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::durable::sync_dir;
use crate::envelope::Digest;
use crate::storage::StorageError;

/// Length of one slot.
const SLOT_LEN: usize = 128;
const MAGIC: &[u8; 8] = b"RLHEAD01";
/// How long after a change the background sync makes the record durable, at most.
pub(super) const HEAD_SYNC_EVERY_MS: u64 = 100;

/// What the head record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct HeadRecord {
    /// Events acknowledged: the log held at least this many.
    pub(super) next_seq: u64,
    /// The hash of event `next_seq - 1`.
    pub(super) last_hash: Digest,
    /// Bytes of the checkpoint log it counted.
    pub(super) checkpoint_log_bytes: u64,
}

fn encode(generation: u64, record: &HeadRecord) -> [u8; SLOT_LEN] {
    let mut slot = [0u8; SLOT_LEN];
    slot[0..8].copy_from_slice(MAGIC);
    slot[8..16].copy_from_slice(&generation.to_le_bytes());
    slot[16..24].copy_from_slice(&record.next_seq.to_le_bytes());
    slot[24..56].copy_from_slice(&record.last_hash.0);
    slot[56..64].copy_from_slice(&record.checkpoint_log_bytes.to_le_bytes());
    let crc = crc32fast::hash(&slot[0..64]);
    slot[64..68].copy_from_slice(&crc.to_le_bytes());
    slot
}

fn decode(slot: &[u8]) -> Option<(u64, HeadRecord)> {
    if slot.len() < 68 || &slot[0..8] != MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(slot[64..68].try_into().ok()?);
    if crc32fast::hash(&slot[0..64]) != crc {
        return None;
    }
    let u64_at = |at: usize| slot[at..at + 8].try_into().ok().map(u64::from_le_bytes);
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&slot[24..56]);
    Some((
        u64_at(8)?,
        HeadRecord {
            next_seq: u64_at(16)?,
            last_hash: Digest(hash),
            checkpoint_log_bytes: u64_at(56)?,
        },
    ))
}

/// What reading the head record found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HeadFound {
    /// No file: a ledger made before the record existed, or a new one.
    Missing,
    /// A file with no intact slot.
    Unreadable,
    /// The newest intact slot.
    Record { generation: u64, record: HeadRecord },
}

/// Reads the head record without writing anything.
pub(super) fn read(path: &Path) -> Result<HeadFound, StorageError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HeadFound::Missing),
        Err(e) => return Err(StorageError::io("read head record", path, e)),
    };
    let newest = bytes
        .chunks(SLOT_LEN)
        .take(2)
        .filter_map(decode)
        .max_by_key(|(generation, _)| *generation);
    Ok(match newest {
        Some((generation, record)) => HeadFound::Record { generation, record },
        None => HeadFound::Unreadable,
    })
}

/// The head record, open for writing.
#[derive(Debug)]
pub(super) struct HeadFile {
    path: PathBuf,
    file: File,
    generation: u64,
    record: HeadRecord,
}

impl HeadFile {
    /// Opens (creating) the file and writes `record` into it, synced, so that from now on it
    /// is there to be updated.
    pub(super) fn create_or_open(
        path: &Path,
        found: &HeadFound,
        record: HeadRecord,
    ) -> Result<HeadFile, StorageError> {
        let created = !path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StorageError::io("open head record", path, e))?;
        let generation = match found {
            HeadFound::Record { generation, .. } => *generation,
            _ => 0,
        };
        let mut head = HeadFile {
            path: path.to_owned(),
            file,
            generation,
            record,
        };
        head.write(record)?;
        head.sync()?;
        if created && let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(head)
    }

    /// What the record says now.
    pub(super) fn record(&self) -> HeadRecord {
        self.record
    }

    /// Records a new head in the next slot, with one `pwrite` and no sync.
    pub(super) fn write(&mut self, record: HeadRecord) -> Result<(), StorageError> {
        let generation = self.generation + 1;
        let slot = encode(generation, &record);
        self.file
            .write_all_at(&slot, (generation % 2) * SLOT_LEN as u64)
            .map_err(|e| StorageError::io("write head record", &self.path, e))?;
        self.generation = generation;
        self.record = record;
        Ok(())
    }

    /// Makes what was written durable.
    pub(super) fn sync(&self) -> Result<(), StorageError> {
        self.file
            .sync_data()
            .map_err(|e| StorageError::io("sync head record", &self.path, e))
    }

    /// A second handle on the file, to sync it from another thread without the writer's lock.
    pub(super) fn sync_handle(&self) -> Result<(PathBuf, File), StorageError> {
        self.file
            .try_clone()
            .map(|file| (self.path.clone(), file))
            .map_err(|e| StorageError::io("open head record", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> HeadRecord {
        HeadRecord {
            next_seq: n,
            last_hash: Digest([n as u8; 32]),
            checkpoint_log_bytes: 10 * n,
        }
    }

    #[test]
    fn the_newest_intact_slot_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("head");
        assert_eq!(read(&path).unwrap(), HeadFound::Missing);
        let mut head = HeadFile::create_or_open(&path, &HeadFound::Missing, record(0)).unwrap();
        for n in 1..=5 {
            head.write(record(n)).unwrap();
        }
        let HeadFound::Record {
            generation,
            record: r,
        } = read(&path).unwrap()
        else {
            panic!("no record");
        };
        assert_eq!((generation, r), (6, record(5)));

        // A torn write of the newest slot (generation 6 is even: the first slot) leaves the
        // one before it.
        let mut bytes = std::fs::read(&path).unwrap();
        let newest = 0;
        bytes[newest + 20] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read(&path).unwrap(),
            HeadFound::Record { generation: 5, record: r } if r == record(4)
        ));

        // Reopening goes on from the newest generation found.
        let found = read(&path).unwrap();
        let mut head = HeadFile::create_or_open(&path, &found, record(4)).unwrap();
        head.write(record(7)).unwrap();
        assert!(matches!(
            read(&path).unwrap(),
            HeadFound::Record { record: r, .. } if r == record(7)
        ));

        std::fs::write(&path, [0u8; 256]).unwrap();
        assert_eq!(read(&path).unwrap(), HeadFound::Unreadable);
    }
}
