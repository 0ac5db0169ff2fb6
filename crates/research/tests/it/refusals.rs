//! Every refusal: bad input, references to nothing, workflow order, closed tasks and limits.
//! Each names the field, the limit or the steps due, and nothing is recorded.

use std::collections::BTreeMap;

use expect_test::expect;
use research::command::{OpenTask, RecordExternalToolCall};
use research::event::HumanOutcome;
use research::limits::Limits;
use research::rules::{Mode, RulesOverride, Stance, ThresholdsOverride, Weights};
use research::{Command, CommandContext, PendingAction, Refusal, Tool};

use crate::support::*;

fn invalid(field: &str) -> impl Fn(&Refusal) -> bool + '_ {
    move |r| matches!(r, Refusal::InvalidArgument { field: f, .. } if f == field)
}

fn refused_on(history_commands: Vec<Command>, command: Command, field: &str) {
    let refusal = given(history(history_commands))
        .when(command)
        .then_refusal();
    assert!(
        invalid(field)(&refusal),
        "expected invalid `{field}`, got {refusal:?}"
    );
    assert_eq!(refusal.code(), "invalid_argument");
}

fn opened() -> Vec<Command> {
    vec![open()]
}

fn one_item() -> Vec<Command> {
    vec![open(), add(vec![item("a.org", "blog", "2025-01-01", None)])]
}

#[test]
fn commands_before_opening_ask_for_the_task_to_be_opened() {
    given([])
        .when(sub_questions(&["x"]))
        .then_refuse(Refusal::WorkflowOrder {
            message: "the task has not been opened".into(),
            pending_actions: vec![PendingAction {
                tool: Tool::ResearchOpenTask,
                reason: "open the task first".into(),
            }],
        });
}

#[test]
fn opening_twice_is_refused() {
    refused_on(opened(), open(), "task_id");
}

#[test]
fn empty_question_and_bad_task_ids_are_refused() {
    let with = |task_id: &str, question: &str| {
        Command::OpenTask(OpenTask {
            task_id: task_id.into(),
            question: question.into(),
            constraints: vec![],
            research_date: None,
            mode: Mode::ToolConstrained,
            rules: None,
            conflict_decisions: None,
        })
    };
    refused_on(vec![], with("t", "   "), "question");
    refused_on(vec![], with("", "q?"), "task_id");
    refused_on(vec![], with("has space", "q?"), "task_id");
    refused_on(vec![], with("../etc", "q?"), "task_id");
    refused_on(vec![], with("任务", "q?"), "task_id");
}

#[test]
fn research_dates_that_do_not_parse_or_lie_in_the_future_are_refused() {
    let with = |date: &str| {
        Command::OpenTask(OpenTask {
            task_id: "t".into(),
            question: "q?".into(),
            constraints: vec![],
            research_date: Some(date.into()),
            mode: Mode::ToolConstrained,
            rules: None,
            conflict_decisions: None,
        })
    };
    refused_on(vec![], with("30/06/2025"), "research_date");
    refused_on(vec![], with("2025-07-02"), "research_date");
    // A day of slack for time zones.
    assert!(given([]).when(with("2025-07-01")).then_events().len() == 1);
}

