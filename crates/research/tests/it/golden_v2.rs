//! Golden cases for rule set `v2` at every boundary it adds to `v1`: defaulted dates and the
//! recency component, the sided-evidence clause, the recency tier over given dates, side
//! weighing, topicality recorded and re-derived, overrides, and the stored form.

use research::command::{EvidenceInput, SearchCandidate};
use research::event::{ConclusionIssued, Event, RelevanceBasis, Side, Tier};
use research::rules::{
    Mode, RelevanceInputs, RelevanceOverride, RuleSet, RulesOverride, Stance, TermInput,
    ThresholdsOverride, V2Parameters, Verdict, VerdictRule,
};
use research::{Command, DecodeError, Refusal, decode, encode, recheck};

use crate::support::*;

fn v2(overrides: RulesOverride) -> Option<RulesOverride> {
    Some(RulesOverride {
        rule_set: Some("v2".into()),
        ..overrides
    })
}

fn open_v2(overrides: RulesOverride) -> Command {
    open_with(Mode::ToolConstrained, v2(overrides))
}

fn open_v2_at(research_date: &str) -> Command {
    match open_v2(RulesOverride::default()) {
        Command::OpenTask(mut open) => {
            open.research_date = Some(research_date.into());
            Command::OpenTask(open)
        }
        other => other,
    }
}

fn undated(mut input: EvidenceInput) -> EvidenceInput {
    input.publish_date_defaulted = true;
    input
}

fn conclude(task: &mut Task) -> ConclusionIssued {
    task.ok(Command::RunConflictResolution);
    task.ok(Command::BuildDecisionMatrix);
    match task.ok(Command::GenerateConclusion).as_slice() {
        [Event::ConclusionIssued(issued)] => issued.clone(),
        other => panic!("{other:?}"),
    }
}

fn concluded(commands: Vec<Command>) -> (Task, ConclusionIssued) {
    let mut task = Task::from_commands(commands);
    let issued = conclude(&mut task);
    (task, issued)
}

/// Three undated items from three sources, all supporting, with relevance `relevance`.
fn three_undated(open: Command, relevance: f64) -> Vec<Command> {
    vec![
        open,
        add(["a.org", "b.org", "c.org"]
            .into_iter()
            .map(|s| {
                undated(with_relevance(
                    item(s, "other", "2020-01-01", Some(Stance::Supports)),
                    relevance,
                ))
            })
            .collect()),
        screen(vec![adopt("ev-1"), adopt("ev-2"), adopt("ev-3")]),
    ]
}

#[test]
fn without_a_dated_item_recency_is_dropped_and_the_other_weights_renormalised() {
    let (_, issued) = concluded(three_undated(open_v2(RulesOverride::default()), 0.6));
    let v2 = issued.v2.clone().unwrap();
    assert_eq!((v2.dated_items, v2.undated_items), (0, 3));
    assert!(!v2.recency_measured);
    assert_eq!(issued.components.recency, 0.0);
    let rest = 0.4 + 0.3 + 0.1;
    assert_eq!(v2.weights_applied.relevance, 0.4 / rest);
    assert_eq!(v2.weights_applied.recency, 0.0);
    // (0.4·0.6 + 0.3·1 + 0.1·1) / 0.8, in the applied weights' order.
    let expected = (0.4 / rest) * 0.6 + (0.3 / rest) * 1.0 + 0.0 * 0.0 + (0.1 / rest) * 1.0;
    assert_eq!(issued.confidence, expected);
    assert_eq!(issued.rule, VerdictRule::SupportsPrevail);
    assert_eq!(issued.stance, Verdict::Supportive);
}

#[test]
fn a_verdict_over_undated_evidence_does_not_move_with_the_research_date() {
    let (_, early) = concluded(three_undated(open_v2_at("2020-01-01"), 0.1));
    let (_, late) = concluded(three_undated(open_v2_at("2025-06-30"), 0.1));
    assert_eq!(early.confidence.to_bits(), late.confidence.to_bits());
    assert_eq!(early.components, late.components);
    assert_eq!(early.stance, late.stance);
    assert_eq!(early.stance, Verdict::Supportive);

    // v1 over the same evidence moves: recency of the defaulted date counts.
    let v1 = |date: &str| match open() {
        Command::OpenTask(mut open) => {
            open.research_date = Some(date.into());
            concluded(three_undated(Command::OpenTask(open), 0.1)).1
        }
        _ => unreachable!(),
    };
    assert_ne!(v1("2020-01-01").stance, v1("2025-06-30").stance);
}

