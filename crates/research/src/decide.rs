//! `decide`: every business rule of a research task. It reads the state and a command and
//! returns the events to append, or a refusal that names what is wrong.
//!
//! Nothing here reads a clock or invents an id: `now` comes in the context, the task id in the
//! command, and every other id is the next in its sequence in the state. Derived events are
//! computed by [`crate::derive`] from the state alone, so that a replay can re-derive them.

use std::collections::BTreeSet;

use chrono::{Days, NaiveDate};

use crate::codec::encode;
use crate::command::{
    AddEvidence, Cause, CloseTask, Command, CommandContext, EvidenceInput, ExpandSubQuestions,
    NewEvent, OpenTask, RecordExternalToolCall, RecordSearch, ResolveConflict, RetractEvidence,
    ScopeChoice, ScreenEvidence, SearchCandidate,
};
use crate::derive::{self, adjudicate, conclude, explain, matrix, synthesis};
use crate::event::{
    AdjudicationAppealed, ConflictDecisions, ConflictResolved, Event, EvidenceAdded,
    EvidenceRetracted, EvidenceScreened, ExternalToolCalled, FoundBy, ORIGIN_CLIENT,
    RelevanceBasis, ScreeningDecision, SearchHit, SearchRecorded, SubQuestion,
    SubQuestionsExpanded, TaskClosed, TaskOpened, Tier,
};
use crate::ids::{Cite, ConflictId, EventMeta, EvidenceId, Hash32, SearchId, SubQuestionId};
use crate::limits::Limits;
use crate::refusal::{PendingAction, Refusal, Tool};
use crate::rules::{Mode, RelevanceInputs, RuleSet};
use crate::state::{TaskInfo, TaskState, evolve};
use crate::text::{SourceNameError, char_count, comparable, normalise_source, parse_date};
use crate::workflow::{self, Step};

/// Decides a command against a task: the events to append, in order, with their causes; or a
/// refusal, in which case nothing is to be written.
pub fn decide(
    state: &TaskState,
    command: &Command,
    ctx: &CommandContext,
) -> Result<Vec<NewEvent>, Refusal> {
    let events = decide_events(state, command, ctx)?;
    for new in &events {
        let size = encode(&new.event).len() as u64;
        if size > ctx.limits.event_bytes_max {
            return Err(Refusal::LimitExceeded {
                limit: "event_bytes_max",
                max: ctx.limits.event_bytes_max,
                actual: size,
                field: new.event.kind().to_string(),
            });
        }
    }
    Ok(events)
}

fn decide_events(
    state: &TaskState,
    command: &Command,
    ctx: &CommandContext,
) -> Result<Vec<NewEvent>, Refusal> {
    if let Command::OpenTask(open) = command {
        return open_task(state, open, ctx);
    }
    let Some(task) = state.task() else {
        return Err(Refusal::WorkflowOrder {
            message: "the task has not been opened".into(),
            pending_actions: vec![PendingAction::new(
                Tool::ResearchOpenTask,
                "open the task first",
            )],
        });
    };
    if state.is_closed() {
        return Err(Refusal::TaskClosed {
            task_id: task.task_id.clone(),
        });
    }
    let limits = &ctx.limits;
    match command {
        // Refused: the task exists (and is open, as checked above).
        Command::OpenTask(open) => open_task(state, open, ctx),
        Command::ExpandSubQuestions(c) => expand(state, c, limits),
        Command::RecordSearch(c) => record_search(state, task, c, ctx),
        Command::AddEvidence(c) => add_evidence(state, task, c, ctx),
        Command::RetractEvidence(c) => retract(state, c, limits),
        Command::ScreenEvidence(c) => screen(state, c, limits),
        Command::RecordSynthesis => record_synthesis(state, task),
        Command::RunConflictResolution => {
            require(
                state,
                task,
                Tool::EvaluationConflictResolution,
                &[Step::Screen],
            )?;
            Ok(vec![conflict_run(state, state.version())])
        }
        Command::ResolveConflict(c) => resolve_conflict(state, c, limits),
        Command::BuildDecisionMatrix => {
            require(
                state,
                task,
                Tool::EvaluationBuildDecisionMatrix,
                &[Step::Screen, Step::ConflictResolution],
            )?;
            Ok(vec![matrix_event(state, state.version())])
        }
        Command::GenerateConclusion => generate_conclusion(state, task, ctx),
        Command::ExplainReasoning => explain_reasoning(state, task),
        Command::RecordExternalToolCall(c) => tool_call(c, limits),
        Command::CloseTask(c) => close(c, limits),
    }
}

