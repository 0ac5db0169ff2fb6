//! Summaries of evidence texts: at most `summary_chars_max` characters (SPEC §4: 800 Unicode
//! scalar values), cut where a sentence ends.
//!
//! A summary is what a client reads before screening an item, so a cut mid-sentence would put
//! words in a source's mouth that it did not say in that form. The text is cut after the last
//! sentence that fits whole; only a text with no sentence end inside the budget is cut at a word
//! (or, in text without spaces, a character) and marked with `…`.

/// Characters that end a sentence. `.`, `!` and `?` end one only before whitespace or the end of
/// the text (so `7.4` and `example.org` do not); the full-width Chinese forms end one anywhere.
const LATIN_ENDS: [char; 3] = ['.', '!', '?'];
const CJK_ENDS: [char; 3] = ['。', '！', '？'];

/// Closing quotes and brackets that belong to the sentence they follow: `He said "no."` ends
/// after the quote.
const CLOSERS: [char; 12] = [
    '"', '\'', '”', '’', ')', ']', '」', '』', '）', '】', '》', '〉',
];

/// The ellipsis that marks a cut inside a sentence.
pub const ELLIPSIS: char = '…';

/// `text` with every run of whitespace (newlines included) made one space and the ends trimmed.
/// Summaries are one paragraph; the budget is spent on words, not on line breaks.
pub fn normalise_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// The summary of `text` in at most `chars_max` characters.
///
/// The whitespace-normalised text when it fits; else its longest prefix that ends at a sentence
/// end; else, when no sentence ends within the budget, the longest prefix of at most
/// `chars_max - 1` characters that ends before a space (if that keeps at least half the budget)
/// or at any character, followed by `…`.
pub fn summarize(text: &str, chars_max: usize) -> String {
    let text = normalise_whitespace(text);
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= chars_max {
        return text;
    }
    if let Some(end) = last_sentence_end(&chars, chars_max) {
        return chars[..end].iter().collect();
    }
    if chars_max == 0 {
        return String::new();
    }
    let budget = chars_max - 1;
    let cut = chars[..=budget]
        .iter()
        .rposition(|c| *c == ' ')
        .filter(|at| *at >= budget / 2)
        .unwrap_or(budget);
    let mut out: String = chars[..cut].iter().collect();
    let kept = out.trim_end().len();
    out.truncate(kept);
    out.push(ELLIPSIS);
    out
}

/// The largest `end <= chars_max` such that `chars[..end]` ends a sentence (terminator plus any
/// closers), if any.
pub(crate) fn last_sentence_end(chars: &[char], chars_max: usize) -> Option<usize> {
    let mut best = None;
    let mut i = 0;
    while i < chars.len() && i < chars_max {
        let c = chars[i];
        if LATIN_ENDS.contains(&c) || CJK_ENDS.contains(&c) {
            // A run such as `?!`, `...` or `。”` ends the sentence where the run ends.
            let mut end = i + 1;
            let mut cjk = CJK_ENDS.contains(&c);
            while end < chars.len()
                && (LATIN_ENDS.contains(&chars[end]) || CJK_ENDS.contains(&chars[end]))
            {
                cjk |= CJK_ENDS.contains(&chars[end]);
                end += 1;
            }
            while end < chars.len() && CLOSERS.contains(&chars[end]) {
                end += 1;
            }
            let ends_here = cjk || end == chars.len() || chars[end].is_whitespace();
            if ends_here && end <= chars_max {
                best = Some(end);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole_with_spaces_collapsed() {
        assert_eq!(summarize("  One.\n\nTwo!  ", 800), "One. Two!");
    }

    #[test]
    fn cut_after_the_last_whole_sentence() {
        let text = "First one. Second one is here. Third sentence runs past the budget.";
        assert_eq!(summarize(text, 40), "First one. Second one is here.");
        assert_eq!(summarize(text, 30), "First one. Second one is here.");
        assert_eq!(summarize(text, 29), "First one.");
    }

    #[test]
    fn decimals_and_hosts_do_not_end_sentences() {
        let text = "Output rose 7.4 per cent at example.org firms and more words follow here";
        assert_eq!(summarize(text, 20), "Output rose 7.4 per…");
    }

    #[test]
    fn closing_quotes_stay_with_their_sentence() {
        let text = "He said \"it worked.\" Then the rest goes on for far too long to fit.";
        assert_eq!(summarize(text, 30), "He said \"it worked.\"");
        assert_eq!(
            summarize("这是第一句。“第二句！”然后还有很多很多很多内容", 14),
            "这是第一句。“第二句！”"
        );
    }

    #[test]
    fn chinese_sentences_end_without_spaces() {
        assert_eq!(
            summarize("第一句话。第二句话！第三句话很长很长很长", 12),
            "第一句话。第二句话！"
        );
    }

    #[test]
    fn no_sentence_end_falls_back_to_a_word_then_a_character() {
        assert_eq!(summarize("alpha beta gamma delta", 12), "alpha beta…");
        assert_eq!(summarize("没有句号的一段很长的中文文字", 6), "没有句号的…");
        // A space too early to keep half the budget is not used.
        assert_eq!(summarize("a bcdefghijklmnopqrstuvwxyz", 10), "a bcdefgh…");
    }

    #[test]
    fn zero_budget_gives_nothing() {
        assert_eq!(summarize("Some text.", 0), "");
    }
}