#[test]
fn recency_is_the_mean_over_dated_items_and_the_card_counts_the_others() {
    let (task, issued) = concluded(vec![
        open_v2(RulesOverride::default()),
        add(vec![
            item("a.org", "blog", "2024-06-30", Some(Stance::Supports)),
            undated(item("b.org", "blog", "2001-01-01", Some(Stance::Supports))),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
    ]);
    let v2 = issued.v2.clone().unwrap();
    assert_eq!((v2.dated_items, v2.undated_items), (1, 1));
    assert!(v2.recency_measured);
    // 2024-06-30 to 2025-06-30 is 365 days: one half-life.
    assert_eq!(issued.components.recency, 0.5);
    assert_eq!(v2.weights_applied, RuleSet::v1().weights);
    let card = task.state.conclusion_card(None).unwrap();
    assert_eq!(card.undated_items, Some(1));
    assert!(
        card.markdown
            .contains("1 item(s) with a default date took no part in recency"),
        "{}",
        card.markdown
    );
}

#[test]
fn a_neutral_recency_for_undated_evidence_keeps_the_weights() {
    let (_, issued) = concluded(three_undated(
        open_v2(RulesOverride {
            undated_recency: Some(0.5),
            ..Default::default()
        }),
        0.6,
    ));
    let v2 = issued.v2.clone().unwrap();
    assert!(v2.recency_measured);
    assert_eq!(issued.components.recency, 0.5);
    assert_eq!(v2.weights_applied, RuleSet::v1().weights);
    assert_eq!(
        issued.confidence,
        0.4 * 0.6 + 0.3 * 1.0 + 0.2 * 0.5 + 0.1 * 1.0
    );
}

/// One supporting undated item of `relevance` and two neutral ones of relevance 1, from three
/// sources.
fn one_sided(overrides: RulesOverride, relevance: f64) -> ConclusionIssued {
    concluded(vec![
        open_v2(overrides),
        add(vec![
            undated(with_relevance(
                item("a.org", "other", "2020-01-01", Some(Stance::Supports)),
                relevance,
            )),
            undated(with_relevance(
                item("b.org", "other", "2020-01-01", Some(Stance::Neutral)),
                1.0,
            )),
            undated(with_relevance(
                item("c.org", "other", "2020-01-01", Some(Stance::Neutral)),
                1.0,
            )),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2"), adopt("ev-3")]),
    ])
    .1
}

#[test]
fn the_winning_side_needs_its_combined_relevance_within_the_tolerance() {
    let min = V2Parameters::defaults().sided_relevance_min;
    let at = one_sided(RulesOverride::default(), min);
    assert_eq!(at.rule, VerdictRule::SupportsPrevail);
    assert_eq!(at.v2.as_ref().unwrap().supports_relevance, min);
    let within = one_sided(RulesOverride::default(), min - 5e-10);
    assert_eq!(within.rule, VerdictRule::SupportsPrevail);
    let under = one_sided(RulesOverride::default(), min - 2e-9);
    assert_eq!(under.rule, VerdictRule::TooLittleSidedEvidence);
    assert_eq!(under.stance, Verdict::EvidenceInsufficient);
    // The assistant's case: one adopted item of relevance 0.036.
    assert_eq!(
        one_sided(RulesOverride::default(), 0.036).stance,
        Verdict::EvidenceInsufficient
    );
}

#[test]
fn the_winning_side_needs_its_minimum_count() {
    let two = RulesOverride {
        thresholds: ThresholdsOverride {
            sided_items_min: Some(2),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(
        one_sided(two.clone(), 1.0).rule,
        VerdictRule::TooLittleSidedEvidence
    );
    let (_, issued) = concluded(three_undated(open_v2(two), 0.5));
    assert_eq!(issued.rule, VerdictRule::SupportsPrevail);
}

#[test]
fn the_confidence_floor_applies_to_the_renormalised_confidence() {
    // One supporting item of three sources' diversity: 0.5·r + 0.375·1 + 0.125·(1/3) reaches 0.5
    // at r = 1/6.
    let floor = |relevance: f64| {
        concluded(vec![
            open_v2(RulesOverride {
                thresholds: ThresholdsOverride {
                    sided_relevance_min: Some(0.0),
                    ..Default::default()
                },
                ..Default::default()
            }),
            add(vec![undated(with_relevance(
                item("a.org", "other", "2020-01-01", Some(Stance::Supports)),
                relevance,
            ))]),
            screen(vec![adopt("ev-1")]),
        ])
        .1
    };
    let at = floor(1.0 / 6.0);
    assert!((at.confidence - 0.5).abs() < 1e-12, "{}", at.confidence);
    assert_eq!(at.rule, VerdictRule::SupportsPrevail);
    let under = floor(1.0 / 6.0 - 1e-8);
    assert_eq!(under.rule, VerdictRule::BelowConfidenceFloor);
}

fn conflict(overrides: RulesOverride, items: Vec<EvidenceInput>) -> Task {
    let ids: Vec<String> = (1..=items.len()).map(|i| format!("ev-{i}")).collect();
    let mut task = Task::from_commands(vec![
        open_v2(overrides),
        add(items),
        screen(ids.iter().map(|id| adopt(id)).collect()),
    ]);
    task.ok(Command::RunConflictResolution);
    task
}

#[test]
fn the_recency_tier_compares_given_dates_only() {
    // 60 days apart, but the newer date is a default: it cannot win on recency.
    let task = conflict(
        RulesOverride::default(),
        vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            undated(item("b.org", "blog", "2025-03-02", Some(Stance::Opposes))),
        ],
    );
    let current = task.state.current_conflicts().next().unwrap();
    assert_eq!(current.tier(), Tier::Pending);
    let v2 = current.adjudication.v2.clone().unwrap();
    assert_eq!(v2.opposes_latest_dated, None);
    assert_eq!(v2.undated.len(), 1);
    assert_eq!(current.adjudication.compared.recency_gap_days, 0);

    // Both dated: 30 days decide as in v1.
    let task = conflict(
        RulesOverride::default(),
        vec![
            item("a.org", "blog", "2025-01-31", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-01", Some(Stance::Opposes)),
        ],
    );
    let current = task.state.current_conflicts().next().unwrap();
    assert_eq!(current.tier(), Tier::Recency);
    assert_eq!(current.winner(), Some(Side::Supports));
}

/// Eight opposing items against one supporting item, of equal authority and date.
fn eight_to_one(ratio: Option<f64>, supporting_relevance: f64) -> Task {
    let mut items = vec![with_relevance(
        item("s.org", "blog", "2025-01-01", Some(Stance::Supports)),
        supporting_relevance,
    )];
    for i in 0..8 {
        items.push(with_relevance(
            item(
                &format!("o{i}.org"),
                "blog",
                "2025-01-01",
                Some(Stance::Opposes),
            ),
            0.5,
        ));
    }
    conflict(
        RulesOverride {
            side_weight_ratio: ratio,
            ..Default::default()
        },
        items,
    )
}

#[test]
fn side_weighing_is_off_by_default_and_decides_at_its_ratio_when_set() {
    let task = eight_to_one(None, 0.5);
    assert_eq!(
        task.state.current_conflicts().next().unwrap().tier(),
        Tier::Pending
    );

    // Opposing weight 8 · 0.3 · 0.5 = 1.2; supporting 0.3 · r.
    let task = eight_to_one(Some(3.0), 0.4);
    let current = task.state.current_conflicts().next().unwrap();
    assert_eq!(current.tier(), Tier::Weight);
    assert_eq!(current.winner(), Some(Side::Opposes));
    let task = eight_to_one(Some(8.0), 0.5);
    let current = task.state.current_conflicts().next().unwrap();
    let v2 = current.adjudication.v2.clone().unwrap();
    assert!((v2.opposes_weight - 8.0 * v2.supports_weight).abs() < 1e-12);
    assert_eq!(current.tier(), Tier::Weight, "the ratio itself reaches it");
    let task = eight_to_one(Some(8.0), 0.5 + 1e-6);
    assert_eq!(
        task.state.current_conflicts().next().unwrap().tier(),
        Tier::Pending
    );
}

fn term(t: &str, doc_freq: u64, q: bool, w: bool, found: bool) -> TermInput {
    TermInput {
        term: t.into(),
        doc_freq,
        in_question: q,
        in_query: w,
        found,
    }
}

fn topical(inputs: RelevanceInputs, relevance: f64) -> EvidenceInput {
    let mut input = item("a.org", "other", "2020-01-01", None);
    input.relevance = relevance;
    input.relevance_basis = RelevanceBasis::Topicality;
    input.relevance_inputs = Some(inputs);
    input
}

fn inputs() -> RelevanceInputs {
    RelevanceInputs {
        corpus_docs: 100,
        terms: vec![
            term("lithium", 3, true, true, false),
            term("demand", 40, true, false, true),
            term("supply", 20, true, false, false),
            term("battery", 5, false, true, false),
        ],
    }
}

#[test]
fn topicality_is_recorded_with_its_inputs_and_rederived_on_replay() {
    let params = V2Parameters::defaults();
    let relevance = research::rules::v2::topical_relevance(&inputs(), &params);
    assert!(relevance > 0.0 && relevance < 1.0, "{relevance}");
    let found = Command::RecordSearch(research::command::RecordSearch {
        query: "lithium battery".into(),
        sources: vec!["corpus".into()],
        index_state: "corpus@1".into(),
        results: vec![SearchCandidate {
            result_id: "doc-1".into(),
            origin: "corpus".into(),
            raw_score: 3.0,
            normalised_score: 1.0,
            evidence: topical(inputs(), relevance),
        }],
    });
    let mut task = Task::from_commands(vec![open_v2(RulesOverride::default())]);
    let before = task.state.clone();
    let events = task.ok(found.clone());
    let Event::EvidenceAdded(added) = &events[1] else {
        panic!("{events:?}");
    };
    assert_eq!(added.relevance, relevance);
    assert_eq!(added.relevance_inputs, Some(inputs()));

    // Replay re-derives the relevance from the inputs, bit for bit, and catches a change.
    let mut state = before.clone();
    research::evolve(&mut state, &events[0], &meta(1));
    assert!(recheck(&state, &events[1]).is_ok());
    let mut tampered = added.clone();
    tampered.relevance = relevance + f64::EPSILON;
    let discrepancy = recheck(&state, &Event::EvidenceAdded(tampered)).unwrap_err();
    assert_eq!(discrepancy.field, "relevance");
    let mut stripped = added.clone();
    stripped.relevance_inputs = None;
    let discrepancy = recheck(&state, &Event::EvidenceAdded(stripped)).unwrap_err();
    assert_eq!(discrepancy.field, "relevance_inputs");

    // A relevance that does not follow from its inputs is refused.
    let wrong = Command::AddEvidence(research::command::AddEvidence {
        items: vec![topical(inputs(), 0.9)],
    });
    let refusal = given(history(vec![open_v2(RulesOverride::default())]))
        .when(wrong)
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, .. } if field == "items[0].relevance"),
        "{refusal:?}"
    );
    // And a v1 task has no topicality.
    let refusal = given(history(vec![open()]))
        .when(Command::AddEvidence(research::command::AddEvidence {
            items: vec![topical(inputs(), relevance)],
        }))
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, .. } if field == "items[0].relevance_basis"),
        "{refusal:?}"
    );
}

