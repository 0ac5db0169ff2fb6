//! Tests of the service façade: the write path's guards under concurrency, the tools' contract
//! and errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod audit;
mod concurrency;
mod content;
mod fuzz_regressions;
mod jobs;
mod shared;
mod tools;

use serde_json::{Value, json};
use service::{Caller, Service, ServiceError, ServiceOptions};

pub(crate) fn service() -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServiceOptions::new(dir.path());
    options.ledger.checkpoint_interval = None;
    let service = Service::open(options).unwrap();
    (dir, service)
}

pub(crate) fn alice() -> Caller {
    Caller::new("alice")
}

pub(crate) fn call(service: &Service, name: &str, args: Value) -> Result<Value, ServiceError> {
    service
        .call_tool(&alice(), name, &args)
        .map(|o| o.structured)
}

pub(crate) fn open_task(service: &Service) -> String {
    let out = call(
        service,
        "research_open_task",
        json!({"question": "Does the lithium supply grow faster than demand?", "research_date": "2025-06-30"}),
    )
    .unwrap();
    out["task_id"].as_str().unwrap().to_owned()
}

pub(crate) fn add(service: &Service, task: &str, source: &str, stance: &str) -> Value {
    call(
        service,
        "retrieval_add_evidence",
        json!({
            "task_id": task,
            "source": source,
            "publish_date": "2025-01-10",
            "source_type": "government",
            "content": format!("{source} reports that lithium supply grows faster than demand. It cites mine output."),
            "stance": stance,
        }),
    )
    .unwrap()
}
