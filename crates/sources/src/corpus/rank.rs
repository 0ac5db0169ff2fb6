//! Ranking: every document that holds a query term in its text or title, scored by BM25F over
//! three streams of each term — the document's text, its title, and its title group (the
//! passages that share its title) — computed here from the index's postings and field lengths.
//!
//! For query terms `t` (stemmed, in the query's order) and a document `d` of title group `g`:
//!
//! ```text
//! tf~(t, d) = tf_text(t, d)  / (1 − b + b · len_text(d)  / avg_text)
//!           + w_title · tf_title(t, d) / (1 − b + b · len_title(d) / avg_title)
//!           + w_group · tf_group(t, g) / (1 − b_group + b_group · members(g) / avg_members)
//! score(d)  = Σ_t idf(t) · tf~(t, d) · (k1 + 1) / (tf~(t, d) + k1)
//! idf(t)    = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
//! ```
//!
//! `tf_group(t, g)` is the term's count summed over the texts of the group's documents,
//! `members(g)` how many documents the group has and `avg_members = N / groups`; `len_*` are the
//! index's field lengths (tantivy's field norms) and `avg_*` the field's tokens over `N`, the live
//! documents; `df(t)` is the number of texts that hold `t`. A query of stop words only (kept
//! whole, [`crate::tokenize::query_terms`]) is matched in the text alone.
//!
//! Why BM25F rather than a sum of per-field BM25 scores: a term found in both the title and the
//! text is one piece of evidence, and saturating each field on its own counts it twice (Robertson,
//! Zaragoza and Taylor, 2004, "Simple BM25 extension to multiple weighted fields"). Why the title
//! group: a passage often leaves its subject to the rest of its article, and the sentence
//! retrieval literature smooths a sentence with its document for that reason (Fernández, Losada
//! and Azzopardi, 2011, "Extending the language modeling framework for sentence retrieval to
//! include local context"); normalising by the group's size keeps a long article from lifting all
//! its passages. `docs/rules.md` gives the figures the weights were chosen by.
//!
//! The arithmetic is f64, `ln` from `libm`, terms summed in the query's order, so a score has the
//! same bits on every platform; equal scores go by document id.

use super::*;

/// The parameters of the ranking. [`Bm25f::name`] is part of every index state id, so a search
/// recorded under other parameters is never taken for one under these.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25f {
    /// Term frequency saturation.
    pub k1: f64,
    /// Length normalisation of the text and the title.
    pub b: f64,
    /// Weight of a title occurrence against a text occurrence.
    pub title_weight: f64,
    /// Weight of an occurrence elsewhere in the title group.
    pub group_weight: f64,
    /// Normalisation of the group stream by the group's size.
    pub group_b: f64,
}

/// The ranking every search uses.
pub const RANKING: Bm25f = Bm25f {
    k1: 1.2,
    b: 0.75,
    title_weight: 0.5,
    group_weight: 0.05,
    group_b: 0.5,
};

impl Bm25f {
    /// The formula and its parameters, as the index state id names them.
    pub fn name(&self) -> String {
        format!(
            "research-ledger-rank-v1: bm25f k1={} b={} title={} group={} group_b={}",
            self.k1, self.b, self.title_weight, self.group_weight, self.group_b
        )
    }
}

/// A document the query matched, with its score: its BM25F score, or that mixed with its
/// similarity to the query (`similarity.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Scored {
    pub(super) address: DocAddress,
    pub(super) score: f64,
    /// The BM25F score.
    pub(super) lexical: f64,
    /// The encoder's cosine, when the search ranks by meaning.
    pub(super) similarity: Option<f64>,
}

/// One query term's IDF, and the live documents that hold it in their text and in their title,
/// each with the term's count, in index order.
struct TermPostings {
    idf: f64,
    text: Vec<(DocAddress, u32)>,
    title: Vec<(DocAddress, u32)>,
}

/// The collection statistics the formula needs.
struct Statistics {
    docs: f64,
    avg_text: f64,
    avg_title: f64,
    avg_members: f64,
}

/// The matched documents in index order, with each one's length normalisations and title group,
/// and each group's normalisation.
struct Candidates {
    addresses: Vec<DocAddress>,
    text_norm: Vec<f64>,
    title_norm: Vec<f64>,
    group: Vec<usize>,
    group_norm: Vec<f64>,
}

impl Candidates {
    fn at(&self, address: &DocAddress) -> Option<usize> {
        self.addresses.binary_search(address).ok()
    }
}

