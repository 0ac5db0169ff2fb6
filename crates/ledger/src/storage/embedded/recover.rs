//! Opening the embedded backend: recovery from a crash, and the refusal to write when the log
//! holds less than a durable record says it held.
//!
//! Three durable records say how long the log was: the head record, written when each append is
//! acknowledged ([`super::head_record`]); the index's record of where the log ended when it was
//! last indexed; and the signed checkpoints, whose tree sizes the log reached. None of them is
//! ever lowered by opening the directory. At every open the log is compared with all three, and
//! a log shorter than any of them has lost acknowledged events: that is reported, and the
//! backend opens read-only, its index built in memory over the part of the log that checks out,
//! changing nothing on disk, at this open and every later one, until an operator accepts the
//! loss with a statement the ledger's key signs ([`Storage::accept_loss`]).
//!
//! A last frame that fails its checksum, with no intact frame after it and no record that it
//! was acknowledged, is a torn write: the ledger cuts it only after recording a signed statement
//! of the cut ([`Storage::cut_torn_tail`]). Any other damage is reported, and the backend
//! opens read-only over the part before it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use super::cursor::{defect_text, read_frame};
use super::head_record::{self, HeadFile, HeadFound, HeadRecord};
use super::scan::{Defect, Scan};
use super::{
    CHECKPOINT_LOG, CheckpointLog, EmbeddedOptions, EmbeddedStorage, Index, IndexProgress,
    MerkleCache, Segment, Tail, Writer, create_dir_durable, sync_dir,
};
use crate::envelope::Digest;
use crate::storage::frame::{self, FRAME_HEADER_LEN, SEGMENT_HEADER_LEN, SegmentHeader};
use crate::storage::{
    CheckpointEntry, PendingCut, Storage, StorageError, StorageProblem, signed_claim,
};

/// The head record's file, in the ledger's directory.
const HEAD_RECORD: &str = "head";

impl Tail {
    /// The start of an empty log.
    fn start() -> Tail {
        Tail {
            next_seq: 0,
            last_hash: Digest::ZERO,
            segment: 0,
            offset: SEGMENT_HEADER_LEN,
        }
    }
}

impl EmbeddedStorage {
    /// Opens the backend in `dir`, creating it if needed (unless `options.read_only`), and
    /// recovers from a crash. What it finds wrong is reported by [`Storage::problems`]; with
    /// any problem, or when asked to open read-only, nothing in `dir` is changed and every
    /// append is refused.
    pub fn open(dir: &Path, options: EmbeddedOptions) -> Result<EmbeddedStorage, StorageError> {
        let read_only = options.read_only;
        let log_dir = dir.join("log");
        let recovered_dir = dir.join("recovered");
        // A read-only open of a directory that holds no ledger reads an empty one, and creates
        // nothing.
        let lock = if read_only {
            take_shared_lock(dir)?
        } else {
            create_dir_durable(dir)?;
            let lock = take_lock(dir, &options.lock_note)?;
            create_dir_durable(&log_dir)?;
            create_dir_durable(&recovered_dir)?;
            Some(lock)
        };
        let index = if read_only {
            Index::memory()
        } else {
            Index::open(&dir.join("index"))?
        };
        let head_path = dir.join(HEAD_RECORD);
        let head_found = head_record::read(&head_path)?;
        let mut storage = EmbeddedStorage {
            log_dir,
            recovered_dir,
            _lock: lock,
            index,
            set_aside: None,
            opened_read_only: read_only,
            read_only,
            head_file: Mutex::new(None),
            pending_cut: Mutex::new(None),
            headless_segment: None,
            kept: Tail::start(),
            claimed: 0,
            segments: RwLock::new(std::collections::BTreeMap::new()),
            writer: Mutex::new(Writer::at_start()),
            head: RwLock::new(crate::storage::ChainHead::default()),
            problems: Vec::new(),
            recoveries: Vec::new(),
            segment_bytes_max: options
                .segment_bytes_max
                .max(crate::limits::SEGMENT_BYTES_MIN),
            checkpoints: Mutex::new(CheckpointLog::new(dir.join(CHECKPOINT_LOG))),
            progress: Arc::new(IndexProgress::default()),
            merkle_cache: Mutex::new(MerkleCache::default()),
            indexer: Mutex::new(None),
            content_pending: Mutex::new(std::collections::HashMap::new()),
            syncs: std::sync::atomic::AtomicU64::new(0),
        };
        storage.load_segments()?;
        storage.recover(&head_found)?;
        storage.settle_headless_segment()?;
        if storage.read_only {
            storage.refuse_writes();
        } else {
            storage.start_writing(&head_path, &head_found)?;
        }
        Ok(storage)
    }

