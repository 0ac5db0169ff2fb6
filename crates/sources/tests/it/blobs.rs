//! The blob store: layout, durability semantics that can be observed from outside (write, sync,
//! rename: no partial blob under its name, no rewrite of an intact blob), damage detection, limits.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sources::{BlobError, BlobOptions, BlobStore, content_hash};

fn store(dir: &std::path::Path) -> BlobStore {
    BlobStore::open(dir.join("blobs"), BlobOptions::default()).unwrap()
}

fn temp_files(store: &BlobStore) -> Vec<String> {
    fs::read_dir(store.dir().join(".tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn put_names_a_blob_by_its_blake3_hash_and_get_returns_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let text = "共享单车 and algae blooms.".as_bytes();
    let hash = store.put(text).unwrap();
    assert_eq!(hash.0, *blake3::hash(text).as_bytes());
    assert_eq!(hash, content_hash(text));
    let hex = hash.to_hex();
    let path = store.dir().join(&hex[..2]).join(&hex[2..]);
    assert_eq!(store.path_of(&hash), path);
    // Durable in the journal; a put creates no file, and reads find the blob there.
    assert!(!path.exists(), "a put wrote the blob's file");
    assert_eq!(store.get(&hash).unwrap(), text);
    assert!(store.contains(&hash).unwrap());
    store.checkpoint().unwrap();
    assert_eq!(fs::read(&path).unwrap(), text);
    assert_eq!(store.get(&hash).unwrap(), text);
    assert!(store.contains(&hash).unwrap());
    assert!(
        temp_files(&store).is_empty(),
        "the temporary file was renamed, not left"
    );

    // Another store on the same folder, as after a restart, reads it back.
    drop(store);
    let reopened = BlobStore::open(dir.path().join("blobs"), BlobOptions::default()).unwrap();
    assert_eq!(reopened.get(&hash).unwrap(), text);
}

#[test]
fn an_intact_blob_is_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let hash = store.put(b"the same text").unwrap();
    store.checkpoint().unwrap();
    let path = store.path_of(&hash);
    let before = fs::metadata(&path).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(store.put(b"the same text").unwrap(), hash);
    assert_eq!(
        journals(&store)[0].1,
        0,
        "an intact blob was journalled again"
    );
    store.checkpoint().unwrap();
    let after = fs::metadata(&path).unwrap();
    // A rewrite renames a new file into place: a new inode, a new modification time.
    assert_eq!(before.ino(), after.ino());
    assert_eq!(before.modified().unwrap(), after.modified().unwrap());
}

#[test]
fn a_damaged_blob_is_reported_never_returned_and_a_put_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let text = b"Phosphorus loads rose 41 per cent.";
    let hash = store.put(text).unwrap();
    store.checkpoint().unwrap();
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

    fs::write(&path, &text[..5]).unwrap();
    assert!(matches!(store.get(&hash), Err(BlobError::Damaged { .. })));

    fs::write(&path, b"").unwrap();
    assert!(matches!(store.get(&hash), Err(BlobError::Damaged { .. })));

    let damaged_inode = fs::metadata(&path).unwrap().ino();
    assert_eq!(store.put(text).unwrap(), hash);
    // Read from the journal until the file is replaced.
    assert_eq!(store.get(&hash).unwrap(), text);
    store.checkpoint().unwrap();
    assert_ne!(
        fs::metadata(&path).unwrap().ino(),
        damaged_inode,
        "rewritten"
    );
    assert_eq!(store.get(&hash).unwrap(), text);
}

#[test]
fn missing_blobs_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let hash = content_hash(b"never stored");
    assert!(matches!(store.get(&hash), Err(BlobError::NotFound(h)) if h == hash));
    assert!(!store.contains(&hash).unwrap());
}

