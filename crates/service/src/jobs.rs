//! Pipeline jobs: the research steps of SPEC §5 carried out in the background, for clients that
//! would rather start a run and poll it than call every tool themselves.
//!
//! A job runs eight steps — 1 plan (the sub-questions as given), 2 retrieve (per source, for
//! each scope), 3 screen, 4 resolve conflicts, 5 synthesise, 6 build the matrix, 7 conclude,
//! 8 explain — through the same tool calls a client would make, with the caller who started it
//! as the actor of every event. Screening needs a judgement the service does not make: a job
//! that finds candidates waiting stops at step 3 with the pending actions. Every step first looks
//! at what the ledger holds and skips what is already done, so running the pipeline again after
//! the client screened (or after a restart) resumes where the task stands and writes nothing
//! twice.
//!
//! A job's state is a small JSON file in the data directory, rewritten (atomically) at every
//! step. It is a report on the work, not the record of it — the ledger is — so a job that was
//! running when the process stopped reads `interrupted` on the next start. Everything is
//! bounded: jobs running at once, and jobs kept (the oldest finished ones are forgotten first).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use chrono::{DateTime, Utc};
use research::{PendingAction, TaskState, Tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::args::{JobStatusArgs, RunPipelineArgs};
use crate::error::ServiceError;
use crate::service::{Caller, Service, fingerprint};
use crate::tools::ToolOutput;

/// The steps of a pipeline job, in order: a short name and what the job is doing meanwhile.
pub const STEPS: [(&str, &str); 8] = [
    ("plan", "planning the scopes"),
    ("retrieve", "retrieving evidence"),
    ("screen", "screening"),
    ("resolve", "resolving conflicts"),
    ("synthesise", "synthesising viewpoints"),
    ("matrix", "building the decision matrix"),
    ("conclude", "issuing the verdict"),
    ("explain", "explaining the verdict"),
];

/// The sources a job searches, in order. The embedded corpus is the only built-in source.
const SOURCES: [&str; 1] = ["corpus"];

/// The version of the job file's layout; a file of another version is set aside, not misread.
const JOB_FILE_FORMAT: u32 = 1;

/// Bounds on jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLimits {
    /// Jobs running at once; another start is refused with `limit_exceeded`.
    pub running_max: usize,
    /// Jobs remembered (on disk and in memory); the oldest finished ones are forgotten first.
    /// At least `running_max`.
    pub kept_max: usize,
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            running_max: 4,
            kept_max: 256,
        }
    }
}

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// It is working through its steps.
    Running,
    /// It stopped at screening: candidates need a judgement (see `pending_actions`). Screen
    /// them, then run the pipeline again.
    Waiting,
    /// Every step is done: the task has an explained, current verdict.
    Completed,
    /// A step was refused or failed (see `error`); the task keeps what the steps before it
    /// wrote.
    Failed,
    /// The process stopped while it was running. Run the pipeline again to resume.
    Interrupted,
}

impl JobStatus {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Waiting => "waiting",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Interrupted => "interrupted",
        }
    }

    /// Whether the job has stopped working (for good, or until it is run again).
    pub fn is_stopped(self) -> bool {
        !matches!(self, JobStatus::Running)
    }
}

/// What a finished step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// It wrote to the task.
    Done,
    /// The ledger already held what it would have written.
    Skipped,
}

/// One finished step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Its number, 1 to 8.
    pub step: u8,
    /// Its name.
    pub name: String,
    /// Whether it wrote anything.
    pub outcome: StepOutcome,
    /// What it found or did, in a sentence.
    pub detail: String,
    /// The task's version after it.
    pub session_version: u64,
}

/// A pipeline job, as clients see it (`research_job_status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Its id.
    pub job_id: String,
    /// The task it works on.
    pub task_id: String,
    /// Where it stands.
    pub status: JobStatus,
    /// The step it is at (or stopped at), 1 to 8.
    pub step: u8,
    /// The number of steps.
    pub steps_total: u8,
    /// The name of that step.
    pub step_name: String,
    /// How far into the step, e.g. `2/3` searches.
    pub step_progress: Option<String>,
    /// One line for people, e.g. `step 2/8: retrieving evidence 2/3`.
    pub progress: String,
    /// The steps finished so far, in order.
    pub steps: Vec<StepRecord>,
    /// What the client can do next on the task (the judgement screening needs, a human decision
    /// on a pending conflict).
    pub pending_actions: Vec<PendingAction>,
    /// The structured error that stopped it, when it failed.
    pub error: Option<Value>,
    /// The verdict it reached: `conclusion_id`, `stance`, `confidence`.
    pub conclusion: Option<Value>,
    /// The task's version when the job last moved.
    pub session_version: u64,
    /// Who started it: the actor of every event it writes.
    pub actor: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it last moved.
    pub updated_at: DateTime<Utc>,
}