/// The synthesis of the adopted evidence's viewpoints, citing the screenings that adopted it.
fn record_synthesis(state: &TaskState, task: &TaskInfo) -> Result<Vec<NewEvent>, Refusal> {
    require(
        state,
        task,
        Tool::SynthesisResearchSynthesis,
        &[Step::Screen],
    )?;
    let event = synthesis::synthesis(state);
    let mut causes = Causes::new(state);
    for item in state.evidence() {
        if event
            .viewpoints
            .iter()
            .any(|v| v.evidence_ids.contains(item.id()))
        {
            causes.cite(&item.status_provenance().cite);
        }
    }
    Ok(vec![causes.event(Event::SynthesisRecorded(event))])
}

/// The explanation of the current conclusion, citing it; refused while there is none, with
/// the steps that lead to one.
fn explain_reasoning(state: &TaskState, task: &TaskInfo) -> Result<Vec<NewEvent>, Refusal> {
    let Some(event) = explain::explanation(state) else {
        let mut pending = workflow::missing(
            state,
            &[
                Step::Screen,
                Step::ConflictResolution,
                Step::Matrix,
                Step::Conclusion,
            ],
        );
        if task.mode == Mode::AgentLed {
            pending.retain(|a| a.tool == Tool::EvaluationGenerateConclusion);
        }
        return Err(Refusal::WorkflowOrder {
            message: "there is no conclusion to explain yet".into(),
            pending_actions: pending,
        });
    };
    let mut causes = Causes::new(state);
    if let Some(current) = state.current_conclusion() {
        causes.cite(&current.provenance.cite);
    }
    Ok(vec![causes.event(Event::ExplanationRecorded(event))])
}

/// In `tool_constrained` mode, refuses a command while any of the steps it needs is due.
fn require(state: &TaskState, task: &TaskInfo, tool: Tool, needed: &[Step]) -> Result<(), Refusal> {
    if task.mode == Mode::AgentLed {
        return Ok(());
    }
    let pending = workflow::missing(state, needed);
    if pending.is_empty() {
        return Ok(());
    }
    Err(Refusal::WorkflowOrder {
        message: format!(
            "`{}` must wait: {}",
            tool.name(),
            pending
                .iter()
                .map(|a| a.reason.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        pending_actions: pending,
    })
}

/// Collects causes without duplicates, telling events already stored from events earlier in
/// the batch being decided (whose stream versions lie beyond the state the command saw).
struct Causes {
    before: u64,
    list: Vec<Cause>,
}

impl Causes {
    fn new(state: &TaskState) -> Self {
        Self {
            before: state.version(),
            list: Vec::new(),
        }
    }

    fn at(before: u64) -> Self {
        Self {
            before,
            list: Vec::new(),
        }
    }

    fn cite(&mut self, cite: &Cite) {
        let cause = if cite.version > self.before {
            Cause::InBatch(u32::try_from(cite.version - self.before - 1).unwrap_or(u32::MAX))
        } else {
            Cause::Event(cite.hash.0)
        };
        if !self.list.contains(&cause) {
            self.list.push(cause);
        }
    }

    fn batch(&mut self, index: u32) {
        let cause = Cause::InBatch(index);
        if !self.list.contains(&cause) {
            self.list.push(cause);
        }
    }

    fn event(self, event: Event) -> NewEvent {
        NewEvent {
            event,
            causation: self.list,
        }
    }
}

// ----- argument checks -----

fn too_long(field: impl Into<String>, limit: &'static str, max: u64, actual: u64) -> Refusal {
    Refusal::LimitExceeded {
        limit,
        max,
        actual,
        field: field.into(),
    }
}

fn check_chars(field: &str, text: &str, limit: &'static str, max: u64) -> Result<(), Refusal> {
    let count = char_count(text);
    if count > max {
        return Err(too_long(field, limit, max, count));
    }
    Ok(())
}

fn check_count(field: &str, count: usize, limit: &'static str, max: u64) -> Result<(), Refusal> {
    let count = count as u64;
    if count > max {
        return Err(too_long(field, limit, max, count));
    }
    Ok(())
}

/// A required piece of text: trimmed, not blank, within its limit.
fn required_text<'a>(
    field: &str,
    text: &'a str,
    limit: &'static str,
    max: u64,
) -> Result<&'a str, Refusal> {
    check_chars(field, text, limit, max)?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(Refusal::invalid(field, "must not be empty"));
    }
    Ok(trimmed)
}

fn latest_allowed(ctx: &CommandContext) -> Option<NaiveDate> {
    ctx.now
        .date_naive()
        .checked_add_days(Days::new(ctx.limits.future_date_days_max))
}

fn date_field(field: &str, text: &str, ctx: &CommandContext) -> Result<NaiveDate, Refusal> {
    if char_count(text) > 64 {
        return Err(Refusal::invalid(field, "is not a date"));
    }
    let date = parse_date(text).ok_or_else(|| {
        Refusal::invalid(
            field,
            format!(
                "`{}` is not a date (expected YYYY-MM-DD or an RFC 3339 time)",
                text.trim()
            ),
        )
    })?;
    if let Some(latest) = latest_allowed(ctx)
        && date > latest
    {
        return Err(Refusal::invalid(
            field,
            format!(
                "{date} lies more than {} day(s) after {} (the time of the request)",
                ctx.limits.future_date_days_max,
                ctx.now.date_naive()
            ),
        ));
    }
    Ok(date)
}

