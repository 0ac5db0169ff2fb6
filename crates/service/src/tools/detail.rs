//! `retrieval_get_source_detail`: an item as a reader needs it to judge it — the document's
//! title, the text around the passage the item was found by, a page at a time, and why the
//! item scored the relevance it did.
//!
//! A page is counted in characters, not bytes, so a cut never splits one; it is bounded
//! ([`DETAIL_CHARS_MAX`]) because a whole document in one result would cost an assistant more
//! context than any judgement needs.

use research::event::RelevanceBasis;
use research::rules::{RelevanceInputs, V2Parameters};
use research::views::EvidenceView;
use serde_json::{Map, Value, json};

use super::compact_views::round3;
use super::{Call, ToolOutput, done, hex_of, to_json};
use crate::args::SourceDetailArgs;
use crate::error::ServiceError;

/// Characters of text a page holds unless the call asks for fewer or more.
const DETAIL_CHARS_DEFAULT: u32 = 2000;
/// Characters of text a page holds at most.
const DETAIL_CHARS_MAX: u32 = 8000;
/// Characters shown before the passage on a page that starts by default.
const CONTEXT_CHARS_BEFORE: usize = 300;
/// Characters of the summary looked for in the text to find where the passage is.
const PASSAGE_PROBE_CHARS: usize = 60;

pub(super) fn source_detail(
    call: &mut Call<'_>,
    a: SourceDetailArgs,
) -> Result<ToolOutput, ServiceError> {
    let state = call.service.state(&a.task_id)?;
    let view = state
        .evidence_views()
        .into_iter()
        .find(|v| v.item.evidence_id.as_str() == a.evidence_id)
        .ok_or_else(|| ServiceError::NotFound {
            resource: "evidence",
            id: a.evidence_id.clone(),
        })?;
    let bytes = call.service.content(&view.item.content_hash)?;
    let content = String::from_utf8_lossy(&bytes);
    let passage = passage_start(&content, &view.item.summary);
    let page = Window::check(a.offset, a.limit, passage, content.chars().count())?;
    let title = call
        .service
        .corpus()
        .document_with_content(&view.item.content_hash)
        .map_err(ServiceError::unavailable)?
        .map(|d| d.title)
        .filter(|t| !t.trim().is_empty());
    let text: String = content.chars().skip(page.start).take(page.len).collect();
    let explained = state
        .task()
        .and_then(|t| t.rules.v2.as_ref())
        .and_then(|params| explain(&view, params));

    let mut map = Map::new();
    map.insert("task_id".into(), json!(a.task_id));
    map.insert("session_version".into(), json!(state.version()));
    map.insert(
        "content_hash".into(),
        json!(hex_of(&view.item.content_hash)),
    );
    if let Some(title) = &title {
        map.insert("title".into(), json!(title));
    }
    if let Some(at) = passage {
        map.insert("passage_offset".into(), json!(at));
    }
    map.insert("offset".into(), json!(page.start));
    map.insert("content_chars".into(), json!(page.total));
    map.insert("content".into(), json!(text));
    let next = page.next();
    if let Some(next) = next {
        map.insert("next_offset".into(), json!(next));
    }
    let mut lines = vec![heading(&view, title.as_deref(), &page, passage)];
    if let Some(explained) = &explained {
        lines.push(explained.line.clone());
        map.insert("relevance_explained".into(), explained.value.clone());
    }
    lines.push(text);
    if let Some(next) = next {
        lines.push(format!("More: call again with offset {next}."));
    }
    map.insert("evidence".into(), to_json(&view));
    Ok(done(map, lines.join("\n")))
}

/// The first line of the text: which item, which document, which characters.
fn heading(
    view: &EvidenceView,
    title: Option<&str>,
    page: &Window,
    passage: Option<usize>,
) -> String {
    let title = title.map(|t| format!(" {t:?}")).unwrap_or_default();
    let passage = passage
        .map(|p| format!("; the passage starts at {p}"))
        .unwrap_or_default();
    format!(
        "{}{title} [{}; {}]: characters {}–{} of {}{passage}.",
        view.item.evidence_id.as_str(),
        view.item.source,
        view.item.publish_date,
        page.start,
        page.start + page.len,
        page.total,
    )
}

/// Where, in characters, the item's summary begins in its text; `None` when the summary is not
/// taken from the text (a client's own summary).
fn passage_start(content: &str, summary: &str) -> Option<usize> {
    let probe: String = summary
        .trim()
        .trim_end_matches('…')
        .chars()
        .take(PASSAGE_PROBE_CHARS)
        .collect();
    if probe.trim().is_empty() {
        return None;
    }
    content
        .find(probe.as_str())
        .map(|byte| content[..byte].chars().count())
}

