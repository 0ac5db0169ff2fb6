//! The client side of `--server URL`: the commands that can act through a running server
//! instead of on the data directory it holds (sled locks it) share this one HTTP client.
//!
//! A request carries the access token of `--token` (or `RESEARCH_LEDGER_TOKEN`) as
//! `Authorization: Bearer`. An answer is read as JSON; a refusal comes back as the server's
//! structured error (`{"error": CODE, "message": …}`), which the command prints as it came.
//! Nothing here trusts the server more than it must: the commands check what can be checked
//! (bundles against their signatures, proofs offline).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Largest JSON answer read, bundles aside (they have a bound of their own).
pub(crate) const ANSWER_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// How long to wait for a connection to the server.
const CONNECT_TIME_MAX: Duration = Duration::from_secs(10);

/// How long a request may take at most, whatever the server's own bound: a safety net for a
/// connection that stalls without closing.
const REQUEST_TIME_MAX: Duration = Duration::from_secs(3600);

/// `--server` and `--token`, for the commands that can act through a running server.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServerArgs {
    /// Act through the server at this URL (e.g. `http://127.0.0.1:7878`) instead of on the
    /// data directory, which a running server holds.
    #[arg(long, env = "RESEARCH_LEDGER_SERVER", value_name = "URL")]
    pub(crate) server: Option<String>,
    /// The access token for `--server` (a server on loopback without tokens needs none).
    #[arg(
        long,
        env = "RESEARCH_LEDGER_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub(crate) token: Option<String>,
}

impl ServerArgs {
    /// The client for `--server`, when it was given.
    pub(crate) fn remote(&self) -> Result<Option<Remote>, RemoteError> {
        self.server
            .as_deref()
            .map(|server| Remote::new(server, self.token.as_deref()))
            .transpose()
    }
}

/// Why a request to the server did not give an answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoteError {
    /// `--server` is not an HTTP URL.
    #[error("--server {0:?} is not a URL: give http://HOST:PORT or https://HOST:PORT")]
    BadUrl(String),
    /// No connection, or it broke before an answer came.
    #[error("cannot reach the server at {server}: {source}")]
    Unreachable {
        /// The server.
        server: String,
        /// What the connection did.
        source: ureq::Error,
    },
    /// The server answered with its structured error.
    #[error("the server at {server} refused ({status}): {error}")]
    Refused {
        /// The server.
        server: String,
        /// The HTTP status.
        status: ureq::http::StatusCode,
        /// The structured error, as the server sent it.
        error: Value,
    },
    /// The answer is not what the endpoint gives: another program, or an older server.
    #[error("the server at {server} answered {status} with {what}")]
    BadAnswer {
        /// The server.
        server: String,
        /// The HTTP status.
        status: ureq::http::StatusCode,
        /// What came instead.
        what: String,
    },
}

/// A running server, and the token to present to it.
#[derive(Debug)]
pub(crate) struct Remote {
    base: String,
    agent: ureq::Agent,
    authorization: Option<String>,
}

