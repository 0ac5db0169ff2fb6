//! The PostgreSQL backend: the log in tables of a shared database (PostgreSQL 15 or later).
//!
//! Everything an acknowledged append needs is written in one transaction per group commit:
//! the events with their stored bytes and hashes, the content blobs they cite (`content_blobs`,
//! outside the chain), the idempotency records, the Merkle nodes the group completes and the
//! new head of the chain. The group is sent with its `BEGIN` and its
//! `COMMIT` in one pipeline; its first statement, `ledger_advance_head`, moves the one row of
//! `ledger_head` on condition that the chain's head and each stream's version are still what
//! the commits were computed against, and raises otherwise, which aborts the transaction and
//! turns its `COMMIT` into a rollback: nothing is written and the backend answers
//! [`StorageError::HeadMoved`]. A writer may also hold the head row first
//! ([`Storage::hold_head`], `SELECT … FOR UPDATE`) and plan its group under that lock. An
//! append returns only once its `COMMIT` returned, on a session with `synchronous_commit` on,
//! on a server with `fsync` on (an open on a server without it refuses to write).
//!
//! Why no reader ever sees seq N+1 before seq N: every append takes the head row's lock before
//! it inserts anything and holds it to its commit, and a transaction's commit becomes visible
//! to new snapshots before its locks are released. The append of N+1 therefore gets past the
//! lock only once the append of N is visible, and commits after it; a snapshot that sees N+1
//! was taken after N+1 committed, so it sees N too. A reader tailing `WHERE seq >= k ORDER BY
//! seq` in one statement (one snapshot) reads a gap-free prefix.
//!
//! Each commit notifies `ledger_appended`; every writable backend listens on a session of its
//! own and wakes its ledger's writer for other nodes' commits ([`Storage::watch`]).
//!
//! The [`Storage`] trait is synchronous and the driver (`tokio-postgres`) is asynchronous: the
//! backend owns a small tokio runtime of its own, runs every query there and blocks the calling
//! thread on a channel until it is done, so it may be called from any thread, inside another
//! runtime or not. The writer's session is one connection; reads go round a few connections of
//! their own, each pipelining concurrent queries. A connection found closed is opened again on
//! next use.

mod schema;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ledger_proof::PerfectNode;
use pg_connect::Connector;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};
use uuid::Uuid;

use super::merkle_entries::{MERKLE_ENTRY_LEAVES, MerkleEntries};
use super::{
    Blob, ChainHead, CheckpointEntry, Commit, HeldHead, IdempotencyRecord, RawEvent, SignedAppend,
    Storage, StorageError, StorageProblem, TreeGrowth,
};
use crate::envelope::Digest;

/// How the backend is opened.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Nothing is written, not even migrations: the schema must be there already.
    pub read_only: bool,
    /// Connections for reads (at least one).
    pub read_connections: usize,
    /// The `application_name` the sessions report, so an operator can tell nodes apart.
    pub application_name: String,
    /// How long a connection attempt may take.
    pub connect_timeout: Duration,
    /// How long a session may sit idle inside a transaction before the server ends it (and
    /// with it the head row's lock, if it holds it).
    pub idle_in_transaction: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            read_only: false,
            read_connections: 4,
            application_name: "research-ledger".into(),
            connect_timeout: Duration::from_secs(10),
            idle_in_transaction: IDLE_IN_TRANSACTION,
        }
    }
}

/// A database error as a storage error: what was being done and what the server said.
pub(crate) fn db_error(op: &'static str, e: &tokio_postgres::Error) -> StorageError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => pg_connect::describe(e),
    };
    StorageError::Database { op, detail }
}

fn to_i64(value: u64, what: &'static str) -> Result<i64, StorageError> {
    i64::try_from(value).map_err(|_| StorageError::Corrupt {
        seq: None,
        detail: format!("{what} {value} does not fit in a bigint"),
    })
}

fn to_u64(value: i64, what: &'static str) -> Result<u64, StorageError> {
    u64::try_from(value).map_err(|_| StorageError::Corrupt {
        seq: None,
        detail: format!("{what} is negative: {value}"),
    })
}

fn digest(bytes: &[u8], what: &'static str) -> Result<Digest, StorageError> {
    <[u8; 32]>::try_from(bytes)
        .map(Digest)
        .map_err(|_| StorageError::Corrupt {
            seq: None,
            detail: format!("{what} is {} bytes, not 32", bytes.len()),
        })
}

/// How long a session may sit idle inside a transaction before the server ends it, unless the
/// options say otherwise. The writer holds its transaction open only while it reads what other
/// nodes committed and plans its group, which takes milliseconds.
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(15);

/// The channel `ledger_advance_head` notifies when a group commits.
const APPENDED_CHANNEL: &str = "ledger_appended";

