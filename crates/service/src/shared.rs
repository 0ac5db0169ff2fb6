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
//! The service's tables (these documents and the pipeline jobs) are created by numbered
//! migrations applied at open ([`sources::database::migrate`]: an advisory lock, the
//! `shared_schema` table, a newer schema refused). The driver is asynchronous and callers are
//! not: work runs on the [`Database`]'s runtime and the caller blocks until it is done.

use std::sync::Arc;

use sources::database::{Database, DatabaseError, Migration, Pool, db_error, migrate};

/// The component name of the service's tables in `shared_schema`.
const COMPONENT: &str = "service";

/// Every migration of the service's tables, in order. Never edit one that was released: add
/// the next. The first creates the table only when it is missing, since databases written
/// before migrations were recorded for it hold it already.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "shared documents: the access tokens and the contracts of registered tools",
        sql: "CREATE TABLE IF NOT EXISTS shared_documents (
            name    text   PRIMARY KEY,
            version bigint NOT NULL CHECK (version >= 0),
            body    text
        )",
    },
    Migration {
        version: 2,
        description: "pipeline jobs",
        sql: "CREATE TABLE pipeline_jobs (
            job_id          text        PRIMARY KEY,
            task_id         text        NOT NULL,
            status          text        NOT NULL,
            idempotency_key text        UNIQUE,
            updated_at      timestamptz NOT NULL,
            body            text        NOT NULL
        );
        CREATE UNIQUE INDEX pipeline_jobs_one_running ON pipeline_jobs (task_id)
            WHERE status = 'running';
        CREATE INDEX pipeline_jobs_by_update ON pipeline_jobs (updated_at);",
    },
];

/// Why the database could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("shared documents in the database, {op}: {detail}")]
pub struct SharedError {
    op: &'static str,
    detail: String,
}

impl From<DatabaseError> for SharedError {
    fn from(e: DatabaseError) -> Self {
        SharedError {
            op: e.op,
            detail: e.detail,
        }
    }
}

/// The shared documents of one database. See the module documentation.
#[derive(Debug)]
pub struct SharedDocuments {
    db: Arc<Database>,
}

/// Opens the database at `url` and applies the service's migrations.
pub(crate) fn open_database(url: &str, application: &str) -> Result<Database, DatabaseError> {
    let db = Database::open(url, application)?;
    let pool = db.pool();
    db.run(async move {
        let mut client = pool.alone().await?;
        migrate(&mut client, COMPONENT, MIGRATIONS).await
    })?;
    Ok(db)
}

impl SharedDocuments {
    /// Connects to the database at `url` and applies the service's migrations.
    pub fn open(url: &str) -> Result<SharedDocuments, SharedError> {
        Ok(SharedDocuments {
            db: Arc::new(open_database(url, "research-ledger shared documents")?),
        })
    }

    fn pool(&self) -> Pool {
        self.db.pool()
    }

    /// The document `name`: its version (0 when it was never written) and its text.
    pub fn read(&self, name: &str) -> Result<(u64, Option<String>), SharedError> {
        let (pool, name) = (self.pool(), name.to_owned());
        Ok(self.db.run(async move {
            pool.read(|client| {
                let name = name.clone();
                async move {
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
                }
            })
            .await
        })?)
    }

    /// Changes the document `name`: `change` gets its text (None when it has none) while the
    /// row is locked, and returns the new text, or an error that leaves it as it was.
    pub fn modify<E>(
        &self,
        name: &str,
        change: impl FnOnce(Option<String>) -> Result<String, E>,
    ) -> Result<Result<(), E>, SharedError> {
        let (pool, owned) = (self.pool(), name.to_owned());
        let (client, body) = self.db.run(async move {
            let client = Arc::new(pool.alone().await?);
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
        self.db.run(async move {
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