#[test]
fn the_size_limit_holds_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(
        dir.path().join("blobs"),
        BlobOptions {
            content_bytes_max: 10,
            ..BlobOptions::default()
        },
    )
    .unwrap();
    assert!(store.put(&[b'a'; 10]).is_ok());
    let too_big = [b'b'; 11];
    assert!(matches!(
        store.put(&too_big),
        Err(BlobError::TooLarge {
            bytes: 11,
            limit: 10
        })
    ));
    assert!(!store.contains(&content_hash(&too_big)).unwrap());
    assert!(temp_files(&store).is_empty());

    // A blob written under a larger limit is refused on read, not loaded whole.
    let roomy = BlobStore::open(dir.path().join("blobs"), BlobOptions::default()).unwrap();
    let hash = roomy.put(&too_big).unwrap();
    roomy.checkpoint().unwrap();
    assert!(matches!(
        store.get(&hash),
        Err(BlobError::TooLarge {
            bytes: 11,
            limit: 10
        })
    ));
    assert_eq!(roomy.get(&hash).unwrap(), too_big);
}

#[test]
fn the_default_limit_is_one_mebibyte() {
    assert_eq!(BlobOptions::default().content_bytes_max, 1_048_576);
}

#[test]
fn concurrent_puts_of_one_text_leave_one_intact_blob() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store(dir.path()));
    let text: Arc<Vec<u8>> = Arc::new("径流 runoff ".repeat(5_000).into_bytes());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (store, text) = (Arc::clone(&store), Arc::clone(&text));
            std::thread::spawn(move || store.put(&text).unwrap())
        })
        .collect();
    let hashes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(hashes.iter().all(|h| *h == hashes[0]));
    assert_eq!(store.get(&hashes[0]).unwrap(), *text);
    store.checkpoint().unwrap();
    let shard = store.path_of(&hashes[0]).parent().unwrap().to_path_buf();
    assert_eq!(fs::read_dir(shard).unwrap().count(), 1);
    assert!(temp_files(&store).is_empty());
}

#[test]
fn leftovers_of_interrupted_writes_are_swept_when_old_and_ignored_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let hash = content_hash(b"interrupted");
    // What a crash between writing and renaming leaves: a temporary file, never the blob.
    let old = store
        .dir()
        .join(".tmp")
        .join(format!("{}.1.0", hash.to_hex()));
    let fresh = store
        .dir()
        .join(".tmp")
        .join(format!("{}.1.1", hash.to_hex()));
    fs::write(&old, b"interr").unwrap();
    fs::write(&fresh, b"interrupted").unwrap();
    File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(7_200))
        .unwrap();
    assert!(!store.contains(&hash).unwrap());
    assert!(matches!(store.get(&hash), Err(BlobError::NotFound(_))));

    drop(store);
    let reopened = BlobStore::open(dir.path().join("blobs"), BlobOptions::default()).unwrap();
    let mut left = temp_files(&reopened);
    left.sort();
    assert_eq!(
        left,
        [format!("{}.1.1", hash.to_hex())],
        "only the old one is swept"
    );
}

fn journals(store: &BlobStore) -> Vec<(String, u64)> {
    let mut found: Vec<(String, u64)> = fs::read_dir(store.dir().join(".journal"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    found.sort();
    found
}

#[test]
fn concurrent_puts_share_the_journal_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store(dir.path()));
    let writers = 32;
    let start = Arc::new(std::sync::Barrier::new(writers));
    let threads: Vec<_> = (0..writers)
        .map(|i| {
            let (store, start) = (Arc::clone(&store), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                store
                    .put(format!("text {i}: 冰川 retreat").as_bytes())
                    .unwrap()
            })
        })
        .collect();
    let hashes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, hash) in hashes.iter().enumerate() {
        assert_eq!(
            store.get(hash).unwrap(),
            format!("text {i}: 冰川 retreat").into_bytes()
        );
    }
    // Each put returned only once a sync covered it; puts that waited together shared one.
    let syncs = store.journal_syncs();
    assert!(syncs >= 1, "no put was synced");
    assert!(
        syncs <= writers as u64 / 2,
        "{syncs} journal syncs for {writers} concurrent puts"
    );
}

