//! Properties over realistic ledgers: random valid commands on a few tasks, decided by
//! `research::decide` and appended to a real ledger, interleaved with events of a stream that is
//! no task. Whatever the history, the live projection equals a fold from scratch, time travel
//! equals folding a prefix, and snapshots plus catch-up equal a full rebuild.

use proptest::prelude::*;
use research::command::SearchCandidate;
use research::event::{EvidenceStatus, HumanOutcome};
use research::rules::{Mode, Stance};
use research::{Command, TaskState, Tool};

use projections::{OpenStart, QueryError, TravelStart, state_hash};

use crate::support::*;

/// One step: which task, which kind of command, and raw material for it.
type Step = (u8, u8, u8, u8, u16, f64);

const TASKS: [&str; 3] = ["t-0", "t-1", "t-2"];

const QUESTIONS: [&str; 3] = [
    "Does lithium demand grow faster than supply?",
    "锂需求的增长是否快于供应？",
    "Is copper recycling economic at current prices?",
];

const SOURCES: [&str; 5] = [
    "a.example.org",
    "b.example.org",
    "c.example.gov",
    "https://www.d.example.com/x",
    "e.example.edu",
];

/// Source types weighted toward ties of authority, so conflicts go to every tier.
const TYPES: [&str; 7] = [
    "blog",
    "blog",
    "government",
    "institutional_report",
    "primary_data",
    "academic_paper",
    "news_original",
];

/// Publish dates on the boundaries of the recency tier.
const AGES_DAYS: [u64; 6] = [0, 1, 29, 30, 31, 400];

fn stance_of(n: u8) -> Option<Stance> {
    match n % 4 {
        0 => None,
        1 => Some(Stance::Supports),
        2 => Some(Stance::Opposes),
        _ => Some(Stance::Neutral),
    }
}

fn evidence(
    a: u8,
    b: u8,
    days: u16,
    relevance: f64,
    state: &TaskState,
) -> research::command::EvidenceInput {
    let source_type = TYPES[usize::from(b) % TYPES.len()];
    let published = chrono::NaiveDate::parse_from_str(RESEARCH_DATE, "%Y-%m-%d").unwrap()
        - chrono::Days::new(AGES_DAYS[usize::from(days) % AGES_DAYS.len()]);
    let stance = stance_of(b / 7);
    let mut input = item(
        SOURCES[usize::from(a) % SOURCES.len()],
        source_type,
        &published.to_string(),
        stance,
    );
    input.relevance = relevance;
    input.content_hash = hash_of(&format!("{a} {b} {days} {relevance}"));
    let sub_questions = state.sub_questions().len();
    if a.is_multiple_of(3) && sub_questions > 0 {
        input = in_scope(input, &format!("sq-{}", usize::from(a) % sub_questions + 1));
    }
    input
}

fn pick_evidence(state: &TaskState, n: u8) -> String {
    let count = state.evidence().len().max(1);
    format!("ev-{}", usize::from(n) % count + 1)
}

/// Screens every candidate at once, as a reviewer working through a batch would.
fn screen_batch(state: &TaskState, b: u8) -> Command {
    let decisions: Vec<_> = state
        .evidence_views()
        .iter()
        .filter(|v| v.status == EvidenceStatus::Candidate)
        .map(|v| match v.item.stance {
            Some(_) => adopt(v.item.evidence_id.as_str()),
            None if b.is_multiple_of(2) => adopt_as(
                v.item.evidence_id.as_str(),
                if b.is_multiple_of(4) {
                    Stance::Supports
                } else {
                    Stance::Opposes
                },
            ),
            None => reject(v.item.evidence_id.as_str(), "no stance"),
        })
        .collect();
    if decisions.is_empty() {
        Command::RunConflictResolution
    } else {
        screen(decisions)
    }
}

/// A person decides one of the adjudications in force (a resolution or an appeal).
fn resolve_one(state: &TaskState, a: u8, b: u8) -> Command {
    let current: Vec<String> = state
        .current_conflicts()
        .map(|c| c.id().to_string())
        .collect();
    let target = current
        .get(usize::from(a) % current.len().max(1))
        .cloned()
        .unwrap_or_else(|| "cf-1".into());
    let outcome = [
        HumanOutcome::Supports,
        HumanOutcome::Opposes,
        HumanOutcome::BothStand,
    ][usize::from(b) % 3];
    resolve(&target, outcome, "reviewed")
}

