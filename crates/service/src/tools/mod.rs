//! The tools: one table of them — name, description, schemas, role, read-only flag, handler —
//! and the one call path every front end takes through it.
//!
//! This is the contract every front end exposes the same way: the MCP bridge lists these tools
//! and calls them, `GET /v1/tools/list` and `POST /v1/tools/call` answer with the same shapes,
//! GraphQL's mutations call them by name, role checks read the role each entry names, and the
//! domain's `pending_actions` point to them by [`Tool`]. Adding a tool is one variant of
//! [`Tool`] and one entry of the table in [`table`]; the compiler asks for the second.
//!
//! Names are `domain_action` with an underscore (clients such as Claude Desktop refuse a server
//! whose tool names do not match `^[a-zA-Z0-9_-]{1,64}$`). Every result is a JSON object with
//! `task_id` and `session_version` (and `replayed` for writes), plus a short text for people.

mod compact;
mod compact_views;
pub use compact_views::item as compact_item;
mod detail;
pub use compact::{SHARED_ARGUMENTS, SHARED_RESULTS};
mod evaluation;
pub use evaluation::conflicts_in_force;
mod evidence;
mod search;
mod table;
mod task;

use research::{TaskState, Tool};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::ServiceError;
use crate::service::{Caller, Service, Target, WriteOptions, Written};
use crate::tokens::Role;

/// One tool as clients see it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// A short title.
    pub title: String,
    /// When to call it.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// JSON Schema of its structured result.
    pub output_schema: Value,
    /// It changes nothing.
    pub read_only: bool,
    /// Calling it twice with the same arguments has the effect of calling it once.
    pub idempotent: bool,
    /// It reaches beyond the ledger and the corpus (a registered external tool).
    pub open_world: bool,
    /// The role a caller needs when tokens are in use.
    pub role: Role,
}

/// How far a long tool call has got, for front ends that report progress (MCP progress
/// notifications): a search reports once per source.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    /// Units done.
    pub progress: u64,
    /// Units in all, when known.
    pub total: Option<u64>,
    /// What is happening, for people.
    pub message: String,
}

/// A tool's result: the structured object (the single source of truth) and a short text.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The structured result.
    pub structured: Value,
    /// A line or two for people.
    pub text: String,
}

/// One call of a built-in tool, as its handler sees it.
pub(crate) struct Call<'a> {
    pub(crate) service: &'a Service,
    pub(crate) caller: &'a Caller,
    pub(crate) tool: Tool,
    pub(crate) arguments: &'a Value,
    pub(crate) progress: &'a mut (dyn FnMut(ToolProgress) + Send),
}

impl<'a> Call<'a> {
    /// Writes the command `make` builds to `target`, recorded under this tool's name.
    pub(crate) fn write(
        &self,
        target: Target<'_>,
        guard: &WriteOptions,
        make: &mut dyn FnMut(&TaskState) -> Result<research::Command, ServiceError>,
    ) -> Result<Written, ServiceError> {
        self.service.write(
            self.caller,
            self.tool.name(),
            self.arguments,
            target,
            guard,
            make,
        )
    }

    /// The original result of this very call when its idempotency key was committed before,
    /// else the key held for this call ([`Service::hold_key`]).
    pub(crate) fn hold_key(
        &self,
        guard: &WriteOptions,
    ) -> Result<crate::service::KeyHold, ServiceError> {
        self.service
            .hold_key(self.caller, self.tool.name(), self.arguments, guard)
    }

    /// [`Call::write`] of a command that cites full texts, which `make` attaches.
    pub(crate) fn write_with_content(
        &self,
        target: Target<'_>,
        guard: &WriteOptions,
        make: &mut dyn FnMut(
            &TaskState,
            &mut crate::content::Attachments,
        ) -> Result<research::Command, ServiceError>,
    ) -> Result<Written, ServiceError> {
        self.service.write_with_content(
            self.caller,
            self.tool.name(),
            self.arguments,
            target,
            guard,
            make,
        )
    }

