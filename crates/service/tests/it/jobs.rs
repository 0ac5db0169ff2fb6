//! Pipeline jobs: they stop at screening, resume from what the ledger holds, survive a restart
//! as `interrupted`, and are bounded.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use service::{JobStatus, Service, ServiceError, ServiceOptions};

use super::{add, alice, call, open_task};

/// Polls a job until it stops working.
fn wait(service: &Service, job_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = call(service, "research_job_status", json!({"job_id": job_id})).unwrap();
        if job["status"] != "running" {
            return job;
        }
        assert!(Instant::now() < deadline, "the job never stopped: {job}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn open(dir: &std::path::Path) -> Service {
    let mut options = ServiceOptions::new(dir);
    options.ledger.checkpoint_interval = None;
    Service::open(options).unwrap()
}

fn kinds(service: &Service, task: &str) -> Vec<String> {
    service
        .projector()
        .audit_trail(task, 1, Some(500))
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[test]
fn a_job_stops_at_screening_then_resumes_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    let service = open(dir.path());
    let task = open_task(&service);
    call(
        &service,
        "research_expand_subquestions",
        json!({"task_id": task, "sub_questions": ["Do new mines open faster than before?"]}),
    )
    .unwrap();
    let a = add(&service, &task, "statistics.example.org", "supports");
    let b = add(&service, &task, "ministry.example.org", "supports");

    let started = call(&service, "research_run_pipeline", json!({"task_id": task})).unwrap();
    assert_eq!(started["task_id"], task.as_str());
    assert_eq!(started["replayed"], false);
    let job_id = started["job_id"].as_str().unwrap().to_owned();
    let job = wait(&service, &job_id);
    assert_eq!(job["status"], "waiting", "{job}");
    assert_eq!(job["step"], 3);
    assert_eq!(job["steps_total"], 8);
    assert!(
        job["progress"]
            .as_str()
            .unwrap()
            .starts_with("step 3/8: waiting for screening"),
        "{job}"
    );
    assert_eq!(
        job["pending_actions"][0]["tool"], "synthesis_screen_evidence",
        "{job}"
    );
    // Two scopes and one source: two searches, recorded once each.
    assert_eq!(
        job["steps"][0]["detail"],
        "2 scope(s): the main question, sq-1"
    );
    assert_eq!(job["steps"][1]["name"], "retrieve");
    let searches = |service: &Service| {
        kinds(service, &task)
            .iter()
            .filter(|k| *k == "search_recorded")
            .count()
    };
    assert_eq!(searches(&service), 2);

    call(
        &service,
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [
            {"evidence_id": a["evidence_id"], "adopt": true},
            {"evidence_id": b["evidence_id"], "adopt": true},
        ]}),
    )
    .unwrap();
    let again = call(&service, "research_run_pipeline", json!({"task_id": task})).unwrap();
    let job = wait(&service, again["job_id"].as_str().unwrap());
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["step"], 8);
    assert_eq!(job["conclusion"]["stance"], "supportive", "{job}");
    // Resumed from the ledger: no search ran twice, and each later step ran once.
    assert_eq!(job["steps"][1]["outcome"], "skipped", "{job}");
    assert_eq!(searches(&service), 2);
    let names: Vec<&str> = job["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "plan",
            "retrieve",
            "screen",
            "resolve",
            "synthesise",
            "matrix",
            "conclude",
            "explain"
        ]
    );
    let k = kinds(&service, &task);
    for kind in [
        "conflicts_adjudicated",
        "synthesis_recorded",
        "decision_matrix_built",
        "conclusion_issued",
        "explanation_recorded",
    ] {
        assert_eq!(k.iter().filter(|x| *x == kind).count(), 1, "{kind}: {k:?}");
    }
    // Every event the job wrote is the caller's.
    let trail = service.projector().audit_trail(&task, 1, None).unwrap();
    assert!(trail.events.iter().all(|e| e.actor == "alice"));

    // A third run finds nothing to do and writes nothing.
    let version = service.state(&task).unwrap().version();
    let third = call(&service, "research_run_pipeline", json!({"task_id": task})).unwrap();
    let job = wait(&service, third["job_id"].as_str().unwrap());
    assert_eq!(job["status"], "completed");
    assert_eq!(service.state(&task).unwrap().version(), version);
    assert!(
        job["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["outcome"] == "skipped"),
        "{job}"
    );
}

#[test]
fn a_job_that_was_running_reads_interrupted_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let service = open(dir.path());
    let task = open_task(&service);
    add(&service, &task, "statistics.example.org", "supports");
    let started = call(&service, "research_run_pipeline", json!({"task_id": task})).unwrap();
    let job_id = started["job_id"].as_str().unwrap().to_owned();
    assert_eq!(wait(&service, &job_id)["status"], "waiting");
    service.shutdown();
    drop(service);

    // What a process killed in the middle of a step leaves: the file still says running.
    let path = dir.path().join("jobs").join(format!("{job_id}.json"));
    let mut file: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    file["job"]["status"] = json!("running");
    file["job"]["step"] = json!(2);
    std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();

    let service = open(dir.path());
    let job = service.job(&job_id).unwrap();
    assert_eq!(job.status, JobStatus::Interrupted);
    assert_eq!(
        job.progress,
        "step 2/8: interrupted while retrieving evidence (the service stopped); run the pipeline again to resume"
    );
    let on_disk: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(on_disk["job"]["status"], "interrupted");
    // Running it again resumes from the ledger: the search it had recorded is not repeated.
    let again = call(&service, "research_run_pipeline", json!({"task_id": task})).unwrap();
    let resumed = wait(&service, again["job_id"].as_str().unwrap());
    assert_eq!(resumed["status"], "waiting");
    assert_eq!(resumed["steps"][1]["outcome"], "skipped", "{resumed}");
}