fn command_for(step: &Step, task: usize, state: &TaskState) -> Command {
    let (_, selector, a, b, days, relevance) = *step;
    if state.task().is_none() {
        let mode = if task == 2 {
            Mode::AgentLed
        } else {
            Mode::ToolConstrained
        };
        return open_task(TASKS[task], QUESTIONS[task], &["public data only"], mode);
    }
    match selector % 28 {
        // A client following the workflow: the step the task says is due next. Without it,
        // tool-constrained tasks seldom get as far as human decisions and conclusions.
        // People review adjudications in force now and then, appeals included.
        20..=27 if b % 3 == 0 && state.current_conflicts().next().is_some() => {
            resolve_one(state, a, b)
        }
        20..=27 => match research::next_actions(state).first().map(|a| a.tool) {
            Some(Tool::SynthesisScreenEvidence) => screen_batch(state, b),
            Some(Tool::EvaluationConflictResolution) => Command::RunConflictResolution,
            Some(Tool::EvaluationResolveConflict) => resolve_one(state, a, b),
            Some(Tool::EvaluationBuildDecisionMatrix) => Command::BuildDecisionMatrix,
            Some(Tool::EvaluationGenerateConclusion) => Command::GenerateConclusion,
            Some(Tool::EvaluationExplainReasoning) => Command::ExplainReasoning,
            _ => add(vec![evidence(a, b, days, relevance, state)]),
        },
        0 => sub_questions(&[["Demand?", "Supply?", "价格？"][usize::from(a) % 3]]),
        1..=3 => add(vec![evidence(a, b, days, relevance, state)]),
        4 => Command::RecordSearch(research::command::RecordSearch {
            query: "demand supply growth".into(),
            sources: vec!["corpus".into()],
            index_state: "corpus@1".into(),
            results: (0..(a % 3))
                .map(|i| SearchCandidate {
                    result_id: format!("r{i}-{days}"),
                    origin: "corpus".into(),
                    raw_score: f64::from(days) / 7.0,
                    normalised_score: relevance,
                    evidence: evidence(
                        a.wrapping_add(i),
                        b.wrapping_add(i * 3),
                        days.wrapping_add(u16::from(i)),
                        relevance,
                        state,
                    ),
                })
                .collect(),
        }),
        5..=9 if a % 2 == 0 => screen_batch(state, b),
        5..=9 => {
            let target = pick_evidence(state, a);
            let mut decision = if b % 5 == 0 {
                reject(&target, "off topic")
            } else {
                adopt(&target)
            };
            decision.stance = stance_of(b / 2);
            screen(vec![decision])
        }
        10 => retract(&pick_evidence(state, a), "withdrawn"),
        11 | 12 => Command::RunConflictResolution,
        13 => resolve_one(state, a, b),
        14 => Command::BuildDecisionMatrix,
        15 | 16 => Command::GenerateConclusion,
        17 => Command::ExplainReasoning,
        18 => {
            if a % 24 == 0 {
                close()
            } else {
                Command::RecordSynthesis
            }
        }
        _ => tool_call_command(a),
    }
}

/// Runs one step; the events it recorded (none when the command was refused).
fn step(world: &mut World, step: &Step) -> Vec<ledger::RecordedEvent> {
    let (task, selector, a, ..) = *step;
    if selector == 255 {
        return vec![world.tool_call(a)];
    }
    let task = usize::from(task) % TASKS.len();
    let state = world.states.get(TASKS[task]).cloned().unwrap_or_default();
    let command = command_for(step, task, &state);
    world.run(TASKS[task], &command).unwrap_or_default()
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            any::<u8>(),
            prop_oneof![19 => any::<u8>(), 1 => Just(255u8)],
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            0.0f64..=1.0,
        ),
        1..72,
    )
}

