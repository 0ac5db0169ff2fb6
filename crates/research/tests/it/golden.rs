//! Golden cases for rule set `v1` at every boundary the spec names: where the tolerance decides,
//! where a tier changes, and how human decisions, retractions and new evidence move a verdict.

use std::collections::BTreeMap;

use research::command::{ScopeChoice, ScreeningInput};
use research::event::{ConclusionIssued, EvidenceStatus, HumanOutcome, Side, Tier};
use research::ids::{ConclusionId, ConflictId, EvidenceId};
use research::rules::{
    Components, Mode, RulesOverride, Stance, ThresholdsOverride, Verdict, VerdictRule,
};
use research::state::HumanDecisionKind;
use research::{Cause, Command, Event, Refusal, TaskStatus};

use crate::support::*;

/// Runs the conflict rules, builds the matrix and concludes, as a tool-constrained client must.
fn conclude(task: &mut Task) -> ConclusionIssued {
    task.ok(Command::RunConflictResolution);
    task.ok(Command::BuildDecisionMatrix);
    match task.ok(Command::GenerateConclusion).as_slice() {
        [Event::ConclusionIssued(issued)] => issued.clone(),
        other => panic!("{other:?}"),
    }
}

fn adjudicated(commands: Vec<Command>) -> Task {
    let mut task = Task::from_commands(commands);
    task.ok(Command::RunConflictResolution);
    task
}

fn current(task: &Task) -> &research::state::ConflictRecord {
    let conflicts: Vec<_> = task.state.current_conflicts().collect();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    conflicts[0]
}

fn pair(
    rules: Option<RulesOverride>,
    supports: (&str, &str),
    opposes: (&str, &str),
) -> Vec<Command> {
    vec![
        open_with(Mode::ToolConstrained, rules),
        add(vec![
            item(
                "s.example.org",
                supports.0,
                supports.1,
                Some(Stance::Supports),
            ),
            item("o.example.org", opposes.0, opposes.1, Some(Stance::Opposes)),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
    ]
}

fn authority(source_type: &str, value: f64) -> Option<RulesOverride> {
    Some(RulesOverride {
        authority: BTreeMap::from([(source_type.to_string(), value)]),
        ..Default::default()
    })
}

#[test]
fn an_authority_gap_of_exactly_0_15_wins_although_0_95_minus_0_80_falls_short_in_f64() {
    let task = adjudicated(pair(
        authority("institutional_report", 0.80),
        ("government", "2025-01-01"),
        ("institutional_report", "2025-01-01"),
    ));
    let conflict = current(&task);
    assert_eq!(conflict.adjudication.compared.authority_gap, 0.95 - 0.80);
    assert!(conflict.adjudication.compared.authority_gap < 0.15);
    assert_eq!(conflict.tier(), Tier::Authority);
    assert_eq!(conflict.winner(), Some(Side::Supports));
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(2)),
        Some(EvidenceStatus::Overruled)
    );

    // With the default table: primary data 1.00 over an institutional report 0.85.
    let task = adjudicated(pair(
        None,
        ("institutional_report", "2025-01-01"),
        ("primary_data", "2025-01-01"),
    ));
    assert_eq!(current(&task).tier(), Tier::Authority);
    assert_eq!(current(&task).winner(), Some(Side::Opposes));
}

#[test]
fn an_authority_gap_below_0_15_by_more_than_the_tolerance_falls_to_recency() {
    let task = adjudicated(pair(
        authority("institutional_report", 0.800_000_01),
        ("government", "2025-01-01"),
        ("institutional_report", "2025-01-01"),
    ));
    assert_eq!(current(&task).tier(), Tier::Pending);
    // Government 0.95 against an institutional report 0.85: a gap of 0.1, then recency decides.
    let task = adjudicated(pair(
        None,
        ("government", "2025-01-01"),
        ("institutional_report", "2025-03-01"),
    ));
    assert_eq!(current(&task).tier(), Tier::Recency);
    assert_eq!(current(&task).winner(), Some(Side::Opposes));
}

