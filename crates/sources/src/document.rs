//! A corpus document: its metadata, checked, and its text.
//!
//! Every field is validated when a document is read, against the same vocabulary and bounds the
//! research domain applies when the document later becomes evidence, so whatever the corpus
//! holds can be added to a task without a surprise refusal. Defaults supplied at ingest fill only
//! fields a document lacks, and the document says which ones they filled: a default is recorded
//! as a default, not passed off as a fact.

use std::fmt;

use chrono::NaiveDate;
use research::rules::SourceType;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::blobs::{ContentHash, content_hash};
use crate::limits::CorpusLimits;

/// A document of the corpus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// Stable id: the metadata's `id`, or one derived from the file's path (and line).
    pub id: String,
    /// Title; may be empty.
    pub title: String,
    /// The publisher as given (trimmed), if any.
    pub source: Option<String>,
    /// Where the document can be read, if known.
    pub url: Option<String>,
    /// Publication date, given or defaulted (see `defaulted`).
    pub publish_date: NaiveDate,
    /// Kind of publisher.
    pub source_type: SourceType,
    /// Citations, when known.
    pub citation_count: Option<u64>,
    /// The full text.
    pub content: String,
    /// blake3 of `content` (UTF-8).
    pub content_hash: ContentHash,
    /// Which fields hold an ingest default rather than a value the document gave.
    pub defaulted: DefaultedFields,
}

/// Which fields of a document were filled by ingest defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DefaultedFields {
    /// `publish_date` is the default date.
    pub publish_date: bool,
    /// `source_type` is the default type.
    pub source_type: bool,
    /// `source` is the default publisher.
    pub source: bool,
}

impl DefaultedFields {
    /// The names of the defaulted fields, in schema order.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.publish_date {
            names.push(Field::PublishDate.name());
        }
        if self.source_type {
            names.push(Field::SourceType.name());
        }
        if self.source {
            names.push(Field::Source.name());
        }
        names
    }

    /// Reads the names [`DefaultedFields::names`] wrote; unknown names are ignored.
    pub(crate) fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut out = Self::default();
        for name in names {
            match name {
                "publish_date" => out.publish_date = true,
                "source_type" => out.source_type = true,
                "source" => out.source = true,
                _ => {}
            }
        }
        out
    }

    /// Whether any field was defaulted.
    pub fn any(&self) -> bool {
        self.publish_date || self.source_type || self.source
    }
}

/// Values for fields a collection lacks, given at ingest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Defaults {
    /// Used when a document has no `publish_date`.
    pub publish_date: Option<NaiveDate>,
    /// Used when a document has no `source_type`.
    pub source_type: Option<SourceType>,
    /// Used when a document has neither `source` nor `url`.
    pub source: Option<String>,
}

/// A metadata field, as named in front matter and JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Field {
    /// `id`.
    Id,
    /// `title`.
    Title,
    /// `source`.
    Source,
    /// `url`.
    Url,
    /// `publish_date`.
    PublishDate,
    /// `source_type`.
    SourceType,
    /// `citation_count`.
    CitationCount,
    /// `content` (the body of a Markdown or text file).
    Content,
    /// The YAML front matter of a Markdown or text file as a whole.
    FrontMatter,
}

impl Field {
    /// Every metadata key a document may carry.
    pub const KEYS: [Field; 8] = [
        Field::Id,
        Field::Title,
        Field::Source,
        Field::Url,
        Field::PublishDate,
        Field::SourceType,
        Field::CitationCount,
        Field::Content,
    ];

