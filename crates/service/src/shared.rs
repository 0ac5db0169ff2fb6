//! Small documents shared by every node through the PostgreSQL database that holds the ledger:
//! one row per document in `shared_documents` (its name, a version raised by every change, and
//! its text).
//!
//! A change runs in one transaction on a connection of its own: it locks the document's row
//! (`SELECT … FOR UPDATE`; the row is made, empty, first if it is missing), hands the text to
//! the caller, and writes what the caller returns with the version raised, or rolls back. Two
//! changes at once, from two nodes or two requests of one, therefore both land, one after the
//! other, as the lock file does for the embedded token file. Commits are durable when they
//! return (`synchronous_commit` on). Readers compare the version to see a change.
//!
//! The driver is asynchronous and callers are not: the store owns a small tokio runtime, runs
//! each query there and blocks the caller on a channel until it is done.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

/// The advisory lock key under which the table is created ("rl-share" in ASCII).
const SCHEMA_LOCK: i64 = 0x726c_2d73_6861_7265;

const CREATE: &str = "CREATE TABLE IF NOT EXISTS shared_documents (
    name    text   PRIMARY KEY,
    version bigint NOT NULL CHECK (version >= 0),
    body    text
)";

/// Why the database could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("shared documents in the database, {op}: {detail}")]
pub struct SharedError {
    op: &'static str,
    detail: String,
}

fn db_error(op: &'static str, e: &tokio_postgres::Error) -> SharedError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    SharedError { op, detail }
}

/// The shared documents of one database. See the module documentation.
#[derive(Debug)]
pub struct SharedDocuments {
    runtime: Option<tokio::runtime::Runtime>,
    config: Arc<Config>,
    reader: Arc<tokio::sync::Mutex<Option<Arc<Client>>>>,
}

async fn connect(config: &Config) -> Result<Client, SharedError> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| db_error("connect", &e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a shared documents connection closed");
        }
    });
    client
        .batch_execute("SET synchronous_commit TO on")
        .await
        .map_err(|e| db_error("set synchronous_commit", &e))?;
    Ok(client)
}

impl SharedDocuments {
    /// Connects to the database at `url` and creates the table when it is not there.
    pub fn open(url: &str) -> Result<SharedDocuments, SharedError> {
        let mut config: Config = url.parse().map_err(|e| SharedError {
            op: "read the storage URL",
            detail: format!("{e}"),
        })?;
        config.application_name("research-ledger shared documents");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("shared-postgres")
            .enable_all()
            .build()
            .map_err(|e| SharedError {
                op: "start the database runtime",
                detail: e.to_string(),
            })?;
        let store = SharedDocuments {
            runtime: Some(runtime),
            config: Arc::new(config),
            reader: Arc::new(tokio::sync::Mutex::new(None)),
        };
        let config = Arc::clone(&store.config);
        store.run(async move {
            let client = connect(&config).await?;
            client
                .batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {CREATE}; COMMIT"
                ))
                .await
                .map_err(|e| db_error("create the table", &e))
        })?;
        Ok(store)
    }

    fn run<T, F>(&self, work: F) -> Result<T, SharedError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, SharedError>> + Send + 'static,
    {
        let stopped = || SharedError {
            op: "run a query",
            detail: "the database runtime has stopped".into(),
        };
        let runtime = self.runtime.as_ref().ok_or_else(stopped)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().map_err(|_| stopped())?
    }

    /// The document `name`: its version (0 when it was never written) and its text.
    pub fn read(&self, name: &str) -> Result<(u64, Option<String>), SharedError> {
        let (config, reader, name) = (
            Arc::clone(&self.config),
            Arc::clone(&self.reader),
            name.to_owned(),
        );
        self.run(async move {
            let client = {
                let mut slot = reader.lock().await;
                match &*slot {
                    Some(client) if !client.is_closed() => Arc::clone(client),
                    _ => {
                        let client = Arc::new(connect(&config).await?);
                        *slot = Some(Arc::clone(&client));
                        client
                    }
                }
            };
            let row = client
                .query_opt(
                    "SELECT version, body FROM shared_documents WHERE name = $1",
                    &[&name],
                )
                .await
                .map_err(|e| db_error("read a document", &e))?;
            Ok(match row {
                None => (0, None),
                Some(row) => (u64::try_from(row.get::<_, i64>(0)).unwrap_or(0), row.get(1)),
            })
        })
    }

    /// Changes the document `name`: `change` gets its text (None when it has none) while the
    /// row is locked, and returns the new text, or an error that leaves it as it was.
    pub fn modify<E>(
        &self,
        name: &str,
        change: impl FnOnce(Option<String>) -> Result<String, E>,
    ) -> Result<Result<(), E>, SharedError> {
        let (config, owned) = (Arc::clone(&self.config), name.to_owned());
        let (client, body) = self.run(async move {
            let client = Arc::new(connect(&config).await?);
            client
                .execute(
                    "INSERT INTO shared_documents (name, version, body) VALUES ($1, 0, NULL) \
                     ON CONFLICT (name) DO NOTHING",
                    &[&owned],
                )
                .await
                .map_err(|e| db_error("make a document", &e))?;
            client
                .batch_execute("BEGIN")
                .await
                .map_err(|e| db_error("begin", &e))?;
            let row = client
                .query_one(
                    "SELECT body FROM shared_documents WHERE name = $1 FOR UPDATE",
                    &[&owned],
                )
                .await
                .map_err(|e| db_error("lock a document", &e))?;
            Ok((client, row.get::<_, Option<String>>(0)))
        })?;
        // The connection is this change's alone and goes with it: an error rolls back with it.
        let changed = match change(body) {
            Ok(text) => text,
            Err(e) => return Ok(Err(e)),
        };
        let name = name.to_owned();
        self.run(async move {
            client
                .execute(
                    "UPDATE shared_documents SET body = $2, version = version + 1 WHERE name = $1",
                    &[&name, &changed],
                )
                .await
                .map_err(|e| db_error("write a document", &e))?;
            client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| db_error("commit", &e))
        })?;
        Ok(Ok(()))
    }
}

impl Drop for SharedDocuments {
    fn drop(&mut self) {
        // Without waiting: it may be dropped inside another runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