/// A name for this backend, unlike any other's: 16 random bytes as hex.
fn node_name() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // Unlike other nodes' all the same: they run elsewhere or with another pid or time.
        let fallback = format!("{:?}/{}", std::time::SystemTime::now(), std::process::id());
        bytes.copy_from_slice(&blake3::hash(fallback.as_bytes()).as_bytes()[..16]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What every session of one backend is opened with.
#[derive(Debug)]
struct Setup {
    connector: Connector,
    idle_in_transaction: Duration,
    /// Names this backend in the notifications its commits send, so that it does not wake
    /// itself for them.
    node: String,
    /// The schema the open found keeps the Merkle nodes packed ([`schema::PACKED_FROM`]):
    /// always once a writable open migrated it.
    packed: bool,
}

/// The statements a session prepares once.
#[derive(Debug)]
struct Statements {
    lock_head: Statement,
    /// Only on the writer's session: a database opened read-only may predate the function.
    advance_head: Option<Statement>,
    insert_events: Statement,
    insert_keys: Statement,
    /// Only on the writer's session, which the latest schema is there for.
    insert_nodes: Option<Statement>,
    insert_content: Statement,
    read_range: Statement,
    read_stream: Statement,
    stream_version: Statement,
    find_id: Statement,
    find_hash: Statement,
    key: Statement,
    merkle_node: MerkleRead,
    read_blob: Statement,
}

/// How a session reads a Merkle node: the schema it opened on decides.
#[derive(Debug)]
enum MerkleRead {
    /// The row of `ledger_merkle_groups` that holds it ([`schema::PACKED_FROM`] on).
    Packed(Statement),
    /// Its own row of `ledger_merkle_nodes`, on a database opened read-only at an older
    /// version.
    Rows(Statement),
}

/// The SQL of each prepared statement.
mod sql {
    pub(super) const LOCK_HEAD: &str =
        "SELECT size, last_hash FROM ledger_head WHERE id = 1 FOR UPDATE";
    pub(super) const ADVANCE_HEAD: &str = "SELECT ledger_advance_head($1, $2, $3, $4, $5, \
        $6::text[], $7::int8[])";
    pub(super) const INSERT_EVENTS: &str = "INSERT INTO ledger_events \
        (seq, stream, stream_version, event_id, hash, bytes) SELECT * FROM unnest($1::int8[], \
        $2::text[], $3::int8[], $4::uuid[], $5::bytea[], $6::bytea[])";
    pub(super) const INSERT_KEYS: &str = "INSERT INTO ledger_idempotency \
        (key, fingerprint, stream, first_seq, event_count, stream_version) SELECT * FROM \
        unnest($1::text[], $2::bytea[], $3::text[], $4::int8[], $5::int4[], $6::int8[])";
    /// The rows of `ledger_merkle_groups` in `$1` (keys) and `$2` (nodes), as both a group
    /// and a rebuild insert them.
    macro_rules! insert_nodes {
        () => {
            "INSERT INTO ledger_merkle_groups (size, nodes) \
             SELECT * FROM unnest($1::int8[], $2::bytea[]) ON CONFLICT (size) DO UPDATE \
             SET nodes = EXCLUDED.nodes \
             WHERE length(EXCLUDED.nodes) > length(ledger_merkle_groups.nodes)"
        };
    }
    /// Rows under one key end at the same leaf and hold every node completed from their
    /// growth's start up to it, so of two rows under a key the longer holds the other: it is
    /// the one kept. (A growth that started after a clear of the nodes, on another node,
    /// may have stored the shorter one first.)
    pub(super) const INSERT_NODES: &str = insert_nodes!();
    /// The nodes of a growth from leaf $4 to tree size $3, in one statement (one
    /// transaction), and the stored size raised to $3 when the growth starts within it: every
    /// node below the stored size is stored, whatever other nodes cleared or grew meanwhile
    /// (as a group's head update does, migration 5). Conflicts as in [`INSERT_NODES`].
    pub(super) const PUT_NODES: &str = concat!(
        "WITH put AS (",
        insert_nodes!(),
        ") UPDATE ledger_head SET merkle_size = $3 \
         WHERE id = 1 AND merkle_size >= $4 AND merkle_size < $3"
    );
    /// A blob already stored with the same bytes is left as it is; one whose stored bytes
    /// differ (damaged: the hash names the bytes) is replaced by the bytes given.
    pub(super) const INSERT_CONTENT: &str = "INSERT INTO content_blobs (hash, bytes) \
        SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT (hash) DO UPDATE \
        SET bytes = EXCLUDED.bytes WHERE content_blobs.bytes IS DISTINCT FROM EXCLUDED.bytes";
    pub(super) const READ_BLOB: &str = "SELECT bytes FROM content_blobs WHERE hash = $1";
    pub(super) const READ_RANGE: &str =
        "SELECT seq, bytes FROM ledger_events WHERE seq >= $1 ORDER BY seq LIMIT $2";
    pub(super) const READ_STREAM: &str = "SELECT seq, bytes FROM ledger_events \
        WHERE stream = $1 AND stream_version >= $2 ORDER BY stream_version LIMIT $3";
    pub(super) const STREAM_VERSION: &str =
        "SELECT coalesce(max(stream_version), 0) FROM ledger_events WHERE stream = $1";
    pub(super) const FIND_ID: &str = "SELECT seq, bytes FROM ledger_events WHERE event_id = $1";
    pub(super) const FIND_HASH: &str = "SELECT seq, bytes FROM ledger_events WHERE hash = $1";
    pub(super) const KEY: &str = "SELECT key, fingerprint, stream, first_seq, event_count, \
        stream_version FROM ledger_idempotency WHERE key = $1";
    /// The first row at or above a node's end ($1), and its key: the row that holds the node,
    /// but for a growth on another node racing a clear (`MERKLE_NODE_AFTER`).
    pub(super) const MERKLE_NODE: &str =
        "SELECT size, nodes FROM ledger_merkle_groups WHERE size >= $1 ORDER BY size LIMIT 1";
    /// The rows after the first one read ($1, its key) and below the bound of the keys any
    /// growth files the node under ($2): where the node is when that first row does not hold
    /// it.
    pub(super) const MERKLE_NODE_AFTER: &str = "SELECT nodes FROM ledger_merkle_groups \
        WHERE size > $1 AND size < $2 ORDER BY size";
    /// A node of a database before schema version 4, one row a node.
    pub(super) const MERKLE_NODE_ROW: &str =
        "SELECT hash FROM ledger_merkle_nodes WHERE level = $1 AND idx = $2";
}

impl Statements {
    async fn prepare(
        client: &Client,
        writes: bool,
        packed: bool,
    ) -> Result<Statements, tokio_postgres::Error> {
        Ok(Statements {
            lock_head: client.prepare(sql::LOCK_HEAD).await?,
            advance_head: match writes {
                true => Some(client.prepare(sql::ADVANCE_HEAD).await?),
                false => None,
            },
            insert_events: client.prepare(sql::INSERT_EVENTS).await?,
            insert_keys: client.prepare(sql::INSERT_KEYS).await?,
            insert_nodes: match writes {
                true => Some(client.prepare(sql::INSERT_NODES).await?),
                false => None,
            },
            insert_content: client.prepare(sql::INSERT_CONTENT).await?,
            read_range: client.prepare(sql::READ_RANGE).await?,
            read_stream: client.prepare(sql::READ_STREAM).await?,
            stream_version: client.prepare(sql::STREAM_VERSION).await?,
            find_id: client.prepare(sql::FIND_ID).await?,
            find_hash: client.prepare(sql::FIND_HASH).await?,
            key: client.prepare(sql::KEY).await?,
            merkle_node: match packed {
                true => MerkleRead::Packed(client.prepare(sql::MERKLE_NODE).await?),
                false => MerkleRead::Rows(client.prepare(sql::MERKLE_NODE_ROW).await?),
            },
            read_blob: client.prepare(sql::READ_BLOB).await?,
        })
    }
}

/// One connection with its prepared statements.
#[derive(Debug)]
struct Session {
    client: Client,
    st: Statements,
}

/// A connection that is opened again when it is found closed.
#[derive(Debug)]
struct Link {
    setup: Arc<Setup>,
    /// The session appends: it prepares the statements that write.
    writes: bool,
    slot: tokio::sync::Mutex<Option<Arc<Session>>>,
}

impl Link {
    fn new(setup: Arc<Setup>, writes: bool) -> Link {
        Link {
            setup,
            writes,
            slot: tokio::sync::Mutex::new(None),
        }
    }

    async fn session(&self) -> Result<Arc<Session>, StorageError> {
        let mut slot = self.slot.lock().await;
        if let Some(session) = &*slot
            && !session.client.is_closed()
        {
            return Ok(Arc::clone(session));
        }
        *slot = None;
        let session = Arc::new(connect(&self.setup, self.writes).await?);
        *slot = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Forgets the session after an error that may have broken it (a rollback that failed).
    async fn forget(&self) {
        *self.slot.lock().await = None;
    }

    /// Forgets `session` if it is still this link's, so that the next use connects anew.
    async fn forget_session(&self, session: &Arc<Session>) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *slot = None;
        }
    }
}

/// Opens a session and sets it up. A session the server cut while it was being set up (a
/// failover, an administrator terminating every session, each reconnecting at once) had
/// nothing done on it yet: it is opened once more, rather than failing the read or the group
/// that needed it.
async fn connect(setup: &Setup, writes: bool) -> Result<Session, StorageError> {
    match connect_once(setup, writes).await {
        Err(Opened::Cut(e)) => {
            tracing::debug!(error = %e, "a new database session was cut while it was set up; it is opened again");
            connect_once(setup, writes)
                .await
                .map_err(Opened::into_error)
        }
        done => done.map_err(Opened::into_error),
    }
}

/// Why a session could not be opened.
enum Opened {
    /// The server cut it after it connected, while it was being set up.
    Cut(StorageError),
    /// Anything else: the server refused or could not be reached, or refused the setup.
    Failed(StorageError),
}

impl Opened {
    fn into_error(self) -> StorageError {
        match self {
            Opened::Cut(e) | Opened::Failed(e) => e,
        }
    }
}

async fn connect_once(setup: &Setup, writes: bool) -> Result<Session, Opened> {
    let (client, connection) = setup
        .connector
        .connect()
        .await
        .map_err(|e| Opened::Failed(db_error("connect", &e)))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a database connection closed");
        }
    });
    let st = match set_up(&client, setup, writes).await {
        Ok(st) => st,
        Err(e) if pg_connect::is_lost(&client).await => return Err(Opened::Cut(e)),
        Err(e) => return Err(Opened::Failed(e)),
    };
    Ok(Session { client, st })
}

