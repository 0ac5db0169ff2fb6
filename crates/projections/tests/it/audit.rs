//! The audit trail: a task's events as the ledger holds them, with decoded payloads, paged by
//! version.

use ledger::{AppendRequest, ExpectedVersion, NewEvent};
use projections::QueryError;
use research::rules::{Mode, Stance};

use crate::support::*;

fn task_with_history() -> (World, projections::Projector) {
    let ledger = memory_ledger(21);
    let mut world = World::new(&ledger);
    world.ok(
        "lithium",
        open_task(
            "lithium",
            "Does lithium demand grow faster than supply?",
            &[],
            Mode::ToolConstrained,
        ),
    );
    // Another task's events interleave in the ledger; the trail shows only this task's.
    world.ok(
        "other",
        open_task("other", "Something else?", &[], Mode::ToolConstrained),
    );
    world.ok_as(
        "bob",
        "lithium",
        add(vec![
            item(
                "a.example.org",
                "blog",
                "2025-06-01",
                Some(Stance::Supports),
            ),
            item("b.example.org", "blog", "2025-06-10", Some(Stance::Opposes)),
        ]),
    );
    let state = world.states["lithium"].clone();
    world.ok("lithium", adopt_all(&state));
    world.ok("lithium", research::Command::RunConflictResolution);
    let projector = projector(&ledger);
    (world, projector)
}

#[test]
fn every_event_shows_its_envelope_and_decoded_payload() {
    let (world, projector) = task_with_history();
    let ledger = &world.ledger;
    let page = projector.audit_trail("lithium", 1, None).unwrap();
    let head = ledger.stream_version("lithium").unwrap();
    assert_eq!(page.head_version, head);
    assert_eq!(page.events.len() as u64, head);
    assert_eq!(page.next_version, None);
    for (i, entry) in page.events.iter().enumerate() {
        let stored = ledger.get(entry.seq).unwrap().unwrap();
        assert_eq!(entry.stream_version, i as u64 + 1);
        assert_eq!(stored.stream, "lithium");
        assert_eq!(entry.kind, stored.kind);
        assert_eq!(entry.actor, stored.actor);
        assert_eq!(entry.recorded_at, stored.recorded_at);
        assert_eq!(entry.event_id, stored.event_id.to_string());
        assert_eq!(entry.hash.0, stored.hash.0);
        assert_eq!(entry.prev_hash.0, stored.prev_hash.0);
        // prev_hash links to the ledger's event before, which may be another task's.
        if entry.seq > 0 {
            assert_eq!(
                entry.prev_hash.0,
                ledger.get(entry.seq - 1).unwrap().unwrap().hash.0
            );
        }
        let payload = entry.payload.as_ref().unwrap();
        assert_eq!(payload["type"], entry.kind.as_str());
        assert_eq!(entry.payload_error, None);
        // Every cause is an earlier event of the ledger.
        for cause in &entry.causation {
            let found = ledger.find_hash(&ledger::Digest(cause.0)).unwrap().unwrap();
            assert!(found.seq < entry.seq);
        }
    }
    let kinds: Vec<&str> = page.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "task_opened",
            "evidence_added",
            "evidence_added",
            "evidence_screened",
            "evidence_screened",
            "conflicts_adjudicated"
        ]
    );
    assert_eq!(
        page.events[0].payload.as_ref().unwrap()["question"],
        "Does lithium demand grow faster than supply?"
    );
    assert_eq!(page.events[1].actor, "bob");
    assert_eq!(page.events[0].actor, "alice");
    // The other task's open sits between lithium's first and second events.
    assert!(page.events[1].seq > page.events[0].seq + 1);
    assert!(
        page.events.iter().any(|e| !e.causation.is_empty()),
        "derived events name what they were derived from"
    );
}

#[test]
fn pages_by_version_to_the_head() {
    let (_, projector) = task_with_history();
    let first = projector.audit_trail("lithium", 1, Some(4)).unwrap();
    assert_eq!(first.events.len(), 4);
    assert_eq!(first.next_version, Some(5));
    let second = projector
        .audit_trail("lithium", first.next_version.unwrap(), Some(4))
        .unwrap();
    let versions: Vec<u64> = second.events.iter().map(|e| e.stream_version).collect();
    assert_eq!(versions, [5, 6]);
    assert_eq!(second.next_version, None);
    // The page after the head is empty; beyond it is an error naming the head.
    let after = projector.audit_trail("lithium", 7, None).unwrap();
    assert!(after.events.is_empty());
    assert_eq!(after.next_version, None);
    assert!(matches!(
        projector.audit_trail("lithium", 8, None),
        Err(QueryError::VersionBeyondHead {
            head: 6,
            requested: 8,
            ..
        })
    ));
    assert!(matches!(
        projector.audit_trail("nothing", 1, None),
        Err(QueryError::TaskNotFound { .. })
    ));
    assert!(matches!(
        projector.audit_trail("lithium", 0, None),
        Err(QueryError::InvalidArgument {
            field: "from_version",
            ..
        })
    ));
    let max = projector.limits().page_events_max;
    assert!(matches!(
        projector.audit_trail("lithium", 1, Some(max + 1)),
        Err(QueryError::LimitExceeded {
            limit: "page_events_max",
            ..
        })
    ));
}

#[test]
fn an_event_that_does_not_decode_is_shown_with_the_reason() {
    let (world, projector) = task_with_history();
    world
        .ledger
        .append(AppendRequest {
            stream: "lithium".into(),
            expected: ExpectedVersion::Any,
            actor: "mallory".into(),
            events: vec![NewEvent {
                kind: "evidence_added".into(),
                payload: vec![1, 0, 0xff],
                causation: vec![],
            }],
            idempotency: None,
            content: Vec::new(),
        })
        .unwrap();
    let page = projector.audit_trail("lithium", 7, None).unwrap();
    assert_eq!(page.events.len(), 1);
    let entry = &page.events[0];
    assert_eq!(entry.payload, None);
    assert!(
        entry
            .payload_error
            .as_deref()
            .is_some_and(|e| e.contains("evidence_added")),
        "{:?}",
        entry.payload_error
    );
    assert_eq!(entry.actor, "mallory");
}