    /// After an open that found a problem or was asked to be read-only: every append is refused,
    /// saying why, and nothing is left to index.
    fn refuse_writes(&mut self) {
        let reason = match self.problems.first() {
            None => "the ledger was opened read-only".to_owned(),
            Some(problem) => format!(
                "the ledger opened read-only because it found a problem{}: {}",
                problem
                    .seq
                    .map(|s| format!(" at seq {s}"))
                    .unwrap_or_default(),
                problem.detail
            ),
        };
        self.writer.lock().unwrap_or_else(|p| p.into_inner()).failed = Some(reason);
        self.progress.lock().indexed = self.head().size;
    }

    /// After an open that found nothing wrong (so the log reaches every durable record of its
    /// length): the head record is written at the recovered head, and the indexer starts.
    fn start_writing(
        &mut self,
        head_path: &Path,
        head_found: &HeadFound,
    ) -> Result<(), StorageError> {
        let head = self.head();
        let record = HeadRecord {
            next_seq: head.size,
            last_hash: head.last_hash,
            checkpoint_log_bytes: self
                .checkpoints
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .bytes,
        };
        let file = HeadFile::create_or_open(head_path, head_found, record)?;
        *self.head_file.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        self.start_indexer()
    }

    /// What recovery did when the backend opened (torn tails cut), for the operator's log.
    pub fn recoveries(&self) -> &[String] {
        &self.recoveries
    }

