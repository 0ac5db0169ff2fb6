//! Resource subscriptions: `notifications/resources/updated` on every append to a subscribed
//! task, fed by the service's stream of updates.
//!
//! Both eras are served. In 2025-11-25 a connection subscribes with `resources/subscribe` and
//! one listener per connection follows the ledger while anything is subscribed. From
//! 2026-07-28 a client opens a `subscriptions/listen` request naming the URIs; that request is
//! the listener, and it ends when the client cancels it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use service::{Service, ServiceError};

use crate::bridge::Bridge;
use crate::error::{internal, resource_not_found};
use crate::resources::{ResourceUri, changed_by_append};

/// What one connection set up: its legacy subscriptions and its log level.
#[derive(Default)]
pub(crate) struct Session {
    uris: Arc<Mutex<BTreeSet<String>>>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(crate) log_level: crate::logging::LevelSetting,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The connection is gone: so is its listener.
        if let Some(listener) = self
            .listener
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            listener.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Session {
    pub(crate) fn unsubscribe(&self, uri: &str) {
        lock(&self.uris).remove(uri);
    }
}

/// The URIs a subscription can be about: this server's, and ones that change.
fn subscribable(uri: &str) -> bool {
    ResourceUri::parse(uri).is_some_and(|u| u.changes_with_appends())
}

/// `resources/subscribe` (2025-11-25).
pub(crate) fn subscribe(
    bridge: &Bridge,
    uri: &str,
    peer: Peer<RoleServer>,
) -> Result<(), McpError> {
    if !subscribable(uri) {
        return Err(resource_not_found(
            uri,
            "subscriptions are to ledger://tasks and a task's state (at head), events or conclusion",
        ));
    }
    let session = &bridge.session;
    {
        let mut uris = lock(&session.uris);
        if !uris.contains(uri) && uris.len() >= bridge.options().subscriptions_max {
            return Err(McpError::invalid_params(
                format!(
                    "subscriptions_max is {}: unsubscribe from something first",
                    bridge.options().subscriptions_max
                ),
                None,
            ));
        }
        uris.insert(uri.to_owned());
    }
    let mut listener = lock(&session.listener);
    if listener.as_ref().is_none_or(|l| l.is_finished()) {
        let service = bridge.service().clone();
        let uris = Arc::clone(&session.uris);
        *listener = Some(tokio::spawn(async move {
            follow(&service, |task_id| {
                let subscribed: Vec<String> = {
                    let uris = lock(&uris);
                    changed_by_append(task_id)
                        .into_iter()
                        .filter(|u| uris.contains(u))
                        .collect()
                };
                let peer = peer.clone();
                async move {
                    for uri in subscribed {
                        peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                            .await
                            .map_err(|_| ())?;
                    }
                    Ok(())
                }
            })
            .await
            // A 2025-11-25 connection has no request to end with the failure, logged by
            // `follow`; its next `resources/subscribe` starts a listener again.
            .ok();
        }));
    }
    Ok(())
}

/// Follows the ledger from its head on, calling `notify` with the task of every new event,
/// until `notify` fails (the client is gone: `Ok`) or no further update can be delivered in
/// order (the read models stopped, or the ledger cannot be read: that error). Updates wait
/// through a database that fails for a while; they do not end for it.
async fn follow<F, Fut>(service: &Service, mut notify: F) -> Result<(), ServiceError>
where
    F: FnMut(&str) -> Fut,
    Fut: std::future::Future<Output = Result<(), ()>>,
{
    let mut updates = service.updates(service.ledger().head().size);
    loop {
        let update = updates.next().await.inspect_err(|e| {
            tracing::warn!(error = %e, "resource subscriptions stop: the ledger's updates failed");
        })?;
        if notify(&update.task_id).await.is_err() {
            return Ok(());
        }
    }
}

/// What a `subscriptions/listen` request gets: the resource URIs of this server that change,
/// up to the bound.
pub(crate) fn accepted(bridge: &Bridge, requested: &SubscriptionFilter) -> SubscriptionFilter {
    let uris: Vec<String> = requested
        .resource_subscriptions
        .iter()
        .flatten()
        .filter(|u| subscribable(u))
        .take(bridge.options().subscriptions_max)
        .cloned()
        .collect();
    let builder = SubscriptionFilter::builder().resource_subscriptions(uris);
    // The tool list changes when a contract is registered, removed or edited.
    if requested.tools_list_changed == Some(true) {
        builder.tools_list_changed().build()
    } else {
        builder.build()
    }
}

/// `subscriptions/listen` (2026-07-28): notifies until the client cancels the request.
pub(crate) async fn listen(bridge: &Bridge, context: SubscriptionContext) -> Result<(), McpError> {
    let accepted = context.accepted();
    let uris: BTreeSet<String> = accepted
        .resource_subscriptions
        .iter()
        .flatten()
        .cloned()
        .collect();
    let tools = accepted.tools_list_changed == Some(true);
    let sink = context.sink().clone();
    let service = bridge.service().clone();
    let tool_changes = {
        let sink = sink.clone();
        let mut changed = service.tools_changed();
        async move {
            if !tools {
                return std::future::pending::<()>().await;
            }
            while changed.changed().await.is_ok() {
                if sink.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
            // The service is gone: nothing more will change.
            std::future::pending::<()>().await
        }
    };
    if uris.is_empty() {
        tokio::select! {
            () = tool_changes => {}
            () = context.cancelled() => {}
        }
        return Ok(());
    }
    let following = follow(&service, |task_id| {
        let subscribed: Vec<String> = changed_by_append(task_id)
            .into_iter()
            .filter(|u| uris.contains(u))
            .collect();
        let sink = sink.clone();
        async move {
            for uri in subscribed {
                sink.notify_resource_updated(uri).await.map_err(|_| ())?;
            }
            Ok(())
        }
    });
    tokio::select! {
        // Nothing more can be told in order: the request ends with why, not as if done.
        followed = following => followed.map_err(|e| internal(&e))?,
        () = tool_changes => {}
        () = context.cancelled() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ledger::{AppendRequest, ExpectedVersion, NewEvent};
    use serde_json::json;
    use service::{Caller, ServiceOptions};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn following_ends_with_the_reason_when_the_read_models_stop() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = ServiceOptions::new(dir.path());
        options.ledger.checkpoint_interval = None;
        let service = Service::open(options).unwrap();
        let opened = service
            .call_tool(
                &Caller::new("alice"),
                "research_open_task",
                &json!({"question": "Q?", "research_date": "2025-06-30"}),
            )
            .unwrap();
        let task = opened.structured["task_id"].as_str().unwrap().to_owned();
        let mut told = 0;
        let following = follow(&service, |_| {
            told += 1;
            async { Ok(()) }
        });
        let stalling = async {
            // An event of a known kind that does not decode: the read models stop before it.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let ledger = service.ledger().clone();
            let task = task.clone();
            tokio::task::spawn_blocking(move || {
                ledger
                    .append(AppendRequest {
                        stream: task,
                        expected: ExpectedVersion::Any,
                        actor: "newer-build".into(),
                        events: vec![NewEvent {
                            kind: "evidence_weighed".into(),
                            payload: vec![1, 0, 7],
                            causation: vec![],
                        }],
                        idempotency: None,
                        content: Vec::new(),
                    })
                    .unwrap();
            })
            .await
            .unwrap();
            let projector = service.projector().clone();
            let folded = tokio::task::spawn_blocking(move || projector.catch_up())
                .await
                .unwrap();
            assert!(folded.is_err(), "{folded:?}");
            std::future::pending::<()>().await
        };
        let followed = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::select! {
                followed = following => followed,
                () = stalling => unreachable!(),
            }
        })
        .await
        .expect("following ends once the read models stop");
        let error = followed.expect_err("it ends with why");
        assert!(error.to_string().contains("read models stopped"), "{error}");
        assert_eq!(told, 0);
    }
}