fn finite_unit(field: &str, value: f64) -> Result<f64, Refusal> {
    if !value.is_finite() {
        return Err(Refusal::invalid(
            field,
            format!("must be a finite number, got {value}"),
        ));
    }
    if !(0.0..=1.0).contains(&value) {
        return Err(Refusal::invalid(
            field,
            format!("must lie in [0, 1], got {value}"),
        ));
    }
    Ok(value)
}

fn valid_task_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

// ----- commands -----

fn open_task(
    state: &TaskState,
    c: &OpenTask,
    ctx: &CommandContext,
) -> Result<Vec<NewEvent>, Refusal> {
    let limits = &ctx.limits;
    if let Some(task) = state.task() {
        if state.is_closed() {
            return Err(Refusal::TaskClosed {
                task_id: task.task_id.clone(),
            });
        }
        return Err(Refusal::invalid(
            "task_id",
            format!("task `{}` is already open", task.task_id),
        ));
    }
    check_chars(
        "task_id",
        &c.task_id,
        "task_id_chars_max",
        limits.task_id_chars_max,
    )?;
    if !valid_task_id(&c.task_id) {
        return Err(Refusal::invalid(
            "task_id",
            "use letters, digits, `_`, `-` and `.`, starting with a letter or digit",
        ));
    }
    let question = required_text(
        "question",
        &c.question,
        "question_chars_max",
        limits.question_chars_max,
    )?;
    let constraints = checked_constraints(&c.constraints, limits)?;
    let research_date = match &c.research_date {
        Some(text) => date_field("research_date", text, ctx)?,
        None => ctx.now.date_naive(),
    };
    let overrides = c.rules.as_ref();
    let rules = overrides.map_or(Ok(RuleSet::v1()), RuleSet::with_overrides)?;
    Ok(vec![NewEvent {
        event: Event::TaskOpened(TaskOpened {
            task_id: c.task_id.clone(),
            question: question.to_string(),
            constraints,
            research_date,
            mode: c.mode,
            rules,
            conflict_decisions: c.conflict_decisions,
        }),
        causation: Vec::new(),
    }])
}

/// A task's constraints, each checked and trimmed.
fn checked_constraints(given: &[String], limits: &Limits) -> Result<Vec<String>, Refusal> {
    check_count(
        "constraints",
        given.len(),
        "constraints_count_max",
        limits.constraints_count_max,
    )?;
    given
        .iter()
        .enumerate()
        .map(|(i, constraint)| {
            required_text(
                &format!("constraints[{i}]"),
                constraint,
                "constraint_chars_max",
                limits.constraint_chars_max,
            )
            .map(str::to_string)
        })
        .collect()
}

fn expand(
    state: &TaskState,
    c: &ExpandSubQuestions,
    limits: &Limits,
) -> Result<Vec<NewEvent>, Refusal> {
    if c.sub_questions.is_empty() {
        return Err(Refusal::invalid(
            "sub_questions",
            "give at least one sub-question",
        ));
    }
    check_count(
        "sub_questions",
        c.sub_questions.len(),
        "sub_questions_per_call_max",
        limits.sub_questions_per_call_max,
    )?;
    check_count(
        "sub_questions",
        state.sub_questions().len() + c.sub_questions.len(),
        "sub_questions_count_max",
        limits.sub_questions_count_max,
    )?;
    let mut seen: Vec<(String, String)> = state
        .sub_questions()
        .iter()
        .map(|s| {
            (
                comparable(&s.sub_question.text),
                s.sub_question.id.to_string(),
            )
        })
        .collect();
    let mut added = Vec::with_capacity(c.sub_questions.len());
    for (i, text) in c.sub_questions.iter().enumerate() {
        let field = format!("sub_questions[{i}]");
        let text = required_text(
            &field,
            text,
            "sub_question_chars_max",
            limits.sub_question_chars_max,
        )?;
        let key = comparable(text);
        if let Some((_, earlier)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(Refusal::invalid(field, format!("duplicates {earlier}")));
        }
        let id = SubQuestionId::nth(state.sub_questions().len() + added.len() + 1);
        seen.push((key, field));
        added.push(SubQuestion {
            id,
            text: text.to_string(),
        });
    }
    Ok(vec![NewEvent {
        event: Event::SubQuestionsExpanded(SubQuestionsExpanded {
            sub_questions: added,
        }),
        causation: Vec::new(),
    }])
}

/// What the task assigns to an item entering it.
struct Entry<'a> {
    evidence_id: EvidenceId,
    origin: &'a str,
    found_by: Option<FoundBy>,
}

