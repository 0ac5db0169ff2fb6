//! The clients `bench service` measures through: one HTTP connection each, speaking REST, MCP
//! (a 2025-11-25 session, or 2026-07-28 requests without one) or GraphQL, as a real client
//! would over loopback.

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use serde_json::{Value, json};

/// How a client reaches the tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// `POST /v1/tools/call`.
    Rest,
    /// MCP Streamable HTTP, 2025-11-25: `initialize` opens a session, every call names it.
    McpSession,
    /// MCP Streamable HTTP, 2026-07-28: no session; each request says who it is in `_meta`.
    McpStateless,
}

impl Transport {
    pub(super) fn name(self) -> &'static str {
        match self {
            Transport::Rest => "rest",
            Transport::McpSession => "mcp_2025_11_25",
            Transport::McpStateless => "mcp_2026_07_28",
        }
    }
}

/// The longest any one request of the benchmark may take.
const REQUEST_TIME_MAX: Duration = Duration::from_secs(60);

/// One client on one kept-alive connection.
pub(super) struct Client {
    agent: ureq::Agent,
    base: String,
    transport: Transport,
    session: Option<String>,
    next_id: u64,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`), its MCP session opened if the
    /// transport has one.
    pub(super) fn connect(base: &str, transport: Transport, name: &str) -> anyhow::Result<Client> {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(REQUEST_TIME_MAX))
            .max_idle_connections_per_host(1)
            .build()
            .into();
        let mut client = Client {
            agent,
            base: base.to_owned(),
            transport,
            session: None,
            next_id: 1,
        };
        if transport == Transport::McpSession {
            client.open_session(name)?;
        }
        Ok(client)
    }

    fn open_session(&mut self, name: &str) -> anyhow::Result<()> {
        let initialize = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": name, "version": "1"}},
        });
        let mut response = self
            .agent
            .post(format!("{}/mcp", self.base))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .send(initialize.to_string())
            .context("initialize")?;
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("initialize opened no session"))?;
        let _ = response.body_mut().read_to_string();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let mut response = self
            .agent
            .post(format!("{}/mcp", self.base))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &session)
            .send(initialized.to_string())
            .context("notifications/initialized")?;
        let _ = response.body_mut().read_to_string();
        self.session = Some(session);
        Ok(())
    }

    /// Calls a tool and returns its structured result; a refusal is an error.
    pub(super) fn call_tool(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        let result = match self.transport {
            Transport::Rest => {
                // The REST view answers with the structured result itself, or the error.
                let reply = self.post(
                    "/v1/tools/call",
                    &[],
                    json!({"name": name, "arguments": arguments}),
                )?;
                return reply
                    .get("result")
                    .cloned()
                    .ok_or_else(|| anyhow!("{name} was refused: {reply}"));
            }
            Transport::McpSession | Transport::McpStateless => {
                let id = self.next_id;
                self.next_id += 1;
                let mut params = json!({"name": name, "arguments": arguments});
                let mut headers: Vec<(&str, String)> = Vec::new();
                if self.transport == Transport::McpStateless {
                    params["_meta"] = json!({
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "bench-service", "version": "1"},
                    });
                    headers.push(("MCP-Protocol-Version", "2026-07-28".into()));
                    headers.push(("Mcp-Method", "tools/call".into()));
                    headers.push(("Mcp-Name", name.to_owned()));
                } else if let Some(session) = &self.session {
                    headers.push(("Mcp-Session-Id", session.clone()));
                    headers.push(("MCP-Protocol-Version", "2025-11-25".into()));
                }
                let message =
                    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
                let reply = self.post("/mcp", &headers, message)?;
                reply
                    .get("result")
                    .cloned()
                    .ok_or_else(|| anyhow!("{name} failed: {reply}"))?
            }
        };
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            bail!("{name} was refused: {result}");
        }
        result
            .get("structuredContent")
            .cloned()
            .ok_or_else(|| anyhow!("{name} gave no structured result: {result}"))
    }

    /// Runs a GraphQL query and returns its `data`; errors are errors.
    pub(super) fn graphql(&mut self, query: &str, variables: Value) -> anyhow::Result<Value> {
        let reply = self.post(
            "/graphql",
            &[],
            json!({"query": query, "variables": variables}),
        )?;
        if let Some(errors) = reply.get("errors") {
            bail!("the query failed: {errors}");
        }
        reply
            .get("data")
            .cloned()
            .ok_or_else(|| anyhow!("the query gave no data: {reply}"))
    }

    /// `GET path`: whether it answered 200.
    pub(super) fn get_ok(&self, path: &str) -> bool {
        self.agent
            .get(format!("{}{path}", self.base))
            .call()
            .is_ok_and(|mut r| {
                let ok = r.status().is_success();
                let _ = r.body_mut().read_to_string();
                ok
            })
    }

    /// `GET path`: its body, when it answered 200.
    pub(super) fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let mut response = self
            .agent
            .get(format!("{}{path}", self.base))
            .call()
            .with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let text = response
            .body_mut()
            .read_to_string()
            .with_context(|| format!("GET {path}: the answer"))?;
        if !status.is_success() {
            bail!("GET {path} answered {status}: {text}");
        }
        Ok(text)
    }

    fn post(&self, path: &str, headers: &[(&str, String)], body: Value) -> anyhow::Result<Value> {
        let mut request = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut response = request
            .send(body.to_string())
            .with_context(|| format!("POST {path}"))?;
        let status = response.status();
        let text = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .with_context(|| format!("POST {path}: the answer"))?;
        // A JSON-RPC answer may come as the data of a server-sent event.
        let json = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("data:")
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
            })
            .unwrap_or(&text);
        serde_json::from_str(json)
            .with_context(|| format!("POST {path} answered {status} with {text:.200}"))
    }
}
