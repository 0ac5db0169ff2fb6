//! Checks of the code itself that a compiler does not make: every source file says what it is
//! for in its first line (`//!`), as ARCHITECTURE.md promises.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_opens_with_what_it_is_for() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        rust_files(&krate.unwrap().path().join("src"), &mut files);
    }
    assert!(files.len() > 50, "the sources were found: {}", files.len());
    let silent: Vec<String> = files
        .iter()
        .filter(|path| {
            let text = std::fs::read_to_string(path).unwrap();
            !text
                .lines()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.starts_with("//!"))
        })
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        silent.is_empty(),
        "these files do not open with a `//!` comment saying what they are for: {silent:?}"
    );
}

/// The longest a function may be, in lines from its `fn` to its closing brace.
const FUNCTION_LINES_MAX: usize = 70;

/// Functions longer than [`FUNCTION_LINES_MAX`] when the bound came in: `path name lines`. The
/// list only shrinks: a function on it may not grow past its lines, and one that fits the bound
/// again must leave the list.
const LONG_FUNCTIONS: &str = include_str!("long_functions.txt");

/// Every function of `text` outside `#[cfg(test)]` modules, with its length in lines.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    #[derive(PartialEq)]
    enum In {
        Code,
        Str,
        RawStr(usize),
        BlockComment(usize),
    }
    let mut state = In::Code;
    let mut depth = 0usize;
    let mut open: Vec<(String, usize, usize)> = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let mut test_depth: Option<usize> = None;
    let mut cfg_test = false;
    let mut out = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        if state == In::Code && line.trim() == "#[cfg(test)]" {
            cfg_test = true;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match state {
                In::Str => {
                    if c == '\\' {
                        i += 1;
                    } else if c == '"' {
                        state = In::Code;
                    }
                }
                In::RawStr(hashes) => {
                    if c == '"'
                        && chars[i + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes
                    {
                        state = In::Code;
                        i += hashes;
                    }
                }
                In::BlockComment(n) => {
                    if c == '*' && chars.get(i + 1) == Some(&'/') {
                        state = if n == 1 {
                            In::Code
                        } else {
                            In::BlockComment(n - 1)
                        };
                        i += 1;
                    } else if c == '/' && chars.get(i + 1) == Some(&'*') {
                        state = In::BlockComment(n + 1);
                        i += 1;
                    }
                }
                In::Code => {
                    if c == '/' && chars.get(i + 1) == Some(&'/') {
                        break;
                    } else if c == '/' && chars.get(i + 1) == Some(&'*') {
                        state = In::BlockComment(1);
                        i += 1;
                    } else if c == '"' {
                        state = In::Str;
                    } else if c == 'r'
                        && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_')
                        && matches!(chars.get(i + 1), Some('"') | Some('#'))
                    {
                        let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                        if chars.get(i + 1 + hashes) == Some(&'"') {
                            state = In::RawStr(hashes);
                            i += hashes + 1;
                        }
                    } else if c == '\'' {
                        // A char literal (`'{'`, `'\''`); a lifetime has no closing quote.
                        if chars.get(i + 2) == Some(&'\'') {
                            i += 2;
                        } else if chars.get(i + 1) == Some(&'\\')
                            && let Some(end) = chars[i + 2..].iter().position(|&q| q == '\'')
                        {
                            i += end + 2;
                        }
                    } else if c == 'f'
                        && chars.get(i + 1) == Some(&'n')
                        && chars.get(i + 2) == Some(&' ')
                        && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_')
                    {
                        let name: String = chars[i + 3..]
                            .iter()
                            .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
                            .collect();
                        if !name.is_empty() {
                            pending = Some((name, line_no));
                        }
                    } else if c == ';' {
                        pending = None;
                    } else if c == '{' {
                        if cfg_test && test_depth.is_none() {
                            test_depth = Some(depth);
                        }
                        cfg_test = false;
                        if let Some((name, start)) = pending.take() {
                            open.push((name, start, depth));
                        }
                        depth += 1;
                    } else if c == '}' {
                        depth = depth.saturating_sub(1);
                        if open.last().is_some_and(|(_, _, d)| *d == depth) {
                            let (name, start, _) = open.pop().unwrap_or_default();
                            if test_depth.is_none() {
                                out.push((name, line_no - start + 1));
                            }
                        }
                        if test_depth == Some(depth) {
                            test_depth = None;
                        }
                    }
                }
            }
            i += 1;
        }
    }
    out
}

