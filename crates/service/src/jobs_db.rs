//! Pipeline jobs in the storage database, so every node reads every job and a job runs on one
//! node only.
//!
//! `pipeline_jobs` holds one row per job: its id, task, status, the idempotency key it was
//! started with (unique), when it last moved, and the job file's JSON. A start runs in one
//! transaction under a transaction-level advisory lock shared by every node, so two starts on
//! one task — from two nodes at once — are decided one after the other: the second finds the
//! first's row (by key, or running on the task; a partial unique index allows one running job
//! per task) and answers with it.
//!
//! The node that starts a job claims it with a session-level advisory lock, keyed by the job
//! id, on a connection it keeps open while it runs jobs, and releases it when the job stops.
//! The claim is what says a running job is alive: a node that reads a job as `running` whose
//! claim it can take knows its node is gone (its connection closed and the server dropped the
//! lock), and marks it `interrupted` — the job is recoverable as a job interrupted by a restart
//! is: running the pipeline again resumes where the task stands. No lease or clock is involved.
//!
//! The claims live as long as the session that holds them. When the database cuts it (a
//! failover, `pg_terminate_backend`), every claim on it is gone and another node may already
//! have marked those jobs interrupted: so each job remembers which claims session it was
//! claimed on, a job checks before each step that the session still answers and is still the
//! one ([`JobsDb::holds`]), and one that lost its claim stops as interrupted instead of running
//! on unclaimed. The next claim opens a new session. A job's row is written only while it
//! reads running, so a job another node marked interrupted is never made to read running again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sources::database::{Database, DatabaseError, Pool, db_error, is_lost};
use tokio_postgres::Client;

use crate::jobs::{JobFile, JobStatus};

/// The advisory lock key under which starts are decided ("rl-jobs!" in ASCII).
const START_LOCK: i64 = 0x726c_2d6a_6f62_7321;

