//! The passages' vectors, kept in a file per encoder so that they are computed once.
//!
//! Vectors are derived data: a passage's vector follows from its title, its text and the encoder,
//! so the file is a cache, never a record. What matters is that a damaged file never gives a
//! wrong vector, and that a lost one costs only the time to encode again:
//!
//! ```text
//! header  "research-ledger-vectors-v1\n"   27 bytes
//!         dimensions                        u32, little-endian
//!         encoder id length                 u32, little-endian
//!         encoder id                        UTF-8 (`encoder::Encoder::id`)
//! record  key                               32 bytes (`passage_key`)
//!         vector                            dimensions × f32, little-endian
//!         crc32 of the key and the vector   u32, little-endian
//! ```
//!
//! Records are appended. Opening reads every record whose checksum holds, up to the first that
//! does not (a torn append, a damaged sector), and cuts the file there: what follows is
//! encoded again when it is needed. A header for another encoder or of another width makes the
//! file start over. Appends and reads take the file's lock (exclusive, shared), so several
//! processes may share a folder of vectors.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8] = b"research-ledger-vectors-v1\n";

/// Why the vector file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("the passage vectors in {path}: {detail}")]
pub struct VectorFileError {
    path: PathBuf,
    detail: String,
}

/// The key of a passage's vector: blake3 over the encoder's input, which is the title and the
/// text's hash (a text is named by its hash everywhere).
pub(super) fn passage_key(title: &str, content_hash: &[u8; 32]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"research-ledger/passage-vector/v1");
    hasher.update(&(title.len() as u64).to_le_bytes());
    hasher.update(title.as_bytes());
    hasher.update(content_hash);
    *hasher.finalize().as_bytes()
}

/// The vectors of one encoder: the file, and what it holds, in memory. Each vector is held once
/// and shared with the snapshots that use it.
#[derive(Debug)]
pub(super) struct VectorFile {
    path: PathBuf,
    dimensions: usize,
    vectors: HashMap<[u8; 32], Arc<[f32]>>,
}

impl VectorFile {
    /// The file for `encoder_id` in `dir`, created when missing, with every record that reads
    /// back whole.
    pub(super) fn open(
        dir: &Path,
        encoder_id: &str,
        dimensions: usize,
    ) -> Result<Self, VectorFileError> {
        let name = blake3::hash(encoder_id.as_bytes()).to_hex();
        let path = dir.join(format!("{}.vectors", &name[..32]));
        let fail = |detail: String| VectorFileError {
            path: path.clone(),
            detail,
        };
        std::fs::create_dir_all(dir).map_err(|e| fail(format!("cannot create the folder: {e}")))?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| fail(format!("cannot open: {e}")))?;
        file.lock().map_err(|e| fail(format!("cannot lock: {e}")))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| fail(format!("cannot read: {e}")))?;
        let header = header(encoder_id, dimensions);
        let mut out = Self {
            path: path.clone(),
            dimensions,
            vectors: HashMap::new(),
        };
        let good = if bytes.starts_with(&header) {
            header.len() + out.read_records(&bytes[header.len()..])
        } else {
            0
        };
        if good < bytes.len() || good == 0 {
            if !bytes.is_empty() {
                tracing::warn!(
                    path = %path.display(),
                    kept = out.vectors.len(),
                    "the passage vector file ends in a part that does not read back, or is for another encoder; that part will be encoded again"
                );
            }
            rewrite_tail(&mut file, good, &header).map_err(|e| fail(e.to_string()))?;
        }
        file.unlock()
            .map_err(|e| fail(format!("cannot unlock: {e}")))?;
        Ok(out)
    }

    /// Reads records from `bytes` until one does not check out; the bytes read.
    fn read_records(&mut self, bytes: &[u8]) -> usize {
        let size = record_size(self.dimensions);
        let mut at = 0;
        while let Some(record) = bytes.get(at..at + size) {
            let (body, crc) = record.split_at(size - 4);
            if crc32fast::hash(body).to_le_bytes() != crc {
                break;
            }
            let mut key = [0u8; 32];
            key.copy_from_slice(&body[..32]);
            let vector: Arc<[f32]> = body[32..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            self.vectors.insert(key, vector);
            at += size;
        }
        at
    }

    /// The vector stored under `key`.
    pub(super) fn get(&self, key: &[u8; 32]) -> Option<&Arc<[f32]>> {
        self.vectors.get(key)
    }

    /// Vectors held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.vectors.len()
    }

    /// Keeps `vectors` under their keys, in memory and at the end of the file.
    pub(super) fn append(
        &mut self,
        vectors: Vec<([u8; 32], Vec<f32>)>,
    ) -> Result<(), VectorFileError> {
        let fail = |detail: String| VectorFileError {
            path: self.path.clone(),
            detail,
        };
        let mut bytes = Vec::with_capacity(vectors.len() * record_size(self.dimensions));
        for (key, vector) in &vectors {
            if vector.len() != self.dimensions {
                return Err(fail(format!(
                    "a vector of {} values where the encoder gives {}",
                    vector.len(),
                    self.dimensions
                )));
            }
            let start = bytes.len();
            bytes.extend_from_slice(key);
            for value in vector {
                bytes.extend_from_slice(&value.to_le_bytes());
            }
            let crc = crc32fast::hash(&bytes[start..]);
            bytes.extend_from_slice(&crc.to_le_bytes());
        }
        let mut file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| fail(format!("cannot open: {e}")))?;
        file.lock().map_err(|e| fail(format!("cannot lock: {e}")))?;
        let written = file.write_all(&bytes);
        file.unlock()
            .map_err(|e| fail(format!("cannot unlock: {e}")))?;
        written.map_err(|e| fail(format!("cannot write: {e}")))?;
        for (key, vector) in vectors {
            self.vectors.insert(key, vector.into());
        }
        Ok(())
    }
}

