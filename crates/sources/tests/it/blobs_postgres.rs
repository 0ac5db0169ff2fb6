//! The content store in PostgreSQL, against throwaway clusters: what one store puts another
//! over the same database reads (two nodes), a row altered in the database is reported and
//! replaced by a put of the good bytes, the size bound holds both ways, a read-only store
//! writes nothing, and a server without `fsync` is not written to.
//!
//! Without PostgreSQL installed these tests say so and pass, unless
//! `RESEARCH_LEDGER_REQUIRE_POSTGRES` is set (as `scripts/test` sets it).

use sources::{BlobError, BlobOptions, ContentStore, PostgresBlobStore, content_hash};
use test_support::postgres::{PgCluster, cluster_or_skip};

fn database(test: &str) -> Option<(&'static PgCluster, String)> {
    let cluster = cluster_or_skip(test)?;
    Some((cluster, cluster.create_database().expect("database")))
}

#[test]
fn a_blob_put_by_one_store_is_read_by_another_over_the_same_database() {
    let Some((cluster, url)) = database("a_blob_put_by_one_store") else {
        return;
    };
    let one = PostgresBlobStore::open(&url, BlobOptions::default()).unwrap();
    let other = PostgresBlobStore::open(&url, BlobOptions::default()).unwrap();
    let text = b"the full text of a piece of evidence";
    let hash = one.put(text).unwrap();
    assert_eq!(hash, content_hash(text));
    assert_eq!(other.get(&hash).unwrap(), text);
    assert!(other.contains(&hash).unwrap());
    // Putting it again, from either, stores it once.
    assert_eq!(other.put(text).unwrap(), hash);
    let rows = cluster
        .psql_url(&url, "SELECT count(*) FROM content_blobs")
        .unwrap();
    assert_eq!(rows.trim(), "1");
    let missing = content_hash(b"never stored");
    assert!(matches!(one.get(&missing), Err(BlobError::NotFound(h)) if h == missing));
    assert!(!one.contains(&missing).unwrap());
    // Many at once, from threads: every one readable afterwards.
    let hashes: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let store = if i % 2 == 0 { &one } else { &other };
                s.spawn(move || store.put(format!("text {i}").as_bytes()).unwrap())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, hash) in hashes.iter().enumerate() {
        assert_eq!(one.get(hash).unwrap(), format!("text {i}").as_bytes());
    }
}

#[test]
fn a_row_altered_in_the_database_is_reported_and_a_put_repairs_it() {
    let Some((cluster, url)) = database("a_row_altered_in_the_database") else {
        return;
    };
    let store = PostgresBlobStore::open(&url, BlobOptions::default()).unwrap();
    let text = b"what the source said";
    let hash = store.put(text).unwrap();
    cluster
        .psql_url(
            &url,
            "UPDATE content_blobs SET bytes = 'what it did not say'",
        )
        .unwrap();
    match store.get(&hash) {
        Err(BlobError::Damaged { expected, actual }) => {
            assert_eq!(expected, hash);
            assert_eq!(actual, content_hash(b"what it did not say"));
        }
        other => panic!("an altered row is damaged, not {other:?}"),
    }
    assert_eq!(store.put(text).unwrap(), hash);
    assert_eq!(store.get(&hash).unwrap(), text);
}

#[test]
fn the_size_bound_holds_on_the_way_in_and_out() {
    let Some((_, url)) = database("the_size_bound_holds") else {
        return;
    };
    let small = BlobOptions {
        content_bytes_max: 8,
        ..BlobOptions::default()
    };
    let tight = PostgresBlobStore::open(&url, small).unwrap();
    assert!(matches!(
        tight.put(b"nine bytes"),
        Err(BlobError::TooLarge {
            bytes: 10,
            limit: 8
        })
    ));
    let roomy = PostgresBlobStore::open(&url, BlobOptions::default()).unwrap();
    let hash = roomy.put(b"nine bytes").unwrap();
    assert!(matches!(tight.get(&hash), Err(BlobError::TooLarge { .. })));
}

#[test]
fn a_read_only_store_writes_nothing_and_reads_an_empty_database_as_empty() {
    let Some((cluster, url)) = database("a_read_only_store") else {
        return;
    };
    let reader = PostgresBlobStore::open_read_only(&url, BlobOptions::default()).unwrap();
    let hash = content_hash(b"x");
    assert!(matches!(reader.get(&hash), Err(BlobError::NotFound(_))));
    assert!(matches!(reader.put(b"x"), Err(BlobError::ReadOnly)));
    let tables = cluster
        .psql_url(
            &url,
            "SELECT count(*) FROM pg_tables WHERE tablename = 'content_blobs'",
        )
        .unwrap();
    assert_eq!(tables.trim(), "0", "a read-only open creates nothing");
    let writer = PostgresBlobStore::open(&url, BlobOptions::default()).unwrap();
    writer.put(b"x").unwrap();
    assert_eq!(reader.get(&hash).unwrap(), b"x");
}

#[test]
fn a_server_without_fsync_is_not_written_to() {
    if cluster_or_skip("a_server_without_fsync").is_none() {
        return;
    }
    let cluster = PgCluster::start_with(&[("fsync", "off")]).unwrap();
    let url = cluster.create_database().unwrap();
    let store = PostgresBlobStore::open(&url, BlobOptions::default()).unwrap();
    let reason = store.failure().expect("a failure");
    assert!(reason.contains("fsync"), "{reason}");
    assert!(matches!(store.put(b"x"), Err(BlobError::Failed(_))));
    let rows = cluster
        .psql_url(&url, "SELECT count(*) FROM content_blobs")
        .unwrap();
    assert_eq!(rows.trim(), "0");
}
