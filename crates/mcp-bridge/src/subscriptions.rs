//! Resource subscriptions: `notifications/resources/updated` on every append to a subscribed
//! task, fed by the service's stream of updates.
//!
//! Both eras are served. In 2025-11-25 a connection subscribes with `resources/subscribe` and
//! one listener per connection follows the ledger while anything is subscribed. From
//! 2026-07-28 a client opens a `subscriptions/listen` request naming the URIs; that request is
//! the listener, and it ends when the client cancels it.
//!
//! A subscriber is told of every append after its subscription was answered. So where it
//! starts following is the ledger's head taken *before* the answer goes out — in
//! `resources/subscribe` before it returns, in `subscriptions/listen` when the filter is
//! accepted (the SDK sends the acknowledgment between that and [`listen`]) — never when the
//! listener first runs, by which time the client may have appended and been left untold.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use service::ServiceError;

use crate::bridge::{Bridge, Shared};
use crate::error::{internal, resource_not_found};
use crate::resources::{ResourceUri, changed_by_append};

/// What one connection set up: its legacy subscriptions, the `subscriptions/listen` requests
/// acknowledged and not yet listening, and its log level.
#[derive(Default)]
pub(crate) struct Session {
    uris: Arc<Mutex<BTreeSet<String>>>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
    acknowledging: Mutex<Acknowledging>,
    pub(crate) log_level: crate::logging::LevelSetting,
}

