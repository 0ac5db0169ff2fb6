//! Summaries over generated English and Chinese text: never over the budget, never cut inside a
//! sentence when a sentence ends within the budget, always a prefix of the text.

use proptest::prelude::*;
use sources::summarize;
use sources::summary::{ELLIPSIS, normalise_whitespace};

/// Pieces text is generated from: words of both scripts, numbers with decimal points, URLs,
/// quotes and brackets, every sentence end, and whitespace of several kinds.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,12}".prop_map(|w| format!("{w} ")),
        4 => "[\u{4e00}-\u{4e80}]{1,6}",
        1 => Just("7.4 ".to_string()),
        1 => Just("example.org ".to_string()),
        1 => Just("\"".to_string()),
        1 => Just("”".to_string()),
        1 => Just("）".to_string()),
        1 => Just(". ".to_string()),
        1 => Just("! ".to_string()),
        1 => Just("? ".to_string()),
        1 => Just("。".to_string()),
        1 => Just("！".to_string()),
        1 => Just("？".to_string()),
        1 => Just("\n\n".to_string()),
        1 => Just("\t".to_string()),
    ]
}

fn text(pieces: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), pieces).prop_map(|p| p.concat())
}

/// An independent reading of the rule: positions (in characters) just after a sentence end —
/// `.`/`!`/`?` followed, after any closing quotes or brackets, by whitespace or the end, or a
/// Chinese sentence end followed by any closers.
fn sentence_ends(chars: &[char]) -> Vec<usize> {
    let latin = ['.', '!', '?'];
    let cjk = ['。', '！', '？'];
    let closers = [
        '"', '\'', '”', '’', ')', ']', '」', '』', '）', '】', '》', '〉',
    ];
    let mut ends = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if latin.contains(&chars[i]) || cjk.contains(&chars[i]) {
            let mut j = i;
            let mut any_cjk = false;
            while j < chars.len() && (latin.contains(&chars[j]) || cjk.contains(&chars[j])) {
                any_cjk |= cjk.contains(&chars[j]);
                j += 1;
            }
            while j < chars.len() && closers.contains(&chars[j]) {
                j += 1;
            }
            if any_cjk || j == chars.len() || chars[j].is_whitespace() {
                ends.push(j);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    ends
}

fn check(text: &str, budget: usize) -> Result<(), TestCaseError> {
    let summary = summarize(text, budget);
    let normal = normalise_whitespace(text);
    let chars: Vec<char> = normal.chars().collect();
    let summary_chars: Vec<char> = summary.chars().collect();
    prop_assert!(
        summary_chars.len() <= budget,
        "{} > {budget}",
        summary_chars.len()
    );
    if chars.len() <= budget {
        prop_assert_eq!(&summary, &normal);
        return Ok(());
    }
    let best_end = sentence_ends(&chars)
        .into_iter()
        .filter(|e| *e <= budget)
        .max();
    match best_end {
        Some(end) => {
            // Cut exactly after the last sentence that fits: nothing of the next one.
            let expected: String = chars[..end].iter().collect();
            prop_assert_eq!(&summary, &expected);
        }
        None => {
            prop_assert_eq!(summary_chars.last(), Some(&ELLIPSIS));
            let body: String = summary_chars[..summary_chars.len() - 1].iter().collect();
            prop_assert!(normal.starts_with(&body), "{body:?} is not a prefix");
            prop_assert!(!body.ends_with(' '));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn summaries_of_long_texts_respect_the_budget_and_sentence_ends(t in text(100..500)) {
        check(&t, 800)?;
    }

    #[test]
    fn summaries_at_small_budgets(t in text(1..60), budget in 1usize..120) {
        check(&t, budget)?;
    }
}

#[test]
fn sample_bodies_with_sentence_ends_are_cut_at_one() {
    // The sample's long bodies: eight English with sentence ends, one Chinese, and the data
    // notes whose first sentence ends past character 800.
    let documents = crate::sample_dir().join("documents");
    let mut cut_at_sentence = 0;
    for entry in std::fs::read_dir(documents).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let body = text.splitn(3, "---\n").nth(2).unwrap();
        let summary = summarize(body, 800);
        assert!(summary.chars().count() <= 800);
        if normalise_whitespace(body).chars().count() > 800 {
            if path.ends_with("fwd-data-2024-output-panel.md") {
                assert!(summary.ends_with(ELLIPSIS), "{summary}");
            } else {
                let last = summary.chars().last().unwrap();
                assert!(
                    ['.', '!', '?', '。', '！', '？', '"', '”'].contains(&last),
                    "{path:?}: {summary}"
                );
                cut_at_sentence += 1;
            }
        }
    }
    assert!(cut_at_sentence >= 9, "{cut_at_sentence}");
}
