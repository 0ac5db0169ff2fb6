//! Reading collections from disk: Markdown and text files with YAML front matter, JSON files
//! (one object or an array of them) and JSON Lines.
//!
//! Reading is separate from indexing and never stops at a bad document: each document either
//! becomes a [`RawDocument`] or an [`IngestError`] that names the file, the line or item, and the
//! field, so one run reports everything that needs fixing while the good documents go in.
//! Folders are walked recursively in byte order of their entries' names, so the same folder is
//! always read in the same order and derived ids never depend on the file system.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::corpus::IngestProgress;
use crate::document::{Defaults, Document, Field, FieldProblem, RawDocument};
use crate::limits::CorpusLimits;

/// Where a document was read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// The line of a JSON Lines file (1-based), or the line of a syntax error.
    pub line: Option<u64>,
    /// The position in a JSON array (0-based).
    pub item: Option<usize>,
}

impl Location {
    fn file(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            line: None,
            item: None,
        }
    }

    fn at_line(path: &Path, line: u64) -> Self {
        Self {
            line: Some(line),
            ..Self::file(path)
        }
    }

    fn at_item(path: &Path, item: usize) -> Self {
        Self {
            item: Some(item),
            ..Self::file(path)
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(item) = self.item {
            write!(f, "[{item}]")?;
        }
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        Ok(())
    }
}

/// A document that could not be ingested, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngestError {
    /// Where it was read from.
    pub location: Location,
    /// Its id, when it got far enough to have one.
    pub document_id: Option<String>,
    /// The field at fault; none for a file that could not be read or parsed at all.
    pub field: Option<Field>,
    /// What is wrong, in words.
    pub problem: String,
}

impl fmt::Display for IngestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.location)?;
        if let Some(id) = &self.document_id {
            write!(f, " (id {id})")?;
        }
        match self.field {
            Some(Field::FrontMatter) => write!(f, ": front matter: {}", self.problem),
            Some(field) => write!(f, ": field `{field}`: {}", self.problem),
            None => write!(f, ": {}", self.problem),
        }
    }
}

impl IngestError {
    pub(crate) fn new(
        location: Location,
        field: Option<Field>,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            location,
            document_id: None,
            field,
            problem: problem.into(),
        }
    }

    pub(crate) fn from_field(location: Location, id: Option<String>, p: FieldProblem) -> Self {
        Self {
            location,
            document_id: id,
            field: Some(p.field),
            problem: p.problem,
        }
    }
}

/// Something odd about a document that did not stop it going in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngestWarning {
    /// Where it was read from.
    pub location: Location,
    /// What was odd.
    pub problem: String,
}

impl fmt::Display for IngestWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.problem)
    }
}

/// A file to read, with the name its documents' derived ids start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceFile {
    pub(crate) path: PathBuf,
    /// The path relative to the folder that was asked for (the file name for a file asked for
    /// by itself), with `/` between folders.
    pub(crate) id_base: String,
    pub(crate) format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `.md` or `.txt`: optional YAML front matter, then the text.
    Text,
    /// `.json`: one object or an array of objects.
    Json,
    /// `.jsonl`: one object per line.
    JsonLines,
}

impl Format {
    fn of(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "md" | "markdown" | "txt" => Some(Format::Text),
            "json" => Some(Format::Json),
            "jsonl" | "ndjson" => Some(Format::JsonLines),
            _ => None,
        }
    }
}

/// The files to read under `paths`, in order, and the paths that could not be used.
///
/// A folder contributes every file with a known extension below it, in byte order of names at
/// each level; names starting with `.` are skipped, and symbolic links to folders are not
/// followed (so a link cannot make the walk loop). A file named directly is read whatever its
/// place, but must have a known extension.
pub(crate) fn collect_files(paths: &[PathBuf]) -> (Vec<SourceFile>, Vec<IngestError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for root in paths {
        match fs::metadata(root) {
            Err(e) => errors.push(IngestError::new(
                Location::file(root),
                None,
                format!("cannot read: {e}"),
            )),
            Ok(meta) if meta.is_dir() => walk(root, root, &mut files, &mut errors),
            Ok(_) => match Format::of(root) {
                Some(format) => files.push(SourceFile {
                    path: root.clone(),
                    id_base: root
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| root.to_string_lossy().into_owned()),
                    format,
                }),
                None => errors.push(IngestError::new(
                    Location::file(root),
                    None,
                    "unsupported file type: expected .md, .txt, .json or .jsonl",
                )),
            },
        }
    }
    (files, errors)
}

