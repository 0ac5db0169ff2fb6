//! Searching the corpus: hits ranked reproducibly by BM25F (`rank.rs`; equal scores by document
//! id), one hit per distinct text, scored for relevance and reliability by the task's rule set.

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
    /// Place in the ranking, from 1.
    pub rank: u32,
    /// Document id.
    pub id: String,
    /// The score the hits are ranked by: the BM25F score of the query's terms over the stemmed
    /// text, title and title group ([`crate::corpus::Bm25f`]), or, when the search ranks by
    /// meaning too, that mixed with the encoder's cosine ([`crate::corpus::Similarity`]); for a
    /// folded group, that of its best-ranked member.
    pub raw_score: f64,
    /// `raw_score / top raw_score`: 1 for the first hit, in (0, 1] for the others.
    pub normalised_score: f64,
    /// The BM25F score alone (`raw_score` when the search does not rank by meaning).
    pub lexical_score: f64,
    /// The encoder's cosine between the query and the passage, when the search ranks by
    /// meaning.
    pub similarity: Option<f64>,
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
    /// Hits in ranking order: score descending, then id ascending (a folded group ranks where its
    /// best-ranked member does). Documents with identical text appear once.
    pub hits: Vec<SearchHit>,
}

impl SearchResult {
    /// The hits as candidates: by reliability pre-score, highest first; equal pre-scores keep
    /// ranking order. Each hit keeps its `rank`.
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
    /// Passages were encoded for the search by meaning (after `Committing`, when the corpus
    /// ranks by meaning and some passages had no vector yet).
    Encoding {
        /// Passages encoded so far.
        done: u64,
        /// Passages to encode.
        total: u64,
    },
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
        let question = self.check_search(query, limit, question_terms)?;
        let (terms, content_terms) = query_terms_and_kind(query);
        if terms.is_empty() {
            return Err(SearchError::NoTerms);
        }
        let snapshot = self.current();
        let searcher = &snapshot.searcher;
        let corpus_docs = searcher.num_docs();
        let question_stats = self.question_stats(searcher, &question)?;
        let mut scored = self.scored(searcher, &terms, content_terms, &snapshot.groups)?;
        if let (Some(similarity), Some(vectors)) = (&self.similarity, &snapshot.vectors) {
            let query_vector = similarity.query_vector(&self.dir, query)?;
            scored = similarity.mix(&scored, vectors, &query_vector);
        }
        let (ranked, representatives) = self.distinct_top(searcher, &scored, limit)?;
        let top_score = ranked.first().map_or(0.0, |r| r.score);
        let scoring = HitScoring {
            question: &question,
            question_stats: &question_stats,
            corpus_docs,
            rules,
            top_score,
        };
        let mut hits = Vec::with_capacity(limit);
        for (rank, &at) in representatives.iter().take(limit).enumerate() {
            hits.push(self.hit(searcher, &ranked[at], rank, &scoring)?);
        }
        Ok(SearchResult {
            query: query.to_string(),
            index_state: snapshot.state.clone(),
            corpus_docs,
            question_terms: question_stats,
            hits,
        })
    }

    /// Checks a search's query, limit and question against the limits; the question's distinct
    /// terms, in order.
    fn check_search<'q>(
        &self,
        query: &str,
        limit: usize,
        question_terms: &'q [String],
    ) -> Result<Vec<&'q str>, SearchError> {
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
        Ok(question)
    }

    /// The question's terms with the number of texts that hold each (unstemmed, as relevance
    /// counts them).
    fn question_stats(
        &self,
        searcher: &Searcher,
        question: &[&str],
    ) -> Result<Vec<TermFrequency>, CorpusError> {
        let mut stats = Vec::with_capacity(question.len());
        for term in question {
            let doc_freq = searcher
                .doc_freq(&Term::from_field_text(self.fields.content, term))
                .map_err(|e| index_error(&self.dir, e))?;
            stats.push(TermFrequency {
                term: (*term).to_string(),
                doc_freq,
            });
        }
        Ok(stats)
    }

    /// A prefix of the ranking long enough to give `limit` distinct texts (folded duplicates do
    /// not use up the limit), and the positions in it of the first document of each text.
    fn distinct_top(
        &self,
        searcher: &Searcher,
        scored: &[Scored],
        limit: usize,
    ) -> Result<(Vec<Ranked>, Vec<usize>), CorpusError> {
        let all = scored.len().max(1);
        let mut wanted = limit.min(all);
        loop {
            let ranked = self.top(searcher, scored, wanted)?;
            let representatives = first_of_each_text(&ranked);
            let exhausted = ranked.len() < wanted || wanted >= all;
            if representatives.len() >= limit || exhausted {
                return Ok((ranked, representatives));
            }
            wanted = wanted.saturating_mul(2).min(all);
        }
    }

    /// One hit: the original of `found`'s text, scored for relevance and reliability.
    fn hit(
        &self,
        searcher: &Searcher,
        found: &Ranked,
        rank: usize,
        scoring: &HitScoring<'_>,
    ) -> Result<SearchHit, CorpusError> {
        let first = self.read(searcher, found.address)?;
        let (document, folded_ids) = self.original_of(searcher, first)?;
        let in_text: HashSet<String> = tokenize(&document.content).into_iter().collect();
        let question = scoring.question;
        let terms_found: Vec<bool> = question.iter().map(|t| in_text.contains(*t)).collect();
        let question_found: Vec<&str> = question
            .iter()
            .copied()
            .filter(|t| in_text.contains(*t))
            .collect();
        let weights: Vec<QuestionTerm<'_>> = scoring
            .question_stats
            .iter()
            .map(|t| QuestionTerm {
                term: &t.term,
                doc_freq: t.doc_freq,
            })
            .collect();
        Ok(SearchHit {
            rank: u32::try_from(rank + 1).unwrap_or(u32::MAX),
            id: document.id,
            raw_score: found.score,
            normalised_score: if scoring.top_score > 0.0 {
                found.score / scoring.top_score
            } else {
                0.0
            },
            lexical_score: found.lexical,
            similarity: found.similarity,
            relevance: idf_coverage(&weights, &question_found, scoring.corpus_docs),
            reliability: reliability(
                scoring.rules.authority_of(document.source_type),
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
        })
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

/// What every hit of one search is scored with.
struct HitScoring<'a> {
    question: &'a [&'a str],
    question_stats: &'a [TermFrequency],
    corpus_docs: u64,
    rules: &'a RuleSet,
    top_score: f64,
}

/// The summary budget in characters, as a `usize`.
fn summary_budget(limits: &CorpusLimits) -> usize {
    usize::try_from(limits.summary_chars_max).unwrap_or(usize::MAX)
}

/// A document of the ranking, with its score and its text's hash.
#[derive(Debug)]
pub(super) struct Ranked {
    pub(super) address: DocAddress,
    pub(super) score: f64,
    pub(super) lexical: f64,
    pub(super) similarity: Option<f64>,
    pub(super) content_hash: String,
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
