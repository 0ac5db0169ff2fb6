//! Many callers at once: stale versions are refused with the current version, idempotent
//! retries write once and return the original result, and no update is lost.

use std::sync::{Arc, Barrier};

use serde_json::json;
use service::ServiceError;

use super::{add, alice, call, open_task, service};

#[test]
fn racing_writers_with_an_expected_version_lose_nothing() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let threads = 12;
    let rounds = 6;
    let mut wins = 0;
    for round in 0..rounds {
        let version = service.state(&task).unwrap().version();
        let barrier = Arc::new(Barrier::new(threads));
        let results: Vec<_> = (0..threads)
            .map(|t| {
                let service = service.clone();
                let barrier = barrier.clone();
                let task = task.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    service.call_tool(
                        &alice(),
                        "research_expand_subquestions",
                        &json!({
                            "task_id": task,
                            "sub_questions": [format!("Round {round}, writer {t}?")],
                            "expected_version": version,
                        }),
                    )
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "exactly one writer wins each version");
        wins += 1;
        for r in &results {
            if let Err(e) = r {
                assert!(
                    matches!(e, ServiceError::SessionConflict { current_version, .. } if *current_version == version + 1),
                    "{e:?}"
                );
                let body = e.to_json();
                assert_eq!(body["error"], "session_conflict");
                assert_eq!(body["current_version"], version + 1);
                assert_eq!(body["suggested_action"], "research_summarize_state");
            }
        }
    }
    let state = service.state(&task).unwrap();
    assert_eq!(state.version(), 1 + wins);
    assert_eq!(state.sub_questions().len() as u64, wins);
}

#[test]
fn writers_without_an_expected_version_are_decided_again_and_all_land() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let threads = 8;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let service = service.clone();
            let barrier = barrier.clone();
            let task = task.clone();
            std::thread::spawn(move || {
                barrier.wait();
                call(
                    &service,
                    "research_expand_subquestions",
                    json!({"task_id": task, "sub_questions": [format!("Writer {t}?")]}),
                )
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    assert_eq!(service.state(&task).unwrap().sub_questions().len(), threads);
}

#[test]
fn the_same_idempotency_key_racing_with_itself_writes_once() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let threads = 10;
    let barrier = Arc::new(Barrier::new(threads));
    let results: Vec<_> = (0..threads)
        .map(|_| {
            let service = service.clone();
            let barrier = barrier.clone();
            let task = task.clone();
            std::thread::spawn(move || {
                barrier.wait();
                call(
                    &service,
                    "retrieval_add_evidence",
                    json!({
                        "task_id": task,
                        "source": "stats.example.org",
                        "publish_date": "2025-01-10",
                        "source_type": "government",
                        "content": "Supply grew 12% while demand grew 7%.",
                        "stance": "supports",
                        "idempotency_key": "add-once",
                    }),
                )
                .unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let written: Vec<_> = results.iter().filter(|r| r["replayed"] == false).collect();
    assert_eq!(written.len(), 1);
    for r in &results {
        assert_eq!(r["evidence_id"], written[0]["evidence_id"]);
        assert_eq!(r["session_version"], written[0]["session_version"]);
    }
    assert_eq!(service.state(&task).unwrap().evidence().len(), 1);
}

#[test]
fn a_retry_is_answered_with_its_original_result_even_when_the_task_moved_on() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let args = json!({
        "task_id": task,
        "sub_questions": ["Is demand slowing?"],
        "expected_version": 1,
        "idempotency_key": "k-1",
    });
    let first = call(&service, "research_expand_subquestions", args.clone()).unwrap();
    assert_eq!(first["replayed"], false);
    add(&service, &task, "later.example.org", "supports");
    // The retry carries a stale expected version; the key is checked first.
    let retry = call(&service, "research_expand_subquestions", args.clone()).unwrap();
    assert_eq!(retry["replayed"], true);
    assert_eq!(retry["sub_questions"], first["sub_questions"]);
    assert_eq!(retry["session_version"], first["session_version"]);
    // The same key for a different command is refused, and says so.
    let mut other = args;
    other["sub_questions"] = json!(["Something else?"]);
    let err = call(&service, "research_expand_subquestions", other).unwrap_err();
    assert_eq!(err.to_json()["error"], "idempotency_key_reused");
    // A different actor with the same key and arguments is a different command too.
    let err = service
        .call_tool(
            &service::Caller::new("bob"),
            "research_expand_subquestions",
            &json!({"task_id": task, "sub_questions": ["Is demand slowing?"], "idempotency_key": "k-1"}),
        )
        .unwrap_err();
    assert_eq!(err.code(), "idempotency_key_reused");
}

#[test]
fn an_idempotent_open_returns_the_same_task() {
    let (_dir, service) = service();
    let args = json!({"question": "Q?", "idempotency_key": "open-1"});
    let a = call(&service, "research_open_task", args.clone()).unwrap();
    let b = call(&service, "research_open_task", args).unwrap();
    assert_eq!(a["task_id"], b["task_id"]);
    assert_eq!(b["replayed"], true);
    let page = service
        .projector()
        .tasks(&projections::TaskQuery::default())
        .unwrap();
    assert_eq!(page.tasks.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_see_every_write_in_order() {
    let (_dir, service) = service();
    let mut updates = service.updates(0);
    let writer = {
        let service = service.clone();
        tokio::task::spawn_blocking(move || {
            let task = open_task(&service);
            for i in 0..5 {
                add(&service, &task, &format!("s{i}.example.org"), "supports");
            }
            task
        })
    };
    let task = writer.await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let update = tokio::time::timeout(std::time::Duration::from_secs(10), updates.next())
            .await
            .expect("an update arrives")
            .unwrap();
        assert_eq!(update.task_id, task);
        seen.push((update.seq, update.session_version, update.kind));
    }
    assert_eq!(seen[0], (0, 1, "task_opened".to_owned()));
    assert!(
        seen[1..]
            .iter()
            .all(|(_, _, kind)| kind == "evidence_added")
    );
    assert!(seen.windows(2).all(|w| w[1].0 == w[0].0 + 1));
}