    /// The key's name.
    pub fn name(self) -> &'static str {
        match self {
            Field::Id => "id",
            Field::Title => "title",
            Field::Source => "source",
            Field::Url => "url",
            Field::PublishDate => "publish_date",
            Field::SourceType => "source_type",
            Field::CitationCount => "citation_count",
            Field::Content => "content",
            Field::FrontMatter => "front matter",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One thing wrong with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field.
    pub field: Field,
    /// What is wrong with it, in words.
    pub problem: String,
}

fn problem(field: Field, text: impl Into<String>) -> FieldProblem {
    FieldProblem {
        field,
        problem: text.into(),
    }
}

/// A document's fields as read from a file, before validation.
#[derive(Debug)]
pub(crate) struct RawDocument {
    /// The metadata keys and values (front matter, or the JSON object).
    pub(crate) fields: Map<String, Value>,
    /// The body of a Markdown or text file; `None` for JSON, whose text is the `content` key.
    pub(crate) body: Option<String>,
    /// The id to use when the metadata has none.
    pub(crate) derived_id: String,
}

/// A validated document and the keys it carried that the corpus does not know (ignored).
#[derive(Debug)]
pub(crate) struct Validated {
    pub(crate) document: Document,
    pub(crate) unknown_keys: Vec<String>,
}

impl RawDocument {
    /// The id to name the document by in an error: its metadata id when that is text, else
    /// the derived one.
    pub(crate) fn id_for_errors(&self) -> Option<String> {
        match self.fields.get("id") {
            None | Some(Value::Null) => Some(self.derived_id.clone()),
            Some(Value::String(text)) => Some(text.trim().to_string()),
            Some(_) => None,
        }
    }

