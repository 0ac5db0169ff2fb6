//! The tools' contract: results, errors with their codes and details, and the content store.

use serde_json::json;
use service::{Service, ServiceOptions};

use super::{add, alice, call, open_task, service};

#[test]
fn every_tool_name_is_valid_for_every_client_and_has_schemas() {
    let specs = service::tool_specs();
    assert_eq!(specs.len(), research::Tool::ALL.len());
    for spec in &specs {
        assert!(
            spec.name.len() <= 64
                && spec
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
            "{}",
            spec.name
        );
        assert!(spec.description.starts_with("Call "), "{}", spec.name);
        assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
        assert_eq!(spec.output_schema["type"], "object", "{}", spec.name);
    }
}

#[test]
fn bad_arguments_are_refused_naming_the_argument() {
    let (_dir, service) = service();
    let err = call(
        &service,
        "research_open_task",
        json!({"question": "Q?", "colour": "red"}),
    )
    .unwrap_err();
    let body = err.to_json();
    assert_eq!(body["error"], "invalid_argument");
    assert_eq!(body["field"], "colour");
    let err = call(&service, "research_open_task", json!({})).unwrap_err();
    assert_eq!(err.to_json()["field"], "question");
    let err = call(&service, "research_open_task", json!({"question": ""})).unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
    // A value of the wrong type is named where it is, however deep.
    let err = call(&service, "research_open_task", json!({"question": 7})).unwrap_err();
    assert_eq!(err.to_json()["field"], "question", "{}", err.to_json());
    let task = open_task(&service);
    let err = call(
        &service,
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [{"evidence_id": "ev-1", "adopt": "yes"}]}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_json()["field"],
        "decisions[0].adopt",
        "{}",
        err.to_json()
    );
    let err = call(
        &service,
        "research_open_task",
        json!(["not", "an", "object"]),
    )
    .unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
    let err = call(
        &service,
        "research_open_task",
        json!({"question": "Q?", "rules": {"weights": {"relevance": 0.5, "consistency": 0.5, "recency": 0.5, "diversity": 0.5}}}),
    )
    .unwrap_err();
    assert_eq!(err.code(), "invalid_argument");
    let err = call(&service, "retrieval_add_evidence", json!({"task_id": "nope", "source": "s", "publish_date": "2025-01-01", "source_type": "blog", "content": "c"})).unwrap_err();
    assert_eq!(err.code(), "not_found");
}

#[test]
fn steps_out_of_order_are_refused_with_the_steps_that_are_due() {
    let (_dir, service) = service();
    let task = open_task(&service);
    add(&service, &task, "a.example.org", "supports");
    let err = call(
        &service,
        "evaluation_conflict_resolution",
        json!({"task_id": task}),
    )
    .unwrap_err();
    let body = err.to_json();
    assert_eq!(body["error"], "workflow_order");
    let actions = body["pending_actions"].as_array().unwrap();
    assert!(
        actions
            .iter()
            .any(|a| a["tool"] == "synthesis_screen_evidence"),
        "{body}"
    );
}

#[test]
fn client_evidence_is_scored_stored_and_readable_in_full() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let out = add(&service, &task, "stats.example.org", "supports");
    let evidence = &out["evidence"];
    assert_eq!(evidence["origin"], "client");
    // New tasks follow rule set v2: topicality over the question's content terms.
    assert_eq!(evidence["relevance_basis"], "topicality");
    let relevance = evidence["relevance"].as_f64().unwrap();
    assert!(relevance > 0.5 && relevance <= 1.0, "{relevance}");
    // A task that asks for v1 keeps v1's IDF coverage.
    let v1 = call(
        &service,
        "research_open_task",
        json!({"question": "Does the lithium supply grow faster than demand?", "rules": {"rule_set": "v1"}}),
    )
    .unwrap();
    assert_eq!(v1["rules"]["id"], "v1");
    let v1_task = v1["task_id"].as_str().unwrap();
    let v1_item = add(&service, v1_task, "stats.example.org", "supports");
    assert_eq!(v1_item["evidence"]["relevance_basis"], "idf_coverage");
    let id = out["evidence_id"].as_str().unwrap();
    let detail = call(
        &service,
        "retrieval_get_source_detail",
        json!({"task_id": task, "evidence_id": id}),
    )
    .unwrap();
    let content = detail["content"].as_str().unwrap();
    assert!(content.starts_with("stats.example.org reports"));
    assert_eq!(
        detail["content_hash"].as_str().unwrap(),
        blake3::hash(content.as_bytes()).to_hex().as_str()
    );
    // A relevance the client gives is recorded as the client's.
    let given = call(
        &service,
        "retrieval_add_evidence",
        json!({"task_id": task, "source": "b.example.org", "publish_date": "2024-01-01", "source_type": "blog", "content": "Other text.", "relevance": 0.25}),
    )
    .unwrap();
    assert_eq!(given["evidence"]["relevance"], 0.25);
    assert_eq!(given["evidence"]["relevance_basis"], "given_by_client");
}

