//! The PostgreSQL backend's schema, as numbered migrations applied in order at start.
//!
//! Each migration runs in its own transaction under a transaction-level advisory lock, so
//! that nodes starting together apply it once; `ledger_schema` records which have been
//! applied. A database whose schema is newer than this program knows is refused rather than
//! written by code that does not understand it.

use tokio_postgres::Client;

use super::db_error;
use crate::storage::StorageError;

/// The advisory lock key under which migrations run ("rl-schema" in ASCII).
const MIGRATION_LOCK: i64 = 0x726c_2d73_6368_656d;

/// One migration: its number, what it does, and its SQL.
struct Migration {
    version: i32,
    description: &'static str,
    sql: &'static str,
}

/// Every migration, in order. Never edit one that was released: add the next.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "events, the chain's head, idempotency records, Merkle nodes, checkpoint log",
        sql: r"
        -- The head of the global chain: one row, locked by every append (FOR UPDATE) so that
        -- appends commit one after another, in seq order.
        CREATE TABLE ledger_head (
            id          int     PRIMARY KEY CHECK (id = 1),
            size        bigint  NOT NULL CHECK (size >= 0),
            last_hash   bytea   NOT NULL CHECK (length(last_hash) = 32),
            merkle_size bigint  NOT NULL CHECK (merkle_size >= 0)
        );
        INSERT INTO ledger_head VALUES (1, 0, decode(repeat('00', 32), 'hex'), 0);

        -- Every event: its stored bytes (what is hashed) and what finds it.
        CREATE TABLE ledger_events (
            seq            bigint PRIMARY KEY CHECK (seq >= 0),
            stream         text   NOT NULL,
            stream_version bigint NOT NULL CHECK (stream_version >= 1),
            event_id       uuid   NOT NULL UNIQUE,
            hash           bytea  NOT NULL UNIQUE CHECK (length(hash) = 32),
            bytes          bytea  NOT NULL,
            UNIQUE (stream, stream_version)
        );

        CREATE TABLE ledger_idempotency (
            key            text   PRIMARY KEY,
            fingerprint    bytea  NOT NULL CHECK (length(fingerprint) = 32),
            stream         text   NOT NULL,
            first_seq      bigint NOT NULL,
            event_count    int    NOT NULL,
            stream_version bigint NOT NULL
        );
        CREATE INDEX ledger_idempotency_by_seq ON ledger_idempotency (first_seq);

        -- Perfect subtrees of the Merkle tree: derived from the event hashes, stored with the
        -- events that complete them.
        CREATE TABLE ledger_merkle_nodes (
            level smallint NOT NULL,
            idx   bigint   NOT NULL,
            hash  bytea    NOT NULL CHECK (length(hash) = 32),
            PRIMARY KEY (level, idx)
        );

        -- The checkpoint log: checkpoints, key introductions and rotations, recovery
        -- statements and witness cosignatures, as the JSON the embedded backend writes.
        CREATE TABLE ledger_checkpoints (
            n     bigint PRIMARY KEY CHECK (n >= 1),
            entry text   NOT NULL
        );
    ",
    },
    Migration {
        version: 2,
        description: "content blobs, written in the transaction of the events that cite them",
        // Databases written by earlier versions hold this table already, made by their content
        // store in this very shape: it is kept as it is, blobs and all.
        sql: r"
        CREATE TABLE IF NOT EXISTS content_blobs (
            hash  bytea PRIMARY KEY CHECK (length(hash) = 32),
            bytes bytea NOT NULL
        );
    ",
    },
    Migration {
        version: 3,
        description: "a group's head update that is conditional on the head it was planned on",
        sql: ADVANCE_HEAD,
    },
    Migration {
        version: 4,
        description: "the Merkle nodes a group completes packed into one row keyed by tree size",
        sql: PACK_MERKLE_NODES,
    },
    Migration {
        version: 5,
        description: "the stored Merkle size moved only by a growth that starts within it",
        sql: CONTIGUOUS_MERKLE_SIZE,
    },
    Migration {
        version: 6,
        description: "a group's stream check as index probes instead of an aggregate per stream",
        sql: STREAM_PROBES,
    },
];

