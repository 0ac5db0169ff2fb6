//! The search tool: ask the sources (the embedded corpus, registered evidence sources), record
//! the search, and fold its hits into the task as candidates; or, as a preview, record the
//! search and show its hits, and later add those chosen as candidates.

use research::TaskState;
use research::command::{Command, EvidenceInput, RecordSearch, SearchCandidate};
use research::event::{Event, RelevanceBasis};
use serde_json::{Value, json};

use super::evidence::{question_terms_v1, v2_inputs, v2_terms};
use super::{Call, ToolOutput, ToolProgress, base, done, guard, suffix, to_json};
use crate::args::*;
use crate::content::Attachments;
use crate::error::ServiceError;
use crate::service::{KeyHold, Service, Target};

pub(super) fn search_evidence(
    call: &mut Call<'_>,
    a: SearchEvidenceArgs,
) -> Result<ToolOutput, ServiceError> {
    let service = call.service;
    let asked = Asked::check(service, &a)?;
    let guard = guard(a.expected_version, &a.idempotency_key);
    // A retry of a search that was recorded is answered from the record before a registered
    // source is asked again: asking would take as long as the first time (past the request's
    // time limit again, for a slow source) and record calls the retry does not make. A retry
    // sent while the first search is still asking waits for it. The key stays held until this
    // search has written.
    let _held = match asked.external.is_empty() {
        true => None,
        false => match call.hold_key(&guard)? {
            KeyHold::Earlier(written) => {
                let search = recorded_by(&written)?;
                return Ok(search_result(&written, &search, no_external()));
            }
            KeyHold::Held(held) => held,
        },
    };
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
    // A preview records the search without its hits, and shows them.
    let mut previewed = Vec::new();
    let written = call.write_with_content(
        Target::Existing(&a.task_id),
        &guard,
        &mut |state, attached| {
            attached.attach_all(&external.texts);
            let mut search = record(service, state, &a, &asked, &external, attached)?;
            if asked.preview {
                previewed = std::mem::take(&mut search.results);
            }
            Ok(Command::RecordSearch(search))
        },
    )?;
    let search = recorded_by(&written)?;
    if asked.preview {
        if written.replayed {
            previewed = preview_again(service, &written.state, &a, &asked)?;
        }
        return Ok(preview_result(&written, &search, &previewed));
    }
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

/// The search a write recorded.
fn recorded_by(
    written: &crate::service::Written,
) -> Result<research::event::SearchRecorded, ServiceError> {
    let recorded = written.events.iter().find_map(|(_, _, e)| match e {
        Event::SearchRecorded(s) => Some(s.clone()),
        _ => None,
    });
    recorded.ok_or_else(|| ServiceError::unavailable("a search was recorded but no event says so"))
}

/// The sources a search asks, checked: each known, none twice, the corpus present when asked;
/// and the number of results wanted of each.
struct Asked {
    sources: Vec<String>,
    external: Vec<sources::contracts::Contract>,
    corpus: bool,
    limit: u32,
    preview: bool,
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
        check_preview(a, &external)?;
        let limit_max = service.options().corpus.search_results_max as u32;
        // Adding from a preview looks for the chosen hits among all a search may return.
        let limit = match &a.from_search {
            Some(_) => limit_max,
            None => a.limit.unwrap_or(service.options().search_results_default),
        };
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
            preview: a.preview.unwrap_or(false),
        })
    }
}

