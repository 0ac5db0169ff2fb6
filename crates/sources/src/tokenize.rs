//! The corpus's tokenizer, for English and Chinese alike.
//!
//! One function, [`tokenize`], turns text into the terms the corpus indexes, the terms a query is
//! matched with, and the terms of a task question whose IDF coverage gives an item's relevance
//! (SPEC §4). Using the same function everywhere is what makes those three agree.
//!
//! The rules (version [`TOKENIZER_VERSION`]):
//! - Full-width ASCII forms (`Ｅａｓｔ２０２４`) read as their ASCII letters and digits.
//! - Runs of letters and digits outside the CJK ranges are words, lower-cased. An apostrophe
//!   between two letters joins them (`don't` → `dont`), except that a final `'s` is dropped
//!   (`Bureau's` → `bureau`).
//! - A word of four or more characters that ends in a plural `s` after a letter is folded to its
//!   singular by the three suffix rules of Harman's S stemmer (`-ies` → `-y`, `-es` → `-e`, `-s`
//!   → ``, tried in that order; `-us` and `-ss` are left alone), so `firms` finds `firm` and
//!   `blooms` finds `bloom`. Nothing else is stemmed.
//! - Words longer than [`WORD_CHARS_MAX`] characters (hashes, encoded data) are dropped.
//! - Runs of Chinese or Japanese characters give every character and every pair of adjacent
//!   characters: `共享单车` → `共`, `共享`, `享`, `享单`, `单`, `单车`, `车`. Pairs find words
//!   without a dictionary; single characters find one-character words.
//! - Everything else (spaces, punctuation, symbols) separates terms.
//!
//! Why no dictionary segmenter (such as jieba): the terms a task's relevance was computed from
//! are recorded and never recomputed, and the index must answer the same way after an upgrade.
//! A dictionary segmenter's output moves with its dictionary and releases, and it cuts unknown
//! names (`青川市`) differently depending on their neighbours, so a question and a document can
//! disagree on the same name. Character pairs cannot: any two-character word of the question is
//! found in any text that contains it. The cost is a larger index and some pairs that straddle
//! two words, which lower relevance a little (on the sample's Chinese question the mean
//! relevance of its evidence is 0.94 with pairs against 0.98 with jieba's segmentation).

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Names the rules above. It is the name under which the index registers the tokenizer, so an
/// index written under other rules refuses to open instead of answering inconsistently.
pub const TOKENIZER_VERSION: &str = "research-ledger-text-v1";

/// Longest word kept (characters). Longer runs are identifiers or encoded data, not words.
pub const WORD_CHARS_MAX: usize = 64;

/// The terms of `text`, in the order they occur, repeats included.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |term, _, _| out.push(term.to_string()));
    out
}

/// Calls `sink(term, byte_from, byte_to)` for every term of `text`, in order. The byte range is
/// where the term's characters are in `text`.
fn for_each_term(text: &str, mut sink: impl FnMut(&str, usize, usize)) {
    let mut word = Word::default();
    // The previous character of the current CJK run, with its byte offset.
    let mut previous_cjk: Option<(char, usize)> = None;
    let mut pair = String::new();
    for (at, raw) in text.char_indices() {
        let next_at = at + raw.len_utf8();
        let c = widen_to_ascii(raw);
        if is_cjk(c) {
            word.finish(&mut sink);
            if let Some((before, before_at)) = previous_cjk {
                pair.clear();
                pair.push(before);
                pair.push(c);
                sink(&pair, before_at, next_at);
            }
            let mut single = [0u8; 4];
            sink(c.encode_utf8(&mut single), at, next_at);
            previous_cjk = Some((c, at));
            continue;
        }
        previous_cjk = None;
        if c.is_alphanumeric() {
            word.push(c, at, next_at);
        } else if is_apostrophe(c) && word.ends_in_letter() && !word.apostrophe_pending {
            // Held back: it joins the word only if a letter follows.
            word.apostrophe_pending = true;
        } else {
            word.finish(&mut sink);
        }
    }
    word.finish(&mut sink);
}