impl Job {
    pub(crate) fn set_progress(&mut self) {
        let (name, doing) = STEPS[usize::from(self.step.clamp(1, 8)) - 1];
        self.step_name = name.to_owned();
        let at = format!("step {}/{}", self.step, self.steps_total);
        self.progress = match self.status {
            JobStatus::Running => match &self.step_progress {
                Some(p) => format!("{at}: {doing} {p}"),
                None => format!("{at}: {doing}"),
            },
            JobStatus::Waiting => format!(
                "{at}: waiting for screening: {}; screen the candidates, then run the pipeline again",
                self.pending_actions
                    .first()
                    .map_or("candidates await a judgement", |a| a.reason.as_str())
            ),
            JobStatus::Completed => match &self.conclusion {
                Some(c) => format!(
                    "{at}: completed: verdict {} (confidence {:.3})",
                    c["stance"].as_str().unwrap_or("?"),
                    c["confidence"].as_f64().unwrap_or(f64::NAN)
                ),
                None => format!("{at}: completed"),
            },
            JobStatus::Failed => format!(
                "{at}: failed while {doing}: {}",
                self.error
                    .as_ref()
                    .and_then(|e| e["message"].as_str())
                    .unwrap_or("unknown error")
            ),
            JobStatus::Interrupted => format!(
                "{at}: interrupted while {doing} (the service stopped); run the pipeline again to resume"
            ),
        };
    }

    /// The job as a tool result: its fields, plus whether this is an earlier call's answer.
    pub fn to_output(&self, replayed: bool) -> ToolOutput {
        let mut structured = serde_json::to_value(self).unwrap_or_else(|_| json!({}));
        if let Value::Object(map) = &mut structured {
            map.insert("replayed".into(), json!(replayed));
        }
        ToolOutput {
            structured,
            text: format!(
                "Job {} on task {}: {}.",
                self.job_id, self.task_id, self.progress
            ),
        }
    }
}

/// What is kept on disk (or in the storage database) for a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JobFile {
    format: u32,
    pub(crate) job: Job,
    /// The idempotency key the job was started with, and the fingerprint of that call.
    pub(crate) idempotency: Option<KeyRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    pub(crate) key: String,
    fingerprint: String,
}

struct Entry {
    file: JobFile,
    watch: watch::Sender<Job>,
}

/// The jobs of one service: a table in memory mirrored by one file per job; with a storage
/// database, the jobs this node runs, mirrored by their rows (every other job is read there).
pub(crate) struct Jobs {
    dir: PathBuf,
    db: Option<Arc<crate::jobs_db::JobsDb>>,
    limits: JobLimits,
    table: Mutex<BTreeMap<String, Entry>>,
    /// Set at shutdown: running jobs stop between steps and read `interrupted`.
    stopping: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// Why the jobs could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("the jobs folder {path}: {source}")]
pub struct JobsOpenError {
    path: PathBuf,
    source: std::io::Error,
}

impl Jobs {
    /// Loads the jobs kept in `dir`; those that were running read `interrupted` from now on.
    pub(crate) fn open(
        dir: &Path,
        limits: JobLimits,
        read_only: bool,
    ) -> Result<Jobs, JobsOpenError> {
        let io = |source| JobsOpenError {
            path: dir.to_path_buf(),
            source,
        };
        if !read_only {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut table = BTreeMap::new();
        let listing = match std::fs::read_dir(dir) {
            Err(e) if read_only && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            listing => listing.map_err(io)?.collect(),
        };
        for entry in listing {
            let path = entry.map_err(io)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let file: JobFile = match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            {
                Ok(file) => file,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "a job file that does not read is ignored");
                    continue;
                }
            };
            if file.format != JOB_FILE_FORMAT {
                tracing::warn!(path = %path.display(), format = file.format, "a job file of another format is ignored");
                continue;
            }
            let (watch, _) = watch::channel(file.job.clone());
            table.insert(file.job.job_id.clone(), Entry { file, watch });
        }
        let mut jobs = Jobs::shared(None, limits);
        jobs.dir = dir.to_path_buf();
        jobs.table = Mutex::new(table);
        if read_only {
            // Read as they are: marking a job interrupted is a write.
            return Ok(jobs);
        }
        let now = Utc::now();
        let mut table = jobs.lock();
        let ids: Vec<String> = table.keys().cloned().collect();
        for id in ids {
            if let Some(entry) = table.get_mut(&id)
                && entry.file.job.status == JobStatus::Running
            {
                // The process that ran it is gone: say so, so a poller does not wait forever.
                entry.file.job.status = JobStatus::Interrupted;
                entry.file.job.updated_at = now;
                entry.file.job.set_progress();
                jobs.persist(&entry.file);
                entry.watch.send_replace(entry.file.job.clone());
            }
        }
        drop(table);
        Ok(jobs)
    }

