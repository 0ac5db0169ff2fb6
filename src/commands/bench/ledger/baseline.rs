//! Baselines: what the same disk and the same core do with no ledger in the way.
//!
//! - Raw file appends ([`FileSync`]): records of the stored event's size appended to one file
//!   with one `write` and one `fdatasync` per group, exactly the system calls a frame of the
//!   ledger's log costs. Nothing durable on this disk can be cheaper, so it is the floor under
//!   durable appends.
//! - Raw sled inserts made durable with the same number of syncs as the ledger's appends took.
//!   sled 0.34's `flush()` ends in `sync_file_range`, which neither writes the file's metadata
//!   nor flushes the device cache, so on its own it is not durable. A durable sled needs, after
//!   each flush, an `fsync` of its `db` file, of any `snap.*` file and of the files in `blobs/`,
//!   and of the `blobs/` folder and the database directory: that is what [`SledSync`] does, so
//!   that the baseline pays for the same durability as an acknowledged append.
//! - Raw blake3 on messages the size of an event payload, on one core: every event costs at
//!   least one such hash to verify, so this bounds what replay and verification can reach.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::workload::Rng;
use crate::commands::bench::stats::rate;

/// A sled database opened for the baseline, and the handles its durable sync needs.
#[derive(Debug)]
pub(super) struct SledSync {
    dir: PathBuf,
    db: sled::Db,
    db_file: File,
    dir_file: File,
    /// The key of the next insert: keys ascend across calls, as seqs do.
    next_key: u64,
}

impl SledSync {
    /// Opens a new database in `dir`. The background flusher is off, so that every sync the
    /// baseline pays for is one it asked for.
    pub(super) fn open(dir: &Path) -> anyhow::Result<SledSync> {
        let db = sled::Config::new()
            .path(dir)
            .flush_every_ms(None)
            .open()
            .with_context(|| format!("cannot open sled in {}", dir.display()))?;
        let db_path = dir.join("db");
        let db_file =
            File::open(&db_path).with_context(|| format!("cannot open {}", db_path.display()))?;
        let dir_file = File::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        Ok(SledSync {
            dir: dir.to_owned(),
            db,
            db_file,
            dir_file,
            next_key: 0,
        })
    }

    /// Makes everything inserted so far durable: sled's flush, then `fsync` of every file and
    /// folder it may have written.
    fn sync(&self) -> anyhow::Result<()> {
        self.db.flush().context("sled flush")?;
        self.db_file.sync_all().context("fsync of sled's db file")?;
        // Snapshots and blobs appear as sled decides (a snapshot every million operations, a
        // blob for a large value); they are looked for at every sync, as a durable sled must.
        for entry in std::fs::read_dir(&self.dir).context("list sled's directory")? {
            let path = entry.context("list sled's directory")?.path();
            let is_snapshot = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap."));
            if is_snapshot {
                sync_path(&path)?;
            }
        }
        let blobs = self.dir.join("blobs");
        if blobs.is_dir() {
            for entry in std::fs::read_dir(&blobs).context("list sled's blobs")? {
                sync_path(&entry.context("list sled's blobs")?.path())?;
            }
            sync_path(&blobs)?;
        }
        self.dir_file
            .sync_all()
            .context("fsync of sled's directory")?;
        Ok(())
    }

    /// Inserts `batches.len()` groups of values, `batches[i]` values in group `i`, each group
    /// one atomic batch (a plain insert for a group of one) followed by one durable sync. Gives
    /// the time it took.
    pub(super) fn insert_grouped(
        &mut self,
        batches: &[u64],
        value_bytes: usize,
        rng: &mut Rng,
    ) -> anyhow::Result<Duration> {
        let mut key = self.next_key;
        let mut timed = Duration::ZERO;
        for &n in batches {
            // Values are made off the clock: generating them is not sled's work.
            let values: Vec<Vec<u8>> = (0..n).map(|_| rng.bytes(value_bytes)).collect();
            let started = Instant::now();
            if let [value] = &values[..] {
                self.db
                    .insert(key.to_be_bytes(), &value[..])
                    .context("sled insert")?;
                key += 1;
            } else {
                let mut batch = sled::Batch::default();
                for value in values {
                    batch.insert(&key.to_be_bytes(), value);
                    key += 1;
                }
                self.db.apply_batch(batch).context("sled insert")?;
            }
            self.sync()?;
            timed += started.elapsed();
        }
        self.next_key = key;
        Ok(timed)
    }
}