/// The first schema version a read-only open reads: every table reads use, the content blobs
/// among them, exists from it on. Writes need the latest. Before [`PACKED_FROM`] the Merkle
/// nodes are read from `ledger_merkle_nodes`, one row a node.
pub(super) const READABLE_FROM: i32 = 2;

/// The first schema version that keeps the Merkle nodes packed (`ledger_merkle_groups`), its
/// migration having moved every node of `ledger_merkle_nodes` there and dropped that table.
pub(super) const PACKED_FROM: i32 = 4;

/// Migration 4. A group commit stored about two rows a leaf in `ledger_merkle_nodes`, each
/// with its primary-key entry: the largest part of the group's server work and WAL after the
/// events themselves. The nodes a group completes now go in one row, encoded as
/// `crate::storage::merkle_entries::MerkleEntries` encodes the embedded index's entries, and a
/// node is read as the one row that holds it. The nodes already stored are moved in the
/// migration's transaction, grouped by the tree size at which each was completed, which the
/// lookup finds them by, and the old table is dropped.
const PACK_MERKLE_NODES: &str = r"
        -- Perfect subtrees of the Merkle tree, packed: a row keyed by a tree size holds the
        -- nodes completed by the leaves below `size` and at or above the next smaller key
        -- (those of one group commit, split at multiples of 256 leaves), each as 41 bytes
        -- `level (1) | idx (8, big-endian) | hash (32)`, ordered by the leaf that completed
        -- it, then by level. Node (level, idx) covers leaves [idx*2^level, (idx+1)*2^level),
        -- is completed by the last of them, and so is in the row with the smallest
        -- size >= (idx+1)*2^level. Derived from the event hashes, stored with the events that
        -- complete them. Hashes do not compress: rows up to a page (a group of up to about
        -- 99 leaves) are kept inline, larger ones (runs of a rebuild) moved out of line as
        -- they are.
        CREATE TABLE ledger_merkle_groups (
            size  bigint PRIMARY KEY CHECK (size >= 1),
            nodes bytea  NOT NULL CHECK (length(nodes) > 0 AND length(nodes) % 41 = 0)
        ) WITH (toast_tuple_target = 8160);
        ALTER TABLE ledger_merkle_groups ALTER COLUMN nodes SET STORAGE EXTERNAL;

        -- The nodes stored one a row until now: one row for each tree size some of them end
        -- at, holding the nodes that end there (one a level, lowest first), which the rule
        -- above finds. A node's end, (idx+1)*2^level, is the size of the tree once the leaf
        -- that completed it was added.
        INSERT INTO ledger_merkle_groups (size, nodes)
        SELECT (idx + 1) << level,
               string_agg(set_byte('\x00'::bytea, 0, level) || int8send(idx) || hash,
                          ''::bytea ORDER BY level)
          FROM ledger_merkle_nodes
         GROUP BY (idx + 1) << level;

        DROP TABLE ledger_merkle_nodes;
";

/// SQLSTATE raised by `ledger_advance_head` when the chain's head is not the one the group was
/// planned on.
pub(super) const HEAD_MOVED: &str = "RLH01";

/// SQLSTATE raised by `ledger_advance_head` when a stream is not at the version the group was
/// planned on.
pub(super) const STREAM_MOVED: &str = "RLH02";

/// A stream is not at its base when its last version is another: an aggregate, run as a
/// subplan for each stream (migrations 3 and 5).
macro_rules! max_version_moved {
    () => {
        "coalesce((SELECT max(e.stream_version) FROM ledger_events e
                                  WHERE e.stream = s.stream), 0) <> s.base"
    };
}