    /// Checks every field and applies `defaults`; all problems are reported together, so one
    /// pass over a collection shows everything that needs fixing.
    pub(crate) fn validate(
        self,
        defaults: &Defaults,
        limits: &CorpusLimits,
    ) -> Result<Validated, Vec<FieldProblem>> {
        let mut problems = Vec::new();
        let fields = &self.fields;
        let unknown_keys: Vec<String> = fields
            .keys()
            .filter(|key| !Field::KEYS.iter().any(|f| f.name() == key.as_str()))
            .cloned()
            .collect();
        let mut defaulted = DefaultedFields::default();

        let id = id_field(fields, &self.derived_id, limits, &mut problems);
        let title = optional_text(fields, Field::Title, &mut problems).unwrap_or_default();
        check_length(Field::Title, &title, limits.title_chars_max, &mut problems);
        let (source, url) = source_fields(fields, defaults, limits, &mut defaulted, &mut problems);
        let publish_date = publish_date_field(fields, defaults, &mut defaulted, &mut problems);
        let source_type = source_type_field(fields, defaults, &mut defaulted, &mut problems);
        let citation_count = citation_count_field(fields, &mut problems);
        let content = content_field(self.body.as_deref(), fields, limits, &mut problems);

        match (id, publish_date, source_type, content) {
            (Some(id), Some(publish_date), Some(source_type), Some(content))
                if problems.is_empty() =>
            {
                let content_hash = content_hash(content.as_bytes());
                Ok(Validated {
                    document: Document {
                        id,
                        title,
                        source,
                        url,
                        publish_date,
                        source_type,
                        citation_count,
                        content,
                        content_hash,
                        defaulted,
                    },
                    unknown_keys,
                })
            }
            _ => Err(problems),
        }
    }
}

/// The `id`, or the one derived from the file's place when absent.
fn id_field(
    fields: &Map<String, Value>,
    derived_id: &str,
    limits: &CorpusLimits,
    problems: &mut Vec<FieldProblem>,
) -> Option<String> {
    let id = match fields.get("id") {
        None | Some(Value::Null) => Some(derived_id.to_owned()),
        Some(Value::String(text)) => Some(text.trim().to_string()),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        Some(other) => {
            problems.push(problem(
                Field::Id,
                format!("must be a string, got {}", kind(other)),
            ));
            None
        }
    };
    if let Some(id) = &id {
        check_name(Field::Id, id, limits.id_chars_max, problems);
    }
    id
}

/// The publisher and the URL, with the default source when the document names neither.
fn source_fields(
    fields: &Map<String, Value>,
    defaults: &Defaults,
    limits: &CorpusLimits,
    defaulted: &mut DefaultedFields,
    problems: &mut Vec<FieldProblem>,
) -> (Option<String>, Option<String>) {
    let mut source = optional_text(fields, Field::Source, problems);
    let url = optional_text(fields, Field::Url, problems);
    if let Some(url) = &url {
        check_length(Field::Url, url, limits.url_chars_max, problems);
    }
    let has_source_field = fields.get("source").is_some_and(|v| !v.is_null());
    let has_url_field = fields.get("url").is_some_and(|v| !v.is_null());
    if source.is_none() && url.is_none() && !has_source_field && !has_url_field {
        match &defaults.source {
            Some(default) => {
                source = Some(default.trim().to_string());
                defaulted.source = true;
            }
            None => problems.push(problem(
                Field::Source,
                "missing: the document has neither `source` nor `url`, and no default \
                 source was given",
            )),
        }
    }
    if let Some(publisher) = &source {
        check_length(Field::Source, publisher, limits.source_chars_max, problems);
    }
    if source.is_some() || url.is_some() {
        match research::text::normalise_source(source.as_deref(), url.as_deref()) {
            Ok(_) => {}
            Err(research::text::SourceNameError::NoHost) => {
                let field = if url.is_some() && source.is_none() {
                    Field::Url
                } else {
                    Field::Source
                };
                problems.push(problem(field, "looks like a URL but names no host"));
            }
            Err(research::text::SourceNameError::Missing) => {
                problems.push(problem(Field::Source, "empty: give a publisher or a URL"))
            }
        }
    }
    (source, url)
}

/// The publish date, or the default one.
fn publish_date_field(
    fields: &Map<String, Value>,
    defaults: &Defaults,
    defaulted: &mut DefaultedFields,
    problems: &mut Vec<FieldProblem>,
) -> Option<NaiveDate> {
    match fields.get("publish_date") {
        None | Some(Value::Null) => match defaults.publish_date {
            Some(date) => {
                defaulted.publish_date = true;
                Some(date)
            }
            None => {
                problems.push(problem(
                    Field::PublishDate,
                    "missing, and no default publish date was given",
                ));
                None
            }
        },
        Some(Value::String(text)) => match research::text::parse_date(text) {
            Some(date) => Some(date),
            None => {
                problems.push(problem(
                    Field::PublishDate,
                    format!("`{text}` is not a date: expected YYYY-MM-DD"),
                ));
                None
            }
        },
        Some(other) => {
            problems.push(problem(
                Field::PublishDate,
                format!("must be a YYYY-MM-DD date, got {}", kind(other)),
            ));
            None
        }
    }
}

/// The source type, or the default one.
fn source_type_field(
    fields: &Map<String, Value>,
    defaults: &Defaults,
    defaulted: &mut DefaultedFields,
    problems: &mut Vec<FieldProblem>,
) -> Option<SourceType> {
    match fields.get("source_type") {
        None | Some(Value::Null) => match defaults.source_type {
            Some(default) => {
                defaulted.source_type = true;
                Some(default)
            }
            None => {
                problems.push(problem(
                    Field::SourceType,
                    "missing, and no default source type was given",
                ));
                None
            }
        },
        Some(Value::String(text)) => match text.parse::<SourceType>() {
            Ok(source_type) => Some(source_type),
            Err(_) => {
                problems.push(problem(
                    Field::SourceType,
                    format!(
                        "unknown source type `{text}`; known: {}",
                        SourceType::ALL.map(SourceType::name).join(", ")
                    ),
                ));
                None
            }
        },
        Some(other) => {
            problems.push(problem(
                Field::SourceType,
                format!("must be a source type name, got {}", kind(other)),
            ));
            None
        }
    }
}

/// The citation count, a non-negative whole number when given.
fn citation_count_field(
    fields: &Map<String, Value>,
    problems: &mut Vec<FieldProblem>,
) -> Option<u64> {
    match fields.get("citation_count") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(count) => Some(count),
            None => {
                let why =
                    if n.as_i64().is_some_and(|v| v < 0) || n.as_f64().is_some_and(|v| v < 0.0) {
                        format!("must not be negative, got {n}")
                    } else {
                        format!("must be a whole number, got {n}")
                    };
                problems.push(problem(Field::CitationCount, why));
                None
            }
        },
        Some(other) => {
            problems.push(problem(
                Field::CitationCount,
                format!("must be a non-negative whole number, got {}", kind(other)),
            ));
            None
        }
    }
}

