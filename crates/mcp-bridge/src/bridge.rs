//! The MCP server handler: capabilities, who the caller is, and the dispatch of every request
//! to the module that answers it.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::task_manager::TaskManager;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use service::{Caller, Service};

use crate::subscriptions::Session;

/// What the bridge is configured with. Every limit is here.
#[derive(Debug, Clone)]
pub struct BridgeOptions {
    /// The actor recorded when a client gives no name.
    pub actor_default: String,
    /// Characters of a client's name kept as the actor.
    pub actor_chars_max: usize,
    /// Tasks per page of `resources/list` (each task lists its state, events and conclusion).
    pub resource_tasks_per_page: usize,
    /// Events in one page of `ledger://tasks/{id}/events`; a longer trail gives the cursor of
    /// the next page.
    pub resource_events_per_page: usize,
    /// Resources one connection (or one `subscriptions/listen`) may subscribe to: the server's
    /// `subscriptions_per_client_max`, the name a refusal gives. A listen request naming more
    /// is acknowledged with the first this many of those it may subscribe to.
    pub subscriptions_max: usize,
    /// Tasks scanned to complete a task id.
    pub completion_tasks_scanned_max: usize,
    /// How long a finished MCP task (a pipeline run started as one) stays readable, in ms.
    pub task_ttl_ms: u64,
    /// `Host` values the HTTP endpoint accepts (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin` values the HTTP endpoint accepts; requests without one (every
    /// non-browser client) pass.
    pub allowed_origins: Vec<String>,
    /// Largest HTTP request body, in bytes.
    pub request_body_bytes_max: usize,
    /// Sessions open at once over HTTP; an `initialize` past it is refused.
    pub sessions_max: usize,
    /// How long a person is given to answer an elicitation about a conflict, in ms; an
    /// unanswered question records nothing.
    pub elicitation_timeout_ms: u64,
}

impl Default for BridgeOptions {
    fn default() -> Self {
        BridgeOptions {
            actor_default: "mcp-client".into(),
            actor_chars_max: 64,
            resource_tasks_per_page: 50,
            resource_events_per_page: 20,
            subscriptions_max: 256,
            completion_tasks_scanned_max: 10_000,
            task_ttl_ms: 600_000,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
            ],
            request_body_bytes_max: 4 * 1024 * 1024,
            sessions_max: 1024,
            elicitation_timeout_ms: 600_000,
        }
    }
}

/// What every connection of one server shares.
pub(crate) struct Shared {
    pub(crate) service: Service,
    pub(crate) options: BridgeOptions,
    /// MCP tasks outlive the request that started them, and in the stateless era every
    /// request may reach another handler instance: they live here.
    pub(crate) tasks: TaskManager,
    /// The key of the MACs on elicitation `requestState`s: random for each process, so a
    /// state another process issued, or one a client made up, is refused.
    pub(crate) answer_key: [u8; 32],
    /// Holds subscription listeners back after the subscription was answered and before they
    /// follow the ledger, so that a test can append in that gap.
    #[cfg(test)]
    pub(crate) gap: tokio::sync::RwLock<()>,
}

/// The MCP server handler. Cheap to clone; [`Bridge::for_new_session`] gives a connection its
/// own subscriptions.
#[derive(Clone)]
pub struct Bridge {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: Arc<Session>,
}

/// A fresh random key; where the system has no randomness, a hash of the clock and the process,
/// which still differs between processes.
fn answer_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    if getrandom::fill(&mut key).is_err() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let seed = format!("{now}:{}", std::process::id());
        key = *blake3::hash(seed.as_bytes()).as_bytes();
    }
    key
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge").finish_non_exhaustive()
    }
}

impl Bridge {
    /// A bridge to `service`.
    pub fn new(service: Service, options: BridgeOptions) -> Self {
        Bridge {
            shared: Arc::new(Shared {
                service,
                options,
                tasks: TaskManager::new(),
                answer_key: answer_key(),
                #[cfg(test)]
                gap: tokio::sync::RwLock::new(()),
            }),
            session: Arc::new(Session::default()),
        }
    }

    /// The same bridge for another connection: shared tools, service and tasks; its own
    /// resource subscriptions.
    pub fn for_new_session(&self) -> Self {
        Bridge {
            shared: Arc::clone(&self.shared),
            session: Arc::new(Session::default()),
        }
    }

    pub(crate) fn service(&self) -> &Service {
        &self.shared.service
    }

    pub(crate) fn answer_key(&self) -> &[u8; 32] {
        &self.shared.answer_key
    }

    pub(crate) fn options(&self) -> &BridgeOptions {
        &self.shared.options
    }

