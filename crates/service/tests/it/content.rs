//! The full texts evidence cites go with the append of the events that cite them: one sync for
//! a write, texts in the ledger and nowhere else, only the texts of items a write adds; texts
//! written before the ledger kept content are read from the content store of earlier versions.

use ledger::bundle::Scope;
use serde_json::json;
use service::ledger::{Digest, Ledger, LedgerOptions};
use service::{Caller, Role, Service, ServiceOptions};

use super::{call, open_task, service};

fn hash_of(text: &str) -> Digest {
    Digest(*blake3::hash(text.as_bytes()).as_bytes())
}

#[test]
fn an_evidence_write_makes_its_text_durable_with_its_events_by_one_sync() {
    let (dir, service) = service();
    let task = open_task(&service);
    let text = "Mine output rose by a fifth while demand grew by a tenth.";
    let before = service.ledger().storage_syncs();
    call(
        &service,
        "retrieval_add_evidence",
        json!({
            "task_id": task,
            "source": "gov.example.org",
            "publish_date": "2025-01-10",
            "source_type": "government",
            "content": text,
            "stance": "supports",
        }),
    )
    .unwrap();
    assert_eq!(
        service.ledger().storage_syncs() - before,
        1,
        "the event and its text share one sync"
    );
    assert_eq!(
        service.ledger().blob(&hash_of(text)).unwrap().as_deref(),
        Some(text.as_bytes())
    );
    assert!(
        !dir.path().join("blobs").exists(),
        "nothing is written to the content store of earlier versions"
    );
    let detail = call(
        &service,
        "retrieval_get_source_detail",
        json!({"task_id": task, "evidence_id": "ev-1"}),
    )
    .unwrap();
    assert_eq!(detail["content"], text);
}

fn document(id: &str, content: &str) -> sources::Document {
    serde_json::from_value(json!({
        "id": id,
        "title": "",
        "source": format!("{id}.example.org"),
        "url": null,
        "publish_date": "2024-01-01",
        "source_type": "government",
        "citation_count": null,
        "content": content,
        "content_hash": blake3::hash(content.as_bytes()).to_hex().to_string(),
        "defaulted": {"publish_date": false, "source_type": false, "source": false},
    }))
    .unwrap()
}