    /// The jobs of the storage database `db` (or none, to be filled by [`Jobs::open`]).
    pub(crate) fn shared(db: Option<crate::jobs_db::JobsDb>, limits: JobLimits) -> Jobs {
        Jobs {
            dir: PathBuf::new(),
            db: db.map(Arc::new),
            limits: JobLimits {
                running_max: limits.running_max.max(1),
                kept_max: limits.kept_max.max(limits.running_max.max(1)),
            },
            table: Mutex::new(BTreeMap::new()),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path_of(&self, job_id: &str) -> PathBuf {
        self.dir.join(format!("{job_id}.json"))
    }

    /// Writes a job's file: to a temporary name, synced, then renamed over the old one, so a
    /// crash leaves the old state or the new, never a torn file. A job file is a report, so a
    /// failure to write one is logged rather than failing the job.
    fn persist(&self, file: &JobFile) {
        if let Some(db) = &self.db {
            match db.update(file) {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    job_id = %file.job.job_id,
                    "a job that no longer reads running in the storage database is not written over"
                ),
                Err(e) => tracing::warn!(
                    job_id = %file.job.job_id,
                    error = %e,
                    "cannot write a job to the storage database"
                ),
            }
            return;
        }
        let path = self.path_of(&file.job.job_id);
        let tmp = path.with_extension("json.tmp");
        let result = (|| -> std::io::Result<()> {
            let bytes = serde_json::to_vec_pretty(file).map_err(std::io::Error::other)?;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "cannot write a job file");
        }
    }

    fn forget(&self, job_id: &str) {
        let path = self.path_of(job_id);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a job file");
        }
    }

    /// A job as it stands: this node's own, or the storage database's.
    pub(crate) fn get(&self, job_id: &str) -> Result<Job, ServiceError> {
        let local = self.lock().get(job_id).map(|e| e.file.job.clone());
        match (local, &self.db) {
            (Some(job), _) => Ok(job),
            (None, Some(db)) => db
                .get(job_id)
                .map_err(ServiceError::unavailable)?
                .map(|f| f.job)
                .ok_or_else(|| not_found(job_id)),
            (None, None) => Err(not_found(job_id)),
        }
    }

    /// Every change to a job from now on. A job another node runs is read from the storage
    /// database every `REMOTE_POLL` while someone watches it and it runs.
    pub(crate) fn watch(&self, job_id: &str) -> Result<watch::Receiver<Job>, ServiceError> {
        if let Some(receiver) = self.lock().get(job_id).map(|e| e.watch.subscribe()) {
            return Ok(receiver);
        }
        let db = self.db.as_ref().ok_or_else(|| not_found(job_id))?;
        let job = self.get(job_id)?;
        let (sender, receiver) = watch::channel(job.clone());
        if job.status.is_stopped() {
            return Ok(receiver);
        }
        let (db, id) = (Arc::clone(db), job_id.to_owned());
        let polled = std::thread::Builder::new()
            .name("job-watch".into())
            .spawn(move || {
                while sender.receiver_count() > 0 {
                    std::thread::sleep(REMOTE_POLL);
                    let Ok(Some(file)) = db.get(&id) else { break };
                    let stopped = file.job.status.is_stopped();
                    sender.send_if_modified(|j| {
                        let moved = *j != file.job;
                        *j = file.job;
                        moved
                    });
                    if stopped {
                        break;
                    }
                }
            });
        if let Err(e) = polled {
            tracing::warn!(error = %e, "cannot follow a job of another node");
        }
        Ok(receiver)
    }

