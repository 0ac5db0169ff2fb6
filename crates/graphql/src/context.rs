//! What every resolver reads from the request's context: the service, the limits, the caller.

use async_graphql::Context;
use service::{Caller, Service, ServiceError};

use crate::Options;
use crate::error::to_gql;
use crate::limits::Limits;

fn missing(what: &str) -> async_graphql::Error {
    to_gql(ServiceError::Unavailable(format!(
        "the schema was built without {what}"
    )))
}

/// The service the schema was built over.
pub(crate) fn service<'a>(ctx: &Context<'a>) -> async_graphql::Result<&'a Service> {
    ctx.data::<Service>().map_err(|_| missing("a service"))
}

/// The options the schema was built with.
pub(crate) fn options<'a>(ctx: &Context<'a>) -> async_graphql::Result<&'a Options> {
    ctx.data::<Options>().map_err(|_| missing("options"))
}

/// The limits in force.
pub(crate) fn limits<'a>(ctx: &Context<'a>) -> async_graphql::Result<&'a Limits> {
    Ok(&options(ctx)?.limits)
}

/// Who is calling: the caller the HTTP layer put in the request (an authenticated one, once
/// something authenticates), or else the anonymous actor of the options.
pub(crate) fn caller(ctx: &Context<'_>) -> async_graphql::Result<Caller> {
    // On a WebSocket the token is checked again for every operation: it may have been revoked
    // since the socket opened.
    if let Ok(credentials) = ctx.data::<crate::http::Credentials>() {
        return credentials.current().map_err(to_gql);
    }
    if let Ok(caller) = ctx.data::<Caller>() {
        return Ok(caller.clone());
    }
    Ok(Caller::new(options(ctx)?.anonymous_actor.clone()))
}