impl Corpus {
    /// Every document that holds one of `terms` in its text (or, for content terms, its title),
    /// scored, in index order. `groups` are the title groups of what `searcher` shows.
    pub(super) fn scored(
        &self,
        searcher: &Searcher,
        terms: &[String],
        content_terms: bool,
        groups: &TitleGroups,
    ) -> Result<Vec<Scored>, CorpusError> {
        let ranking = if content_terms {
            RANKING
        } else {
            Bm25f {
                title_weight: 0.0,
                group_weight: 0.0,
                ..RANKING
            }
        };
        let stats = self.statistics(searcher, groups.count())?;
        let mut postings = Vec::with_capacity(terms.len());
        for term in terms {
            postings.push(self.term_postings(searcher, term, &ranking, &stats)?);
        }
        let candidates = self.candidates(searcher, &postings, groups, &ranking, &stats)?;
        let scores = ranking.scores(&postings, &candidates);
        Ok(candidates
            .addresses
            .iter()
            .zip(scores)
            .map(|(&address, score)| Scored {
                address,
                score,
                lexical: score,
                similarity: None,
            })
            .collect())
    }

    fn statistics(&self, searcher: &Searcher, groups: u64) -> Result<Statistics, CorpusError> {
        let docs = searcher.num_docs() as f64;
        let mut tokens = (0u64, 0u64);
        for segment in searcher.segment_readers() {
            let text = segment.inverted_index(self.fields.content_search);
            let title = segment.inverted_index(self.fields.title_search);
            let (text, title) = (
                text.map_err(|e| index_error(&self.dir, e))?,
                title.map_err(|e| index_error(&self.dir, e))?,
            );
            tokens.0 += text.total_num_tokens();
            tokens.1 += title.total_num_tokens();
        }
        let average = |total: u64| if docs > 0.0 { total as f64 / docs } else { 0.0 };
        Ok(Statistics {
            docs,
            avg_text: average(tokens.0),
            avg_title: average(tokens.1),
            avg_members: if groups > 0 {
                docs / groups as f64
            } else {
                1.0
            },
        })
    }

    /// One term's IDF and postings in the text and, when titles count, the title.
    fn term_postings(
        &self,
        searcher: &Searcher,
        term: &str,
        ranking: &Bm25f,
        stats: &Statistics,
    ) -> Result<TermPostings, CorpusError> {
        let text_term = Term::from_field_text(self.fields.content_search, term);
        let df = searcher
            .doc_freq(&text_term)
            .map_err(|e| index_error(&self.dir, e))?;
        let title = if ranking.title_weight > 0.0 {
            let title_term = Term::from_field_text(self.fields.title_search, term);
            self.postings(searcher, &title_term)?
        } else {
            Vec::new()
        };
        Ok(TermPostings {
            idf: idf(stats.docs, df as f64),
            text: self.postings(searcher, &text_term)?,
            title,
        })
    }

    /// The documents of `postings`, with their normalisations and title groups.
    fn candidates(
        &self,
        searcher: &Searcher,
        postings: &[TermPostings],
        groups: &TitleGroups,
        ranking: &Bm25f,
        stats: &Statistics,
    ) -> Result<Candidates, CorpusError> {
        let mut addresses: Vec<DocAddress> = postings
            .iter()
            .flat_map(|p| p.text.iter().chain(&p.title).map(|(address, _)| *address))
            .collect();
        addresses.sort_unstable();
        addresses.dedup();
        let norms = FieldNorms::open(self, searcher)?;
        let mut local: HashMap<usize, usize> = HashMap::new();
        let mut out = Candidates {
            text_norm: Vec::with_capacity(addresses.len()),
            title_norm: Vec::with_capacity(addresses.len()),
            group: Vec::with_capacity(addresses.len()),
            group_norm: Vec::new(),
            addresses: Vec::new(),
        };
        for address in &addresses {
            let (text, title) = norms.lengths(*address);
            out.text_norm.push(norm(ranking.b, text, stats.avg_text));
            out.title_norm.push(norm(ranking.b, title, stats.avg_title));
            if ranking.group_weight > 0.0 {
                let group = groups.group_of(&self.dir, *address)?;
                let next = local.len();
                let at = *local.entry(group).or_insert(next);
                if at == next {
                    let members = groups.members(group) as f64;
                    out.group_norm
                        .push(norm(ranking.group_b, members, stats.avg_members));
                }
                out.group.push(at);
            } else {
                out.group.push(0);
            }
        }
        out.addresses = addresses;
        Ok(out)
    }