/// The word being read: its lower-cased text and where it lies in the input.
#[derive(Debug, Default)]
struct Word {
    text: String,
    chars: usize,
    from: usize,
    to: usize,
    apostrophe_pending: bool,
    /// Where in `text` the letters after the last joined apostrophe start.
    after_apostrophe: Option<usize>,
}

impl Word {
    fn push(&mut self, c: char, at: usize, next_at: usize) {
        if self.text.is_empty() {
            self.from = at;
        }
        if self.apostrophe_pending {
            self.after_apostrophe = Some(self.text.len());
        }
        self.text.extend(c.to_lowercase());
        self.chars += 1;
        self.to = next_at;
        self.apostrophe_pending = false;
    }

    fn ends_in_letter(&self) -> bool {
        self.text
            .chars()
            .next_back()
            .is_some_and(char::is_alphabetic)
    }

    fn finish(&mut self, sink: &mut impl FnMut(&str, usize, usize)) {
        if let Some(at) = self.after_apostrophe
            && &self.text[at..] == "s"
        {
            // A possessive: `bureau's` is about the bureau.
            self.text.truncate(at);
        }
        if !self.text.is_empty() && self.chars <= WORD_CHARS_MAX {
            fold_plural(&mut self.text);
            sink(&self.text, self.from, self.to);
        }
        self.text.clear();
        self.chars = 0;
        self.apostrophe_pending = false;
        self.after_apostrophe = None;
    }
}

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

/// Full-width ASCII forms (U+FF01–U+FF5E) as ASCII; Chinese text often writes digits and Latin
/// letters that way. The ideographic space is a space.
fn widen_to_ascii(c: char) -> char {
    match u32::from(c) {
        code @ 0xFF01..=0xFF5E => char::from_u32(code - 0xFEE0).unwrap_or(c),
        0x3000 => ' ',
        _ => c,
    }
}

/// Han ideographs (all blocks and extensions), kana and the CJK compatibility ideographs:
/// scripts written without spaces between words.
fn is_cjk(c: char) -> bool {
    matches!(
        u32::from(c),
        0x3040..=0x30FF       // hiragana, katakana
            | 0x31F0..=0x31FF // katakana phonetic extensions
            | 0x3400..=0x4DBF // extension A
            | 0x4E00..=0x9FFF // unified ideographs
            | 0xF900..=0xFAFF // compatibility ideographs
            | 0xFF66..=0xFF9F // half-width katakana
            | 0x20000..=0x2FA1F // extensions B–F, compatibility supplement
            | 0x30000..=0x323AF // extensions G, H
    )
}

/// Harman's S stemmer on a lower-cased word of at least four characters whose plural `s`
/// follows a letter (so `1990s` keeps its `s`).
fn fold_plural(word: &mut String) {
    if word.chars().count() < 4 || !word.ends_with('s') {
        return;
    }
    let before_s = word[..word.len() - 1].chars().next_back();
    if !before_s.is_some_and(char::is_alphabetic) {
        return;
    }
    if word.ends_with("ies") && !word.ends_with("eies") && !word.ends_with("aies") {
        word.truncate(word.len() - 3);
        word.push('y');
        return;
    }
    // The rules `-es` → `-e` (not after `a`, `e`, `o`) and `-s` → `` are tried in turn, and
    // either drops the `s`; only `-us` and `-ss` keep it.
    if !word.ends_with("us") && !word.ends_with("ss") {
        word.truncate(word.len() - 1);
    }
}

/// The tokenizer as tantivy runs it, registered under [`TOKENIZER_VERSION`].
#[derive(Debug, Clone, Default)]
pub(crate) struct CorpusTokenizer {
    tokens: Vec<Token>,
}

impl Tokenizer for CorpusTokenizer {
    type TokenStream<'a> = CorpusTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CorpusTokenStream<'a> {
        self.tokens.clear();
        let mut position = 0;
        for_each_term(text, |term, offset_from, offset_to| {
            self.tokens.push(Token {
                offset_from,
                offset_to,
                position,
                text: term.to_string(),
                position_length: 1,
            });
            position += 1;
        });
        CorpusTokenStream {
            tokens: &mut self.tokens,
            next: 0,
        }
    }
}