/// Checks an item's fields and computes its scores.
fn evidence_added(
    state: &TaskState,
    task: &TaskInfo,
    ctx: &CommandContext,
    input: &EvidenceInput,
    prefix: &str,
    entry: Entry<'_>,
) -> Result<EvidenceAdded, Refusal> {
    let limits = &ctx.limits;
    let field = |name: &str| format!("{prefix}.{name}");
    let source = evidence_source(input, &field, limits)?;
    let summary = &input.summary;
    check_chars(
        &field("summary"),
        summary,
        "summary_chars_max",
        limits.summary_chars_max,
    )?;
    if summary.trim().is_empty() {
        return Err(Refusal::invalid(field("summary"), "must not be empty"));
    }
    let source_type = input.source_type.parse().map_err(|_| {
        Refusal::invalid(
            field("source_type"),
            format!(
                "unknown source type `{}`; known: {}",
                crate::text::shorten(input.source_type.trim(), 40),
                crate::rules::SourceType::ALL.map(|t| t.name()).join(", ")
            ),
        )
    })?;
    let publish_date = date_field(&field("publish_date"), &input.publish_date, ctx)?;
    let relevance = finite_unit(&field("relevance"), input.relevance)?;
    let relevance_inputs = relevance_inputs(task, input, relevance, &field)?;
    let sub_question = match &input.sub_question {
        None => None,
        Some(id) => Some(known_sub_question(state, id)?),
    };
    let scores = derive::evidence_scores(
        &task.rules,
        task.research_date,
        source_type,
        input.citation_count,
        publish_date,
    );
    Ok(EvidenceAdded {
        evidence_id: entry.evidence_id,
        origin: entry.origin.to_string(),
        source,
        url: input.url.as_ref().map(|u| u.trim().to_string()),
        publish_date,
        publish_date_defaulted: input.publish_date_defaulted,
        source_type,
        citation_count: input.citation_count,
        summary: summary.clone(),
        content_hash: input.content_hash,
        relevance,
        relevance_basis: input.relevance_basis,
        stance: input.stance,
        sub_question,
        found_by: entry.found_by,
        authority: scores.authority,
        reliability: scores.reliability,
        age_days: scores.age_days,
        recency: scores.recency,
        relevance_inputs,
    })
}

/// An item's source: the publisher given, or the host of its URL, normalised (`field` names
/// an input in a refusal).
fn evidence_source(
    input: &EvidenceInput,
    field: &dyn Fn(&str) -> String,
    limits: &Limits,
) -> Result<String, Refusal> {
    if let Some(source) = &input.source {
        check_chars(
            &field("source"),
            source,
            "source_chars_max",
            limits.source_chars_max,
        )?;
    }
    if let Some(url) = &input.url {
        check_chars(&field("url"), url, "url_chars_max", limits.url_chars_max)?;
    }
    let source =
        normalise_source(input.source.as_deref(), input.url.as_deref()).map_err(|e| match e {
            SourceNameError::Missing => {
                Refusal::invalid(field("source"), "give a publisher or a URL")
            }
            SourceNameError::NoHost => {
                let which = if input
                    .source
                    .as_deref()
                    .is_some_and(|s| !s.trim().is_empty())
                {
                    "source"
                } else {
                    "url"
                };
                Refusal::invalid(field(which), "is a URL without a host")
            }
        })?;
    check_chars(
        &field("source"),
        &source,
        "source_chars_max",
        limits.source_chars_max,
    )?;
    Ok(source)
}

/// The inputs a topicality relevance (rule set v2) was computed from, checked to give the
/// `relevance` stated; no other basis records any.
fn relevance_inputs(
    task: &TaskInfo,
    input: &EvidenceInput,
    relevance: f64,
    field: &dyn Fn(&str) -> String,
) -> Result<Option<RelevanceInputs>, Refusal> {
    match (input.relevance_basis, &input.relevance_inputs) {
        (RelevanceBasis::Topicality, Some(inputs)) => {
            let Some(params) = &task.rules.v2 else {
                return Err(Refusal::invalid(
                    field("relevance_basis"),
                    format!(
                        "topicality is relevance of rule set v2; this task uses {}",
                        task.rules.id
                    ),
                ));
            };
            let derived = crate::rules::v2::topical_relevance(inputs, params);
            if derived.to_bits() != relevance.to_bits() {
                return Err(Refusal::invalid(
                    field("relevance"),
                    format!("{relevance} does not follow from its inputs, which give {derived}"),
                ));
            }
            Ok(Some(inputs.clone()))
        }
        (RelevanceBasis::Topicality, None) => Err(Refusal::invalid(
            field("relevance_inputs"),
            "topicality needs the inputs it is computed from",
        )),
        (_, Some(_)) => Err(Refusal::invalid(
            field("relevance_inputs"),
            "only a topicality relevance records inputs",
        )),
        (_, None) => Ok(None),
    }
}

/// A sub-question of the task, by the id given.
fn known_sub_question(state: &TaskState, id: &str) -> Result<SubQuestionId, Refusal> {
    let id = SubQuestionId::new(id.trim());
    if state.sub_question(&id).is_none() {
        return Err(Refusal::NotFound {
            what: "sub_question",
            id: id.to_string(),
        });
    }
    Ok(id)
}