    /// Every live document that holds `term`, with the term's count in it, in index order.
    fn postings(
        &self,
        searcher: &Searcher,
        term: &Term,
    ) -> Result<Vec<(DocAddress, u32)>, CorpusError> {
        use tantivy::postings::Postings as _;
        use tantivy::{DocSet as _, TERMINATED};
        let mut out = Vec::new();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            let segment_ord = u32::try_from(ord).unwrap_or(u32::MAX);
            let index = segment
                .inverted_index(term.field())
                .map_err(|e| index_error(&self.dir, e))?;
            let read = index.read_postings(term, IndexRecordOption::WithFreqs);
            let Some(mut postings) = read.map_err(|e| self.postings_error(e))? else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if !segment.is_deleted(doc) {
                    out.push((DocAddress::new(segment_ord, doc), postings.term_freq()));
                }
                doc = postings.advance();
            }
        }
        Ok(out)
    }

    fn postings_error(&self, error: std::io::Error) -> CorpusError {
        CorpusError::Index {
            dir: self.dir.clone(),
            detail: format!("reading postings: {error}"),
        }
    }

    /// The first `wanted` of `scored` by score, descending, then id, ascending, each with its
    /// text's hash. Ids are read only for documents that can make the cut.
    pub(super) fn top(
        &self,
        searcher: &Searcher,
        scored: &[Scored],
        wanted: usize,
    ) -> Result<Vec<Ranked>, CorpusError> {
        let mut order: Vec<usize> = (0..scored.len()).collect();
        if wanted == 0 {
            return Ok(Vec::new());
        }
        if order.len() > wanted {
            let by_score = |a: &usize, b: &usize| scored[*b].score.total_cmp(&scored[*a].score);
            order.select_nth_unstable_by(wanted - 1, by_score);
            let cut = scored[order[wanted - 1]].score;
            order.retain(|at| scored[*at].score.total_cmp(&cut).is_ge());
        }
        let mut keyed = Vec::with_capacity(order.len());
        for at in order {
            let id = self.fast_text(searcher, scored[at].address, "id")?;
            keyed.push((scored[at], id));
        }
        keyed.sort_by(|(a, a_id), (b, b_id)| b.score.total_cmp(&a.score).then(a_id.cmp(b_id)));
        keyed.truncate(wanted);
        let mut ranked = Vec::with_capacity(keyed.len());
        for (found, _) in keyed {
            ranked.push(Ranked {
                address: found.address,
                score: found.score,
                lexical: found.lexical,
                similarity: found.similarity,
                content_hash: self.fast_text(searcher, found.address, "content_hash")?,
            });
        }
        Ok(ranked)
    }
}

impl Bm25f {
    /// The formula above for every candidate: each term's streams combined per document, then
    /// saturated and weighed by the term's IDF, the terms added in the query's order.
    fn scores(&self, postings: &[TermPostings], candidates: &Candidates) -> Vec<f64> {
        let n = candidates.addresses.len();
        let mut scores = vec![0.0; n];
        let mut tf = vec![0.0; n];
        let mut group_tf = vec![0.0; candidates.group_norm.len()];
        for term in postings {
            tf.fill(0.0);
            group_tf.fill(0.0);
            for (address, count) in &term.text {
                if let Some(at) = candidates.at(address) {
                    tf[at] += f64::from(*count) / candidates.text_norm[at];
                    if let Some(sum) = group_tf.get_mut(candidates.group[at]) {
                        *sum += f64::from(*count);
                    }
                }
            }
            for (address, count) in &term.title {
                if let Some(at) = candidates.at(address) {
                    tf[at] += self.title_weight * f64::from(*count) / candidates.title_norm[at];
                }
            }
            for (at, score) in scores.iter_mut().enumerate() {
                let mut x = tf[at];
                let group = candidates.group[at];
                if let (Some(sum), Some(norm)) =
                    (group_tf.get(group), candidates.group_norm.get(group))
                {
                    x += self.group_weight * sum / norm;
                }
                if x > 0.0 {
                    *score += term.idf * x * (self.k1 + 1.0) / (x + self.k1);
                }
            }
        }
        scores
    }
}

/// BM25's length normalisation `1 − b + b · len / avg` (1 for an empty field everywhere).
fn norm(b: f64, len: f64, avg: f64) -> f64 {
    if avg > 0.0 {
        1.0 - b + b * len / avg
    } else {
        1.0
    }
}

/// The text and title lengths the index recorded, per segment.
struct FieldNorms {
    text: Vec<tantivy::fieldnorm::FieldNormReader>,
    title: Vec<tantivy::fieldnorm::FieldNormReader>,
}

impl FieldNorms {
    fn open(corpus: &Corpus, searcher: &Searcher) -> Result<Self, CorpusError> {
        let mut norms = Self {
            text: Vec::new(),
            title: Vec::new(),
        };
        for segment in searcher.segment_readers() {
            let reader = |field| {
                segment
                    .get_fieldnorms_reader(field)
                    .map_err(|e| index_error(&corpus.dir, e))
            };
            norms.text.push(reader(corpus.fields.content_search)?);
            norms.title.push(reader(corpus.fields.title_search)?);
        }
        Ok(norms)
    }

    fn lengths(&self, address: DocAddress) -> (f64, f64) {
        let at = address.segment_ord as usize;
        let length = |readers: &[tantivy::fieldnorm::FieldNormReader]| {
            readers
                .get(at)
                .map_or(0.0, |r| f64::from(r.fieldnorm(address.doc_id)))
        };
        (length(&self.text), length(&self.title))
    }
}

/// BM25's IDF, as tantivy and the rule sets compute it, with `libm`'s `ln`.
fn idf(docs: f64, df: f64) -> f64 {
    let df = df.min(docs);
    libm::log(1.0 + (docs - df + 0.5) / (df + 0.5))
}