    /// The caller of a request: the holder of the access token the HTTP server checked (it
    /// puts the caller into the request's extensions); otherwise, on stdio or on a server
    /// without tokens, a local caller named as the client names itself (from `initialize` in
    /// 2025-11-25, from the request's `_meta` from 2026-07-28).
    /// Who calls: the token's holder over HTTP, else the client by its name. Whatever a tool
    /// call through MCP decides is the assistant's, through the client it names.
    pub(crate) fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        self.caller_deciding(context, service::research::event::DecidedBy::Assistant)
    }

    /// The same caller, its decisions recorded as a person's: the one who answered an
    /// elicitation through the client.
    pub(crate) fn person(&self, context: &RequestContext<RoleServer>) -> Caller {
        self.caller_deciding(context, service::research::event::DecidedBy::Person)
    }

    fn caller_deciding(
        &self,
        context: &RequestContext<RoleServer>,
        by: service::research::event::DecidedBy,
    ) -> Caller {
        let name: String = context
            .client_info()
            .map(|info| info.name.trim().to_owned())
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| self.options().actor_default.clone())
            .chars()
            .take(self.options().actor_chars_max)
            .collect();
        let caller = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .unwrap_or_else(|| Caller::new(name.clone()));
        caller.deciding(by, name)
    }
}

const INSTRUCTIONS: &str = "research-ledger is an audited research service. Open a task with \
research_open_task, gather evidence (retrieval_search_evidence, retrieval_add_evidence), screen \
every candidate (synthesis_screen_evidence), then let the service resolve conflicts, build the \
decision matrix and issue the verdict (evaluation_*). The service, not you, scores evidence and \
decides the verdict; every step is a hash-chained ledger event. research_run_pipeline runs the \
steps in the background and stops where your judgement is needed. Refusals are tool results \
with isError and a structured error: follow its pending_actions; on session_conflict read the \
task again. Tasks are also resources: ledger://tasks/{task_id}/summary (compact), …/state (full), …/events{?cursor}, …/conclusion.";

impl ServerHandler for Bridge {
    // Logging is deprecated from 2026-07-28, but 2025-11-25 clients still set a level.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        let mut server = Implementation::new("research-ledger", env!("CARGO_PKG_VERSION"));
        server.title = Some("research-ledger".into());
        server.description = Some(
            "An event-sourced, hash-chained research ledger that AI assistants research through."
                .into(),
        );
        ServerConfig::new(capabilities)
            .with_server_info(server)
            .with_instructions(format!(
                "{INSTRUCTIONS} {} {}",
                service::SHARED_ARGUMENTS,
                service::SHARED_RESULTS
            ))
    }

    /// A request the SDK did not read into one it knows: a method MCP defines (in the request's
    /// era) whose params it could not read is invalid params, not an unknown method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let version = context.protocol_version();
        let era_2026 = crate::error::is_2026_era(version.as_ref().map(|v| v.as_str()));
        Err(crate::error::unread_request(&request.method, era_2026))
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.log_level.set(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(crate::tools::tools(
            self.service(),
        )))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        crate::tools::tool(self.service(), name)
    }

    /// Tells the client whenever the tool list changes (a contract registered, removed or
    /// edited), for as long as the connection lasts.
    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        let mut changed = self.service().tools_changed();
        let peer = context.peer.clone();
        tokio::spawn(async move {
            while changed.changed().await.is_ok() {
                if peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
            }
        });
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        crate::tools::call(self, request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(
            self.shared.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared
            .tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared.tasks.cancel_task(&request.task_id)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        crate::resources::list(self, request.and_then(|r| r.cursor))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(crate::resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let bridge = self.clone();
        let uri = request.uri;
        // Reads fold the ledger (time travel, the audit trail): off the async threads.
        tokio::task::spawn_blocking(move || crate::resources::read(&bridge, &uri))
            .await
            .map_err(|e| McpError::internal_error(format!("the read stopped: {e}"), None))?
            .map(ReadResourceResponse::from)
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        crate::subscriptions::subscribe(self, &request.uri, context.peer)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.session.unsubscribe(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(crate::subscriptions::accepted(self, requested))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        crate::subscriptions::listen(self, context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(crate::prompts::prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let bridge = self.clone();
        tokio::task::spawn_blocking(move || crate::prompts::get(&bridge, &request))
            .await
            .map_err(|e| McpError::internal_error(format!("the prompt stopped: {e}"), None))?
            .map(GetPromptResponse::from)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let bridge = self.clone();
        tokio::task::spawn_blocking(move || crate::prompts::complete(&bridge, &request))
            .await
            .map_err(|e| McpError::internal_error(format!("completion stopped: {e}"), None))?
    }
}