/// The terms of one text, handed to tantivy one at a time.
#[derive(Debug)]
pub(crate) struct CorpusTokenStream<'a> {
    tokens: &'a mut Vec<Token>,
    next: usize,
}

impl TokenStream for CorpusTokenStream<'_> {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next.saturating_sub(1)]
    }

    fn token_mut(&mut self) -> &mut Token {
        let at = self.next.saturating_sub(1);
        &mut self.tokens[at]
    }
}

/// Names the search analyzer: the corpus tokenizer's terms with English words stemmed (below).
/// The index registers the searchable fields' analyzer under it, and it is part of the index
/// format and of every index state id, so stems never change under a recorded search.
pub const SEARCH_ANALYZER_VERSION: &str = "research-ledger-search-v1";

/// The Snowball English stemmer of the `frostem` release this crate pins exactly: which stems a
/// word gets is part of the index.
fn english_stemmer() -> frostem::Stemmer {
    frostem::Stemmer::new(frostem::Algorithm::English)
}

/// A term as the search analyzer indexes it: an English word (ASCII letters, perhaps with
/// digits) by its Snowball English stem, so `warming`, `warmed` and `warms` meet at `warm`;
/// anything else (numbers, CJK characters and pairs, words in other Latin scripts) as
/// [`tokenize`] gives it, since an English stemmer would only damage it.
fn stem_term<'a>(stemmer: &frostem::Stemmer, term: &'a str) -> std::borrow::Cow<'a, str> {
    let english = term
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && term.bytes().any(|b| b.is_ascii_lowercase());
    if english {
        stemmer.stem(term)
    } else {
        std::borrow::Cow::Borrowed(term)
    }
}

/// The terms the search analyzer gives for `text`, in order, repeats included: what the
/// corpus's searchable fields index.
pub fn search_terms(text: &str) -> Vec<String> {
    let stemmer = english_stemmer();
    let mut out = Vec::new();
    for_each_term(text, |term, _, _| {
        out.push(stem_term(&stemmer, term).into_owned());
    });
    out
}

/// The terms a query is matched with: its content terms (stop words out, as `v2` defines them),
/// stemmed, each once in the order first seen; a query of stop words only keeps them all, so
/// it still finds what holds them. Function words hold no topic: matching them ranks a passage
/// by how many `the` and `of` it has rather than by what it is about.
pub fn query_terms(query: &str) -> Vec<String> {
    query_terms_and_kind(query).0
}

/// [`query_terms`], and whether they are content terms (false when the query had only stop
/// words and kept them).
pub(crate) fn query_terms_and_kind(query: &str) -> (Vec<String>, bool) {
    let terms = tokenize(query);
    let content = research::rules::stopwords::content_terms(&terms);
    let is_content = !content.is_empty();
    let kept = if is_content { content } else { terms };
    let stemmer = english_stemmer();
    let mut out: Vec<String> = Vec::new();
    for term in &kept {
        let stem = stem_term(&stemmer, term);
        if !out.iter().any(|t| *t == stem) {
            out.push(stem.into_owned());
        }
    }
    (out, is_content)
}

/// The search analyzer as tantivy runs it, registered under [`SEARCH_ANALYZER_VERSION`].
#[derive(Debug, Clone, Default)]
pub(crate) struct SearchTokenizer {
    tokens: Vec<Token>,
}

impl Tokenizer for SearchTokenizer {
    type TokenStream<'a> = CorpusTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CorpusTokenStream<'a> {
        self.tokens.clear();
        let stemmer = english_stemmer();
        let mut position = 0;
        for_each_term(text, |term, offset_from, offset_to| {
            self.tokens.push(Token {
                offset_from,
                offset_to,
                position,
                text: stem_term(&stemmer, term).into_owned(),
                position_length: 1,
            });
            position += 1;
        });
        CorpusTokenStream {
            tokens: &mut self.tokens,
            next: 0,
        }
    }
}

