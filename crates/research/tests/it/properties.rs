//! Properties over random command sequences: whatever decide accepts folds without anomaly,
//! re-checks bit for bit, round-trips the codec, and yields verdicts that follow from their
//! components; doctored values are caught; decoding survives hostile bytes.

use proptest::prelude::*;
use research::command::{RecordExternalToolCall, SearchCandidate};
use research::event::{ConclusionIssued, EVENT_KINDS, HumanOutcome, Tier};
use research::rules::{Mode, Stance, verdict_rule};
use research::{Command, Event, TaskState, decode, encode, evolve, recheck};

use crate::support::*;

/// One step of a random run: a selector and some raw material the driver turns into a
/// command against the current state.
type Step = (u8, u8, u8, u16, f64);

const SOURCES: [&str; 5] = [
    "a.example.org",
    "b.example.org",
    "c.example.gov",
    "https://www.d.example.com/x",
    "e.example.edu",
];

fn stance_of(n: u8) -> Option<Stance> {
    match n % 4 {
        0 => None,
        1 => Some(Stance::Supports),
        2 => Some(Stance::Opposes),
        _ => Some(Stance::Neutral),
    }
}

/// Publish dates cluster on the boundaries of the rules: the same day, 29, 30 and 31 days
/// apart, one half-life, and far back.
const AGES_DAYS: [u64; 8] = [0, 1, 29, 30, 31, 365, 366, 1400];

/// Source types weighted toward ties of authority, plus one the rules do not know.
const TYPES: [&str; 9] = [
    "blog",
    "blog",
    "government",
    "institutional_report",
    "primary_data",
    "academic_paper",
    "news_original",
    "other",
    "rumour",
];

fn evidence(
    a: u8,
    b: u8,
    days: u16,
    relevance: f64,
    state: &TaskState,
) -> research::command::EvidenceInput {
    let source_type = TYPES[usize::from(b) % TYPES.len()].to_string();
    let published =
        date(RESEARCH_DATE) - chrono::Days::new(AGES_DAYS[usize::from(days) % AGES_DAYS.len()]);
    let published = if days.is_multiple_of(97) {
        "2030-01-01".to_string()
    } else {
        published.to_string()
    };
    let scope = match a % 6 {
        0..=3 => None,
        n => {
            let sub_questions = state.sub_questions().len().max(1);
            Some(format!("sq-{}", usize::from(n) % (sub_questions + 1)))
        }
    };
    let stance = stance_of(b / 9);
    let source = SOURCES[usize::from(a) % SOURCES.len()];
    let relevance = match days % 11 {
        0 => 0.0,
        1 => 0.5,
        2 => 1.0,
        3 if days.is_multiple_of(89) => f64::NAN,
        _ => relevance,
    };
    research::command::EvidenceInput {
        source: Some(source.into()),
        url: None,
        publish_date: published.clone(),
        publish_date_defaulted: days.is_multiple_of(7),
        source_type: source_type.clone(),
        citation_count: if days.is_multiple_of(3) {
            None
        } else {
            Some(u64::from(days))
        },
        summary: format!("{source} {published}"),
        content_hash: hash_of(&format!(
            "{source}{source_type}{published}{stance:?}{scope:?}"
        )),
        relevance,
        relevance_basis: research::event::RelevanceBasis::ScoredBySource,
        relevance_inputs: None,
        stance,
        sub_question: scope,
    }
}

fn pick_evidence(state: &TaskState, n: u8) -> String {
    let count = state.evidence().len();
    if count == 0 || n.is_multiple_of(13) {
        format!("ev-{}", count + 1)
    } else {
        format!("ev-{}", usize::from(n) % count + 1)
    }
}

