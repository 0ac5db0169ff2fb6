//! Bundles the sample corpus into the binary, so `research-ledger demo` runs on a fresh machine
//! from any directory.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read when the script runs, not when it was compiled: a build directory reused by another
    // checkout must still bundle this checkout's corpus.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&manifest_dir).join("corpus/sample");
    println!("cargo:rerun-if-changed={}", root.display());
    let documents = root.join("documents");
    println!("cargo:rerun-if-changed={}", documents.display());
    let mut names: Vec<String> = match std::fs::read_dir(&documents) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".md") || n.ends_with(".jsonl"))
            .collect(),
        Err(e) => panic!("cannot read {}: {e}", documents.display()),
    };
    names.sort();
    let mut out = String::from(
        "/// The sample corpus's documents: file name and contents.\npub(crate) const SAMPLE_DOCUMENTS: &[(&str, &str)] = &[\n",
    );
    for name in &names {
        let path = documents.join(name);
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push_str(
        "];\n\n/// The sample's research questions, screening judgements and expected outcomes.\n",
    );
    let _ = writeln!(
        out,
        "pub(crate) const SAMPLE_QUESTIONS: &str = include_str!({:?});",
        root.join("questions.json").display().to_string()
    );
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    if let Err(e) = std::fs::write(Path::new(&out_dir).join("sample_corpus.rs"), out) {
        panic!("cannot write the bundled sample corpus: {e}");
    }
}