#[test]
fn rule_overrides_are_validated_with_the_field_named() {
    let with = |rules: RulesOverride| open_with(Mode::ToolConstrained, Some(rules));
    let weights = |relevance| RulesOverride {
        weights: Some(Weights {
            relevance,
            consistency: 0.3,
            recency: 0.2,
            diversity: 0.1,
        }),
        ..Default::default()
    };
    refused_on(vec![], with(weights(0.41)), "rules.weights");
    refused_on(vec![], with(weights(f64::NAN)), "rules.weights.relevance");
    refused_on(vec![], with(weights(-0.4)), "rules.weights.relevance");
    // Within 1e-9 of 1 is accepted.
    assert!(
        given([])
            .when(with(weights(0.4 + 5e-10)))
            .then_events()
            .len()
            == 1
    );
    refused_on(
        vec![],
        with(RulesOverride {
            half_life_days: Some(0.0),
            ..Default::default()
        }),
        "rules.half_life_days",
    );
    refused_on(
        vec![],
        with(RulesOverride {
            half_life_days: Some(f64::INFINITY),
            ..Default::default()
        }),
        "rules.half_life_days",
    );
    refused_on(
        vec![],
        with(RulesOverride {
            authority: BTreeMap::from([("podcast".to_string(), 0.5)]),
            ..Default::default()
        }),
        "rules.authority.podcast",
    );
    refused_on(
        vec![],
        with(RulesOverride {
            authority: BTreeMap::from([("blog".to_string(), 1.5)]),
            ..Default::default()
        }),
        "rules.authority.blog",
    );
    let threshold = |t: ThresholdsOverride| RulesOverride {
        thresholds: t,
        ..Default::default()
    };
    refused_on(
        vec![],
        with(threshold(ThresholdsOverride {
            authority_gap: Some(2.0),
            ..Default::default()
        })),
        "rules.thresholds.authority_gap",
    );
    refused_on(
        vec![],
        with(threshold(ThresholdsOverride {
            recency_gap_days: Some(-1.0),
            ..Default::default()
        })),
        "rules.thresholds.recency_gap_days",
    );
    refused_on(
        vec![],
        with(threshold(ThresholdsOverride {
            diversity_sources: Some(0.0),
            ..Default::default()
        })),
        "rules.thresholds.diversity_sources",
    );
    refused_on(
        vec![],
        with(threshold(ThresholdsOverride {
            confidence_floor: Some(f64::NAN),
            ..Default::default()
        })),
        "rules.thresholds.confidence_floor",
    );
}

#[test]
fn duplicate_and_empty_sub_questions_are_refused() {
    refused_on(
        opened(),
        sub_questions(&["Demand?", " demand? "]),
        "sub_questions[1]",
    );
    refused_on(
        vec![open(), sub_questions(&["Demand growth?"])],
        sub_questions(&["Supply?", "DEMAND   growth?"]),
        "sub_questions[1]",
    );
    refused_on(opened(), sub_questions(&["  "]), "sub_questions[0]");
    refused_on(opened(), sub_questions(&[]), "sub_questions");
}

#[test]
fn bad_evidence_fields_are_refused_with_their_path() {
    let bad = |f: fn(&mut research::command::EvidenceInput)| {
        let mut input = item("a.org", "blog", "2025-01-01", None);
        f(&mut input);
        add(vec![item("ok.org", "blog", "2025-01-01", None), input])
    };
    refused_on(opened(), bad(|i| i.relevance = 1.5), "items[1].relevance");
    refused_on(opened(), bad(|i| i.relevance = -0.1), "items[1].relevance");
    refused_on(
        opened(),
        bad(|i| i.relevance = f64::NAN),
        "items[1].relevance",
    );
    refused_on(
        opened(),
        bad(|i| i.relevance = f64::INFINITY),
        "items[1].relevance",
    );
    refused_on(
        opened(),
        bad(|i| i.source_type = "podcast".into()),
        "items[1].source_type",
    );
    refused_on(
        opened(),
        bad(|i| i.publish_date = "last spring".into()),
        "items[1].publish_date",
    );
    refused_on(
        opened(),
        bad(|i| i.publish_date = "2025-02-30".into()),
        "items[1].publish_date",
    );
    refused_on(
        opened(),
        bad(|i| i.publish_date = "2031-01-01".into()),
        "items[1].publish_date",
    );
    refused_on(
        opened(),
        bad(|i| i.summary = " \n ".into()),
        "items[1].summary",
    );
    refused_on(
        opened(),
        bad(|i| {
            i.source = None;
            i.url = None;
        }),
        "items[1].source",
    );
    refused_on(
        opened(),
        bad(|i| {
            i.source = None;
            i.url = Some("https:///no-host".into());
        }),
        "items[1].url",
    );
    refused_on(
        opened(),
        add(vec![
            item("a.org", "blog", "2025-01-01", None),
            item("a.org", "blog", "2025-01-01", None),
        ]),
        "items[1].content_hash",
    );
    refused_on(
        one_item(),
        add(vec![item("a.org", "blog", "2025-01-01", None)]),
        "items[0].content_hash",
    );
    refused_on(opened(), add(vec![]), "items");
}