/// The arguments of a preview, and of adding hits from one, checked: both search the corpus
/// alone, and adding repeats the preview's query, naming at least one hit.
fn check_preview(
    a: &SearchEvidenceArgs,
    external: &[sources::contracts::Contract],
) -> Result<(), ServiceError> {
    let preview = a.preview.unwrap_or(false);
    if (preview || a.from_search.is_some()) && !external.is_empty() {
        return Err(ServiceError::invalid(
            "sources",
            "a preview, and adding hits from one, search the corpus alone",
        ));
    }
    match (&a.from_search, &a.result_ids) {
        (None, Some(_)) => Err(ServiceError::invalid(
            "result_ids",
            "name the preview they come from with from_search",
        )),
        (Some(_), _) if preview => Err(ServiceError::invalid(
            "preview",
            "from_search adds hits of a preview made before; leave preview out",
        )),
        (Some(_), _) if a.query.is_some() => Err(ServiceError::invalid(
            "query",
            "from_search repeats that search's query; leave query out",
        )),
        (Some(_), None) => Err(ServiceError::invalid(
            "result_ids",
            "name the hits to add, by result_id",
        )),
        (Some(_), Some(ids)) if ids.is_empty() => Err(ServiceError::invalid(
            "result_ids",
            "name the hits to add, by result_id",
        )),
        _ => Ok(()),
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

/// What the external sources gave: candidates and their full texts, the sources that failed,
/// the items dropped.
struct External {
    candidates: Vec<SearchCandidate>,
    texts: Attachments,
    failed: Vec<Value>,
    dropped: Vec<Value>,
}

/// No external source's answer.
fn no_external() -> External {
    External {
        candidates: Vec::new(),
        texts: Attachments::default(),
        failed: Vec::new(),
        dropped: Vec::new(),
    }
}

fn ask_external(
    call: &mut Call<'_>,
    a: &SearchEvidenceArgs,
    asked: &Asked,
) -> Result<External, ServiceError> {
    let mut out = no_external();
    out.texts = Attachments::new(call.service.options().blobs.content_bytes_max);
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
            Ok((candidates, dropped, texts)) => {
                out.candidates.extend(candidates);
                out.texts.attach_all(&texts);
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
/// the corpus's hits scored by the task's rule set, by reliability pre-score. Each hit's full
/// text is attached for the append.
fn record(
    service: &Service,
    state: &TaskState,
    a: &SearchEvidenceArgs,
    asked: &Asked,
    external: &External,
    attached: &mut Attachments,
) -> Result<RecordSearch, ServiceError> {
    let task = state.task().ok_or_else(|| ServiceError::NotFound {
        resource: "task",
        id: a.task_id.clone(),
    })?;
    let query = search_query(state, a)?;
    let mut results = external.candidates.clone();
    let mut index_state = None;
    if asked.corpus {
        let (mut hits, state_id) = corpus_hits(service, task, &query, asked.limit, a, attached)?;
        if let Some(id) = &a.from_search {
            hits = chosen(state, id, &state_id, hits, a.result_ids.as_deref())?;
        }
        index_state = Some(state_id);
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
    Ok(RecordSearch {
        query,
        sources: asked.sources.clone(),
        // The corpus's state is recorded whether or not the search asked it: a search of
        // registered sources alone is recorded with the corpus as it stood.
        index_state: index_state.unwrap_or_else(|| service.corpus().index_state().id),
        results,
    })
}

/// The hits of a preview whose write was a retry: searched again, as the first call did; no
/// text goes anywhere.
fn preview_again(
    service: &Service,
    state: &TaskState,
    a: &SearchEvidenceArgs,
    asked: &Asked,
) -> Result<Vec<SearchCandidate>, ServiceError> {
    let mut unused = Attachments::new(service.options().blobs.content_bytes_max);
    Ok(record(service, state, a, asked, &no_external(), &mut unused)?.results)
}

/// The hits of the search `search_id` that `result_ids` names, found again by the same query
/// on the same corpus: refused when the corpus changed since (the scores would differ from
/// those the preview showed) or when a hit named is not one of that search's.
fn chosen(
    state: &TaskState,
    search_id: &str,
    index_state: &str,
    hits: Vec<SearchCandidate>,
    result_ids: Option<&[String]>,
) -> Result<Vec<SearchCandidate>, ServiceError> {
    let search = recorded_search(state, search_id)?;
    if search.index_state != index_state {
        return Err(ServiceError::invalid(
            "from_search",
            format!("the corpus changed since {search_id} was made; preview again"),
        ));
    }
    let ids = result_ids.unwrap_or_default();
    if let Some(missing) = ids
        .iter()
        .find(|id| !hits.iter().any(|h| &h.result_id == *id))
    {
        return Err(ServiceError::invalid(
            "result_ids",
            format!("{missing:?} is not a hit of {search_id}"),
        ));
    }
    Ok(hits
        .into_iter()
        .filter(|h| ids.contains(&h.result_id))
        .collect())
}

/// A search the task recorded, by id.
fn recorded_search<'s>(
    state: &'s TaskState,
    search_id: &str,
) -> Result<&'s research::event::SearchRecorded, ServiceError> {
    state
        .searches()
        .iter()
        .map(|s| &s.event)
        .find(|s| s.search_id.as_str() == search_id && s.sources == ["corpus"])
        .ok_or_else(|| ServiceError::NotFound {
            resource: "search",
            id: search_id.to_owned(),
        })
}

/// A preview's result: the search as recorded, and its hits, none of them a candidate; each in
/// the text too, with the result id to add it by.
fn preview_result(
    written: &crate::service::Written,
    search: &research::event::SearchRecorded,
    hits: &[SearchCandidate],
) -> ToolOutput {
    let views = written.state.evidence_views();
    let mut items = Vec::with_capacity(hits.len());
    let mut text = format!(
        "Previewed {} hit(s) for {:?} as {}; none is a candidate: add those you choose with from_search {:?} and their result_ids.{}",
        hits.len(),
        search.query,
        search.search_id.as_str(),
        search.search_id.as_str(),
        suffix(written)
    );
    for hit in hits {
        let e = &hit.evidence;
        let known = views
            .iter()
            .find(|v| v.item.content_hash == e.content_hash)
            .map(|v| v.item.evidence_id.as_str().to_owned());
        let mut item = json!({
            "result_id": hit.result_id,
            "source": e.source,
            "source_type": e.source_type,
            "publish_date": e.publish_date,
            "relevance": super::compact_views::round3(e.relevance),
            "summary": super::compact_views::short(&e.summary),
        });
        let seen = match &known {
            Some(id) => {
                item["in_task_as"] = json!(id);
                format!(" (in the task as {id})")
            }
            None => String::new(),
        };
        text.push_str(&format!(
            "\n{} [{}; {}; {}; relevance {:.2}]{seen} {}",
            hit.result_id,
            e.source_type,
            e.source.as_deref().unwrap_or("unknown"),
            e.publish_date,
            e.relevance,
            super::compact_views::short(&e.summary)
        ));
        items.push(item);
    }
    let mut map = base(written);
    map.insert("search_id".into(), json!(search.search_id));
    map.insert("query".into(), json!(search.query));
    map.insert("index_state".into(), json!(search.index_state));
    map.insert("preview".into(), json!(true));
    map.insert("hits".into(), Value::Array(items));
    done(map, text)
}

/// The corpus's hits for `query` as candidates, and the index state they came from. `v1`
/// weighs every term of the question; `v2` the content terms of the question and of the query.
fn corpus_hits(
    service: &Service,
    task: &research::state::TaskInfo,
    query: &str,
    limit: u32,
    a: &SearchEvidenceArgs,
    attached: &mut Attachments,
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
        let mut candidate = corpus_candidate(service, hit, a.sub_question.as_ref(), attached)?;
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

/// A corpus hit as a search candidate, its full text attached for the append.
fn corpus_candidate(
    service: &Service,
    hit: &sources::SearchHit,
    sub_question: Option<&String>,
    attached: &mut Attachments,
) -> Result<SearchCandidate, ServiceError> {
    let content = service
        .corpus()
        .content(&hit.content_hash)
        .map_err(ServiceError::unavailable)?
        .ok_or_else(|| ServiceError::SourceFailed {
            source_name: "corpus".into(),
            message: format!("document {} has no stored text", hit.id),
        })?;
    // Durable with the event that cites it, by the same sync.
    let stored = attached.attach(content.into_bytes())?;
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
    if let Some(id) = &a.from_search {
        return Ok(recorded_search(state, id)?.query.clone());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_field(arguments: Value) -> Option<String> {
        let a: SearchEvidenceArgs = serde_json::from_value(arguments).unwrap();
        match check_preview(&a, &[]) {
            Ok(()) => None,
            Err(ServiceError::InvalidArgument { field, .. }) => Some(field),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_preview_and_adding_from_one_take_only_the_arguments_that_fit() {
        let cases = [
            (json!({"task_id": "t", "preview": true}), None),
            (json!({"task_id": "t", "preview": true, "query": "q"}), None),
            (
                json!({"task_id": "t", "from_search": "se-1", "result_ids": ["d"]}),
                None,
            ),
            (
                json!({"task_id": "t", "from_search": "se-1"}),
                Some("result_ids"),
            ),
            (
                json!({"task_id": "t", "from_search": "se-1", "result_ids": []}),
                Some("result_ids"),
            ),
            (
                json!({"task_id": "t", "result_ids": ["d"]}),
                Some("result_ids"),
            ),
            (
                json!({"task_id": "t", "from_search": "se-1", "result_ids": ["d"], "query": "q"}),
                Some("query"),
            ),
            (
                json!({"task_id": "t", "from_search": "se-1", "result_ids": ["d"], "preview": true}),
                Some("preview"),
            ),
        ];
        for (arguments, field) in cases {
            assert_eq!(
                refused_field(arguments.clone()),
                field.map(str::to_owned),
                "{arguments}"
            );
        }
    }
}