/// The session's settings and its prepared statements.
async fn set_up(client: &Client, setup: &Setup, writes: bool) -> Result<Statements, StorageError> {
    // Acknowledgement waits for the commit to be flushed (and, with a synchronous standby, for
    // the standby), whatever the server's default says.
    // A node that stops answering while it holds the head row (paused, its network cut) loses
    // the lock, and its open transaction, after `idle_in_transaction`, instead of stopping every
    // other node's writes until its connection is found dead.
    // `ledger.node` names the node in the notifications its commits send.
    client
        .batch_execute(&format!(
            "SET synchronous_commit TO on; SET idle_in_transaction_session_timeout TO {}; \
             SET ledger.node TO '{}'",
            setup.idle_in_transaction.as_millis().max(1),
            setup.node
        ))
        .await
        .map_err(|e| db_error("set the session's settings", &e))?;
    Statements::prepare(client, writes, setup.packed)
        .await
        .map_err(|e| match setup.packed {
            // A session of a read-only open at an older schema, made again after a writer
            // migrated the database: the table it reads nodes from is gone.
            false if is_undefined_table(&e) => moved_nodes(),
            _ => db_error("prepare statements", &e),
        })
}

fn is_undefined_table(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
}

/// What a read-only open at a schema before [`schema::PACKED_FROM`] meets once a writer
/// migrated the database under it.
fn moved_nodes() -> StorageError {
    StorageError::Failed(format!(
        "the database's Merkle nodes were moved to schema version {} after this read-only \
         open: open it again",
        schema::PACKED_FROM
    ))
}

/// The runtime that drives the driver, and a way to wait for it from synchronous code.
#[derive(Debug)]
struct Driver {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Driver {
    fn new() -> Result<Driver, StorageError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ledger-postgres")
            .enable_all()
            .build()
            .map_err(|e| StorageError::io("start the database runtime", "", e))?;
        Ok(Driver {
            runtime: Some(runtime),
        })
    }

    /// Runs `work` on the driver's runtime without waiting for it; it ends with the runtime.
    fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Some(runtime) = &self.runtime {
            runtime.spawn(work);
        }
    }

    /// Runs `work` on the driver's runtime and waits for it.
    fn run<T, F>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StorageError>> + Send + 'static,
    {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| StorageError::Failed("the database runtime has stopped".into()))?;
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|_| StorageError::Failed("the database runtime has stopped".into()))?
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Without waiting: the backend may be dropped inside another runtime, where a blocking
        // shutdown is not allowed. Nothing is left in flight: every call waited for its work.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The connections of one backend.
#[derive(Debug)]
struct Pool {
    writer: Link,
    readers: Vec<Link>,
    next: AtomicUsize,
    /// The session that holds (or tries for) the checkpoint lead.
    lead: Lead,
}

/// The advisory lock whose holder writes the periodic checkpoints ("rl-lead" in ASCII).
const LEAD_LOCK: i64 = 0x0072_6c2d_6c65_6164;

/// A session of its own that holds the checkpoint lead's session-level advisory lock while it
/// lives: a node that dies, or whose connection breaks, lets it go with the session, and the
/// next node to ask takes it.
#[derive(Debug)]
struct Lead {
    connector: Arc<Connector>,
    /// The session, and whether it holds the lock.
    slot: tokio::sync::Mutex<Option<(Client, bool)>>,
}

impl Lead {
    /// Whether this backend holds the lead now, taking it if it is free.
    async fn hold(&self) -> Result<bool, StorageError> {
        let mut slot = self.slot.lock().await;
        if let Some((client, held)) = &*slot {
            if client.is_closed() {
                *slot = None;
            } else if *held {
                // The lock lives as long as the session: a session that still answers holds it.
                if client.simple_query("SELECT 1").await.is_ok() {
                    return Ok(true);
                }
                *slot = None;
            }
        }
        if slot.is_none() {
            let (client, connection) = self
                .connector
                .connect()
                .await
                .map_err(|e| db_error("connect for the checkpoint lead", &e))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            *slot = Some((client, false));
        }
        let Some((client, held)) = slot.as_mut() else {
            return Ok(false);
        };
        let row = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&LEAD_LOCK])
            .await;
        match row {
            Ok(row) => {
                *held = row.get(0);
                Ok(*held)
            }
            Err(e) => {
                *slot = None;
                Err(db_error("take the checkpoint lead", &e))
            }
        }
    }
}

impl Lead {
    /// Lets go of the lead: the session that holds the lock is closed, and the lock with it.
    async fn resign(&self) {
        let mut slot = self.slot.lock().await;
        if slot.as_ref().is_some_and(|(_, held)| *held) {
            *slot = None;
        }
    }
}

impl Pool {
    fn reader(&self) -> &Link {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.readers.len().max(1);
        self.readers.get(i).unwrap_or(&self.writer)
    }
}

/// The PostgreSQL backend. See the module documentation.
#[derive(Debug)]
pub struct PostgresStorage {
    driver: Driver,
    pool: Arc<Pool>,
    setup: Arc<Setup>,
    head: Mutex<ChainHead>,
    /// What the head row said at open, when it said more than the events hold.
    claimed: u64,
    problems: Vec<StorageProblem>,
    read_only: bool,
    /// Group commits committed since the backend opened: each one durable commit.
    syncs: AtomicU64,
}

impl PostgresStorage {
    /// Connects to the database at `url` (`postgres://USER@HOST:PORT/DB`), applies the schema's
    /// migrations (unless read-only) and reads the head of the chain. A head row that claims
    /// more or other events than the table holds is a problem: the ledger then refuses appends.
    pub fn open(url: &str, options: PostgresOptions) -> Result<PostgresStorage, StorageError> {
        let mut connector = read_url(url)?;
        let config = connector.config_mut();
        config.application_name(&options.application_name);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        let driver = Driver::new()?;
        let read_only = options.read_only;
        let connector = Arc::new(connector);
        let config_for_setup = Arc::clone(&connector);
        let opened =
            driver.run(async move { opening_state(&config_for_setup, read_only).await })?;
        let setup = Arc::new(Setup {
            connector: Connector::clone(&connector),
            idle_in_transaction: options.idle_in_transaction,
            node: node_name(),
            packed: opened.schema >= schema::PACKED_FROM,
        });
        let pool = Arc::new(Pool {
            writer: Link::new(Arc::clone(&setup), !options.read_only),
            readers: (0..options.read_connections.max(1))
                .map(|_| Link::new(Arc::clone(&setup), false))
                .collect(),
            next: AtomicUsize::new(0),
            lead: Lead {
                connector: Arc::clone(&connector),
                slot: tokio::sync::Mutex::new(None),
            },
        });
        let problems = opening_problems(&opened);
        let OpeningState { claimed, head, .. } = opened;
        let storage = PostgresStorage {
            driver,
            pool,
            setup,
            head: Mutex::new(head),
            claimed,
            read_only: read_only || !problems.is_empty(),
            problems,
            syncs: AtomicU64::new(0),
        };
        // The prepared sessions, now that the schema exists.
        let pool = Arc::clone(&storage.pool);
        storage.driver.run(async move {
            if !read_only {
                pool.writer.session().await?;
            }
            pool.reader().session().await.map(|_| ())
        })?;
        Ok(storage)
    }

