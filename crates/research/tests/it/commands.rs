//! Every command, accepted: given a history, when the command, then the events it records.

use expect_test::expect;
use research::command::{CloseTask, OpenTask, RecordExternalToolCall};
use research::event::{
    EvidenceRetracted, EvidenceScreened, ExternalToolCalled, HumanOutcome, ScreeningDecision,
    SubQuestion, SubQuestionsExpanded, TaskClosed, TaskOpened, Tier,
};
use research::ids::{EvidenceId, SubQuestionId};
use research::rules::{Mode, RuleSet, Stance};
use research::{Cause, Command, Event};

use crate::support::*;

#[test]
fn open_task_records_the_full_rule_set_and_defaults_the_research_date() {
    given([])
        .when(Command::OpenTask(OpenTask {
            task_id: "t-1".into(),
            question: "  Is 产能增速 above 需求增速?  ".into(),
            constraints: vec![" last three years ".into()],
            research_date: None,
            mode: Mode::AgentLed,
            rules: None,
            conflict_decisions: None,
        }))
        .then_expect(vec![Event::TaskOpened(TaskOpened {
            task_id: "t-1".into(),
            question: "Is 产能增速 above 需求增速?".into(),
            constraints: vec!["last three years".into()],
            research_date: date("2025-06-30"),
            mode: Mode::AgentLed,
            rules: RuleSet::v1(),
            conflict_decisions: None,
        })]);
}

#[test]
fn expand_sub_questions_numbers_them_after_the_existing_ones() {
    given(history(vec![open(), sub_questions(&["Demand growth?"])]))
        .when(sub_questions(&["Supply growth?", "Price trend?"]))
        .then_expect(vec![Event::SubQuestionsExpanded(SubQuestionsExpanded {
            sub_questions: vec![
                SubQuestion {
                    id: SubQuestionId::nth(2),
                    text: "Supply growth?".into(),
                },
                SubQuestion {
                    id: SubQuestionId::nth(3),
                    text: "Price trend?".into(),
                },
            ],
        })]);
}