fn walk(root: &Path, dir: &Path, files: &mut Vec<SourceFile>, errors: &mut Vec<IngestError>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(IngestError::new(
                Location::file(dir),
                None,
                format!("cannot list the folder: {e}"),
            ));
            return;
        }
    };
    let mut entries: Vec<fs::DirEntry> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(root, &path, files, errors);
            continue;
        }
        // A link to a file is read; a link to a folder is not followed.
        let is_file = kind.is_file() || (kind.is_symlink() && path.is_file());
        if !is_file {
            continue;
        }
        if let Some(format) = Format::of(&path) {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let id_base = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push(SourceFile {
                path,
                id_base,
                format,
            });
        }
    }
}

/// One document read from a file, or why it could not be read.
pub(crate) type Item = Result<(Location, RawDocument), IngestError>;

/// Reads every document of `file`, handing each to `sink` in file order.
pub(crate) fn read_file(file: &SourceFile, limits: &CorpusLimits, sink: &mut dyn FnMut(Item)) {
    match file.format {
        Format::Text => sink(read_text(file, limits)),
        Format::Json => read_json(file, limits, sink),
        Format::JsonLines => read_json_lines(file, limits, sink),
    }
}

/// What reading a collection found, besides the documents it handed on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Files read.
    pub files: u64,
    /// Documents read and valid, repeats included.
    pub documents: u64,
    /// Documents that repeat an earlier one of the same read exactly (same id, content and
    /// metadata): valid, but handed on only once.
    pub repeated: u64,
    /// Documents (or whole files) that could not be read or are not valid.
    pub failed: u64,
    /// Why, for each of them (at most `ingest_problems_listed_max` are listed).
    pub errors: Vec<IngestError>,
    /// Oddities that did not stop a document (at most `ingest_problems_listed_max`).
    pub warnings: Vec<IngestWarning>,
}