#[test]
fn summaries_are_bounded_in_characters_not_bytes() {
    let with_summary = |summary: String| {
        let mut input = item("a.org", "blog", "2025-01-01", None);
        input.summary = summary;
        add(vec![input])
    };
    // 800 Chinese characters are 2,400 bytes and still fit.
    assert_eq!(
        given(history(opened()))
            .when(with_summary("证".repeat(800)))
            .then_events()
            .len(),
        1
    );
    given(history(opened()))
        .when(with_summary("证".repeat(801)))
        .then_refuse(Refusal::LimitExceeded {
            limit: "summary_chars_max",
            max: 800,
            actual: 801,
            field: "items[0].summary".into(),
        });
}

#[test]
fn unknown_references_are_not_found() {
    given(history(one_item()))
        .when(screen(vec![adopt_as("ev-9", Stance::Supports)]))
        .then_refuse(Refusal::NotFound {
            what: "evidence",
            id: "ev-9".into(),
        });
    given(history(one_item()))
        .when(retract("ev-2", "gone"))
        .then_refuse(Refusal::NotFound {
            what: "evidence",
            id: "ev-2".into(),
        });
    given(history(opened()))
        .when(add(vec![in_scope(
            item("a.org", "blog", "2025-01-01", None),
            "sq-4",
        )]))
        .then_refuse(Refusal::NotFound {
            what: "sub_question",
            id: "sq-4".into(),
        });
    given(history(opened()))
        .when(resolve("cf-1", HumanOutcome::Supports, "because"))
        .then_refuse(Refusal::NotFound {
            what: "conflict",
            id: "cf-1".into(),
        });
}

#[test]
fn adopting_without_a_stance_is_refused() {
    refused_on(
        one_item(),
        screen(vec![adopt("ev-1")]),
        "decisions[0].stance",
    );
    // Rejecting needs no stance.
    assert_eq!(
        given(history(one_item()))
            .when(screen(vec![reject("ev-1", "off topic")]))
            .then_events()
            .len(),
        1
    );
}

#[test]
fn screening_mistakes_are_refused() {
    refused_on(
        one_item(),
        screen(vec![
            adopt_as("ev-1", Stance::Neutral),
            reject("ev-1", "no"),
        ]),
        "decisions[1].evidence_id",
    );
    let mut retracted = one_item();
    retracted.push(retract("ev-1", "withdrawn"));
    refused_on(
        retracted.clone(),
        screen(vec![reject("ev-1", "no")]),
        "decisions[0].evidence_id",
    );
    refused_on(retracted, retract("ev-1", "again"), "evidence_id");
    refused_on(one_item(), retract("ev-1", "  "), "reason");
    refused_on(one_item(), screen(vec![]), "decisions");
}

#[test]
fn search_input_is_checked() {
    let good = || item("a.org", "blog", "2025-01-01", None);
    refused_on(opened(), search(&[], vec![]), "sources");
    refused_on(opened(), search(&["client"], vec![]), "sources[0]");
    refused_on(
        opened(),
        search(&["corpus", "corpus"], vec![]),
        "sources[1]",
    );
    refused_on(
        opened(),
        search(&["corpus"], vec![candidate("d1", "web", good())]),
        "results[0].origin",
    );
    let mut nan = candidate("d1", "corpus", good());
    nan.raw_score = f64::NAN;
    refused_on(
        opened(),
        search(&["corpus"], vec![nan]),
        "results[0].raw_score",
    );
    let mut out_of_range = candidate("d1", "corpus", good());
    out_of_range.normalised_score = 1.01;
    refused_on(
        opened(),
        search(&["corpus"], vec![out_of_range]),
        "results[0].normalised_score",
    );
    let mut bad_item = good();
    bad_item.source_type = "rumour".into();
    refused_on(
        opened(),
        search(&["corpus"], vec![candidate("d1", "corpus", bad_item)]),
        "results[0].evidence.source_type",
    );
}