fn existing_with_hash<'a>(state: &'a TaskState, hash: &Hash32) -> Option<&'a EvidenceId> {
    state
        .evidence()
        .iter()
        .find(|e| &e.added.content_hash == hash)
        .map(|e| e.id())
}

fn record_search(
    state: &TaskState,
    task: &TaskInfo,
    c: &RecordSearch,
    ctx: &CommandContext,
) -> Result<Vec<NewEvent>, Refusal> {
    let limits = &ctx.limits;
    let query = required_text("query", &c.query, "query_chars_max", limits.query_chars_max)?;
    let sources = search_sources(&c.sources, limits)?;
    let index_state = required_text(
        "index_state",
        &c.index_state,
        "name_chars_max",
        limits.name_chars_max,
    )?;
    check_count(
        "results",
        c.results.len(),
        "search_results_max",
        limits.search_results_max,
    )?;

    let search_id = SearchId::nth(state.searches().len() + 1);
    let mut hits = Vec::with_capacity(c.results.len());
    let mut added: Vec<EvidenceAdded> = Vec::new();
    for (i, result) in c.results.iter().enumerate() {
        let prefix = format!("results[{i}]");
        let (result_id, origin, normalised_score) =
            checked_result(&prefix, result, &sources, limits)?;
        // Even a folded result must be well formed: a malformed result is refused whole.
        let (evidence_id, folded) = item_for(state, &added, &result.evidence.content_hash);
        let found_by = FoundBy {
            search_id: search_id.clone(),
            result_id: result_id.to_string(),
        };
        let entry = Entry {
            evidence_id: evidence_id.clone(),
            origin,
            found_by: Some(found_by),
        };
        let field = format!("{prefix}.evidence");
        let item = evidence_added(state, task, ctx, &result.evidence, &field, entry)?;
        hits.push(SearchHit {
            result_id: result_id.to_string(),
            origin: origin.to_string(),
            raw_score: result.raw_score,
            normalised_score,
            evidence_id,
            folded,
        });
        if !folded {
            added.push(item);
        }
    }
    check_count(
        "results",
        state.evidence().len() + added.len(),
        "evidence_count_max",
        limits.evidence_count_max,
    )?;
    let recorded = SearchRecorded {
        search_id,
        query: query.to_string(),
        sources,
        index_state: index_state.to_string(),
        results: hits,
    };
    Ok(search_events(state, recorded, added))
}

/// The item a search result's text belongs to, and whether it is folded into one that holds
/// that text already (in the task, or added earlier by the same search) rather than new.
fn item_for(state: &TaskState, added: &[EvidenceAdded], hash: &Hash32) -> (EvidenceId, bool) {
    let existing = existing_with_hash(state, hash).or_else(|| {
        added
            .iter()
            .find(|a| a.content_hash == *hash)
            .map(|a| &a.evidence_id)
    });
    match existing {
        Some(id) => (id.clone(), true),
        None => (
            EvidenceId::nth(state.evidence().len() + added.len() + 1),
            false,
        ),
    }
}

/// The sources a search asked, checked: at least one, each named once, none the name
/// reserved for evidence clients add.
fn search_sources(asked: &[String], limits: &Limits) -> Result<Vec<String>, Refusal> {
    if asked.is_empty() {
        return Err(Refusal::invalid(
            "sources",
            "name at least one source asked",
        ));
    }
    check_count(
        "sources",
        asked.len(),
        "sources_per_search_max",
        limits.sources_per_search_max,
    )?;
    let mut sources: Vec<String> = Vec::with_capacity(asked.len());
    for (i, source) in asked.iter().enumerate() {
        let field = format!("sources[{i}]");
        let source = required_text(&field, source, "name_chars_max", limits.name_chars_max)?;
        if source == ORIGIN_CLIENT {
            return Err(Refusal::invalid(
                field,
                "`client` is reserved for evidence clients add",
            ));
        }
        if sources.iter().any(|s| s == source) {
            return Err(Refusal::invalid(
                field,
                format!("`{source}` is listed twice"),
            ));
        }
        sources.push(source.to_string());
    }
    Ok(sources)
}

/// A search result's own fields, checked (`prefix` names it in a refusal): its id, its
/// origin (one of the `sources` asked) and its normalised score.
fn checked_result<'r>(
    prefix: &str,
    result: &'r SearchCandidate,
    sources: &[String],
    limits: &Limits,
) -> Result<(&'r str, &'r str, f64), Refusal> {
    let result_id = required_text(
        &format!("{prefix}.result_id"),
        &result.result_id,
        "name_chars_max",
        limits.name_chars_max,
    )?;
    let origin = result.origin.trim();
    if !sources.iter().any(|s| s == origin) {
        return Err(Refusal::invalid(
            format!("{prefix}.origin"),
            format!(
                "`{}` is not among the sources asked",
                crate::text::shorten(origin, 40)
            ),
        ));
    }
    if !result.raw_score.is_finite() {
        return Err(Refusal::invalid(
            format!("{prefix}.raw_score"),
            format!("must be a finite number, got {}", result.raw_score),
        ));
    }
    let normalised_score = finite_unit(
        &format!("{prefix}.normalised_score"),
        result.normalised_score,
    )?;
    Ok((result_id, origin, normalised_score))
}

