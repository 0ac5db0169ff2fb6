//! The contract of an external tool: what it is called, where it lives, which arguments it takes
//! and what its replies carry, each field bound to a semantic tag of the dictionary.
//!
//! ```yaml
//! name: kb_search
//! description: Searches the team's knowledge base for evidence on a question.
//! endpoint: http://127.0.0.1:9000/search
//! method: POST                # POST sends the arguments as a JSON body; GET as query string
//! contract_version: "2.1"     # every reply must carry the same value
//! timeout_ms: 5000
//! input_schema:
//!   query:
//!     type: string
//!     description: The question, unchanged.
//!     semantic_tag: search_query
//!   top_k:
//!     type: integer
//!     default: 3
//!     min: 1
//!     max: 10
//!     semantic_tag: result_limit
//! output_schema:
//!   results:
//!     type: array
//!     items:
//!       type: object
//!       properties:
//!         text: { type: string, semantic_tag: evidence_content }
//!         url:  { type: string, semantic_tag: source_url }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tags::TagDictionary;

/// The types a field may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    /// Text.
    String,
    /// A whole number.
    Integer,
    /// Any number.
    Number,
    /// True or false.
    Boolean,
    /// A list; `items` describes its elements.
    Array,
    /// An object; `properties` describes its fields.
    Object,
}

impl FieldType {
    /// The JSON Schema name of the type.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::Array => "array",
            FieldType::Object => "object",
        }
    }

    /// Whether `value` has this type.
    pub fn admits(self, value: &Value) -> bool {
        match self {
            FieldType::String => value.is_string(),
            FieldType::Integer => value.is_i64() || value.is_u64(),
            FieldType::Number => value.is_number(),
            FieldType::Boolean => value.is_boolean(),
            FieldType::Array => value.is_array(),
            FieldType::Object => value.is_object(),
        }
    }
}

/// One field of a tool's input or output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    /// Its type.
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its meaning for the runtime, from the dictionary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_tag: Option<String>,
    /// The value used when a call leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// The only values allowed.
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<Value>>,
    /// Least value (numbers) or length (strings, arrays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Greatest value (numbers) or length (strings, arrays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Fields that go together (a client filling one fills the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Whether a call (input) or a reply (output) must carry it. Input fields without a default
    /// are required unless this says otherwise; output fields are required when they carry a
    /// semantic tag, since the tag is what the runtime relies on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    /// The elements of an array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Box<Field>>,
    /// The fields of an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<BTreeMap<String, Field>>,
}

/// How a tool is called.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// Arguments as a JSON body.
    #[default]
    Post,
    /// Arguments as a query string.
    Get,
}

/// A tool's contract, as written in its YAML file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// The tool's name: `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// When to call it.
    pub description: String,
    /// Where it lives (`http` or `https`), on the allow-list.
    pub endpoint: String,
    /// How it is called.
    #[serde(default)]
    pub method: Method,
    /// The version every reply must carry in its `contract_version` field.
    pub contract_version: String,
    /// How long a call may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Its arguments.
    #[serde(alias = "input", default)]
    pub input_schema: BTreeMap<String, Field>,
    /// What its replies carry (besides `contract_version`).
    #[serde(alias = "output", default)]
    pub output_schema: BTreeMap<String, Field>,
}

/// Something wrong with a contract, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContractProblem {
    /// The file, when the contract came from one.
    pub file: Option<PathBuf>,
    /// The field, as a path (`input_schema.top_k.default`), or the whole contract.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for ContractProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}: {}: {}", file.display(), self.field, self.problem),
            None => write!(f, "{}: {}", self.field, self.problem),
        }
    }
}

/// Limits on contracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractLimits {
    /// Largest contract file.
    pub contract_bytes_max: usize,
    /// Longest call allowed by a contract's `timeout_ms`.
    pub timeout_ms_max: u64,
    /// Deepest nesting of arrays and objects in a schema.
    pub schema_depth_max: usize,
    /// Most fields in one schema, nested ones included.
    pub fields_max: usize,
}

impl Default for ContractLimits {
    fn default() -> Self {
        ContractLimits {
            contract_bytes_max: 256 * 1024,
            timeout_ms_max: 120_000,
            schema_depth_max: 8,
            fields_max: 256,
        }
    }
}