    /// Records the head a group this backend committed made, and the commit.
    fn set_head(&self, next: ChainHead) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        *self.head.lock().unwrap_or_else(|p| p.into_inner()) = next;
    }

    fn refuse_writes(&self) -> Result<(), StorageError> {
        if self.read_only {
            return Err(StorageError::Failed(
                "the ledger's database was opened read-only or holds a problem".into(),
            ));
        }
        Ok(())
    }

    /// Runs `work` on one of the reader sessions. A read that meets a session the server cut
    /// (every session is, in a failover) runs once more on a new one: reads change nothing, so
    /// running one again is safe, and the caller sees the answer rather than the cut.
    fn read<T, F, Fut>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: Fn(Arc<Session>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send,
    {
        let pool = Arc::clone(&self.pool);
        self.driver.run(async move {
            let link = pool.reader();
            let session = link.session().await?;
            match work(Arc::clone(&session)).await {
                Err(e) if pg_connect::is_lost(&session.client).await => {
                    tracing::debug!(
                        error = %e,
                        "a read met a cut database session; it runs again on a new one"
                    );
                    link.forget_session(&session).await;
                    let session = link.session().await?;
                    work(session).await
                }
                done => done,
            }
        })
    }

    /// Runs `work` in a transaction on the writer's session, holding the head row's lock, and
    /// commits it when it succeeds. A failure before the commit rolls back (nothing written);
    /// a failure of the commit itself leaves its outcome unknown.
    fn write<T, F, Fut>(&self, work: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Session>, ChainHead) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StorageError>> + Send,
    {
        let pool = Arc::clone(&self.pool);
        self.driver.run(async move {
            let session = pool.writer.session().await?;
            let done = match lock_head(&session).await {
                Ok(head) => work(Arc::clone(&session), head).await,
                Err(e) => Err(e),
            };
            finish(&pool, &session, done).await
        })
    }

    /// Begins a transaction on the writer's session and locks the head row in it.
    fn hold(&self) -> Result<Held<'_>, StorageError> {
        self.refuse_writes()?;
        let pool = Arc::clone(&self.pool);
        let (session, head) = self.driver.run(async move {
            let session = pool.writer.session().await?;
            match lock_head(&session).await {
                Ok(head) => Ok((session, head)),
                Err(e) => finish(&pool, &session, Err(e)).await,
            }
        })?;
        Ok(Held {
            storage: self,
            session: Some(session),
            head,
        })
    }
}

impl PostgresStorage {
    /// Appends `entry` to the checkpoint log, under the head's lock so that the log's order is
    /// the order its entries were committed in, on every node; with `only_first`, only into an
    /// empty log. Answers whether it was appended.
    fn insert_checkpoint_entry(
        &self,
        entry: &CheckpointEntry,
        only_first: bool,
    ) -> Result<bool, StorageError> {
        // While the backend refuses to write, nothing is recorded: the evidence of a problem is
        // never buried under new checkpoints (this backend neither cuts nor accepts losses).
        self.refuse_writes()?;
        let line = serde_json::to_string(entry)
            .map_err(|e| StorageError::Index(format!("checkpoint entry: {e}")))?;
        self.write(move |s, _| async move {
            let inserted = s
                .client
                .execute(
                    "INSERT INTO ledger_checkpoints (n, entry) \
                     SELECT coalesce(max(n), 0) + 1, $1 FROM ledger_checkpoints \
                     HAVING NOT $2 OR count(*) = 0",
                    &[&line, &only_first],
                )
                .await
                .map_err(|e| db_error("append to the checkpoint log", &e))?;
            Ok(inserted == 1)
        })
    }
}

/// Begins a transaction and locks the head row, answering the head.
async fn lock_head(session: &Session) -> Result<ChainHead, StorageError> {
    let (begun, locked) = tokio::join!(
        session.client.batch_execute("BEGIN"),
        session.client.query_one(&session.st.lock_head, &[]),
    );
    begun.map_err(|e| db_error("begin", &e))?;
    let row = locked.map_err(|e| db_error("lock the head", &e))?;
    Ok(ChainHead {
        size: to_u64(row.get(0), "the head's size")?,
        last_hash: digest(row.get(1), "the head's hash")?,
    })
}

/// Commits the writer's transaction when `done` succeeded, and rolls it back otherwise (a
/// session whose rollback fails is forgotten, so the next use opens another).
async fn finish<T>(
    pool: &Pool,
    session: &Session,
    done: Result<T, StorageError>,
) -> Result<T, StorageError> {
    match done {
        Ok(value) => {
            session
                .client
                .batch_execute("COMMIT")
                .await
                .map_err(|e| db_error("commit", &e))?;
            Ok(value)
        }
        Err(e) => {
            if session.client.batch_execute("ROLLBACK").await.is_err() {
                pool.writer.forget().await;
            }
            Err(e)
        }
    }
}

/// The head row locked in an open transaction of the writer's session.
struct Held<'a> {
    storage: &'a PostgresStorage,
    /// Taken by the append; a hold dropped with it still here rolls back.
    session: Option<Arc<Session>>,
    head: ChainHead,
}

impl HeldHead for Held<'_> {
    fn head(&self) -> ChainHead {
        self.head
    }

    fn append(
        mut self: Box<Self>,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        let Some(session) = self.session.take() else {
            return Err(StorageError::Failed(
                "the head's hold was used already".into(),
            ));
        };
        let pool = Arc::clone(&self.storage.pool);
        let group = match GroupRows::of(commits, content, tree, self.head) {
            Ok(Some(group)) if group.expected == self.head => group,
            unwritten => {
                // Nothing to write, or planned on another head: let go, having written nothing.
                self.storage
                    .driver
                    .run(async move { roll_back(&pool, &session).await })?;
                return match unwritten {
                    Ok(Some(_)) => Err(StorageError::HeadMoved),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
            }
        };
        let next = group.next;
        // The lock is held already: the rows and the `COMMIT` go in one round trip.
        self.storage
            .driver
            .run(async move { write_group(&pool, &session, &group, Begin::Held).await })?;
        self.storage.set_head(next);
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let pool = Arc::clone(&self.storage.pool);
            // Nothing was written.
            let _ = self
                .storage
                .driver
                .run(async move { roll_back(&pool, &session).await });
        }
    }
}

/// Rolls back the writer's open transaction; a session whose rollback fails is forgotten, so
/// that the next use opens another instead of writing into a transaction left open.
async fn roll_back(pool: &Pool, session: &Session) -> Result<(), StorageError> {
    if let Err(e) = session.client.batch_execute("ROLLBACK").await {
        pool.writer.forget().await;
        return Err(db_error("roll back", &e));
    }
    Ok(())
}

/// How long the listener waits before it connects again after its session failed; the
/// followers' poll goes on meanwhile.
const LISTEN_RETRY: Duration = Duration::from_secs(1);

/// Calls `wake` for every group another node commits, for as long as the runtime runs:
/// `ledger_advance_head` notifies `ledger_appended` at each commit, naming the new size and
/// the node. A session that fails is opened again; once it listens, `wake` is called once for
/// whatever was committed while none did.
async fn listen(setup: Arc<Setup>, wake: Arc<dyn Fn() + Send + Sync>) {
    loop {
        if let Err(e) = listen_once(&setup, &*wake).await {
            tracing::debug!(error = %e, "not listening for other nodes' appends; polling only");
        }
        tokio::time::sleep(LISTEN_RETRY).await;
    }
}

async fn listen_once(setup: &Setup, wake: &(dyn Fn() + Send + Sync)) -> Result<(), StorageError> {
    let (client, mut connection) = setup
        .connector
        .connect()
        .await
        .map_err(|e| db_error("connect to listen", &e))?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {APPENDED_CHANNEL}"))
        .await
        .map_err(|e| db_error("listen for appends", &e))?;
    wake();
    while let Some(payload) = rx.recv().await {
        // This node's own commits need no following.
        if payload
            .split_once(' ')
            .is_none_or(|(_, node)| node != setup.node)
        {
            wake();
        }
    }
    Err(StorageError::Database {
        op: "listen for appends",
        detail: "the session closed".into(),
    })
}

