//! The search tool: ask the sources (the embedded corpus, registered evidence sources), record
//! the search, and fold its hits into the task as candidates.

use research::TaskState;
use research::command::{Command, EvidenceInput, RecordSearch, SearchCandidate};
use research::event::{Event, RelevanceBasis};
use serde_json::{Value, json};

use super::evidence::{question_terms_v1, v2_inputs, v2_terms};
use super::{Call, ToolOutput, ToolProgress, base, done, guard, suffix, to_json};
use crate::args::*;
use crate::error::ServiceError;
use crate::service::{Service, Target};

pub(super) fn search_evidence(
    call: &mut Call<'_>,
    a: SearchEvidenceArgs,
) -> Result<ToolOutput, ServiceError> {
    let service = call.service;
    let asked = Asked::check(service, &a)?;
    let total = asked.sources.len() as u64;
    // External sources are asked first, each on its own: one that fails is reported and the
    // others still count. Their calls are recorded in the task as they happen.
    let external = ask_external(call, &a, &asked)?;
    if asked.corpus {
        (call.progress)(ToolProgress {
            progress: asked.external.len() as u64,
            total: Some(total),
            message: format!("searching the corpus ({total}/{total})"),
        });
    }
    let written = call.write(
        Target::Existing(&a.task_id),
        &guard(a.expected_version, &a.idempotency_key),
        &mut |state| record(service, state, &a, &asked, &external.candidates),
    )?;
    let recorded = written.events.iter().find_map(|(_, _, e)| match e {
        Event::SearchRecorded(s) => Some(s.clone()),
        _ => None,
    });
    let Some(search) = recorded else {
        return Err(ServiceError::unavailable(
            "a search was recorded but no event says so",
        ));
    };
    let from_corpus = search
        .results
        .iter()
        .filter(|h| h.origin == "corpus")
        .count();
    (call.progress)(ToolProgress {
        progress: total,
        total: Some(total),
        message: search_summary(
            asked.corpus.then_some(from_corpus),
            search.results.len() - from_corpus,
            external.failed.len(),
        ),
    });
    Ok(search_result(&written, &search, external))
}

/// The sources a search asks, checked: each known, none twice, the corpus present when asked;
/// and the number of results wanted of each.
struct Asked {
    sources: Vec<String>,
    external: Vec<sources::contracts::Contract>,
    corpus: bool,
    limit: u32,
}

impl Asked {
    fn check(service: &Service, a: &SearchEvidenceArgs) -> Result<Asked, ServiceError> {
        let sources_asked = a
            .sources
            .clone()
            .unwrap_or_else(|| vec!["corpus".to_owned()]);
        if sources_asked.is_empty() {
            return Err(ServiceError::invalid("sources", "ask at least one source"));
        }
        let mut seen_sources = std::collections::BTreeSet::new();
        if let Some(repeated) = sources_asked
            .iter()
            .find(|s| !seen_sources.insert(s.as_str()))
        {
            return Err(ServiceError::invalid(
                "sources",
                format!("{repeated} is asked twice"),
            ));
        }
        let mut external = Vec::new();
        for source in &sources_asked {
            if source == "corpus" {
                if let Some(why) = service.corpus_missing() {
                    return Err(ServiceError::SourceFailed {
                        source_name: "corpus".into(),
                        message: why.to_owned(),
                    });
                }
                continue;
            }
            let contract = service.registry().get(source).cloned();
            match contract {
                Some(c) if sources::contracts::call::is_evidence_source(&c) => external.push(c),
                _ => return Err(unknown_source(service, source)),
            }
        }
        let limit_max = service.options().corpus.search_results_max as u32;
        let limit = a.limit.unwrap_or(service.options().search_results_default);
        if limit == 0 || limit > limit_max {
            return Err(ServiceError::LimitExceeded {
                limit: "search_results_max".into(),
                max: u64::from(limit_max),
                actual: u64::from(limit),
            });
        }
        Ok(Asked {
            corpus: sources_asked.iter().any(|s| s == "corpus"),
            sources: sources_asked,
            external,
            limit,
        })
    }
}

/// The refusal of a source this service does not have, naming those it has.
fn unknown_source(service: &Service, source: &str) -> ServiceError {
    let known: Vec<String> = std::iter::once("corpus".to_owned())
        .chain(
            service
                .registry()
                .tools()
                .values()
                .filter(|c| sources::contracts::call::is_evidence_source(c))
                .map(|c| c.name.clone()),
        )
        .collect();
    ServiceError::invalid(
        "sources",
        format!(
            "unknown source {source:?}; the sources are: {}",
            known.join(", ")
        ),
    )
}

/// What the external sources gave: candidates, the sources that failed, the items dropped.
struct External {
    candidates: Vec<SearchCandidate>,
    failed: Vec<Value>,
    dropped: Vec<Value>,
}