#[test]
fn a_whole_task_runs_through_the_tools_and_closes() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let a = add(&service, &task, "gov.example.org", "supports");
    let b = add(&service, &task, "blog.example.org", "opposes");
    let ids = [a["evidence_id"].clone(), b["evidence_id"].clone()];
    call(
        &service,
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [{"evidence_id": ids[0], "adopt": true}, {"evidence_id": ids[1], "adopt": true}]}),
    )
    .unwrap();
    let conflicts = call(
        &service,
        "evaluation_conflict_resolution",
        json!({"task_id": task}),
    )
    .unwrap();
    assert_eq!(conflicts["conflicts"][0]["tier"], "pending", "{conflicts}");
    // Compact: each side's items with what a person needs to decide, nothing repeated.
    assert!(conflicts["conflicts"][0]["supports"][0]["summary"].is_string());
    assert!(conflicts["conflicts"][0].get("participants").is_none());
    let cf = conflicts["conflicts"][0]["conflict_id"].clone();
    let decided = call(
        &service,
        "evaluation_resolve_conflict",
        json!({"task_id": task, "conflict_id": cf, "winner": "supports", "reason": "The agency's count is direct measurement."}),
    )
    .unwrap();
    assert_eq!(decided["conflict"]["tier"], "human");
    call(
        &service,
        "evaluation_build_decision_matrix",
        json!({"task_id": task}),
    )
    .unwrap();
    let card = call(
        &service,
        "evaluation_generate_conclusion",
        json!({"task_id": task}),
    )
    .unwrap();
    for field in [
        "conclusion_id",
        "stance",
        "confidence",
        "components",
        "evidence",
        "adjudications",
        "rules",
        "client_share",
        "stale",
        "supersedes",
        "markdown",
    ] {
        assert!(card.get(field).is_some(), "the card lacks {field}: {card}");
    }
    assert_eq!(card["client_share"], 1.0);
    let explained = call(
        &service,
        "evaluation_explain_reasoning",
        json!({"task_id": task}),
    )
    .unwrap();
    assert!(explained["markdown"].as_str().unwrap().contains("#"));
    let summary = call(
        &service,
        "research_summarize_state",
        json!({"task_id": task}),
    )
    .unwrap();
    assert_eq!(summary["session_version"], explained["session_version"]);
    call(
        &service,
        "research_close_task",
        json!({"task_id": task, "reason": "done"}),
    )
    .unwrap();
    let err = add_after_close(&service, &task);
    assert_eq!(err.code(), "task_closed");
    let verified = call(&service, "audit_verify", json!({})).unwrap();
    assert_eq!(verified["intact"], true);
}

fn add_after_close(service: &service::Service, task: &str) -> service::ServiceError {
    call(
        service,
        "retrieval_add_evidence",
        json!({"task_id": task, "source": "late.example.org", "publish_date": "2025-01-01", "source_type": "blog", "content": "Late."}),
    )
    .unwrap_err()
}

#[test]
fn each_tool_needs_the_role_its_calls_act_with() {
    use service::role_for_tool;
    use service::tokens::Role;
    // A human decision on a conflict is a reviewer's; the adjudication by the rules a writer's.
    assert_eq!(role_for_tool("evaluation_resolve_conflict"), Role::Reviewer);
    assert_eq!(
        role_for_tool("evaluation_conflict_resolution"),
        Role::Writer
    );
    assert_eq!(role_for_tool("research_open_task"), Role::Writer);
    assert_eq!(role_for_tool("research_summarize_state"), Role::Auditor);
    // A registered tool's calls are recorded: writers only.
    assert_eq!(role_for_tool("kb_search"), Role::Writer);
}

