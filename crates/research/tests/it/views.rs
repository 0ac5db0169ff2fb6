//! Read models: the conclusion card, the compact summary, next actions and the state hash.

use expect_test::expect;
use research::event::HumanOutcome;
use research::ids::ConclusionId;
use research::rules::{Mode, Stance};
use research::{Command, TaskState, Tool, next_actions};

use crate::support::*;

fn concluded() -> Task {
    let mut task = Task::from_commands(vec![
        open(),
        sub_questions(&["需求增速?"]),
        add(vec![
            item(
                "stats.example.gov",
                "government",
                "2025-01-01",
                Some(Stance::Supports),
            ),
            item(
                "blog.example.org",
                "blog",
                "2025-05-01",
                Some(Stance::Opposes),
            ),
            in_scope(
                item(
                    "paper.example.edu",
                    "academic_paper",
                    "2024-06-30",
                    Some(Stance::Supports),
                ),
                "sq-1",
            ),
            item("wire.example.com", "news_reprint", "2025-06-01", None),
        ]),
        screen(vec![
            adopt("ev-1"),
            adopt("ev-2"),
            adopt("ev-3"),
            reject("ev-4", "reprint of ev-1"),
        ]),
        Command::RunConflictResolution,
        resolve(
            "cf-1",
            HumanOutcome::Supports,
            "confirmed against the agency's tables",
        ),
        Command::BuildDecisionMatrix,
        Command::GenerateConclusion,
    ]);
    task.ok(Command::ExplainReasoning);
    task
}

#[test]
fn the_conclusion_card_is_pure_data_with_a_deterministic_markdown() {
    let task = concluded();
    let card = task.state.conclusion_card(None).unwrap();
    assert_eq!(card.conclusion_id, ConclusionId::nth(1));
    assert_eq!(card.evidence.len(), 2);
    assert_eq!(card.client_share, 1.0);
    assert!(!card.stale);
    expect![[r#"
        ## Conclusion cl-1: supportive

        Confidence **0.8077** = 0.4·relevance 0.8000 + 0.3·consistency 1.0000 + 0.2·recency 0.6052 + 0.1·diversity 0.6667

        Evidence (2):
        - ev-1 supports (stats.example.gov) `a9df69f0013f3c43`
        - ev-3 supports (paper.example.edu) `c5142f384806df80`

        Adjudications:
        - cf-1 human: supports wins

        Rules v1 · client share 1.0000
    "#]]
    .assert_eq(&card.markdown);
    assert_eq!(
        task.state.conclusion_card(Some(&ConclusionId::nth(1))),
        Some(card)
    );
    assert_eq!(
        task.state.conclusion_card(Some(&ConclusionId::nth(2))),
        None
    );
}

#[test]
fn the_summary_fits_a_context_window() {
    let task = concluded();
    let summary = task.state.summary().unwrap();
    expect![[r#"
        Task lithium-2025 (concluded, tool_constrained, v15): Does lithium demand grow faster than supply?
        Evidence: 0 candidate, 2 adopted, 1 overruled, 1 rejected, 0 retracted; sub-questions: 1
        Conclusion cl-1: supportive (confidence 0.8077)
    "#]]
    .assert_eq(&summary.text());
    assert!(summary.next_actions.is_empty());
    assert_eq!(TaskState::new().summary(), None);
}

#[test]
fn next_actions_walk_the_workflow() {
    let tools = |task: &Task| {
        next_actions(&task.state)
            .into_iter()
            .map(|a| a.tool)
            .collect::<Vec<_>>()
    };
    let mut task = Task::new();
    assert_eq!(tools(&task), vec![Tool::ResearchOpenTask]);
    task.ok(open());
    assert_eq!(
        tools(&task),
        vec![
            Tool::RetrievalSearchEvidence,
            Tool::EvaluationBuildDecisionMatrix,
            Tool::EvaluationGenerateConclusion
        ]
    );
    task.ok(add(vec![item(
        "a.org",
        "blog",
        "2025-06-01",
        Some(Stance::Supports),
    )]));
    assert_eq!(
        tools(&task),
        vec![
            Tool::SynthesisScreenEvidence,
            Tool::EvaluationConflictResolution,
            Tool::EvaluationBuildDecisionMatrix,
            Tool::EvaluationGenerateConclusion
        ]
    );
    task.ok(screen(vec![adopt("ev-1")]));
    task.ok(Command::RunConflictResolution);
    task.ok(Command::BuildDecisionMatrix);
    assert_eq!(tools(&task), vec![Tool::EvaluationGenerateConclusion]);
    task.ok(Command::GenerateConclusion);
    assert_eq!(tools(&task), vec![Tool::EvaluationExplainReasoning]);
    task.ok(Command::ExplainReasoning);
    assert!(tools(&task).is_empty());

    let mut led = Task::from_commands(vec![
        open_with(Mode::AgentLed, None),
        add(vec![item(
            "a.org",
            "blog",
            "2025-06-01",
            Some(Stance::Supports),
        )]),
    ]);
    assert_eq!(
        tools(&led),
        vec![
            Tool::SynthesisScreenEvidence,
            Tool::EvaluationGenerateConclusion
        ]
    );
    led.ok(Command::GenerateConclusion);
    assert_eq!(
        tools(&led),
        vec![
            Tool::SynthesisScreenEvidence,
            Tool::EvaluationExplainReasoning
        ]
    );
}

#[test]
fn the_state_hash_input_is_the_same_for_the_same_events() {
    let task = concluded();
    let replayed = TaskState::from_events(
        task.events
            .iter()
            .enumerate()
            .map(|(i, e)| (e, Box::leak(Box::new(meta(i))) as &_)),
    );
    assert_eq!(replayed, task.state);
    assert_eq!(replayed.canonical_bytes(), task.state.canonical_bytes());
    let mut shorter = TaskState::new();
    for (i, event) in task.events.iter().take(task.events.len() - 1).enumerate() {
        research::evolve(&mut shorter, event, &meta(i));
    }
    assert_ne!(shorter.canonical_bytes(), task.state.canonical_bytes());
}

#[test]
fn evidence_and_conflict_views_show_derived_status() {
    let task = concluded();
    let statuses: Vec<&str> = task
        .state
        .evidence_views()
        .iter()
        .map(|e| e.status.name())
        .collect();
    assert_eq!(
        statuses,
        vec!["adopted", "overruled", "adopted", "rejected"]
    );
    let view = &task.state.evidence_views()[3];
    assert_eq!(view.screening_reason.as_deref(), Some("reprint of ev-1"));
    assert_eq!(view.item.stance, None);
    let conflicts = task.state.conflict_views();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].human_decisions[0].actor, "alice");
    assert!(!conflicts[0].human_decisions[0].superseded);
}

#[test]
fn the_explanation_cites_the_human_decision_and_what_was_left_out() {
    let task = concluded();
    let explanation = &task.state.explanations()[0].event;
    let markdown = explanation.markdown();
    assert!(
        markdown
            .contains("Appealed by alice: supports; reason: confirmed against the agency's tables")
    );
    assert!(markdown.contains("ev-4 rejected: reprint of ev-1"));
    assert!(markdown.contains("ev-2 overruled by cf-1 (supports wins by human tier)"));
    for line in markdown.lines().filter(|l| !l.is_empty()) {
        assert!(
            line.ends_with(')') && line.contains(" (#"),
            "line without citation: {line}"
        );
    }
}