/// The text: the file's body, or the `content` field of a JSON document, within its bound.
fn content_field(
    body: Option<&str>,
    fields: &Map<String, Value>,
    limits: &CorpusLimits,
    problems: &mut Vec<FieldProblem>,
) -> Option<String> {
    let content = match (body, fields.get("content")) {
        (Some(_), Some(_)) => {
            problems.push(problem(
                Field::Content,
                "given in the front matter; the text of a Markdown or text file is its body",
            ));
            None
        }
        (Some(body), None) => Some(normalise_content(body)),
        (None, None | Some(Value::Null)) => {
            problems.push(problem(Field::Content, "missing"));
            None
        }
        (None, Some(Value::String(text))) => Some(normalise_content(text)),
        (None, Some(other)) => {
            problems.push(problem(
                Field::Content,
                format!("must be a string, got {}", kind(other)),
            ));
            None
        }
    };
    if let Some(content) = &content {
        if content.is_empty() {
            problems.push(problem(Field::Content, "empty"));
        } else if content.len() as u64 > limits.content_bytes_max {
            problems.push(problem(
                Field::Content,
                format!(
                    "{} bytes exceeds content_bytes_max ({} bytes)",
                    content.len(),
                    limits.content_bytes_max
                ),
            ));
        }
    }
    content
}

/// The text a document's content hash covers: line endings made `\n` and surrounding blank
/// space removed, so the same text saved on two systems, or with or without a final newline,
/// has one hash and is recognised as a duplicate.
pub(crate) fn normalise_content(text: &str) -> String {
    text.replace("\r\n", "\n").trim().to_string()
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// A text field that may be absent; blank counts as absent.
fn optional_text(
    fields: &Map<String, Value>,
    field: Field,
    problems: &mut Vec<FieldProblem>,
) -> Option<String> {
    match fields.get(field.name()) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.trim().to_string()).filter(|t| !t.is_empty()),
        Some(other) => {
            problems.push(problem(
                field,
                format!("must be a string, got {}", kind(other)),
            ));
            None
        }
    }
}

fn check_length(field: Field, text: &str, chars_max: u64, problems: &mut Vec<FieldProblem>) {
    let chars = research::text::char_count(text);
    if chars > chars_max {
        problems.push(problem(
            field,
            format!(
                "{chars} characters exceeds {}_chars_max ({chars_max})",
                field.name()
            ),
        ));
    }
}

fn check_name(field: Field, text: &str, chars_max: u64, problems: &mut Vec<FieldProblem>) {
    if text.is_empty() {
        problems.push(problem(field, "empty"));
    } else if text.chars().any(char::is_control) {
        problems.push(problem(field, "contains control characters"));
    } else {
        check_length(field, text, chars_max, problems);
    }
}

impl Document {
    /// Checks a document read elsewhere (by a client that sends it over the network) exactly
    /// as reading it from a file would, against `limits`: its fields go through the same
    /// validation, its defaulted fields as defaults, and what comes out must be the document
    /// as given — trimmed, normalised, with the hash of its content.
    pub fn check(&self, limits: &CorpusLimits) -> Result<(), Vec<FieldProblem>> {
        let mut fields = Map::new();
        let mut put = |field: Field, value: Value| {
            fields.insert(field.name().to_owned(), value);
        };
        put(Field::Id, Value::String(self.id.clone()));
        put(Field::Title, Value::String(self.title.clone()));
        if let Some(source) = self.source.as_ref().filter(|_| !self.defaulted.source) {
            put(Field::Source, Value::String(source.clone()));
        }
        if let Some(url) = &self.url {
            put(Field::Url, Value::String(url.clone()));
        }
        if !self.defaulted.publish_date {
            put(
                Field::PublishDate,
                Value::String(self.publish_date.format("%Y-%m-%d").to_string()),
            );
        }
        if !self.defaulted.source_type {
            put(
                Field::SourceType,
                Value::String(self.source_type.name().to_owned()),
            );
        }
        if let Some(count) = self.citation_count {
            put(Field::CitationCount, Value::from(count));
        }
        put(Field::Content, Value::String(self.content.clone()));
        let defaults = Defaults {
            publish_date: self.defaulted.publish_date.then_some(self.publish_date),
            source_type: self.defaulted.source_type.then_some(self.source_type),
            source: self.source.clone().filter(|_| self.defaulted.source),
        };
        let raw = RawDocument {
            fields,
            body: None,
            derived_id: self.id.clone(),
        };
        let read = raw.validate(&defaults, limits)?.document;
        let differs = |field: Field| {
            vec![problem(
                field,
                "is not as reading the document gives it (trimmed, normalised)",
            )]
        };
        if read.content_hash != self.content_hash {
            return Err(vec![problem(
                Field::Content,
                "its content_hash is not the hash of the content",
            )]);
        }
        for (field, same) in [
            (Field::Id, read.id == self.id),
            (Field::Title, read.title == self.title),
            (Field::Source, read.source == self.source),
            (Field::Url, read.url == self.url),
            (Field::Content, read.content == self.content),
        ] {
            if !same {
                return Err(differs(field));
            }
        }
        if read != *self {
            return Err(vec![problem(
                Field::Id,
                "the document's dates, type, citations or defaulted fields do not read back as given",
            )]);
        }
        Ok(())
    }