    /// A last segment with no complete header, once the recovery knows whether anything was
    /// lost. With nothing lost it is what a roll-over that crashed before any frame went into it
    /// leaves, and a writable open moves it to `recovered/`; with a loss it may be what is left
    /// of acknowledged frames, and it stays where it is, like everything else in the directory.
    fn settle_headless_segment(&mut self) -> Result<(), StorageError> {
        let Some(path) = self.headless_segment.take() else {
            return Ok(());
        };
        let shown = path.display();
        if !self.problems.is_empty() {
            self.recoveries.push(format!(
                "segment {shown} has no complete header; the ledger found a problem, so it is left as it is"
            ));
            return Ok(());
        }
        if self.opened_read_only {
            self.recoveries.push(format!(
                "segment {shown} has no complete header (a roll-over that crashed before any frame went into it); a writable open moves it to recovered/"
            ));
            return Ok(());
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let kept = self
            .recovered_dir
            .join(format!("{}.headless", name.unwrap_or_default()));
        fs::rename(&path, &kept)
            .map_err(|e| StorageError::io("move headless segment", &path, e))?;
        sync_dir(&self.recovered_dir)?;
        sync_dir(&self.log_dir)?;
        self.recoveries.push(format!(
            "moved segment {shown}, whose header was never completed, to {}",
            kept.display()
        ));
        Ok(())
    }

    /// Opens every segment file, in seq order. A last segment whose header never reached the
    /// disk was created by a roll-over that crashed before any frame went into it: a writable
    /// open removes it. Any other bad header is a problem.
    fn load_segments(&mut self) -> Result<(), StorageError> {
        let found = self.segment_files()?;
        let count = found.len();
        let mut segments = std::collections::BTreeMap::new();
        for (i, (first, path)) in found.into_iter().enumerate() {
            let file = OpenOptions::new()
                .read(true)
                .write(!self.opened_read_only)
                .open(&path)
                .map_err(|e| StorageError::io("open segment", &path, e))?;
            let len = file
                .metadata()
                .map_err(|e| StorageError::io("stat segment", &path, e))?
                .len();
            let mut header = vec![0u8; SEGMENT_HEADER_LEN.min(len) as usize];
            file.read_exact_at(&mut header, 0)
                .map_err(|e| StorageError::io("read segment header", &path, e))?;
            match frame::decode_segment_header(&header) {
                Ok(found) if found.first_seq == first => {
                    segments.insert(
                        first,
                        Arc::new(Segment {
                            first_seq: first,
                            version: found.version,
                            path,
                            file,
                        }),
                    );
                }
                Ok(SegmentHeader {
                    first_seq: other, ..
                }) => self.problems.push(StorageProblem {
                    seq: Some(first),
                    detail: format!("segment {} says it starts at seq {other}", path.display()),
                }),
                // A roll-over that crashed before any frame went into the new segment, or a
                // segment cut down to less than its header: settled after the recovery.
                Err(_) if i + 1 == count && len <= SEGMENT_HEADER_LEN => {
                    self.headless_segment = Some(path);
                }
                Err(detail) => self.problems.push(StorageProblem {
                    seq: Some(first),
                    detail: format!("segment {}: {detail}", path.display()),
                }),
            }
        }
        *self.segments.write().unwrap_or_else(|p| p.into_inner()) = segments;
        Ok(())
    }

    /// The segment files of the log directory with their first seqs, in seq order; any other
    /// file there is a problem.
    fn segment_files(&mut self) -> Result<Vec<(u64, std::path::PathBuf)>, StorageError> {
        let mut found: Vec<(u64, std::path::PathBuf)> = Vec::new();
        let entries = match fs::read_dir(&self.log_dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.opened_read_only => {
                return Ok(found);
            }
            entries => entries.map_err(|e| StorageError::io("list", &self.log_dir, e))?,
        };
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io("list", &self.log_dir, e))?;
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(stem) = name.strip_suffix(".seg") else {
                continue;
            };
            match stem.parse::<u64>() {
                Ok(first) if stem.len() == 20 => found.push((first, path)),
                _ => self.problems.push(StorageProblem {
                    seq: None,
                    detail: format!("unexpected file {} in the log directory", path.display()),
                }),
            }
        }
        found.sort();
        Ok(found)
    }

    /// Reads the checkpoint log. A last line without its newline, or that does not parse, was
    /// being written when the process stopped: past what the head record counted, a writable
    /// open cuts it and keeps it in `recovered/`. A bad line before the last is damage, and so
    /// is a log shorter than the head record counted. Keeps the entries it read (up to one
    /// that does not parse) for the first read of the whole log, and answers how many.
    fn load_checkpoints(&mut self, head_found: &HeadFound) -> Result<usize, StorageError> {
        let path = self
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .path
            .clone();
        let (bytes, missing) = match fs::read(&path) {
            Ok(bytes) => (bytes, false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), true),
            Err(e) => return Err(StorageError::io("read", &path, e)),
        };
        let CheckpointLines {
            entries,
            spans,
            at,
            cut,
            unparsable,
        } = checkpoint_lines(&bytes);
        if let Some(e) = unparsable {
            self.problems.push(StorageProblem {
                seq: None,
                detail: format!(
                    "checkpoint log entry {} does not parse: {e}",
                    entries.len() + 1
                ),
            });
        }
        let counted = cut.unwrap_or(at) as u64;
        let recorded = match head_found {
            HeadFound::Record { record, .. } => record.checkpoint_log_bytes,
            _ => 0,
        };
        if recorded > counted {
            self.problems.push(StorageProblem {
                seq: None,
                detail: if missing {
                    format!(
                        "the checkpoint log {} is missing, but the head record counted {recorded} bytes of it: its signed entries were removed",
                        path.display()
                    )
                } else {
                    format!(
                        "the checkpoint log {} holds {counted} bytes of entries, but the head record counted {recorded}: signed entries were removed from its end",
                        path.display()
                    )
                },
            });
        }
        if let Some(at) = cut {
            self.torn_checkpoint_entry(&path, &bytes, at, recorded)?;
        }
        let mut log = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        log.spans = spans;
        log.last = entries.last().cloned();
        log.bytes = counted;
        let count = entries.len();
        log.opened = Some(entries);
        Ok(count)
    }

    /// A torn last entry of the checkpoint log, from byte `at` of `bytes` on: a writable open
    /// keeps its bytes in `recovered/` and cuts it, unless the head record counted those bytes
    /// (an acknowledged entry, damaged since: a problem [`Self::load_checkpoints`] reported).
    fn torn_checkpoint_entry(
        &mut self,
        path: &Path,
        bytes: &[u8],
        at: usize,
        recorded: u64,
    ) -> Result<(), StorageError> {
        let torn = bytes.len() - at;
        if recorded > at as u64 {
            self.recoveries.push(format!(
                "the last {torn} bytes of the checkpoint log, at byte {at}, do not parse, but the head record counted them: they are left as they are"
            ));
            return Ok(());
        }
        if self.opened_read_only {
            self.recoveries.push(format!(
                "the last {torn} bytes of the checkpoint log, at byte {at}, are a torn entry; a writable open cuts them"
            ));
            return Ok(());
        }
        let kept = self
            .recovered_dir
            .join(format!("{CHECKPOINT_LOG}.{at}.torn"));
        fs::write(&kept, &bytes[at..])
            .and_then(|()| File::open(&kept)?.sync_all())
            .map_err(|e| StorageError::io("write", &kept, e))?;
        sync_dir(&self.recovered_dir)?;
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| StorageError::io("open", path, e))?;
        file.set_len(at as u64)
            .and_then(|()| file.sync_all())
            .map_err(|e| StorageError::io("truncate", path, e))?;
        self.recoveries.push(format!(
            "cut a torn checkpoint entry of {torn} bytes; kept in {}",
            kept.display()
        ));
        Ok(())
    }

    /// Reads the checkpoint log, brings the index up to the end of the log, compares the log
    /// with every durable record of its length, and decides what to do with a damaged tail.
    fn recover(&mut self, head_found: &HeadFound) -> Result<(), StorageError> {
        let checkpoint_entries = self.load_checkpoints(head_found)?;
        // An index of another format (or none) is discarded and rebuilt from the log.
        let recorded = self.index.tail()?;
        if recorded.is_none() {
            self.index.reset()?;
        }
        let first_segment = self.segments_snapshot().keys().next().copied();
        if let Some(first) = first_segment
            && first != 0
        {
            self.problems.push(StorageProblem {
                seq: Some(0),
                detail: format!("the first segment starts at seq {first}, not 0"),
            });
            self.set_aside_index()?;
            return Ok(());
        }
        let (start, rebuild_on_disk) = self.resume_point(recorded, first_segment.is_some())?;
        if start.next_seq > 0 {
            self.check_closed_segments(&start)?;
        }
        // Every durable record of how long the log was, before the scan: what they say tells
        // a torn last frame from an acknowledged one whose content was damaged since.
        let claims = self.claims(recorded, head_found);
        self.claimed = claims.iter().map(|(size, _)| *size).max().unwrap_or(0);
        let (tail, outcome) = if first_segment.is_some() {
            let scanned = self.scan_and_index(start)?;
            self.recoveries.extend(scanned.notes);
            (scanned.tail, scanned.outcome)
        } else {
            (Tail::start(), Scan::End)
        };
        let found = tail.next_seq;
        self.progress.lock().indexed = found;
        self.set_head(&tail);
        match outcome {
            Scan::End => self.check_no_segment_after(&tail),
            Scan::Defect(defect) => self.judge_defect(defect, found)?,
        }
        for (size, source) in &claims {
            if *size > found {
                self.problems.push(StorageProblem {
                    seq: Some(found),
                    detail: format!(
                        "the log holds {found} events, but {source} says it held {size}: acknowledged events from seq {found} on were lost"
                    ),
                });
            }
        }
        if found > 0 && checkpoint_entries == 0 {
            self.problems.push(StorageProblem {
                seq: None,
                detail: format!(
                    "the checkpoint log is missing or empty, but the log holds {found} events: the ledger's signing keys and checkpoints are gone"
                ),
            });
        }
        if let HeadFound::Record { record, .. } = head_found {
            self.check_last_acknowledged(record, found)?;
        }
        self.settle_index(rebuild_on_disk)
    }

    /// Where the scan starts, and whether the index on disk was set aside to be rebuilt.
    ///
    /// It resumes from the index's record of the log's end when the log still reaches it. When
    /// it does not, the log is scanned from its start into an index in memory first, so that
    /// the record on disk survives until the scan shows whether the log still holds as many
    /// events as it says (a log rewritten in other frames) or fewer (a loss).
    fn resume_point(
        &mut self,
        recorded: Option<Tail>,
        has_segments: bool,
    ) -> Result<(Tail, bool), StorageError> {
        match recorded {
            Some(tail) if has_segments && self.tail_is_plausible(&tail) => Ok((tail, false)),
            Some(tail) if tail.next_seq > 0 => {
                self.set_aside_index()?;
                Ok((Tail::start(), true))
            }
            _ => {
                self.index.reset()?;
                Ok((Tail::start(), false))
            }
        }
    }

    /// What the index says of the segments before the one the scan resumes in, checked before
    /// the open trusts it instead of reading them: each ends, whole, with the frame that holds
    /// the seq before the next one begins. A segment removed or cut short after it was closed is
    /// damage no crash leaves, and a problem; the index is then set aside and the log read from
    /// its start, which says where it breaks.
    fn check_closed_segments(&mut self, resume: &Tail) -> Result<(), StorageError> {
        let segments = self.segments_snapshot();
        let firsts: Vec<u64> = segments.range(..=resume.segment).map(|(k, _)| *k).collect();
        for pair in firsts.windows(2) {
            let (closed, next) = (pair[0], pair[1]);
            let Some(before) = next.checked_sub(1) else {
                continue;
            };
            let found = match self.location(&segments, before) {
                Ok(Some((seg, offset))) if seg.first_seq == closed => Some((seg, offset)),
                Ok(_) | Err(StorageError::Index(_)) => None,
                Err(e) => return Err(e),
            };
            let problem = match found {
                None => Some(format!(
                    "the index does not place seq {before} in segment {closed:020}, the one before segment {next:020}: a segment between them was removed, or the index is damaged"
                )),
                Some((seg, offset)) => closed_segment_end(&seg, offset)?,
            };
            if let Some(detail) = problem {
                self.problems.push(StorageProblem {
                    seq: Some(before),
                    detail,
                });
                return Ok(());
            }
        }
        Ok(())
    }

    /// After a scan that reached the end of the log's frames: segments after the tail's segment
    /// that the scan never reached would mean a gap.
    fn check_no_segment_after(&mut self, tail: &Tail) {
        let segments = self.segments_snapshot();
        if let Some((&last, _)) = segments.iter().next_back()
            && last > tail.segment
        {
            self.problems.push(StorageProblem {
                seq: Some(tail.next_seq),
                detail: format!("segment {last:020} follows the end of the log"),
            });
        }
    }

    /// A frame the scan stopped at, `found` events in: a torn write to cut (the last frame of
    /// the last segment, nothing intact after it, no durable record that it was acknowledged),
    /// or damage to report.
    fn judge_defect(&mut self, defect: Defect, found: u64) -> Result<(), StorageError> {
        let Defect {
            segment,
            offset,
            seq,
            detail,
            structural,
            later_from,
        } = defect;
        let is_last = self.segments_snapshot().keys().next_back() == Some(&segment);
        let later_frame = !structural && is_last && self.valid_frame_from(segment, later_from)?;
        if !structural && is_last && !later_frame && self.claimed <= found {
            let cut = self.torn_tail(segment, offset, found, &detail)?;
            if self.opened_read_only {
                self.recoveries.push(format!(
                    "a torn write of {} bytes at byte {offset} of segment {segment:020} ({detail}) was never acknowledged (no durable record covers it); a writable open cuts it",
                    cut.bytes
                ));
            } else {
                *self.pending_cut.lock().unwrap_or_else(|p| p.into_inner()) = Some(cut);
            }
            return Ok(());
        }
        let why = if later_frame {
            " (intact frames follow, so this is damage, not a torn write)"
        } else if self.claimed > found && !structural {
            " (a durable record shows it was acknowledged, so this is damage, not a torn write)"
        } else {
            ""
        };
        self.problems.push(StorageProblem {
            seq: Some(seq),
            detail: format!("segment {segment:020}, byte {offset}: {detail}{why}"),
        });
        Ok(())
    }

    /// The event the head record says was acknowledged last, `found` events in the log: it must
    /// read back, with the hash the record names.
    fn check_last_acknowledged(
        &mut self,
        record: &HeadRecord,
        found: u64,
    ) -> Result<(), StorageError> {
        if record.next_seq == 0 || record.next_seq > found {
            return Ok(());
        }
        let seq = record.next_seq - 1;
        let mut hash = None;
        let read = self.visit_range(seq, 1, &mut |_, bytes| {
            hash = crate::envelope::split_stored(bytes).ok().map(|(_, h)| h);
            ControlFlow::Break(())
        });
        if let Err(StorageError::Corrupt { seq: at, detail }) = read {
            self.problems.push(StorageProblem {
                seq: at.or(Some(seq)),
                detail: format!("the last acknowledged event cannot be read back: {detail}"),
            });
        } else if read?.eq(&1) && hash != Some(record.last_hash) {
            self.problems.push(StorageProblem {
                seq: Some(seq),
                detail: format!(
                    "the event at seq {seq} is not the one acknowledged there (the head record names hash {}): the log was rewritten",
                    record.last_hash
                ),
            });
        }
        Ok(())
    }

    /// The index the backend goes on with, once every problem is known. With a problem, an index
    /// in memory over the part that checks out (the one on disk, and every record of the log's
    /// length, left as they are); with none, after a rebuild was started in memory, the index on
    /// disk rebuilt: it was only out of step with the log's frames.
    fn settle_index(&mut self, rebuild_on_disk: bool) -> Result<(), StorageError> {
        if !self.problems.is_empty() && !self.index.tree.is_memory() {
            self.set_aside_index()?;
        } else if self.problems.is_empty()
            && rebuild_on_disk
            && let Some(disk) = self.set_aside.take()
        {
            disk.reset()?;
            self.index = disk;
            *self.merkle_cache.lock().unwrap_or_else(|p| p.into_inner()) = MerkleCache::default();
            self.read_only = false;
        } else {
            return Ok(());
        }
        let tail = self.scan_and_index(Tail::start())?.tail;
        self.progress.lock().indexed = tail.next_seq;
        self.set_head(&tail);
        Ok(())
    }

    /// Every durable record of how long the log was: the index's record of its end, the head
    /// record, and the largest tree a counting entry of the checkpoint log (as the open read it)
    /// signs.
    fn claims(&self, recorded: Option<Tail>, head_found: &HeadFound) -> Vec<(u64, String)> {
        let mut claims: Vec<(u64, String)> = Vec::new();
        if let Some(recorded) = recorded {
            claims.push((
                recorded.next_seq,
                "the index's record of the log's end".into(),
            ));
        }
        if let HeadFound::Record { record, .. } = head_found {
            claims.push((
                record.next_seq,
                "the head record written when the last append was acknowledged".into(),
            ));
        }
        let log = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((size, i)) = signed_claim(log.opened.as_deref().unwrap_or_default()) {
            claims.push((
                size,
                format!(
                    "entry {} of the checkpoint log, which signs a tree of {size} events",
                    i + 1
                ),
            ));
        }
        claims
    }

    /// Swaps the index on disk for an empty one in memory and stops writing.
    fn set_aside_index(&mut self) -> Result<(), StorageError> {
        if !self.index.tree.is_memory() {
            let disk = std::mem::replace(&mut self.index, Index::memory());
            self.set_aside = Some(disk);
        }
        self.index.reset()?;
        *self.merkle_cache.lock().unwrap_or_else(|p| p.into_inner()) = MerkleCache::default();
        self.read_only = true;
        Ok(())
    }

    /// Makes `tail` the head of the log, where the next frame goes, and what a loss keeps.
    fn set_head(&mut self, tail: &Tail) {
        *self.head.write().unwrap_or_else(|p| p.into_inner()) = crate::storage::ChainHead {
            size: tail.next_seq,
            last_hash: tail.last_hash,
        };
        let mut writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        writer.segment = tail.segment;
        writer.end = tail.offset;
        writer.frames_in_segment = u64::from(tail.offset > SEGMENT_HEADER_LEN);
        drop(writer);
        self.kept = *tail;
    }

    /// What a torn write at `(segment, offset)` consists of.
    fn torn_tail(
        &self,
        segment: u64,
        offset: u64,
        tree_size: u64,
        detail: &str,
    ) -> Result<PendingCut, StorageError> {
        let segments = self.segments_snapshot();
        let Some(seg) = segments.get(&segment) else {
            return Err(StorageError::Failed(format!(
                "segment {segment:020} is not open"
            )));
        };
        let torn = read_from(seg, offset)?;
        Ok(PendingCut {
            tree_size,
            segment,
            offset,
            bytes: torn.len() as u64,
            hash: Digest(*blake3::hash(&torn).as_bytes()),
            detail: detail.to_owned(),
        })
    }

    /// Records the statement of a cut, then moves the torn bytes to `recovered/` and truncates
    /// the segment before them. They were never acknowledged: an append is acknowledged only
    /// after its frame is synced and the head record covers it, and no durable record did.
    pub(super) fn cut_pending(&self, statement: &CheckpointEntry) -> Result<String, StorageError> {
        let mut pending = self.pending_cut.lock().unwrap_or_else(|p| p.into_inner());
        let Some(cut) = pending.clone() else {
            return Err(StorageError::Failed("there is no torn write to cut".into()));
        };
        let already = self
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last
            .as_ref()
            == Some(statement);
        if !already {
            self.append_checkpoint_entry(statement)?;
        }
        let segments = self.segments_snapshot();
        let seg = segments.get(&cut.segment).ok_or_else(|| {
            StorageError::Failed(format!("segment {:020} is not open", cut.segment))
        })?;
        let torn = read_from(seg, cut.offset)?;
        let kept = self
            .recovered_dir
            .join(format!("{:020}.seg.{}.torn", cut.segment, cut.offset));
        let mut out = File::create(&kept).map_err(|e| StorageError::io("create", &kept, e))?;
        out.write_all(&torn)
            .and_then(|()| out.sync_all())
            .map_err(|e| StorageError::io("write", &kept, e))?;
        sync_dir(&self.recovered_dir)?;
        seg.file
            .set_len(cut.offset)
            .and_then(|()| seg.file.sync_all())
            .map_err(|e| StorageError::io("truncate torn tail", &seg.path, e))?;
        *pending = None;
        let note = format!(
            "cut a torn write of {} bytes at byte {} of segment {:020} ({}); kept in {}",
            cut.bytes,
            cut.offset,
            cut.segment,
            cut.detail,
            kept.display()
        );
        tracing::warn!("{note}");
        Ok(kept.display().to_string())
    }

    /// Records an accepted loss, moves what lies past the kept prefix to `recovered/`, and sets
    /// the index and the head record back to the kept prefix.
    pub(super) fn accept_pending_loss(
        &self,
        statements: &[CheckpointEntry],
    ) -> Result<Vec<String>, StorageError> {
        if self.opened_read_only {
            return Err(StorageError::Failed(
                "the ledger was opened read-only".into(),
            ));
        }
        for statement in statements {
            self.append_checkpoint_line(statement)?;
        }
        let mut moved = Vec::new();
        let kept = self.kept;
        for (first, seg) in self.segments_snapshot() {
            if first < kept.segment {
                continue;
            }
            let name = format!("{first:020}.seg");
            if first == kept.segment && kept.next_seq > first {
                let rest = read_from(&seg, kept.offset)?;
                if rest.is_empty() {
                    continue;
                }
                let aside = self
                    .recovered_dir
                    .join(format!("{name}.{}.lost", kept.offset));
                fs::write(&aside, &rest)
                    .and_then(|()| File::open(&aside)?.sync_all())
                    .map_err(|e| StorageError::io("write", &aside, e))?;
                seg.file
                    .set_len(kept.offset)
                    .and_then(|()| seg.file.sync_all())
                    .map_err(|e| StorageError::io("truncate", &seg.path, e))?;
                moved.push(format!(
                    "{} bytes from byte {} of {} to {}",
                    rest.len(),
                    kept.offset,
                    seg.path.display(),
                    aside.display()
                ));
            } else {
                let aside = self.recovered_dir.join(format!("{name}.lost"));
                fs::rename(&seg.path, &aside)
                    .map_err(|e| StorageError::io("move segment", &seg.path, e))?;
                moved.push(format!("{} to {}", seg.path.display(), aside.display()));
            }
        }
        sync_dir(&self.recovered_dir)?;
        sync_dir(&self.log_dir)?;
        if let Some(disk) = &self.set_aside {
            disk.reset()?;
            disk.flush()?;
        }
        let dir = self.log_dir.parent().unwrap_or(Path::new("."));
        let head_path = dir.join(HEAD_RECORD);
        let found = head_record::read(&head_path)?;
        let bytes = self
            .checkpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bytes;
        HeadFile::create_or_open(
            &head_path,
            &found,
            HeadRecord {
                next_seq: kept.next_seq,
                last_hash: kept.last_hash,
                checkpoint_log_bytes: bytes,
            },
        )?;
        Ok(moved)
    }

    fn tail_is_plausible(&self, tail: &Tail) -> bool {
        let segments = self.segments_snapshot();
        match segments.get(&tail.segment) {
            Some(seg) => seg
                .file
                .metadata()
                .map(|m| m.len() >= tail.offset)
                .unwrap_or(false),
            None => false,
        }
    }
}

