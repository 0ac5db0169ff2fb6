//! The harness: a world that drives `research::decide` and appends what it decides to a real
//! ledger, the reference fold the projections are compared with, and command builders.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use ledger::storage::memory::{Faults, MemoryStorage};
use ledger::{
    AppendRequest, Causation, Digest, ExpectedVersion, Ledger, LedgerOptions, NewEvent, Receipt,
    RecordedEvent, SteppingClock,
};
use projections::{Projector, ProjectorOptions};
use research::command::{
    AddEvidence, CloseTask, EvidenceInput, ExpandSubQuestions, OpenTask, RecordExternalToolCall,
    ResolveConflict, RetractEvidence, ScopeChoice, ScreenEvidence, ScreeningInput,
};
use research::event::{HumanOutcome, RelevanceBasis, ScreeningDecision};
use research::rules::{Mode, Stance};
use research::{
    Cause, Command, CommandContext, EventMeta, Hash32, Refusal, TaskState, decide, encode, evolve,
};

/// The time every command is decided at.
pub(crate) fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, 30, 12, 0, 0).unwrap()
}

pub(crate) fn ctx() -> CommandContext {
    CommandContext::new(now())
}

pub(crate) const RESEARCH_DATE: &str = "2025-06-30";

/// Ledger options for reproducible tests: a stepping clock, seeded ids, no checkpoint timer.
pub(crate) fn ledger_options(seed: u64) -> LedgerOptions {
    LedgerOptions {
        clock: Arc::new(SteppingClock::new(now(), 1_000_000)),
        id_seed: Some(seed),
        checkpoint_every_events: None,
        checkpoint_interval: None,
        ..LedgerOptions::default()
    }
}

pub(crate) fn memory_ledger(seed: u64) -> Ledger {
    Ledger::with_storage(
        Arc::new(MemoryStorage::new(Faults::default(), seed)),
        ledger_options(seed),
    )
}

pub(crate) fn embedded_ledger(dir: &Path) -> Ledger {
    Ledger::open(dir, ledger_options(7)).unwrap()
}

/// A projector without snapshots: folds the whole ledger when it opens.
pub(crate) fn projector(ledger: &Ledger) -> Projector {
    Projector::open(ledger.clone(), ProjectorOptions::default()).unwrap()
}

/// A projector keeping snapshots in `dir`, taking them only when told to.
pub(crate) fn projector_in(ledger: &Ledger, dir: &Path) -> Projector {
    let mut options = ProjectorOptions {
        snapshot_dir: Some(dir.to_path_buf()),
        ..ProjectorOptions::default()
    };
    options.limits.snapshot_every_events = 0;
    options.limits.snapshots_per_task_max = 3;
    Projector::open(ledger.clone(), options).unwrap()
}

pub(crate) fn meta(event: &RecordedEvent) -> EventMeta {
    EventMeta {
        seq: event.seq,
        stream_version: event.stream_version,
        hash: event.hash.0,
        recorded_at: event.recorded_at,
        actor: event.actor.clone(),
    }
}