#[test]
fn resolving_a_superseded_conflict_is_refused_and_names_the_newer_one() {
    let mut commands = vec![
        open(),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-02", Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
        Command::RunConflictResolution,
        add(vec![item(
            "c.org",
            "blog",
            "2025-01-03",
            Some(Stance::Opposes),
        )]),
        screen(vec![adopt("ev-3")]),
    ];
    // Before the rules run again the old conflict's scope has changed under it.
    let refusal = given(history(commands.clone()))
        .when(resolve("cf-1", HumanOutcome::Supports, "why"))
        .then_refusal();
    assert!(matches!(
        &refusal,
        Refusal::WorkflowOrder { pending_actions, .. }
            if pending_actions.iter().map(|a| a.tool).collect::<Vec<_>>() == vec![Tool::EvaluationConflictResolution]
    ));
    commands.push(Command::RunConflictResolution);
    let refusal = given(history(commands))
        .when(resolve("cf-1", HumanOutcome::Supports, "why"))
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, message } if field == "conflict_id" && message.contains("cf-2"))
    );
}

#[test]
fn a_dissolved_conflict_cannot_be_resolved() {
    let commands = vec![
        open(),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-02", Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
        Command::RunConflictResolution,
        retract("ev-2", "misquoted"),
        Command::RunConflictResolution,
    ];
    refused_on(
        commands,
        resolve("cf-1", HumanOutcome::Supports, "why"),
        "conflict_id",
    );
}

#[test]
fn a_human_decision_needs_a_reason() {
    let commands = vec![
        open(),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-02", Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
        Command::RunConflictResolution,
    ];
    refused_on(
        commands,
        resolve("cf-1", HumanOutcome::Supports, ""),
        "reason",
    );
}