/// Letters, digits and `-._~` stay as they are in a path segment; every other byte is escaped.
pub(crate) fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Remote {
    /// A client for the server at `server` presenting `token`.
    pub(crate) fn new(server: &str, token: Option<&str>) -> Result<Remote, RemoteError> {
        let base = server.trim().trim_end_matches('/');
        let scheme_ok = base.starts_with("http://") || base.starts_with("https://");
        if !scheme_ok || base.parse::<ureq::http::Uri>().is_err() {
            return Err(RemoteError::BadUrl(server.to_owned()));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIME_MAX))
            .timeout_global(Some(REQUEST_TIME_MAX))
            // A redirect would take the token to wherever it points; the server never sends one.
            .max_redirects(0)
            .build()
            .into();
        Ok(Remote {
            base: base.to_owned(),
            agent,
            authorization: token.map(|t| format!("Bearer {t}")),
        })
    }

    /// The server's URL, as given.
    pub(crate) fn server(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorize<B>(&self, mut request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        if let Some(authorization) = &self.authorization {
            request = request.header("Authorization", authorization);
        }
        request
    }

    /// The text of a successful answer (at most `bytes_max` bytes), or the refusal.
    fn read(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        bytes_max: u64,
    ) -> Result<String, RemoteError> {
        let unreachable = |source| RemoteError::Unreachable {
            server: self.base.clone(),
            source,
        };
        let mut response = sent.map_err(unreachable)?;
        let status = response.status();
        let text = response
            .body_mut()
            .with_config()
            .limit(bytes_max)
            .read_to_string()
            .map_err(|source| match source {
                ureq::Error::BodyExceedsLimit(limit) => RemoteError::BadAnswer {
                    server: self.base.clone(),
                    status,
                    what: format!("more than the {limit} bytes this command reads"),
                },
                other => unreachable(other),
            })?;
        if status.is_success() {
            return Ok(text);
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(error) if error.get("error").is_some_and(Value::is_string) => {
                Err(RemoteError::Refused {
                    server: self.base.clone(),
                    status,
                    error,
                })
            }
            _ => Err(RemoteError::BadAnswer {
                server: self.base.clone(),
                status,
                what: "no structured error".into(),
            }),
        }
    }

    fn decode<T: DeserializeOwned>(&self, text: &str) -> Result<T, RemoteError> {
        serde_json::from_str(text).map_err(|e| RemoteError::BadAnswer {
            server: self.base.clone(),
            status: ureq::http::StatusCode::OK,
            what: format!("an answer this command does not read: {e}"),
        })
    }

    /// `GET path?query` as text of at most `bytes_max` bytes.
    pub(crate) fn get_text(
        &self,
        path: &str,
        query: &[(&str, String)],
        bytes_max: u64,
    ) -> Result<String, RemoteError> {
        let mut request = self.authorize(self.agent.get(self.url(path)));
        for (name, value) in query {
            request = request.query(name, value);
        }
        self.read(request.call(), bytes_max)
    }

    /// `GET path?query`, read as `T`.
    pub(crate) fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<T, RemoteError> {
        let text = self.get_text(path, query, ANSWER_BYTES_MAX)?;
        self.decode(&text)
    }

    /// `POST path` with the JSON `body`, read as `T`.
    pub(crate) fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, RemoteError> {
        self.post_body(path, body.to_string())
    }

    /// `POST path` with `body`, JSON text already written, read as `T`.
    pub(crate) fn post_body<T: DeserializeOwned>(
        &self,
        path: &str,
        body: String,
    ) -> Result<T, RemoteError> {
        let request = self
            .authorize(self.agent.post(self.url(path)))
            .header("Content-Type", "application/json");
        let text = self.read(request.send(body), ANSWER_BYTES_MAX)?;
        self.decode(&text)
    }

    /// `DELETE path`, read as `T`.
    pub(crate) fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, RemoteError> {
        let request = self.authorize(self.agent.delete(self.url(path)));
        let text = self.read(request.call(), ANSWER_BYTES_MAX)?;
        self.decode(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_are_servers() {
        for good in [
            "http://127.0.0.1:7878",
            "https://ledger.example.org/",
            "http://[::1]:80",
        ] {
            let remote = Remote::new(good, None).unwrap();
            assert!(!remote.server().ends_with('/'), "{good}");
        }
        for bad in [
            "127.0.0.1:7878",
            "ftp://example.org",
            "http://exa mple.org",
            "",
        ] {
            assert!(
                matches!(Remote::new(bad, None), Err(RemoteError::BadUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn path_segments_are_escaped() {
        assert_eq!(path_segment("task-1_a.b~"), "task-1_a.b~");
        assert_eq!(path_segment("a/b c?"), "a%2Fb%20c%3F");
        assert_eq!(path_segment("研究"), "%E7%A0%94%E7%A9%B6");
    }
}
