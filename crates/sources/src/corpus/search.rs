//! Searching the corpus: BM25 hits ranked reproducibly (equal scores by document id), one hit
//! per distinct text, scored for relevance and reliability by the task's rule set.

use super::*;

/// A term of the research question with the number of corpus documents whose text holds it:
/// what an auditor needs to recompute a hit's relevance from its content blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TermFrequency {
    /// The term, as [`tokenize`] gives it.
    pub term: String,
    /// Documents whose content holds it.
    pub doc_freq: u64,
}

/// One hit of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    /// Place in BM25 order, from 1.
    pub rank: u32,
    /// Document id.
    pub id: String,
    /// BM25 score as the index computed it (an `f32`, widened exactly): of the stemmed text and
    /// title for the query's terms; for a folded group, that of its best-ranked member.
    pub raw_score: f64,
    /// `raw_score / top raw_score`: 1 for the first hit, in (0, 1] for the others.
    pub normalised_score: f64,
    /// SPEC §4 relevance: IDF-weighted coverage of the research question's distinct terms in
    /// the full text, with this corpus's document count and document frequencies.
    pub relevance: f64,
    /// SPEC §4 reliability pre-score from the source type's authority and the citation count.
    pub reliability: f64,
    /// For each of [`SearchResult::question_terms`], in that order, whether the full text holds
    /// it: what rule set `v2`'s topicality is computed from.
    pub terms_found: Vec<bool>,
    /// At most `summary_chars_max` characters of the text, cut at a sentence end.
    pub summary: String,
    /// Title; may be empty.
    pub title: String,
    /// Publisher as given.
    pub source: Option<String>,
    /// Where it can be read.
    pub url: Option<String>,
    /// Publication date (see `defaulted`).
    pub publish_date: NaiveDate,
    /// Kind of publisher.
    pub source_type: SourceType,
    /// Citations, when known.
    pub citation_count: Option<u64>,
    /// blake3 of the full text.
    pub content_hash: ContentHash,
    /// Fields that hold ingest defaults.
    pub defaulted: DefaultedFields,
    /// Other documents with exactly this text, folded into this one (the earliest published),
    /// in id order.
    pub folded_ids: Vec<String>,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResult {
    /// The query as given.
    pub query: String,
    /// The index the search ran on.
    pub index_state: IndexState,
    /// Documents in the corpus (`N` of the IDF).
    pub corpus_docs: u64,
    /// The research question's distinct terms with their document frequencies.
    pub question_terms: Vec<TermFrequency>,
    /// Hits in BM25 order: score descending, then id ascending (a folded group ranks where its
    /// best-ranked member does). Documents with identical text appear once.
    pub hits: Vec<SearchHit>,
}

impl SearchResult {
    /// The hits as candidates: by reliability pre-score, highest first; equal pre-scores keep
    /// BM25 order. Each hit keeps its BM25 `rank`.
    pub fn candidates(&self) -> Vec<&SearchHit> {
        let mut out: Vec<&SearchHit> = self.hits.iter().collect();
        out.sort_by(|a, b| {
            b.reliability
                .total_cmp(&a.reliability)
                .then(a.rank.cmp(&b.rank))
        });
        out
    }
}

/// How far an ingest has come, for a progress display.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum IngestProgress<'a> {
    /// The files to read are known.
    Started {
        /// How many.
        files: u64,
    },
    /// One more file was read.
    FileDone {
        /// Its path.
        path: &'a Path,
        /// Files done so far.
        done: u64,
    },
    /// The documents are in; the index is being committed and compacted.
    Committing,
}

impl Corpus {
    /// Searches with the rule set `v1` authority table for the reliability pre-score.
    ///
    /// `question_terms` are the research question's terms as [`tokenize`] gives them; each hit's
    /// relevance is their IDF-weighted coverage in the hit's full text (none give 0).
    pub fn search(
        &self,
        query: &str,
        limit: usize,
        question_terms: &[String],
    ) -> Result<SearchResult, SearchError> {
        self.search_with_rules(query, limit, question_terms, &RuleSet::v1())
    }