/// A recorded search's events: the search, then each item it added, caused by it.
fn search_events(
    state: &TaskState,
    recorded: SearchRecorded,
    added: Vec<EvidenceAdded>,
) -> Vec<NewEvent> {
    let mut events = vec![NewEvent {
        event: Event::SearchRecorded(recorded),
        causation: Vec::new(),
    }];
    for item in added {
        let mut causes = Causes::new(state);
        causes.batch(0);
        events.push(causes.event(Event::EvidenceAdded(item)));
    }
    events
}

fn add_evidence(
    state: &TaskState,
    task: &TaskInfo,
    c: &AddEvidence,
    ctx: &CommandContext,
) -> Result<Vec<NewEvent>, Refusal> {
    let limits = &ctx.limits;
    if c.items.is_empty() {
        return Err(Refusal::invalid("items", "give at least one item"));
    }
    check_count(
        "items",
        c.items.len(),
        "evidence_per_call_max",
        limits.evidence_per_call_max,
    )?;
    check_count(
        "items",
        state.evidence().len() + c.items.len(),
        "evidence_count_max",
        limits.evidence_count_max,
    )?;
    let mut added: Vec<EvidenceAdded> = Vec::with_capacity(c.items.len());
    for (i, input) in c.items.iter().enumerate() {
        let prefix = format!("items[{i}]");
        let hash = input.content_hash;
        if let Some(existing) = existing_with_hash(state, &hash).or_else(|| {
            added
                .iter()
                .find(|a| a.content_hash == hash)
                .map(|a| &a.evidence_id)
        }) {
            return Err(Refusal::invalid(
                format!("{prefix}.content_hash"),
                format!("this content is already in the task as {existing}"),
            ));
        }
        let id = EvidenceId::nth(state.evidence().len() + added.len() + 1);
        let entry = Entry {
            evidence_id: id,
            origin: ORIGIN_CLIENT,
            found_by: None,
        };
        added.push(evidence_added(state, task, ctx, input, &prefix, entry)?);
    }
    Ok(added
        .into_iter()
        .map(|item| NewEvent {
            event: Event::EvidenceAdded(item),
            causation: Vec::new(),
        })
        .collect())
}

fn find_evidence<'a>(
    state: &'a TaskState,
    id: &str,
) -> Result<&'a crate::state::EvidenceRecord, Refusal> {
    state
        .evidence_item(&EvidenceId::new(id.trim()))
        .ok_or_else(|| Refusal::NotFound {
            what: "evidence",
            id: crate::text::shorten(id.trim(), 64),
        })
}

fn retract(
    state: &TaskState,
    c: &RetractEvidence,
    limits: &Limits,
) -> Result<Vec<NewEvent>, Refusal> {
    let reason = required_text(
        "reason",
        &c.reason,
        "reason_chars_max",
        limits.reason_chars_max,
    )?;
    let item = find_evidence(state, &c.evidence_id)?;
    if item.retraction.is_some() {
        return Err(Refusal::invalid(
            "evidence_id",
            format!("{} is already retracted", item.id()),
        ));
    }
    let mut causes = Causes::new(state);
    causes.cite(&item.provenance.cite);
    Ok(vec![causes.event(Event::EvidenceRetracted(
        EvidenceRetracted {
            evidence_id: item.id().clone(),
            reason: reason.to_string(),
        },
    ))])
}