/// The storage URL read, with the TLS it asks for (`sslmode`, `sslrootcert`).
fn read_url(url: &str) -> Result<Connector, StorageError> {
    Connector::parse(url).map_err(|e| StorageError::Database {
        op: "read the storage URL",
        detail: e.to_string(),
    })
}

/// The ledger schema version the database at `url` holds: 0 when it holds no ledger.
pub fn schema_version(url: &str) -> Result<i32, StorageError> {
    let mut connector = read_url(url)?;
    let config = connector.config_mut();
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(PostgresOptions::default().connect_timeout);
    }
    Driver::new()?.run(async move {
        let (client, connection) = connector
            .connect()
            .await
            .map_err(|e| db_error("connect", &e))?;
        tokio::spawn(connection);
        schema::current(&client).await
    })
}

/// What an open reads before it trusts the database.
struct OpeningState {
    /// The schema version, after the migrations of a writable open.
    schema: i32,
    fsync: String,
    claimed: u64,
    claimed_hash: Digest,
    head: ChainHead,
}

/// Brings the schema up to date (or checks it, read-only) and reads the server's `fsync`, the
/// head row and the last event, on a plain session: the prepared ones need the schema first.
async fn opening_state(
    connector: &Connector,
    read_only: bool,
) -> Result<OpeningState, StorageError> {
    let (client, connection) = connector
        .connect()
        .await
        .map_err(|e| db_error("connect", &e))?;
    tokio::spawn(connection);
    let schema = if read_only {
        // Every version since the second holds the tables reads use (the content blobs came
        // with it); only writes need the latest, and a read-only open writes nothing,
        // migrations included.
        let found = schema::current(&client).await?;
        if found < schema::READABLE_FROM || found > schema::latest() {
            return Err(StorageError::Failed(format!(
                "the database holds ledger schema version {found}, this program reads {} to {}{}",
                schema::READABLE_FROM,
                schema::latest(),
                if found < schema::READABLE_FROM && found > 0 {
                    "; open it once to write (serve, or any command that writes) to migrate it"
                } else {
                    ""
                }
            )));
        }
        found
    } else {
        schema::migrate(&client).await?;
        schema::latest()
    };
    let fsync: String = client
        .query_one("SHOW fsync", &[])
        .await
        .map_err(|e| db_error("read fsync", &e))?
        .get(0);
    let row = client
        .query_one("SELECT size, last_hash FROM ledger_head WHERE id = 1", &[])
        .await
        .map_err(|e| db_error("read the head", &e))?;
    let claimed = to_u64(row.get(0), "the head's size")?;
    let claimed_hash = digest(row.get(1), "the head's hash")?;
    let tail = client
        .query_opt(
            "SELECT seq, hash FROM ledger_events ORDER BY seq DESC LIMIT 1",
            &[],
        )
        .await
        .map_err(|e| db_error("read the last event", &e))?;
    let head = match tail {
        None => ChainHead::default(),
        Some(row) => ChainHead {
            size: to_u64(row.get(0), "a seq")? + 1,
            last_hash: digest(row.get(1), "an event's hash")?,
        },
    };
    Ok(OpeningState {
        schema,
        fsync,
        claimed,
        claimed_hash,
        head,
    })
}

/// What is wrong with what an open read: a server without `fsync`, a head row that records
/// more, fewer or other events than the table holds.
fn opening_problems(state: &OpeningState) -> Vec<StorageProblem> {
    let OpeningState {
        fsync,
        claimed,
        claimed_hash,
        head,
        ..
    } = state;
    let (claimed, head) = (*claimed, *head);
    let mut problems = Vec::new();
    if fsync != "on" {
        problems.push(StorageProblem {
            seq: None,
            detail: format!(
                "the database server runs with fsync = {fsync}: a committed append would not \
                 be durable, so none is made"
            ),
        });
    }
    if claimed > head.size {
        problems.push(StorageProblem {
            seq: Some(head.size),
            detail: format!(
                "the database's head row records {claimed} events but its events table ends at \
                 {}",
                head.size
            ),
        });
    } else if claimed < head.size {
        problems.push(StorageProblem {
            seq: Some(claimed),
            detail: format!(
                "the events table holds events up to seq {} beyond the {claimed} its head row \
                 records",
                head.size - 1
            ),
        });
    } else if *claimed_hash != head.last_hash {
        problems.push(StorageProblem {
            seq: head.size.checked_sub(1),
            detail: "the last event's hash is not the one the database's head row records".into(),
        });
    }
    problems
}

/// The columns of a group's events, idempotency records and nodes, as arrays for `unnest`.
#[derive(Default)]
struct Rows {
    seq: Vec<i64>,
    stream: Vec<String>,
    version: Vec<i64>,
    id: Vec<Uuid>,
    hash: Vec<Vec<u8>>,
    bytes: Vec<Vec<u8>>,
    key: Vec<String>,
    fingerprint: Vec<Vec<u8>>,
    key_stream: Vec<String>,
    first_seq: Vec<i64>,
    count: Vec<i32>,
    key_version: Vec<i64>,
    /// The rows of `ledger_merkle_groups` the group's nodes are packed into: one, or two
    /// when the group crosses a multiple of
    /// [`MERKLE_ENTRY_LEAVES`](super::merkle_entries::MERKLE_ENTRY_LEAVES) leaves.
    node_size: Vec<i64>,
    nodes: Vec<Vec<u8>>,
    /// The content blobs, each once (one `INSERT … ON CONFLICT DO UPDATE` may not touch a row
    /// twice).
    blob_hash: Vec<Vec<u8>>,
    blob_bytes: Vec<Vec<u8>>,
    /// Each stream the group writes, and its version before the group.
    streams: Vec<String>,
    bases: Vec<i64>,
}

impl Rows {
    fn of(commits: &[Commit], content: &[Blob], tree: &TreeGrowth) -> Result<Rows, StorageError> {
        let mut rows = Rows::default();
        for blob in content {
            let hash = blob.hash.as_bytes().to_vec();
            if !rows.blob_hash.contains(&hash) {
                rows.blob_hash.push(hash);
                rows.blob_bytes.push(blob.bytes.to_vec());
            }
        }
        for commit in commits {
            if !rows.streams.contains(&commit.stream) {
                rows.streams.push(commit.stream.clone());
                rows.bases
                    .push(to_i64(commit.base_version, "a stream version")?);
            }
            rows.add_events(commit)?;
            if let Some(record) = &commit.idempotency {
                rows.add_key(record)?;
            }
        }
        for (size, nodes) in MerkleEntries::pack(&tree.nodes, tree.size) {
            rows.node_size.push(to_i64(size, "a tree size")?);
            rows.nodes.push(nodes);
        }
        Ok(rows)
    }

    fn add_events(&mut self, commit: &Commit) -> Result<(), StorageError> {
        for event in &commit.events {
            self.seq.push(to_i64(event.seq, "a seq")?);
            self.stream.push(commit.stream.clone());
            self.version
                .push(to_i64(event.stream_version, "a stream version")?);
            self.id.push(event.event_id);
            self.hash.push(event.hash.as_bytes().to_vec());
            self.bytes.push(event.bytes.to_vec());
        }
        Ok(())
    }

    fn add_key(&mut self, record: &IdempotencyRecord) -> Result<(), StorageError> {
        self.key.push(record.key.clone());
        self.fingerprint
            .push(record.fingerprint.as_bytes().to_vec());
        self.key_stream.push(record.stream.clone());
        self.first_seq.push(to_i64(record.first_seq, "a seq")?);
        self.count.push(
            i32::try_from(record.event_count)
                .map_err(|_| StorageError::Failed("a commit of more than 2^31 events".into()))?,
        );
        self.key_version
            .push(to_i64(record.stream_version, "a stream version")?);
        Ok(())
    }
}