fn ask_external(
    call: &mut Call<'_>,
    a: &SearchEvidenceArgs,
    asked: &Asked,
) -> Result<External, ServiceError> {
    let mut out = External {
        candidates: Vec::new(),
        failed: Vec::new(),
        dropped: Vec::new(),
    };
    if asked.external.is_empty() {
        return Ok(out);
    }
    let total = asked.sources.len() as u64;
    let state = call.service.state(&a.task_id)?;
    let query = search_query(&state, a)?;
    for (i, contract) in asked.external.iter().enumerate() {
        (call.progress)(ToolProgress {
            progress: i as u64,
            total: Some(total),
            message: format!("asking {} ({}/{total})", contract.name, i + 1),
        });
        let asked_one = call.service.search_external(
            call.caller,
            contract,
            &state,
            &query,
            asked.limit,
            a.sub_question.as_ref(),
        );
        match asked_one {
            Ok((candidates, dropped)) => {
                out.candidates.extend(candidates);
                out.dropped.extend(
                    dropped
                        .into_iter()
                        .map(|d| json!({"source": contract.name, "item": d})),
                );
            }
            Err(e) => out
                .failed
                .push(json!({"source": contract.name, "error": e.to_json()})),
        }
    }
    if !asked.corpus && out.candidates.is_empty() && !out.failed.is_empty() {
        let first = &out.failed[0];
        return Err(ServiceError::SourceFailed {
            source_name: first["source"].as_str().unwrap_or_default().to_owned(),
            message: first["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        });
    }
    Ok(out)
}

/// The search to record, over the task as the write finds it: the external candidates, then
/// the corpus's hits scored by the task's rule set, by reliability pre-score.
fn record(
    service: &Service,
    state: &TaskState,
    a: &SearchEvidenceArgs,
    asked: &Asked,
    external: &[SearchCandidate],
) -> Result<Command, ServiceError> {
    let task = state.task().ok_or_else(|| ServiceError::NotFound {
        resource: "task",
        id: a.task_id.clone(),
    })?;
    let query = search_query(state, a)?;
    let mut results = external.to_vec();
    let mut index_state = String::new();
    if asked.corpus {
        let (hits, state_id) = corpus_hits(service, task, &query, asked.limit, a)?;
        index_state = state_id;
        results.extend(hits);
    }
    // Candidates from every source by reliability pre-score; among equals, the order each
    // source gave.
    let reliability = |c: &SearchCandidate| {
        let authority = c
            .evidence
            .source_type
            .parse::<research::rules::SourceType>()
            .map_or(0.0, |t| task.rules.authority_of(t));
        research::rules::reliability(authority, c.evidence.citation_count)
    };
    results.sort_by(|x, y| reliability(y).total_cmp(&reliability(x)));
    Ok(Command::RecordSearch(RecordSearch {
        query,
        sources: asked.sources.clone(),
        index_state,
        results,
    }))
}

/// The corpus's hits for `query` as candidates, and the index state they came from. `v1`
/// weighs every term of the question; `v2` the content terms of the question and of the query.
fn corpus_hits(
    service: &Service,
    task: &research::state::TaskInfo,
    query: &str,
    limit: u32,
    a: &SearchEvidenceArgs,
) -> Result<(Vec<SearchCandidate>, String), ServiceError> {
    let (terms, from_question) = if task.rules.is_v2() {
        v2_terms(&task.question, Some(query))
    } else {
        let terms = question_terms_v1(&task.question);
        let from_question = vec![true; terms.len()];
        (terms, from_question)
    };
    let result = service
        .corpus()
        .search_with_rules(query, limit as usize, &terms, &task.rules)
        .map_err(|e| match e {
            sources::SearchError::Corpus(inner) => ServiceError::SourceFailed {
                source_name: "corpus".into(),
                message: inner.to_string(),
            },
            other => ServiceError::invalid("query", other.to_string()),
        })?;
    let mut out = Vec::new();
    for hit in result.candidates() {
        let mut candidate = corpus_candidate(service, hit, a.sub_question.as_ref())?;
        if let Some(params) = &task.rules.v2 {
            let inputs = v2_inputs(
                result.corpus_docs,
                &result.question_terms,
                &hit.terms_found,
                &from_question,
                Some(query),
            );
            candidate.evidence.relevance = research::rules::v2::topical_relevance(&inputs, params);
            candidate.evidence.relevance_basis = RelevanceBasis::Topicality;
            candidate.evidence.relevance_inputs = Some(inputs);
        }
        out.push(candidate);
    }
    Ok((out, result.index_state.id.clone()))
}

/// The tool's result: the search as recorded, each hit as the compact item it became (flagged
/// `already_in_task` when an earlier search had found it), what is the same for every hit of a
/// source stated once, and the candidates in the text too.
fn search_result(
    written: &crate::service::Written,
    search: &research::event::SearchRecorded,
    external: External,
) -> ToolOutput {
    let views = written.state.evidence_views();
    let mut candidates = Vec::with_capacity(search.results.len());
    let mut lines = Vec::with_capacity(search.results.len() + 1);
    let mut basis = serde_json::Map::new();
    for hit in &search.results {
        let Some(view) = views.iter().find(|e| e.item.evidence_id == hit.evidence_id) else {
            continue;
        };
        let mut item = super::compact_views::item(view);
        if let Value::Object(m) = &mut item {
            // Its own source's id, whichever search first found it.
            m.insert("result_id".into(), json!(hit.result_id));
            if hit.folded {
                m.insert("already_in_task".into(), json!(true));
            }
        }
        basis
            .entry(view.item.origin.clone())
            .or_insert_with(|| to_json(&view.item.relevance_basis));
        let seen = if hit.folded {
            " (already in the task)"
        } else {
            ""
        };
        lines.push(format!("{}{seen}", super::compact_views::line(view)));
        candidates.push(item);
    }
    let new = search.results.iter().filter(|h| !h.folded).count();
    let mut text = format!(
        "Found {} result(s) for {:?}; {new} new candidate(s) to screen with synthesis_screen_evidence.{}{}",
        candidates.len(),
        search.query,
        if external.failed.is_empty() {
            String::new()
        } else {
            format!(" {} source(s) failed.", external.failed.len())
        },
        suffix(written)
    );
    for line in &lines {
        text.push('\n');
        text.push_str(line);
    }
    let mut map = base(written);
    map.insert("search_id".into(), json!(search.search_id));
    map.insert("query".into(), json!(search.query));
    map.insert("sources".into(), json!(search.sources));
    map.insert("index_state".into(), json!(search.index_state));
    map.insert("relevance_basis".into(), Value::Object(basis));
    map.insert("candidates".into(), Value::Array(candidates));
    if !external.failed.is_empty() {
        map.insert("failed_sources".into(), Value::Array(external.failed));
    }
    if !external.dropped.is_empty() {
        map.insert("dropped_items".into(), Value::Array(external.dropped));
    }
    done(map, text)
}

/// A corpus hit as a search candidate, its full text stored first.
fn corpus_candidate(
    service: &Service,
    hit: &sources::SearchHit,
    sub_question: Option<&String>,
) -> Result<SearchCandidate, ServiceError> {
    let content = service
        .corpus()
        .content(&hit.content_hash)
        .map_err(ServiceError::unavailable)?
        .ok_or_else(|| ServiceError::SourceFailed {
            source_name: "corpus".into(),
            message: format!("document {} has no stored text", hit.id),
        })?;
    // Durable before the event that cites it.
    let stored = service
        .blobs()
        .put(content.as_bytes())
        .map_err(ServiceError::unavailable)?;
    if stored != hit.content_hash {
        return Err(ServiceError::SourceFailed {
            source_name: "corpus".into(),
            message: format!(
                "document {} does not have the content hash it claims",
                hit.id
            ),
        });
    }
    Ok(SearchCandidate {
        result_id: hit.id.clone(),
        origin: "corpus".into(),
        raw_score: hit.raw_score,
        normalised_score: hit.normalised_score,
        evidence: EvidenceInput {
            source: hit.source.clone(),
            url: hit.url.clone(),
            publish_date: hit.publish_date.to_string(),
            publish_date_defaulted: hit.defaulted.publish_date,
            source_type: hit.source_type.name().to_owned(),
            citation_count: hit.citation_count,
            summary: hit.summary.clone(),
            content_hash: hit.content_hash,
            relevance: hit.relevance,
            relevance_basis: RelevanceBasis::IdfCoverage,
            relevance_inputs: None,
            stance: None,
            sub_question: sub_question.cloned(),
        },
    })
}

/// A search's query: the one given, else the sub-question's text, else the task's question.
fn search_query(state: &TaskState, a: &SearchEvidenceArgs) -> Result<String, ServiceError> {
    let task = state.task().ok_or_else(|| ServiceError::NotFound {
        resource: "task",
        id: a.task_id.clone(),
    })?;
    let sub_question_text = match &a.sub_question {
        None => None,
        Some(id) => Some(
            state
                .sub_questions()
                .iter()
                .find(|q| q.sub_question.id.as_str() == id)
                .map(|q| q.sub_question.text.clone())
                .ok_or_else(|| ServiceError::NotFound {
                    resource: "sub-question",
                    id: id.clone(),
                })?,
        ),
    };
    Ok(a.query
        .clone()
        .or(sub_question_text)
        .unwrap_or_else(|| task.question.clone()))
}

/// The last progress report of a search: what each kind of source gave, once it is recorded.
fn search_summary(corpus: Option<usize>, external: usize, failed: usize) -> String {
    let mut parts = Vec::new();
    if let Some(n) = corpus {
        parts.push(format!("corpus: {n} candidate(s)"));
    }
    if external > 0 || failed > 0 {
        parts.push(format!(
            "external sources: {external} candidate(s), {failed} failed"
        ));
    }
    parts.push("recorded".into());
    parts.join("; ")
}
