//! The stop words of rule set `v2`: terms that say nothing about a question's topic, so its
//! relevance counts only the others (its *content terms*).
//!
//! Terms are compared as the corpus's tokenizer gives them: lower case, and words of four or
//! more letters with a plural `s` folded (`this` → `thi`, `does` → `doe`), so both forms are
//! listed. Chinese text is tokenized into characters and pairs of adjacent characters: the list
//! holds the function characters and the function words of two characters. The lists are part of
//! the rule set; changing them would be a new rule set, since recorded relevance rests on them.

/// English function words, and the forms the tokenizer folds some of them into.
const ENGLISH: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "afterward",
    "afterwards",
    "again",
    "against",
    "all",
    "also",
    "alway",
    "always",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "beside",
    "besides",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "doe",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "either",
    "else",
    "ever",
    "every",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "however",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "myself",
    "neither",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselve",
    "ourselves",
    "out",
    "over",
    "own",
    "perhap",
    "perhaps",
    "same",
    "shall",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselve",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "thi",
    "this",
    "those",
    "through",
    "thus",
    "to",
    "too",
    "toward",
    "towards",
    "under",
    "until",
    "up",
    "upon",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "wherea",
    "whereas",
    "whether",
    "which",
    "while",
    "who",
    "whom",
    "whose",
    "why",
    "will",
    "with",
    "within",
    "without",
    "would",
    "yet",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselve",
    "yourselves",
];

/// Chinese function characters and two-character function words.
const CHINESE: &[&str] = &[
    "的", "了", "是", "在", "和", "与", "及", "或", "也", "都", "而", "之", "其", "这", "那", "有",
    "为", "对", "从", "以", "把", "被", "让", "给", "向", "吗", "呢", "吧", "啊", "个", "着", "过",
    "就", "还", "又", "很", "会", "能", "要", "将", "于", "由", "并", "但", "则", "什么", "是否",
    "如何", "怎么", "怎样", "为什", "哪些", "我们", "你们", "他们", "她们", "它们", "这个", "那个",
    "一个", "这些", "那些", "没有", "可以", "因为", "所以", "但是", "如果", "虽然", "以及", "或者",
    "还是", "已经", "其中", "对于", "关于", "是不", "不是", "能否", "会不",
];

/// Every stop word, for a lookup that does not scan the lists: relevance asks for each term of
/// every question and text.
static STOP_WORDS: std::sync::LazyLock<std::collections::HashSet<&'static str>> =
    std::sync::LazyLock::new(|| all().collect());

/// Whether `term` (as the tokenizer gives it) is a stop word of `v2`.
pub fn is_stop_word(term: &str) -> bool {
    STOP_WORDS.contains(term)
}

/// Every stop word, English then Chinese, for checks that the list is closed under the
/// tokenizer.
pub fn all() -> impl Iterator<Item = &'static str> {
    ENGLISH.iter().chain(CHINESE).copied()
}

/// The content terms of a tokenized text: stop words out, repeats kept once, in the order first
/// seen.
pub fn content_terms<S: AsRef<str>>(tokens: &[S]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for token in tokens {
        push_content_term(&mut out, token.as_ref());
    }
    out
}

/// Adds `token` to `terms` when it is a content term not there yet: one step of
/// [`content_terms`], for a caller that reads tokens one at a time.
pub fn push_content_term(terms: &mut Vec<String>, token: &str) {
    if !is_stop_word(token) && !terms.iter().any(|t| t == token) {
        terms.push(token.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookup_holds_every_listed_word_and_nothing_else() {
        for word in all() {
            assert!(is_stop_word(word), "{word}");
        }
        for term in ["global", "warming", "共享", "", "The", "thes", "单车"] {
            assert_eq!(is_stop_word(term), all().any(|w| w == term), "{term}");
        }
    }

    #[test]
    fn function_words_go_and_content_terms_stay_once_in_order() {
        let tokens = [
            "is", "global", "warming", "driving", "the", "polar", "bear", "toward", "global", "是",
            "共享", "单车",
        ];
        assert_eq!(
            content_terms(&tokens),
            [
                "global", "warming", "driving", "polar", "bear", "共享", "单车"
            ]
        );
    }
}
