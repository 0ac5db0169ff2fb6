//! A blocking handle on the PostgreSQL database that holds what every node shares beyond the
//! ledger (the corpus's documents here; contracts and jobs in the service), and the versioned
//! migrations of those tables.
//!
//! The driver is asynchronous and callers are not: a [`Database`] owns a small tokio runtime,
//! runs each piece of work there and blocks the caller on a channel until it is done, so it may
//! be called from any thread, inside another runtime or not. Reads share one pipelined
//! connection, opened again when found closed, and a read that meets a session the server cut
//! runs once more on a new one ([`Pool::read`]); a transaction takes a connection of its own
//! ([`Pool::alone`]), so it never interleaves with another caller's statements. Every session
//! sets `synchronous_commit` on: a commit returns once it is flushed.
//!
//! Migrations follow the ledger's: numbered per component, each in its own transaction under a
//! transaction-level advisory lock (so nodes starting together apply it once), recorded in
//! `shared_schema`; a component whose recorded version is newer than the program's is refused.

use std::sync::Arc;
use std::time::Duration;

use pg_connect::Connector;
pub use pg_connect::is_lost;
use tokio_postgres::Client;

/// The advisory lock key under which shared migrations run ("rl-migra" in ASCII).
const MIGRATION_LOCK: i64 = 0x726c_2d6d_6967_7261;

/// Why the database could not be reached, read or written.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the storage database, {op}: {detail}")]
pub struct DatabaseError {
    /// What was being done.
    pub op: &'static str,
    /// What the driver or the server said.
    pub detail: String,
}

impl DatabaseError {
    /// An error that is not the driver's.
    pub fn new(op: &'static str, detail: impl Into<String>) -> DatabaseError {
        DatabaseError {
            op,
            detail: detail.into(),
        }
    }
}

/// The driver's error as a [`DatabaseError`], with the server's SQLSTATE when it gave one.
pub fn db_error(op: &'static str, e: &tokio_postgres::Error) -> DatabaseError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => pg_connect::describe(e),
    };
    DatabaseError { op, detail }
}

/// Whether the server said the table is not there (`undefined_table`).
pub fn is_undefined_table(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| db.code().code() == "42P01")
}

/// Connections to the database, for work running on a [`Database`]'s runtime.
#[derive(Debug, Clone)]
pub struct Pool {
    connector: Arc<Connector>,
    shared: Arc<tokio::sync::Mutex<Option<Arc<Client>>>>,
}

impl Pool {
    /// The connection reads share (pipelined), opened again when found closed.
    pub async fn shared(&self) -> Result<Arc<Client>, DatabaseError> {
        let mut slot = self.shared.lock().await;
        if let Some(client) = &*slot
            && !client.is_closed()
        {
            return Ok(Arc::clone(client));
        }
        let client = Arc::new(self.alone().await?);
        *slot = Some(Arc::clone(&client));
        Ok(client)
    }

    /// Runs the read `work` on the shared connection. A read that meets a connection the
    /// server cut (every session is, in a failover; an administrator's `pg_terminate_backend`; a
    /// restart) runs once more on a new one: reads change nothing, so that is safe, and the
    /// caller gets the answer rather than the cut. A refusal from a live session is returned as
    /// it is. Writes do not come here: a failed commit's outcome is unknown.
    pub async fn read<T, F, Fut>(&self, work: F) -> Result<T, DatabaseError>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: Future<Output = Result<T, DatabaseError>>,
    {
        let client = self.shared().await?;
        match work(Arc::clone(&client)).await {
            Err(e) if is_lost(&client).await => {
                tracing::debug!(
                    error = %e,
                    "a read met a cut database session; it runs again on a new one"
                );
                self.forget(&client).await;
                work(self.shared().await?).await
            }
            done => done,
        }
    }

    /// Forgets `client` if it is still the shared connection, so that the next read connects.
    async fn forget(&self, client: &Arc<Client>) {
        let mut slot = self.shared.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *slot = None;
        }
    }

    /// A connection of the caller's own: for a transaction, or a session that holds locks.
    pub async fn alone(&self) -> Result<Client, DatabaseError> {
        let (client, connection) = self
            .connector
            .connect()
            .await
            .map_err(|e| db_error("connect", &e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "a storage database connection closed");
            }
        });
        client
            .batch_execute("SET synchronous_commit TO on")
            .await
            .map_err(|e| db_error("set synchronous_commit", &e))?;
        Ok(client)
    }
}