fn screen(
    state: &TaskState,
    c: &ScreenEvidence,
    limits: &Limits,
) -> Result<Vec<NewEvent>, Refusal> {
    if c.decisions.is_empty() {
        return Err(Refusal::invalid("decisions", "give at least one decision"));
    }
    check_count(
        "decisions",
        c.decisions.len(),
        "screening_per_call_max",
        limits.screening_per_call_max,
    )?;
    let mut seen: BTreeSet<&EvidenceId> = BTreeSet::new();
    let mut events = Vec::with_capacity(c.decisions.len());
    for (i, decision) in c.decisions.iter().enumerate() {
        let prefix = format!("decisions[{i}]");
        check_chars(
            &format!("{prefix}.reason"),
            &decision.reason,
            "reason_chars_max",
            limits.reason_chars_max,
        )?;
        let item = find_evidence(state, &decision.evidence_id)?;
        if item.retraction.is_some() {
            return Err(Refusal::invalid(
                format!("{prefix}.evidence_id"),
                format!("{} is retracted and cannot be screened", item.id()),
            ));
        }
        if !seen.insert(item.id()) {
            return Err(Refusal::invalid(
                format!("{prefix}.evidence_id"),
                format!("{} is screened twice in this call", item.id()),
            ));
        }
        let stance = decision.stance.or(item.stance());
        if decision.decision == ScreeningDecision::Adopt && stance.is_none() {
            return Err(Refusal::invalid(
                format!("{prefix}.stance"),
                format!(
                    "{} has no stance; give `supports`, `opposes` or `neutral` to adopt it",
                    item.id()
                ),
            ));
        }
        let sub_question = match &decision.sub_question {
            ScopeChoice::Keep => item.scope().clone(),
            ScopeChoice::MainQuestion => None,
            ScopeChoice::SubQuestion(id) => Some(known_sub_question(state, id)?),
        };
        let mut causes = Causes::new(state);
        causes.cite(&item.provenance.cite);
        events.push(causes.event(Event::EvidenceScreened(EvidenceScreened {
            evidence_id: item.id().clone(),
            decision: decision.decision,
            stance,
            sub_question,
            reason: decision.reason.trim().to_string(),
        })));
    }
    Ok(events)
}

/// The conflict rules over `state`; `before` is the version of the state the command saw,
/// so events of the same batch are cited by index.
fn conflict_run(state: &TaskState, before: u64) -> NewEvent {
    let event = adjudicate::run(state);
    let mut causes = Causes::at(before);
    for adjudication in &event.adjudications {
        for participant in &adjudication.participants {
            if let Some(item) = state.evidence_item(&participant.evidence_id) {
                causes.cite(&item.provenance.cite);
                causes.cite(&item.status_provenance().cite);
            }
        }
        if let Some(old) = adjudication
            .supersedes
            .as_ref()
            .and_then(|id| state.conflict(id))
        {
            causes.cite(&old.decision_provenance().cite);
        }
    }
    for id in &event.dissolved {
        if let Some(old) = state.conflict(id) {
            causes.cite(&old.decision_provenance().cite);
        }
    }
    causes.event(Event::ConflictsAdjudicated(event))
}

fn resolve_conflict(
    state: &TaskState,
    c: &ResolveConflict,
    limits: &Limits,
) -> Result<Vec<NewEvent>, Refusal> {
    let reason = required_text(
        "reason",
        &c.reason,
        "reason_chars_max",
        limits.reason_chars_max,
    )?;
    let id = ConflictId::new(c.conflict_id.trim());
    let Some(conflict) = state.conflict(&id) else {
        return Err(Refusal::NotFound {
            what: "conflict",
            id: crate::text::shorten(c.conflict_id.trim(), 64),
        });
    };
    check_decider(state, c, &id)?;
    if let Some(newer) = &conflict.superseded_by {
        return Err(Refusal::invalid(
            "conflict_id",
            format!(
                "{id} was superseded by {newer} after its scope changed; decide {newer} instead"
            ),
        ));
    }
    if conflict.dissolved.is_some() {
        return Err(Refusal::invalid(
            "conflict_id",
            format!("{id} was dissolved: its scope no longer has items on both sides"),
        ));
    }
    let now = adjudicate::participants(state, &conflict.adjudication.scope);
    let unchanged = now.len() == conflict.adjudication.participants.len()
        && now
            .iter()
            .zip(&conflict.adjudication.participants)
            .all(|(a, b)| a.evidence_id == b.evidence_id && a.side == b.side);
    if !unchanged {
        return Err(Refusal::WorkflowOrder {
            message: format!(
                "the items of {id}'s scope changed since it was adjudicated; run the conflict rules and decide the fresh adjudication"
            ),
            pending_actions: vec![PendingAction::new(
                Tool::EvaluationConflictResolution,
                format!("the evidence of {id}'s scope changed"),
            )],
        });
    }
    let event = decision_event(conflict, id, c, reason.to_string());
    let mut causes = Causes::new(state);
    causes.cite(&conflict.decision_provenance().cite);
    Ok(vec![causes.event(event)])
}

/// Refuses a decision that is not a person's on a task that takes decisions only from a person.
fn check_decider(state: &TaskState, c: &ResolveConflict, id: &ConflictId) -> Result<(), Refusal> {
    let person_only = state
        .task()
        .is_some_and(|t| t.conflict_decisions == Some(ConflictDecisions::Person));
    let by_person = c
        .decided_by
        .as_ref()
        .is_some_and(|d| d.by == crate::event::DecidedBy::Person);
    if person_only && !by_person {
        return Err(Refusal::PersonDecisionRequired {
            task_id: state.task().map(|t| t.task_id.clone()).unwrap_or_default(),
            conflict_id: id.to_string(),
        });
    }
    Ok(())
}

