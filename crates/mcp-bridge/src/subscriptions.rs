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
use service::Service;

use crate::bridge::Bridge;
use crate::error::resource_not_found;
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
            .await;
        }));
    }
    Ok(())
}

/// Follows the ledger from its head on, calling `notify` with the task of every new event,
/// until `notify` fails (the client is gone) or the ledger stops.
async fn follow<F, Fut>(service: &Service, mut notify: F)
where
    F: FnMut(&str) -> Fut,
    Fut: std::future::Future<Output = Result<(), ()>>,
{
    let mut updates = service.updates(service.ledger().head().size);
    loop {
        let update = match updates.next().await {
            Ok(update) => update,
            Err(e) => {
                tracing::warn!(error = %e, "resource subscriptions stop: the ledger's updates failed");
                return;
            }
        };
        if notify(&update.task_id).await.is_err() {
            return;
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
        () = following => {}
        () = tool_changes => {}
        () = context.cancelled() => {}
    }
    Ok(())
}