/// The default `timeout_ms` of a contract that gives none.
pub const TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// Whether `name` is a valid tool name (clients such as Claude Desktop refuse a server with any
/// other).
pub fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Contract {
    /// Parses a contract's YAML text.
    pub fn parse(text: &str, file: Option<&Path>) -> Result<Contract, ContractProblem> {
        serde_saphyr::from_str(text).map_err(|e| ContractProblem {
            file: file.map(Path::to_path_buf),
            field: "contract".into(),
            problem: format!("not a contract: {e}"),
        })
    }

    /// The effective timeout of a call.
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(TIMEOUT_MS_DEFAULT)
    }

    /// Every problem with the contract under `dictionary` and `limits`.
    pub fn problems(
        &self,
        dictionary: &TagDictionary,
        limits: &ContractLimits,
        file: Option<&Path>,
    ) -> Vec<ContractProblem> {
        let mut out = Vec::new();
        let mut problem = |field: &str, text: String| {
            out.push(ContractProblem {
                file: file.map(Path::to_path_buf),
                field: field.to_owned(),
                problem: text,
            });
        };
        if !valid_tool_name(&self.name) {
            problem(
                "name",
                format!(
                    "{:?} is not a tool name: 1 to 64 letters, digits, '_' or '-'",
                    self.name
                ),
            );
        }
        if self.description.trim().is_empty() {
            problem("description", "say when to call the tool".into());
        }
        if self.contract_version.trim().is_empty() {
            problem("contract_version", "must not be empty".into());
        }
        if !(self.endpoint.starts_with("http://") || self.endpoint.starts_with("https://")) {
            problem(
                "endpoint",
                format!("{:?} is not an http or https URL", self.endpoint),
            );
        }
        match self.timeout_ms {
            Some(0) => problem("timeout_ms", "must be above 0".into()),
            Some(t) if t > limits.timeout_ms_max => problem(
                "timeout_ms",
                format!(
                    "{t} is above the limit timeout_ms_max = {}",
                    limits.timeout_ms_max
                ),
            ),
            _ => {}
        }
        for reserved in ["task_id", "expected_output_tags"] {
            if self.input_schema.contains_key(reserved) {
                problem(
                    &format!("input_schema.{reserved}"),
                    "this argument name is reserved: the service adds it to every registered tool"
                        .into(),
                );
            }
        }
        let mut check = FieldCheck {
            dictionary,
            limits,
            count: 0,
            input: true,
            problem: &mut problem,
        };
        for (name, field) in &self.input_schema {
            check.field(&format!("input_schema.{name}"), field, 1);
        }
        let count = check.count;
        if self.output_schema.contains_key("contract_version") {
            problem(
                "output_schema.contract_version",
                "every reply carries contract_version; do not declare it".into(),
            );
        }
        let mut check = FieldCheck {
            dictionary,
            limits,
            count,
            input: false,
            problem: &mut problem,
        };
        for (name, field) in &self.output_schema {
            check.field(&format!("output_schema.{name}"), field, 1);
        }
        out
    }

    /// The semantic tags its replies carry, anywhere in the output.
    pub fn output_tags(&self) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(field: &Field, out: &mut Vec<String>) {
            if let Some(tag) = &field.semantic_tag {
                out.push(tag.clone());
            }
            if let Some(items) = &field.items {
                walk(items, out);
            }
            for f in field.properties.iter().flat_map(|p| p.values()) {
                walk(f, out);
            }
        }
        for field in self.output_schema.values() {
            walk(field, &mut out);
        }
        out
    }
}

/// Checks the fields of one schema, counting them against `fields_max` across the contract.
struct FieldCheck<'a> {
    dictionary: &'a TagDictionary,
    limits: &'a ContractLimits,
    /// Fields seen so far in the contract.
    count: usize,
    /// Whether the schema is the input's (only inputs have defaults).
    input: bool,
    problem: &'a mut dyn FnMut(&str, String),
}

