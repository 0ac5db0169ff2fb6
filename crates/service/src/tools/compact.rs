//! Schemas as an assistant reads them: what a schema generator adds that says nothing to a
//! client is taken out, so that the whole tool list stays small (an assistant pays for every
//! byte of it in every conversation).
//!
//! The arguments every write tool shares, `expected_version` and `idempotency_key`, are
//! described once, in the server's instructions ([`SHARED_ARGUMENTS`]), and only typed in each
//! schema. What is removed changes no call that validates: a `null` the parser takes for an
//! absent optional argument is not advertised, and number formats (`double`, `uint64`) are not
//! JSON Schema validation keywords.

use serde_json::{Map, Value};

/// What the server's instructions say once for every write tool.
pub const SHARED_ARGUMENTS: &str = "`task_id` is the id research_open_task returned. Every write tool takes two optional arguments: `expected_version` (the task's version you last saw; the write is refused with `session_conflict` when the task has moved on, and `research_summarize_state` gives the current one) and `idempotency_key` (any string up to 128 bytes; a retry with the same key and arguments returns the original result marked `replayed` instead of writing again).";

/// The fields every result of a task's tool carries, described once in [`SHARED_ARGUMENTS`].
pub const SHARED_RESULTS: &str = "Every result about a task carries `task_id` and `session_version` (the task's version after the call), and a write's result `replayed` (true when an idempotency key returned the original result).";

/// The arguments described once in [`SHARED_ARGUMENTS`].
const SHARED: [&str; 3] = ["task_id", "expected_version", "idempotency_key"];

/// `schema` made compact (see the module's documentation).
pub(super) fn compact(schema: Value) -> Value {
    let mut schema = strip(schema);
    if let Value::Object(map) = &mut schema {
        // The type's own doc comment names the tool, which the listing already says; a shared
        // type's doc comment repeats what the property that uses it says.
        map.remove("description");
        if let Some(Value::Object(defs)) = map.get_mut("$defs") {
            for def in defs.values_mut() {
                if let Value::Object(def) = def {
                    def.remove("description");
                }
            }
        }
        if let Some(Value::Object(properties)) = map.get_mut("properties") {
            for name in SHARED {
                if let Some(Value::Object(p)) = properties.get_mut(name) {
                    p.remove("description");
                }
            }
        }
    }
    schema
}

fn strip(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(strip_object(map)),
        Value::Array(items) => Value::Array(items.into_iter().map(strip).collect()),
        other => other,
    }
}

fn strip_object(map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in map {
        match (key.as_str(), &value) {
            ("format", Value::String(_)) => continue,
            ("default", Value::Null) => continue,
            // What an unsigned type says; a negative number is refused by the server anyway.
            ("minimum", Value::Number(n)) if n.as_u64() == Some(0) => continue,
            ("default", Value::Array(items)) if items.is_empty() => continue,
            // Unknown arguments are refused by the server, each by name.
            ("additionalProperties", Value::Bool(false)) => continue,
            _ => {}
        }
        out.insert(key, strip(value));
    }
    // `"type": ["number", "null"]` → `"type": "number"`, unless null means something of its
    // own (a description that speaks of it: `null for the main question`).
    let null_meant = out
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| d.contains("null"));
    if let Some(Value::Array(types)) = out.get("type")
        && !null_meant
    {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if kept.len() == 1 {
            out.insert("type".into(), kept[0].clone());
        }
    }
    // `"anyOf": [{"$ref": …}, {"type": "null"}]` → `"$ref": …`.
    if let Some(Value::Array(any)) = out.get("anyOf") {
        let kept: Vec<Value> = any.iter().filter(|s| !is_null_type(s)).cloned().collect();
        if kept.len() == 1
            && let Value::Object(only) = &kept[0]
        {
            let only = only.clone();
            out.remove("anyOf");
            for (k, v) in only {
                out.entry(k).or_insert(v);
            }
        }
    }
    // `"oneOf": [{"const": "a", …}, …]` → `"enum": ["a", …]`: the values named, once.
    if let Some(Value::Array(one)) = out.get("oneOf") {
        let consts: Option<Vec<Value>> = one.iter().map(|s| s.get("const").cloned()).collect();
        if let Some(values) = consts {
            out.remove("oneOf");
            out.insert("type".into(), Value::String("string".into()));
            out.insert("enum".into(), Value::Array(values));
        }
    }
    out
}

fn is_null_type(schema: &Value) -> bool {
    schema.get("type").is_some_and(|t| t == "null")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn noise_goes_and_meaning_stays() {
        let schema = json!({
            "description": "`some_tool`.",
            "type": "object",
            "properties": {
                "limit": {"type": ["integer", "null"], "format": "uint32", "minimum": 1, "default": null},
                "mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}], "description": "How."},
                "expected_version": {"type": ["integer", "null"], "description": "Long text."},
            },
            "$defs": {"Mode": {"oneOf": [
                {"const": "a", "type": "string", "description": "A."},
                {"const": "b", "type": "string"},
            ]}},
            "required": ["mode"],
        });
        assert_eq!(
            compact(schema),
            json!({
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1},
                    "mode": {"$ref": "#/$defs/Mode", "description": "How."},
                    "expected_version": {"type": "integer"},
                },
                "$defs": {"Mode": {"type": "string", "enum": ["a", "b"]}},
                "required": ["mode"],
            })
        );
        let meant = json!({"properties": {"sub_question":
            {"type": ["string", "null"], "description": "An id, or null for none."}}});
        assert_eq!(compact(meant.clone()), meant);
        assert_eq!(
            compact(json!({"type": "object", "additionalProperties": false})),
            json!({"type": "object"})
        );
    }
}
