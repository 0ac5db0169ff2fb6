//! The evidence tools: add an item the client found, retract one, screen candidates, list a
//! task's items; and the relevance the task's rule set computes for a text.

use research::command::{
    AddEvidence, Command, EvidenceInput, RetractEvidence, ScopeChoice, ScreenEvidence,
    ScreeningInput,
};
use research::event::{Event, EvidenceStatus, RelevanceBasis, ScreeningDecision};
use serde_json::{Value, json};

use super::{Call, ToolFuture, ToolOutput, base, done, evidence_view, guard, suffix, to_json};
use crate::args::*;
use crate::content::Attachments;
use crate::error::ServiceError;
use crate::service::{Service, Target};

pub(super) fn add<'c>(call: &'c mut Call<'_>, a: AddEvidenceArgs) -> ToolFuture<'c> {
    Box::pin(async move { add_evidence(call, a).await })
}

async fn add_evidence(call: &mut Call<'_>, a: AddEvidenceArgs) -> Result<ToolOutput, ServiceError> {
    let service = call.service;
    let guard = guard(a.expected_version, &a.idempotency_key);
    let written = call
        .write_with_content_async(
            Target::Existing(&a.task_id),
            &guard,
            &mut |state: &research::TaskState, attached: &mut Attachments| {
                let task = state.task().ok_or_else(|| ServiceError::NotFound {
                    resource: "task",
                    id: a.task_id.clone(),
                })?;
                // The text goes with the append of the event that cites it, durable by its sync.
                let content_hash = attached.attach(a.content.as_bytes().to_vec())?;
                let (relevance, relevance_basis, relevance_inputs) = match a.relevance {
                    Some(r) => (r, RelevanceBasis::GivenByClient, None),
                    None => service.computed_relevance(task, None, &a.content)?,
                };
                let summary = match &a.summary {
                    Some(s) => s.clone(),
                    None => sources::summarize(
                        &a.content,
                        usize::try_from(service.options().research.summary_chars_max)
                            .unwrap_or(usize::MAX),
                    ),
                };
                Ok(Command::AddEvidence(AddEvidence {
                    items: vec![EvidenceInput {
                        source: Some(a.source.clone()),
                        url: a.url.clone(),
                        publish_date: a.publish_date.clone(),
                        publish_date_defaulted: a.publish_date_defaulted.unwrap_or(false),
                        source_type: a.source_type.clone(),
                        citation_count: a.citation_count,
                        summary,
                        content_hash,
                        relevance,
                        relevance_basis,
                        relevance_inputs,
                        stance: a.stance.map(Into::into),
                        sub_question: a.sub_question.clone(),
                    }],
                }))
            },
        )
        .await?;
    let id = written
        .events
        .iter()
        .find_map(|(_, _, e)| match e {
            Event::EvidenceAdded(x) => Some(x.evidence_id.as_str().to_owned()),
            _ => None,
        })
        .ok_or_else(|| ServiceError::unavailable("evidence was added but no event says so"))?;
    let mut map = base(&written);
    map.insert("evidence".into(), evidence_view(&written.state, &id));
    let text = format!(
        "Added {id} as a candidate; screen it next.{}",
        suffix(&written)
    );
    map.insert("evidence_id".into(), json!(id));
    Ok(done(map, text))
}

pub(super) fn retract<'c>(call: &'c mut Call<'_>, a: RetractEvidenceArgs) -> ToolFuture<'c> {
    Box::pin(async move { retract_evidence(call, a).await })
}