#[test]
fn reject_remaining_rejects_every_other_candidate_and_replays_the_same() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let ids: Vec<String> = ["a.example.org", "b.example.org", "c.example.org"]
        .iter()
        .map(|s| {
            add(&service, &task, s, "supports")["evidence_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let arguments = json!({
        "task_id": task,
        "decisions": [{"evidence_id": ids[0], "adopt": true, "stance": "supports"}],
        "reject_remaining": "off the question",
        "idempotency_key": "screen-once",
    });
    let out = call(&service, "synthesis_screen_evidence", arguments.clone()).unwrap();
    assert_eq!(
        out["screened"],
        json!([
            {"evidence_id": ids[0], "status": "adopted"},
            {"evidence_id": ids[1], "status": "rejected"},
            {"evidence_id": ids[2], "status": "rejected"},
        ])
    );
    assert_eq!(out["candidates_remaining"], 0);
    let replayed = call(&service, "synthesis_screen_evidence", arguments).unwrap();
    assert_eq!(replayed["replayed"], true);
    assert_eq!(replayed["screened"], out["screened"]);
    let rejected = call(
        &service,
        "retrieval_list_candidates",
        json!({"task_id": task, "status": "rejected", "detail": "full"}),
    )
    .unwrap();
    assert_eq!(rejected["total"], 2);
    assert_eq!(rejected["items"][0]["screening_reason"], "off the question");
    // Nothing left to reject is a refusal, not an empty write.
    let none = call(
        &service,
        "synthesis_screen_evidence",
        json!({"task_id": task, "reject_remaining": "again"}),
    )
    .unwrap_err();
    assert_eq!(none.code(), "invalid_argument", "{}", none.to_json());
}

