//! The content store in a PostgreSQL database: one row per blob in `content_blobs`, shared by
//! every node that opens the same database.
//!
//! A put is one `INSERT … ON CONFLICT` in its own transaction on a session with
//! `synchronous_commit` on, so it returns only once the commit record is flushed (and, with a
//! synchronous standby, replicated): the event that cites the blob is appended after that.
//! Concurrent puts share one connection and are pipelined; the server's own group commit
//! shares the flushes among them. A row whose bytes differ from the ones put under the same
//! hash is damaged (the hash names the bytes) and is overwritten with the good ones. Every read
//! re-hashes the bytes, so a row altered in the database is reported, never returned.
//!
//! The driver is asynchronous and the store's callers are not: the store owns a small tokio
//! runtime, runs each query there and blocks the caller on a channel until it is done, so it
//! may be called from any thread, inside another runtime or not. A connection found closed is
//! opened again on next use.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

use super::{BlobError, BlobOptions, ContentHash, ContentStore, content_hash};
use research::Hash32;

/// The advisory lock key under which the table is created ("rl-blobs" in ASCII), so nodes
/// starting together create it once.
const SCHEMA_LOCK: i64 = 0x726c_2d62_6c6f_6273;

const CREATE: &str = "CREATE TABLE IF NOT EXISTS content_blobs (
    hash  bytea PRIMARY KEY CHECK (length(hash) = 32),
    bytes bytea NOT NULL
)";
const PUT: &str = "INSERT INTO content_blobs (hash, bytes) VALUES ($1, $2) \
    ON CONFLICT (hash) DO UPDATE SET bytes = EXCLUDED.bytes \
    WHERE content_blobs.bytes IS DISTINCT FROM EXCLUDED.bytes";
const GET: &str = "SELECT bytes FROM content_blobs WHERE hash = $1";
const CONTAINS: &str = "SELECT 1 FROM content_blobs WHERE hash = $1";
/// `undefined_table`: a read-only store over a database that never held a blob.
const UNDEFINED_TABLE: &str = "42P01";

fn db_error(op: &'static str, e: &tokio_postgres::Error) -> BlobError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    BlobError::Database { op, detail }
}

fn undefined_table(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| db.code().code() == UNDEFINED_TABLE)
}

/// A connection that is opened again when it is found closed.
#[derive(Debug)]
struct Link {
    config: Config,
    slot: tokio::sync::Mutex<Option<Arc<Client>>>,
}

impl Link {
    async fn client(&self) -> Result<Arc<Client>, BlobError> {
        let mut slot = self.slot.lock().await;
        if let Some(client) = &*slot
            && !client.is_closed()
        {
            return Ok(Arc::clone(client));
        }
        *slot = None;
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|e| db_error("connect", &e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "a content store connection closed");
            }
        });
        client
            .batch_execute("SET synchronous_commit TO on")
            .await
            .map_err(|e| db_error("set synchronous_commit", &e))?;
        let client = Arc::new(client);
        *slot = Some(Arc::clone(&client));
        Ok(client)
    }
}

/// The content store over PostgreSQL. See the module documentation.
#[derive(Debug)]
pub struct PostgresBlobStore {
    runtime: Option<tokio::runtime::Runtime>,
    link: Arc<Link>,
    options: BlobOptions,
    read_only: bool,
    failed: Mutex<Option<String>>,
}