    /// Identifies everything stored for the document: re-ingesting a document whose
    /// fingerprint is unchanged leaves the corpus as it is.
    pub fn fingerprint(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"research-ledger/corpus-document/v1\0");
        for part in [
            self.id.as_str(),
            self.title.as_str(),
            self.source.as_deref().unwrap_or("\u{0}none"),
            self.url.as_deref().unwrap_or("\u{0}none"),
            &self.publish_date.format("%Y-%m-%d").to_string(),
            self.source_type.name(),
            &self
                .citation_count
                .map_or_else(|| "\u{0}none".to_string(), |c| c.to_string()),
            &self.content_hash.to_hex(),
            &self.defaulted.names().join(","),
        ] {
            // Length-prefixed, so no two different field lists hash the same bytes.
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.finalize().to_hex().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> RawDocument {
        let Value::Object(fields) = serde_json::from_str(json).unwrap() else {
            panic!("not an object")
        };
        RawDocument {
            fields,
            body: None,
            derived_id: "derived".into(),
        }
    }

    fn problems_of(json: &str, defaults: &Defaults) -> Vec<(Field, String)> {
        match raw(json).validate(defaults, &CorpusLimits::default()) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.into_iter().map(|p| (p.field, p.problem)).collect(),
        }
    }

    const GOOD: &str = r#"{"id":"a","title":"T","source":"Example Daily","publish_date":"2024-01-02",
        "source_type":"news_original","citation_count":3,"content":"Text."}"#;

    #[test]
    fn a_complete_document_validates() {
        let v = raw(GOOD)
            .validate(&Defaults::default(), &CorpusLimits::default())
            .unwrap();
        assert_eq!(v.document.id, "a");
        assert_eq!(v.document.citation_count, Some(3));
        assert_eq!(v.document.content_hash, content_hash(b"Text."));
        assert!(!v.document.defaulted.any());
        assert!(v.unknown_keys.is_empty());
    }

    #[test]
    fn defaults_fill_only_missing_fields_and_are_flagged() {
        let defaults = Defaults {
            publish_date: NaiveDate::from_ymd_opt(2019, 1, 1),
            source_type: Some(SourceType::Other),
            source: Some("Example Wiki".into()),
        };
        let v = raw(r#"{"content":"Body."}"#)
            .validate(&defaults, &CorpusLimits::default())
            .unwrap();
        assert_eq!(v.document.id, "derived");
        assert_eq!(v.document.publish_date, defaults.publish_date.unwrap());
        assert_eq!(v.document.source.as_deref(), Some("Example Wiki"));
        assert_eq!(
            v.document.defaulted.names(),
            ["publish_date", "source_type", "source"]
        );
        // A bad value is an error even when a default exists: defaults fill gaps, not mistakes.
        let problems = problems_of(
            r#"{"source":"x","publish_date":"2024-02-30","source_type":"blog","content":"B."}"#,
            &defaults,
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, Field::PublishDate);
    }

    #[test]
    fn every_bad_field_is_named() {
        let defaults = Defaults::default();
        let cases: [(&str, Field, &str); 9] = [
            (
                r#"{"source":"s","source_type":"blog","content":"c"}"#,
                Field::PublishDate,
                "missing",
            ),
            (
                r#"{"source":"s","publish_date":"yesterday","source_type":"blog","content":"c"}"#,
                Field::PublishDate,
                "not a date",
            ),
            (
                r#"{"source":"s","publish_date":"2024-01-01","source_type":"tabloid","content":"c"}"#,
                Field::SourceType,
                "unknown source type `tabloid`",
            ),
            (
                r#"{"source":"s","publish_date":"2024-01-01","source_type":"blog","citation_count":-2,"content":"c"}"#,
                Field::CitationCount,
                "negative",
            ),
            (
                r#"{"source":"s","publish_date":"2024-01-01","source_type":"blog","citation_count":"many","content":"c"}"#,
                Field::CitationCount,
                "got a string",
            ),
            (
                r#"{"source":"s","publish_date":"2024-01-01","source_type":"blog","citation_count":2.5,"content":"c"}"#,
                Field::CitationCount,
                "whole number",
            ),
            (
                r#"{"source":"s","publish_date":"2024-01-01","source_type":"blog"}"#,
                Field::Content,
                "missing",
            ),
            (
                r#"{"source":"s","publish_date":"2024-01-01","source_type":"blog","content":"  "}"#,
                Field::Content,
                "empty",
            ),
            (
                r#"{"publish_date":"2024-01-01","source_type":"blog","content":"c"}"#,
                Field::Source,
                "neither",
            ),
        ];
        for (json, field, text) in cases {
            let problems = problems_of(json, &defaults);
            assert_eq!(problems.len(), 1, "{json}: {problems:?}");
            assert_eq!(problems[0].0, field, "{json}");
            assert!(problems[0].1.contains(text), "{json}: {}", problems[0].1);
        }
    }

    #[test]
    fn all_problems_of_a_document_are_reported_together() {
        let problems = problems_of(r#"{"id":7.5,"citation_count":-1}"#, &Defaults::default());
        let fields: Vec<Field> = problems.iter().map(|p| p.0).collect();
        assert_eq!(
            fields,
            [
                Field::Id,
                Field::Source,
                Field::PublishDate,
                Field::SourceType,
                Field::CitationCount,
                Field::Content
            ]
        );
    }

    #[test]
    fn limits_apply_to_every_text_field() {
        let limits = CorpusLimits {
            content_bytes_max: 4,
            ..CorpusLimits::default()
        };
        let long_source = "s".repeat(101);
        let json = format!(
            r#"{{"source":"{long_source}","publish_date":"2024-01-01","source_type":"blog","content":"12345"}}"#
        );
        let problems = match raw(&json).validate(&Defaults::default(), &limits) {
            Err(p) => p,
            Ok(_) => panic!("accepted"),
        };
        let fields: Vec<Field> = problems.iter().map(|p| p.field).collect();
        assert_eq!(fields, [Field::Source, Field::Content]);
    }

    #[test]
    fn unknown_keys_are_reported_not_fatal() {
        let json = GOOD.replace(
            r#""title":"T""#,
            r#""title":"T","publishdate":"2020-01-01""#,
        );
        let v = raw(&json)
            .validate(&Defaults::default(), &CorpusLimits::default())
            .unwrap();
        assert_eq!(v.unknown_keys, ["publishdate"]);
    }

    #[test]
    fn fingerprint_changes_with_any_field() {
        let base = raw(GOOD)
            .validate(&Defaults::default(), &CorpusLimits::default())
            .unwrap()
            .document;
        let mut other = base.clone();
        assert_eq!(base.fingerprint(), other.fingerprint());
        other.citation_count = None;
        assert_ne!(base.fingerprint(), other.fingerprint());
        let mut other = base.clone();
        other.defaulted.publish_date = true;
        assert_ne!(base.fingerprint(), other.fingerprint());
        let mut other = base.clone();
        other.title.push('!');
        assert_ne!(base.fingerprint(), other.fingerprint());
    }
}