/// Reads every document under `paths` (files, or folders walked recursively), checks it
/// against `limits` with `defaults` filling the fields it lacks, and hands each valid document
/// to `sink`, in order and once per id. Every ingest starts here, whether its documents then go
/// into a corpus on this machine ([`crate::Corpus::ingest`]) or to a server
/// ([`crate::Corpus::add_documents`] at the other end).
///
/// A document that cannot be read or is not valid is reported and skipped, as is one whose id
/// an earlier document of this read already took with other content or metadata; the rest go
/// on. The first error of `sink` stops the read and is returned.
pub fn read_documents<E>(
    paths: &[PathBuf],
    defaults: &Defaults,
    limits: &CorpusLimits,
    progress: &mut dyn FnMut(IngestProgress<'_>),
    sink: &mut dyn FnMut(&Location, Document) -> Result<(), E>,
) -> Result<ReadReport, E> {
    let (files, errors) = collect_files(paths);
    progress(IngestProgress::Started {
        files: files.len() as u64,
    });
    let mut reading = Reading {
        report: ReadReport {
            files: files.len() as u64,
            failed: errors.len() as u64,
            errors,
            ..ReadReport::default()
        },
        listed_max: limits.ingest_problems_listed_max,
        seen: HashMap::new(),
    };
    let mut failure: Option<E> = None;
    for (done, file) in files.iter().enumerate() {
        read_file(file, limits, &mut |item| {
            if failure.is_some() {
                return;
            }
            if let Some((location, document)) = reading.take(item, defaults, limits)
                && let Err(e) = sink(&location, document)
            {
                failure = Some(e);
            }
        });
        if let Some(e) = failure.take() {
            return Err(e);
        }
        progress(IngestProgress::FileDone {
            path: &file.path,
            done: done as u64 + 1,
        });
    }
    Ok(reading.report)
}

/// A read under way: its report so far, and the documents it handed on, by id.
struct Reading {
    report: ReadReport,
    /// Errors, and apart warnings, listed at most.
    listed_max: u64,
    /// Where each id handed on was first read, and its fingerprint.
    seen: HashMap<String, (Location, String)>,
}

impl Reading {
    /// Counts `item` in the report and answers the document to hand on: none when it could
    /// not be read, is not valid, or repeats an id of this read (counted as a repeat when it is
    /// the same document, as a failure when it is another).
    fn take(
        &mut self,
        item: Item,
        defaults: &Defaults,
        limits: &CorpusLimits,
    ) -> Option<(Location, Document)> {
        let (location, raw) = match item {
            Ok(read) => read,
            Err(error) => {
                self.fail([error]);
                return None;
            }
        };
        let id = raw.id_for_errors();
        let validated = match raw.validate(defaults, limits) {
            Ok(validated) => validated,
            Err(problems) => {
                self.fail(
                    problems
                        .into_iter()
                        .map(|p| IngestError::from_field(location.clone(), id.clone(), p)),
                );
                return None;
            }
        };
        for key in &validated.unknown_keys {
            if self.report.warnings.len() as u64 >= self.listed_max {
                break;
            }
            self.report.warnings.push(IngestWarning {
                location: location.clone(),
                problem: format!("unknown field `{key}` ignored"),
            });
        }
        let document = validated.document;
        let fingerprint = document.fingerprint();
        if let Some((first, first_fingerprint)) = self.seen.get(&document.id) {
            if *first_fingerprint == fingerprint {
                self.report.documents += 1;
                self.report.repeated += 1;
            } else {
                let problem = format!(
                    "id already used by {first} in this ingest, with other content or metadata"
                );
                self.fail([IngestError {
                    location,
                    document_id: Some(document.id.clone()),
                    field: Some(Field::Id),
                    problem,
                }]);
            }
            return None;
        }
        self.report.documents += 1;
        self.seen
            .insert(document.id.clone(), (location.clone(), fingerprint));
        Some((location, document))
    }

    /// Counts one document that failed, listing its errors while the list has room.
    fn fail(&mut self, errors: impl IntoIterator<Item = IngestError>) {
        self.report.failed += 1;
        for error in errors {
            if (self.report.errors.len() as u64) < self.listed_max {
                self.report.errors.push(error);
            }
        }
    }
}

fn read_bounded(path: &Path, bytes_max: u64) -> Result<String, IngestError> {
    let file = File::open(path)
        .map_err(|e| IngestError::new(Location::file(path), None, format!("cannot read: {e}")))?;
    let mut bytes = Vec::new();
    file.take(bytes_max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| IngestError::new(Location::file(path), None, format!("cannot read: {e}")))?;
    if bytes.len() as u64 > bytes_max {
        return Err(IngestError::new(
            Location::file(path),
            None,
            format!("the file exceeds file_bytes_max ({bytes_max} bytes)"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        IngestError::new(
            Location::file(path),
            None,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn read_text(file: &SourceFile, limits: &CorpusLimits) -> Item {
    let location = Location::file(&file.path);
    let text = read_bounded(&file.path, limits.file_bytes_max)?;
    let (fields, body) = split_front_matter(&text)
        .map_err(|problem| IngestError::new(location.clone(), Some(Field::FrontMatter), problem))?;
    Ok((
        location,
        RawDocument {
            fields,
            body: Some(body.to_string()),
            derived_id: file.id_base.clone(),
        },
    ))
}

/// Splits a leading YAML front matter (between a first line `---` and the next line `---` or
/// `...`) from the body. A file that does not start with `---` has no front matter.
fn split_front_matter(text: &str) -> Result<(Map<String, Value>, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(after_open) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return Ok((Map::new(), text));
    };
    let mut offset = 0;
    let mut close = None;
    for line in after_open.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare == "..." {
            close = Some((offset, offset + line.len()));
            break;
        }
        offset += line.len();
    }
    let Some((yaml_end, body_start)) = close else {
        return Err("opened with `---` but never closed by a `---` line".to_string());
    };
    let yaml = &after_open[..yaml_end];
    let body = &after_open[body_start..];
    let value: Value = if yaml.trim().is_empty() {
        Value::Null
    } else {
        serde_saphyr::from_str(yaml).map_err(|e| format!("invalid YAML: {e}"))?
    };
    match value {
        Value::Null => Ok((Map::new(), body)),
        Value::Object(fields) => Ok((fields, body)),
        _ => Err("must be a mapping of keys to values".to_string()),
    }
}

fn read_json(file: &SourceFile, limits: &CorpusLimits, sink: &mut dyn FnMut(Item)) {
    let text = match read_bounded(&file.path, limits.file_bytes_max) {
        Ok(text) => text,
        Err(e) => return sink(Err(e)),
    };
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(e) => {
            return sink(Err(IngestError::new(
                Location::at_line(&file.path, e.line() as u64),
                None,
                format!("invalid JSON: {e}"),
            )));
        }
    };
    match value {
        Value::Object(fields) => sink(Ok((
            Location::file(&file.path),
            RawDocument {
                fields,
                body: None,
                derived_id: file.id_base.clone(),
            },
        ))),
        Value::Array(items) => {
            for (at, item) in items.into_iter().enumerate() {
                let location = Location::at_item(&file.path, at);
                sink(match item {
                    Value::Object(fields) => Ok((
                        location,
                        RawDocument {
                            fields,
                            body: None,
                            derived_id: format!("{}[{at}]", file.id_base),
                        },
                    )),
                    _ => Err(IngestError::new(
                        location,
                        None,
                        "an array item must be a JSON object",
                    )),
                });
            }
        }
        _ => sink(Err(IngestError::new(
            Location::file(&file.path),
            None,
            "a JSON file must hold an object or an array of objects",
        ))),
    }
}

fn read_json_lines(file: &SourceFile, limits: &CorpusLimits, sink: &mut dyn FnMut(Item)) {
    let cannot_read = |location: Location, e: std::io::Error| {
        Err(IngestError::new(
            location,
            None,
            format!("cannot read: {e}"),
        ))
    };
    let handle = match File::open(&file.path) {
        Ok(handle) => handle,
        Err(e) => return sink(cannot_read(Location::file(&file.path), e)),
    };
    let mut reader = BufReader::new(handle);
    let mut line_no = 0u64;
    let mut bytes = Vec::new();
    loop {
        line_no += 1;
        bytes.clear();
        let location = Location::at_line(&file.path, line_no);
        let read = read_line_bounded(&mut reader, &mut bytes, limits.jsonl_line_bytes_max);
        let (read, complete) = match read {
            Ok(r) => r,
            Err(e) => return sink(cannot_read(location, e)),
        };
        if read == 0 {
            return;
        }
        if !complete {
            sink(Err(IngestError::new(
                location,
                None,
                format!(
                    "the line exceeds jsonl_line_bytes_max ({} bytes)",
                    limits.jsonl_line_bytes_max
                ),
            )));
            // Skip the rest of the overlong line; the next line is read normally.
            if let Err(e) = skip_line(&mut reader) {
                return sink(cannot_read(Location::file(&file.path), e));
            }
            continue;
        }
        if let Some(item) = line_item(file, line_no, location, &bytes) {
            sink(item);
        }
    }
}

/// The document on line `line_no` of a JSON Lines file, whole in `bytes`: none for a blank
/// line.
fn line_item(file: &SourceFile, line_no: u64, location: Location, bytes: &[u8]) -> Option<Item> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Some(Err(IngestError::new(location, None, "not UTF-8 text")));
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(fields)) => Ok((
            location,
            RawDocument {
                fields,
                body: None,
                derived_id: format!("{}:{line_no}", file.id_base),
            },
        )),
        Ok(_) => Err(IngestError::new(
            location,
            None,
            "a line must hold one JSON object",
        )),
        Err(e) => Err(IngestError::new(
            location,
            None,
            format!("invalid JSON: {e}"),
        )),
    })
}