/// The event of a decision on `conflict`: a resolution when the rules left it pending, else an
/// appeal of what they decided.
fn decision_event(
    conflict: &crate::state::ConflictRecord,
    id: ConflictId,
    c: &ResolveConflict,
    reason: String,
) -> Event {
    let previous_outcome = conflict.resolution();
    let automatic = &conflict.adjudication;
    if automatic.tier == Tier::Pending {
        Event::ConflictResolved(ConflictResolved {
            conflict_id: id,
            outcome: c.winner,
            reason,
            previous_outcome,
            decided_by: c.decided_by.clone(),
        })
    } else {
        Event::AdjudicationAppealed(AdjudicationAppealed {
            conflict_id: id,
            overturned_tier: automatic.tier,
            overturned_winner: automatic.winner,
            outcome: c.winner,
            reason,
            previous_outcome,
            decided_by: c.decided_by.clone(),
        })
    }
}

fn matrix_event(state: &TaskState, before: u64) -> NewEvent {
    let event = matrix::matrix(state);
    let mut causes = Causes::at(before);
    if let Some(run) = &state.marks().conflicts_run {
        causes.cite(run);
    }
    for conflict in state.current_conflicts() {
        causes.cite(&conflict.decision_provenance().cite);
    }
    causes.event(Event::DecisionMatrixBuilt(event))
}

fn conclusion_event(state: &TaskState, before: u64) -> NewEvent {
    let event = conclude::conclusion(state);
    let mut causes = Causes::at(before);
    if let Some(matrix) = &state.marks().matrix_built {
        causes.cite(matrix);
    }
    for (item, _) in conclude::used(state) {
        causes.cite(&item.status_provenance().cite);
    }
    for conflict in state.current_conflicts() {
        causes.cite(&conflict.decision_provenance().cite);
    }
    causes.event(Event::ConclusionIssued(event))
}

fn generate_conclusion(
    state: &TaskState,
    task: &TaskInfo,
    ctx: &CommandContext,
) -> Result<Vec<NewEvent>, Refusal> {
    if task.mode == Mode::ToolConstrained {
        require(
            state,
            task,
            Tool::EvaluationGenerateConclusion,
            &[Step::Screen, Step::ConflictResolution, Step::Matrix],
        )?;
        return Ok(vec![conclusion_event(state, state.version())]);
    }
    // Agent-led: run whatever the rules need first, folding each event into a scratch copy so
    // the next step sees it, exactly as a replay will.
    let before = state.version();
    let mut scratch = state.clone();
    let mut events = Vec::new();
    if workflow::conflicts_outdated(&scratch) {
        let run = conflict_run(&scratch, before);
        fold(&mut scratch, &run.event, ctx);
        events.push(run);
    }
    if workflow::matrix_outdated(&scratch) {
        let built = matrix_event(&scratch, before);
        fold(&mut scratch, &built.event, ctx);
        events.push(built);
    }
    events.push(conclusion_event(&scratch, before));
    Ok(events)
}

/// Folds a batch event into the scratch state with the metadata it will have once appended,
/// except for its seq and hash, which only the ledger knows.
fn fold(scratch: &mut TaskState, event: &Event, ctx: &CommandContext) {
    let meta = EventMeta {
        seq: scratch.last_seq().map_or(0, |s| s.saturating_add(1)),
        stream_version: scratch.version().saturating_add(1),
        hash: [0; 32],
        recorded_at: ctx.now,
        actor: String::new(),
    };
    evolve(scratch, event, &meta);
}

fn tool_call(c: &RecordExternalToolCall, limits: &Limits) -> Result<Vec<NewEvent>, Refusal> {
    let tool = required_text("tool", &c.tool, "name_chars_max", limits.name_chars_max)?;
    let contract_version = required_text(
        "contract_version",
        &c.contract_version,
        "name_chars_max",
        limits.name_chars_max,
    )?;
    let error = match &c.error {
        Some(error) => Some(
            required_text("error", error, "reason_chars_max", limits.reason_chars_max)?.to_string(),
        ),
        None => None,
    };
    if c.reply_hash.is_none() && error.is_none() {
        return Err(Refusal::invalid(
            "reply_hash",
            "give the reply's hash, or the error when the call failed",
        ));
    }
    Ok(vec![NewEvent {
        event: Event::ExternalToolCalled(ExternalToolCalled {
            tool: tool.to_string(),
            contract_version: contract_version.to_string(),
            arguments_hash: c.arguments_hash,
            reply_hash: c.reply_hash,
            error,
        }),
        causation: Vec::new(),
    }])
}

fn close(c: &CloseTask, limits: &Limits) -> Result<Vec<NewEvent>, Refusal> {
    let reason = match &c.reason {
        Some(reason) if !reason.trim().is_empty() => Some(
            required_text(
                "reason",
                reason,
                "reason_chars_max",
                limits.reason_chars_max,
            )?
            .to_string(),
        ),
        _ => None,
    };
    Ok(vec![NewEvent {
        event: Event::TaskClosed(TaskClosed { reason }),
        causation: Vec::new(),
    }])
}
