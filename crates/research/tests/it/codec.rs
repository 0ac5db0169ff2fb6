//! The stored form and the JSON view of events: round trips, a pinned wire format, and refusal
//! of damaged bytes.

use expect_test::expect;
use research::event::{EVENT_KINDS, EvidenceScreened, ScreeningDecision, TaskClosed};
use research::ids::{EvidenceId, SubQuestionId};
use research::rules::Stance;
use research::{Command, DecodeError, Event, decode, encode};

use crate::support::*;

/// One of every event kind, from a real run.
fn every_kind() -> Vec<Event> {
    let mut task = Task::from_commands(vec![
        open(),
        sub_questions(&["Demand growth?"]),
        search(
            &["corpus"],
            vec![candidate(
                "doc-1",
                "corpus",
                item("a.gov", "government", "2025-01-01", Some(Stance::Supports)),
            )],
        ),
        add(vec![item(
            "b.org",
            "blog",
            "2025-06-01",
            Some(Stance::Opposes),
        )]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
        Command::RecordSynthesis,
        Command::RunConflictResolution,
        resolve("cf-1", research::event::HumanOutcome::Opposes, "newer data"),
        Command::BuildDecisionMatrix,
        Command::GenerateConclusion,
        Command::ExplainReasoning,
        add(vec![item("c.org", "blog", "2025-06-01", None)]),
        retract("ev-3", "duplicate"),
        Command::RecordExternalToolCall(research::command::RecordExternalToolCall {
            tool: "prices".into(),
            contract_version: "1".into(),
            arguments_hash: hash_of("a"),
            reply_hash: None,
            error: Some("timed out after 30 s".into()),
        }),
    ]);
    task.ok(close());
    let mut kinds: Vec<&str> = task.events.iter().map(Event::kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut expected: Vec<&str> = EVENT_KINDS
        .iter()
        .copied()
        .filter(|k| *k != "conflict_resolved")
        .collect();
    expected.sort_unstable();
    assert_eq!(
        kinds, expected,
        "the run covers every kind but conflict_resolved (an appeal here)"
    );
    task.events
}

#[test]
fn every_event_round_trips_through_both_encodings() {
    for event in every_kind() {
        let bytes = encode(&event);
        assert_eq!(decode(event.kind(), &bytes).as_ref(), Ok(&event));
        let json = serde_json::to_string(&event).unwrap();
        let back: Event = serde_json::from_str(&json).unwrap();
        assert_eq!(back, event, "{json}");
        assert!(json.starts_with(&format!("{{\"type\":\"{}\"", event.kind())));
    }
}

#[test]
fn the_wire_format_is_pinned() {
    let screened = Event::EvidenceScreened(EvidenceScreened {
        evidence_id: EvidenceId::nth(3),
        decision: ScreeningDecision::Adopt,
        stance: Some(Stance::Opposes),
        sub_question: Some(SubQuestionId::nth(2)),
        reason: "ok".into(),
    });
    expect!["[1, 0, 4, 101, 118, 45, 51, 0, 1, 1, 1, 4, 115, 113, 45, 50, 2, 111, 107]"]
        .assert_eq(&format!("{:?}", encode(&screened)));
    let closed = Event::TaskClosed(TaskClosed { reason: None });
    expect![[r#"[1, 0, 0]"#]].assert_eq(&format!("{:?}", encode(&closed)));
}

#[test]
fn every_truncation_and_a_wrong_kind_are_refused() {
    for event in every_kind() {
        let bytes = encode(&event);
        for cut in 0..bytes.len() {
            assert!(
                decode(event.kind(), &bytes[..cut]).is_err(),
                "{} cut at {cut}",
                event.kind()
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode(event.kind(), &longer),
            Err(DecodeError::TrailingBytes { count: 1, .. })
        ));
        let mut newer = bytes.clone();
        let unknown = research::SCHEMA_VERSION + 1;
        newer[..2].copy_from_slice(&unknown.to_le_bytes());
        assert_eq!(
            decode(event.kind(), &newer),
            Err(DecodeError::UnknownSchemaVersion { version: unknown })
        );
    }
    assert!(matches!(
        decode(
            "evidence_added",
            &encode(&Event::TaskClosed(TaskClosed { reason: None }))
        ),
        Err(DecodeError::Malformed {
            kind: "evidence_added",
            ..
        })
    ));
}

/// Who decided a conflict is schema version 3; a decision without it keeps its version 1
/// bytes, and version 3 bytes that could have been version 1 are refused.
#[test]
fn who_decided_is_version_3_and_only_then() {
    use research::event::{ConflictResolved, DecidedBy, Decider, HumanOutcome};
    use research::ids::ConflictId;
    let mut event = ConflictResolved {
        conflict_id: ConflictId::new("cf-1"),
        outcome: HumanOutcome::Supports,
        reason: "the wider measurement".into(),
        previous_outcome: None,
        decided_by: None,
    };
    let old = encode(&Event::ConflictResolved(event.clone()));
    assert_eq!(&old[..2], &1u16.to_le_bytes());
    assert_eq!(
        decode("conflict_resolved", &old).unwrap(),
        Event::ConflictResolved(event.clone())
    );
    event.decided_by = Some(Decider {
        by: DecidedBy::Assistant,
        via: "pytest-assistant".into(),
    });
    let new = encode(&Event::ConflictResolved(event.clone()));
    assert_eq!(&new[..2], &3u16.to_le_bytes());
    assert_eq!(
        decode("conflict_resolved", &new).unwrap(),
        Event::ConflictResolved(event.clone())
    );
    // The version 1 body under a version 3 prefix, and the version 3 body under version 1.
    let mut relabelled = 3u16.to_le_bytes().to_vec();
    relabelled.extend_from_slice(&old[2..]);
    assert!(decode("conflict_resolved", &relabelled).is_err());
    let mut downgraded = 1u16.to_le_bytes().to_vec();
    downgraded.extend_from_slice(&new[2..]);
    assert!(decode("conflict_resolved", &downgraded).is_err());
}

/// Who may decide a task's conflicts is a version 3 part of `task_opened`: a task that restricts
/// it is version 3 (with a `v1` rule set or a `v2` one), one that does not keeps its version 1
/// or 2 bytes, and a body under another version's prefix is refused.
#[test]
fn a_task_requiring_a_person_is_version_3_and_only_then() {
    use research::event::ConflictDecisions;
    let v2 = research::rules::RulesOverride {
        rule_set: Some("v2".into()),
        ..Default::default()
    };
    for rules in [None, Some(v2)] {
        let mut task = Task::from_commands(vec![open_with(
            research::rules::Mode::ToolConstrained,
            rules,
        )]);
        let Some(Event::TaskOpened(mut opened)) = task.events.first().cloned() else {
            panic!("the task opened")
        };
        // As a task opened before the query cap: one that records it is version 4
        // (`a_recorded_query_cap_is_version_4_and_only_then`).
        if let Some(p) = opened.rules.v2.as_mut() {
            p.query_cap = None;
        }
        let plain = encode(&Event::TaskOpened(opened.clone()));
        let plain_version = if opened.rules.v2.is_some() { 2u16 } else { 1 };
        assert_eq!(&plain[..2], &plain_version.to_le_bytes());
        assert_eq!(
            decode("task_opened", &plain).unwrap(),
            Event::TaskOpened(opened.clone())
        );
        opened.conflict_decisions = Some(ConflictDecisions::Person);
        let restricted = encode(&Event::TaskOpened(opened.clone()));
        assert_eq!(&restricted[..2], &3u16.to_le_bytes());
        assert_eq!(
            decode("task_opened", &restricted).unwrap(),
            Event::TaskOpened(opened.clone())
        );
        let mut relabelled = 3u16.to_le_bytes().to_vec();
        relabelled.extend_from_slice(&plain[2..]);
        assert!(decode("task_opened", &relabelled).is_err());
        let mut downgraded = plain_version.to_le_bytes().to_vec();
        downgraded.extend_from_slice(&restricted[2..]);
        assert!(decode("task_opened", &downgraded).is_err());
        let view = serde_json::to_value(&opened).unwrap();
        assert_eq!(view["conflict_decisions"], "person");
        let mut unrestricted = opened.clone();
        unrestricted.conflict_decisions = None;
        assert!(
            serde_json::to_value(&unrestricted)
                .unwrap()
                .get("conflict_decisions")
                .is_none()
        );
        task.events.clear();
    }
}

fn hex_bytes(text: &str) -> Vec<u8> {
    let text = text.trim();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Bytes a build before the query cap wrote (`tests/fixtures/payloads-before-v4`): they decode
/// to the event their JSON view shows, with no cap, and re-encode to themselves.
#[test]
fn payloads_written_before_version_4_keep_their_bytes_and_record_no_cap() {
    let fixtures = [
        (
            "task_opened",
            2u16,
            include_str!("../fixtures/payloads-before-v4/v2-task_opened.hex"),
            include_str!("../fixtures/payloads-before-v4/v2-task_opened.json"),
        ),
        (
            "conclusion_issued",
            2,
            include_str!("../fixtures/payloads-before-v4/v2-conclusion_issued.hex"),
            include_str!("../fixtures/payloads-before-v4/v2-conclusion_issued.json"),
        ),
        (
            "task_opened",
            3,
            include_str!("../fixtures/payloads-before-v4/v3-task_opened.hex"),
            include_str!("../fixtures/payloads-before-v4/v3-task_opened.json"),
        ),
    ];
    for (kind, version, hex, view) in fixtures {
        let bytes = hex_bytes(hex);
        assert_eq!(&bytes[..2], &version.to_le_bytes(), "{kind}");
        let event = decode(kind, &bytes).unwrap();
        let rules = match &event {
            Event::TaskOpened(p) => &p.rules,
            Event::ConclusionIssued(p) => &p.rules,
            other => panic!("{other:?}"),
        };
        assert_eq!(rules.v2.unwrap().query_cap, None, "{kind} v{version}");
        assert_eq!(encode(&event), bytes, "{kind} v{version} re-encodes");
        let expected: serde_json::Value = serde_json::from_str(view).unwrap();
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            expected,
            "{kind} v{version}"
        );
        // The same body under version 4 is not canonical (it ends before the cap, or is read
        // with a cap that a conclusion's trailing part does not supply).
        let mut relabelled = 4u16.to_le_bytes().to_vec();
        relabelled.extend_from_slice(&bytes[2..]);
        assert!(decode(kind, &relabelled).is_err(), "{kind} v{version} as 4");
    }
}

/// A rule set that records the query cap is schema version 4, in `task_opened` (with or without
/// who may decide) and `conclusion_issued`; the same event without a cap keeps its older
/// version, and no body is read under another version's prefix.
#[test]
fn a_recorded_query_cap_is_version_4_and_only_then() {
    use research::event::ConflictDecisions;
    let task = Task::from_commands(vec![
        open_with(
            research::rules::Mode::ToolConstrained,
            Some(research::rules::RulesOverride {
                rule_set: Some("v2".into()),
                ..Default::default()
            }),
        ),
        add(vec![item(
            "a.gov",
            "government",
            "2025-01-01",
            Some(Stance::Supports),
        )]),
        screen(vec![adopt("ev-1")]),
        Command::RunConflictResolution,
        Command::BuildDecisionMatrix,
        Command::GenerateConclusion,
    ]);
    let opened = match task.events.first() {
        Some(Event::TaskOpened(p)) => p.clone(),
        other => panic!("{other:?}"),
    };
    let issued = task
        .events
        .iter()
        .find(|e| e.kind() == "conclusion_issued")
        .cloned()
        .unwrap();
    assert_eq!(
        opened.rules.v2.unwrap().query_cap,
        Some(2.0),
        "v2 defaults record the cap"
    );
    let mut restricted = opened.clone();
    restricted.conflict_decisions = Some(ConflictDecisions::Person);
    let uncap = |rules: &mut research::rules::RuleSet| {
        if let Some(p) = rules.v2.as_mut() {
            p.query_cap = None;
        }
    };
    let mut cases = vec![
        (Event::TaskOpened(opened.clone()), 2u16),
        (Event::TaskOpened(restricted), 3),
        (issued, 2),
    ];
    for (capped, older) in cases.drain(..) {
        let kind = capped.kind();
        let new = encode(&capped);
        assert_eq!(&new[..2], &4u16.to_le_bytes(), "{kind}");
        assert_eq!(decode(kind, &new).as_ref(), Ok(&capped), "{kind}");
        let mut uncapped = capped.clone();
        match &mut uncapped {
            Event::TaskOpened(p) => uncap(&mut p.rules),
            Event::ConclusionIssued(p) => uncap(&mut p.rules),
            _ => unreachable!(),
        }
        let old = encode(&uncapped);
        assert_eq!(&old[..2], &older.to_le_bytes(), "{kind}");
        assert_eq!(decode(kind, &old).as_ref(), Ok(&uncapped), "{kind}");
        // Version 4 bytes hold the cap as an option (01 and an f64), and version 2 ends
        // `task_opened` before who may decide (one byte for none).
        let decides = usize::from(older == 2 && kind == "task_opened");
        assert_eq!(new.len(), old.len() + 9 + decides, "{kind}");
        let mut relabelled = 4u16.to_le_bytes().to_vec();
        relabelled.extend_from_slice(&old[2..]);
        assert!(decode(kind, &relabelled).is_err(), "{kind}: old body as 4");
        let mut downgraded = older.to_le_bytes().to_vec();
        downgraded.extend_from_slice(&new[2..]);
        assert!(
            decode(kind, &downgraded).is_err(),
            "{kind}: new body as {older}"
        );
        // Version 4 with the cap written as absent could have been an older version.
        let mut absent = new.clone();
        let at = absent
            .windows(9)
            .rposition(|w| w == [[1u8].as_slice(), &2.0f64.to_le_bytes()].concat())
            .unwrap();
        absent.splice(at..at + 9, [0u8]);
        assert_eq!(
            decode(kind, &absent),
            Err(DecodeError::NotCanonical { kind }),
            "{kind}: version 4 without a cap"
        );
        // The JSON view shows the cap only when recorded.
        let view = serde_json::to_value(&capped).unwrap();
        assert_eq!(view["rules"]["v2"]["query_cap"], 2.0, "{kind}");
        let view = serde_json::to_value(&uncapped).unwrap();
        assert!(view["rules"]["v2"].get("query_cap").is_none(), "{kind}");
    }
}