#[test]
fn overrides_name_the_rule_set_and_v2_parameters_belong_to_v2() {
    let v1_with_v2_parameter = RulesOverride {
        side_weight_ratio: Some(3.0),
        ..Default::default()
    };
    assert!(matches!(
        RuleSet::with_overrides(&v1_with_v2_parameter),
        Err(Refusal::InvalidArgument { field, .. }) if field == "rules.side_weight_ratio"
    ));
    assert!(matches!(
        RuleSet::with_overrides(&RulesOverride {
            rule_set: Some("v3".into()),
            ..Default::default()
        }),
        Err(Refusal::InvalidArgument { field, .. }) if field == "rules.rule_set"
    ));
    let bad = [
        (
            RulesOverride {
                relevance: RelevanceOverride {
                    coverage_full: Some(0.0),
                    ..Default::default()
                },
                ..Default::default()
            },
            "rules.relevance.coverage_full",
        ),
        (
            RulesOverride {
                thresholds: ThresholdsOverride {
                    sided_items_min: Some(0),
                    ..Default::default()
                },
                ..Default::default()
            },
            "rules.thresholds.sided_items_min",
        ),
        (
            RulesOverride {
                side_weight_ratio: Some(0.5),
                ..Default::default()
            },
            "rules.side_weight_ratio",
        ),
        (
            RulesOverride {
                undated_recency: Some(f64::NAN),
                ..Default::default()
            },
            "rules.undated_recency",
        ),
    ];
    for (overrides, wanted) in bad {
        let got = RuleSet::with_overrides(&v2(overrides).unwrap());
        assert!(
            matches!(&got, Err(Refusal::InvalidArgument { field, .. }) if field == wanted),
            "{wanted}: {got:?}"
        );
    }
    let rules = RuleSet::with_overrides(
        &v2(RulesOverride {
            relevance: RelevanceOverride {
                query_weight: Some(0.25),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap(),
    )
    .unwrap();
    assert_eq!(rules.id, "v2");
    assert_eq!(rules.v2.unwrap().query_weight, 0.25);
    assert_eq!(
        rules.v2.unwrap().coverage_full,
        V2Parameters::defaults().coverage_full
    );
    // No name is v1, as commands meant before v2 existed.
    assert_eq!(
        RuleSet::with_overrides(&RulesOverride::default()).unwrap(),
        RuleSet::v1()
    );
}

#[test]
fn v2_events_are_stored_in_their_schema_version_and_nowhere_else() {
    let mut task = Task::from_commands(three_undated(open_v2(RulesOverride::default()), 0.6));
    conclude(&mut task);
    task.ok(Command::AddEvidence(research::command::AddEvidence {
        items: vec![topical(
            inputs(),
            research::rules::v2::topical_relevance(&inputs(), &V2Parameters::defaults()),
        )],
    }));
    for event in &task.events {
        let bytes = encode(event);
        let version = u16::from_le_bytes([bytes[0], bytes[1]]);
        // The rule set with its query cap is version 4; relevance inputs are version 2.
        let expected = match event {
            Event::TaskOpened(_) | Event::ConclusionIssued(_) => 4,
            Event::EvidenceAdded(e) if e.relevance_inputs.is_some() => 2,
            _ => 1,
        };
        assert_eq!(version, expected, "{}", event.kind());
        assert_eq!(decode(event.kind(), &bytes).as_ref(), Ok(event));
        // The same payload under any other version is refused.
        for other_version in [1u8, 2, 3, 4]
            .into_iter()
            .filter(|v| u16::from(*v) != version)
        {
            let mut other = bytes.clone();
            other[0] = other_version;
            assert!(
                decode(event.kind(), &other).is_err(),
                "{} as {other_version}",
                event.kind()
            );
        }
    }
    // A v1-shaped payload labelled version 2 is not canonical.
    let screened = task
        .events
        .iter()
        .find(|e| e.kind() == "evidence_screened")
        .unwrap();
    let mut relabelled = encode(screened);
    relabelled[0] = 2;
    assert_eq!(
        decode("evidence_screened", &relabelled),
        Err(DecodeError::NotCanonical {
            kind: "evidence_screened"
        })
    );
}

#[test]
fn a_v2_task_state_holds_every_v2_part_in_its_binary_form() {
    // postcard is not self-describing: the state's binary form must hold the v2 parts, absent
    // or present, field for field, or a snapshot would not decode.
    let mut task = Task::from_commands(vec![
        open_v2(RulesOverride::default()),
        add(vec![
            topical(
                inputs(),
                research::rules::v2::topical_relevance(&inputs(), &V2Parameters::defaults()),
            ),
            item("b.org", "blog", "2025-01-01", Some(Stance::Opposes)),
        ]),
        screen(vec![adopt_as("ev-1", Stance::Supports), adopt("ev-2")]),
    ]);
    conclude(&mut task);
    let bytes = task.state.canonical_bytes();
    let back: research::TaskState = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back.canonical_bytes(), bytes);
    assert!(back.task().unwrap().rules.is_v2());
    assert!(back.current_conclusion().unwrap().issued.v2.is_some());
    assert!(back.evidence()[0].added.relevance_inputs.is_some());
    assert!(back.evidence()[1].added.relevance_inputs.is_none());
    // The JSON view shows v2's parts only where they are present.
    let v1 = serde_json::to_value(RuleSet::v1()).unwrap();
    assert!(v1.get("v2").is_none(), "{v1}");
    let v2 = serde_json::to_value(RuleSet::v2()).unwrap();
    assert_eq!(
        v2["v2"]["coverage_full"],
        V2Parameters::defaults().coverage_full
    );
}

#[test]
fn the_explanation_states_v2_and_what_took_no_part_in_recency() {
    let mut task = Task::from_commands(three_undated(open_v2(RulesOverride::default()), 0.6));
    conclude(&mut task);
    let events = task.ok(Command::ExplainReasoning);
    let Event::ExplanationRecorded(explanation) = &events[0] else {
        panic!("{events:?}");
    };
    let markdown = explanation.markdown();
    for wanted in [
        "Rule set v2:",
        "coverage of the question's content terms",
        "side weighing off",
        "Recency not measured: none of the 3 items used has a given date",
        // The weights applied, renormalised in f64: 0.4 / 0.7999999999999999 and so on.
        "= 0.5000000000000001·relevance + 0.375·consistency + 0·recency + 0.12500000000000003·diversity",
    ] {
        assert!(markdown.contains(wanted), "`{wanted}` not in\n{markdown}");
    }
    // The assistant's single item of relevance 0.036 does not even reach the floor.
    let (_, issued) = concluded(vec![
        open_v2(RulesOverride::default()),
        add(vec![undated(with_relevance(
            item("a.org", "other", "2020-01-01", Some(Stance::Supports)),
            0.036,
        ))]),
        screen(vec![adopt("ev-1")]),
    ]);
    assert_eq!(issued.rule, VerdictRule::BelowConfidenceFloor);
}

// The query cap: the query's coverage counts at most `query_cap` times the question's.

/// An off-topic item: none of the question's terms, the query's rare term.
fn off_topic() -> RelevanceInputs {
    RelevanceInputs {
        corpus_docs: 1000,
        terms: vec![
            term("lithium", 30, true, true, false),
            term("demand", 200, true, false, false),
            term("supply", 150, true, false, false),
            term("cobalt", 2, false, true, true),
        ],
    }
}

/// The formula without a cap, computed here from the IDF weights.
fn uncapped(inputs: &RelevanceInputs, query_weight: f64, coverage_full: f64) -> f64 {
    let cov = |member: fn(&TermInput) -> bool| {
        let (mut found, mut total) = (0.0, 0.0);
        for t in inputs.terms.iter().filter(|t| member(t)) {
            let w = research::rules::idf(inputs.corpus_docs, t.doc_freq);
            total += w;
            if t.found {
                found += w;
            }
        }
        if total > 0.0 { found / total } else { 0.0 }
    };
    let mixed = (1.0 - query_weight) * cov(|t| t.in_question) + query_weight * cov(|t| t.in_query);
    (mixed / coverage_full).clamp(0.0, 1.0)
}

fn add_topical(inputs: RelevanceInputs, relevance: f64) -> Command {
    Command::AddEvidence(research::command::AddEvidence {
        items: vec![topical(inputs, relevance)],
    })
}

/// A task opened before the cap existed: the version 2 bytes of the frozen fixture's
/// `task_opened`, which record no cap.
fn opened_before_the_cap() -> Event {
    let hex = include_str!("../fixtures/payloads-before-v4/v2-task_opened.hex").trim();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let event = decode("task_opened", &bytes).unwrap();
    let Event::TaskOpened(opened) = &event else {
        panic!("{event:?}")
    };
    assert_eq!(opened.rules.v2.unwrap().query_cap, None);
    event
}

#[test]
fn an_off_topic_item_has_no_relevance_under_the_cap_and_its_old_relevance_without() {
    let old = uncapped(&off_topic(), 0.5, 0.15);
    assert!(old > 0.9, "the query alone made it relevant: {old}");

    // Given a task opened with v2's defaults (cap 2), when the item is added with relevance 0,
    // then it is accepted: it holds nothing of the question.
    let events = given(history(vec![open_v2(RulesOverride::default())]))
        .when(add_topical(off_topic(), 0.0))
        .then_events();
    let [Event::EvidenceAdded(added)] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(added.relevance, 0.0);
    // …and the old value is refused.
    let refusal = given(history(vec![open_v2(RulesOverride::default())]))
        .when(add_topical(off_topic(), old))
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, .. } if field == "items[0].relevance"),
        "{refusal:?}"
    );

    // Given a task whose stored opening records no cap, the item keeps the uncapped value…
    let events = given([opened_before_the_cap()])
        .when(add_topical(off_topic(), old))
        .then_events();
    let [Event::EvidenceAdded(kept)] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(kept.relevance.to_bits(), old.to_bits());
    // …and 0 is refused there.
    let refusal = given([opened_before_the_cap()])
        .when(add_topical(off_topic(), 0.0))
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, .. } if field == "items[0].relevance"),
        "{refusal:?}"
    );

    // Replay applies the task's own rule: each recorded value passes recheck under its task and
    // is a discrepancy under the other.
    let mut capped = research::TaskState::default();
    for (i, e) in history(vec![open_v2(RulesOverride::default())])
        .iter()
        .enumerate()
    {
        research::evolve(&mut capped, e, &meta(i));
    }
    let mut before = research::TaskState::default();
    research::evolve(&mut before, &opened_before_the_cap(), &meta(0));
    let mut added_uncapped = added.clone();
    added_uncapped.relevance = old;
    assert!(recheck(&capped, &Event::EvidenceAdded(added.clone())).is_ok());
    assert_eq!(
        recheck(&capped, &Event::EvidenceAdded(added_uncapped.clone()))
            .unwrap_err()
            .field,
        "relevance"
    );
    assert!(recheck(&before, &Event::EvidenceAdded(added_uncapped)).is_ok());
    assert_eq!(
        recheck(&before, &Event::EvidenceAdded(added.clone()))
            .unwrap_err()
            .field,
        "relevance"
    );
}

