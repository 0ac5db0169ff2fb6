//! The one place where an error becomes a GraphQL error.
//!
//! Every error a client sees carries the SPEC §10 code in upper case in `extensions.code`, and
//! the details of the service's wire form ([`ServiceError::to_json`]) beside it with their keys in
//! camelCase, as GraphQL clients expect: a stale `expectedVersion` reads
//! `{"code": "SESSION_CONFLICT", "currentVersion": 7, "suggestedAction": "research_summarize_state"}`.
//! Errors this crate finds itself (a page too large, a query too deep, the wrong mutation for a
//! conflict) are made as [`ServiceError`]s first, so they take the same road.
//!
//! `async_graphql::Error` converts from anything that implements `Display`, which would drop the
//! code silently; resolvers therefore never use `?` on a `ServiceError` but go through
//! [`to_gql`] (or [`blocking`]), and [`fill_codes`] marks whatever the GraphQL engine refused by
//! itself — a query that does not parse or validate, an argument of the wrong type — as the
//! client's mistake it is.

use async_graphql::{ErrorExtensionValues, ServerError, Value as GqlValue};
use serde_json::Value;
use service::ServiceError;
use service::ledger::{ProofError, ReadError};

/// The key of the code in `extensions`.
const CODE: &str = "code";

/// A service error as a GraphQL error: its message, its code in upper case, its details.
pub(crate) fn to_gql(error: ServiceError) -> async_graphql::Error {
    let mut extensions = ErrorExtensionValues::default();
    extensions.set(CODE, error.code().to_ascii_uppercase());
    let mut message = error.to_string();
    if let Value::Object(body) = error.to_json() {
        for (key, value) in body {
            match key.as_str() {
                // The code is set above, in upper case.
                "error" => {}
                "message" => {
                    if let Value::String(text) = value {
                        message = text;
                    }
                }
                _ => extensions.set(camel_case(&key), gql_value(camel_case_keys(value))),
            }
        }
    }
    let mut out = async_graphql::Error::new(message);
    out.extensions = Some(extensions);
    out
}

/// A service error found before any field was resolved (a limit on the whole query).
pub(crate) fn to_server_error(error: ServiceError) -> ServerError {
    let gql = to_gql(error);
    let mut out = ServerError::new(gql.message, None);
    out.extensions = gql.extensions;
    out
}

/// Gives every error that has no code the code of a client's mistake. Only the GraphQL engine
/// makes errors without one: the query does not parse, does not validate against the schema, or
/// passes an argument of the wrong type.
pub(crate) fn fill_codes(errors: &mut [ServerError]) {
    for error in errors {
        let extensions = error.extensions.get_or_insert_with(Default::default);
        if extensions.get(CODE).is_none() {
            extensions.set(CODE, "INVALID_ARGUMENT");
        }
    }
}

/// Runs a read or write that may block on storage on a thread meant for it, and maps its error.
pub(crate) async fn blocking<T, F>(work: F) -> async_graphql::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ServiceError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| to_gql(ServiceError::Unavailable(format!("the work stopped: {e}"))))?
        .map_err(to_gql)
}

/// A ledger read that failed: the record could not be read, which is the service's fault.
pub(crate) fn from_read(error: ReadError) -> ServiceError {
    ServiceError::Unavailable(error.to_string())
}

/// A proof the ledger could not give.
pub(crate) fn from_proof(error: ProofError) -> ServiceError {
    match error {
        ProofError::NotCovered { seq, latest_size } => ServiceError::NotFound {
            resource: "checkpoint",
            id: format!(
                "covering seq {seq} (the latest covers {latest_size} events; a checkpoint is written periodically, or by `research-ledger checkpoint`)"
            ),
        },
        ProofError::NotCheckpointed(size) => ServiceError::NotFound {
            resource: "checkpoint",
            id: format!("of tree size {size}"),
        },
        ProofError::Invalid(message) => ServiceError::InvalidArgument {
            field: "treeSize".into(),
            message,
        },
        other => ServiceError::Unavailable(other.to_string()),
    }
}

/// An argument this crate refuses.
/// An argument that counts from 0 (a seq, a tree size, a checkpoint entry), which GraphQL
/// carries as a signed `Int`: refused below 0 with its name, as every other argument is.
pub(crate) fn unsigned(field: &str, value: i64) -> async_graphql::Result<u64> {
    u64::try_from(value).map_err(|_| invalid(field, format!("{field} is at least 0, not {value}")))
}

pub(crate) fn invalid(field: &str, message: impl Into<String>) -> async_graphql::Error {
    to_gql(ServiceError::InvalidArgument {
        field: field.to_owned(),
        message: message.into(),
    })
}

fn gql_value(value: Value) -> GqlValue {
    GqlValue::from_json(value).unwrap_or(GqlValue::Null)
}

/// `current_version` → `currentVersion`.
fn camel_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The keys of nested objects too (`pending_actions[].tool` stays `tool`).
fn camel_case_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (camel_case(&k), camel_case_keys(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(camel_case_keys).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn extensions(error: &async_graphql::Error) -> Value {
        let mut map = serde_json::Map::new();
        if let Some(ext) = &error.extensions {
            for key in [
                "code",
                "taskId",
                "currentVersion",
                "suggestedAction",
                "field",
                "limit",
                "max",
                "actual",
                "pendingActions",
                "resource",
                "id",
            ] {
                if let Some(v) = ext.get(key) {
                    map.insert(key.into(), v.clone().into_json().unwrap());
                }
            }
        }
        Value::Object(map)
    }

    #[test]
    fn a_stale_version_carries_the_current_one_and_what_to_do() {
        let error = to_gql(ServiceError::SessionConflict {
            task_id: "t".into(),
            expected_version: 3,
            current_version: 5,
        });
        assert_eq!(error.message, "task t is at version 5, not 3");
        assert_eq!(
            extensions(&error),
            json!({"code": "SESSION_CONFLICT", "taskId": "t", "currentVersion": 5, "suggestedAction": "research_summarize_state",
                   "pendingActions": [{"tool": "research_summarize_state",
                                       "reason": "the task is at version 5: read what changed, then retry with expected_version 5"}]})
        );
    }

    #[test]
    fn refusals_keep_their_details_in_camel_case() {
        let refusal = service::research::Refusal::LimitExceeded {
            limit: "summary_chars_max",
            max: 800,
            actual: 900,
            field: "summary".into(),
        };
        let error = to_gql(ServiceError::Refused(refusal));
        assert_eq!(
            extensions(&error),
            json!({"code": "LIMIT_EXCEEDED", "limit": "summary_chars_max", "max": 800, "actual": 900, "field": "summary"})
        );
        assert_eq!(camel_case("pending_actions"), "pendingActions");
        assert_eq!(
            camel_case_keys(json!([{"a_b": {"c_d": 1}}])),
            json!([{"aB": {"cD": 1}}])
        );
    }

    #[test]
    fn errors_without_a_code_are_the_clients_mistake_and_codes_are_kept() {
        let mut errors = vec![
            ServerError::new("Unknown field \"x\"", None),
            to_server_error(ServiceError::NotFound {
                resource: "task",
                id: "t".into(),
            }),
        ];
        fill_codes(&mut errors);
        let code = |e: &ServerError| e.extensions.as_ref().and_then(|x| x.get(CODE)).cloned();
        assert_eq!(code(&errors[0]), Some(GqlValue::from("INVALID_ARGUMENT")));
        assert_eq!(code(&errors[1]), Some(GqlValue::from("NOT_FOUND")));
    }
}