/// A group ready to be written: the head it was planned on, the head it makes, and its rows,
/// each already as the statements take it, so that nothing can fail between the statements
/// of the group's pipeline but the statements themselves.
struct GroupRows {
    /// False for a group of content alone: it leaves the head where it is.
    has_events: bool,
    expected: ChainHead,
    next: ChainHead,
    rows: Rows,
    merkle_size: i64,
    expected_size: i64,
    expected_hash: Vec<u8>,
    new_size: i64,
    new_hash: Vec<u8>,
}

impl GroupRows {
    /// The group of `commits` and `content` (`None` when they hold neither an event nor a
    /// blob): the head the commits were computed against is the first event's seq and
    /// `prev_hash`; a group of content alone is written on `head` and leaves it there.
    fn of(
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
        head: ChainHead,
    ) -> Result<Option<GroupRows>, StorageError> {
        let (Some(first), Some(last)) = (
            commits.iter().find_map(|c| c.events.first()),
            commits.iter().rev().find_map(|c| c.events.last()),
        ) else {
            if content.is_empty() {
                return Ok(None);
            }
            let size = to_i64(head.size, "a size")?;
            return Ok(Some(GroupRows {
                has_events: false,
                expected: head,
                next: head,
                rows: Rows::of(commits, content, tree)?,
                merkle_size: to_i64(tree.size, "a tree size")?,
                expected_size: size,
                expected_hash: head.last_hash.as_bytes().to_vec(),
                new_size: size,
                new_hash: head.last_hash.as_bytes().to_vec(),
            }));
        };
        Ok(Some(GroupRows {
            has_events: true,
            expected: ChainHead {
                size: first.seq,
                last_hash: first.prev_hash,
            },
            next: ChainHead {
                size: last.seq + 1,
                last_hash: last.hash,
            },
            rows: Rows::of(commits, content, tree)?,
            merkle_size: to_i64(tree.size, "a tree size")?,
            expected_size: to_i64(first.seq, "a size")?,
            expected_hash: first.prev_hash.as_bytes().to_vec(),
            new_size: to_i64(last.seq + 1, "a size")?,
            new_hash: last.hash.as_bytes().to_vec(),
        }))
    }
}

/// How a group's transaction is begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Begin {
    /// In the group's own pipeline: its conditional head update takes the head row's lock.
    Open,
    /// Already, holding the head row's lock ([`Storage::hold_head`]).
    Held,
}

/// Writes a group in one round trip: `BEGIN` (unless the transaction holds the lock already),
/// the head moved on condition that it is the head the group was planned on and that every
/// stream is at the version the group was planned on (`ledger_advance_head`, which takes the
/// head row's lock first; a group of content alone moves nothing), the content blobs the
/// events cite, the events, the idempotency records, the Merkle nodes, and `COMMIT`,
/// pipelined: one commit makes the events and their content durable together. A statement that fails aborts the transaction, and the server then
/// answers the `COMMIT` with a rollback: nothing of the group is written, and a head or a
/// stream found elsewhere is [`StorageError::HeadMoved`]. Only a `COMMIT` that fails itself
/// (the connection lost) leaves the outcome unknown. Every statement after `BEGIN` is a
/// prepared one, sent on its first poll, so `join!` sends them in this order. The driver could
/// fail a statement before sending it only on parameters of the wrong type, which these fixed
/// statements do not take; were it to happen, the `COMMIT` would commit a partial group, and
/// the head row would then disagree with the events, which the next locked group and every
/// open report instead of writing on.
async fn write_group(
    pool: &Pool,
    session: &Session,
    group: &GroupRows,
    begin: Begin,
) -> Result<(), StorageError> {
    let c = &session.client;
    let (Some(advance), Some(insert)) = (&session.st.advance_head, &session.st.insert_nodes) else {
        return Err(StorageError::Failed(
            "this session was opened to read, not to write".into(),
        ));
    };
    let (begun, advanced, content, events, keys, nodes, committed) = tokio::join!(
        async {
            match begin {
                Begin::Open => c.batch_execute("BEGIN").await,
                Begin::Held => Ok(()),
            }
        },
        async {
            match group.has_events {
                true => advance_head(session, advance, group).await,
                false => Ok(()),
            }
        },
        insert_content(session, &group.rows),
        insert_events(session, &group.rows),
        insert_keys(session, &group.rows),
        insert_nodes(session, insert, &group.rows),
        c.batch_execute("COMMIT"),
    );
    if committed.is_err() {
        // The session may be gone or in a state nobody knows: the next write opens another.
        pool.writer.forget().await;
    }
    // The first failure is the one to report: every later statement failed because of it.
    begun.map_err(|e| db_error("begin", &e))?;
    advanced?;
    content.map_err(|e| db_error("insert content blobs", &e))?;
    events.map_err(|e| db_error("insert events", &e))?;
    keys.map_err(|e| db_error("insert idempotency records", &e))?;
    nodes.map_err(|e| db_error("insert Merkle nodes", &e))?;
    committed.map_err(|e| db_error("commit", &e))?;
    Ok(())
}

/// `ledger_advance_head` for `group`: the head moved to the group's, on condition that it and
/// every stream the group writes are where the group was planned.
async fn advance_head(
    session: &Session,
    advance: &Statement,
    group: &GroupRows,
) -> Result<(), StorageError> {
    let params: [&(dyn ToSql + Sync); 7] = [
        &group.expected_size,
        &group.expected_hash,
        &group.new_size,
        &group.new_hash,
        &group.merkle_size,
        &group.rows.streams,
        &group.rows.bases,
    ];
    session
        .client
        .execute(advance, &params)
        .await
        .map(|_| ())
        .map_err(|e| moved_or("move the head", &e))
}

async fn insert_content(session: &Session, rows: &Rows) -> Result<u64, tokio_postgres::Error> {
    if rows.blob_hash.is_empty() {
        return Ok(0);
    }
    session
        .client
        .execute(
            &session.st.insert_content,
            &[&rows.blob_hash, &rows.blob_bytes],
        )
        .await
}

async fn insert_events(session: &Session, rows: &Rows) -> Result<u64, tokio_postgres::Error> {
    if rows.seq.is_empty() {
        return Ok(0);
    }
    let params: [&(dyn ToSql + Sync); 6] = [
        &rows.seq,
        &rows.stream,
        &rows.version,
        &rows.id,
        &rows.hash,
        &rows.bytes,
    ];
    session
        .client
        .execute(&session.st.insert_events, &params)
        .await
}

async fn insert_keys(session: &Session, rows: &Rows) -> Result<u64, tokio_postgres::Error> {
    if rows.key.is_empty() {
        return Ok(0);
    }
    let params: [&(dyn ToSql + Sync); 6] = [
        &rows.key,
        &rows.fingerprint,
        &rows.key_stream,
        &rows.first_seq,
        &rows.count,
        &rows.key_version,
    ];
    session
        .client
        .execute(&session.st.insert_keys, &params)
        .await
}

async fn insert_nodes(
    session: &Session,
    insert: &Statement,
    rows: &Rows,
) -> Result<u64, tokio_postgres::Error> {
    if rows.node_size.is_empty() {
        return Ok(0);
    }
    session
        .client
        .execute(insert, &[&rows.node_size, &rows.nodes])
        .await
}

/// [`StorageError::HeadMoved`] for the errors `ledger_advance_head` raises when the group was
/// planned on a head or a stream version that is no longer the database's, else `db_error`.
fn moved_or(op: &'static str, e: &tokio_postgres::Error) -> StorageError {
    let code = e.as_db_error().map(|db| db.code().code());
    if code == Some(schema::HEAD_MOVED) || code == Some(schema::STREAM_MOVED) {
        return StorageError::HeadMoved;
    }
    db_error(op, e)
}