#[test]
fn list_candidates_pages_filters_and_refuses_what_it_does_not_know() {
    let (_dir, service) = service();
    let task = open_task(&service);
    for i in 0..5 {
        add(&service, &task, &format!("s{i}.example.org"), "supports");
    }
    let first = call(
        &service,
        "retrieval_list_candidates",
        json!({"task_id": task, "limit": 2}),
    )
    .unwrap();
    assert_eq!(first["total"], 5);
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["items"][0]["evidence_id"], "ev-1");
    assert!(first["items"][0].get("content_hash").is_none(), "compact");
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let mut seen = vec![
        first["items"][0]["evidence_id"].clone(),
        first["items"][1]["evidence_id"].clone(),
    ];
    let mut next = Some(cursor);
    while let Some(cursor) = next {
        let page = call(
            &service,
            "retrieval_list_candidates",
            json!({"task_id": task, "limit": 2, "cursor": cursor}),
        )
        .unwrap();
        seen.extend(
            page["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["evidence_id"].clone()),
        );
        next = page["next_cursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen.len(), 5, "every item once: {seen:?}");
    let adopted = call(
        &service,
        "retrieval_list_candidates",
        json!({"task_id": task, "status": "adopted"}),
    )
    .unwrap();
    assert_eq!(adopted["total"], 0);
    for (arguments, field) in [
        (json!({"task_id": task, "status": "maybe"}), "status"),
        (json!({"task_id": task, "cursor": "page-2"}), "cursor"),
        (json!({"task_id": task, "detail": "everything"}), "detail"),
    ] {
        let err = call(&service, "retrieval_list_candidates", arguments).unwrap_err();
        assert_eq!(err.to_json()["field"], field);
    }
    let err = call(
        &service,
        "retrieval_list_candidates",
        json!({"task_id": task, "limit": 101}),
    )
    .unwrap_err();
    assert_eq!(err.code(), "limit_exceeded");
}

#[test]
fn a_conclusion_warns_of_what_a_reader_should_know() {
    let (_dir, service) = service();
    let task = call(
        &service,
        "research_open_task",
        json!({"question": "Does lithium supply grow faster than demand?", "mode": "agent_led"}),
    )
    .unwrap()["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let kept = add(&service, &task, "one.example.org", "supports")["evidence_id"].clone();
    add(&service, &task, "two.example.org", "opposes");
    call(
        &service,
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [{"evidence_id": kept, "adopt": true}]}),
    )
    .unwrap();
    let card = call(
        &service,
        "evaluation_generate_conclusion",
        json!({"task_id": task}),
    )
    .unwrap();
    let kinds: Vec<&str> = card["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"unscreened_candidates"), "{card}");
    assert!(kinds.contains(&"single_source"), "{card}");
    assert!(!kinds.contains(&"pending_conflicts"), "{card}");
}

/// A read of a state held in memory, and a write to it that waits on nothing but its append,
/// are answered on the caller's own task: they finish while every blocking thread of the
/// runtime is busy, and the write is durable when answered. A call on a task whose state is
/// not held, a tool that reads more than a state, and opening a task still go to a blocking
/// thread.
#[test]
fn calls_on_a_state_in_memory_need_no_blocking_thread() {
    let (dir, service) = service();
    let task = open_task(&service);
    add(&service, &task, "stats.example.org", "supports");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (release, held) = std::sync::mpsc::channel::<()>();
    let added = runtime.block_on(async {
        // The one blocking thread, taken until the calls below are answered.
        let busy = tokio::task::spawn_blocking(move || held.recv());
        let within = |call| tokio::time::timeout(std::time::Duration::from_secs(10), call);
        let summary = within(service.call_tool_async(
            alice(),
            "research_summarize_state".into(),
            json!({"task_id": task}),
        ))
        .await
        .expect("a read answered without a blocking thread")
        .unwrap();
        assert_eq!(summary.structured["task_id"], json!(task));
        let added = within(service.call_tool_async(
            alice(),
            "retrieval_add_evidence".into(),
            json!({"task_id": task, "source": "journal.example.org", "publish_date": "2025-01-10",
                   "source_type": "academic_paper", "stance": "opposes",
                   "content": "Demand grew faster than supply in the survey's five years."}),
        ))
        .await
        .expect("a write answered without a blocking thread")
        .unwrap();
        let id = added.structured["evidence_id"].as_str().unwrap().to_owned();
        let screened = within(service.call_tool_async(
            alice(),
            "synthesis_screen_evidence".into(),
            json!({"task_id": task, "decisions": [{"evidence_id": id, "adopt": true, "stance": "opposes"}]}),
        ))
        .await
        .expect("a screening answered without a blocking thread")
        .unwrap();
        assert_eq!(screened.structured["screened"][0]["status"], json!("adopted"));
        release.send(()).unwrap();
        busy.await.unwrap().unwrap();
        added
    });
    assert!(service.runs_inline("research_summarize_state", &json!({"task_id": task})));
    assert!(service.runs_inline("retrieval_add_evidence", &json!({"task_id": task})));
    assert!(!service.runs_inline("research_summarize_state", &json!({"task_id": "t-none"})));
    assert!(!service.runs_inline("retrieval_add_evidence", &json!({"task_id": "t-none"})));
    assert!(!service.runs_inline("research_open_task", &json!({"question": "q"})));
    assert!(!service.runs_inline("audit_verify", &json!({})));
    // What the write answered was durable: a reopened service holds it.
    service.shutdown();
    drop(service);
    let reopened = Service::open(ServiceOptions::new(dir.path())).unwrap();
    let state = reopened.state(&task).unwrap();
    let id = added.structured["evidence_id"].as_str().unwrap();
    assert!(
        state.evidence_view(id).is_some(),
        "{id} was answered but is not in the ledger"
    );
}

/// A write answered on the caller's own task whose caller goes away (the client hangs up, the
/// request runs past its time limit) after its append was handed to the ledger: the write is
/// still folded, so the read models never lag what the ledger holds.
#[test]
fn an_inline_write_whose_caller_goes_away_is_still_folded() {
    let (_dir, service) = service();
    let task = open_task(&service);
    add(&service, &task, "stats.example.org", "supports");
    let (before, items) = {
        let state = service.state(&task).unwrap();
        (state.version(), state.evidence_views().len())
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let arguments = json!({"task_id": task, "source": "journal.example.org",
        "publish_date": "2025-01-10", "source_type": "academic_paper", "stance": "opposes",
        "content": "Demand grew faster than supply in the survey's five years."});
    assert!(service.runs_inline("retrieval_add_evidence", &arguments));
    {
        let _inside = runtime.enter();
        let mut call =
            Box::pin(service.call_tool_async(alice(), "retrieval_add_evidence".into(), arguments));
        // Polled until it waits (its append handed to the ledger's writer, or its task
        // queued), then dropped, as a server drops the call of a client that hung up.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(call.as_mut().poll(&mut cx).is_pending());
    }
    // The runtime goes on; the ledger's head reaches the write, and so does the task's state.
    let folded = runtime.block_on(async {
        for _ in 0..500 {
            let state = service.state(&task).unwrap();
            if state.version() > before {
                return Some(state);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        None
    });
    let state = folded.expect("the write dropped by its caller was never folded");
    assert_eq!(state.version(), before + 1);
    assert_eq!(
        state.evidence_views().len(),
        items + 1,
        "the folded state lacks the item the dropped call added"
    );
    drop(runtime);
    service.shutdown();
}