async fn retract_evidence(
    call: &mut Call<'_>,
    a: RetractEvidenceArgs,
) -> Result<ToolOutput, ServiceError> {
    let guard = guard(a.expected_version, &a.idempotency_key);
    let written = call
        .write_with_content_async(
            Target::Existing(&a.task_id),
            &guard,
            &mut |_: &research::TaskState, _: &mut Attachments| {
                Ok(Command::RetractEvidence(RetractEvidence {
                    evidence_id: a.evidence_id.clone(),
                    reason: a.reason.clone(),
                }))
            },
        )
        .await?;
    let mut map = base(&written);
    map.insert("evidence_id".into(), json!(a.evidence_id));
    map.insert("status".into(), json!("retracted"));
    let text = format!("Retracted {}.{}", a.evidence_id, suffix(&written));
    Ok(done(map, text))
}

pub(super) fn screen<'c>(call: &'c mut Call<'_>, a: ScreenEvidenceArgs) -> ToolFuture<'c> {
    Box::pin(async move { screen_evidence(call, a).await })
}

async fn screen_evidence(
    call: &mut Call<'_>,
    a: ScreenEvidenceArgs,
) -> Result<ToolOutput, ServiceError> {
    let guard = guard(a.expected_version, &a.idempotency_key);
    let written = call
        .write_with_content_async(
            Target::Existing(&a.task_id),
            &guard,
            &mut |state: &research::TaskState, _: &mut Attachments| {
                Ok(screening_command(&a, state))
            },
        )
        .await?;
    // From the events written (or, replayed, the ones the first call wrote).
    let screened_ids: Vec<String> = written
        .events
        .iter()
        .filter_map(|(_, _, e)| match e {
            Event::EvidenceScreened(x) => Some(x.evidence_id.as_str().to_owned()),
            _ => None,
        })
        .collect();
    let views = written.state.evidence_views();
    let status_of = |id: &str| {
        views
            .iter()
            .find(|v| v.item.evidence_id.as_str() == id)
            .map_or("unknown", |v| v.status.name())
    };
    let screened: Vec<Value> = screened_ids
        .iter()
        .map(|id| json!({"evidence_id": id, "status": status_of(id)}))
        .collect();
    let remaining = views
        .iter()
        .filter(|v| matches!(v.status, EvidenceStatus::Candidate))
        .count();
    let adopted = screened_ids
        .iter()
        .filter(|id| status_of(id) == "adopted")
        .count();
    let mut map = base(&written);
    let text = format!(
        "Screened {} item(s): {adopted} adopted, {} rejected; {remaining} candidate(s) left.{}",
        screened.len(),
        screened.len() - adopted,
        suffix(&written)
    );
    map.insert("screened".into(), Value::Array(screened));
    map.insert("candidates_remaining".into(), json!(remaining));
    Ok(done(map, text))
}

/// The screening `a` asks for, on the task as it stands when the write is made: its decisions,
/// and a rejection of every other candidate when it asks for one.
fn screening_command(a: &ScreenEvidenceArgs, state: &research::TaskState) -> Command {
    let mut decisions: Vec<ScreeningInput> = a.decisions.iter().map(screening).collect();
    if let Some(reason) = &a.reject_remaining {
        let named: std::collections::HashSet<&str> =
            a.decisions.iter().map(|d| d.evidence_id.as_str()).collect();
        for view in state.evidence_views() {
            let id = view.item.evidence_id.as_str();
            if matches!(view.status, EvidenceStatus::Candidate) && !named.contains(id) {
                decisions.push(ScreeningInput {
                    evidence_id: id.to_owned(),
                    decision: ScreeningDecision::Reject,
                    stance: None,
                    sub_question: ScopeChoice::Keep,
                    reason: reason.clone(),
                });
            }
        }
    }
    Command::ScreenEvidence(ScreenEvidence { decisions })
}

/// One screening decision as the domain takes it.
fn screening(d: &ScreeningArg) -> ScreeningInput {
    ScreeningInput {
        evidence_id: d.evidence_id.clone(),
        decision: if d.adopt {
            ScreeningDecision::Adopt
        } else {
            ScreeningDecision::Reject
        },
        stance: d.stance.map(Into::into),
        sub_question: match &d.sub_question {
            None => ScopeChoice::Keep,
            Some(None) => ScopeChoice::MainQuestion,
            Some(Some(id)) => ScopeChoice::SubQuestion(id.clone()),
        },
        reason: d.reason.clone().unwrap_or_default(),
    }
}