#[test]
fn functions_fit_the_bound_or_are_on_a_list_that_only_shrinks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        rust_files(&krate.unwrap().path().join("src"), &mut files);
    }
    // Unit tests in a file of their own (`mod tests;` under `#[cfg(test)]`) are test code.
    files.retain(|p| p.file_name().is_some_and(|n| n != "tests.rs"));
    let mut long: Vec<(String, String, usize)> = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let shown = path.strip_prefix(root).unwrap().display().to_string();
        for (name, lines) in function_lengths(&text) {
            if lines > FUNCTION_LINES_MAX {
                long.push((shown.clone(), name, lines));
            }
        }
    }
    let listed: Vec<(String, String, usize)> = LONG_FUNCTIONS
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let path = parts.next().unwrap().to_owned();
            let name = parts.next().unwrap().to_owned();
            let lines = parts.next().unwrap().parse().unwrap();
            (path, name, lines)
        })
        .collect();
    let mut problems = Vec::new();
    for (path, name, lines) in &long {
        match listed.iter().find(|(p, n, _)| p == path && n == name) {
            None => problems.push(format!(
                "{path}: fn {name} is {lines} lines (at most {FUNCTION_LINES_MAX}): split it"
            )),
            Some((_, _, max)) if lines > max => problems.push(format!(
                "{path}: fn {name} grew to {lines} lines; the list allows it {max}, no more"
            )),
            Some(_) => {}
        }
    }
    for (path, name, _) in &listed {
        if !long.iter().any(|(p, n, _)| p == path && n == name) {
            problems.push(format!(
                "{path}: fn {name} fits the bound now (or is gone): take it off tests/it/long_functions.txt"
            ));
        }
    }
    if std::env::var_os("TIDY_PRINT_LONG").is_some() {
        for (path, name, lines) in &long {
            println!("{path} {name} {lines}");
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_function_scanner_measures_what_it_should() {
    let text = r##"
fn short() {
    let s = "{ not a brace";
    let c = '{';
}

#[cfg(test)]
mod tests {
    fn ignored() {
        1
    }
}

pub(crate) fn outer() -> u8 {
    /* { */
    let r = r#"}"#;
    fn inner() {}
    2
}
"##;
    let lengths = function_lengths(text);
    assert_eq!(
        lengths,
        vec![
            ("short".to_owned(), 4),
            ("inner".to_owned(), 1),
            ("outer".to_owned(), 6)
        ]
    );
}

#[test]
fn every_limit_a_refusal_names_is_one_the_docs_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).unwrap() {
        rust_files(&krate.unwrap().path().join("src"), &mut files);
    }
    let mut docs = std::fs::read_to_string(root.join("README.md")).unwrap();
    for doc in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = doc.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let mut named = std::collections::BTreeSet::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for (at, _) in text.match_indices("limit: \"") {
            let rest = &text[at + "limit: \"".len()..];
            let name = &rest[..rest.find('"').unwrap()];
            named.insert(name.to_owned());
        }
    }
    assert!(named.len() > 15, "the refusals were found: {named:?}");
    let unknown: Vec<&String> = named
        .iter()
        .filter(|name| !docs.contains(&format!("`{name}`")))
        .collect();
    assert!(
        unknown.is_empty(),
        "refusals name limits an operator cannot look up in the docs: {unknown:?}"
    );
    // And the other way: a refusal the docs quote (`limit: name`) names a limit the code does
    // (the listener's refusals name theirs from a table, not in a `limit:` field).
    let sources: String = files
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    let quoted: Vec<&str> = docs
        .match_indices("limit: ")
        .map(|(at, _)| {
            let rest = &docs[at + "limit: ".len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|name| !name.is_empty())
        .collect();
    assert!(
        quoted.len() >= 5,
        "the quoted refusals were found: {quoted:?}"
    );
    let unnamed: Vec<&&str> = quoted
        .iter()
        .filter(|name| !sources.contains(&format!("\"{name}\"")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "the docs quote refusals no code makes: {unnamed:?}"
    );
}