/// A stream is not at its base when it holds an event past the base, or (a base above 0) none
/// at or past it — that is, none at the base: the same condition as [`max_version_moved`]
/// where versions start at 1 (the table's check), as two probes of the `(stream,
/// stream_version)` index, the first of which finds no entry when the stream is where it
/// should be, instead of an aggregate (migration 6). The second probe is a range (`>=`), not an
/// equality, on purpose: an uncorrelatable range keeps it a probe per stream, where the planner
/// would turn `NOT EXISTS (… = s.base)` into a hashed subplan over the whole table whenever the
/// table looked small when the function's plan was made (a new database), and keep that plan
/// as the table grew.
macro_rules! probes_moved {
    () => {
        "EXISTS (SELECT 1 FROM ledger_events e
                          WHERE e.stream = s.stream AND e.stream_version > s.base)
                    OR (s.base > 0 AND NOT EXISTS (SELECT 1 FROM ledger_events e
                          WHERE e.stream = s.stream AND e.stream_version >= s.base))"
    };
}

/// The head row's new Merkle size, raised only by a growth that starts within the stored size
/// (migration 5 on).
macro_rules! contiguous_merkle_size {
    () => {
        "CASE WHEN merkle_size >= p_size THEN greatest(merkle_size, p_merkle_size) \
         ELSE merkle_size END"
    };
}

/// `ledger_advance_head` as `$create` (`CREATE FUNCTION` or `CREATE OR REPLACE FUNCTION`)
/// makes it, with `$merkle_size` the new value of the head row's Merkle size and `$moved` the
/// condition, over `s(stream, base)`, under which a stream of the group is not at the version
/// the group was planned on: migrations 3, 5 and 6 differ in these alone.
macro_rules! advance_head {
    ($create:literal, $merkle_size:expr, $moved:expr) => {
        concat!(
            r"
        ",
            $create,
            r" ledger_advance_head(
            p_size bigint, p_hash bytea, p_new_size bigint, p_new_hash bytea,
            p_merkle_size bigint, p_streams text[], p_bases bigint[]
        ) RETURNS void LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE ledger_head
               SET size = p_new_size, last_hash = p_new_hash,
                   merkle_size = ",
            $merkle_size,
            r"
             WHERE id = 1 AND size = p_size AND last_hash = p_hash;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'the head of the chain is not at % events with the hash the group was planned on', p_size
                    USING ERRCODE = 'RLH01';
            END IF;
            IF EXISTS (
                SELECT 1 FROM unnest(p_streams, p_bases) AS s(stream, base)
                 WHERE ",
            $moved,
            r"
            ) THEN
                RAISE EXCEPTION 'a stream is not at the version the group was planned on'
                    USING ERRCODE = 'RLH02';
            END IF;
            -- Delivered at commit, never for a group rolled back: wakes the other nodes'
            -- followers. The payload names the new size and the node that wrote.
            PERFORM pg_notify('ledger_appended',
                p_new_size::text || ' ' || coalesce(current_setting('ledger.node', true), ''));
        END
        $$;
"
        )
    };
}

/// Migration 3. A group is sent with its `COMMIT` in one pipeline, so a condition the group
/// depends on must fail inside the server, where it aborts the transaction (which turns the
/// `COMMIT` into a rollback), not in the client after the `COMMIT` was sent. The `UPDATE` takes
/// the head row's lock first, waiting for any other writer's commit; it then sees the row that
/// writer left (read committed re-checks the condition on the newest version), so a head that
/// moved is found here. The stream versions are read after the lock, in a snapshot that holds
/// everything committed before it. Each append's group calls this before its inserts. It also
/// notifies `ledger_appended`, so that other nodes read the group as soon as it commits.
const ADVANCE_HEAD: &str = advance_head!(
    "CREATE FUNCTION",
    "greatest(merkle_size, p_merkle_size)",
    max_version_moved!()
);