#[test]
fn adding_from_a_preview_is_refused_once_the_corpus_changed_and_records_nothing() {
    let (_dir, service) = service();
    let admin = Caller::with_role("ada", Role::Admin);
    let texts = [
        "Lithium supply grows faster than demand, the survey of mines finds.",
        "Lithium demand outpaces supply in the forecast for batteries.",
    ];
    service
        .ingest_documents(&admin, &[document("doc-a", texts[0])])
        .unwrap();
    let task = open_task(&service);
    let preview = call(
        &service,
        "retrieval_search_evidence",
        json!({"task_id": task, "query": "lithium supply demand", "preview": true}),
    )
    .unwrap();
    let chosen = preview["hits"][0]["result_id"].clone();
    // Another document changes what the same query finds, and how it scores.
    service
        .ingest_documents(&admin, &[document("doc-b", texts[1])])
        .unwrap();
    let version = |service: &Service| {
        call(
            service,
            "research_summarize_state",
            json!({"task_id": task}),
        )
        .unwrap()["session_version"]
            .as_u64()
            .unwrap()
    };
    let before = version(&service);
    let refused = call(
        &service,
        "retrieval_search_evidence",
        json!({"task_id": task, "from_search": preview["search_id"], "result_ids": [chosen]}),
    )
    .expect_err("an item was added from a preview of another corpus");
    match &refused {
        service::ServiceError::InvalidArgument { field, message } => {
            assert_eq!(field, "from_search", "{message}");
        }
        other => panic!("expected invalid_argument, got {other:?}"),
    }
    assert_eq!(
        version(&service),
        before,
        "a refused call recorded something"
    );
    assert!(!service.ledger().has_blob(&hash_of(texts[0])).unwrap());

    // Previewed again, the hits can be added.
    let again = call(
        &service,
        "retrieval_search_evidence",
        json!({"task_id": task, "query": "lithium supply demand", "preview": true}),
    )
    .unwrap();
    let ids: Vec<_> = again["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["result_id"].clone())
        .collect();
    assert_eq!(ids.len(), 2, "{again}");
    call(
        &service,
        "retrieval_search_evidence",
        json!({"task_id": task, "from_search": again["search_id"], "result_ids": ids}),
    )
    .unwrap();
}

#[test]
fn a_search_stores_the_texts_of_the_items_it_adds_and_no_others() {
    let (_dir, service) = service();
    let admin = Caller::with_role("ada", Role::Admin);
    let texts = [
        "Lithium supply grows faster than demand, the survey of mines finds.",
        "Lithium demand outpaces supply in the forecast for batteries.",
    ];
    service
        .ingest_documents(
            &admin,
            &[document("doc-a", texts[0]), document("doc-b", texts[1])],
        )
        .unwrap();
    let task = open_task(&service);
    let preview = call(
        &service,
        "retrieval_search_evidence",
        json!({"task_id": task, "query": "lithium supply demand", "preview": true}),
    )
    .unwrap();
    assert_eq!(preview["hits"].as_array().unwrap().len(), 2, "{preview}");
    for text in texts {
        assert!(
            !service.ledger().has_blob(&hash_of(text)).unwrap(),
            "a preview adds no item, so it stores no text"
        );
    }
    let chosen = preview["hits"][0]["result_id"].clone();
    call(
        &service,
        "retrieval_search_evidence",
        json!({"task_id": task, "from_search": preview["search_id"], "result_ids": [chosen]}),
    )
    .unwrap();
    let stored: Vec<bool> = texts
        .iter()
        .map(|t| service.ledger().has_blob(&hash_of(t)).unwrap())
        .collect();
    assert_eq!(stored.iter().filter(|s| **s).count(), 1, "{stored:?}");
    let added = texts[stored.iter().position(|s| *s).unwrap()];
    assert_eq!(
        service.ledger().blob(&hash_of(added)).unwrap().as_deref(),
        Some(added.as_bytes())
    );
}

#[test]
fn texts_written_before_the_ledger_kept_content_are_read_from_the_earlier_store() {
    // A deployment of an earlier version: its events in the ledger, its texts in `blobs/`.
    let (_source_dir, source) = service();
    let task = open_task(&source);
    let text = "gov.example.org reports that lithium supply grows faster than demand.";
    call(
        &source,
        "retrieval_add_evidence",
        json!({
            "task_id": task,
            "source": "gov.example.org",
            "publish_date": "2025-01-10",
            "source_type": "government",
            "content": text,
            "stance": "supports",
        }),
    )
    .unwrap();
    source.ledger().checkpoint().unwrap();
    let bundle = source.export(Scope::All, true).unwrap();
    source.shutdown();

    let old = tempfile::tempdir().unwrap();
    let (ledger, _) = Ledger::restore(
        &old.path().join("ledger"),
        &bundle,
        None,
        LedgerOptions::default(),
    )
    .unwrap();
    assert_eq!(ledger.blob(&hash_of(text)).unwrap(), None);
    ledger.shutdown();
    drop(ledger);
    let hex = hash_of(text).to_string();
    let shard = old.path().join("blobs").join(&hex[..2]);
    std::fs::create_dir_all(&shard).unwrap();
    std::fs::write(shard.join(&hex[2..]), text).unwrap();

    let mut options = ServiceOptions::new(old.path());
    options.ledger.checkpoint_interval = None;
    let service = Service::open(options).unwrap();
    let detail = call(
        &service,
        "retrieval_get_source_detail",
        json!({"task_id": task, "evidence_id": "ev-1"}),
    )
    .unwrap();
    assert_eq!(detail["content"], text);
    let exported = service.export(Scope::All, false).unwrap();
    assert_eq!(exported.content.len(), 1);
    assert_eq!(exported.content[0].bytes.0, text.as_bytes());
    assert!(service.replay_check(&task).unwrap().disagreement.is_none());

    // The same text written again, for another task, goes into the ledger.
    let other = open_task(&service);
    let again = call(
        &service,
        "retrieval_add_evidence",
        json!({
            "task_id": other,
            "source": "gov.example.org",
            "publish_date": "2025-01-10",
            "source_type": "government",
            "content": text,
            "stance": "supports",
        }),
    );
    assert!(again.is_ok(), "{again:?}");
    assert_eq!(
        service.ledger().blob(&hash_of(text)).unwrap().as_deref(),
        Some(text.as_bytes())
    );
}