    /// A job this node ran stopped: with a storage database its claim goes and its row is
    /// what every node reads from now on.
    fn stopped(&self, job_id: &str) {
        if let Some(db) = &self.db {
            db.release(job_id);
            self.lock().remove(job_id);
        }
    }

    /// Changes a job, writes its file and tells its watchers.
    fn update(&self, job_id: &str, change: impl FnOnce(&mut Job)) -> Option<Job> {
        let mut table = self.lock();
        let entry = table.get_mut(job_id)?;
        change(&mut entry.file.job);
        entry.file.job.updated_at = Utc::now();
        entry.file.job.set_progress();
        self.persist(&entry.file);
        let job = entry.file.job.clone();
        entry.watch.send_replace(job.clone());
        Some(job)
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Whether this node lost its claim on a job it runs in the storage database (the session
    /// that held it was cut): other nodes may read it interrupted already.
    fn claim_lost(&self, job_id: &str) -> bool {
        self.db.as_ref().is_some_and(|db| !db.holds(job_id))
    }

    /// Stops every running job between two steps (they read `interrupted`) and waits for them.
    pub(crate) fn stop_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for thread in threads {
            if thread.join().is_err() {
                tracing::error!("a pipeline job panicked");
            }
        }
    }
}

impl Service {
    /// A pipeline job as it stands.
    pub fn job(&self, job_id: &str) -> Result<Job, ServiceError> {
        self.inner.jobs.get(job_id)
    }

    /// Every change to a job from now on, for front ends that report progress. The receiver
    /// holds the job as it stands; it closes when the job is forgotten.
    pub fn watch_job(&self, job_id: &str) -> Result<watch::Receiver<Job>, ServiceError> {
        self.inner.jobs.watch(job_id)
    }

    /// `research_job_status`.
    pub(crate) fn job_status_tool(&self, a: &JobStatusArgs) -> Result<ToolOutput, ServiceError> {
        let mut job = self.job(&a.job_id)?;
        // The task may have moved since the job last did: report its version now.
        if let Ok(state) = self.state(&job.task_id) {
            job.session_version = state.version();
        }
        Ok(job.to_output(false))
    }

    /// `research_run_pipeline`: starts a job (or answers with the one the same idempotency key
    /// started, or the one already running on the task) and returns at once.
    pub(crate) fn run_pipeline_tool(
        &self,
        caller: &Caller,
        arguments: &Value,
        a: &RunPipelineArgs,
    ) -> Result<ToolOutput, ServiceError> {
        let (job, replayed) = self.start_pipeline(caller, arguments, a)?;
        Ok(job.to_output(replayed))
    }

    fn start_pipeline(
        &self,
        caller: &Caller,
        arguments: &Value,
        a: &RunPipelineArgs,
    ) -> Result<(Job, bool), ServiceError> {
        let jobs = &self.inner.jobs;
        let key = self.key_record(caller, arguments, a)?;
        if let Some(db) = &jobs.db {
            return self.start_shared(db, caller, a, key);
        }
        let mut table = jobs.lock();
        // The key first, as for every write: a retry gets the job its first call started.
        if let Some(key) = &key {
            let earlier = table.values().find_map(|e| {
                e.file
                    .idempotency
                    .as_ref()
                    .filter(|k| k.key == key.key)
                    .map(|k| (k.clone(), e.file.job.clone()))
            });
            if let Some((recorded, job)) = earlier {
                return replay(&recorded, key, job);
            }
        }
        let state = self.startable(a)?;
        // One job per task at a time: a second start is the same work, so it gets that job.
        if let Some(running) = table
            .values()
            .find(|e| e.file.job.task_id == a.task_id && e.file.job.status == JobStatus::Running)
        {
            return Ok((running.file.job.clone(), false));
        }
        jobs.room_to_run(&table)?;
        // Room for one more: forget the oldest stopped jobs.
        while table.len() >= jobs.limits.kept_max {
            let oldest = table
                .values()
                .filter(|e| e.file.job.status.is_stopped())
                .min_by(|x, y| {
                    (x.file.job.updated_at, &x.file.job.job_id)
                        .cmp(&(y.file.job.updated_at, &y.file.job.job_id))
                })
                .map(|e| e.file.job.job_id.clone());
            let Some(oldest) = oldest else { break };
            table.remove(&oldest);
            jobs.forget(&oldest);
        }
        let file = JobFile {
            format: JOB_FILE_FORMAT,
            job: new_job(&a.task_id, state.version(), &caller.actor),
            idempotency: key,
        };
        jobs.persist(&file);
        let job = file.job.clone();
        let (watch, _) = watch::channel(job.clone());
        table.insert(job.job_id.clone(), Entry { file, watch });
        drop(table);
        self.spawn_job(&job, caller)?;
        Ok((job, false))
    }

