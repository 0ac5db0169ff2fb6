//! Log messages to the client (`notifications/message`): what each tool call did to the
//! ledger, at the level the client asked for.
//!
//! MCP logging is deprecated from 2026-07-28 (SEP-2577) but 2025-11-25 clients still set a
//! level with `logging/setLevel`, so the bridge keeps serving it: a connection that set a level
//! (or, from 2026-07-28, a request that carries `io.modelcontextprotocol/logLevel` in its
//! `_meta`) gets one message per tool call — `debug` for a read, `info` for a write,
//! `warning` for a refusal. A client that asked for nothing gets nothing.
#![allow(deprecated)]

use std::sync::Mutex;

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use service::{ServiceError, ToolOutput};

/// The level a connection set with `logging/setLevel`.
#[derive(Debug, Default)]
pub(crate) struct LevelSetting(Mutex<Option<LoggingLevel>>);

impl LevelSetting {
    pub(crate) fn set(&self, level: LoggingLevel) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    fn get(&self) -> Option<LoggingLevel> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Sends the message about one tool call, when the client asked for messages at that level.
pub(crate) async fn tool_called(
    setting: &LevelSetting,
    context: &RequestContext<RoleServer>,
    tool: &str,
    read_only: bool,
    outcome: &Result<ToolOutput, ServiceError>,
) {
    let Some(wanted) = context.meta.log_level().or_else(|| setting.get()) else {
        return;
    };
    let (level, data): (LoggingLevel, Value) = match outcome {
        Ok(out) if read_only => (
            LoggingLevel::Debug,
            json!({"tool": tool, "task_id": out.structured.get("task_id")}),
        ),
        Ok(out) => (
            LoggingLevel::Info,
            json!({
                "tool": tool,
                "task_id": out.structured.get("task_id"),
                "session_version": out.structured.get("session_version"),
                "replayed": out.structured.get("replayed"),
            }),
        ),
        Err(e) => (
            LoggingLevel::Warning,
            json!({"tool": tool, "error": e.to_json()}),
        ),
    };
    if rank(level) < rank(wanted) {
        return;
    }
    send(&context.peer, level, data).await;
}

async fn send(peer: &Peer<RoleServer>, level: LoggingLevel, data: Value) {
    let param = LoggingMessageNotificationParam::new(level, data).with_logger("research-ledger");
    // A client that stopped listening loses a log line, nothing more.
    let _ = peer.notify_logging_message(param).await;
}