#[test]
fn an_open_after_a_crash_restores_blobs_from_the_journal_and_ignores_a_torn_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let kept = store.put(b"acknowledged before the crash").unwrap();
    store.checkpoint().unwrap();
    let lost = store.put(b"its file never reached the disk").unwrap();
    // What a crash leaves: a blob's journal record synced, its file not written; and a record
    // of a put that never returned, cut short.
    assert!(!store.path_of(&lost).exists());
    let journal = store.dir().join(".journal").join(&journals(&store)[0].0);
    let mut torn = fs::OpenOptions::new().append(true).open(&journal).unwrap();
    std::io::Write::write_all(&mut torn, b"RLBJ\x40\x00\x00\x00half a hea").unwrap();
    drop(torn);
    drop(store);

    // An audit of the folder as it is reads the blob from the journal and changes nothing.
    let audit = BlobStore::open_read_only(dir.path().join("blobs"), BlobOptions::default());
    assert_eq!(
        audit.get(&lost).unwrap(),
        b"its file never reached the disk"
    );
    assert!(audit.contains(&lost).unwrap());
    assert!(audit.put(b"anything").is_err());
    drop(audit);
    assert!(journal.exists());
    assert!(
        !dir.path()
            .join("blobs")
            .join(&lost.to_hex()[..2])
            .join(&lost.to_hex()[2..])
            .exists()
    );

    let reopened = BlobStore::open(dir.path().join("blobs"), BlobOptions::default()).unwrap();
    assert_eq!(
        reopened.get(&lost).unwrap(),
        b"its file never reached the disk"
    );
    assert_eq!(
        fs::read(reopened.path_of(&lost)).unwrap(),
        b"its file never reached the disk",
        "the open wrote the file from the journal"
    );
    assert_eq!(
        reopened.get(&kept).unwrap(),
        b"acknowledged before the crash"
    );
    // The journals replayed are gone; a new, empty one is in use.
    let left = journals(&reopened);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].1, 0);
    assert_ne!(left[0].0, journal.file_name().unwrap().to_string_lossy());
}

#[test]
fn a_checkpoint_empties_the_journal_and_a_full_one_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let hash = store.put(b"kept whole").unwrap();
    assert!(journals(&store)[0].1 > 0);
    store.checkpoint().unwrap();
    assert_eq!(journals(&store)[0].1, 0);
    assert_eq!(store.get(&hash).unwrap(), b"kept whole");

    // A journal past its bound is replaced, and removed once its files are synced.
    let small = BlobStore::open(
        dir.path().join("small"),
        BlobOptions {
            journal_bytes_max: 64,
            ..BlobOptions::default()
        },
    )
    .unwrap();
    let hashes: Vec<_> = (0..5)
        .map(|i| {
            small
                .put(format!("a text long enough to fill the journal, {i}").as_bytes())
                .unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while journals(&small).len() > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = journals(&small);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].0 >= format!("{:020}.log", 5), "{left:?}");
    for (i, hash) in hashes.iter().enumerate() {
        assert_eq!(
            small.get(hash).unwrap(),
            format!("a text long enough to fill the journal, {i}").into_bytes()
        );
    }
}

#[test]
fn every_acknowledged_blob_reads_back_while_journals_are_set_aside_and_written_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        BlobStore::open(
            dir.path().join("blobs"),
            BlobOptions {
                journal_bytes_max: 300,
                ..BlobOptions::default()
            },
        )
        .unwrap(),
    );
    let acknowledged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (store, acknowledged) = (Arc::clone(&store), Arc::clone(&acknowledged));
            std::thread::spawn(move || {
                for i in 0..60 {
                    let text = format!("writer {w}, text {i}: sea ice 海冰 extent").into_bytes();
                    let hash = store.put(&text).unwrap();
                    acknowledged.lock().unwrap().push((hash, text));
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, acknowledged, done) = (
                Arc::clone(&store),
                Arc::clone(&acknowledged),
                Arc::clone(&done),
            );
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let known: Vec<_> = acknowledged.lock().unwrap().clone();
                    for (hash, text) in known.iter().rev().take(40) {
                        assert_eq!(&store.get(hash).unwrap(), text, "an acknowledged blob");
                        assert!(store.contains(hash).unwrap());
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 0);
    store.checkpoint().unwrap();
    // After a checkpoint every blob is in its own file and no journal holds anything.
    let journals = journals(&store);
    assert_eq!(journals.len(), 1, "{journals:?}");
    assert_eq!(journals[0].1, 0);
    for (hash, text) in acknowledged.lock().unwrap().iter() {
        assert_eq!(&fs::read(store.path_of(hash)).unwrap(), text);
    }
}