/// Every event of the ledger, read in pages.
pub(crate) fn all_events(ledger: &Ledger) -> Vec<RecordedEvent> {
    let mut out = Vec::new();
    loop {
        let page = ledger.read_range(out.len() as u64, 1000).unwrap();
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// The reference: every research task folded straight from the ledger, event by event, with
/// nothing of the projector's code.
pub(crate) fn fold_all(ledger: &Ledger) -> BTreeMap<String, TaskState> {
    let mut tasks: BTreeMap<String, TaskState> = BTreeMap::new();
    for event in all_events(ledger) {
        let is_task = tasks.contains_key(&event.stream)
            || (event.stream_version == 1 && event.kind == "task_opened");
        if !is_task {
            continue;
        }
        let decoded = research::decode(&event.kind, &event.payload).unwrap();
        evolve(
            tasks.entry(event.stream.clone()).or_default(),
            &decoded,
            &meta(&event),
        );
    }
    tasks
}

/// A task's events, in stream order.
pub(crate) fn events_of(ledger: &Ledger, task: &str) -> Vec<RecordedEvent> {
    ledger.read_stream(task, 1, 100_000).unwrap()
}

/// The state after the first `version` of `events`.
pub(crate) fn fold_prefix(events: &[RecordedEvent], version: usize) -> TaskState {
    let mut state = TaskState::new();
    for event in &events[..version] {
        let decoded = research::decode(&event.kind, &event.payload).unwrap();
        evolve(&mut state, &decoded, &meta(event));
    }
    state
}

/// Research tasks driven through `decide` and appended to a real ledger, as the service does.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) ledger: Ledger,
    /// Each task's state, folded from the events the ledger recorded for it.
    pub(crate) states: BTreeMap<String, TaskState>,
    pub(crate) actor: String,
}

impl World {
    pub(crate) fn new(ledger: &Ledger) -> Self {
        World {
            ledger: ledger.clone(),
            states: BTreeMap::new(),
            actor: "alice".into(),
        }
    }

    /// What the service would append for `command`, or the refusal.
    pub(crate) fn request(&self, task: &str, command: &Command) -> Result<AppendRequest, Refusal> {
        let state = self.states.get(task).cloned().unwrap_or_default();
        let decided = decide(&state, command, &ctx())?;
        let events = decided
            .iter()
            .map(|new| NewEvent {
                kind: new.event.kind().to_string(),
                payload: encode(&new.event),
                causation: new
                    .causation
                    .iter()
                    .map(|cause| match cause {
                        Cause::Event(hash) => Causation::Event(Digest(*hash)),
                        Cause::InBatch(index) => Causation::InBatch(*index),
                    })
                    .collect(),
            })
            .collect();
        Ok(AppendRequest {
            stream: task.to_string(),
            expected: ExpectedVersion::Exact(state.version()),
            actor: self.actor.clone(),
            events,
            idempotency: None,
            content: Vec::new(),
        })
    }

    /// Reads back what an append wrote and folds it into the task's state.
    pub(crate) fn record(&mut self, receipt: &Receipt) -> Vec<RecordedEvent> {
        let first = receipt.events[0].seq;
        let recorded = self.ledger.read_range(first, receipt.events.len()).unwrap();
        let state = self.states.entry(receipt.stream.clone()).or_default();
        for event in &recorded {
            let decoded = research::decode(&event.kind, &event.payload).unwrap();
            evolve(state, &decoded, &meta(event));
        }
        recorded
    }

    /// Decides and appends; the events recorded, or the refusal.
    pub(crate) fn run(
        &mut self,
        task: &str,
        command: &Command,
    ) -> Result<Vec<RecordedEvent>, Refusal> {
        let request = self.request(task, command)?;
        let receipt = self.ledger.append(request).unwrap();
        Ok(self.record(&receipt))
    }

    /// Runs a command that must be accepted.
    pub(crate) fn ok(&mut self, task: &str, command: Command) -> Vec<RecordedEvent> {
        match self.run(task, &command) {
            Ok(events) => events,
            Err(refusal) => panic!("{command:?} on {task} was refused: {refusal}"),
        }
    }

    /// Runs a command as someone else.
    pub(crate) fn ok_as(
        &mut self,
        actor: &str,
        task: &str,
        command: Command,
    ) -> Vec<RecordedEvent> {
        let before = std::mem::replace(&mut self.actor, actor.to_string());
        let events = self.ok(task, command);
        self.actor = before;
        events
    }

    /// Appends an event to a stream that is not a research task, as external tool calls made
    /// without a task are recorded.
    pub(crate) fn tool_call(&mut self, n: u8) -> RecordedEvent {
        let event = research::Event::ExternalToolCalled(research::event::ExternalToolCalled {
            tool: "prices".into(),
            contract_version: "2".into(),
            arguments_hash: hash_of(&n.to_string()),
            reply_hash: None,
            error: None,
        });
        let receipt = self
            .ledger
            .append(AppendRequest {
                stream: "tools".into(),
                expected: ExpectedVersion::Any,
                actor: self.actor.clone(),
                events: vec![NewEvent {
                    kind: event.kind().into(),
                    payload: encode(&event),
                    causation: vec![],
                }],
                idempotency: None,
                content: Vec::new(),
            })
            .unwrap();
        self.ledger.get(receipt.events[0].seq).unwrap().unwrap()
    }
}

/// A deterministic stand-in for a content hash.
pub(crate) fn hash_of(text: &str) -> Hash32 {
    Hash32(*blake3::hash(text.as_bytes()).as_bytes())
}

pub(crate) fn open_task(task: &str, question: &str, constraints: &[&str], mode: Mode) -> Command {
    Command::OpenTask(OpenTask {
        task_id: task.into(),
        question: question.into(),
        constraints: constraints.iter().map(|c| c.to_string()).collect(),
        research_date: Some(RESEARCH_DATE.into()),
        mode,
        rules: None,
        conflict_decisions: None,
    })
}

/// An evidence item from `publisher`, with a type, publish date and stance.
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
        summary: format!("{publisher} on the question, {published}"),
        content_hash: hash_of(&format!("{publisher}|{source_type}|{published}|{stance:?}")),
        relevance: 0.8,
        relevance_basis: RelevanceBasis::GivenByClient,
        relevance_inputs: None,
        stance,
        sub_question: None,
    }
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

/// Adopts every candidate of a task as it was added.
pub(crate) fn adopt_all(state: &TaskState) -> Command {
    screen(
        state
            .evidence_views()
            .iter()
            .filter(|v| v.status == research::event::EvidenceStatus::Candidate)
            .map(|v| adopt(v.item.evidence_id.as_str()))
            .collect(),
    )
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

pub(crate) fn tool_call_command(n: u8) -> Command {
    Command::RecordExternalToolCall(RecordExternalToolCall {
        tool: "prices".into(),
        contract_version: "2".into(),
        arguments_hash: hash_of(&format!("args {n}")),
        reply_hash: Some(hash_of(&format!("reply {n}"))),
        error: None,
    })
}

/// Runs a task through screening, conflicts, matrix and conclusion.
pub(crate) fn conclude(world: &mut World, task: &str) {
    let state = world.states[task].clone();
    if state
        .evidence_views()
        .iter()
        .any(|v| v.status == research::event::EvidenceStatus::Candidate)
    {
        world.ok(task, adopt_all(&state));
    }
    world.ok(task, Command::RunConflictResolution);
    world.ok(task, Command::BuildDecisionMatrix);
    world.ok(task, Command::GenerateConclusion);
}