#[test]
fn tool_constrained_steps_wait_for_what_precedes_them() {
    let unscreened = vec![
        open(),
        add(vec![item(
            "a.org",
            "blog",
            "2025-01-01",
            Some(Stance::Supports),
        )]),
    ];
    let refusal = given(history(unscreened.clone()))
        .when(Command::GenerateConclusion)
        .then_refusal();
    expect![[r#"
        {
          "error": "workflow_order",
          "message": "`evaluation_generate_conclusion` must wait: ev-1 await screening; the evidence changed since the conflict rules last ran; no decision matrix has been built",
          "pending_actions": [
            {
              "reason": "ev-1 await screening",
              "tool": "synthesis_screen_evidence"
            },
            {
              "reason": "the evidence changed since the conflict rules last ran",
              "tool": "evaluation_conflict_resolution"
            },
            {
              "reason": "no decision matrix has been built",
              "tool": "evaluation_build_decision_matrix"
            }
          ]
        }"#]]
    .assert_eq(&pretty(&refusal.to_json()));

    let tools = |refusal: Refusal| match refusal {
        Refusal::WorkflowOrder {
            pending_actions, ..
        } => pending_actions
            .into_iter()
            .map(|a| a.tool)
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        tools(
            given(history(unscreened.clone()))
                .when(Command::RunConflictResolution)
                .then_refusal()
        ),
        vec![Tool::SynthesisScreenEvidence]
    );
    assert_eq!(
        tools(
            given(history(unscreened.clone()))
                .when(Command::RecordSynthesis)
                .then_refusal()
        ),
        vec![Tool::SynthesisScreenEvidence]
    );
    let mut screened = unscreened;
    screened.push(screen(vec![adopt("ev-1")]));
    assert_eq!(
        tools(
            given(history(screened.clone()))
                .when(Command::BuildDecisionMatrix)
                .then_refusal()
        ),
        vec![Tool::EvaluationConflictResolution]
    );
    screened.push(Command::RunConflictResolution);
    assert_eq!(
        tools(
            given(history(screened.clone()))
                .when(Command::GenerateConclusion)
                .then_refusal()
        ),
        vec![Tool::EvaluationBuildDecisionMatrix]
    );
    assert_eq!(
        tools(
            given(history(screened))
                .when(Command::ExplainReasoning)
                .then_refusal()
        ),
        vec![
            Tool::EvaluationBuildDecisionMatrix,
            Tool::EvaluationGenerateConclusion
        ]
    );
}

#[test]
fn a_matrix_predating_a_human_decision_blocks_the_conclusion() {
    let commands = vec![
        open(),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-02", Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
        Command::RunConflictResolution,
        Command::BuildDecisionMatrix,
        resolve(
            "cf-1",
            HumanOutcome::Supports,
            "the opposing post misreads the table",
        ),
    ];
    let refusal = given(history(commands))
        .when(Command::GenerateConclusion)
        .then_refusal();
    assert!(matches!(
        &refusal,
        Refusal::WorkflowOrder { pending_actions, .. }
            if pending_actions.len() == 1 && pending_actions[0].tool == Tool::EvaluationBuildDecisionMatrix
    ));
}

#[test]
fn a_closed_task_takes_no_writes() {
    let closed = vec![open(), close()];
    for command in [
        sub_questions(&["x"]),
        add(vec![item("a.org", "blog", "2025-01-01", None)]),
        Command::RunConflictResolution,
        Command::GenerateConclusion,
        close(),
        open(),
        Command::RecordExternalToolCall(RecordExternalToolCall {
            tool: "t".into(),
            contract_version: "1".into(),
            arguments_hash: hash_of("a"),
            reply_hash: Some(hash_of("b")),
            error: None,
        }),
    ] {
        given(history(closed.clone()))
            .when(command)
            .then_refuse(Refusal::TaskClosed {
                task_id: "lithium-2025".into(),
            });
    }
}

#[test]
fn an_external_call_needs_a_reply_or_an_error() {
    refused_on(
        opened(),
        Command::RecordExternalToolCall(RecordExternalToolCall {
            tool: "t".into(),
            contract_version: "1".into(),
            arguments_hash: hash_of("a"),
            reply_hash: None,
            error: None,
        }),
        "reply_hash",
    );
}

#[test]
fn sizes_are_bounded_by_named_limits() {
    let limit = |refusal: Refusal| match refusal {
        Refusal::LimitExceeded {
            limit, max, actual, ..
        } => (limit, max, actual),
        other => panic!("{other:?}"),
    };
    let long_question = Command::OpenTask(OpenTask {
        task_id: "t".into(),
        question: "问".repeat(2_001),
        constraints: vec![],
        research_date: None,
        mode: Mode::ToolConstrained,
        rules: None,
        conflict_decisions: None,
    });
    assert_eq!(
        limit(given([]).when(long_question).then_refusal()),
        ("question_chars_max", 2_000, 2_001)
    );
    let many_constraints = Command::OpenTask(OpenTask {
        task_id: "t".into(),
        question: "q?".into(),
        constraints: (0..21).map(|i| format!("c{i}")).collect(),
        research_date: None,
        mode: Mode::ToolConstrained,
        rules: None,
        conflict_decisions: None,
    });
    assert_eq!(
        limit(given([]).when(many_constraints).then_refusal()),
        ("constraints_count_max", 20, 21)
    );
    let texts: Vec<String> = (0..21).map(|i| format!("sub-question {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    assert_eq!(
        limit(
            given(history(opened()))
                .when(sub_questions(&refs))
                .then_refusal()
        ),
        ("sub_questions_per_call_max", 20, 21)
    );
    let decisions = (0..101).map(|i| reject(&format!("ev-{i}"), "")).collect();
    assert_eq!(
        limit(
            given(history(opened()))
                .when(screen(decisions))
                .then_refusal()
        ),
        ("screening_per_call_max", 100, 101)
    );
    let items = (0..51)
        .map(|i| item(&format!("s{i}.org"), "blog", "2025-01-01", None))
        .collect();
    assert_eq!(
        limit(given(history(opened())).when(add(items)).then_refusal()),
        ("evidence_per_call_max", 50, 51)
    );

    // Limits come from the context, so a deployment (or a test) can raise or lower them.
    let tight = CommandContext {
        now: now(),
        limits: Limits {
            evidence_count_max: 2,
            ..Limits::default()
        },
    };
    let three = (0..3)
        .map(|i| item(&format!("s{i}.org"), "blog", "2025-01-01", None))
        .collect();
    assert_eq!(
        limit(
            given(history(opened()))
                .when_at(add(three), tight.clone())
                .then_refusal()
        ),
        ("evidence_count_max", 2, 3)
    );
    let small_events = CommandContext {
        now: now(),
        limits: Limits {
            event_bytes_max: 64,
            ..Limits::default()
        },
    };
    let refusal = given(history(opened()))
        .when_at(
            add(vec![item("a.org", "blog", "2025-01-01", None)]),
            small_events,
        )
        .then_refusal();
    assert!(matches!(
        refusal,
        Refusal::LimitExceeded {
            limit: "event_bytes_max",
            max: 64,
            ..
        }
    ));
}

/// A task that requires a person to decide its conflicts refuses a decision that is not a
/// person's — an assistant's, or one that does not say whose it is — and takes a person's.
#[test]
fn a_task_requiring_a_person_refuses_other_deciders() {
    use research::event::{ConflictDecisions, DecidedBy, Decider, HumanOutcome};
    let Command::OpenTask(mut opening) = open() else {
        unreachable!("open() opens a task")
    };
    opening.conflict_decisions = Some(ConflictDecisions::Person);
    let pending = vec![
        Command::OpenTask(opening),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-01", Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
        Command::RunConflictResolution,
    ];
    let decided = |by: Option<DecidedBy>| {
        let Command::ResolveConflict(mut c) = resolve("cf-1", HumanOutcome::Supports, "why") else {
            unreachable!("resolve() decides a conflict")
        };
        c.decided_by = by.map(|by| Decider {
            by,
            via: "client".into(),
        });
        Command::ResolveConflict(c)
    };
    for by in [None, Some(DecidedBy::Assistant)] {
        given(history(pending.clone()))
            .when(decided(by))
            .then_refuse(Refusal::PersonDecisionRequired {
                task_id: "lithium-2025".into(),
                conflict_id: "cf-1".into(),
            });
    }
    let mut task = Task::from_commands(pending);
    let events = task.ok(decided(Some(DecidedBy::Person)));
    assert!(matches!(
        events.as_slice(),
        [research::Event::ConflictResolved(_)]
    ));
    let refusal = Refusal::PersonDecisionRequired {
        task_id: "t".into(),
        conflict_id: "cf-1".into(),
    };
    assert_eq!(refusal.code(), "person_decision_required");
    assert_eq!(refusal.to_json()["conflict_id"], "cf-1");
}

/// Every limit on a length or a count, met where each applies, past a tight bound: refused with
/// the limit's name, its value, what the command carried and the field that carried it. A limit
/// declared but not checked somewhere it applies fails here.
#[test]
fn every_length_and_count_limit_is_checked_where_it_applies() {
    use research::command::{RecordSearch, ScreeningInput};

    let tight = CommandContext {
        now: now(),
        limits: Limits {
            task_id_chars_max: 10,
            constraint_chars_max: 10,
            sub_questions_count_max: 1,
            sub_question_chars_max: 10,
            query_chars_max: 10,
            sources_per_search_max: 1,
            search_results_max: 1,
            source_chars_max: 10,
            url_chars_max: 10,
            name_chars_max: 10,
            reason_chars_max: 10,
            ..Limits::default()
        },
    };
    // The counts are held to one, the lengths to ten characters.
    let bound = |limit: &str| match limit {
        "sub_questions_count_max" | "sources_per_search_max" | "search_results_max" => 1,
        _ => 10,
    };
    let long = "x".repeat(11);
    let opening = |task_id: &str, constraint: &str| {
        Command::OpenTask(OpenTask {
            task_id: task_id.into(),
            question: "Does lithium demand grow?".into(),
            constraints: vec![constraint.into()],
            research_date: None,
            mode: Mode::ToolConstrained,
            rules: None,
            conflict_decisions: None,
        })
    };
    let searching =
        |query: &str, sources: &[&str], results: Vec<research::command::SearchCandidate>| {
            Command::RecordSearch(RecordSearch {
                query: query.into(),
                sources: sources.iter().map(|s| s.to_string()).collect(),
                index_state: "corpus@42".into(),
                results,
            })
        };
    let calling = |tool: &str, version: &str, error: Option<&str>| {
        Command::RecordExternalToolCall(RecordExternalToolCall {
            tool: tool.into(),
            contract_version: version.into(),
            arguments_hash: hash_of("a"),
            reply_hash: error.is_none().then(|| hash_of("b")),
            error: error.map(str::to_owned),
        })
    };
    let from = |publisher: &str, url: Option<&str>| {
        let mut input = item(publisher, "blog", "2025-01-01", None);
        input.url = url.map(str::to_owned);
        input
    };
    let screening = |reason: &str| ScreeningInput {
        reason: reason.into(),
        ..reject("ev-1", "")
    };
    let sub_asked = vec![open(), sub_questions(&["a"])];
    let cases: Vec<(&str, Vec<Command>, Command, &str, u64)> = vec![
        (
            "task_id_chars_max",
            vec![],
            opening(&long, "c"),
            "task_id",
            11,
        ),
        (
            "constraint_chars_max",
            vec![],
            opening("t", &long),
            "constraints[0]",
            11,
        ),
        (
            "sub_questions_count_max",
            sub_asked,
            sub_questions(&["b"]),
            "sub_questions",
            2,
        ),
        (
            "sub_question_chars_max",
            opened(),
            sub_questions(&[&long]),
            "sub_questions[0]",
            11,
        ),
        (
            "query_chars_max",
            opened(),
            searching(&long, &["corpus"], vec![]),
            "query",
            11,
        ),
        (
            "sources_per_search_max",
            opened(),
            searching("lithium", &["corpus", "kb"], vec![]),
            "sources",
            2,
        ),
        (
            "name_chars_max",
            opened(),
            searching("lithium", &[&long], vec![]),
            "sources[0]",
            11,
        ),
        (
            "search_results_max",
            opened(),
            searching(
                "lithium",
                &["corpus"],
                vec![
                    candidate("r1", "corpus", from("a.org", None)),
                    candidate("r2", "corpus", from("b.org", None)),
                ],
            ),
            "results",
            2,
        ),
        (
            "name_chars_max",
            opened(),
            searching(
                "lithium",
                &["corpus"],
                vec![candidate(&long, "corpus", from("a.org", None))],
            ),
            "result_id",
            11,
        ),
        (
            "source_chars_max",
            opened(),
            add(vec![from(&long, None)]),
            "source",
            11,
        ),
        (
            "url_chars_max",
            opened(),
            add(vec![from("a.org", Some("https://a.org/x"))]),
            "url",
            15,
        ),
        (
            "reason_chars_max",
            one_item(),
            retract("ev-1", &long),
            "reason",
            11,
        ),
        (
            "reason_chars_max",
            one_item(),
            screen(vec![screening(&long)]),
            "decisions[0].reason",
            11,
        ),
        (
            "reason_chars_max",
            opened(),
            resolve("c-1", HumanOutcome::Supports, &long),
            "reason",
            11,
        ),
        (
            "reason_chars_max",
            opened(),
            Command::CloseTask(research::command::CloseTask {
                reason: Some(long.clone()),
            }),
            "reason",
            11,
        ),
        (
            "name_chars_max",
            opened(),
            calling(&long, "1", None),
            "tool",
            11,
        ),
        (
            "name_chars_max",
            opened(),
            calling("t", &long, None),
            "contract_version",
            11,
        ),
        (
            "reason_chars_max",
            opened(),
            calling("t", "1", Some(&long)),
            "error",
            11,
        ),
    ];
    let mut wrong = Vec::new();
    for (expected, before, command, field_part, carried) in cases {
        let what = format!("{command:?}");
        let refusal = given(history(before))
            .when_at(command, tight.clone())
            .then_refusal();
        match &refusal {
            Refusal::LimitExceeded {
                limit,
                max,
                actual,
                field,
            } if *limit == expected
                && *max == bound(expected)
                && *actual == carried
                && field.contains(field_part) => {}
            _ => wrong.push(format!(
                "{expected} on {field_part}: {refusal:?}\n  for {what}"
            )),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