    /// [`Call::write_with_content`], resolving when the write is durable without holding a
    /// thread; the future borrows what the call was given, not the call.
    pub(crate) fn write_with_content_async<'c, M>(
        &self,
        target: Target<'c>,
        guard: &'c WriteOptions,
        make: &'c mut M,
    ) -> impl Future<Output = Result<Written, ServiceError>> + Send + use<'a, 'c, M>
    where
        'a: 'c,
        M: FnMut(
                &TaskState,
                &mut crate::content::Attachments,
            ) -> Result<research::Command, ServiceError>
            + Send
            + ?Sized,
    {
        let (service, caller, tool, arguments) =
            (self.service, self.caller, self.tool.name(), self.arguments);
        async move {
            service
                .write_with_content_async(caller, tool, arguments, target, guard, make)
                .await
        }
    }

    /// Writes a command that needs no more than the task, its version guard and its key.
    pub(crate) fn write_simple(
        &self,
        a: &crate::args::TaskArgs,
        command: research::Command,
    ) -> Result<Written, ServiceError> {
        self.write(
            Target::Existing(&a.task_id),
            &guard(a.expected_version, &a.idempotency_key),
            &mut |_| Ok(command.clone()),
        )
    }
}

/// What a call of a tool resolves to. Handlers that wait on nothing but the ledger's append
/// are async; the rest do their work before they return, and resolve at once.
pub(crate) type ToolFuture<'c> =
    std::pin::Pin<Box<dyn Future<Output = Result<ToolOutput, ServiceError>> + Send + 'c>>;
type Handler = Box<dyn for<'c, 'a> Fn(&'c mut Call<'a>) -> ToolFuture<'c> + Send + Sync>;
type Check = fn(&Value) -> Result<(), ServiceError>;

/// An entry of the table: what clients see, and what a call runs.
pub(crate) struct ToolDef {
    pub(crate) tool: Tool,
    pub(crate) spec: ToolSpec,
    /// It waits on nothing but its task's state and, when it writes, the ledger's append: when
    /// that state is in memory (and, for a write, the ledger is this node's alone), an async
    /// caller runs it on its own task rather than handing it to a blocking thread.
    inline: bool,
    check: Check,
    run: Handler,
}

impl std::fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDef").field("spec", &self.spec).finish()
    }
}

fn check<A: DeserializeOwned>(arguments: &Value) -> Result<(), ServiceError> {
    parse::<A>(arguments).map(drop)
}

/// The built-in tools' table, made once: schemas are generated from types and never change, and
/// every call's role check and dispatch reads it.
pub(crate) fn table() -> &'static [ToolDef] {
    static TABLE: std::sync::OnceLock<Vec<ToolDef>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| Tool::ALL.iter().map(|&t| table::entry(t)).collect())
}

/// The entry of a built-in tool, by name.
pub(crate) fn def(name: &str) -> Option<&'static ToolDef> {
    let tool = Tool::from_name(name)?;
    table().iter().find(|d| d.tool == tool)
}

/// Every built-in tool, in a stable order.
pub fn tool_specs() -> Vec<ToolSpec> {
    built_in_tools().to_vec()
}

/// The built-in tools as clients see them, made once from the table.
pub fn built_in_tools() -> &'static [ToolSpec] {
    static SPECS: std::sync::OnceLock<Vec<ToolSpec>> = std::sync::OnceLock::new();
    SPECS.get_or_init(|| table().iter().map(|d| d.spec.clone()).collect())
}

/// The role a tool needs, as its entry says: reads for auditors, human decisions on conflicts
/// for reviewers, every other write for writers — registered tools included, since their calls
/// are recorded.
pub fn role_for_tool(name: &str) -> Role {
    def(name).map_or(Role::Writer, |d| d.spec.role)
}

/// Reads the arguments of a built-in tool as a call would, without calling it: what is wrong
/// with them, or nothing.
pub fn parse_for_tool(name: &str, arguments: &Value) -> Result<(), ServiceError> {
    match def(name) {
        Some(d) => (d.check)(arguments),
        None => Err(ServiceError::NotFound {
            resource: "tool",
            id: name.to_owned(),
        }),
    }
}