#[test]
fn record_search_adds_new_results_and_folds_known_content() {
    let known = item("example.org", "blog", "2025-01-01", None);
    let fresh = item(
        "https://www.Stats.example.gov/report",
        "government",
        "2025-03-01",
        Some(Stance::Supports),
    );
    let outcome = given(history(vec![open(), add(vec![known.clone()])])).when(search(
        &["corpus"],
        vec![
            candidate("doc-7", "corpus", fresh.clone()),
            candidate("doc-9", "corpus", known),
            candidate("doc-7b", "corpus", fresh),
        ],
    ));
    let causes: Vec<Vec<Cause>> = match &outcome.result {
        Ok(events) => events.iter().map(|e| e.causation.clone()).collect(),
        Err(_) => Vec::new(),
    };
    assert_eq!(causes, vec![vec![], vec![Cause::InBatch(0)]]);
    let events = outcome.then_events();
    expect![[r#"
        {"type":"search_recorded","search_id":"se-1","query":"lithium demand supply growth","sources":["corpus"],"index_state":"corpus@42","results":[{"result_id":"doc-7","origin":"corpus","raw_score":11.65,"normalised_score":0.9,"evidence_id":"ev-2","folded":false},{"result_id":"doc-9","origin":"corpus","raw_score":11.65,"normalised_score":0.9,"evidence_id":"ev-1","folded":true},{"result_id":"doc-7b","origin":"corpus","raw_score":11.65,"normalised_score":0.9,"evidence_id":"ev-2","folded":true}]}
        {"type":"evidence_added","evidence_id":"ev-2","origin":"corpus","source":"stats.example.gov","url":null,"publish_date":"2025-03-01","publish_date_defaulted":false,"source_type":"government","citation_count":null,"summary":"https://www.Stats.example.gov/report on lithium, 2025-03-01","content_hash":"5430f1411cc48f7a4a95f6055e68b95881e40188eb285685195d947d8d220501","relevance":0.8,"relevance_basis":"given_by_client","stance":"supports","sub_question":null,"found_by":{"search_id":"se-1","result_id":"doc-7"},"authority":0.95,"reliability":0.95,"age_days":121,"recency":0.7947060048529351}"#]]
    .assert_eq(&json_lines(&events));
}

#[test]
fn add_evidence_scores_items_and_attributes_them_to_the_client() {
    let mut input = item(
        "Example Daily",
        "news_original",
        "2024-06-30",
        Some(Stance::Opposes),
    );
    input.citation_count = Some(99);
    input.url = Some("https://example.org/a".into());
    let events = given(history(vec![open()]))
        .when(add(vec![input]))
        .then_events();
    let [Event::EvidenceAdded(added)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!(added.evidence_id, EvidenceId::nth(1));
    assert_eq!(added.origin, "client");
    assert_eq!(added.source, "example daily");
    assert_eq!(added.authority, 0.6);
    assert_eq!(added.reliability, 0.6 + 0.1 * (2.0 / 3.0));
    assert_eq!(added.age_days, 365);
    assert_eq!(added.recency, 0.5);
}

#[test]
fn retract_evidence_records_the_reason_and_cites_the_item() {
    let outcome = given(history(vec![
        open(),
        add(vec![item("a.org", "blog", "2025-01-01", None)]),
    ]))
    .when(retract("ev-1", "the page was withdrawn"));
    let new = outcome.then_new_events();
    assert_eq!(new[0].causation, vec![Cause::Event(meta(1).hash)]);
    assert_eq!(
        new[0].event,
        Event::EvidenceRetracted(EvidenceRetracted {
            evidence_id: EvidenceId::nth(1),
            reason: "the page was withdrawn".into(),
        })
    );
}

#[test]
fn screen_evidence_keeps_or_sets_the_stance() {
    given(history(vec![
        open(),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            item("b.org", "blog", "2025-01-01", None),
            item("c.org", "blog", "2025-01-01", None),
        ]),
    ]))
    .when(screen(vec![
        adopt("ev-1"),
        adopt_as("ev-2", Stance::Neutral),
        reject("ev-3", "off topic"),
    ]))
    .then_expect(vec![
        Event::EvidenceScreened(EvidenceScreened {
            evidence_id: EvidenceId::nth(1),
            decision: ScreeningDecision::Adopt,
            stance: Some(Stance::Supports),
            sub_question: None,
            reason: String::new(),
        }),
        Event::EvidenceScreened(EvidenceScreened {
            evidence_id: EvidenceId::nth(2),
            decision: ScreeningDecision::Adopt,
            stance: Some(Stance::Neutral),
            sub_question: None,
            reason: String::new(),
        }),
        Event::EvidenceScreened(EvidenceScreened {
            evidence_id: EvidenceId::nth(3),
            decision: ScreeningDecision::Reject,
            stance: None,
            sub_question: None,
            reason: "off topic".into(),
        }),
    ]);
}

#[test]
fn a_screening_can_be_revised() {
    let mut task = Task::from_commands(vec![
        open(),
        add(vec![item(
            "a.org",
            "blog",
            "2025-01-01",
            Some(Stance::Supports),
        )]),
        screen(vec![adopt("ev-1")]),
    ]);
    task.ok(screen(vec![reject("ev-1", "duplicate of a better source")]));
    let status = task.state.evidence_status(&EvidenceId::nth(1));
    assert_eq!(status, Some(research::event::EvidenceStatus::Rejected));
}

/// Two items on each side of the main question, screened: a conflict for the rules.
pub(crate) fn contested(
    supporting: (&str, &str, &str),
    opposing: (&str, &str, &str),
) -> Vec<Command> {
    vec![
        open(),
        add(vec![
            item(
                supporting.0,
                supporting.1,
                supporting.2,
                Some(Stance::Supports),
            ),
            item(opposing.0, opposing.1, opposing.2, Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
    ]
}

#[test]
fn conflict_resolution_adjudicates_each_scope_with_both_sides() {
    let events = given(history(contested(
        ("stats.example.gov", "government", "2025-01-01"),
        ("blog.example.org", "blog", "2025-05-01"),
    )))
    .when(Command::RunConflictResolution)
    .then_events();
    expect![[r#"
        {
          "type": "conflicts_adjudicated",
          "adjudications": [
            {
              "conflict_id": "cf-1",
              "scope": null,
              "supersedes": null,
              "participants": [
                {
                  "evidence_id": "ev-1",
                  "side": "supports",
                  "source": "stats.example.gov",
                  "publish_date": "2025-01-01",
                  "authority": 0.95
                },
                {
                  "evidence_id": "ev-2",
                  "side": "opposes",
                  "source": "blog.example.org",
                  "publish_date": "2025-05-01",
                  "authority": 0.3
                }
              ],
              "tier": "authority",
              "winner": "supports",
              "compared": {
                "supports_authority": 0.95,
                "opposes_authority": 0.3,
                "authority_gap": 0.6499999999999999,
                "supports_latest": "2025-01-01",
                "opposes_latest": "2025-05-01",
                "recency_gap_days": 120
              }
            }
          ],
          "dissolved": [],
          "unchanged": []
        }"#]]
    .assert_eq(&pretty(&events[0]));
}

#[test]
fn resolve_conflict_on_a_pending_conflict_is_a_resolution_and_on_an_automatic_one_an_appeal() {
    let pending = {
        let mut commands = contested(
            ("a.org", "blog", "2025-01-01"),
            ("b.org", "blog", "2025-01-10"),
        );
        commands.push(Command::RunConflictResolution);
        commands
    };
    let events = given(history(pending))
        .when(resolve(
            "cf-1",
            HumanOutcome::BothStand,
            "both measure different things",
        ))
        .then_events();
    assert!(matches!(
        &events[..],
        [Event::ConflictResolved(r)] if r.outcome == HumanOutcome::BothStand && r.previous_outcome.is_none()
    ));

    let automatic = {
        let mut commands = contested(
            ("a.gov", "government", "2025-01-01"),
            ("b.org", "blog", "2025-01-10"),
        );
        commands.push(Command::RunConflictResolution);
        commands
    };
    let events = given(history(automatic))
        .when(resolve(
            "cf-1",
            HumanOutcome::Opposes,
            "the blog quotes newer primary data",
        ))
        .then_events();
    assert!(matches!(
        &events[..],
        [Event::AdjudicationAppealed(a)]
            if a.overturned_tier == Tier::Authority
            && a.overturned_winner == Some(research::event::Side::Supports)
            && a.outcome == HumanOutcome::Opposes
    ));
}

#[test]
fn build_matrix_conclude_and_explain_in_tool_constrained_order() {
    let mut commands = contested(
        ("stats.example.gov", "government", "2025-01-01"),
        ("blog.example.org", "blog", "2025-05-01"),
    );
    commands.push(Command::RunConflictResolution);
    let matrix = given(history(commands.clone()))
        .when(Command::BuildDecisionMatrix)
        .then_events();
    expect![[r#"{"type":"decision_matrix_built","matrix_id":"mx-1","rows":[{"evidence_id":"ev-1","source":"stats.example.gov","source_type":"government","authority":0.95,"reliability":0.95,"relevance":0.8,"recency":0.7104718111828882,"stance":"supports","status":"adopted"},{"evidence_id":"ev-2","source":"blog.example.org","source_type":"blog","authority":0.3,"reliability":0.3,"relevance":0.8,"recency":0.8923097063067758,"stance":"opposes","status":"overruled"}],"aggregates":[{"stance":"supports","items":1,"distinct_sources":1,"mean_relevance":0.8,"mean_recency":0.7104718111828882,"mean_reliability":0.95,"max_authority":0.95},{"stance":"opposes","items":0,"distinct_sources":0,"mean_relevance":0.0,"mean_recency":0.0,"mean_reliability":0.0,"max_authority":0.0},{"stance":"neutral","items":0,"distinct_sources":0,"mean_relevance":0.0,"mean_recency":0.0,"mean_reliability":0.0,"max_authority":0.0}]}"#]]
    .assert_eq(&json_lines(&matrix));

    commands.push(Command::BuildDecisionMatrix);
    let conclusion = given(history(commands.clone()))
        .when(Command::GenerateConclusion)
        .then_new_events();
    let Event::ConclusionIssued(issued) = &conclusion[0].event else {
        panic!("{conclusion:?}");
    };
    // 0.4·0.8 + 0.3·1 + 0.2·recency + 0.1·(1/3)
    assert_eq!(issued.stance, research::rules::Verdict::Supportive);
    assert_eq!(issued.evidence.len(), 1);
    assert_eq!(issued.adjudications.len(), 1);
    assert_eq!(issued.client_share, 1.0);
    // Caused by the matrix, the screening of the item used, and the adjudication in force.
    assert_eq!(
        conclusion[0].causation,
        vec![
            Cause::Event(meta(6).hash),
            Cause::Event(meta(3).hash),
            Cause::Event(meta(5).hash),
        ]
    );

    commands.push(Command::GenerateConclusion);
    let explanation = given(history(commands))
        .when(Command::ExplainReasoning)
        .then_events();
    let Event::ExplanationRecorded(recorded) = &explanation[0] else {
        panic!("{explanation:?}");
    };
    expect![[r#"
        # Conclusion cl-1: supportive (confidence 0.7954276955699111) (#107 070000000000)

        - Question: Does lithium demand grow faster than supply? (#100 000000000000)
          - Constraint: public industry data only (#100 000000000000)
          - Research date 2025-06-30; mode tool_constrained (#100 000000000000)
        - Rule set v1: weights relevance 0.4, consistency 0.3, recency 0.2, diversity 0.1; half-life 365 days; authority gap 0.15, recency gap 30 days, consistency 0.6666666666666666, confidence floor 0.5, full diversity at 3 sources (#100 000000000000; #107 070000000000)
        - Confidence 0.7954276955699111 = 0.4·relevance + 0.3·consistency + 0.2·recency + 0.1·diversity (#107 070000000000)
          - Relevance 0.8: mean relevance over 1 item used (#107 070000000000)
          - Consistency 1: 1 of 1 item taking a side on the larger side (1 support, 0 oppose, 0 neutral) (#107 070000000000)
          - Recency 0.7104718111828882: mean of 0.5^(age_days / 365) over 1 item used (#107 070000000000)
          - Diversity 0.3333333333333333: 1 distinct source, full at 3 (#107 070000000000)
        - Verdict supportive: more items support (1 to 0) and consistency 1 reaches 0.6666666666666666 (#107 070000000000)
        - Evidence used (1) (#107 070000000000)
          - ev-1 supports: stats.example.gov (government, published 2025-01-01), relevance 0.8, recency 0.7104718111828882, authority 0.95; from client (#101 010000000000; #103 030000000000)
        - Adjudications in force (1) (#107 070000000000)
          - cf-1 in the main question: authority tier, supports wins (#105 050000000000)
            - Compared authority 0.95 (supports) against 0.3 (opposes), gap 0.6499999999999999; latest dates 2025-01-01 against 2025-05-01, gap 120 days (#105 050000000000)
        - Evidence left out (1) (#107 070000000000)
          - ev-2 overruled by cf-1 (supports wins by authority tier) (#104 040000000000; #105 050000000000)
    "#]]
    .assert_eq(&recorded.markdown());
    assert!(
        recorded.nodes.iter().all(|n| !n.cites.is_empty()),
        "every line cites an event"
    );
}

#[test]
fn synthesis_groups_adopted_evidence_by_scope_and_stance() {
    let events = given(history(vec![
        open(),
        sub_questions(&["Demand growth?"]),
        add(vec![
            item("a.org", "blog", "2025-01-01", Some(Stance::Supports)),
            in_scope(
                item(
                    "b.org",
                    "academic_paper",
                    "2025-01-01",
                    Some(Stance::Supports),
                ),
                "sq-1",
            ),
            in_scope(
                with_relevance(
                    item("c.org", "blog", "2025-01-01", Some(Stance::Supports)),
                    0.95,
                ),
                "sq-1",
            ),
            item("d.org", "blog", "2025-01-01", Some(Stance::Neutral)),
        ]),
        screen(vec![
            adopt("ev-1"),
            adopt("ev-2"),
            adopt("ev-3"),
            reject("ev-4", "no data"),
        ]),
    ]))
    .when(Command::RecordSynthesis)
    .then_events();
    expect![[r#"
        {"type":"synthesis_recorded","synthesis_id":"sy-1","viewpoints":[{"scope":null,"stance":"supports","evidence_ids":["ev-1"],"overruled_ids":[],"sources":["a.org"],"mean_relevance":0.8,"max_authority":0.3,"lead_evidence_id":"ev-1"},{"scope":"sq-1","stance":"supports","evidence_ids":["ev-2","ev-3"],"overruled_ids":[],"sources":["b.org","c.org"],"mean_relevance":0.875,"max_authority":0.9,"lead_evidence_id":"ev-3"}]}"#]]
    .assert_eq(&json_lines(&events));
}

#[test]
fn external_tool_calls_and_closing_are_recorded() {
    let call = RecordExternalToolCall {
        tool: "market_prices".into(),
        contract_version: "1.2".into(),
        arguments_hash: hash_of("args"),
        reply_hash: Some(hash_of("reply")),
        error: None,
    };
    given(history(vec![open()]))
        .when(Command::RecordExternalToolCall(call))
        .then_expect(vec![Event::ExternalToolCalled(ExternalToolCalled {
            tool: "market_prices".into(),
            contract_version: "1.2".into(),
            arguments_hash: hash_of("args"),
            reply_hash: Some(hash_of("reply")),
            error: None,
        })]);
    given(history(vec![open()]))
        .when(Command::CloseTask(CloseTask { reason: None }))
        .then_expect(vec![Event::TaskClosed(TaskClosed { reason: None })]);
    let closed = Task::from_commands(vec![open(), close()]);
    assert_eq!(closed.state.status(), Some(research::TaskStatus::Closed));
    assert!(research::next_actions(&closed.state).is_empty());
}