/// A file that grows by appended records, each group made durable as the log's frames are.
#[derive(Debug)]
pub(super) struct FileSync {
    path: PathBuf,
    file: File,
}

impl FileSync {
    /// Creates `path` (which must not exist) and makes its directory entry durable, as the log
    /// does for a new segment.
    pub(super) fn create(path: &Path) -> anyhow::Result<FileSync> {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        if let Some(dir) = path.parent() {
            sync_path(dir)?;
        }
        Ok(FileSync {
            path: path.to_owned(),
            file,
        })
    }

    /// Appends `batches.len()` groups of records, `batches[i]` records of `record_bytes` each in
    /// group `i`, each group with one `write` and one `fdatasync`. Gives the time it took.
    pub(super) fn append_grouped(
        &mut self,
        batches: &[u64],
        record_bytes: usize,
        rng: &mut Rng,
    ) -> anyhow::Result<Duration> {
        let mut timed = Duration::ZERO;
        for &n in batches {
            // Made off the clock, as the ledger's frame is encoded before its write.
            let group = rng.bytes(record_bytes * n as usize);
            let started = Instant::now();
            self.file
                .write_all(&group)
                .and_then(|()| self.file.sync_data())
                .with_context(|| format!("cannot append to {}", self.path.display()))?;
            timed += started.elapsed();
        }
        Ok(timed)
    }
}

fn sync_path(path: &Path) -> anyhow::Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("fsync of {}", path.display()))
}

/// Hashes per second of blake3 over `message_bytes`-byte messages on this thread, measured for
/// at least `at_least`.
pub(super) fn blake3_rate(message_bytes: usize, at_least: Duration) -> f64 {
    const BLOCK: u64 = 10_000;
    let mut message = Rng::new(3).bytes(message_bytes.max(8));
    message.truncate(message_bytes);
    let mut hashed = 0u64;
    let started = Instant::now();
    let mut elapsed = Duration::ZERO;
    while elapsed < at_least {
        for i in 0..BLOCK {
            // A different message each time, so that no hash can be reused or hoisted.
            let n = message.len().min(8);
            message[..n].copy_from_slice(&(hashed + i).to_le_bytes()[..n]);
            std::hint::black_box(blake3::hash(std::hint::black_box(&message)));
        }
        hashed += BLOCK;
        elapsed = started.elapsed();
    }
    rate(hashed, elapsed)
}

/// SHA-256 of distinct 65-byte messages (`0x01 ‖ left ‖ right`, an interior node of the tree)
/// on this thread, for `at_least`: what the tree costs per node, beside blake3's rate.
pub(super) fn sha256_node_rate(at_least: Duration) -> f64 {
    use sha2::Digest as _;
    const BLOCK: u64 = 10_000;
    let mut message = [1u8; 65];
    let mut hashed = 0u64;
    let started = Instant::now();
    let mut elapsed = Duration::ZERO;
    while elapsed < at_least {
        for i in 0..BLOCK {
            message[1..9].copy_from_slice(&(hashed + i).to_le_bytes());
            std::hint::black_box(sha2::Sha256::digest(std::hint::black_box(&message)));
        }
        hashed += BLOCK;
        elapsed = started.elapsed();
    }
    rate(hashed, elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_inserts_write_every_value_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut sled = SledSync::open(dir.path()).unwrap();
        let mut rng = Rng::new(1);
        sled.insert_grouped(&[1, 3], 50, &mut rng).unwrap();
        sled.insert_grouped(&[2], 50, &mut rng).unwrap();
        drop(sled);
        // sled's own threads let go of the file lock a moment after the last handle drops.
        let mut reopened = sled::open(dir.path());
        for _ in 0..100 {
            if reopened.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            reopened = sled::open(dir.path());
        }
        let db = reopened.unwrap();
        assert_eq!(db.len(), 6);
        assert_eq!(db.get(5u64.to_be_bytes()).unwrap().unwrap().len(), 50);
    }

    #[test]
    fn grouped_file_appends_write_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut file = FileSync::create(&path).unwrap();
        let mut rng = Rng::new(1);
        file.append_grouped(&[1, 3], 50, &mut rng).unwrap();
        file.append_grouped(&[2], 50, &mut rng).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 300);
        assert!(
            FileSync::create(&path).is_err(),
            "an existing file is never reused"
        );
    }

    #[test]
    fn blake3_runs_for_the_time_asked() {
        let started = Instant::now();
        let per_s = blake3_rate(300, Duration::from_millis(20));
        assert!(started.elapsed() >= Duration::from_millis(20));
        assert!(per_s.is_finite() && per_s > 0.0);
    }
}
