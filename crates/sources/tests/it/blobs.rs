//! The content store of earlier versions, read-only: texts in their files and in the journals
//! a run left read back checked, a damaged or cut record never returned, limits held, and
//! nothing written.

use std::fs;
use std::path::Path;

use sources::{BlobError, BlobOptions, BlobStore, content_hash};

/// Writes `text` as an earlier version stored it: `DIR/ab/cdef…`.
fn file(dir: &Path, text: &[u8]) -> sources::ContentHash {
    let hash = content_hash(text);
    let hex = hash.to_hex();
    fs::create_dir_all(dir.join(&hex[..2])).unwrap();
    fs::write(dir.join(&hex[..2]).join(&hex[2..]), text).unwrap();
    hash
}

/// A journal record as an earlier version wrote it: `"RLBJ" | length u32 LE | hash | bytes`.
fn record(text: &[u8]) -> Vec<u8> {
    let mut out = b"RLBJ".to_vec();
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(&content_hash(text).0);
    out.extend_from_slice(text);
    out
}

/// Every file under `dir`, with its length.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let len = fs::metadata(&path).unwrap().len();
                out.push((path.display().to_string(), len));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn texts_in_files_and_in_journals_read_back_checked_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = dir.path().join("blobs");
    let in_file = "共享单车 and algae blooms.".as_bytes();
    let hash = file(&blobs, in_file);
    let (journalled, torn) = (b"only in a journal".to_vec(), b"cut short".to_vec());
    let mut journal = record(&journalled);
    let cut = record(&torn);
    journal.extend_from_slice(&cut[..cut.len() - 3]);
    fs::create_dir_all(blobs.join(".journal")).unwrap();
    fs::write(
        blobs.join(".journal").join(format!("{:020}.log", 4)),
        &journal,
    )
    .unwrap();
    let before = listing(dir.path());

    let store = BlobStore::open(&blobs, BlobOptions::default());
    assert_eq!(store.get(&hash).unwrap(), in_file);
    assert!(store.contains(&hash).unwrap());
    assert_eq!(
        store.path_of(&hash),
        blobs.join(&hash.to_hex()[..2]).join(&hash.to_hex()[2..])
    );
    assert_eq!(store.get(&content_hash(&journalled)).unwrap(), journalled);
    assert!(matches!(
        store.get(&content_hash(&torn)),
        Err(BlobError::NotFound(_))
    ));
    let never = content_hash(b"never stored");
    assert!(matches!(store.get(&never), Err(BlobError::NotFound(h)) if h == never));
    assert!(!store.contains(&never).unwrap());
    assert_eq!(listing(dir.path()), before, "a read changed the folder");

    // A missing folder reads as an empty store, and is not made.
    let none = BlobStore::open(dir.path().join("absent"), BlobOptions::default());
    assert!(matches!(none.get(&hash), Err(BlobError::NotFound(_))));
    assert!(!dir.path().join("absent").exists());
}

#[test]
fn a_damaged_text_is_reported_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let text = b"Phosphorus loads rose 41 per cent.";
    let hash = file(dir.path(), text);
    let store = BlobStore::open(dir.path(), BlobOptions::default());
    let path = store.path_of(&hash);
    let mut flipped = text.to_vec();
    flipped[0] ^= 0x20;
    fs::write(&path, &flipped).unwrap();
    match store.get(&hash) {
        Err(BlobError::Damaged { expected, actual }) => {
            assert_eq!(expected, hash);
            assert_eq!(actual, content_hash(&flipped));
        }
        other => panic!("a flipped bit was not detected: {other:?}"),
    }
    // Presence is not integrity.
    assert!(store.contains(&hash).unwrap());
    fs::write(&path, b"").unwrap();
    assert!(matches!(store.get(&hash), Err(BlobError::Damaged { .. })));
}

#[test]
fn a_text_over_the_limit_is_refused_not_loaded_whole() {
    let dir = tempfile::tempdir().unwrap();
    let long = [b'b'; 11];
    let hash = file(dir.path(), &long);
    let journalled = [b'c'; 11];
    fs::create_dir_all(dir.path().join(".journal")).unwrap();
    fs::write(
        dir.path().join(".journal").join(format!("{:020}.log", 0)),
        record(&journalled),
    )
    .unwrap();
    let store = BlobStore::open(
        dir.path(),
        BlobOptions {
            content_bytes_max: 10,
        },
    );
    for h in [hash, content_hash(&journalled)] {
        assert!(matches!(
            store.get(&h),
            Err(BlobError::TooLarge {
                bytes: 11,
                limit: 10
            })
        ));
    }
    let roomy = BlobStore::open(dir.path(), BlobOptions::default());
    assert_eq!(roomy.get(&hash).unwrap(), long);
    assert_eq!(BlobOptions::default().content_bytes_max, 1024 * 1024);
}