/// Reads a tool's arguments strictly, naming the argument at fault.
pub(crate) fn parse<T: DeserializeOwned>(arguments: &Value) -> Result<T, ServiceError> {
    let arguments = if arguments.is_null() {
        json!({})
    } else {
        arguments.clone()
    };
    serde_path_to_error::deserialize(arguments).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // A missing or unknown argument is named in the message; a value of the wrong type is
        // where the path ends (`question`, `decisions[0].adopt`).
        let field = match message.split('`').nth(1) {
            Some(name) if message.contains("field `") => name.to_owned(),
            _ if path != "." => path,
            _ => "arguments".to_owned(),
        };
        ServiceError::InvalidArgument { field, message }
    })
}

pub(crate) fn guard(
    expected_version: Option<u64>,
    idempotency_key: &Option<String>,
) -> WriteOptions {
    WriteOptions {
        expected_version,
        idempotency_key: idempotency_key.clone(),
    }
}

/// The fields every write's result opens with.
pub(crate) fn base(written: &Written) -> serde_json::Map<String, Value> {
    let mut map = serde_json::Map::new();
    map.insert("task_id".into(), json!(written.task_id));
    map.insert("session_version".into(), json!(written.session_version));
    map.insert("replayed".into(), json!(written.replayed));
    map
}

pub(crate) fn done(map: serde_json::Map<String, Value>, text: String) -> ToolOutput {
    ToolOutput {
        structured: Value::Object(map),
        text,
    }
}

/// The sentence every write's text ends with: where the task stands.
pub(crate) fn suffix(written: &Written) -> String {
    let replayed = if written.replayed { " (replayed)" } else { "" };
    format!(
        " Task {} is at version {}{replayed}.",
        written.task_id, written.session_version
    )
}

pub(crate) fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

pub(crate) fn evidence_view(state: &TaskState, id: &str) -> Value {
    state
        .evidence_view(id)
        .map(|v| to_json(&v))
        .unwrap_or(Value::Null)
}

pub(crate) fn hex_of(hash: &research::Hash32) -> String {
    to_json(hash)
        .as_str()
        .map(str::to_owned)
        .unwrap_or_default()
}

impl Service {
    /// Calls a built-in tool, blocking until it is done. Unknown names are `not_found` (the
    /// MCP bridge answers them as a protocol error before they get here).
    pub fn call_tool(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
    ) -> Result<ToolOutput, ServiceError> {
        self.call_tool_with_progress(caller, name, arguments, &mut |_| {})
    }

    /// Calls a tool, reporting progress on long calls (a search, per source). Blocking.
    pub fn call_tool_with_progress(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
        progress: &mut (dyn FnMut(ToolProgress) + Send),
    ) -> Result<ToolOutput, ServiceError> {
        pollster::block_on(self.call(caller, name, arguments, progress))
    }