/// Reads one line (through `\n`) of at most `bytes_max` bytes into `out`. Returns the bytes
/// read and whether the line ended within the bound.
fn read_line_bounded(
    reader: &mut impl BufRead,
    out: &mut Vec<u8>,
    bytes_max: u64,
) -> io::Result<(usize, bool)> {
    let read = reader
        .by_ref()
        .take(bytes_max.saturating_add(1))
        .read_until(b'\n', out)?;
    let ended = out.last() == Some(&b'\n');
    let content_len = if ended { out.len() - 1 } else { out.len() };
    let complete = content_len as u64 <= bytes_max && (ended || read as u64 <= bytes_max);
    Ok((read, complete))
}

fn skip_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        if let Some(at) = buffer.iter().position(|b| *b == b'\n') {
            reader.consume(at + 1);
            return Ok(());
        }
        let len = buffer.len();
        reader.consume(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_split_from_the_body() {
        let (fields, body) =
            split_front_matter("---\nid: a\ncitation_count: 3\n---\nBody text.\n").unwrap();
        assert_eq!(fields.get("id"), Some(&Value::String("a".into())));
        assert_eq!(fields.get("citation_count"), Some(&Value::from(3)));
        assert_eq!(body, "Body text.\n");
    }

    #[test]
    fn yaml_dates_stay_text_for_the_date_check() {
        let (fields, _) = split_front_matter("---\npublish_date: 2024-09-12\n---\nB").unwrap();
        assert_eq!(
            fields.get("publish_date"),
            Some(&Value::String("2024-09-12".into()))
        );
    }

    #[test]
    fn no_front_matter_means_all_body() {
        let (fields, body) = split_front_matter("Just text.\n---\nmore").unwrap();
        assert!(fields.is_empty());
        assert_eq!(body, "Just text.\n---\nmore");
    }

    #[test]
    fn bad_front_matter_is_explained() {
        assert!(
            split_front_matter("---\nid: a\nBody without a closing line")
                .unwrap_err()
                .contains("never closed")
        );
        assert!(
            split_front_matter("---\nid: [unclosed\n---\nB")
                .unwrap_err()
                .contains("invalid YAML")
        );
        assert!(
            split_front_matter("---\n- a\n- b\n---\nB")
                .unwrap_err()
                .contains("mapping")
        );
    }

    #[test]
    fn overlong_lines_are_detected_and_skipped() {
        let mut reader = io::Cursor::new(b"12345678\n123\n".to_vec());
        let mut out = Vec::new();
        let (read, complete) = read_line_bounded(&mut reader, &mut out, 4).unwrap();
        assert!(read > 0 && !complete);
        skip_line(&mut reader).unwrap();
        out.clear();
        assert_eq!(
            read_line_bounded(&mut reader, &mut out, 4).unwrap(),
            (4, true)
        );
        assert_eq!(out, b"123\n");
    }
}