/// A database and the runtime its queries run on. See the module documentation.
#[derive(Debug)]
pub struct Database {
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
}

impl Database {
    /// A handle on the database at `url` (`postgres://USER@HOST:PORT/DB`, with its TLS
    /// parameters, read by [`pg_connect`]); nothing is connected until the first piece of work.
    pub fn open(url: &str, application: &str) -> Result<Database, DatabaseError> {
        let mut connector = Connector::parse(url)
            .map_err(|e| DatabaseError::new("read the storage URL", e.to_string()))?;
        let config = connector.config_mut();
        config.application_name(application);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("shared-postgres")
            .enable_all()
            .build()
            .map_err(|e| DatabaseError::new("start the database runtime", e.to_string()))?;
        Ok(Database {
            runtime: Some(runtime),
            pool: Pool {
                connector: Arc::new(connector),
                shared: Arc::new(tokio::sync::Mutex::new(None)),
            },
        })
    }

    /// The connections, to move into work given to [`Database::run`].
    pub fn pool(&self) -> Pool {
        self.pool.clone()
    }

    /// Runs `work` on the database's runtime and waits for it.
    pub fn run<T, F>(&self, work: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, DatabaseError>> + Send + 'static,
    {
        let stopped = || DatabaseError::new("run a query", "the database runtime has stopped");
        let runtime = self.runtime.as_ref().ok_or_else(stopped)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().map_err(|_| stopped())?
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Without waiting: it may be dropped inside another runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One migration of a component's tables: its number, what it does, and its SQL.
#[derive(Debug)]
pub struct Migration {
    /// From 1, one more than the one before.
    pub version: i32,
    /// What it does, recorded with it.
    pub description: &'static str,
    /// The statements.
    pub sql: &'static str,
}

/// The version `component` is at in the database (0 when it has no tables yet).
pub async fn schema_version(client: &Client, component: &str) -> Result<i32, DatabaseError> {
    let exists = client
        .query_one("SELECT to_regclass('shared_schema') IS NOT NULL", &[])
        .await
        .map_err(|e| db_error("look for the schema", &e))?;
    if !exists.get::<_, bool>(0) {
        return Ok(0);
    }
    let row = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM shared_schema WHERE component = $1",
            &[&component],
        )
        .await
        .map_err(|e| db_error("read the schema version", &e))?;
    Ok(row.get(0))
}

/// Creates `shared_schema` when it is missing, under the migrations' lock.
async fn create_schema_table(client: &mut Client) -> Result<(), DatabaseError> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_error("begin a migration", &e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| db_error("lock the schema", &e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS shared_schema (
             component   text        NOT NULL,
             version     int         NOT NULL,
             description text        NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now(),
             PRIMARY KEY (component, version)
         )",
    )
    .await
    .map_err(|e| db_error("create the schema table", &e))?;
    tx.commit()
        .await
        .map_err(|e| db_error("create the schema table", &e))?;
    Ok(())
}

/// Applies every migration of `component` the database lacks, in order; refuses a component
/// whose schema is newer than `migrations` know.
pub async fn migrate(
    client: &mut Client,
    component: &str,
    migrations: &[Migration],
) -> Result<(), DatabaseError> {
    create_schema_table(client).await?;
    for migration in migrations {
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error("begin a migration", &e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(|e| db_error("lock the schema", &e))?;
        let done = tx
            .query_opt(
                "SELECT 1 FROM shared_schema WHERE component = $1 AND version = $2",
                &[&component, &migration.version],
            )
            .await
            .map_err(|e| db_error("read the schema version", &e))?;
        if done.is_some() {
            continue;
        }
        tx.batch_execute(migration.sql)
            .await
            .map_err(|e| db_error("apply a migration", &e))?;
        tx.execute(
            "INSERT INTO shared_schema (component, version, description) VALUES ($1, $2, $3)",
            &[&component, &migration.version, &migration.description],
        )
        .await
        .map_err(|e| db_error("record a migration", &e))?;
        tx.commit()
            .await
            .map_err(|e| db_error("commit a migration", &e))?;
        tracing::info!(
            component,
            version = migration.version,
            description = migration.description,
            "applied a schema migration"
        );
    }
    let found = schema_version(client, component).await?;
    let latest = migrations.last().map_or(0, |m| m.version);
    if found > latest {
        return Err(DatabaseError::new(
            "check the schema version",
            format!(
                "the database's {component} schema is at version {found}, newer than this program's {latest}: run a newer research-ledger"
            ),
        ));
    }
    Ok(())
}