impl PostgresBlobStore {
    /// Connects to the database at `url` (`postgres://USER@HOST:PORT/DB`) and creates the
    /// blobs' table when it is not there. A server with `fsync` off is written to by no put.
    pub fn open(url: &str, options: BlobOptions) -> Result<PostgresBlobStore, BlobError> {
        let store = PostgresBlobStore::connect(url, options, false)?;
        let link = Arc::clone(&store.link);
        let fsync = store.run(async move {
            let client = link.client().await?;
            client
                .batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {CREATE}; COMMIT"
                ))
                .await
                .map_err(|e| db_error("create the blobs' table", &e))?;
            let row = client
                .query_one("SHOW fsync", &[])
                .await
                .map_err(|e| db_error("read the server's fsync", &e))?;
            Ok(row.get::<_, String>(0))
        })?;
        if fsync != "on" {
            *store.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "the database server runs with fsync {fsync}: a stored blob could be lost"
            ));
        }
        Ok(store)
    }

    /// Connects to read only: nothing is created or written (a database without the table
    /// reads as an empty store).
    pub fn open_read_only(url: &str, options: BlobOptions) -> Result<PostgresBlobStore, BlobError> {
        let store = PostgresBlobStore::connect(url, options, true)?;
        let link = Arc::clone(&store.link);
        store.run(async move { link.client().await.map(|_| ()) })?;
        Ok(store)
    }

    fn connect(
        url: &str,
        options: BlobOptions,
        read_only: bool,
    ) -> Result<PostgresBlobStore, BlobError> {
        let mut config: Config = url.parse().map_err(|e| BlobError::Database {
            op: "read the storage URL",
            detail: format!("{e}"),
        })?;
        config.application_name("research-ledger content store");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("content-postgres")
            .enable_all()
            .build()
            .map_err(|e| BlobError::Database {
                op: "start the database runtime",
                detail: e.to_string(),
            })?;
        Ok(PostgresBlobStore {
            runtime: Some(runtime),
            link: Arc::new(Link {
                config,
                slot: tokio::sync::Mutex::new(None),
            }),
            options,
            read_only,
            failed: Mutex::new(None),
        })
    }

    /// Runs `work` on the store's runtime and waits for it.
    fn run<T, F>(&self, work: F) -> Result<T, BlobError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, BlobError>> + Send + 'static,
    {
        let stopped = || BlobError::Failed("the database runtime has stopped".into());
        let runtime = self.runtime.as_ref().ok_or_else(stopped)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().map_err(|_| stopped())?
    }

    fn check(&self, hash: &ContentHash, bytes: Vec<u8>) -> Result<Vec<u8>, BlobError> {
        let limit = self.options.content_bytes_max;
        if bytes.len() as u64 > limit {
            return Err(BlobError::TooLarge {
                bytes: bytes.len() as u64,
                limit,
            });
        }
        super::checked(hash, bytes)
    }
}

impl ContentStore for PostgresBlobStore {
    fn put(&self, bytes: &[u8]) -> Result<ContentHash, BlobError> {
        if self.read_only {
            return Err(BlobError::ReadOnly);
        }
        if let Some(reason) = self.failure() {
            return Err(BlobError::Failed(reason));
        }
        let size = bytes.len() as u64;
        if size > self.options.content_bytes_max {
            return Err(BlobError::TooLarge {
                bytes: size,
                limit: self.options.content_bytes_max,
            });
        }
        let hash = content_hash(bytes);
        let link = Arc::clone(&self.link);
        let owned = bytes.to_vec();
        self.run(async move {
            let client = link.client().await?;
            client
                .execute(PUT, &[&hash.0.as_slice(), &owned.as_slice()])
                .await
                .map_err(|e| db_error("store a blob", &e))
        })?;
        Ok(hash)
    }

    fn get(&self, hash: &ContentHash) -> Result<Vec<u8>, BlobError> {
        let link = Arc::clone(&self.link);
        let key = hash.0;
        let row = self.run(async move {
            let client = link.client().await?;
            match client.query_opt(GET, &[&key.as_slice()]).await {
                Ok(row) => Ok(row.map(|r| r.get::<_, Vec<u8>>(0))),
                Err(e) if undefined_table(&e) => Ok(None),
                Err(e) => Err(db_error("read a blob", &e)),
            }
        })?;
        match row {
            Some(bytes) => self.check(hash, bytes),
            None => Err(BlobError::NotFound(Hash32(key))),
        }
    }

    fn contains(&self, hash: &ContentHash) -> Result<bool, BlobError> {
        let link = Arc::clone(&self.link);
        let key = hash.0;
        self.run(async move {
            let client = link.client().await?;
            match client.query_opt(CONTAINS, &[&key.as_slice()]).await {
                Ok(row) => Ok(row.is_some()),
                Err(e) if undefined_table(&e) => Ok(false),
                Err(e) => Err(db_error("look a blob up", &e)),
            }
        })
    }

    /// Nothing is deferred: every put was durable when it returned.
    fn checkpoint(&self) -> Result<(), BlobError> {
        Ok(())
    }

    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn options(&self) -> &BlobOptions {
        &self.options
    }
}

impl Drop for PostgresBlobStore {
    fn drop(&mut self) {
        // Without waiting: the store may be dropped inside another runtime, where a blocking
        // shutdown is not allowed. Nothing is in flight: every call waited for its work.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