/// The items a page of `retrieval_list_candidates` may hold at most.
const LIST_LIMIT_MAX: u32 = 100;

pub(super) fn list_candidates(
    call: &mut Call<'_>,
    a: ListCandidatesArgs,
) -> Result<ToolOutput, ServiceError> {
    let state = call.service.state(&a.task_id)?;
    if state.task().is_none() {
        return Err(ServiceError::NotFound {
            resource: "task",
            id: a.task_id.clone(),
        });
    }
    let page = Page::check(&a)?;
    let matching: Vec<_> = state
        .evidence_views()
        .into_iter()
        .filter(|v| page.status == "all" || v.status.name() == page.status)
        .filter(|v| match a.scope.as_deref() {
            None => true,
            Some("main") => v.item.sub_question.is_none(),
            Some(id) => v
                .item
                .sub_question
                .as_ref()
                .is_some_and(|q| q.as_str() == id),
        })
        .collect();
    let shown: Vec<_> = matching.iter().skip(page.start).take(page.limit).collect();
    let next = page.start + shown.len();
    let items: Vec<Value> = shown
        .iter()
        .map(|v| {
            if page.full {
                to_json(v)
            } else {
                super::compact_views::item(v)
            }
        })
        .collect();
    let range = if matching.len() > shown.len() {
        format!(", {} to {} shown", page.start + 1, next)
    } else {
        String::new()
    };
    let mut lines = vec![format!(
        "{} {} item(s) in task {}{range}:",
        matching.len(),
        page.status,
        a.task_id
    )];
    lines.extend(shown.iter().map(|v| super::compact_views::line(v)));
    let mut map = serde_json::Map::new();
    map.insert("task_id".into(), json!(a.task_id));
    map.insert("session_version".into(), json!(state.version()));
    map.insert("total".into(), json!(matching.len()));
    map.insert("items".into(), Value::Array(items));
    if next < matching.len() {
        map.insert("next_cursor".into(), json!(format!("at-{next}")));
        lines.push(format!("More: call again with cursor \"at-{next}\"."));
    }
    Ok(done(map, lines.join("\n")))
}

/// A page of `retrieval_list_candidates` as asked, checked.
struct Page<'a> {
    status: &'a str,
    full: bool,
    start: usize,
    limit: usize,
}

impl<'a> Page<'a> {
    fn check(a: &'a ListCandidatesArgs) -> Result<Page<'a>, ServiceError> {
        let status = a.status.as_deref().unwrap_or("candidate");
        let known = [
            "candidate",
            "adopted",
            "rejected",
            "retracted",
            "overruled",
            "all",
        ];
        if !known.contains(&status) {
            return Err(ServiceError::invalid(
                "status",
                format!("{status:?} is not one of {}", known.join(", ")),
            ));
        }
        let full = match a.detail.as_deref() {
            None | Some("compact") => false,
            Some("full") => true,
            Some(other) => {
                return Err(ServiceError::invalid(
                    "detail",
                    format!("{other:?} is neither compact nor full"),
                ));
            }
        };
        let limit = a.limit.unwrap_or(20);
        if limit == 0 || limit > LIST_LIMIT_MAX {
            return Err(ServiceError::LimitExceeded {
                limit: "list_items_max".into(),
                max: u64::from(LIST_LIMIT_MAX),
                actual: u64::from(limit),
            });
        }
        let start = match &a.cursor {
            None => 0,
            Some(c) => c
                .strip_prefix("at-")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| ServiceError::invalid("cursor", "not a cursor this tool gave"))?,
        };
        Ok(Page {
            status,
            full,
            start,
            limit: limit as usize,
        })
    }
}