/// A page of an item's text, in characters.
#[derive(Debug, PartialEq)]
struct Window {
    start: usize,
    len: usize,
    total: usize,
}

impl Window {
    /// The page asked for, checked: `offset` within the text (by default a little before the
    /// passage), `limit` within [`DETAIL_CHARS_MAX`].
    fn check(
        offset: Option<u64>,
        limit: Option<u32>,
        passage: Option<usize>,
        total: usize,
    ) -> Result<Window, ServiceError> {
        let limit = limit.unwrap_or(DETAIL_CHARS_DEFAULT);
        if limit == 0 || limit > DETAIL_CHARS_MAX {
            return Err(ServiceError::LimitExceeded {
                limit: "detail_chars_max".into(),
                max: u64::from(DETAIL_CHARS_MAX),
                actual: u64::from(limit),
            });
        }
        let start = match offset {
            Some(o) => usize::try_from(o).unwrap_or(usize::MAX),
            None => passage.unwrap_or(0).saturating_sub(CONTEXT_CHARS_BEFORE),
        };
        if start > total {
            return Err(ServiceError::invalid(
                "offset",
                format!("the text has {total} characters"),
            ));
        }
        let len = (limit as usize).min(total - start);
        Ok(Window { start, len, total })
    }

    /// Where the next page starts, if there is one.
    fn next(&self) -> Option<usize> {
        let end = self.start + self.len;
        (end < self.total).then_some(end)
    }
}

/// An item's relevance explained: structured, and as a line of text.
struct Explained {
    value: Value,
    line: String,
}

/// Why a `v2` item scored its relevance, from the inputs recorded with it: each term with its
/// IDF weight, matched or missed, the question's and the query's coverage and the formula's
/// numbers. `None` for an item whose relevance was given or scored by its source, or computed
/// by `v1` (which records no inputs).
fn explain(view: &EvidenceView, params: &V2Parameters) -> Option<Explained> {
    if view.item.relevance_basis != RelevanceBasis::Topicality {
        return None;
    }
    let inputs = view.item.relevance_inputs.as_ref()?;
    let question = Coverage::of(inputs, |t| t.in_question);
    let query = Coverage::of(inputs, |t| t.in_query);
    let has_query = !query.terms.is_empty();
    let mixed = research::rules::v2::mixed_coverage(inputs, params);
    let relevance = view.item.relevance;
    let formula = if has_query {
        let query_part = match params.query_cap {
            Some(cap) => format!(
                "min({w:.3}, {cap} * {q:.3})",
                w = query.value,
                q = question.value
            ),
            None => format!("{w:.3}", w = query.value),
        };
        format!(
            "min(1, ((1 - {qw}) * {q:.3} + {qw} * {query_part}) / {full}) = {relevance:.3}",
            qw = params.query_weight,
            q = question.value,
            full = params.coverage_full,
        )
    } else {
        format!(
            "min(1, {q:.3} / {full}) = {relevance:.3}",
            q = question.value,
            full = params.coverage_full,
        )
    };
    let mut value = Map::new();
    value.insert("corpus_docs".into(), json!(inputs.corpus_docs));
    value.insert("question".into(), question.to_json());
    if has_query {
        value.insert("query".into(), query.to_json());
        value.insert("query_weight".into(), json!(params.query_weight));
        if let Some(cap) = params.query_cap {
            value.insert("query_cap".into(), json!(cap));
        }
    }
    value.insert("coverage_full".into(), json!(params.coverage_full));
    value.insert("mixed".into(), json!(round3(mixed)));
    value.insert("formula".into(), json!(formula));
    let mut line = format!(
        "Relevance {formula}; question terms {}",
        question.terms_line()
    );
    if has_query {
        let same = query
            .terms
            .iter()
            .map(|t| &t.0)
            .eq(question.terms.iter().map(|t| &t.0));
        if same {
            line.push_str(&format!("; query terms the same, {:.3}", query.value));
        } else {
            line.push_str(&format!("; query terms {}", query.terms_line()));
        }
    }
    line.push('.');
    Some(Explained {
        value: Value::Object(value),
        line,
    })
}

/// IDF-weighted coverage of one set of terms, as `v2` computes it, with each term's weight.
struct Coverage {
    value: f64,
    /// Each term of the set, its IDF weight, and whether the item's text holds it.
    terms: Vec<(String, f64, bool)>,
}