    /// The one path of a call: the role check, the handler, the call counted by outcome.
    async fn call(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
        progress: &mut (dyn FnMut(ToolProgress) + Send),
    ) -> Result<ToolOutput, ServiceError> {
        let known = self.has_tool(name);
        let result = match known {
            true => match caller.require(role_for_tool(name), &format!("the tool {name}")) {
                Ok(()) => self.dispatch(caller, name, arguments, progress).await,
                Err(e) => Err(e),
            },
            false => self.dispatch(caller, name, arguments, progress).await,
        };
        let label = if known { name } else { "unknown" };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.code(),
        };
        self.inner.metrics.tool_call(label, outcome);
        result
    }

    async fn dispatch(
        &self,
        caller: &Caller,
        name: &str,
        arguments: &Value,
        progress: &mut (dyn FnMut(ToolProgress) + Send),
    ) -> Result<ToolOutput, ServiceError> {
        if !matches!(arguments, Value::Object(_) | Value::Null) {
            return Err(ServiceError::invalid(
                "arguments",
                "the arguments must be a JSON object",
            ));
        }
        if let Some(def) = def(name) {
            let mut call = Call {
                service: self,
                caller,
                tool: def.tool,
                arguments,
                progress,
            };
            return (def.run)(&mut call).await;
        }
        // Registered tools and fallbacks call out and block: never reached from an async
        // task's own thread (see `runs_inline`).
        let registered = self.registry().get(name).cloned();
        if let Some(contract) = registered {
            return self.call_external(caller, &contract, arguments);
        }
        let fallback = self.registry().fallback(name).map(str::to_owned);
        match fallback {
            Some(to) if to != name => {
                let mut out = self.call_tool_with_progress(caller, &to, arguments, progress)?;
                if let Value::Object(map) = &mut out.structured {
                    map.insert("fallback_from".into(), json!(name));
                }
                out.text = format!("{name} is not a tool; {to} answered instead. {}", out.text);
                Ok(out)
            }
            _ => Err(ServiceError::NotFound {
                resource: "tool",
                id: name.to_owned(),
            }),
        }
    }

    /// Whether `name` is a tool this service can call: built in, registered, or sent to a
    /// fallback.
    pub fn has_tool(&self, name: &str) -> bool {
        def(name).is_some()
            || self.registry().get(name).is_some()
            || self.registry().fallback(name).is_some()
    }

    /// Calls a tool from async code: on the caller's own task when the call waits on nothing
    /// but memory and the ledger's append, on a blocking thread otherwise.
    pub async fn call_tool_async(
        &self,
        caller: Caller,
        name: String,
        arguments: Value,
    ) -> Result<ToolOutput, ServiceError> {
        self.call_tool_async_with_progress(caller, name, arguments, Box::new(|_| {}))
            .await
    }

    /// [`Service::call_tool_async`], telling `progress` how a long call is getting on.
    pub async fn call_tool_async_with_progress(
        &self,
        caller: Caller,
        name: String,
        arguments: Value,
        mut progress: Box<dyn FnMut(ToolProgress) + Send>,
    ) -> Result<ToolOutput, ServiceError> {
        if let Some(def) = self.inline_def(&name, &arguments) {
            if def.spec.read_only {
                return self.call(&caller, &name, &arguments, &mut *progress).await;
            }
            // A write runs to its end on a task of its own, whatever becomes of its caller (a
            // client that hangs up, a request past its time limit): once its append is on its
            // way, the fold that follows it must happen, or the read models would lag the
            // ledger until the next write.
            let service = self.clone();
            return tokio::spawn(async move {
                service
                    .call(&caller, &name, &arguments, &mut *progress)
                    .await
            })
            .await
            .map_err(|e| ServiceError::unavailable(format!("the call stopped: {e}")))?;
        }
        let service = self.clone();
        tokio::task::spawn_blocking(move || {
            service.call_tool_with_progress(&caller, &name, &arguments, &mut *progress)
        })
        .await
        .map_err(|e| ServiceError::unavailable(format!("the call stopped: {e}")))?
    }

    /// Whether the call can run on an async task's own thread: a tool that waits on nothing
    /// but its task's state, which is in memory, and (when it writes) on the ledger's append,
    /// on a ledger this node alone writes. Handing such a call to a blocking thread and back
    /// would cost more than its own work (two wake-ups and a thread switch each way, and a
    /// thread held while its group commit is made). Anything else that may touch a disk or a
    /// database goes to a blocking thread.
    pub fn runs_inline(&self, name: &str, arguments: &Value) -> bool {
        self.inline_def(name, arguments).is_some()
    }

    /// The tool's entry when the call runs inline ([`Service::runs_inline`]).
    fn inline_def(&self, name: &str, arguments: &Value) -> Option<&'static ToolDef> {
        let def = def(name).filter(|d| d.inline)?;
        let task = arguments.get("task_id").and_then(Value::as_str)?;
        let inline = match def.spec.read_only {
            true => self.inner.projector.holds_state(task),
            false => self.writes_without_blocking(task),
        };
        inline.then_some(def)
    }
}