#[test]
fn idempotency_keys_versions_and_closed_tasks_guard_the_start() {
    let (_dir, service) = super::service();
    let task = open_task(&service);
    let version = service.state(&task).unwrap().version();
    let first = call(
        &service,
        "research_run_pipeline",
        json!({"task_id": task, "idempotency_key": "run-1"}),
    )
    .unwrap();
    let retry = call(
        &service,
        "research_run_pipeline",
        json!({"task_id": task, "idempotency_key": "run-1"}),
    )
    .unwrap();
    assert_eq!(retry["job_id"], first["job_id"]);
    assert_eq!(retry["replayed"], true);
    wait(&service, first["job_id"].as_str().unwrap());

    let other = service::Service::call_tool(
        &service,
        &service::Caller::new("bob"),
        "research_run_pipeline",
        &json!({"task_id": task, "idempotency_key": "run-1"}),
    )
    .unwrap_err();
    assert_eq!(other.code(), "idempotency_key_reused");

    let stale = call(
        &service,
        "research_run_pipeline",
        json!({"task_id": task, "expected_version": version + 100}),
    )
    .unwrap_err();
    let body = stale.to_json();
    assert_eq!(body["error"], "session_conflict");
    assert_eq!(body["suggested_action"], "research_summarize_state");

    let missing = call(
        &service,
        "research_run_pipeline",
        json!({"task_id": "nope"}),
    )
    .unwrap_err();
    assert_eq!(missing.code(), "not_found");
    let unknown = call(&service, "research_job_status", json!({"job_id": "job-0"})).unwrap_err();
    assert_eq!(unknown.code(), "not_found");
    let bad = call(&service, "research_job_status", json!({})).unwrap_err();
    assert!(
        matches!(&bad, ServiceError::InvalidArgument { field, .. } if field == "job_id"),
        "{bad:?}"
    );

    call(&service, "research_close_task", json!({"task_id": task})).unwrap();
    let closed = call(&service, "research_run_pipeline", json!({"task_id": task})).unwrap_err();
    assert_eq!(closed.code(), "task_closed");
}

#[test]
fn jobs_kept_are_bounded_and_the_oldest_finished_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServiceOptions::new(dir.path());
    options.ledger.checkpoint_interval = None;
    options.jobs.kept_max = 2;
    options.jobs.running_max = 1;
    let service = Service::open(options).unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let task = open_task(&service);
        let job = service
            .call_tool(&alice(), "research_run_pipeline", &json!({"task_id": task}))
            .unwrap()
            .structured;
        let id = job["job_id"].as_str().unwrap().to_owned();
        wait(&service, &id);
        ids.push(id);
    }
    assert_eq!(service.job(&ids[0]).unwrap_err().code(), "not_found");
    assert!(service.job(&ids[1]).is_ok());
    assert!(service.job(&ids[2]).is_ok());
    let files = std::fs::read_dir(dir.path().join("jobs"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert_eq!(files, 2);
}

/// The system clock, except that pipeline jobs' threads wait at it while the gate is shut: a
/// job that reads the time to write stays running until the test lets it go.
#[derive(Debug, Default)]
struct GateClock {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    waiting: std::sync::atomic::AtomicUsize,
}

impl ledger::Clock for GateClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        if std::thread::current().name() == Some("pipeline-job") {
            let mut open = self.open.lock().unwrap();
            if !*open {
                self.waiting
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                while !*open {
                    open = self.opened.wait(open).unwrap();
                }
            }
        }
        chrono::Utc::now()
    }
}

#[test]
fn jobs_running_at_once_are_bounded_by_jobs_running_max() {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(GateClock::default());
    let mut options = ServiceOptions::new(dir.path());
    options.ledger.checkpoint_interval = None;
    options.ledger.clock = clock.clone();
    options.jobs.running_max = 2;
    let service = Service::open(options).unwrap();
    let tasks: Vec<String> = (0..3).map(|_| open_task(&service)).collect();
    let start = |task: &str| call(&service, "research_run_pipeline", json!({"task_id": task}));

    let first = start(&tasks[0]).unwrap();
    let second = start(&tasks[1]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while clock.waiting.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the jobs never reached a write");
        std::thread::sleep(Duration::from_millis(10));
    }
    for job in [&first, &second] {
        let status = call(
            &service,
            "research_job_status",
            json!({"job_id": job["job_id"]}),
        );
        assert_eq!(status.unwrap()["status"], "running");
    }
    let refused = start(&tasks[2]).unwrap_err().to_json();
    assert_eq!(refused["error"], "limit_exceeded", "{refused}");
    assert_eq!(refused["limit"], "jobs_running_max", "{refused}");
    assert_eq!(
        (&refused["max"], &refused["actual"]),
        (&json!(2), &json!(3)),
        "{refused}"
    );
    // A second start for a task whose job runs is not another job: it returns the running one.
    let again = start(&tasks[0]).unwrap();
    assert_eq!(again["job_id"], first["job_id"]);

    *clock.open.lock().unwrap() = true;
    clock.opened.notify_all();
    for job in [&first, &second] {
        assert_ne!(
            wait(&service, job["job_id"].as_str().unwrap())["status"],
            "running"
        );
    }
    let third = start(&tasks[2]).unwrap();
    assert_ne!(
        wait(&service, third["job_id"].as_str().unwrap())["status"],
        "failed"
    );
}