/// The `subscriptions/listen` requests of one connection between the acceptance of their
/// filter and the start of their listener, and the lowest head taken for any of them.
///
/// The SDK hands `listen` no token tying it to its acceptance, and requests on one connection
/// run concurrently, so each listener starts from `from`, the lowest head of those pending:
/// never later than its own (heads only grow, and `from` is reset only when none is pending),
/// at worst a little earlier — a resource told of as updated once more than needed, never an
/// update left untold.
#[derive(Default)]
struct Acknowledging {
    from: u64,
    pending: usize,
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
        let max = bridge.options().subscriptions_max;
        if !uris.contains(uri) && uris.len() >= max {
            // Named as the operator's setting that raises it, as every refusal of a limit is.
            let refused = ServiceError::LimitExceeded {
                limit: "subscriptions_per_client_max".into(),
                max: max as u64,
                actual: uris.len() as u64 + 1,
            };
            return Err(McpError::invalid_params(
                format!("{refused}: unsubscribe from something first"),
                Some(refused.to_json()),
            ));
        }
        uris.insert(uri.to_owned());
    }
    let mut listener = lock(&session.listener);
    if listener.as_ref().is_none_or(|l| l.is_finished()) {
        // The listener holds what every connection shares, not this connection's session:
        // the session's end ends it.
        let shared = Arc::clone(&bridge.shared);
        // Taken before the answer to this request goes out, not when the listener first runs.
        let from = shared.service.ledger().head().size;
        let uris = Arc::clone(&session.uris);
        *listener = Some(tokio::spawn(async move {
            follow(&shared, from, |task_id| {
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

/// Follows the ledger from seq `from` on, calling `notify` with the task of every event,
/// until `notify` fails (the client is gone: `Ok`) or no further update can be delivered in
/// order (the read models stopped, or the ledger cannot be read: that error). Updates wait
/// through a database that fails for a while; they do not end for it.
async fn follow<F, Fut>(shared: &Shared, from: u64, mut notify: F) -> Result<(), ServiceError>
where
    F: FnMut(&str) -> Fut,
    Fut: std::future::Future<Output = Result<(), ()>>,
{
    #[cfg(test)]
    drop(shared.gap.read().await);
    let mut updates = shared.service.updates(from);
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
/// up to the bound. The SDK acknowledges the request with it, then calls [`listen`]; the head
/// it will follow from is taken here, before the acknowledgment.
pub(crate) fn accepted(bridge: &Bridge, requested: &SubscriptionFilter) -> SubscriptionFilter {
    {
        let mut acknowledging = lock(&bridge.session.acknowledging);
        if acknowledging.pending == 0 {
            acknowledging.from = bridge.service().ledger().head().size;
        }
        acknowledging.pending += 1;
    }
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
    #[cfg(test)]
    drop(bridge.shared.gap.read().await);
    let from = {
        let mut acknowledging = lock(&bridge.session.acknowledging);
        if acknowledging.pending == 0 {
            // Not accepted through `accepted` (the SDK always does): nothing was promised
            // before now.
            bridge.service().ledger().head().size
        } else {
            acknowledging.pending -= 1;
            acknowledging.from
        }
    };
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
    let following = follow(&bridge.shared, from, |task_id| {
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
    use rmcp::model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
        ServerNotification, SubscribeRequestParams,
    };
    use rmcp::service::{
        ClientLifecycleMode, ClientServiceExt, NotificationContext, RoleClient, RunningService,
    };
    use rmcp::{ClientHandler, ServiceExt};
    use serde_json::{Value, json};
    use service::{Caller, Service, ServiceOptions};
    use tokio::sync::mpsc;

    use super::*;
    use crate::BridgeOptions;

    fn service(dir: &std::path::Path) -> Service {
        let mut options = ServiceOptions::new(dir);
        options.ledger.checkpoint_interval = None;
        Service::open(options).unwrap()
    }

    async fn call(peer: &Peer<RoleClient>, name: &str, args: Value) -> Value {
        let Value::Object(args) = args else {
            panic!("arguments are an object")
        };
        let result = peer
            .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{name}: {result:?}");
        result.structured_content.unwrap()
    }

    /// The `n`th item of evidence for `task`; items differ in their content.
    fn evidence(task: &str, n: u32) -> Value {
        json!({"task_id": task, "source": "tide-office.example.org", "source_type": "government",
               "publish_date": "2025-06-30", "stance": "supports",
               "content": format!("Tide gauges record a rise of 3.3 mm a year since 1993 (series {n}).")})
    }

    /// A 2025-11-25 client that passes on every `notifications/resources/updated`.
    struct Told(mpsc::UnboundedSender<String>);

    impl ClientHandler for Told {
        async fn on_resource_updated(
            &self,
            params: ResourceUpdatedNotificationParam,
            _context: NotificationContext<RoleClient>,
        ) {
            let _ = self.0.send(params.uri);
        }
    }

    /// `bridge` served on an in-memory pipe for as long as the client holds the end returned.
    fn served(bridge: Bridge) -> tokio::io::DuplexStream {
        let (client_end, server_end) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            let running = bridge.serve(server_end).await.unwrap();
            let _ = running.waiting().await;
        });
        client_end
    }

    /// The next notification of `listening`: an update of `uri`, within ten seconds.
    async fn told_update(listening: &mut rmcp::service::Subscription, uri: &str, why: &str) {
        let told = tokio::time::timeout(Duration::from_secs(10), listening.next())
            .await
            .expect(why)
            .unwrap();
        match told {
            Some(ServerNotification::ResourceUpdatedNotification(n)) => {
                assert_eq!(n.params.uri, uri)
            }
            other => panic!("told {other:?}"),
        }
    }

    /// A 2026-07-28 client of `bridge` over an in-memory pipe, and the summary URI of a task it
    /// opened.
    async fn listening_client(
        bridge: &Bridge,
    ) -> (RunningService<RoleClient, ClientConfig>, String, String) {
        let client_end = served(bridge.clone());
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("listening-client", "1.0"),
        )
        .serve_with_lifecycle(
            client_end,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
        let opened = call(
            client.peer(),
            "research_open_task",
            json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01"}),
        )
        .await;
        let task = opened["task_id"].as_str().unwrap().to_owned();
        let summary = format!("ledger://tasks/{task}/summary");
        (client, task, summary)
    }

    /// An append made after a `subscriptions/listen` request was acknowledged, while the
    /// listener has not yet started following the ledger, is told.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_right_after_the_acknowledgment_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let bridge = Bridge::new(service(dir.path()), BridgeOptions::default());
        let (client, task, summary) = listening_client(&bridge).await;

        let gap = bridge.shared.gap.write().await;
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions(vec![summary.clone()])
            .build();
        let mut listening = client.listen(filter).await.unwrap();
        call(client.peer(), "retrieval_add_evidence", evidence(&task, 1)).await;
        drop(gap);

        told_update(
            &mut listening,
            &summary,
            "told of the append made before the listener started",
        )
        .await;
    }

    /// Two `subscriptions/listen` requests on one connection, both acknowledged before either
    /// starts, with an append between the two acknowledgments: each is told of every append
    /// after its own acknowledgment — the first is not handed the second's later start.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn listens_acknowledged_together_each_follow_from_their_own_acknowledgment() {
        let dir = tempfile::tempdir().unwrap();
        let bridge = Bridge::new(service(dir.path()), BridgeOptions::default());
        let (client, task, summary) = listening_client(&bridge).await;
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions(vec![summary.clone()])
            .build();
        let head = || bridge.service().ledger().head().size;

        let gap = bridge.shared.gap.write().await;
        let mut first = client.listen(filter.clone()).await.unwrap();
        let first_from = head();
        call(client.peer(), "retrieval_add_evidence", evidence(&task, 2)).await;
        let mut second = client.listen(filter).await.unwrap();
        let second_from = head();
        call(client.peer(), "retrieval_add_evidence", evidence(&task, 3)).await;
        drop(gap);
        let end = head();
        assert!(first_from < second_from && second_from < end);

        // Every event is the task's: each one appended after an acknowledgment is one update.
        for (listening, from) in [(&mut first, first_from), (&mut second, second_from)] {
            for _ in from..end {
                told_update(
                    listening,
                    &summary,
                    "told of every append after the acknowledgment",
                )
                .await;
            }
        }
    }

    /// Past the bound, a 2025-11-25 subscription is refused naming the setting that raises it,
    /// and a 2026-07-28 listen request is acknowledged with the URIs within it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn subscriptions_past_the_bound_are_refused_or_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let options = BridgeOptions {
            subscriptions_max: 2,
            ..BridgeOptions::default()
        };
        let bridge = Bridge::new(service(dir.path()), options);
        let (client, task, summary) = listening_client(&bridge).await;
        let uris = vec![
            summary.clone(),
            format!("ledger://tasks/{task}/state"),
            format!("ledger://tasks/{task}/events"),
        ];
        let listening = client
            .listen(
                SubscriptionFilter::builder()
                    .resource_subscriptions(uris.clone())
                    .build(),
            )
            .await
            .unwrap();
        assert_eq!(
            listening.acknowledged().resource_subscriptions.as_deref(),
            Some(&uris[..2])
        );

        let client_end = served(bridge.for_new_session());
        let (sender, _told) = mpsc::unbounded_channel();
        let legacy = Told(sender).serve(client_end).await.unwrap();
        #[allow(deprecated)]
        for uri in &uris[..2] {
            legacy
                .subscribe(SubscribeRequestParams::new(uri.clone()))
                .await
                .unwrap();
        }
        // One already held is no more.
        #[allow(deprecated)]
        legacy
            .subscribe(SubscribeRequestParams::new(uris[0].clone()))
            .await
            .unwrap();
        #[allow(deprecated)]
        let refused = legacy
            .subscribe(SubscribeRequestParams::new(uris[2].clone()))
            .await
            .unwrap_err();
        let rmcp::ServiceError::McpError(data) = &refused else {
            panic!("not a JSON-RPC error: {refused:?}");
        };
        assert_eq!(data.code.0, -32602, "{data:?}");
        let detail = data.data.as_ref().unwrap();
        assert_eq!(detail["error"], "limit_exceeded", "{data:?}");
        assert_eq!(detail["limit"], "subscriptions_per_client_max", "{data:?}");
        assert_eq!(detail["max"], 2, "{data:?}");
    }

    /// The same in 2025-11-25: an append made after `resources/subscribe` was answered, while
    /// the connection's listener has not yet started, is told.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_right_after_a_legacy_subscription_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let bridge = Bridge::new(service(dir.path()), BridgeOptions::default());
        let client_end = served(bridge.clone());
        let (sender, mut told) = mpsc::unbounded_channel();
        let client = Told(sender).serve(client_end).await.unwrap();
        let opened = call(
            client.peer(),
            "research_open_task",
            json!({"question": "Is the global sea level rising?", "research_date": "2026-03-01"}),
        )
        .await;
        let task = opened["task_id"].as_str().unwrap().to_owned();
        let summary = format!("ledger://tasks/{task}/summary");

        let gap = bridge.shared.gap.write().await;
        #[allow(deprecated)]
        client
            .subscribe(SubscribeRequestParams::new(summary.clone()))
            .await
            .unwrap();
        call(client.peer(), "retrieval_add_evidence", evidence(&task, 4)).await;
        drop(gap);

        let uri = tokio::time::timeout(Duration::from_secs(10), told.recv())
            .await
            .expect("told of the append made before the listener started");
        assert_eq!(uri.as_deref(), Some(summary.as_str()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn following_ends_with_the_reason_when_the_read_models_stop() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = ServiceOptions::new(dir.path());
        options.ledger.checkpoint_interval = None;
        let service = Service::open(options).unwrap();
        let bridge = Bridge::new(service.clone(), BridgeOptions::default());
        let opened = service
            .call_tool(
                &Caller::new("alice"),
                "research_open_task",
                &json!({"question": "Q?", "research_date": "2025-06-30"}),
            )
            .unwrap();
        let task = opened.structured["task_id"].as_str().unwrap().to_owned();
        let mut told = 0;
        let following = follow(&bridge.shared, service.ledger().head().size, |_| {
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