#[test]
fn a_recency_gap_of_30_days_wins_and_29_days_stays_pending() {
    let task = adjudicated(pair(None, ("blog", "2025-03-31"), ("blog", "2025-03-01")));
    let conflict = current(&task);
    assert_eq!(conflict.adjudication.compared.recency_gap_days, 30);
    assert_eq!(conflict.tier(), Tier::Recency);
    assert_eq!(conflict.winner(), Some(Side::Supports));

    let task = adjudicated(pair(None, ("blog", "2025-03-30"), ("blog", "2025-03-01")));
    let conflict = current(&task);
    assert_eq!(conflict.adjudication.compared.recency_gap_days, 29);
    assert_eq!(conflict.tier(), Tier::Pending);
    assert_eq!(conflict.winner(), None);
    let divergence = task.state.divergence(conflict.id()).unwrap();
    assert_eq!(divergence.supports.len(), 1);
    assert_eq!(
        divergence.opposes[0].summary,
        "o.example.org on lithium, 2025-03-01"
    );
}

#[test]
fn items_in_different_scopes_are_never_adjudicated_against_each_other() {
    let mut task = Task::from_commands(vec![
        open(),
        sub_questions(&["Supply growth?"]),
        add(vec![
            item("a.org", "blog", "2025-06-01", Some(Stance::Supports)),
            in_scope(
                item("b.org", "blog", "2025-06-01", Some(Stance::Opposes)),
                "sq-1",
            ),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
    ]);
    let issued = conclude(&mut task);
    assert!(task.state.conflicts().is_empty());
    // Their disagreement shows in consistency instead.
    assert_eq!(issued.components.consistency, 0.5);
    assert_eq!(issued.rule, VerdictRule::Divided);
}

#[test]
fn screening_moves_an_item_to_the_scope_it_answers() {
    // Found by a search of the main question, the opposing item turns out, on reading, to
    // answer the sub-question: the screener moves it there, and it is adjudicated there.
    let mut task = Task::from_commands(vec![
        open(),
        sub_questions(&["Supply growth?"]),
        add(vec![
            in_scope(
                item("a.gov", "government", "2025-06-01", Some(Stance::Supports)),
                "sq-1",
            ),
            item("b.org", "blog", "2025-06-01", Some(Stance::Opposes)),
        ]),
    ]);
    let moved = ScreeningInput {
        sub_question: ScopeChoice::SubQuestion("sq-1".into()),
        ..adopt("ev-2")
    };
    task.ok(screen(vec![adopt("ev-1"), moved]));
    let scopes: Vec<_> = task
        .state
        .evidence_views()
        .into_iter()
        .map(|v| v.item.sub_question.map(|s| s.to_string()))
        .collect();
    assert_eq!(
        scopes,
        vec![Some("sq-1".to_owned()), Some("sq-1".to_owned())]
    );
    task.ok(Command::RunConflictResolution);
    let conflicts = task.state.conflict_views();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(
        conflicts[0].scope.as_ref().map(|s| s.to_string()),
        Some("sq-1".to_owned())
    );
    assert_eq!(conflicts[0].tier, Tier::Authority);

    // And back to the main question, which dissolves the conflict at the next resolution.
    let back = ScreeningInput {
        sub_question: ScopeChoice::MainQuestion,
        ..adopt("ev-2")
    };
    task.ok(screen(vec![back]));
    task.ok(Command::RunConflictResolution);
    assert!(task.state.conflict_views().iter().all(|c| !c.current));

    // A sub-question that does not exist is refused.
    let nowhere = ScreeningInput {
        sub_question: ScopeChoice::SubQuestion("sq-9".into()),
        ..adopt("ev-2")
    };
    assert!(matches!(
        task.run(&screen(vec![nowhere])),
        Err(Refusal::NotFound {
            what: "sub_question",
            ..
        })
    ));
}

/// Two supporting items in the main scope and one opposing in a sub-question.
fn two_to_one(consistency_threshold: Option<f64>) -> Task {
    Task::from_commands(vec![
        open_with(
            Mode::ToolConstrained,
            Some(RulesOverride {
                thresholds: ThresholdsOverride {
                    consistency: consistency_threshold,
                    ..Default::default()
                },
                ..Default::default()
            }),
        ),
        sub_questions(&["Supply growth?"]),
        add(vec![
            item(
                "a.org",
                "academic_paper",
                "2025-06-01",
                Some(Stance::Supports),
            ),
            item(
                "b.org",
                "academic_paper",
                "2025-06-01",
                Some(Stance::Supports),
            ),
            in_scope(
                item(
                    "c.org",
                    "academic_paper",
                    "2025-06-01",
                    Some(Stance::Opposes),
                ),
                "sq-1",
            ),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2"), adopt("ev-3")]),
    ])
}

#[test]
fn consistency_of_exactly_two_thirds_reaches_its_threshold() {
    let mut task = two_to_one(None);
    let issued = conclude(&mut task);
    assert_eq!(issued.components.consistency, 2.0 / 3.0);
    assert_eq!(issued.stance, Verdict::Supportive);
    assert_eq!(issued.rule, VerdictRule::SupportsPrevail);

    // A threshold a hair above 2/3, within the tolerance, is still reached…
    let mut task = two_to_one(Some(2.0 / 3.0 + 5e-10));
    assert_eq!(conclude(&mut task).stance, Verdict::Supportive);
    // …and one beyond it is not.
    let mut task = two_to_one(Some(2.0 / 3.0 + 2e-9));
    let issued = conclude(&mut task);
    assert_eq!(issued.stance, Verdict::Uncertain);
    assert_eq!(issued.rule, VerdictRule::Divided);
}

/// Every component 0.5: a supporting and an opposing item in different scopes, both 365 days
/// old, with relevance `relevance`, from two sources where four give full diversity.
fn halves(relevance: f64) -> ConclusionIssued {
    let mut task = Task::from_commands(vec![
        open_with(
            Mode::ToolConstrained,
            Some(RulesOverride {
                thresholds: ThresholdsOverride {
                    diversity_sources: Some(4.0),
                    ..Default::default()
                },
                ..Default::default()
            }),
        ),
        sub_questions(&["Supply growth?"]),
        add(vec![
            with_relevance(
                item("a.org", "blog", "2024-06-30", Some(Stance::Supports)),
                relevance,
            ),
            in_scope(
                with_relevance(
                    item("b.org", "blog", "2024-06-30", Some(Stance::Opposes)),
                    relevance,
                ),
                "sq-1",
            ),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
    ]);
    conclude(&mut task)
}

#[test]
fn confidence_of_exactly_one_half_reaches_the_floor_and_just_under_does_not() {
    let issued = halves(0.5);
    assert_eq!(
        issued.components,
        Components {
            relevance: 0.5,
            consistency: 0.5,
            recency: 0.5,
            diversity: 0.5,
        }
    );
    assert_eq!(issued.confidence, 0.49999999999999994);
    // It reaches 0.5, so the verdict is decided by the sides (tied), not by the floor.
    assert_eq!(issued.rule, VerdictRule::Divided);
    assert_eq!(issued.stance, Verdict::Uncertain);

    let issued = halves(0.499_999_9);
    assert!(issued.confidence < 0.5 - 1e-9);
    assert_eq!(issued.rule, VerdictRule::BelowConfidenceFloor);
    assert_eq!(issued.stance, Verdict::EvidenceInsufficient);
}

#[test]
fn an_item_one_half_life_old_has_recency_one_half() {
    let task = Task::from_commands(vec![
        open_with(
            Mode::ToolConstrained,
            Some(RulesOverride {
                half_life_days: Some(180.0),
                ..Default::default()
            }),
        ),
        add(vec![
            item("a.org", "blog", "2025-01-01", None),
            item("b.org", "blog", "2024-01-02", None),
            item("c.org", "blog", "2025-07-01", None),
        ]),
    ]);
    let recency: Vec<(i64, f64)> = task
        .state
        .evidence()
        .iter()
        .map(|e| (e.added.age_days, e.added.recency))
        .collect();
    assert_eq!(
        recency,
        vec![(180, 0.5), (545, libm::pow(0.5, 545.0 / 180.0)), (0, 1.0)]
    );
}

fn pending_task() -> Task {
    adjudicated(pair(None, ("blog", "2025-06-01"), ("blog", "2025-06-10")))
}

#[test]
fn a_pending_conflict_makes_the_verdict_uncertain() {
    let mut task = pending_task();
    let issued = conclude(&mut task);
    assert!(issued.confidence >= 0.5);
    assert_eq!(issued.rule, VerdictRule::PendingConflict);
    assert_eq!(issued.stance, Verdict::Uncertain);
    assert_eq!(issued.adjudications[0].tier, Tier::Pending);
    assert_eq!(issued.adjudications[0].winner, None);
    let next: Vec<_> = research::next_actions(&task.state)
        .into_iter()
        .map(|a| a.tool)
        .collect();
    assert_eq!(
        next,
        vec![
            research::Tool::EvaluationResolveConflict,
            research::Tool::EvaluationExplainReasoning
        ]
    );
}

#[test]
fn each_human_outcome_of_a_pending_conflict() {
    for (outcome, verdict, overruled) in [
        (HumanOutcome::Supports, Verdict::Supportive, Some(2)),
        (HumanOutcome::Opposes, Verdict::Opposing, Some(1)),
        (HumanOutcome::BothStand, Verdict::Uncertain, None),
    ] {
        let mut task = pending_task();
        let first = conclude(&mut task);
        task.ok(resolve("cf-1", outcome, "read both reports in full"));
        assert_eq!(
            task.state.status(),
            Some(TaskStatus::Stale),
            "a human decision makes the verdict stale"
        );
        let conflict = current(&task);
        assert_eq!(conflict.tier(), Tier::Human);
        assert_eq!(conflict.resolution(), Some(outcome));
        assert_eq!(conflict.human[0].kind, HumanDecisionKind::Resolution);
        assert_eq!(conflict.human[0].provenance.actor, "alice");
        let view = task.state.conflict_views().remove(0);
        assert_eq!(view.winner, outcome.winner());
        assert_eq!(view.resolution, Some(outcome));

        task.ok(Command::BuildDecisionMatrix);
        let issued = match task.ok(Command::GenerateConclusion).as_slice() {
            [Event::ConclusionIssued(issued)] => issued.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(issued.stance, verdict, "{outcome:?}");
        assert_eq!(issued.supersedes, Some(first.conclusion_id.clone()));
        assert_eq!(issued.adjudications[0].tier, Tier::Human);
        assert_eq!(issued.adjudications[0].resolution, Some(outcome));
        for n in [1, 2] {
            let expected = if overruled == Some(n) {
                EvidenceStatus::Overruled
            } else {
                EvidenceStatus::Adopted
            };
            assert_eq!(
                task.state.evidence_status(&EvidenceId::nth(n)),
                Some(expected)
            );
        }
    }
}

#[test]
fn an_appeal_overturns_an_automatic_adjudication_and_restores_the_overruled_side() {
    let mut task = adjudicated(pair(
        None,
        ("government", "2025-01-01"),
        ("blog", "2025-06-01"),
    ));
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(2)),
        Some(EvidenceStatus::Overruled)
    );
    let events = task.ok(resolve(
        "cf-1",
        HumanOutcome::Opposes,
        "the agency revised its figures since",
    ));
    assert!(
        matches!(&events[..], [Event::AdjudicationAppealed(a)] if a.overturned_tier == Tier::Authority)
    );
    assert_eq!(current(&task).human[0].kind, HumanDecisionKind::Appeal);
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(1)),
        Some(EvidenceStatus::Overruled)
    );
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(2)),
        Some(EvidenceStatus::Adopted)
    );
    task.ok(Command::BuildDecisionMatrix);
    let issued = match task.ok(Command::GenerateConclusion).as_slice() {
        [Event::ConclusionIssued(issued)] => issued.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(issued.stance, Verdict::Opposing);
    assert_eq!(issued.evidence[0].evidence_id, EvidenceId::nth(2));
}

#[test]
fn neutral_evidence_alone_is_insufficient_however_relevant() {
    let mut task = Task::from_commands(vec![
        open(),
        add(vec![
            with_relevance(
                item("a.org", "primary_data", "2025-06-30", Some(Stance::Neutral)),
                1.0,
            ),
            with_relevance(
                item("b.org", "primary_data", "2025-06-30", Some(Stance::Neutral)),
                1.0,
            ),
            with_relevance(
                item("c.org", "primary_data", "2025-06-30", Some(Stance::Neutral)),
                1.0,
            ),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2"), adopt("ev-3")]),
    ]);
    let issued = conclude(&mut task);
    assert_eq!(issued.confidence, 0.4 + 0.2 + 0.1);
    assert_eq!(issued.components.consistency, 0.0);
    assert_eq!(issued.rule, VerdictRule::NoSideTaken);
    assert_eq!(issued.stance, Verdict::EvidenceInsufficient);
}

#[test]
fn no_evidence_gives_confidence_zero_and_insufficient_evidence() {
    let mut task = Task::from_commands(vec![open()]);
    task.ok(Command::BuildDecisionMatrix);
    let issued = match task.ok(Command::GenerateConclusion).as_slice() {
        [Event::ConclusionIssued(issued)] => issued.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(issued.confidence, 0.0);
    assert_eq!(issued.components, Components::default());
    assert_eq!(issued.client_share, 0.0);
    assert_eq!(issued.stance, Verdict::EvidenceInsufficient);
    assert!(issued.evidence.is_empty());
}

#[test]
fn retraction_removes_an_item_dissolves_its_conflict_and_stales_the_verdict() {
    let mut task = adjudicated(pair(
        None,
        ("government", "2025-01-01"),
        ("blog", "2025-06-01"),
    ));
    task.ok(Command::BuildDecisionMatrix);
    task.ok(Command::GenerateConclusion);
    assert_eq!(task.state.status(), Some(TaskStatus::Concluded));
    task.ok(retract("ev-1", "the agency withdrew the release"));
    assert_eq!(task.state.status(), Some(TaskStatus::Stale));
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(1)),
        Some(EvidenceStatus::Retracted)
    );
    let run = task.ok(Command::RunConflictResolution);
    assert!(
        matches!(&run[..], [Event::ConflictsAdjudicated(r)] if r.dissolved == vec![ConflictId::nth(1)])
    );
    // With the winner gone the blog post is no longer overruled.
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(2)),
        Some(EvidenceStatus::Adopted)
    );
    task.ok(Command::BuildDecisionMatrix);
    let issued = match task.ok(Command::GenerateConclusion).as_slice() {
        [Event::ConclusionIssued(issued)] => issued.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(issued.counts.opposes, 1);
    assert_eq!(issued.counts.supports, 0);
    assert!(issued.adjudications.is_empty());
}

#[test]
fn new_evidence_in_a_decided_scope_is_adjudicated_afresh_and_the_old_human_decision_superseded() {
    let mut task = pending_task();
    task.ok(resolve(
        "cf-1",
        HumanOutcome::Supports,
        "the opposing post misreads the table",
    ));
    task.ok(add(vec![item(
        "agency.example.gov",
        "government",
        "2025-06-20",
        Some(Stance::Opposes),
    )]));
    task.ok(screen(vec![adopt("ev-3")]));
    let run = task.ok(Command::RunConflictResolution);
    assert!(matches!(
        &run[..],
        [Event::ConflictsAdjudicated(r)]
            if r.adjudications.len() == 1 && r.adjudications[0].supersedes == Some(ConflictId::nth(1))
    ));
    let views = task.state.conflict_views();
    assert_eq!(views.len(), 2);
    assert!(!views[0].current);
    assert_eq!(views[0].superseded_by, Some(ConflictId::nth(2)));
    assert!(views[0].human_decisions[0].superseded);
    assert_eq!(views[1].tier, Tier::Authority);
    assert_eq!(views[1].winner, Some(Side::Opposes));
    assert_eq!(views[1].participants.len(), 3);
    assert_eq!(
        task.state.evidence_status(&EvidenceId::nth(1)),
        Some(EvidenceStatus::Overruled)
    );
}

#[test]
fn a_later_conclusion_supersedes_and_a_change_makes_the_current_one_stale() {
    let mut task = Task::from_commands(vec![
        open(),
        add(vec![item(
            "a.org",
            "academic_paper",
            "2025-06-01",
            Some(Stance::Supports),
        )]),
        screen(vec![adopt("ev-1")]),
    ]);
    conclude(&mut task);
    assert_eq!(task.state.status(), Some(TaskStatus::Concluded));
    task.ok(add(vec![item(
        "b.org",
        "academic_paper",
        "2025-06-01",
        Some(Stance::Supports),
    )]));
    assert_eq!(task.state.status(), Some(TaskStatus::Stale));
    let stale = task.state.conclusion_card(None).unwrap();
    assert!(stale.stale);
    assert!(stale.markdown.contains("Stale: evidence_added (ev-2)"));
    task.ok(screen(vec![adopt("ev-2")]));
    let second = conclude(&mut task);
    assert_eq!(second.conclusion_id, ConclusionId::nth(2));
    assert_eq!(second.supersedes, Some(ConclusionId::nth(1)));
    assert_eq!(task.state.status(), Some(TaskStatus::Concluded));
    let history = task.state.conclusion_history();
    assert_eq!(history[0].superseded_by, Some(ConclusionId::nth(2)));
    assert!(!history[1].stale);
    assert_eq!(history[1].superseded_by, None);
}

#[test]
fn agent_led_conclusions_run_the_rules_and_build_the_matrix_themselves() {
    let mut task = Task::from_commands(vec![
        open_with(Mode::AgentLed, None),
        add(vec![
            item(
                "agency.example.gov",
                "government",
                "2025-01-01",
                Some(Stance::Supports),
            ),
            item(
                "blog.example.org",
                "blog",
                "2025-06-01",
                Some(Stance::Opposes),
            ),
            item(
                "unscreened.example.org",
                "blog",
                "2025-06-01",
                Some(Stance::Opposes),
            ),
        ]),
        screen(vec![adopt("ev-1"), adopt("ev-2")]),
    ]);
    let before = task.state.version();
    let decided = task.run(&Command::GenerateConclusion).unwrap();
    let kinds: Vec<&str> = decided.iter().map(|n| n.event.kind()).collect();
    assert_eq!(
        kinds,
        vec![
            "conflicts_adjudicated",
            "decision_matrix_built",
            "conclusion_issued"
        ]
    );
    assert!(decided[1].causation.contains(&Cause::InBatch(0)));
    assert!(decided[2].causation.contains(&Cause::InBatch(1)));
    assert!(!decided[2].causation.contains(&Cause::InBatch(2)));
    assert!(
        decided[0]
            .causation
            .iter()
            .all(|c| matches!(c, Cause::Event(_)))
    );
    let Event::ConclusionIssued(issued) = &decided[2].event else {
        panic!("{decided:?}");
    };
    assert_eq!(issued.stance, Verdict::Supportive);
    assert_eq!(
        issued.evidence.len(),
        1,
        "the overruled and the unscreened items stay out"
    );
    assert_eq!(task.state.version(), before + 3);

    // Nothing changed: only a new conclusion, which supersedes the first.
    let again = task.run(&Command::GenerateConclusion).unwrap();
    assert_eq!(again.len(), 1);
    assert!(
        matches!(&again[0].event, Event::ConclusionIssued(c) if c.supersedes == Some(ConclusionId::nth(1)))
    );

    // Explaining needs no ceremony either.
    assert_eq!(task.ok(Command::ExplainReasoning).len(), 1);
}