/// What is wrong with the end of a closed segment whose last frame starts at `offset`: nothing
/// when the frame is whole, its content included.
fn closed_segment_end(seg: &Segment, offset: u64) -> Result<Option<String>, StorageError> {
    let len = seg
        .file
        .metadata()
        .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
        .len();
    let shown = seg.path.display();
    if offset >= len {
        return Ok(Some(format!(
            "segment {shown} ends at byte {len}, before its last frame at byte {offset}"
        )));
    }
    Ok(match read_frame(seg, offset, len)? {
        Err(defect) => Some(format!(
            "segment {shown}, byte {offset}: its last frame {}",
            defect_text(&defect)
        )),
        Ok(frame) => {
            let end = offset
                + FRAME_HEADER_LEN
                + u64::from(frame.header_body_len)
                + frame.body.content_len();
            (end > len).then(|| {
                format!(
                    "segment {shown} ends at byte {len}, inside the content of its last frame, which ends at {end}"
                )
            })
        }
    })
}

/// The bytes of a segment from `offset` to its end.
fn read_from(seg: &Segment, offset: u64) -> Result<Vec<u8>, StorageError> {
    let len = seg
        .file
        .metadata()
        .map_err(|e| StorageError::io("stat segment", &seg.path, e))?
        .len();
    let mut bytes = vec![0u8; len.saturating_sub(offset) as usize];
    seg.file
        .read_exact_at(&mut bytes, offset)
        .map_err(|e| StorageError::io("read segment", &seg.path, e))?;
    Ok(bytes)
}

