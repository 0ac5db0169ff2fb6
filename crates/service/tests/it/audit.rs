//! The replay audit over the events of an export bundle gives what it gives over the data
//! directory; the admin's operations are refused to other roles.

use ledger::bundle::Scope;
use serde_json::json;
use service::audit::{Replay, bundle_task_events, explain_state, fold_events};
use service::projections::state_hash;
use service::{Caller, Role};

use crate::{add, call, open_task, service};

#[test]
fn a_task_folded_from_its_bundle_is_the_task_the_service_holds() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let a = add(&service, &task, "gov.example.org", "supports");
    let b = add(&service, &task, "stats.example.org", "supports");
    call(
        &service,
        "synthesis_screen_evidence",
        json!({"task_id": task, "decisions": [{"evidence_id": a["evidence_id"], "adopt": true}, {"evidence_id": b["evidence_id"], "adopt": true}]}),
    )
    .unwrap();
    for step in [
        "evaluation_conflict_resolution",
        "evaluation_build_decision_matrix",
        "evaluation_generate_conclusion",
    ] {
        call(&service, step, json!({"task_id": task})).unwrap();
    }
    let other = open_task(&service);

    // The checkpoint the bundle stands on: an export never signs one itself.
    service.ledger().checkpoint().unwrap();
    let bundle = service
        .export(Scope::Tasks(vec![task.clone()]), true)
        .unwrap();
    let text = serde_json::to_string(&bundle).unwrap();
    let (bundle, _) = service::audit::verify_bundle_text(&text, 1 << 30, None).unwrap();
    let events = bundle_task_events(&bundle, &task).unwrap();
    let head = service.state(&task).unwrap().version();
    assert_eq!(events.len() as u64, head);
    assert!(bundle_task_events(&bundle, &other).unwrap().is_empty());

    for at in [Some(1), Some(head - 1), None] {
        let folded = fold_events(&task, &events, at).unwrap();
        let held = service.state_at(&task, at).unwrap();
        assert_eq!(state_hash(&folded), state_hash(&held), "at {at:?}");
    }
    let beyond = fold_events(&task, &events, Some(head + 1)).unwrap_err();
    assert_eq!(
        beyond.to_string(),
        service
            .state_at(&task, Some(head + 1))
            .unwrap_err()
            .to_string()
    );
    assert_eq!(
        fold_events("nope", &[], None).unwrap_err().to_string(),
        service.state_at("nope", None).unwrap_err().to_string()
    );

    let mut replay = Replay::new();
    for event in &events {
        replay.feed(event);
    }
    let (version, live) = service.task_head(&task).unwrap();
    assert_eq!((version, live), (head, state_hash(replay.state())));
    assert_eq!(
        replay.finish(&task, true).unwrap(),
        service.replay_check(&task).unwrap()
    );
    let folded = fold_events(&task, &events, None).unwrap();
    assert_eq!(
        explain_state(&folded).unwrap(),
        service.explanation(&task).unwrap()
    );
}

#[test]
fn checkpoints_and_documents_are_for_admins() {
    let (_dir, service) = service();
    for role in [Role::Auditor, Role::Writer, Role::Reviewer] {
        let caller = Caller::with_role("someone", role);
        assert_eq!(service.checkpoint(&caller).unwrap_err().code(), "forbidden");
        assert_eq!(
            service.ingest_documents(&caller, &[]).unwrap_err().code(),
            "forbidden"
        );
    }
    let admin = Caller::with_role("ada", Role::Admin);
    let checkpoint = service.checkpoint(&admin).unwrap();
    assert_eq!(checkpoint.tree_size, service.ledger().head().size);
    let report = service.ingest_documents(&admin, &[]).unwrap();
    assert_eq!(report.added, 0);
    let too_many = vec![
        sample_document();
        usize::try_from(service.corpus().limits().add_documents_max).unwrap() + 1
    ];
    let refused = service.ingest_documents(&admin, &too_many).unwrap_err();
    assert_eq!(refused.code(), "limit_exceeded");
}

fn sample_document() -> sources::Document {
    serde_json::from_value(json!({
        "id": "d",
        "title": "",
        "source": "example.org",
        "url": null,
        "publish_date": "2024-01-01",
        "source_type": "blog",
        "citation_count": null,
        "content": "Text.",
        "content_hash": blake3::hash(b"Text.").to_hex().to_string(),
        "defaulted": {"publish_date": false, "source_type": false, "source": false},
    }))
    .unwrap()
}

#[test]
fn replay_checks_the_terms_a_v2_relevance_found_against_the_content() {
    let (_dir, service) = service();
    let task = open_task(&service);
    let item = add(&service, &task, "gov.example.org", "supports");
    assert_eq!(item["evidence"]["relevance_basis"], "topicality");
    let check = service.replay_check(&task).unwrap();
    assert!(check.disagreement.is_none(), "{check:?}");

    // The checkpoint the bundle stands on: an export never signs one itself.
    service.ledger().checkpoint().unwrap();
    let bundle = service
        .export(Scope::Tasks(vec![task.clone()]), true)
        .unwrap();
    let text = serde_json::to_string(&bundle).unwrap();
    let (bundle, _) = service::audit::verify_bundle_text(&text, 1 << 30, None).unwrap();
    let events = bundle_task_events(&bundle, &task).unwrap();
    // A text that does not hold the question's terms the event says it holds.
    let mut replay = Replay::new();
    for event in &events {
        replay.feed_with_content(event, &|_| Some(b"Nothing on topic here.".to_vec()));
    }
    let check = replay.finish(&task, true).unwrap();
    let disagreement = check.disagreement.expect("the found flags disagree");
    assert_eq!(disagreement.kind, "evidence_added");
    assert!(
        disagreement.detail.contains("relevance_inputs.terms["),
        "{disagreement:?}"
    );
}
