//! The console's routes in process: every file of `crates/server/console/` is compiled in and
//! served with its media type, the policy and a validator; the pages need no token while the
//! API still does; nothing the console serves names another site, but for the strings the
//! vendor manifest lists (namespace names and links in comments, never requested) and the
//! licence texts; and the vendored files are the ones the manifest's hashes name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::Value;
use server::console::{ASSETS, CONSOLE_POLICY, GRAPHIQL_POLICY, content_type};
use sha2::Digest as _;
use tower::ServiceExt as _;

use crate::harness::App;

fn console_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("console")
}

fn files_under(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, base, out);
        } else {
            let relative = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(relative);
        }
    }
}

async fn fetch(app: &App, path: &str, headers: &[(&str, &str)]) -> axum::http::Response<Body> {
    let mut request = Request::get(path).header(header::HOST, "127.0.0.1:7878");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    app.router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

async fn body_of(response: axum::http::Response<Body>) -> Vec<u8> {
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec()
}

#[test]
fn every_file_of_the_console_folder_is_compiled_in_and_nothing_else() {
    let mut on_disk = BTreeSet::new();
    files_under(&console_dir(), &console_dir(), &mut on_disk);
    let compiled: BTreeSet<String> = ASSETS.iter().map(|a| a.path.to_owned()).collect();
    assert_eq!(
        on_disk, compiled,
        "add new console files to ASSETS in console.rs"
    );
    for asset in ASSETS {
        let disk = std::fs::read(console_dir().join(asset.path)).unwrap();
        assert_eq!(disk, asset.bytes, "{} is stale in the build", asset.path);
    }
}

#[tokio::test]
async fn pages_and_assets_are_served_with_their_type_policy_and_validator() {
    let app = App::new();
    let mut paths: Vec<(String, &str)> = ASSETS
        .iter()
        .map(|a| (format!("/console/{}", a.path), a.path))
        .collect();
    paths.push(("/".into(), "index.html"));
    paths.push(("/graphql".into(), "graphiql.html"));
    for (url, file) in &paths {
        let response = fetch(&app, url, &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        let headers = response.headers().clone();
        assert_eq!(
            headers[header::CONTENT_TYPE],
            content_type(file),
            "{url}: the media type"
        );
        let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
        let graphiql = *file == "graphiql.html" || file.starts_with("vendor/graphiql");
        assert_eq!(
            policy,
            if graphiql {
                GRAPHIQL_POLICY
            } else {
                CONSOLE_POLICY
            },
            "{url}"
        );
        assert!(policy.starts_with("default-src 'self';"), "{url}");
        assert!(
            policy.contains("script-src 'self';"),
            "{url}: no inline script"
        );
        assert!(!policy.contains("unsafe-eval"), "{url}");
        assert!(policy.contains("frame-ancestors 'none'"), "{url}");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{url}");
        let cache = headers[header::CACHE_CONTROL].to_str().unwrap();
        if file.starts_with("vendor/") {
            assert!(cache.contains("immutable"), "{url}: {cache}");
        } else {
            assert_eq!(cache, "no-cache", "{url}");
        }
        let etag = headers[header::ETAG].to_str().unwrap().to_owned();
        let bytes = body_of(response).await;
        let expected = ASSETS.iter().find(|a| a.path == *file).unwrap().bytes;
        assert_eq!(bytes, expected, "{url}");
        // A reader that holds it is told it has not changed, and sent nothing.
        let again = fetch(&app, url, &[("If-None-Match", &etag)]).await;
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{url}");
        assert_eq!(again.headers()[header::ETAG], etag.as_str());
        assert!(body_of(again).await.is_empty());
        let changed = fetch(&app, url, &[("If-None-Match", "\"0000\"")]).await;
        assert_eq!(changed.status(), StatusCode::OK, "{url}");
    }
    // Only the console's own policy is this strict: GraphiQL's differs only in what its
    // stylesheet needs.
    assert!(!CONSOLE_POLICY.contains("unsafe-inline") && !CONSOLE_POLICY.contains("data:"));
    let (status, body) = app.get("/console/js/nothing.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "not_found", "{body}");
    let (status, _) = app.get("/console/../Cargo.toml").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_pages_need_no_token_but_what_they_ask_for_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = service::tokens::TokenStore::new(dir.path().join("tokens.json"));
    let _token = store.add("rita", service::Role::Reviewer).unwrap();
    let app = App::in_dir(dir, crate::harness::limits());
    for path in ["/", "/graphql", "/console/js/app.js"] {
        let response = fetch(&app, path, &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let (status, body) = app
        .post(
            "/graphql",
            &serde_json::json!({"query": "{ ledger { size } }"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(body["error"], "unauthenticated");
}

/// The URL-shaped strings in `bytes`: `http://` or `https://` and what follows up to a
/// delimiter.
fn urls_in(bytes: &[u8]) -> BTreeSet<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("http") {
        let rest = &text[at..];
        let Some(after) = rest
            .strip_prefix("https://")
            .or_else(|| rest.strip_prefix("http://"))
        else {
            continue;
        };
        let scheme = rest.len() - after.len();
        let end = after
            .find(|c: char| c.is_whitespace() || "\"'`<>()\\,;{}[]".contains(c))
            .unwrap_or(after.len());
        found.insert(rest[..scheme + end].to_owned());
    }
    found
}

#[test]
fn no_asset_names_another_site_but_the_listed_names_in_vendored_files() {
    let manifest: Value = serde_json::from_slice(
        ASSETS
            .iter()
            .find(|a| a.path == "vendor/MANIFEST.json")
            .unwrap()
            .bytes,
    )
    .unwrap();
    let mut listed = std::collections::BTreeMap::new();
    for package in manifest["packages"].as_array().unwrap() {
        for file in package["files"].as_array().unwrap() {
            let names: BTreeSet<String> = file["names_not_fetched"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default();
            listed.insert(format!("vendor/{}", file["to"].as_str().unwrap()), names);
        }
    }
    let mut scanned = 0;
    for asset in ASSETS {
        let name = asset.path.rsplit('/').next().unwrap();
        if name.starts_with("LICENSE") || asset.path == "vendor/MANIFEST.json" {
            continue;
        }
        scanned += 1;
        let found = urls_in(asset.bytes);
        match listed.get(asset.path) {
            // A vendored file names exactly what the manifest says it does, none of it in a
            // place the browser would load from.
            Some(names) => {
                assert_eq!(&found, names, "{}", asset.path);
                let text = String::from_utf8_lossy(asset.bytes);
                for url in &found {
                    for loader in [
                        "src=\"",
                        "href=\"",
                        "url(",
                        "import(\"",
                        "from\"",
                        "fetch(\"",
                    ] {
                        assert!(
                            !text.contains(&format!("{loader}{url}")),
                            "{}: {url} is loaded",
                            asset.path
                        );
                    }
                }
            }
            // The console's own files name none.
            None => assert!(found.is_empty(), "{} names {found:?}", asset.path),
        }
    }
    assert!(scanned > 15, "{scanned}");
    // The check finds what it looks for.
    assert_eq!(
        urls_in(b"x = 'https://cdn.example.org/a.js'; y=\"http://h/\""),
        BTreeSet::from([
            "https://cdn.example.org/a.js".to_owned(),
            "http://h/".to_owned()
        ])
    );
}

#[test]
fn the_vendored_files_are_the_ones_the_manifest_hashes_name() {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(console_dir().join("vendor/MANIFEST.json")).unwrap())
            .unwrap();
    let mut checked = 0;
    for package in manifest["packages"].as_array().unwrap() {
        assert!(package["licence"].is_string(), "{package}");
        assert!(
            package["integrity"]
                .as_str()
                .unwrap()
                .starts_with("sha512-")
        );
        let files = package["files"].as_array().unwrap();
        assert!(
            files
                .iter()
                .any(|f| f["to"].as_str().unwrap().contains("LICENSE")),
            "{} comes with its licence",
            package["name"]
        );
        for file in files {
            let bytes = std::fs::read(
                console_dir()
                    .join("vendor")
                    .join(file["to"].as_str().unwrap()),
            )
            .unwrap();
            let digest: String = sha2::Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(digest, file["sha256"].as_str().unwrap(), "{file}");
            checked += 1;
        }
    }
    assert!(checked >= 9, "{checked}");
}
