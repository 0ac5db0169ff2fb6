//! Bounds on what one GraphQL request may ask for, each named with its unit last, and the
//! extension that enforces the ones on a whole query.
//!
//! Depth and complexity are measured by the GraphQL engine as it validates a query, before any
//! field is resolved, so a query over either bound costs nothing but its parsing. Depth counts
//! introspection fields like any other: introspection is where a schema has cycles
//! (`__type { fields { type { fields … } } }`), so it is where depth needs a bound; the default
//! leaves room for the introspection query GraphiQL and code generators send. Complexity counts
//! one point per field, a page of `first` items counts its selection `first` times, and a field
//! that reads storage rather than memory counts [`STORAGE_READ_POINTS`].
//!
//! No answer grows without bound with its request: a document with more fields, arguments
//! and directives than `complexity_points_max` (each costs at least a point) is refused as it
//! is parsed, with one error, before validation could find an error in each of them; a
//! response lists at most `errors_max` errors, the last saying how many were left out; and an
//! error's message is cut to [`MESSAGE_CHARS_MAX`].

use std::sync::Arc;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextRequest, NextSubscribe,
    NextValidation,
};
use async_graphql::futures_util::StreamExt as _;
use async_graphql::futures_util::stream::BoxStream;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{Response, ServerError, ServerResult, ValidationResult, Variables};
use service::ServiceError;

use crate::error::{fill_codes, to_server_error};

/// The limits of the GraphQL API. `Limits::default()` holds the product's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of fields in one query, introspection included.
    pub depth_levels_max: usize,
    /// Most complexity points in one query: a point per field, times `first` under a page.
    pub complexity_points_max: usize,
    /// Most items one page (`first`) may ask for.
    pub page_items_max: usize,
    /// Largest request body, and largest WebSocket message.
    pub request_bytes_max: usize,
    /// Subscriptions one WebSocket may hold at once.
    pub subscriptions_per_connection_max: usize,
    /// Errors one response lists; the rest are counted in one last error.
    pub errors_max: usize,
    /// WebSockets open at once.
    pub websockets_max: usize,
    /// Longest a WebSocket may wait for its `connection_init`, in seconds: a socket that never
    /// says who it is holds a slot no longer than this.
    pub connection_init_secs_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            depth_levels_max: 15,
            complexity_points_max: 5_000,
            page_items_max: 100,
            request_bytes_max: 1024 * 1024,
            subscriptions_per_connection_max: 256,
            errors_max: 50,
            websockets_max: 256,
            connection_init_secs_max: 10,
        }
    }
}

/// The complexity of a field that reads the ledger or the content store (an earlier state, a
/// why-graph, a proof, an evidence text) rather than memory: asking for many of them through
/// aliases costs accordingly.
pub(crate) const STORAGE_READ_POINTS: usize = 10;

/// Items in a page when the query does not say, unless the page limit is lower.
pub(crate) const PAGE_ITEMS_DEFAULT: usize = 20;

/// The complexity of a page: its selection, once per item it may hold.
pub(crate) fn page_complexity(first: Option<i32>, child_complexity: usize) -> usize {
    let items = first.map_or(PAGE_ITEMS_DEFAULT, |f| {
        usize::try_from(f).unwrap_or(1).max(1)
    });
    items.saturating_mul(child_complexity.max(1))
}

/// Enforces depth and complexity, and gives every error its code.
pub(crate) struct Guard {
    pub(crate) limits: Limits,
}

impl ExtensionFactory for Guard {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(GuardExtension {
            depth_levels_max: self.limits.depth_levels_max,
            complexity_points_max: self.limits.complexity_points_max,
            errors_max: self.limits.errors_max,
        })
    }
}

struct GuardExtension {
    depth_levels_max: usize,
    complexity_points_max: usize,
    errors_max: usize,
}

/// The longest message an error keeps, in characters: messages may quote the request.
pub(crate) const MESSAGE_CHARS_MAX: usize = 1000;

/// Fields, arguments, directives and variables in a document, counted without recursion (the
/// parser bounds nesting, but the count need not rely on it).
fn document_items(document: &ExecutableDocument) -> usize {
    let mut count = 0usize;
    let mut sets: Vec<&SelectionSet> = Vec::new();
    for (_, operation) in document.operations.iter() {
        let op = &operation.node;
        count += op.variable_definitions.len() + op.directives.len();
        sets.push(&op.selection_set.node);
    }
    for fragment in document.fragments.values() {
        count += 1 + fragment.node.directives.len();
        sets.push(&fragment.node.selection_set.node);
    }
    while let Some(set) = sets.pop() {
        for item in &set.items {
            count += 1;
            match &item.node {
                Selection::Field(field) => {
                    let field = &field.node;
                    count += field.arguments.len() + field.directives.len();
                    sets.push(&field.selection_set.node);
                }
                Selection::FragmentSpread(spread) => count += spread.node.directives.len(),
                Selection::InlineFragment(inline) => {
                    count += inline.node.directives.len();
                    sets.push(&inline.node.selection_set.node);
                }
            }
        }
    }
    count
}