fn header(encoder_id: &str, dimensions: usize) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&u32::try_from(dimensions).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(encoder_id.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(encoder_id.as_bytes());
    out
}

fn record_size(dimensions: usize) -> usize {
    32 + 4 * dimensions + 4
}

/// Cuts the file after its last good record, or starts it over with `header` when nothing of it
/// is good.
fn rewrite_tail(file: &mut File, good: usize, header: &[u8]) -> std::io::Result<()> {
    if good == 0 {
        file.set_len(0)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(header)?;
    } else {
        file.set_len(good as u64)?;
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn vector(seed: u8, dimensions: usize) -> Vec<f32> {
        (0..dimensions)
            .map(|i| f32::from(seed) + i as f32 / 8.0)
            .collect()
    }

    #[test]
    fn vectors_read_back_after_a_reopen_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = VectorFile::open(dir.path(), "enc-a", 4).unwrap();
        let keys: Vec<[u8; 32]> = (0..3u8).map(|i| passage_key("t", &[i; 32])).collect();
        let records: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, vector(i as u8, 4)))
            .collect();
        file.append(records.clone()).unwrap();
        let path = file.path.clone();
        drop(file);

        let again = VectorFile::open(dir.path(), "enc-a", 4).unwrap();
        assert_eq!(again.len(), 3);
        for (key, v) in &records {
            assert_eq!(&**again.get(key).unwrap(), v.as_slice());
        }
        drop(again);

        // A torn last record and a flipped bit in the second: the first alone is kept.
        let mut bytes = std::fs::read(&path).unwrap();
        let size = record_size(4);
        let start = bytes.len() - 3 * size;
        bytes[start + size + 40] ^= 1;
        bytes.truncate(bytes.len() - 5);
        std::fs::write(&path, &bytes).unwrap();
        let cut = VectorFile::open(dir.path(), "enc-a", 4).unwrap();
        assert_eq!(cut.len(), 1);
        assert_eq!(&**cut.get(&keys[0]).unwrap(), records[0].1.as_slice());
        assert!(cut.get(&keys[1]).is_none());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() as usize,
            start + size
        );
    }

    #[test]
    fn a_file_for_another_encoder_or_width_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let key = passage_key("", &[7; 32]);
        let mut file = VectorFile::open(dir.path(), "enc-a", 4).unwrap();
        file.append(vec![(key, vector(1, 4))]).unwrap();
        let path = file.path.clone();
        drop(file);
        // Another encoder's file has another name, so it starts empty.
        assert_eq!(VectorFile::open(dir.path(), "enc-b", 4).unwrap().len(), 0);
        // The same name with a header of another width (a file renamed by hand) is not read.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[MAGIC.len()] = 5;
        std::fs::write(&path, &bytes).unwrap();
        let reread = VectorFile::open(dir.path(), "enc-a", 4).unwrap();
        assert_eq!(reread.len(), 0);
        assert!(reread.get(&key).is_none());
    }

    #[test]
    fn processes_sharing_a_folder_append_whole_records() {
        // Two handles on one file, as two processes sharing a folder of vectors would hold.
        let dir = tempfile::tempdir().unwrap();
        let writers: Vec<_> = (0..2u8)
            .map(|w| {
                let path = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    let mut file = VectorFile::open(&path, "enc-a", 64).unwrap();
                    for i in 0..50u8 {
                        let key = passage_key(&format!("{w}"), &[i; 32]);
                        file.append(vec![(key, vector(i, 64))]).unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let read = VectorFile::open(dir.path(), "enc-a", 64).unwrap();
        assert_eq!(read.len(), 100);
        for w in 0..2u8 {
            for i in 0..50u8 {
                let key = passage_key(&format!("{w}"), &[i; 32]);
                assert_eq!(&**read.get(&key).unwrap(), vector(i, 64).as_slice());
            }
        }
    }

    #[test]
    fn a_vector_of_the_wrong_width_is_refused_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = VectorFile::open(dir.path(), "enc-a", 4).unwrap();
        let key = passage_key("", &[1; 32]);
        assert!(file.append(vec![(key, vector(1, 3))]).is_err());
        assert_eq!(file.len(), 0);
        drop(file);
        assert_eq!(VectorFile::open(dir.path(), "enc-a", 4).unwrap().len(), 0);
    }
}