fn raw(row: &tokio_postgres::Row) -> Result<RawEvent, StorageError> {
    Ok(RawEvent {
        seq: to_u64(row.get(0), "a seq")?,
        bytes: Arc::from(row.get::<_, &[u8]>(1)),
    })
}

fn record(row: &tokio_postgres::Row) -> Result<IdempotencyRecord, StorageError> {
    Ok(IdempotencyRecord {
        key: row.get(0),
        fingerprint: digest(row.get(1), "a fingerprint")?,
        stream: row.get(2),
        first_seq: to_u64(row.get(3), "a seq")?,
        event_count: u32::try_from(row.get::<_, i32>(4)).map_err(|_| StorageError::Corrupt {
            seq: None,
            detail: "a negative event count".into(),
        })?,
        stream_version: to_u64(row.get(5), "a stream version")?,
    })
}

impl Storage for PostgresStorage {
    fn head(&self) -> ChainHead {
        *self.head.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn append(
        &self,
        commits: &[Commit],
        content: &[Blob],
        tree: &TreeGrowth,
    ) -> Result<(), StorageError> {
        self.refuse_writes()?;
        let Some(group) = GroupRows::of(commits, content, tree, self.head())? else {
            return Ok(());
        };
        let next = group.next;
        let pool = Arc::clone(&self.pool);
        // Without a lock taken first: the group's conditional head update takes it, so a group
        // is one round trip. Another writer's commit since the head the group was planned on
        // is `HeadMoved`, nothing written; a failed commit leaves the outcome unknown, and the
        // ledger's writer reads what the database holds past its head before it writes again.
        self.driver.run(async move {
            let session = pool.writer.session().await?;
            write_group(&pool, &session, &group, Begin::Open).await
        })?;
        self.set_head(next);
        Ok(())
    }

    fn read_blob(&self, hash: &Digest) -> Result<Option<Vec<u8>>, StorageError> {
        let hash = hash.as_bytes().to_vec();
        self.read(move |s| {
            let hash = hash.clone();
            async move {
                let row = s
                    .client
                    .query_opt(&s.st.read_blob, &[&hash])
                    .await
                    .map_err(|e| db_error("read a content blob", &e))?;
                Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
            }
        })
    }

    fn has_blob(&self, hash: &Digest) -> Result<bool, StorageError> {
        let hash = hash.as_bytes().to_vec();
        self.read(move |s| {
            let hash = hash.clone();
            async move {
                let row = s
                    .client
                    .query_opt("SELECT 1 FROM content_blobs WHERE hash = $1", &[&hash])
                    .await
                    .map_err(|e| db_error("look a content blob up", &e))?;
                Ok(row.is_some())
            }
        })
    }

    fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    fn hold_head(&self) -> Result<Option<Box<dyn HeldHead + '_>>, StorageError> {
        Ok(Some(Box::new(self.hold()?)))
    }

    fn read_range(&self, from_seq: u64, max: usize) -> Result<Vec<RawEvent>, StorageError> {
        let from = to_i64(from_seq, "a seq")?;
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.read(move |s| async move {
            let rows = s
                .client
                .query(&s.st.read_range, &[&from, &max])
                .await
                .map_err(|e| db_error("read events", &e))?;
            rows.iter().map(raw).collect()
        })
    }

    fn visit_range(
        &self,
        from_seq: u64,
        max: usize,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<usize, StorageError> {
        const CHUNK_EVENTS: usize = 4096;
        let mut visited = 0usize;
        while visited < max {
            let chunk =
                self.read_range(from_seq + visited as u64, CHUNK_EVENTS.min(max - visited))?;
            if chunk.is_empty() {
                break;
            }
            for event in &chunk {
                visited += 1;
                if visit(event.seq, &event.bytes).is_break() {
                    return Ok(visited);
                }
            }
        }
        Ok(visited)
    }

    fn stream_version(&self, stream: &str) -> Result<u64, StorageError> {
        let stream = stream.to_owned();
        self.read(move |s| {
            let stream = stream.clone();
            async move {
                let row = s
                    .client
                    .query_one(&s.st.stream_version, &[&stream])
                    .await
                    .map_err(|e| db_error("read a stream's version", &e))?;
                to_u64(row.get(0), "a stream version")
            }
        })
    }

    fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max: usize,
    ) -> Result<Vec<RawEvent>, StorageError> {
        let stream = stream.to_owned();
        let from = to_i64(from_version, "a stream version")?;
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        self.read(move |s| {
            let stream = stream.clone();
            async move {
                let rows = s
                    .client
                    .query(&s.st.read_stream, &[&stream, &from, &max])
                    .await
                    .map_err(|e| db_error("read a stream", &e))?;
                rows.iter().map(raw).collect()
            }
        })
    }

    fn find_event_id(&self, id: Uuid) -> Result<Option<RawEvent>, StorageError> {
        self.read(move |s| async move {
            let row = s
                .client
                .query_opt(&s.st.find_id, &[&id])
                .await
                .map_err(|e| db_error("find an event by id", &e))?;
            row.as_ref().map(raw).transpose()
        })
    }

    fn find_hash(&self, hash: &Digest) -> Result<Option<RawEvent>, StorageError> {
        let hash = hash.as_bytes().to_vec();
        self.read(move |s| {
            let hash = hash.clone();
            async move {
                let row = s
                    .client
                    .query_opt(&s.st.find_hash, &[&hash])
                    .await
                    .map_err(|e| db_error("find an event by hash", &e))?;
                row.as_ref().map(raw).transpose()
            }
        })
    }

    fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StorageError> {
        let key = key.to_owned();
        self.read(move |s| {
            let key = key.clone();
            async move {
                let row = s
                    .client
                    .query_opt(&s.st.key, &[&key])
                    .await
                    .map_err(|e| db_error("read an idempotency record", &e))?;
                row.as_ref().map(record).transpose()
            }
        })
    }

    fn idempotency_records(&self) -> Result<Vec<IdempotencyRecord>, StorageError> {
        self.read(move |s| async move {
            let rows = s
                .client
                .query(
                    "SELECT key, fingerprint, stream, first_seq, event_count, stream_version \
                     FROM ledger_idempotency ORDER BY first_seq",
                    &[],
                )
                .await
                .map_err(|e| db_error("read idempotency records", &e))?;
            rows.iter().map(record).collect()
        })
    }