    /// The idempotency key of a start, checked, with the fingerprint of the call.
    fn key_record(
        &self,
        caller: &Caller,
        arguments: &Value,
        a: &RunPipelineArgs,
    ) -> Result<Option<KeyRecord>, ServiceError> {
        let Some(key) = &a.idempotency_key else {
            return Ok(None);
        };
        let max = self.ledger().limits().idempotency_key_bytes_max;
        if key.is_empty() || key.len() > max {
            return Err(ServiceError::invalid(
                "idempotency_key",
                format!("an idempotency key is 1 to {max} bytes"),
            ));
        }
        Ok(Some(KeyRecord {
            key: key.clone(),
            fingerprint: fingerprint(
                research::Tool::ResearchRunPipeline.name(),
                arguments,
                &caller.actor,
            )
            .to_hex(),
        }))
    }

    /// The task a start names, when a pipeline may start on it.
    fn startable(&self, a: &RunPipelineArgs) -> Result<Arc<TaskState>, ServiceError> {
        let state = self.state(&a.task_id)?;
        if state.task().is_none() {
            return Err(ServiceError::NotFound {
                resource: "task",
                id: a.task_id.clone(),
            });
        }
        if state.is_closed() {
            return Err(research::Refusal::TaskClosed {
                task_id: a.task_id.clone(),
            }
            .into());
        }
        if let Some(expected) = a.expected_version
            && expected != state.version()
        {
            return Err(ServiceError::SessionConflict {
                task_id: a.task_id.clone(),
                expected_version: expected,
                current_version: state.version(),
            });
        }
        Ok(state)
    }

    /// A start with a storage database: decided there, so that one job runs per task across
    /// every node, and a key answers with its job on any node.
    fn start_shared(
        &self,
        db: &crate::jobs_db::JobsDb,
        caller: &Caller,
        a: &RunPipelineArgs,
        key: Option<KeyRecord>,
    ) -> Result<(Job, bool), ServiceError> {
        let jobs = &self.inner.jobs;
        if let Some(key) = &key
            && let Some(earlier) = db.keyed(&key.key).map_err(ServiceError::unavailable)?
            && let Some(recorded) = &earlier.idempotency
        {
            return replay(recorded, key, earlier.job);
        }
        let state = self.startable(a)?;
        let mut table = jobs.lock();
        jobs.room_to_run(&table)?;
        let file = JobFile {
            format: JOB_FILE_FORMAT,
            job: new_job(&a.task_id, state.version(), &caller.actor),
            idempotency: key.clone(),
        };
        match db
            .start(&file, jobs.limits.kept_max)
            .map_err(ServiceError::unavailable)?
        {
            crate::jobs_db::Started::New => {}
            crate::jobs_db::Started::Running(other) => return Ok((other.job, false)),
            crate::jobs_db::Started::Keyed(earlier) => {
                return match (&earlier.idempotency, &key) {
                    (Some(recorded), Some(key)) => replay(recorded, key, earlier.job),
                    _ => Ok((earlier.job, true)),
                };
            }
        }
        let job = file.job.clone();
        let (watch, _) = watch::channel(job.clone());
        table.insert(job.job_id.clone(), Entry { file, watch });
        drop(table);
        self.spawn_job(&job, caller)?;
        Ok((job, false))
    }