    /// [`Corpus::search`] with a task's own rule set, whose authority table may differ from
    /// `v1`'s, for the reliability pre-score.
    pub fn search_with_rules(
        &self,
        query: &str,
        limit: usize,
        question_terms: &[String],
        rules: &RuleSet,
    ) -> Result<SearchResult, SearchError> {
        let chars = research::text::char_count(query);
        if chars > self.limits.query_chars_max {
            return Err(SearchError::QueryTooLong {
                chars,
                limit: self.limits.query_chars_max,
            });
        }
        if limit == 0 || limit as u64 > self.limits.search_results_max {
            return Err(SearchError::LimitOutOfRange {
                requested: limit as u64,
                limit: self.limits.search_results_max,
            });
        }
        let mut question: Vec<&str> = Vec::new();
        for term in question_terms {
            if !question.contains(&term.as_str()) {
                question.push(term);
            }
            if question.len() as u64 > self.limits.question_terms_max {
                return Err(SearchError::TooManyQuestionTerms {
                    terms: question.len() as u64,
                    limit: self.limits.question_terms_max,
                });
            }
        }
        let (terms, content_terms) = query_terms_and_kind(query);
        if terms.is_empty() {
            return Err(SearchError::NoTerms);
        }

        let snapshot = self.current();
        let searcher = &snapshot.searcher;
        let f = self.fields;
        let query_tree = ranking_query(&f, &terms, content_terms);

        let corpus_docs = searcher.num_docs();
        let mut question_stats = Vec::with_capacity(question.len());
        for term in &question {
            let doc_freq = searcher
                .doc_freq(&Term::from_field_text(f.content, term))
                .map_err(|e| index_error(&self.dir, e))?;
            question_stats.push(TermFrequency {
                term: (*term).to_string(),
                doc_freq,
            });
        }
        let weights: Vec<QuestionTerm<'_>> = question_stats
            .iter()
            .map(|t| QuestionTerm {
                term: &t.term,
                doc_freq: t.doc_freq,
            })
            .collect();

        // Collect a prefix of the ranking long enough to give `limit` distinct texts: folded
        // duplicates do not use up the limit.
        let all = usize::try_from(corpus_docs).unwrap_or(usize::MAX).max(1);
        let mut wanted = limit.min(all);
        let (ranked, representatives) = loop {
            let ranked = self.ranked(searcher, &query_tree, wanted)?;
            let representatives = first_of_each_text(&ranked);
            let exhausted = ranked.len() < wanted || wanted >= all;
            if representatives.len() >= limit || exhausted {
                break (ranked, representatives);
            }
            wanted = wanted.saturating_mul(2).min(all);
        };
        let top_score = ranked.first().map_or(0.0, |r| f64::from(r.score));

        let mut hits = Vec::with_capacity(limit);
        for (rank, &at) in representatives.iter().take(limit).enumerate() {
            let found = &ranked[at];
            let first = self.read(searcher, found.address)?;
            let (document, folded_ids) = self.original_of(searcher, first)?;
            let in_text: HashSet<String> = tokenize(&document.content).into_iter().collect();
            let terms_found: Vec<bool> = question.iter().map(|t| in_text.contains(*t)).collect();
            let question_found: Vec<&str> = question
                .iter()
                .copied()
                .filter(|t| in_text.contains(*t))
                .collect();
            let raw_score = f64::from(found.score);
            hits.push(SearchHit {
                rank: u32::try_from(rank + 1).unwrap_or(u32::MAX),
                id: document.id,
                raw_score,
                normalised_score: if top_score > 0.0 {
                    raw_score / top_score
                } else {
                    0.0
                },
                relevance: idf_coverage(&weights, &question_found, corpus_docs),
                reliability: reliability(
                    rules.authority_of(document.source_type),
                    document.citation_count,
                ),
                terms_found,
                summary: summarize(&document.content, summary_budget(&self.limits)),
                title: document.title,
                source: document.source,
                url: document.url,
                publish_date: document.publish_date,
                source_type: document.source_type,
                citation_count: document.citation_count,
                content_hash: document.content_hash,
                defaulted: document.defaulted,
                folded_ids,
            });
        }
        Ok(SearchResult {
            query: query.to_string(),
            index_state: snapshot.state.clone(),
            corpus_docs,
            question_terms: question_stats,
            hits,
        })
    }

    /// The first `wanted` matches by score, descending, then id, ascending. Ties are broken
    /// inside the collector, so which of several equal-scored documents make the cut never
    /// depends on where they sit in the index.
    fn ranked(
        &self,
        searcher: &Searcher,
        query: &dyn Query,
        wanted: usize,
    ) -> Result<Vec<Ranked>, CorpusError> {
        let collector = TopDocs::with_limit(wanted.max(1)).order_by((
            (SortBySimilarityScore, Order::Desc),
            (SortByString::for_field("id"), Order::Asc),
        ));
        let found = searcher
            .search(query, &collector)
            .map_err(|e| index_error(&self.dir, e))?;
        let mut ranked = Vec::with_capacity(found.len());
        for ((score, _id), address) in found {
            let hash = self.fast_text(searcher, address, "content_hash")?;
            ranked.push(Ranked {
                address,
                score,
                content_hash: hash,
            });
        }
        Ok(ranked)
    }

    pub(super) fn fast_text(
        &self,
        searcher: &Searcher,
        address: DocAddress,
        column: &str,
    ) -> Result<String, CorpusError> {
        let segment = searcher.segment_reader(address.segment_ord);
        let values = segment
            .fast_fields()
            .str(column)
            .map_err(|e| index_error(&self.dir, e))?
            .ok_or_else(|| self.damaged(format!("no `{column}` column")))?;
        let mut out = String::new();
        let ord = values
            .term_ords(address.doc_id)
            .next()
            .ok_or_else(|| self.damaged(format!("a document without `{column}`")))?;
        values
            .ord_to_str(ord, &mut out)
            .map_err(|e| self.damaged(e.to_string()))?;
        Ok(out)
    }