fn cap_params(query_cap: Option<f64>) -> V2Parameters {
    V2Parameters {
        coverage_full: 1.0,
        query_cap,
        ..V2Parameters::defaults()
    }
}

/// An empty corpus weighs every term ln 2: the question's coverage is `found / n` of its `n`
/// terms, the query's (its one term, found) 1.
fn plain(question_terms: usize) -> RelevanceInputs {
    let mut terms: Vec<TermInput> = (0..question_terms)
        .map(|i| term(&format!("q{i}"), 0, true, false, i == 0))
        .collect();
    terms.push(term("w", 0, false, true, true));
    RelevanceInputs {
        corpus_docs: 0,
        terms,
    }
}

#[test]
fn an_item_exactly_at_the_cap_keeps_the_uncapped_value_and_one_above_it_is_capped() {
    let ln2 = libm::log(2.0);
    // Question coverage 1/2, query 1: 1 = 2 · 1/2, exactly at the cap.
    let at = plain(2);
    let expected = 0.5 * (ln2 / (ln2 + ln2)) + 0.5 * 1.0;
    assert_eq!(expected, 0.75);
    assert_eq!(
        research::rules::v2::topical_relevance(&at, &cap_params(Some(2.0))).to_bits(),
        expected.to_bits()
    );
    assert_eq!(
        research::rules::v2::topical_relevance(&at, &cap_params(None)).to_bits(),
        expected.to_bits()
    );
    // Question coverage 1/3: the query counts 2/3, not 1.
    let above = plain(3);
    let q = ln2 / (ln2 + ln2 + ln2);
    assert_eq!(
        research::rules::v2::topical_relevance(&above, &cap_params(Some(2.0))),
        0.5 * q + 0.5 * (2.0 * q)
    );
    assert_eq!(
        research::rules::v2::topical_relevance(&above, &cap_params(None)),
        0.5 * q + 0.5 * 1.0
    );

    // Through decide: given a task with cap 2 and full coverage at 1, the item at the cap is
    // accepted with 0.75.
    let open = open_v2(RulesOverride {
        relevance: RelevanceOverride {
            coverage_full: Some(1.0),
            query_cap: Some(2.0),
            ..Default::default()
        },
        ..Default::default()
    });
    let events = given(history(vec![open]))
        .when(add_topical(at, 0.75))
        .then_events();
    let [Event::EvidenceAdded(added)] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(added.relevance, 0.75);
}