    /// Runs a stored job on a thread of its own.
    fn spawn_job(&self, job: &Job, caller: &Caller) -> Result<(), ServiceError> {
        let jobs = &self.inner.jobs;
        let service = self.clone();
        let caller = caller.clone();
        let job_id = job.job_id.clone();
        let spawned = std::thread::Builder::new()
            .name("pipeline-job".into())
            .spawn(move || run_job(&service, &job_id, &caller));
        match spawned {
            Ok(handle) => {
                let mut threads = jobs.threads.lock().unwrap_or_else(|p| p.into_inner());
                threads.retain(|t| !t.is_finished());
                threads.push(handle);
                Ok(())
            }
            Err(e) => {
                let error = ServiceError::unavailable(format!("cannot start the job: {e}"));
                jobs.update(&job.job_id, |j| {
                    j.status = JobStatus::Failed;
                    j.error = Some(error.to_json());
                });
                jobs.stopped(&job.job_id);
                Err(error)
            }
        }
    }
}

impl Jobs {
    /// Refuses another start while the service stops or runs `running_max` jobs.
    fn room_to_run(&self, table: &BTreeMap<String, Entry>) -> Result<(), ServiceError> {
        if self.stopping() {
            return Err(ServiceError::unavailable(
                "the service is shutting down; run the pipeline again once it is back",
            ));
        }
        let running = table
            .values()
            .filter(|e| e.file.job.status == JobStatus::Running)
            .count();
        if running >= self.limits.running_max {
            return Err(ServiceError::LimitExceeded {
                limit: "jobs_running_max".into(),
                max: self.limits.running_max as u64,
                actual: running as u64 + 1,
            });
        }
        Ok(())
    }
}

/// The job an idempotency key started, for a retry of the same call; another call under the
/// same key is refused.
fn replay(recorded: &KeyRecord, key: &KeyRecord, job: Job) -> Result<(Job, bool), ServiceError> {
    if recorded.fingerprint != key.fingerprint {
        return Err(ServiceError::IdempotencyKeyReused {
            key: key.key.clone(),
        });
    }
    Ok((job, true))
}

/// A job starting now on a task at `version`, for `actor`.
fn new_job(task_id: &str, version: u64, actor: &str) -> Job {
    let now = Utc::now();
    let mut job = Job {
        job_id: new_job_id(),
        task_id: task_id.to_owned(),
        status: JobStatus::Running,
        step: 1,
        steps_total: STEPS.len() as u8,
        step_name: String::new(),
        step_progress: None,
        progress: String::new(),
        steps: Vec::new(),
        pending_actions: Vec::new(),
        error: None,
        conclusion: None,
        session_version: version,
        actor: actor.to_owned(),
        started_at: now,
        updated_at: now,
    };
    job.set_progress();
    job
}

/// How often a job another node runs is read while it is watched.
const REMOTE_POLL: std::time::Duration = std::time::Duration::from_millis(250);

fn not_found(job_id: &str) -> ServiceError {
    ServiceError::NotFound {
        resource: "job",
        id: job_id.to_owned(),
    }
}

/// A fresh job id: `job-` and 16 random hex digits (the clock's nanoseconds where the system
/// has no randomness).
fn new_job_id() -> String {
    let mut random = [0u8; 8];
    if getrandom::fill(&mut random).is_err() {
        let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default();
        random = nanos.to_le_bytes();
    }
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    format!("job-{hex}")
}

/// Why a job stopped before its last step.
enum Halt {
    /// Screening needs a judgement.
    Waiting(Vec<PendingAction>),
    /// The service is stopping.
    Interrupted,
    /// This node lost its claim on the job.
    ClaimLost,
    /// A step failed.
    Failed(ServiceError),
}

impl From<ServiceError> for Halt {
    fn from(e: ServiceError) -> Self {
        Halt::Failed(e)
    }
}

fn run_job(service: &Service, job_id: &str, caller: &Caller) {
    let jobs = &service.inner.jobs;
    let outcome = Pipeline {
        service,
        job_id,
        caller,
    }
    .run();
    let version = service
        .state(&jobs.get(job_id).map(|j| j.task_id).unwrap_or_default())
        .map(|s| s.version())
        .ok();
    jobs.update(job_id, |job| {
        if let Some(v) = version {
            job.session_version = v;
        }
        job.step_progress = None;
        match outcome {
            Ok(()) => job.status = JobStatus::Completed,
            Err(Halt::Waiting(actions)) => {
                job.status = JobStatus::Waiting;
                job.pending_actions = actions;
            }
            Err(Halt::Interrupted) => job.status = JobStatus::Interrupted,
            Err(Halt::ClaimLost) => {
                job.status = JobStatus::Interrupted;
                job.error = Some(
                    ServiceError::unavailable(
                        "the database session that held this node's claim on the job was cut, \
                         so the job stopped between two steps; run the pipeline again to resume",
                    )
                    .to_json(),
                );
            }
            Err(Halt::Failed(e)) => {
                job.status = JobStatus::Failed;
                job.error = Some(e.to_json());
            }
        }
    });
    jobs.stopped(job_id);
}

/// One run of the pipeline over a task.
struct Pipeline<'a> {
    service: &'a Service,
    job_id: &'a str,
    caller: &'a Caller,
}