/// A job's claim key: the first 8 bytes of a hash of its id.
fn claim_key(job_id: &str) -> i64 {
    let hash = blake3::hash(format!("research-ledger job claim\0{job_id}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash.as_bytes()[..8]);
    i64::from_le_bytes(bytes)
}

fn damaged(detail: impl std::fmt::Display) -> DatabaseError {
    DatabaseError::new("read a job", format!("a job row does not read: {detail}"))
}

fn parse(body: &str) -> Result<JobFile, DatabaseError> {
    serde_json::from_str(body).map_err(damaged)
}

/// What a start found.
pub(crate) enum Started {
    /// The job was stored and claimed by this node: run it.
    New,
    /// The idempotency key started this job earlier.
    Keyed(JobFile),
    /// This job is running on the task already, on some node.
    Running(JobFile),
}

/// The jobs of one database. See the module documentation.
#[derive(Debug)]
pub(crate) struct JobsDb {
    db: Database,
    /// The session that holds this node's claims.
    claims: Arc<tokio::sync::Mutex<ClaimSession>>,
    /// The claims session each job of this node was claimed on, by its number.
    claimed: Mutex<HashMap<String, u64>>,
}

/// The session that holds this node's claims, and its number: one more for each session
/// opened, so that a job claimed on a session that was cut knows the one after it is not its.
#[derive(Debug)]
struct ClaimSession {
    client: Option<Arc<Client>>,
    number: u64,
}

impl JobsDb {
    pub(crate) fn open(url: &str) -> Result<JobsDb, DatabaseError> {
        let db = crate::shared::open_database(url, "research-ledger jobs")?;
        let pool = db.pool();
        let client = db.run(async move { pool.alone().await.map(Arc::new) })?;
        Ok(JobsDb {
            db,
            claims: Arc::new(tokio::sync::Mutex::new(ClaimSession {
                client: Some(client),
                number: 1,
            })),
            claimed: Mutex::new(HashMap::new()),
        })
    }

    fn pool(&self) -> Pool {
        self.db.pool()
    }

    /// The job the idempotency key started, if any.
    pub(crate) fn keyed(&self, key: &str) -> Result<Option<JobFile>, DatabaseError> {
        let (pool, key) = (self.pool(), key.to_owned());
        let body: Option<String> = self.db.run(async move {
            pool.read(|client| {
                let key = key.clone();
                async move {
                    let row = client
                        .query_opt(
                            "SELECT body FROM pipeline_jobs WHERE idempotency_key = $1",
                            &[&key],
                        )
                        .await
                        .map_err(|e| db_error("read a job", &e))?;
                    Ok(row.map(|r| r.get(0)))
                }
            })
            .await
        })?;
        body.as_deref().map(parse).transpose()
    }

    /// Stores `file` as a new running job claimed by this node, unless its key or a live
    /// running job on its task answers first; keeps at most `kept_max` jobs, forgetting the
    /// oldest stopped ones.
    pub(crate) fn start(&self, file: &JobFile, kept_max: usize) -> Result<Started, DatabaseError> {
        let id = file.job.job_id.clone();
        self.claim(&id)?;
        let body = serde_json::to_string(file).map_err(damaged)?;
        let (pool, task, key) = (
            self.pool(),
            file.job.task_id.clone(),
            file.idempotency.as_ref().map(|k| k.key.clone()),
        );
        let kept = i64::try_from(kept_max).unwrap_or(i64::MAX);
        let started = self
            .db
            .run(async move { start_in(&pool, &id, &task, key.as_ref(), kept, &body).await });
        let outcome = match started {
            Ok(Ok(())) => return Ok(Started::New),
            Ok(Err((true, body))) => Started::Keyed(parse(&body)?),
            Ok(Err((false, body))) => Started::Running(parse(&body)?),
            Err(e) => {
                self.release(&file.job.job_id);
                return Err(e);
            }
        };
        self.release(&file.job.job_id);
        Ok(outcome)
    }

    fn claimed(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.claimed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims a job on the claims session, opening a new one when the last was closed or cut.
    fn claim(&self, job_id: &str) -> Result<(), DatabaseError> {
        let (claims, pool, key) = (Arc::clone(&self.claims), self.pool(), claim_key(job_id));
        let number = self.db.run(async move {
            let mut claims = claims.lock().await;
            let mut opened = false;
            loop {
                let client = match &claims.client {
                    Some(client) if !client.is_closed() => Arc::clone(client),
                    _ => {
                        let client = Arc::new(pool.alone().await?);
                        claims.client = Some(Arc::clone(&client));
                        claims.number += 1;
                        opened = true;
                        client
                    }
                };
                match client.execute("SELECT pg_advisory_lock($1)", &[&key]).await {
                    Ok(_) => return Ok(claims.number),
                    // A session cut before it noticed: the claim is made on a new one.
                    Err(_) if !opened && is_lost(&client).await => claims.client = None,
                    Err(e) => return Err(db_error("claim a job", &e)),
                }
            }
        })?;
        self.claimed().insert(job_id.to_owned(), number);
        Ok(())
    }

    /// Whether this node still holds its claim on a job it runs: the session it was claimed on
    /// is still the claims session and still answers.
    pub(crate) fn holds(&self, job_id: &str) -> bool {
        let Some(number) = self.claimed().get(job_id).copied() else {
            return false;
        };
        let claims = Arc::clone(&self.claims);
        self.db
            .run(async move {
                let claims = claims.lock().await;
                Ok(match &claims.client {
                    Some(client) if claims.number == number => !is_lost(client).await,
                    _ => false,
                })
            })
            .unwrap_or(false)
    }

    /// Gives up this node's claim on a job that stopped (a claim whose session is gone went
    /// with it).
    pub(crate) fn release(&self, job_id: &str) {
        let Some(number) = self.claimed().remove(job_id) else {
            return;
        };
        let (claims, key) = (Arc::clone(&self.claims), claim_key(job_id));
        let released = self.db.run(async move {
            let claims = claims.lock().await;
            match &claims.client {
                Some(client) if claims.number == number && !client.is_closed() => client
                    .execute("SELECT pg_advisory_unlock($1)", &[&key])
                    .await
                    .map_err(|e| db_error("release a job", &e))
                    .map(|_| ()),
                _ => Ok(()),
            }
        });
        if let Err(e) = released {
            tracing::warn!(error = %e, job_id, "cannot release a job's claim");
        }
    }

    /// Writes a job as it stands now, if its row still reads running: a job stops once, and a
    /// row another node marked interrupted stays so. False when the row did not read running.
    pub(crate) fn update(&self, file: &JobFile) -> Result<bool, DatabaseError> {
        let body = serde_json::to_string(file).map_err(damaged)?;
        let (pool, id, status) = (self.pool(), file.job.job_id.clone(), file.job.status.name());
        self.db.run(async move {
            let client = pool.shared().await?;
            client
                .execute(
                    "UPDATE pipeline_jobs SET status = $2, updated_at = now(), body = $3 \
                     WHERE job_id = $1 AND status = 'running'",
                    &[&id, &status, &body],
                )
                .await
                .map_err(|e| db_error("write a job", &e))
                .map(|rows| rows == 1)
        })
    }

    /// A job as the database holds it; a running job whose node is gone reads (and is
    /// written) `interrupted`. Read on the shared session first: a job that stopped, or runs
    /// with its claim held, is answered from there, so a node following another node's job does
    /// not open a session for each look; only a running job whose claim nobody holds is read
    /// again in a transaction of its own, which decides it under the claim's lock.
    pub(crate) fn get(&self, job_id: &str) -> Result<Option<JobFile>, DatabaseError> {
        let (pool, id) = (self.pool(), job_id.to_owned());
        let key = claim_key(job_id);
        let seen = self.db.run(async move {
            pool.read(|client| {
                let id = id.clone();
                async move {
                    let row = client
                        .query_opt(
                            "SELECT body, status <> 'running' OR EXISTS (SELECT 1 FROM pg_locks \
                             WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
                             AND classid = (($2::bigint >> 32) & 4294967295)::oid \
                             AND objid = ($2::bigint & 4294967295)::oid) \
                             FROM pipeline_jobs WHERE job_id = $1",
                            &[&id, &key],
                        )
                        .await
                        .map_err(|e| db_error("read a job", &e))?;
                    Ok(row.map(|r| (r.get::<_, String>(0), r.get::<_, bool>(1))))
                }
            })
            .await
        })?;
        match seen {
            None => Ok(None),
            Some((body, true)) => parse(&body).map(Some),
            Some((_, false)) => self.get_deciding(job_id),
        }
    }

    /// [`JobsDb::get`] in a transaction that marks a running job whose claim is free
    /// `interrupted`.
    fn get_deciding(&self, job_id: &str) -> Result<Option<JobFile>, DatabaseError> {
        let (pool, id) = (self.pool(), job_id.to_owned());
        self.db.run(async move {
            let mut client = pool.alone().await?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| db_error("begin a read", &e))?;
            let row = tx
                .query_opt(
                    "SELECT body FROM pipeline_jobs WHERE job_id = $1 FOR UPDATE",
                    &[&id],
                )
                .await
                .map_err(|e| db_error("read a job", &e))?;
            let Some(row) = row else { return Ok(None) };
            let mut file = parse(&row.get::<_, String>(0))?;
            if interrupt_if_orphaned(&tx, &file).await? {
                file = interrupted(file);
            }
            tx.commit()
                .await
                .map_err(|e| db_error("commit a read", &e))?;
            Ok(Some(file))
        })
    }
}

/// A start's transaction: `Ok(Ok(()))` when the job was stored, `Ok(Err((keyed, body)))` when
/// a job its key started (`keyed`) or a live one on its task answers instead.
async fn start_in(
    pool: &Pool,
    id: &str,
    task: &str,
    key: Option<&String>,
    kept: i64,
    body: &str,
) -> Result<Result<(), (bool, String)>, DatabaseError> {
    let mut client = pool.alone().await?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_error("begin a start", &e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&START_LOCK])
        .await
        .map_err(|e| db_error("lock the starts", &e))?;
    if let Some(key) = &key
        && let Some(row) = tx
            .query_opt(
                "SELECT body FROM pipeline_jobs WHERE idempotency_key = $1",
                &[key],
            )
            .await
            .map_err(|e| db_error("read a job", &e))?
    {
        return Ok(Err((true, row.get::<_, String>(0))));
    }
    let running = tx
        .query_opt(
            "SELECT body FROM pipeline_jobs WHERE task_id = $1 AND status = 'running'",
            &[&task],
        )
        .await
        .map_err(|e| db_error("read a job", &e))?;
    if let Some(row) = running {
        let found: String = row.get(0);
        let other = parse(&found)?;
        if !interrupt_if_orphaned(&tx, &other).await? {
            return Ok(Err((false, found)));
        }
    }
    tx.execute(
        "DELETE FROM pipeline_jobs WHERE job_id IN (SELECT job_id FROM pipeline_jobs \
             WHERE status <> 'running' ORDER BY updated_at, job_id \
             LIMIT greatest(0, (SELECT count(*) FROM pipeline_jobs) - $1 + 1))",
        &[&kept],
    )
    .await
    .map_err(|e| db_error("forget old jobs", &e))?;
    tx.execute(
        "INSERT INTO pipeline_jobs (job_id, task_id, status, idempotency_key, updated_at, body) \
             VALUES ($1, $2, 'running', $3, now(), $4)",
        &[&id, &task, &key, &body],
    )
    .await
    .map_err(|e| db_error("store a job", &e))?;
    tx.commit()
        .await
        .map_err(|e| db_error("commit a start", &e))?;
    Ok(Ok(()))
}

