//! The harness: fixtures, fabricated ledger metadata, and the given/when/then steps.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use research::command::{
    AddEvidence, CloseTask, EvidenceInput, ExpandSubQuestions, OpenTask, RecordSearch,
    ResolveConflict, RetractEvidence, ScopeChoice, ScreenEvidence, ScreeningInput, SearchCandidate,
};
use research::event::{HumanOutcome, RelevanceBasis, ScreeningDecision};
use research::rules::{Mode, RulesOverride, Stance};
use research::{
    Command, CommandContext, Event, EventMeta, Hash32, NewEvent, Refusal, TaskState, decide,
    evolve, recheck,
};

/// The time every command is decided at unless a test says otherwise.
pub(crate) fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, 30, 12, 0, 0).unwrap()
}

pub(crate) fn ctx() -> CommandContext {
    CommandContext::new(now())
}

pub(crate) const RESEARCH_DATE: &str = "2025-06-30";

pub(crate) fn date(text: &str) -> NaiveDate {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
}

/// A deterministic stand-in for blake3 in tests: FNV-1a spread over 32 bytes.
pub(crate) fn hash_of(text: &str) -> Hash32 {
    let mut out = [0u8; 32];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        for byte in text.bytes().chain([i as u8]) {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        chunk.copy_from_slice(&h.to_le_bytes());
    }
    Hash32(out)
}

/// Ledger metadata for the `index`th event of a test stream.
pub(crate) fn meta(index: usize) -> EventMeta {
    let mut hash = [0xabu8; 32];
    hash[..8].copy_from_slice(&(index as u64).to_le_bytes());
    EventMeta {
        seq: 100 + index as u64,
        stream_version: index as u64 + 1,
        hash,
        recorded_at: now(),
        actor: "alice".into(),
    }
}

pub(crate) fn open_with(mode: Mode, rules: Option<RulesOverride>) -> Command {
    Command::OpenTask(OpenTask {
        task_id: "lithium-2025".into(),
        question: "Does lithium demand grow faster than supply?".into(),
        constraints: vec!["public industry data only".into()],
        research_date: Some(RESEARCH_DATE.into()),
        mode,
        rules,
        conflict_decisions: None,
    })
}

pub(crate) fn open() -> Command {
    open_with(Mode::ToolConstrained, None)
}

/// An evidence item from `publisher`, with the given type, publish date and stance.
pub(crate) fn item(
    publisher: &str,
    source_type: &str,
    published: &str,
    stance: Option<Stance>,
) -> EvidenceInput {
    EvidenceInput {
        source: Some(publisher.into()),
        url: None,
        publish_date: published.into(),
        publish_date_defaulted: false,
        source_type: source_type.into(),
        citation_count: None,
        summary: format!("{publisher} on lithium, {published}"),
        content_hash: hash_of(&format!("{publisher}|{source_type}|{published}|{stance:?}")),
        relevance: 0.8,
        relevance_basis: RelevanceBasis::GivenByClient,
        relevance_inputs: None,
        stance,
        sub_question: None,
    }
}

pub(crate) fn with_relevance(mut input: EvidenceInput, relevance: f64) -> EvidenceInput {
    input.relevance = relevance;
    input
}

pub(crate) fn in_scope(mut input: EvidenceInput, scope: &str) -> EvidenceInput {
    input.sub_question = Some(scope.into());
    input.content_hash = hash_of(&format!("{}|{scope}", input.content_hash));
    input
}

pub(crate) fn add(items: Vec<EvidenceInput>) -> Command {
    Command::AddEvidence(AddEvidence { items })
}

pub(crate) fn sub_questions(texts: &[&str]) -> Command {
    Command::ExpandSubQuestions(ExpandSubQuestions {
        sub_questions: texts.iter().map(|t| t.to_string()).collect(),
    })
}

pub(crate) fn adopt(id: &str) -> ScreeningInput {
    ScreeningInput {
        evidence_id: id.into(),
        decision: ScreeningDecision::Adopt,
        stance: None,
        sub_question: ScopeChoice::Keep,
        reason: String::new(),
    }
}

pub(crate) fn adopt_as(id: &str, stance: Stance) -> ScreeningInput {
    ScreeningInput {
        stance: Some(stance),
        ..adopt(id)
    }
}

pub(crate) fn reject(id: &str, reason: &str) -> ScreeningInput {
    ScreeningInput {
        evidence_id: id.into(),
        decision: ScreeningDecision::Reject,
        stance: None,
        sub_question: ScopeChoice::Keep,
        reason: reason.into(),
    }
}

pub(crate) fn screen(decisions: Vec<ScreeningInput>) -> Command {
    Command::ScreenEvidence(ScreenEvidence { decisions })
}

pub(crate) fn retract(id: &str, reason: &str) -> Command {
    Command::RetractEvidence(RetractEvidence {
        evidence_id: id.into(),
        reason: reason.into(),
    })
}

pub(crate) fn resolve(conflict: &str, winner: HumanOutcome, reason: &str) -> Command {
    Command::ResolveConflict(ResolveConflict {
        conflict_id: conflict.into(),
        winner,
        reason: reason.into(),
        decided_by: None,
    })
}