/// Migration 5. `ledger_head.merkle_size` is the size below which every Merkle node is stored:
/// an open loads the tree's right edge there and stores again what lies between it and the
/// head. Migration 3's function raised it to the size any group reached, so a group committed
/// by one node while another had cleared the nodes and was storing them again from the first
/// leaf raised it past leaves whose nodes were not yet stored again; had that node stopped
/// before it was done, the stored size would have claimed nodes that were missing. A group now
/// raises the size only when its growth starts within it (the head it was planned on is at or
/// below the size); otherwise the size stays where the nodes stored in one piece end, and a
/// node that finds it short of the log stores the nodes from there again.
const CONTIGUOUS_MERKLE_SIZE: &str = advance_head!(
    "CREATE OR REPLACE FUNCTION",
    contiguous_merkle_size!(),
    max_version_moved!()
);

/// Migration 6. The check that each stream of a group is at the version the group was planned
/// on was an aggregate per stream (`max(stream_version)`, run as a subplan with an init plan
/// for each stream): in a group of 25 streams about 0.25 ms, the largest part of the writer
/// backend's work on a group. It is now two index probes a stream, the same condition
/// ([`probes_moved`]), about a third of the time.
const STREAM_PROBES: &str = advance_head!(
    "CREATE OR REPLACE FUNCTION",
    contiguous_merkle_size!(),
    probes_moved!()
);

/// The schema version this program writes.
pub(super) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The version the database is at (0 when it has no ledger schema).
pub(super) async fn current(client: &Client) -> Result<i32, StorageError> {
    let exists = client
        .query_one("SELECT to_regclass('ledger_schema') IS NOT NULL", &[])
        .await
        .map_err(|e| db_error("look for the schema", &e))?;
    if !exists.get::<_, bool>(0) {
        return Ok(0);
    }
    let row = client
        .query_one("SELECT coalesce(max(version), 0) FROM ledger_schema", &[])
        .await
        .map_err(|e| db_error("read the schema version", &e))?;
    Ok(row.get(0))
}

/// Applies every migration the database lacks; refuses a schema newer than this program.
pub(super) async fn migrate(client: &Client) -> Result<(), StorageError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS ledger_schema (
                 version     int         PRIMARY KEY,
                 description text        NOT NULL,
                 applied_at  timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(|e| db_error("create the schema table", &e))?;
    for migration in MIGRATIONS {
        client
            .batch_execute("BEGIN")
            .await
            .map_err(|e| db_error("begin a migration", &e))?;
        let applied = apply(client, migration).await;
        let end = if applied.is_ok() {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        let ended = client
            .batch_execute(end)
            .await
            .map_err(|e| db_error("end a migration", &e));
        applied?;
        ended?;
    }
    let found = current(client).await?;
    if found > latest() {
        return Err(StorageError::Failed(format!(
            "the database's ledger schema is at version {found}, newer than this program's {}: \
             run a newer research-ledger",
            latest()
        )));
    }
    Ok(())
}

async fn apply(client: &Client, migration: &Migration) -> Result<(), StorageError> {
    client
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| db_error("lock the schema", &e))?;
    let done = client
        .query_opt(
            "SELECT 1 FROM ledger_schema WHERE version = $1",
            &[&migration.version],
        )
        .await
        .map_err(|e| db_error("read the schema version", &e))?;
    if done.is_some() {
        return Ok(());
    }
    client
        .batch_execute(migration.sql)
        .await
        .map_err(|e| db_error("apply a migration", &e))?;
    client
        .execute(
            "INSERT INTO ledger_schema (version, description) VALUES ($1, $2)",
            &[&migration.version, &migration.description],
        )
        .await
        .map_err(|e| db_error("record a migration", &e))?;
    tracing::info!(
        version = migration.version,
        description = migration.description,
        "applied a schema migration"
    );
    Ok(())
}