    /// The document that stands for every document with the same text as `first`, and the ids
    /// of the others, in id order.
    ///
    /// The group takes the place of its best-ranked member (identical texts differ in score only
    /// by their titles); the document shown for it is the original: the earliest given publish
    /// date (a defaulted date says nothing about precedence), then the smallest id. A reprint is
    /// thus folded into what it reprints, and a reprint's title can lift the group but never
    /// show the reprint in the original's place.
    pub(super) fn original_of(
        &self,
        searcher: &Searcher,
        first: Document,
    ) -> Result<(Document, Vec<String>), CorpusError> {
        let query = TermQuery::new(
            Term::from_field_text(self.fields.content_hash, &first.content_hash.to_hex()),
            IndexRecordOption::Basic,
        );
        let mut addresses: Vec<DocAddress> = searcher
            .search(&query, &DocSetCollector)
            .map_err(|e| index_error(&self.dir, e))?
            .into_iter()
            .collect();
        if addresses.len() <= 1 {
            return Ok((first, Vec::new()));
        }
        addresses.sort();
        let mut group = Vec::with_capacity(addresses.len());
        for address in addresses {
            let member = self.read(searcher, address)?;
            if member.content_hash != first.content_hash {
                return Err(self.damaged(format!(
                    "document {} is listed under another text's hash",
                    member.id
                )));
            }
            group.push(member);
        }
        group.sort_by(|a, b| {
            (a.defaulted.publish_date, a.publish_date, &a.id).cmp(&(
                b.defaulted.publish_date,
                b.publish_date,
                &b.id,
            ))
        });
        let mut members = group.into_iter();
        let Some(original) = members.next() else {
            return Ok((first, Vec::new()));
        };
        let mut folded: Vec<String> = members.map(|d| d.id).collect();
        folded.sort();
        folded.truncate(usize::try_from(self.limits.search_results_max).unwrap_or(usize::MAX));
        Ok((original, folded))
    }

    /// The document frequency of each term in the corpus's texts, and the corpus size: the
    /// inputs of IDF coverage, for relevance computed outside a search.
    pub fn term_frequencies(
        &self,
        terms: &[String],
    ) -> Result<(u64, Vec<TermFrequency>), CorpusError> {
        let snapshot = self.current();
        let searcher = &snapshot.searcher;
        let mut out = Vec::with_capacity(terms.len());
        for term in terms {
            let doc_freq = searcher
                .doc_freq(&Term::from_field_text(self.fields.content, term))
                .map_err(|e| index_error(&self.dir, e))?;
            out.push(TermFrequency {
                term: term.clone(),
                doc_freq,
            });
        }
        Ok((searcher.num_docs(), out))
    }
}

/// The query BM25 ranks by: each term against the stemmed text, and each content term against
/// the stemmed title with [`TITLE_WEIGHT`], summed. The title names a passage's subject, which
/// the passage itself often leaves implicit ("It has declined since 1979" under "Arctic sea
/// ice"); only content terms are matched against it, since a title's function words say nothing.
fn ranking_query(f: &Fields, terms: &[String], content_terms: bool) -> BooleanQuery {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    for term in terms {
        clauses.push((
            Occur::Should,
            Box::new(TermQuery::new(
                Term::from_field_text(f.content_search, term),
                IndexRecordOption::WithFreqs,
            )),
        ));
        if content_terms {
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(
                        Term::from_field_text(f.title_search, term),
                        IndexRecordOption::WithFreqs,
                    )),
                    TITLE_WEIGHT,
                )),
            ));
        }
    }
    BooleanQuery::new(clauses)
}

/// The weight of a title match against a text match of the same term. A title is shared by every
/// passage of its document and says what they are about, not which of them answers: at half
/// weight it lifts the passages of the right document without burying a passage that matches the
/// query in its own words (`docs/rules.md` gives the figures it was chosen by).
const TITLE_WEIGHT: f32 = 0.5;

/// The summary budget in characters, as a `usize`.
fn summary_budget(limits: &CorpusLimits) -> usize {
    usize::try_from(limits.summary_chars_max).unwrap_or(usize::MAX)
}

#[derive(Debug)]
struct Ranked {
    address: DocAddress,
    score: f32,
    content_hash: String,
}

/// Positions in `ranked` of the first document of each distinct text.
fn first_of_each_text(ranked: &[Ranked]) -> Vec<usize> {
    let mut seen = HashSet::new();
    ranked
        .iter()
        .enumerate()
        .filter(|(_, r)| seen.insert(r.content_hash.as_str()))
        .map(|(at, _)| at)
        .collect()
}