#[test]
fn a_cap_of_0_leaves_the_question_its_share_only() {
    let ln2 = libm::log(2.0);
    let inputs = plain(2);
    let q = ln2 / (ln2 + ln2);
    // The query's share counts for nothing: (1 − w)·cov(question).
    let zero = research::rules::v2::topical_relevance(&inputs, &cap_params(Some(0.0)));
    assert_eq!(zero, 0.5 * q);
    // Which is below the question's coverage alone, as an item no search found has it.
    let mut unsearched = inputs.clone();
    unsearched.terms.retain(|t| t.in_question);
    assert!(zero < research::rules::v2::topical_relevance(&unsearched, &cap_params(Some(0.0))));

    let open = open_v2(RulesOverride {
        relevance: RelevanceOverride {
            query_cap: Some(0.0),
            coverage_full: Some(1.0),
            ..Default::default()
        },
        ..Default::default()
    });
    let task = Task::from_commands(vec![open]);
    assert_eq!(
        task.state.task().unwrap().rules.v2.unwrap().query_cap,
        Some(0.0)
    );
    given(task.events.clone())
        .when(add_topical(inputs.clone(), 0.5 * q))
        .then_events();
    let refusal = given(task.events)
        .when(add_topical(inputs, 0.75))
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, .. } if field == "items[0].relevance"),
        "{refusal:?}"
    );
}

