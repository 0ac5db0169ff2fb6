//! The web console and GraphiQL: pages and their scripts, styles and vendored libraries, all
//! compiled into the binary from `crates/server/console/`, so the console works on a machine
//! with no internet and serves exactly the bytes that were reviewed.
//!
//! `GET /` is the console (one page; its views are addressed by the URL's fragment), `GET
//! /console/{path}` its assets, and `GET /graphql` GraphiQL on the vendored React, ReactDOM,
//! graphql-ws and GraphiQL releases (`console/vendor/MANIFEST.json` records each file's package,
//! version and SHA-256; `scripts/vendor-console` fetches them again and checks them).
//!
//! The pages hold no data: what they show they ask of the GraphQL API with the token the reader
//! signs in with, so they are served without one, like `/health`. Every answer carries a
//! Content-Security-Policy that lets a page load and connect to nothing but this server, and
//! run no inline script; GraphiQL's policy differs only in allowing the inline styles and
//! `data:` fonts its stylesheet is made of. Each asset has a strong `ETag` (BLAKE3 of its bytes)
//! and is revalidated on every use, but for the vendored files, whose paths name their version
//! and which are therefore cached for good.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One file of the console, as compiled in.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// Its path under `crates/server/console/` (and under `/console/` in URLs).
    pub path: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

macro_rules! assets {
    ($($path:literal),* $(,)?) => {
        &[$(Asset { path: $path, bytes: include_bytes!(concat!("../console/", $path)) }),*]
    };
}

/// Every file of the console, licences and the vendor manifest included.
pub const ASSETS: &[Asset] = assets![
    "index.html",
    "graphiql.html",
    "graphiql.css",
    "app.css",
    "js/api.js",
    "js/app.js",
    "js/blake3.js",
    "js/dom.js",
    "js/graph.js",
    "js/graphiql-start.js",
    "js/ledger.js",
    "js/live.js",
    "js/review.js",
    "js/signin.js",
    "js/task.js",
    "js/tasks.js",
    "js/verify.js",
    "vendor/MANIFEST.json",
    "vendor/graphiql-3.9.0/LICENSE",
    "vendor/graphiql-3.9.0/graphiql.min.css",
    "vendor/graphiql-3.9.0/graphiql.min.js",
    "vendor/graphql-ws-5.16.0/LICENSE.md",
    "vendor/graphql-ws-5.16.0/graphql-ws.min.js",
    "vendor/react-18.3.1/LICENSE",
    "vendor/react-18.3.1/react.production.min.js",
    "vendor/react-dom-18.3.1/LICENSE",
    "vendor/react-dom-18.3.1/react-dom.production.min.js",
];

/// The policy of the console's pages and assets: nothing from elsewhere, no inline script or
/// style, no plugins, no framing, no `<base>` that could redirect relative URLs.
pub const CONSOLE_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// GraphiQL's: the console's, but for the inline styles its editor sets and the `data:` fonts
/// and images its stylesheet embeds (data that is already in the page: nothing is fetched).
pub const GRAPHIQL_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The console's routes. They read no state, and are open to every caller (`auth.rs`).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/graphql", get(graphiql))
        .route("/console/{*path}", get(asset))
        .route("/favicon.ico", get(no_icon))
}

/// Browsers ask every site for an icon; the console has none to give.
async fn no_icon() -> Response {
    (
        StatusCode::NO_CONTENT,
        [(header::CACHE_CONTROL, "public, max-age=86400")],
    )
        .into_response()
}

/// Whether `path` is one of the console's pages or assets, which need no token.
pub(crate) fn is_page(path: &str) -> bool {
    path == "/" || path == "/graphql" || path == "/favicon.ico" || path.starts_with("/console/")
}

/// The asset at `path`, if the console has it.
pub fn find(path: &str) -> Option<(usize, &'static Asset)> {
    ASSETS.iter().enumerate().find(|(_, a)| a.path == path)
}

/// The media type of a file, by its extension.
pub fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("md") => "text/markdown; charset=utf-8",
        _ => "text/plain; charset=utf-8",
    }
}

/// The strong validator of each asset, in [`ASSETS`]' order: BLAKE3 of its bytes.
fn etags() -> &'static [HeaderValue] {
    static ETAGS: OnceLock<Vec<HeaderValue>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let hash = blake3::hash(a.bytes).to_hex();
                HeaderValue::from_str(&format!("\"{}\"", &hash[..32]))
                    .unwrap_or_else(|_| HeaderValue::from_static("\"\""))
            })
            .collect()
    })
}

/// Whether the request's `If-None-Match` names `etag` (or `*`).
fn not_modified(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == "*" || etag.to_str().is_ok_and(|e| e == tag))
}

/// The answer for the asset at `path`, under `policy`.
fn serve(path: &str, headers: &HeaderMap, policy: &'static str) -> Response {
    let Some((index, asset)) = find(path) else {
        return crate::rest::ApiError::from(service::ServiceError::NotFound {
            resource: "console file",
            id: path.to_owned(),
        })
        .into_response();
    };
    let etag = etags()
        .get(index)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("\"\""));
    // A vendored file's path names its version: it never changes.
    let cache = if path.starts_with("vendor/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let mut response = if not_modified(headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type(path))], asset.bytes).into_response()
    };
    let out = response.headers_mut();
    out.insert(header::ETAG, etag);
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    out.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(policy),
    );
    out.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    out.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    out.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers, CONSOLE_POLICY)
}

async fn graphiql(headers: HeaderMap) -> Response {
    serve("graphiql.html", &headers, GRAPHIQL_POLICY)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    let policy = if path == "graphiql.html" || path.starts_with("vendor/graphiql") {
        GRAPHIQL_POLICY
    } else {
        CONSOLE_POLICY
    };
    serve(&path, &headers, policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_takes_lists_weak_tags_and_the_wildcard() {
        let etag = HeaderValue::from_static("\"abc\"");
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::IF_NONE_MATCH, HeaderValue::from_static(v));
            h
        };
        assert!(not_modified(&with("\"abc\""), &etag));
        assert!(not_modified(&with("\"x\", W/\"abc\""), &etag));
        assert!(not_modified(&with("*"), &etag));
        assert!(!not_modified(&with("\"abcd\""), &etag));
        assert!(!not_modified(&HeaderMap::new(), &etag));
    }
}