/// The content terms of `text` under rule set `v2`: its terms without `v2`'s stop words, each
/// once, in the order first seen.
pub fn content_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    for_each_term(text, |term, _, _| {
        research::rules::stopwords::push_content_term(&mut terms, term)
    });
    terms
}

/// Whether `text` holds each of `terms`, as [`tokenize`] gives its terms: without a string made
/// for each of the text's terms.
pub fn terms_found(text: &str, terms: &[String]) -> Vec<bool> {
    let mut found = vec![false; terms.len()];
    for_each_term(text, |term, _, _| {
        for (i, t) in terms.iter().enumerate() {
            if t == term {
                found[i] = true;
            }
        }
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stop_word_is_a_term_the_tokenizer_gives() {
        // An English function word must be stopped in whatever form the tokenizer folds it
        // into (`this` → `thi`); a Chinese entry must be a term the tokenizer gives.
        for word in research::rules::stopwords::all() {
            let terms = tokenize(word);
            if word.is_ascii() {
                assert!(
                    terms
                        .iter()
                        .all(|t| research::rules::stopwords::is_stop_word(t)),
                    "`{word}` tokenizes to {terms:?}"
                );
            } else {
                assert!(
                    terms.iter().any(|t| t == word),
                    "`{word}` tokenizes to {terms:?}"
                );
            }
        }
        assert_eq!(
            content_terms("Is this why the Arctic's ice does melt? 是否融化"),
            ["arctic", "ice", "melt", "否", "否融", "融", "融化", "化"]
        );
    }

    fn terms(text: &str) -> Vec<String> {
        tokenize(text)
    }

    /// The definitions the one-pass forms must agree with: the text's tokens, then the stop
    /// words out, or a lookup among them.
    fn check_one_pass_forms(text: &str, wanted: &[String]) {
        let tokens = tokenize(text);
        assert_eq!(
            content_terms(text),
            research::rules::stopwords::content_terms(&tokens),
            "{text:?}"
        );
        let found: Vec<bool> = wanted.iter().map(|w| tokens.contains(w)).collect();
        assert_eq!(terms_found(text, wanted), found, "{text:?} {wanted:?}");
    }

    #[test]
    fn one_pass_forms_agree_with_their_definitions_on_the_sample_corpus() {
        let folder =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus/sample/documents");
        let mut read = 0;
        for entry in std::fs::read_dir(&folder).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            let wanted: Vec<String> = ["evidence", "the", "productivity", "week", "2024", "不"]
                .iter()
                .map(|s| s.to_string())
                .chain(tokenize(&text).into_iter().step_by(7))
                .collect();
            for line in text.lines() {
                check_one_pass_forms(line, &wanted);
            }
            check_one_pass_forms(&text, &wanted);
            read += 1;
        }
        assert!(read > 10, "read {read} documents of {}", folder.display());
    }

    proptest::proptest! {
        #[test]
        fn one_pass_forms_agree_with_their_definitions(
            text in "([a-zA-Z'’ .,0-9]|[是否融化共享单车]|[éß])*",
            wanted in proptest::collection::vec("[a-z'是否]{0,5}", 0..6),
        ) {
            check_one_pass_forms(&text, &wanted);
        }
    }

    #[test]
    fn search_terms_stem_english_words_only() {
        assert_eq!(
            search_terms("Warming oceans warmed faster; glaciers are retreating"),
            [
                "warm", "ocean", "warm", "faster", "glacier", "are", "retreat"
            ]
        );
        // Numbers, CJK and accented words keep their terms.
        assert_eq!(
            search_terms("1990s 共享单车 cafés"),
            [
                "1990s", "共", "共享", "享", "享单", "单", "单车", "车", "café"
            ]
        );
        let mut tokenizer = SearchTokenizer::default();
        let mut stream = tokenizer.token_stream("Rising seas 上升");
        let mut seen = Vec::new();
        while let Some(token) = stream.next() {
            seen.push(token.text.clone());
        }
        assert_eq!(seen, search_terms("Rising seas 上升"));
    }

    #[test]
    fn stems_are_pinned() {
        // The stems are part of the index: a stemmer release that changed one of these must
        // come with a new SEARCH_ANALYZER_VERSION, which rebuilds every index.
        let words = [
            ("warming", "warm"),
            ("temperatures", "temperatur"),
            ("increasing", "increas"),
            ("emissions", "emiss"),
            ("scientific", "scientif"),
            ("consensus", "consensus"),
            ("generously", "generous"),
            ("studies", "studi"),
        ];
        for (word, stem) in words {
            assert_eq!(search_terms(word), [stem], "{word}");
        }
    }

    #[test]
    fn query_terms_drop_stop_words_unless_nothing_else_is_left() {
        assert_eq!(
            query_terms("Is the Arctic ice melting? Arctic ice has melted"),
            ["arctic", "ice", "melt"]
        );
        assert_eq!(query_terms("to be or not to be"), ["to", "be", "or", "not"]);
        assert_eq!(query_terms("是否融化"), ["否", "否融", "融", "融化", "化"]);
    }

    #[test]
    fn english_words_lower_cased_and_plurals_folded() {
        assert_eq!(
            terms("Did the four-day work week raise output at mid-sized software firms?"),
            [
                "did", "the", "four", "day", "work", "week", "raise", "output", "at", "mid",
                "sized", "software", "firm"
            ]
        );
        assert_eq!(terms("Algae blooms"), ["algae", "bloom"]);
        // The S stemmer's rules, quirks included: they only need to treat a question and a
        // text alike.
        assert_eq!(terms("studies boxes species"), ["study", "boxe", "specy"]);
        assert_eq!(terms("bus gas its this"), ["bus", "gas", "its", "thi"]);
        assert_eq!(
            terms("status glass toes 1990s"),
            ["status", "glass", "toe", "1990s"]
        );
    }

    #[test]
    fn apostrophes_inside_words_join() {
        assert_eq!(terms("the Bureau's survey"), ["the", "bureau", "survey"]);
        assert_eq!(
            terms("don’t 'quoted' firms' it's"),
            ["dont", "quoted", "firm", "it"]
        );
    }

    #[test]
    fn chinese_gives_characters_and_pairs() {
        assert_eq!(
            terms("共享单车"),
            ["共", "共享", "享", "享单", "单", "单车", "车"]
        );
        assert_eq!(
            terms("青川市，2023年"),
            ["青", "青川", "川", "川市", "市", "2023", "年"]
        );
    }

    #[test]
    fn mixed_scripts_and_full_width_forms() {
        assert_eq!(
            terms("地铁3号线"),
            ["地", "地铁", "铁", "3", "号", "号线", "线"]
        );
        assert_eq!(terms("Ｅａｓｔｖａｌｅ　２０２４"), ["eastvale", "2024"]);
        assert_eq!(
            terms("Lake Varden（瓦登湖）"),
            ["lake", "varden", "瓦", "瓦登", "登", "登湖", "湖"]
        );
    }

    #[test]
    fn long_runs_are_dropped() {
        let long = "x".repeat(WORD_CHARS_MAX + 1);
        assert_eq!(terms(&format!("a {long} b")), ["a", "b"]);
        let fits = "y".repeat(WORD_CHARS_MAX);
        assert_eq!(terms(&fits), std::slice::from_ref(&fits));
    }

    #[test]
    fn tantivy_stream_matches_tokenize_with_offsets() {
        let text = "Runoff 径流 rose";
        let mut tokenizer = CorpusTokenizer::default();
        let mut stream = tokenizer.token_stream(text);
        let mut seen = Vec::new();
        while let Some(token) = stream.next() {
            seen.push((
                token.text.clone(),
                text[token.offset_from..token.offset_to].to_string(),
            ));
        }
        assert_eq!(
            seen,
            [
                ("runoff".to_string(), "Runoff".to_string()),
                ("径".to_string(), "径".to_string()),
                ("径流".to_string(), "径流".to_string()),
                ("流".to_string(), "流".to_string()),
                ("rose".to_string(), "rose".to_string()),
            ]
        );
        assert_eq!(
            seen.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(),
            tokenize(text)
        );
    }
}