/// Cuts each error's message, and the list to `errors_max`: the last error kept says how
/// many there were.
fn bound_errors(errors: &mut Vec<ServerError>, errors_max: usize) {
    for error in errors.iter_mut() {
        if let Some((cut, _)) = error.message.char_indices().nth(MESSAGE_CHARS_MAX) {
            let left = error.message.len() - cut;
            error.message.truncate(cut);
            error.message.push_str(&format!("… ({left} more bytes)"));
        }
    }
    if errors.len() > errors_max {
        let total = errors.len();
        errors.truncate(errors_max.saturating_sub(1));
        let mut last = to_server_error(ServiceError::LimitExceeded {
            limit: "graphql_errors_max".into(),
            max: errors_max as u64,
            actual: total as u64,
        });
        last.message = format!(
            "{} more errors are left out: a response lists at most errors_max = {errors_max}",
            total - errors.len()
        );
        errors.push(last);
    }
}

#[async_graphql::async_trait::async_trait]
impl Extension for GuardExtension {
    async fn request(&self, ctx: &ExtensionContext<'_>, next: NextRequest<'_>) -> Response {
        let mut response = next.run(ctx).await;
        fill_codes(&mut response.errors);
        bound_errors(&mut response.errors, self.errors_max);
        response
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let document = next.run(ctx, query, variables).await?;
        let items = document_items(&document);
        if items > self.complexity_points_max {
            return Err(to_server_error(ServiceError::LimitExceeded {
                limit: "graphql_complexity_points_max".into(),
                max: self.complexity_points_max as u64,
                actual: items as u64,
            }));
        }
        Ok(document)
    }

    fn subscribe<'s>(
        &self,
        ctx: &ExtensionContext<'_>,
        stream: BoxStream<'s, Response>,
        next: NextSubscribe<'_>,
    ) -> BoxStream<'s, Response> {
        let errors_max = self.errors_max;
        next.run(ctx, stream)
            .map(move |mut response| {
                fill_codes(&mut response.errors);
                bound_errors(&mut response.errors, errors_max);
                response
            })
            .boxed()
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await?;
        if result.depth > self.depth_levels_max {
            return Err(vec![to_server_error(ServiceError::LimitExceeded {
                limit: "graphql_depth_levels_max".into(),
                max: self.depth_levels_max as u64,
                actual: result.depth as u64,
            })]);
        }
        if result.complexity > self.complexity_points_max {
            return Err(vec![to_server_error(ServiceError::LimitExceeded {
                limit: "graphql_complexity_points_max".into(),
                max: self.complexity_points_max as u64,
                actual: result.complexity as u64,
            })]);
        }
        Ok(result)
    }
}

/// Checks the size of a page a query asks for, and gives the size to read.
pub(crate) fn page_size(first: Option<i32>, limits: &Limits) -> async_graphql::Result<usize> {
    page_size_of("first", first, limits)
}

/// [`page_size`] of a page whose size the argument `name` gives.
pub(crate) fn page_size_of(
    name: &str,
    items: Option<i32>,
    limits: &Limits,
) -> async_graphql::Result<usize> {
    match items {
        None => Ok(PAGE_ITEMS_DEFAULT.min(limits.page_items_max).max(1)),
        Some(n) if n < 1 => Err(crate::error::invalid(
            name,
            format!("a page holds at least 1 item, not {n}"),
        )),
        Some(n) => {
            let n = n as usize;
            if n > limits.page_items_max {
                return Err(crate::error::to_gql(ServiceError::LimitExceeded {
                    limit: "graphql_page_items_max".into(),
                    max: limits.page_items_max as u64,
                    actual: n as u64,
                }));
            }
            Ok(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_checked_against_the_limit() {
        let limits = Limits {
            page_items_max: 5,
            ..Limits::default()
        };
        assert_eq!(page_size(None, &limits).unwrap(), 5);
        assert_eq!(page_size(Some(5), &limits).unwrap(), 5);
        assert!(page_size(Some(6), &limits).is_err());
        assert!(page_size(Some(0), &limits).is_err());
        assert_eq!(page_size(None, &Limits::default()).unwrap(), 20);
    }

    #[test]
    fn a_page_costs_its_selection_per_item() {
        assert_eq!(page_complexity(Some(10), 3), 30);
        assert_eq!(page_complexity(None, 3), 60);
        assert_eq!(page_complexity(Some(-4), 3), 3);
        assert_eq!(page_complexity(Some(i32::MAX), usize::MAX), usize::MAX);
    }
}

/// The subscriptions one WebSocket may still open; each holds a permit until it ends.
#[derive(Debug, Clone)]
pub(crate) struct SubscriptionSlots {
    slots: Arc<tokio::sync::Semaphore>,
    max: usize,
}

impl SubscriptionSlots {
    pub(crate) fn new(max: usize) -> Self {
        SubscriptionSlots {
            slots: Arc::new(tokio::sync::Semaphore::new(max)),
            max,
        }
    }

    /// A slot for one more subscription, or the limit's error.
    pub(crate) fn take(&self) -> async_graphql::Result<tokio::sync::OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            crate::error::to_gql(ServiceError::LimitExceeded {
                limit: "subscriptions_per_client_max".into(),
                max: self.max as u64,
                actual: self.max as u64 + 1,
            })
        })
    }
}