/// The job as it reads once its node is known to be gone.
fn interrupted(mut file: JobFile) -> JobFile {
    file.job.status = JobStatus::Interrupted;
    file.job.updated_at = chrono::Utc::now();
    file.job.set_progress();
    file
}

/// When `file` reads running but nobody holds its claim, writes it `interrupted` in `tx` and
/// says so.
async fn interrupt_if_orphaned(
    tx: &tokio_postgres::Transaction<'_>,
    file: &JobFile,
) -> Result<bool, DatabaseError> {
    if file.job.status != JobStatus::Running {
        return Ok(false);
    }
    let key = claim_key(&file.job.job_id);
    let free: bool = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&key])
        .await
        .map_err(|e| db_error("check a job's claim", &e))?
        .get(0);
    if !free {
        return Ok(false);
    }
    let file = interrupted(file.clone());
    let body = serde_json::to_string(&file).map_err(damaged)?;
    tx.execute(
        "UPDATE pipeline_jobs SET status = 'interrupted', updated_at = now(), body = $2 WHERE job_id = $1",
        &[&file.job.job_id, &body],
    )
    .await
    .map_err(|e| db_error("mark a job interrupted", &e))?;
    tracing::warn!(job_id = %file.job.job_id, "a job whose node is gone reads interrupted");
    Ok(true)
}