impl Coverage {
    /// The coverage [`research::rules::v2::topical_relevance`] computes over the terms `member`
    /// selects, with each of those terms' IDF weights.
    fn of(
        inputs: &RelevanceInputs,
        member: impl Fn(&research::rules::TermInput) -> bool + Copy,
    ) -> Self {
        let (value, _) = research::rules::v2::coverage(inputs, member);
        let terms = inputs
            .terms
            .iter()
            .filter(|t| member(t))
            .map(|t| {
                let weight = research::rules::idf(inputs.corpus_docs, t.doc_freq);
                (t.term.clone(), weight, t.found)
            })
            .collect();
        Coverage { value, terms }
    }

    /// `{coverage, matched: [[term, idf]…], missed: [[term, idf]…]}`, weights to 3 places.
    fn to_json(&self) -> Value {
        let pick = |found: bool| -> Vec<Value> {
            self.terms
                .iter()
                .filter(|(_, _, f)| *f == found)
                .map(|(t, w, _)| json!([t, round3(*w)]))
                .collect()
        };
        json!({"coverage": round3(self.value), "matched": pick(true), "missed": pick(false)})
    }

    /// `sea 1.20 ✓, level 0.91 ✗`.
    fn terms_line(&self) -> String {
        let parts: Vec<String> = self
            .terms
            .iter()
            .map(|(t, w, f)| format!("{t} {w:.2} {}", if *f { "✓" } else { "✗" }))
            .collect();
        format!("{:.3} ({})", self.value, parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use research::rules::TermInput;

    fn term(t: &str, doc_freq: u64, q: bool, w: bool, found: bool) -> TermInput {
        TermInput {
            term: t.into(),
            doc_freq,
            in_question: q,
            in_query: w,
            found,
        }
    }

    #[test]
    fn a_page_starts_a_little_before_the_passage_and_is_bounded() {
        let w = Window::check(None, None, Some(1000), 5000).unwrap();
        assert_eq!((w.start, w.len, w.next()), (700, 2000, Some(2700)));
        let w = Window::check(None, None, Some(10), 50).unwrap();
        assert_eq!((w.start, w.len, w.next()), (0, 50, None));
        let w = Window::check(Some(40), Some(20), None, 50).unwrap();
        assert_eq!((w.start, w.len, w.next()), (40, 10, None));
        assert!(matches!(
            Window::check(None, Some(8001), None, 50),
            Err(ServiceError::LimitExceeded { .. })
        ));
        assert!(matches!(
            Window::check(None, Some(0), None, 50),
            Err(ServiceError::LimitExceeded { .. })
        ));
        assert!(matches!(
            Window::check(Some(51), None, None, 50),
            Err(ServiceError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn the_passage_is_found_in_characters() {
        let content = "Préface. The sea level rose by 3 mm a year.";
        assert_eq!(passage_start(content, "The sea level rose…"), Some(9));
        assert_eq!(passage_start(content, "Not in the text."), None);
        assert_eq!(passage_start(content, ""), None);
    }

    #[test]
    fn coverage_is_the_one_v2_relevance_mixes() {
        let params = V2Parameters::defaults();
        let inputs = RelevanceInputs {
            corpus_docs: 100,
            terms: vec![
                term("sea", 10, true, true, true),
                term("level", 40, true, false, false),
                term("rise", 5, false, true, true),
            ],
        };
        let question = Coverage::of(&inputs, |t| t.in_question);
        let query = Coverage::of(&inputs, |t| t.in_query);
        // Capped at query_cap times the question's coverage: here below the cap.
        let cap = params.query_cap.unwrap();
        assert!(query.value < cap * question.value);
        let mixed =
            (1.0 - params.query_weight) * question.value + params.query_weight * query.value;
        let expected = research::rules::v2::topical_relevance(&inputs, &params);
        assert_eq!((mixed / params.coverage_full).clamp(0.0, 1.0), expected);
        assert_eq!(query.value, 1.0);
        // With a cap of 1 the query counts as much as the question's coverage, no more.
        let tight = V2Parameters {
            query_cap: Some(1.0),
            coverage_full: 1.0,
            ..params
        };
        let capped =
            (1.0 - tight.query_weight) * question.value + tight.query_weight * question.value;
        assert_eq!(research::rules::v2::mixed_coverage(&inputs, &tight), capped);
        let idf_sea = research::rules::idf(100, 10);
        let idf_level = research::rules::idf(100, 40);
        assert_eq!(question.value, idf_sea / (idf_sea + idf_level));
        assert_eq!(
            question.to_json(),
            json!({"coverage": round3(question.value), "matched": [["sea", round3(idf_sea)]],
                   "missed": [["level", round3(idf_level)]]})
        );
        assert!(
            question.terms_line().contains("level 0.91 ✗"),
            "{}",
            question.terms_line()
        );
    }
}