    fn problems(&self) -> Vec<StorageProblem> {
        self.problems.clone()
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn claimed_size(&self) -> u64 {
        self.claimed.max(self.head().size)
    }

    fn checkpoint_index(&self) -> Result<(), StorageError> {
        // Nothing derived is kept apart from what each commit writes.
        Ok(())
    }

    fn merkle_size(&self) -> Result<u64, StorageError> {
        self.read(move |s| async move {
            let row = s
                .client
                .query_one(
                    "SELECT least(merkle_size, (SELECT coalesce(max(seq) + 1, 0) \
                     FROM ledger_events)) FROM ledger_head WHERE id = 1",
                    &[],
                )
                .await
                .map_err(|e| db_error("read the Merkle size", &e))?;
            to_u64(row.get(0), "the Merkle size")
        })
    }

    fn put_merkle_nodes(&self, nodes: &[PerfectNode], size: u64) -> Result<(), StorageError> {
        self.refuse_writes()?;
        // A growth's first leaf completes the first node it reports, that leaf's own.
        let Some(first) = nodes.first() else {
            return Ok(());
        };
        let from = MerkleEntries::completing_leaf(first.level, first.index)
            .filter(|&leaf| leaf < size)
            .ok_or_else(|| {
                StorageError::Failed(format!(
                    "Merkle node ({}, {}) cannot be in a growth to {size} leaves",
                    first.level, first.index
                ))
            })?;
        let from = to_i64(from, "a leaf")?;
        let rows = Rows::of(
            &[],
            &[],
            &TreeGrowth {
                nodes: nodes.to_vec(),
                size,
            },
        )?;
        let size = to_i64(size, "a tree size")?;
        let pool = Arc::clone(&self.pool);
        // Derived data, outside the head's lock: nodes are the same whoever computes them. The
        // rows and the size they bring the tree to are written together, so the stored size
        // never runs ahead of the rows.
        self.driver.run(async move {
            let s = pool.writer.session().await?;
            s.client
                .execute(
                    sql::PUT_NODES,
                    &[&rows.node_size, &rows.nodes, &size, &from],
                )
                .await
                .map_err(|e| db_error("insert Merkle nodes", &e))?;
            Ok(())
        })
    }

    fn clear_merkle_nodes(&self) -> Result<(), StorageError> {
        self.refuse_writes()?;
        let pool = Arc::clone(&self.pool);
        self.driver.run(async move {
            let s = pool.writer.session().await?;
            s.client
                .batch_execute(
                    "BEGIN; DELETE FROM ledger_merkle_groups; \
                     UPDATE ledger_head SET merkle_size = 0 WHERE id = 1; COMMIT",
                )
                .await
                .map_err(|e| db_error("clear the Merkle nodes", &e))
        })
    }

    fn merkle_node(&self, level: u8, index: u64) -> Result<Option<Digest>, StorageError> {
        // The tree size at which the node was completed: none the table can hold for a node
        // past the largest.
        let Some(end) = MerkleEntries::completing_leaf(level, index)
            .and_then(|leaf| leaf.checked_add(1))
            .and_then(|end| i64::try_from(end).ok())
        else {
            return Ok(None);
        };
        self.read(move |s| async move {
            match &s.st.merkle_node {
                MerkleRead::Packed(statement) => {
                    let row = s
                        .client
                        .query_opt(statement, &[&end])
                        .await
                        .map_err(|e| db_error("read a Merkle node", &e))?;
                    let Some(row) = row else {
                        return Ok(None);
                    };
                    let (first, nodes): (i64, &[u8]) = (row.get(0), row.get(1));
                    if let Some(hash) = MerkleEntries::find(nodes, level, index)? {
                        return Ok(Some(hash));
                    }
                    // The first row holds the node unless a growth started where no row
                    // ends: one on another node while this one cleared the nodes to rebuild
                    // them. Every growth files the node under a key below `end` +
                    // MERKLE_ENTRY_LEAVES, and the rebuild's growth, which started at a row's
                    // end or at 0, has its row there (or a longer one under its key): the
                    // rows up to that bound hold it.
                    let bound = end.saturating_add(MERKLE_ENTRY_LEAVES as i64);
                    let after = s
                        .client
                        .query(sql::MERKLE_NODE_AFTER, &[&first, &bound])
                        .await
                        .map_err(|e| db_error("read a Merkle node", &e))?;
                    for row in after {
                        if let Some(hash) = MerkleEntries::find(row.get(0), level, index)? {
                            return Ok(Some(hash));
                        }
                    }
                    Ok(None)
                }
                MerkleRead::Rows(statement) => {
                    let (level, index) = (i16::from(level), to_i64(index, "a node index")?);
                    let row = s
                        .client
                        .query_opt(statement, &[&level, &index])
                        .await
                        .map_err(|e| {
                            if is_undefined_table(&e) {
                                moved_nodes()
                            } else {
                                db_error("read a Merkle node", &e)
                            }
                        })?;
                    row.map(|r| digest(r.get(0), "a Merkle node")).transpose()
                }
            }
        })
    }

    fn append_checkpoint_entry(&self, entry: &CheckpointEntry) -> Result<(), StorageError> {
        self.insert_checkpoint_entry(entry, false).map(|_| ())
    }

    fn append_first_key(&self, entry: &CheckpointEntry) -> Result<bool, StorageError> {
        self.insert_checkpoint_entry(entry, true)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn checkpoint_entries_from(&self, from: u64) -> Result<Vec<CheckpointEntry>, StorageError> {
        let from = to_i64(from, "an entry count")?;
        self.read(move |s| async move {
            let rows = s
                .client
                .query(
                    "SELECT n, entry FROM ledger_checkpoints WHERE n > $1 ORDER BY n",
                    &[&from],
                )
                .await
                .map_err(|e| db_error("read the checkpoint log", &e))?;
            rows.iter()
                .map(|row| parse_entry(row.get(0), row.get(1)))
                .collect()
        })
    }

    fn append_signed_entry(
        &self,
        entry: &CheckpointEntry,
        seen: u64,
    ) -> Result<SignedAppend, StorageError> {
        self.refuse_writes()?;
        let line = serde_json::to_string(entry)
            .map_err(|e| StorageError::Index(format!("checkpoint entry: {e}")))?;
        let seen = to_i64(seen, "an entry count")?;
        // Under the head row's lock, which every append to the checkpoint log takes: a
        // rotation committed by another node is either seen here or ordered after this entry.
        self.write(move |s, _| async move {
            let rows = s
                .client
                .query(
                    "SELECT n, entry FROM ledger_checkpoints WHERE n > $1 ORDER BY n",
                    &[&seen],
                )
                .await
                .map_err(|e| db_error("read the checkpoint log", &e))?;
            for row in &rows {
                if matches!(
                    parse_entry(row.get(0), row.get(1))?,
                    CheckpointEntry::KeyIntroduced { .. } | CheckpointEntry::Rotation(_)
                ) {
                    return Ok(SignedAppend::KeyChanged);
                }
            }
            let row = s
                .client
                .query_one(
                    "INSERT INTO ledger_checkpoints (n, entry) \
                     SELECT coalesce(max(n), 0) + 1, $1 FROM ledger_checkpoints RETURNING n",
                    &[&line],
                )
                .await
                .map_err(|e| db_error("append to the checkpoint log", &e))?;
            Ok(SignedAppend::Appended {
                entries: to_u64(row.get(0), "an entry's number")?,
            })
        })
    }

    fn resign_checkpoint_lead(&self) {
        let pool = Arc::clone(&self.pool);
        if let Err(e) = self.driver.run(async move {
            pool.lead.resign().await;
            Ok(())
        }) {
            tracing::warn!(error = %e, "could not let go of the checkpoint lead");
        }
    }

    fn followed(&self, head: ChainHead) {
        let mut ours = self.head.lock().unwrap_or_else(|p| p.into_inner());
        if head.size > ours.size {
            *ours = head;
        }
    }

    fn watch(&self, wake: Arc<dyn Fn() + Send + Sync>) {
        self.driver.spawn(listen(Arc::clone(&self.setup), wake));
    }

    fn checkpoint_leader(&self) -> bool {
        if self.refuse_writes().is_err() {
            return false;
        }
        let pool = Arc::clone(&self.pool);
        match self.driver.run(async move { pool.lead.hold().await }) {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "could not learn whether this node leads the checkpoints");
                false
            }
        }
    }

    fn checkpoint_entries(&self) -> Result<Vec<CheckpointEntry>, StorageError> {
        // Entries are numbered from 1.
        self.checkpoint_entries_from(0)
    }
}

/// A row of `ledger_checkpoints` as the entry its JSON holds.
fn parse_entry(n: i64, json: &str) -> Result<CheckpointEntry, StorageError> {
    serde_json::from_str(json).map_err(|e| StorageError::Corrupt {
        seq: None,
        detail: format!("checkpoint log entry {n}: {e}"),
    })
}