pub(crate) fn close() -> Command {
    Command::CloseTask(CloseTask {
        reason: Some("answered".into()),
    })
}

pub(crate) fn search(sources: &[&str], results: Vec<SearchCandidate>) -> Command {
    Command::RecordSearch(RecordSearch {
        query: "lithium demand supply growth".into(),
        sources: sources.iter().map(|s| s.to_string()).collect(),
        index_state: "corpus@42".into(),
        results,
    })
}

pub(crate) fn candidate(result_id: &str, origin: &str, evidence: EvidenceInput) -> SearchCandidate {
    SearchCandidate {
        result_id: result_id.into(),
        origin: origin.into(),
        raw_score: 11.65,
        normalised_score: 0.9,
        evidence,
    }
}

/// A task driven command by command, as the service would: decide, re-check every derived
/// event against the state before it, fold.
#[derive(Debug, Default, Clone)]
pub(crate) struct Task {
    pub(crate) state: TaskState,
    pub(crate) events: Vec<Event>,
}

impl Task {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Decides and, when accepted, appends and folds.
    pub(crate) fn run_at(
        &mut self,
        command: &Command,
        ctx: &CommandContext,
    ) -> Result<Vec<NewEvent>, Refusal> {
        let decided = decide(&self.state, command, ctx)?;
        for new in &decided {
            if let Err(discrepancy) = recheck(&self.state, &new.event) {
                panic!("decide produced an event recheck rejects: {discrepancy}");
            }
            self.append(&new.event);
        }
        Ok(decided)
    }

    pub(crate) fn run(&mut self, command: &Command) -> Result<Vec<NewEvent>, Refusal> {
        self.run_at(command, &ctx())
    }

    /// Runs a command that must be accepted.
    pub(crate) fn ok(&mut self, command: Command) -> Vec<Event> {
        match self.run(&command) {
            Ok(events) => events.into_iter().map(|n| n.event).collect(),
            Err(refusal) => panic!("{command:?} was refused: {refusal}"),
        }
    }

    pub(crate) fn append(&mut self, event: &Event) {
        evolve(&mut self.state, event, &meta(self.events.len()));
        self.events.push(event.clone());
    }

    /// Runs every command of a history, which must all be accepted.
    pub(crate) fn from_commands(commands: Vec<Command>) -> Self {
        let mut task = Self::new();
        for command in commands {
            task.ok(command);
        }
        task
    }
}

/// The events a history of accepted commands records.
pub(crate) fn history(commands: Vec<Command>) -> Vec<Event> {
    Task::from_commands(commands).events
}

pub(crate) struct Scenario {
    task: Task,
}

/// Given these events (folded with fabricated ledger metadata)…
pub(crate) fn given(events: impl IntoIterator<Item = Event>) -> Scenario {
    let mut task = Task::new();
    for event in events {
        task.append(&event);
    }
    assert!(
        task.state.anomalies().is_empty(),
        "{:?}",
        task.state.anomalies()
    );
    Scenario { task }
}

pub(crate) struct Outcome {
    pub(crate) state: TaskState,
    pub(crate) result: Result<Vec<NewEvent>, Refusal>,
}

impl Scenario {
    /// …when this command is decided…
    pub(crate) fn when(self, command: Command) -> Outcome {
        self.when_at(command, ctx())
    }

    pub(crate) fn when_at(self, command: Command, ctx: CommandContext) -> Outcome {
        let result = decide(&self.task.state, &command, &ctx);
        Outcome {
            state: self.task.state,
            result,
        }
    }
}

impl Outcome {
    /// …then exactly these events are decided.
    pub(crate) fn then_expect(self, expected: Vec<Event>) {
        let events = self.then_events();
        assert_eq!(events, expected);
    }

    /// …then the command is refused with exactly this refusal.
    pub(crate) fn then_refuse(self, expected: Refusal) {
        match self.result {
            Ok(events) => panic!("expected {expected:?}, got events {events:#?}"),
            Err(refusal) => assert_eq!(refusal, expected),
        }
    }

    /// …then it is refused; the refusal is returned for closer checks.
    pub(crate) fn then_refusal(self) -> Refusal {
        match self.result {
            Ok(events) => panic!("expected a refusal, got events {events:#?}"),
            Err(refusal) => refusal,
        }
    }

    /// …then it is accepted; the events are returned (every derived one re-checked).
    pub(crate) fn then_events(self) -> Vec<Event> {
        match self.result {
            Ok(events) => {
                let mut state = self.state.clone();
                let base = state.version() as usize;
                for (i, new) in events.iter().enumerate() {
                    assert!(recheck(&state, &new.event).is_ok());
                    evolve(&mut state, &new.event, &meta(base + i));
                }
                assert!(state.anomalies().is_empty(), "{:?}", state.anomalies());
                events.into_iter().map(|n| n.event).collect()
            }
            Err(refusal) => panic!("expected events, got refusal {refusal:?}"),
        }
    }

    /// …then it is accepted with these events and causes.
    pub(crate) fn then_new_events(self) -> Vec<NewEvent> {
        match self.result {
            Ok(events) => events,
            Err(refusal) => panic!("expected events, got refusal {refusal:?}"),
        }
    }
}

/// JSON of events, one per line, for snapshots.
pub(crate) fn json_lines(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap()
}