impl FieldCheck<'_> {
    fn field(&mut self, path: &str, field: &Field, depth: usize) {
        self.count += 1;
        if self.count == self.limits.fields_max + 1 {
            (self.problem)(
                path,
                format!("more than fields_max = {} fields", self.limits.fields_max),
            );
        }
        if depth > self.limits.schema_depth_max {
            (self.problem)(
                path,
                format!(
                    "nested deeper than schema_depth_max = {}",
                    self.limits.schema_depth_max
                ),
            );
            return;
        }
        if let Some(tag) = &field.semantic_tag
            && !self.dictionary.contains(tag)
        {
            (self.problem)(
                &format!("{path}.semantic_tag"),
                format!(
                    "unknown tag {tag:?}; the dictionary has: {}",
                    self.dictionary.names().join(", ")
                ),
            );
        }
        self.bounds(path, field);
        self.allowed(path, field);
        self.default(path, field);
        self.children(path, field, depth);
    }

    /// `min` and `max`: finite, on a field that has them, whole for lengths, in order.
    fn bounds(&mut self, path: &str, field: &Field) {
        let numeric = matches!(field.kind, FieldType::Integer | FieldType::Number);
        let sized = matches!(field.kind, FieldType::String | FieldType::Array);
        for (bound, value) in [("min", field.min), ("max", field.max)] {
            if let Some(v) = value {
                if !v.is_finite() {
                    (self.problem)(&format!("{path}.{bound}"), "must be a finite number".into());
                } else if !numeric && !sized {
                    (self.problem)(
                        &format!("{path}.{bound}"),
                        format!("a {} field has no {bound}", field.kind.name()),
                    );
                } else if sized && (v < 0.0 || v.fract() != 0.0) {
                    (self.problem)(
                        &format!("{path}.{bound}"),
                        "a length bound is a whole number, 0 or more".into(),
                    );
                }
            }
        }
        if let (Some(min), Some(max)) = (field.min, field.max)
            && min > max
        {
            (self.problem)(&format!("{path}.min"), format!("{min} is above max {max}"));
        }
    }

    /// `enum`: not empty, every value of the field's type.
    fn allowed(&mut self, path: &str, field: &Field) {
        let Some(allowed) = &field.allowed else {
            return;
        };
        if allowed.is_empty() {
            (self.problem)(
                &format!("{path}.enum"),
                "an empty enum allows nothing".into(),
            );
        }
        for (i, v) in allowed.iter().enumerate() {
            if !field.kind.admits(v) {
                (self.problem)(
                    &format!("{path}.enum[{i}]"),
                    format!("{v} is not a {}", field.kind.name()),
                );
            }
        }
    }

    /// `default`: only on an input, consistent with the field, never with `required`.
    fn default(&mut self, path: &str, field: &Field) {
        let Some(default) = &field.default else {
            return;
        };
        if !self.input {
            (self.problem)(
                &format!("{path}.default"),
                "an output field has no default: the reply says what it says".into(),
            );
        } else if let Err(e) = check_value(field, default) {
            (self.problem)(
                &format!("{path}.default"),
                format!("inconsistent default: {e}"),
            );
        }
        if field.required == Some(true) {
            (self.problem)(
                &format!("{path}.required"),
                "a field with a default cannot be required".into(),
            );
        }
    }

    /// An array's items and an object's properties, one level deeper; nothing nested in others.
    fn children(&mut self, path: &str, field: &Field, depth: usize) {
        match field.kind {
            FieldType::Array => match &field.items {
                None => (self.problem)(
                    &format!("{path}.items"),
                    "an array says what its items are".into(),
                ),
                Some(items) => self.field(&format!("{path}[]"), items, depth + 1),
            },
            FieldType::Object => {
                for (name, f) in field.properties.iter().flat_map(|p| p.iter()) {
                    self.field(&format!("{path}.{name}"), f, depth + 1);
                }
            }
            _ => {
                if field.items.is_some() || field.properties.is_some() {
                    (self.problem)(
                        path,
                        format!("a {} field has no items or properties", field.kind.name()),
                    );
                }
            }
        }
    }
}

/// Checks one value against a field: type, enum, bounds, and nested fields.
pub fn check_value(field: &Field, value: &Value) -> Result<(), String> {
    if !field.kind.admits(value) {
        return Err(format!("{value} is not a {}", field.kind.name()));
    }
    if let Some(allowed) = &field.allowed
        && !allowed.contains(value)
    {
        return Err(format!(
            "{value} is not one of {}",
            Value::Array(allowed.clone())
        ));
    }
    let measure = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => Some(s.chars().count() as f64),
        Value::Array(a) => Some(a.len() as f64),
        _ => None,
    };
    if let Some(m) = measure {
        let what = if value.is_number() { "" } else { " long" };
        if let Some(min) = field.min
            && m < min
        {
            return Err(format!("{value} is below the minimum {min}{what}"));
        }
        if let Some(max) = field.max
            && m > max
        {
            return Err(format!("{value} is above the maximum {max}{what}"));
        }
    }
    if let (Value::Array(items), Some(spec)) = (value, &field.items) {
        for (i, item) in items.iter().enumerate() {
            check_value(spec, item).map_err(|e| format!("[{i}]: {e}"))?;
        }
    }
    Ok(())
}