fn cases() -> u32 {
    // A small machine runs the suite; PROPTEST_CASES raises the budget.
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// The live projection and a reference fold agree task by task.
fn same_as_reference(
    projector: &projections::Projector,
    ledger: &ledger::Ledger,
) -> Result<(), TestCaseError> {
    let reference = fold_all(ledger);
    let tasks = projector
        .tasks(&projections::TaskQuery {
            limit: Some(100),
            ..Default::default()
        })
        .unwrap();
    let listed: Vec<&str> = tasks.tasks.iter().map(|t| t.task_id.as_str()).collect();
    let expected: Vec<&str> = reference.keys().map(String::as_str).collect();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    prop_assert_eq!(sorted, expected);
    for (task, state) in &reference {
        prop_assert_eq!(
            projector.task_hash(task).unwrap(),
            state_hash(state),
            "{}",
            task
        );
        prop_assert_eq!(
            projector.state(task).unwrap().canonical_bytes(),
            state.canonical_bytes()
        );
        prop_assert_eq!(projector.session_version(task).unwrap(), state.version());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_live_projection_equals_a_fold_from_scratch(steps in steps(), reorder in any::<bool>()) {
        let ledger = memory_ledger(1);
        let mut world = World::new(&ledger);
        let live = projector(&ledger);
        for s in &steps {
            let recorded = step(&mut world, s);
            // The write path hands the projector each event; concurrent appends can hand them
            // over out of order, and a late one must be skipped, an early one fill the gap.
            if reorder && recorded.len() > 1 {
                for event in recorded.iter().rev() {
                    live.apply(event).unwrap();
                }
            } else {
                for event in &recorded {
                    live.apply(event).unwrap();
                }
            }
        }
        let head = ledger.head().size;
        prop_assert_eq!(live.caught_up_to(), head.checked_sub(1));
        prop_assert_eq!(live.lag(), 0);
        same_as_reference(&live, &ledger)?;

        // A projector opened afterwards folds the same ledger from seq 0 to the same hash, and
        // a rebuild of the live one finds nothing different.
        let fresh = projector(&ledger);
        prop_assert_eq!(fresh.projection_hash(), live.projection_hash());
        let rebuilt = live.rebuild().unwrap();
        prop_assert!(rebuilt.matched);
        prop_assert_eq!(rebuilt.rebuilt, fresh.projection_hash());
    }

    #[test]
    fn time_travel_equals_folding_the_first_v_events(steps in steps(), snap_at in prop::collection::vec(any::<u8>(), 0..4)) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = memory_ledger(2);
        let mut world = World::new(&ledger);
        let live = projector_in(&ledger, dir.path());
        for (i, s) in steps.iter().enumerate() {
            step(&mut world, s);
            if snap_at.iter().any(|n| usize::from(*n) % steps.len() == i) {
                live.catch_up().unwrap();
                live.snapshot().unwrap();
            }
        }
        live.catch_up().unwrap();
        for task in TASKS {
            let events = events_of(&ledger, task);
            if events.is_empty() {
                let unknown = live.state_at(task, 0);
                let not_found = matches!(unknown, Err(QueryError::TaskNotFound { .. }));
                prop_assert!(not_found, "{:?}", unknown);
                continue;
            }
            let head = events.len() as u64;
            for version in 0..=events.len() {
                let travel = live.time_travel(task, version as u64).unwrap();
                let expected = fold_prefix(&events, version);
                prop_assert_eq!(state_hash(&travel.state), state_hash(&expected), "{} at {}", task, version);
                prop_assert_eq!(travel.state.version(), version as u64);
                match travel.start {
                    TravelStart::Live => prop_assert_eq!(version as u64, head),
                    TravelStart::Snapshot { version: from, .. } => {
                        prop_assert!(from <= version as u64);
                        prop_assert_eq!(travel.events_folded, version as u64 - from);
                    }
                    TravelStart::Scratch => prop_assert_eq!(travel.events_folded, version as u64),
                }
            }
            let beyond = live.state_at(task, head + 1);
            prop_assert!(
                matches!(beyond, Err(QueryError::VersionBeyondHead { head: h, requested, .. }) if h == head && requested == head + 1),
                "{:?}", beyond
            );
        }
    }

    #[test]
    fn snapshots_and_catch_up_equal_a_full_rebuild(steps in steps(), split in any::<prop::sample::Index>(), feed in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = memory_ledger(3);
        let mut world = World::new(&ledger);
        let split = split.index(steps.len() + 1);
        {
            let first = projector_in(&ledger, dir.path());
            for s in &steps[..split] {
                step(&mut world, s);
            }
            first.catch_up().unwrap();
            first.snapshot().unwrap();
            for s in &steps[split..] {
                for event in step(&mut world, s) {
                    // Sometimes the first projector keeps following after its snapshot; what
                    // it folded then is not in the snapshots and must be caught up again.
                    if feed {
                        first.apply(&event).unwrap();
                    }
                }
            }
        }
        let reopened = projector_in(&ledger, dir.path());
        let report = reopened.open_report().clone();
        prop_assert!(matches!(report.start, OpenStart::Snapshots { .. }), "{:?}", report.start);
        prop_assert!(report.discarded.is_empty(), "{:?}", report.discarded);
        prop_assert_eq!(reopened.lag(), 0);
        same_as_reference(&reopened, &ledger)?;
        let rebuilt = projector(&ledger);
        prop_assert_eq!(reopened.projection_hash(), rebuilt.projection_hash());
        prop_assert!(reopened.discarded().is_empty(), "{:?}", reopened.discarded());
    }
}