/// Takes a shared lock on the directory's lock file, when there is one to take, so that a
/// read-only open meets a running writer's lock and says who holds it. A directory without
/// one (or whose lock file cannot be opened, on a read-only file system) is read unlocked:
/// nothing can write to it there.
fn take_shared_lock(dir: &Path) -> Result<Option<File>, StorageError> {
    let path = dir.join("LOCK");
    let Ok(mut file) = File::open(&path) else {
        return Ok(None);
    };
    match file.try_lock_shared() {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Err(held_by(&mut file, path)),
        Err(fs::TryLockError::Error(e)) => Err(StorageError::io("lock", &path, e)),
    }
}

/// The refusal for a lock file another process holds, naming the holder as its note says.
fn held_by(file: &mut File, path: std::path::PathBuf) -> StorageError {
    let mut holder = String::new();
    // The holder's note is advisory; an unreadable one still leaves a clear refusal.
    let _ = file.read_to_string(&mut holder);
    let holder = holder.trim();
    StorageError::Locked {
        path,
        holder: if holder.is_empty() {
            "it did not say who it is".into()
        } else {
            holder.to_owned()
        },
    }
}

/// Takes the directory's lock file, or says who holds it.
fn take_lock(dir: &Path, note: &str) -> Result<File, StorageError> {
    let path = dir.join("LOCK");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StorageError::io("open lock file", &path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(held_by(&mut file, path)),
        Err(fs::TryLockError::Error(e)) => {
            return Err(StorageError::io("lock", &path, e));
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all_at(note.as_bytes(), 0))
        .map_err(|e| StorageError::io("write lock file", &path, e))?;
    Ok(file)
}

/// The checkpoint log's lines as an open reads them.
struct CheckpointLines {
    /// The entries that parse, up to the first that does not.
    entries: Vec<CheckpointEntry>,
    /// Where each of them is: offset and length, newline included.
    spans: Vec<(u64, u64)>,
    /// Where reading stopped.
    at: usize,
    /// Where a torn last entry starts: one without its newline, or the last line not parsing.
    cut: Option<usize>,
    /// Why an entry before the last does not parse.
    unparsable: Option<serde_json::Error>,
}

fn checkpoint_lines(bytes: &[u8]) -> CheckpointLines {
    let mut lines = CheckpointLines {
        entries: Vec::new(),
        spans: Vec::new(),
        at: 0,
        cut: None,
        unparsable: None,
    };
    while lines.at < bytes.len() {
        let at = lines.at;
        let end = bytes[at..].iter().position(|b| *b == b'\n').map(|i| at + i);
        let line = &bytes[at..end.unwrap_or(bytes.len())];
        match (serde_json::from_slice::<CheckpointEntry>(line), end) {
            (Ok(entry), Some(end)) => {
                lines.entries.push(entry);
                lines.spans.push((at as u64, (end + 1 - at) as u64));
                lines.at = end + 1;
            }
            (_, None) => {
                lines.cut = Some(at);
                break;
            }
            (Err(e), Some(end)) if end + 1 == bytes.len() => {
                tracing::warn!(error = %e, "the last checkpoint entry does not parse");
                lines.cut = Some(at);
                break;
            }
            (Err(e), Some(_)) => {
                lines.unparsable = Some(e);
                break;
            }
        }
    }
    lines
}