#[test]
fn the_cap_is_validated_at_open_and_belongs_to_v2() {
    for bad in [-0.5, 1000.5, f64::NAN, f64::INFINITY] {
        let got = RuleSet::with_overrides(
            &v2(RulesOverride {
                relevance: RelevanceOverride {
                    query_cap: Some(bad),
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap(),
        );
        assert!(
            matches!(&got, Err(Refusal::InvalidArgument { field, .. }) if field == "rules.relevance.query_cap"),
            "{bad}: {got:?}"
        );
    }
    for fine in [0.0, 1000.0] {
        let rules = RuleSet::with_overrides(
            &v2(RulesOverride {
                relevance: RelevanceOverride {
                    query_cap: Some(fine),
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(rules.v2.unwrap().query_cap, Some(fine));
    }
    let v1 = RuleSet::with_overrides(&RulesOverride {
        relevance: RelevanceOverride {
            query_cap: Some(2.0),
            ..Default::default()
        },
        ..Default::default()
    });
    assert!(
        matches!(&v1, Err(Refusal::InvalidArgument { field, .. }) if field == "rules.relevance.query_cap"),
        "{v1:?}"
    );
    let refusal = given(Vec::<Event>::new())
        .when(open_with(
            Mode::ToolConstrained,
            v2(RulesOverride {
                relevance: RelevanceOverride {
                    query_cap: Some(-1.0),
                    ..Default::default()
                },
                ..Default::default()
            }),
        ))
        .then_refusal();
    assert!(
        matches!(&refusal, Refusal::InvalidArgument { field, .. } if field == "rules.relevance.query_cap"),
        "{refusal:?}"
    );
    assert_eq!(V2Parameters::defaults().query_cap, Some(2.0));
}

proptest::proptest! {
    /// A cap the query's coverage does not exceed (`cap · cov(question) ≥ cov(query)`) gives the
    /// uncapped formula bit for bit; any other cap gives less.
    #[test]
    fn a_cap_at_or_above_the_ratio_is_the_uncapped_formula(
        corpus_docs in 0u64..5000,
        terms in proptest::collection::vec(
            (0u64..6000, proptest::bool::ANY, proptest::bool::ANY, proptest::bool::ANY),
            1..8,
        ),
        query_weight in 0.0f64..=1.0,
        cap in 0.0f64..=1000.0,
    ) {
        let inputs = RelevanceInputs {
            corpus_docs,
            terms: terms
                .iter()
                .enumerate()
                .map(|(i, &(df, q, w, found))| term(&format!("t{i}"), df, q || !w, w, found))
                .collect(),
        };
        let params = |query_cap| V2Parameters {
            query_weight,
            coverage_full: 1.0,
            query_cap,
            ..V2Parameters::defaults()
        };
        let free = uncapped(&inputs, query_weight, 1.0);
        let has_query = inputs.terms.iter().any(|t| t.in_query);
        let no_cap = research::rules::v2::topical_relevance(&inputs, &params(None));
        if has_query {
            proptest::prop_assert_eq!(no_cap.to_bits(), free.to_bits());
        }
        let capped = research::rules::v2::topical_relevance(&inputs, &params(Some(cap)));
        let (question, _) = research::rules::v2::coverage(&inputs, |t| t.in_question);
        let (query, _) = research::rules::v2::coverage(&inputs, |t| t.in_query);
        if !has_query || cap * question >= query {
            proptest::prop_assert_eq!(capped.to_bits(), no_cap.to_bits());
        } else {
            proptest::prop_assert!(capped <= no_cap);
        }
        // The largest cap reproduces the formula whenever the question's coverage is at least
        // 1/1000 (the query's is at most 1).
        if question >= 1e-3 {
            let widest = research::rules::v2::topical_relevance(&inputs, &params(Some(1000.0)));
            proptest::prop_assert_eq!(widest.to_bits(), no_cap.to_bits());
        }
    }
}