impl Service {
    /// The relevance the task's rule set computes for `text` when neither a source nor the
    /// client scored it: under `v1` IDF coverage of the question's terms; under `v2` topicality
    /// over the content terms of the question and of `query` (the search that found it), with
    /// the inputs to record.
    pub(crate) fn computed_relevance(
        &self,
        task: &research::state::TaskInfo,
        query: Option<&str>,
        text: &str,
    ) -> Result<
        (
            f64,
            RelevanceBasis,
            Option<research::rules::RelevanceInputs>,
        ),
        ServiceError,
    > {
        let Some(params) = &task.rules.v2 else {
            return Ok((
                self.coverage(&task.question, text)?,
                RelevanceBasis::IdfCoverage,
                None,
            ));
        };
        let (terms, from_question) = v2_terms(&task.question, query);
        let (docs, freqs) = self
            .corpus()
            .term_frequencies(&terms)
            .map_err(ServiceError::unavailable)?;
        let found = sources::terms_found(text, &terms);
        let inputs = v2_inputs(docs, &freqs, &found, &from_question, query);
        let relevance = research::rules::v2::topical_relevance(&inputs, params);
        Ok((relevance, RelevanceBasis::Topicality, Some(inputs)))
    }

    /// IDF coverage of the question's terms in `text`, over the corpus (SPEC §4); with an empty
    /// corpus every term weighs `ln 2`, which is plain coverage.
    pub(crate) fn coverage(&self, question: &str, text: &str) -> Result<f64, ServiceError> {
        let terms = question_terms_v1(question);
        let (docs, freqs) = self
            .corpus()
            .term_frequencies(&terms)
            .map_err(ServiceError::unavailable)?;
        let question_terms: Vec<research::rules::QuestionTerm<'_>> = freqs
            .iter()
            .map(|f| research::rules::QuestionTerm {
                term: &f.term,
                doc_freq: f.doc_freq,
            })
            .collect();
        let tokens = sources::tokenize(text);
        let text_terms: Vec<&str> = tokens.iter().map(String::as_str).collect();
        Ok(research::rules::idf_coverage(
            &question_terms,
            &text_terms,
            docs,
        ))
    }
}

/// The terms `v1` weighs: every token of the question, once, in the order first seen.
pub(super) fn question_terms_v1(question: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for t in sources::tokenize(question) {
        if !terms.contains(&t) {
            terms.push(t);
        }
    }
    terms
}

/// The terms `v2` relevance weighs: the question's content terms in the order first seen, then
/// the query's that the question lacks; and for each whether it is the question's.
pub(super) fn v2_terms(question: &str, query: Option<&str>) -> (Vec<String>, Vec<bool>) {
    let mut terms = sources::content_terms(question);
    let mut from_question = vec![true; terms.len()];
    if let Some(query) = query {
        for term in sources::content_terms(query) {
            if !terms.contains(&term) {
                terms.push(term);
                from_question.push(false);
            }
        }
    }
    (terms, from_question)
}

/// The inputs of `v2` relevance from the corpus statistics of [`v2_terms`]' terms and whether
/// the text holds each.
pub(super) fn v2_inputs(
    corpus_docs: u64,
    freqs: &[sources::TermFrequency],
    found: &[bool],
    from_question: &[bool],
    query: Option<&str>,
) -> research::rules::RelevanceInputs {
    let query_terms = query.map(sources::content_terms).unwrap_or_default();
    research::rules::RelevanceInputs {
        corpus_docs,
        terms: freqs
            .iter()
            .enumerate()
            .map(|(i, f)| research::rules::TermInput {
                term: f.term.clone(),
                doc_freq: f.doc_freq,
                in_question: from_question.get(i).copied().unwrap_or(false),
                in_query: query_terms.contains(&f.term),
                found: found.get(i).copied().unwrap_or(false),
            })
            .collect(),
    }
}
