//! The semantic-tag dictionary: the only tags a contract may use.
//!
//! A tag is not decoration: it is how the runtime knows what a field means. An input field tagged
//! `task_question` can be filled from the task with `{{task_question}}`; an output field tagged
//! `evidence_content` makes the tool an evidence source. Tags outside the dictionary are refused,
//! because a misspelt tag would silently do nothing.
//!
//! The built-in dictionary below covers the task's context and evidence; a team extends it with
//! a `semantic-tags.yaml` file in its contracts directory:
//!
//! ```yaml
//! tags:
//!   temperature_unit:
//!     description: Celsius or Fahrenheit.
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::schema::ContractProblem;

/// What a tag means and, for the task's context, where its value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// What it means.
    pub description: String,
    /// Filled from the task's context by `{{tag}}`.
    pub context: bool,
}

/// The tags contracts may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagDictionary {
    tags: BTreeMap<String, Tag>,
}

/// The built-in tags: `(name, description, filled from the task's context)`.
const BUILT_IN: &[(&str, &str, bool)] = &[
    ("task_question", "The research task's main question.", true),
    (
        "user_intent",
        "The question as the user put it (the task's main question).",
        true,
    ),
    (
        "task_constraints",
        "The task's constraints, as a list of text.",
        true,
    ),
    (
        "research_date",
        "The date the research is as of, YYYY-MM-DD.",
        true,
    ),
    (
        "sub_questions",
        "The task's sub-questions, as a list of text.",
        true,
    ),
    (
        "search_query",
        "The query of the search the tool serves.",
        true,
    ),
    ("result_limit", "How many results the caller wants.", true),
    (
        "last_result_ids",
        "The result ids of the task's last search.",
        true,
    ),
    (
        "context_budget",
        "A limit the caller sets on what comes back.",
        false,
    ),
    (
        "evidence_content",
        "The full text of an evidence item (makes a tool an evidence source).",
        false,
    ),
    ("source_url", "Where an evidence item can be read.", false),
    ("publisher", "Who published an evidence item.", false),
    (
        "publish_date",
        "When an evidence item was published, YYYY-MM-DD.",
        false,
    ),
    (
        "source_type",
        "The kind of publisher (primary_data, government, academic_paper, …).",
        false,
    ),
    (
        "citation_count",
        "How often an evidence item is cited.",
        false,
    ),
    (
        "relevance_score",
        "The source's own relevance of an item to the query, in [0, 1].",
        false,
    ),
    (
        "evidence_stance",
        "The item's stance toward the question: supports, opposes or neutral.",
        false,
    ),
    ("result_id", "The item's id at its source.", false),
    ("knowledge_id", "An id other tools can cite.", false),
    ("actionable_step", "A step a reader can take.", false),
    ("location_name", "A place name.", false),
    ("date_range", "A span of dates.", false),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DictionaryFile {
    tags: BTreeMap<String, TagFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TagFile {
    description: String,
}

impl Default for TagDictionary {
    fn default() -> Self {
        TagDictionary {
            tags: BUILT_IN
                .iter()
                .map(|(name, description, context)| {
                    (
                        (*name).to_owned(),
                        Tag {
                            description: (*description).to_owned(),
                            context: *context,
                        },
                    )
                })
                .collect(),
        }
    }
}

impl TagDictionary {
    /// The built-in tags extended by a dictionary file's text.
    pub fn with_file(text: &str, file: &Path) -> Result<TagDictionary, ContractProblem> {
        let parsed: DictionaryFile = serde_saphyr::from_str(text).map_err(|e| ContractProblem {
            file: Some(file.to_path_buf()),
            field: "tags".into(),
            problem: format!("not a tag dictionary: {e}"),
        })?;
        let mut dictionary = TagDictionary::default();
        for (name, tag) in parsed.tags {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(ContractProblem {
                    file: Some(file.to_path_buf()),
                    field: format!("tags.{name}"),
                    problem: "a tag is lower-case letters, digits and '_'".into(),
                });
            }
            if dictionary.tags.contains_key(&name) {
                return Err(ContractProblem {
                    file: Some(file.to_path_buf()),
                    field: format!("tags.{name}"),
                    problem: "a built-in tag cannot be redefined".into(),
                });
            }
            dictionary.tags.insert(
                name,
                Tag {
                    description: tag.description,
                    context: false,
                },
            );
        }
        Ok(dictionary)
    }

    /// Whether the dictionary has this tag.
    pub fn contains(&self, name: &str) -> bool {
        self.tags.contains_key(name)
    }

    /// A tag.
    pub fn get(&self, name: &str) -> Option<&Tag> {
        self.tags.get(name)
    }

    /// Every tag name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tags.keys().map(String::as_str).collect()
    }
}