impl Pipeline<'_> {
    fn task_id(&self) -> Result<String, Halt> {
        Ok(self.service.job(self.job_id)?.task_id)
    }

    fn state(&self) -> Result<Arc<TaskState>, Halt> {
        Ok(self.service.state(&self.task_id()?)?)
    }

    /// Moves the job to `step` (or further into it), unless the service is stopping.
    fn at(&self, step: u8, progress: Option<String>) -> Result<(), Halt> {
        if self.service.inner.jobs.stopping() {
            return Err(Halt::Interrupted);
        }
        if self.service.inner.jobs.claim_lost(self.job_id) {
            return Err(Halt::ClaimLost);
        }
        self.service.inner.jobs.update(self.job_id, |job| {
            job.step = step;
            job.step_progress = progress;
        });
        Ok(())
    }

    fn finished(&self, step: u8, outcome: StepOutcome, detail: String) -> Result<(), Halt> {
        let state = self.state()?;
        self.service.inner.jobs.update(self.job_id, |job| {
            job.session_version = state.version();
            job.steps.push(StepRecord {
                step,
                name: STEPS[usize::from(step) - 1].0.to_owned(),
                outcome,
                detail,
                session_version: state.version(),
            });
        });
        Ok(())
    }

    fn call(&self, tool: Tool, arguments: Value) -> Result<Value, Halt> {
        Ok(self
            .service
            .call_tool(self.caller, tool.name(), &arguments)?
            .structured)
    }

    /// Runs `tool` at `step` when the workflow says it is due, else records that the ledger
    /// already holds it.
    fn when_due(
        &self,
        step: u8,
        tool: Tool,
        describe: impl Fn(&Value) -> String,
    ) -> Result<(), Halt> {
        self.at(step, None)?;
        let state = self.state()?;
        if is_due(&state, tool) {
            let out = self.call(tool, json!({"task_id": self.task_id()?}))?;
            self.finished(step, StepOutcome::Done, describe(&out))
        } else {
            self.finished(
                step,
                StepOutcome::Skipped,
                "already up to date in the ledger".into(),
            )
        }
    }

    fn run(&self) -> Result<(), Halt> {
        let scopes = self.plan()?;
        self.retrieve(&scopes)?;
        self.screen()?;
        self.when_due(4, Tool::EvaluationConflictResolution, |out| {
            let conflicts = out["conflicts"].as_array().map_or(0, Vec::len);
            let pending = out["conflicts"]
                .as_array()
                .map_or(0, |c| c.iter().filter(|c| c["tier"] == "pending").count());
            format!("{conflicts} conflict(s) in force, {pending} pending a human decision")
        })?;
        self.synthesise()?;
        self.when_due(6, Tool::EvaluationBuildDecisionMatrix, |out| {
            let rows = out["matrix"]["rows"].as_array().map_or(0, Vec::len);
            format!("built the decision matrix ({rows} row(s))")
        })?;
        self.when_due(7, Tool::EvaluationGenerateConclusion, |out| {
            format!(
                "issued {}: {} (confidence {:.3})",
                out["conclusion_id"].as_str().unwrap_or("a conclusion"),
                out["stance"].as_str().unwrap_or("?"),
                out["confidence"].as_f64().unwrap_or(f64::NAN)
            )
        })?;
        self.when_due(8, Tool::EvaluationExplainReasoning, |_| {
            "recorded the explanation".into()
        })?;
        self.record_outcome()
    }

    /// Step 1, plan: the scopes are the main question and the sub-questions as given, each
    /// with its query (`None` for the main question).
    fn plan(&self) -> Result<Vec<(Option<String>, String)>, Halt> {
        self.at(1, None)?;
        let state = self.state()?;
        let task = state.task().ok_or_else(|| {
            Halt::Failed(ServiceError::NotFound {
                resource: "task",
                id: self.task_id().unwrap_or_default(),
            })
        })?;
        let mut scopes: Vec<(Option<String>, String)> = vec![(None, task.question.clone())];
        for q in state.sub_questions() {
            scopes.push((
                Some(q.sub_question.id.as_str().to_owned()),
                q.sub_question.text.clone(),
            ));
        }
        let names: Vec<&str> = scopes
            .iter()
            .map(|(id, _)| id.as_deref().unwrap_or("the main question"))
            .collect();
        self.finished(
            1,
            StepOutcome::Skipped,
            format!("{} scope(s): {}", scopes.len(), names.join(", ")),
        )?;
        Ok(scopes)
    }

    /// Step 2, retrieve, per source, for each scope: a search whose query and source the
    /// ledger already records is not run again.
    fn retrieve(&self, scopes: &[(Option<String>, String)]) -> Result<(), Halt> {
        let units: Vec<(&(Option<String>, String), &str)> = scopes
            .iter()
            .flat_map(|scope| SOURCES.iter().map(move |source| (scope, *source)))
            .collect();
        let (mut run, mut found) = (0usize, 0usize);
        for (i, ((scope, query), source)) in units.iter().enumerate() {
            self.at(2, Some(format!("{}/{}", i + 1, units.len())))?;
            let state = self.state()?;
            let done = state
                .searches()
                .iter()
                .any(|s| s.event.query == *query && s.event.sources.iter().any(|x| x == source));
            if done {
                continue;
            }
            let mut arguments = json!({"task_id": self.task_id()?, "sources": [source]});
            if let Some(id) = scope {
                arguments["sub_question"] = json!(id);
            }
            let out = self.call(Tool::RetrievalSearchEvidence, arguments)?;
            run += 1;
            found += out["candidates"].as_array().map_or(0, |c| {
                c.iter().filter(|c| c["already_in_task"] != true).count()
            });
        }
        let skipped = units.len() - run;
        self.finished(
            2,
            if run > 0 {
                StepOutcome::Done
            } else {
                StepOutcome::Skipped
            },
            format!(
                "{run} search(es) run, {skipped} already in the ledger; {found} new candidate(s)"
            ),
        )
    }

    /// Step 3, screen: a judgement the service does not make, so the job waits for it.
    fn screen(&self) -> Result<(), Halt> {
        self.at(3, None)?;
        let state = self.state()?;
        if is_due(&state, Tool::SynthesisScreenEvidence) {
            return Err(Halt::Waiting(research::next_actions(&state)));
        }
        self.finished(
            3,
            StepOutcome::Skipped,
            "no candidate awaits screening".into(),
        )
    }

    /// Step 5, synthesis: due when none reflects the latest change to the evidence.
    fn synthesise(&self) -> Result<(), Halt> {
        self.at(5, None)?;
        let state = self.state()?;
        let evidence_changed = state
            .evidence()
            .iter()
            .map(|e| e.status_provenance().cite.version)
            .max();
        let synthesised = state.latest_synthesis().map(|s| s.provenance.cite.version);
        match evidence_changed {
            Some(changed) if synthesised.is_none_or(|v| v < changed) => {
                self.call(
                    Tool::SynthesisResearchSynthesis,
                    json!({"task_id": self.task_id()?}),
                )?;
                self.finished(5, StepOutcome::Done, "recorded a synthesis".into())
            }
            Some(_) => self.finished(
                5,
                StepOutcome::Skipped,
                "already up to date in the ledger".into(),
            ),
            None => self.finished(5, StepOutcome::Skipped, "the task has no evidence".into()),
        }
    }

    /// What the job leaves on its record once every step ran: the verdict, and what the task
    /// still needs.
    fn record_outcome(&self) -> Result<(), Halt> {
        let state = self.state()?;
        let conclusion = state.conclusion_card(None).map(|card| {
            json!({
                "conclusion_id": card.conclusion_id,
                "stance": card.stance.name(),
                "confidence": card.confidence,
            })
        });
        let actions = research::next_actions(&state);
        self.service.inner.jobs.update(self.job_id, |job| {
            job.conclusion = conclusion;
            job.pending_actions = actions;
        });
        Ok(())
    }
}

fn is_due(state: &TaskState, tool: Tool) -> bool {
    research::next_actions(state).iter().any(|a| a.tool == tool)
}