fn command_for(step: &Step, state: &TaskState) -> Command {
    let (selector, a, b, days, relevance) = *step;
    match selector % 20 {
        0 => sub_questions(&[["Demand?", "Supply?", "Prices?", "Policy?"][usize::from(a) % 4]]),
        1..=3 => add(vec![evidence(a, b, days, relevance, state)]),
        4 => search(
            &["corpus", "web"],
            (0..(a % 4))
                .map(|i| SearchCandidate {
                    result_id: format!("r{i}"),
                    origin: if i % 2 == 0 {
                        "corpus".into()
                    } else {
                        "web".into()
                    },
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
        ),
        5..=9 if a % 2 == 0 => {
            // Screen every candidate at once, as a reviewer working through a batch would.
            let decisions: Vec<_> = state
                .evidence_views()
                .iter()
                .filter(|v| v.status == research::event::EvidenceStatus::Candidate)
                .map(|v| match v.item.stance {
                    Some(_) => adopt(v.item.evidence_id.as_str()),
                    None if b % 2 == 0 => adopt_as(
                        v.item.evidence_id.as_str(),
                        if b % 4 == 0 {
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
        5..=9 => {
            let target = pick_evidence(state, a);
            let mut decision = if b % 5 == 0 {
                reject(&target, "off topic")
            } else {
                adopt(&target)
            };
            if b % 2 == 0 {
                decision.stance = stance_of(b / 2);
            }
            screen(vec![decision])
        }
        10 => retract(&pick_evidence(state, a), "withdrawn"),
        11 | 12 => Command::RunConflictResolution,
        13 => {
            // Mostly a conflict in force; sometimes an old or unknown one.
            let current: Vec<String> = state
                .current_conflicts()
                .map(|c| c.id().to_string())
                .collect();
            let target = match current.get(usize::from(a) % current.len().max(1)) {
                Some(id) if a % 5 != 0 => id.clone(),
                _ => format!("cf-{}", usize::from(a) % (state.conflicts().len() + 1) + 1),
            };
            let outcome = [
                HumanOutcome::Supports,
                HumanOutcome::Opposes,
                HumanOutcome::BothStand,
            ][usize::from(b) % 3];
            resolve(&target, outcome, "reviewed")
        }
        14 => Command::BuildDecisionMatrix,
        15 | 16 => Command::GenerateConclusion,
        17 => Command::ExplainReasoning,
        18 => {
            if a % 16 == 0 {
                close()
            } else {
                Command::RecordSynthesis
            }
        }
        _ => Command::RecordExternalToolCall(RecordExternalToolCall {
            tool: "prices".into(),
            contract_version: "2".into(),
            arguments_hash: hash_of(&a.to_string()),
            reply_hash: Some(hash_of(&b.to_string())),
            error: None,
        }),
    }
}

fn check_conclusion(issued: &ConclusionIssued) -> Result<(), TestCaseError> {
    let c = issued.components;
    for value in [
        issued.confidence,
        c.relevance,
        c.consistency,
        c.recency,
        c.diversity,
        issued.client_share,
    ] {
        prop_assert!(
            (0.0..=1.0).contains(&value),
            "{value} out of [0, 1] in {issued:?}"
        );
    }
    let pending = issued.adjudications.iter().any(|a| a.tier == Tier::Pending);
    let rule = verdict_rule(
        &issued.rules.thresholds,
        issued.counts.supports as usize,
        issued.counts.opposes as usize,
        c.consistency,
        issued.confidence,
        pending,
    );
    prop_assert_eq!(rule, issued.rule);
    prop_assert_eq!(rule.verdict(), issued.stance);
    Ok(())
}

/// Drives a random run; returns the task and the state before each recorded event.
fn drive(agent_led: bool, steps: &[Step]) -> Result<(Task, Vec<TaskState>), TestCaseError> {
    let mode = if agent_led {
        Mode::AgentLed
    } else {
        Mode::ToolConstrained
    };
    let mut task = Task::new();
    let mut before = Vec::new();
    for i in 0..=steps.len() {
        // Each command is built against the state as it is now, as a client would.
        let command = match i.checked_sub(1) {
            None => open_with(mode, None),
            Some(j) => command_for(&steps[j], &task.state),
        };
        let decided = research::decide(&task.state, &command, &ctx());
        let Ok(decided) = decided else { continue };
        for new in decided {
            let event = new.event;
            if let Err(discrepancy) = recheck(&task.state, &event) {
                return Err(TestCaseError::fail(format!("{discrepancy}")));
            }
            let decoded = decode(event.kind(), &encode(&event));
            prop_assert_eq!(decoded.as_ref(), Ok(&event));
            if let Event::ConclusionIssued(issued) = &event {
                check_conclusion(issued)?;
            }
            before.push(task.state.clone());
            task.append(&event);
            prop_assert!(
                task.state.anomalies().is_empty(),
                "{:?}",
                task.state.anomalies()
            );
        }
    }
    Ok((task, before))
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            0.0f64..=1.0,
        ),
        1..64,
    )
}

/// Changes one derived value of an event, or returns none when it has nothing derived.
fn doctor(event: &Event) -> Option<Event> {
    let flip = |x: f64| f64::from_bits(x.to_bits() ^ 1);
    let mut event = event.clone();
    match &mut event {
        Event::EvidenceAdded(e) => e.recency = flip(e.recency),
        Event::ConclusionIssued(e) => e.confidence = flip(e.confidence),
        Event::DecisionMatrixBuilt(e) => match e.rows.first_mut() {
            Some(row) => row.reliability = flip(row.reliability),
            None => e.aggregates[0].mean_relevance = flip(e.aggregates[0].mean_relevance),
        },
        Event::ConflictsAdjudicated(e) => match e.adjudications.first_mut() {
            Some(a) => a.compared.authority_gap = flip(a.compared.authority_gap),
            None => e.unchanged.push(research::ids::ConflictId::nth(99)),
        },
        Event::SynthesisRecorded(e) => match e.viewpoints.first_mut() {
            Some(v) => v.mean_relevance = flip(v.mean_relevance),
            None => e.synthesis_id = research::ids::SynthesisId::nth(99),
        },
        Event::ExplanationRecorded(e) => e.nodes[0].text.push('!'),
        _ => return None,
    }
    Some(event)
}

proptest! {
    // 96 cases by default keep the suite quick on a small machine; PROPTEST_CASES raises it.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    #[test]
    fn whatever_decide_accepts_folds_rechecks_and_round_trips(agent_led in any::<bool>(), steps in steps()) {
        let (task, _) = drive(agent_led, &steps)?;
        // Replaying the log from scratch gives the same state, byte for byte.
        let mut replayed = TaskState::new();
        for (i, event) in task.events.iter().enumerate() {
            evolve(&mut replayed, event, &meta(i));
        }
        prop_assert_eq!(replayed.canonical_bytes(), task.state.canonical_bytes());
    }

    #[test]
    fn one_item_s_view_is_its_entry_among_all_views(agent_led in any::<bool>(), steps in steps()) {
        let (task, states) = drive(agent_led, &steps)?;
        for state in states.iter().chain([&task.state]) {
            for view in state.evidence_views() {
                let alone = state.evidence_view(view.item.evidence_id.as_str());
                prop_assert_eq!(alone.as_ref(), Some(&view));
            }
            prop_assert_eq!(state.evidence_view("ev-none"), None);
        }
    }

    #[test]
    fn recheck_rejects_any_doctored_derived_value(agent_led in any::<bool>(), steps in steps()) {
        let (task, before) = drive(agent_led, &steps)?;
        for (event, state) in task.events.iter().skip(1).zip(before.iter().skip(1)) {
            if let Some(doctored) = doctor(event) {
                prop_assert!(recheck(state, &doctored).is_err(), "doctored {} passed", event.kind());
            }
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(kind in 0usize..EVENT_KINDS.len(), bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let kind = EVENT_KINDS[kind];
        let mut framed = vec![1, 0];
        framed.extend_from_slice(&bytes);
        for candidate in [&bytes, &framed] {
            if let Ok(event) = decode(kind, candidate) {
                prop_assert_eq!(event.kind(), kind);
                prop_assert_eq!(decode(kind, &encode(&event)).map(|e| encode(&e)), Ok(encode(&event)));
            }
        }
    }

    #[test]
    fn evolve_survives_damaged_events(steps in steps(), damage in prop::collection::vec((any::<usize>(), any::<usize>(), any::<u8>()), 1..24)) {
        let (task, _) = drive(false, &steps)?;
        let mut state = task.state.clone();
        let mut index = task.events.len();
        for (which, at, byte) in damage {
            let event = &task.events[which % task.events.len()];
            let mut bytes = encode(event);
            let at = at % bytes.len();
            bytes[at] ^= byte.max(1);
            if let Ok(damaged) = decode(event.kind(), &bytes) {
                evolve(&mut state, &damaged, &meta(index));
                index += 1;
                let _ = recheck(&state, &damaged);
                let _ = state.summary();
                let _ = state.conclusion_card(None);
                let _ = research::next_actions(&state);
                let _ = state.canonical_bytes();
            }
        }
        // Replaying events out of order or twice is reported, never a panic.
        let mut shuffled = TaskState::new();
        for (i, event) in task.events.iter().rev().enumerate() {
            evolve(&mut shuffled, event, &meta(i));
        }
        prop_assert!(task.events.len() < 2 || !shuffled.anomalies().is_empty());
    }
}
