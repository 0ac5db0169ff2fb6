//! Subscriptions over WebSocket: every event as it is appended, and every conclusion as it is
//! issued, for one task or all.
//!
//! Both follow [`Service::updates`], which delivers every event in order, each once the read
//! models have folded it, and reads what a slow subscriber missed from storage, so a dashboard
//! never skips one and never hears of an event before it can read its effect. A subscription starts at the
//! ledger's head unless it names `fromSeq` (to resume after a reconnection, say).

use async_graphql::futures_util::Stream;
use async_graphql::futures_util::stream;
use async_graphql::{Context, ID, Object, Subscription};
use chrono::{DateTime, Utc};
use service::{Service, ServiceError, Update, Updates};

use crate::context;
use crate::error::{blocking, from_read, to_gql};
use crate::ledger::LedgerEvent;
use crate::limits::{STORAGE_READ_POINTS, SubscriptionSlots};
use crate::views::Conclusion;

/// An event just appended.
#[derive(Debug, Clone)]
pub(crate) struct EventNotice {
    update: Update,
}

/// An event just appended; `event` reads it whole.
#[Object]
impl EventNotice {
    /// Its position in the ledger.
    async fn seq(&self) -> u64 {
        self.update.seq
    }

    /// The task it belongs to.
    async fn task_id(&self) -> ID {
        ID(self.update.task_id.clone())
    }

    /// The task's version after it: the new session version.
    async fn session_version(&self) -> u64 {
        self.update.session_version
    }

    /// What happened, e.g. `evidence_added`.
    async fn kind(&self) -> &str {
        &self.update.kind
    }

    /// Who caused it.
    async fn actor(&self) -> &str {
        &self.update.actor
    }

    /// When the ledger recorded it.
    async fn recorded_at(&self) -> DateTime<Utc> {
        self.update.recorded_at
    }

    /// Its hash (hex).
    async fn hash(&self) -> String {
        self.update.hash.to_string()
    }

    /// The whole event, its decoded payload included.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn event(&self, ctx: &Context<'_>) -> async_graphql::Result<LedgerEvent> {
        let service = context::service(ctx)?.clone();
        let seq = self.update.seq;
        let event = blocking(move || {
            service
                .ledger()
                .get(seq)
                .map_err(from_read)?
                .ok_or_else(|| {
                    ServiceError::Unavailable(format!(
                        "event {seq} was announced but cannot be read"
                    ))
                })
        })
        .await?;
        Ok(LedgerEvent::of_recorded(&event))
    }
}

/// A conclusion just issued, as it stood then.
#[derive(async_graphql::SimpleObject, Debug, Clone)]
pub(crate) struct ConclusionNotice {
    /// The task.
    task_id: ID,
    /// The task's version after the conclusion.
    session_version: u64,
    /// The conclusion.
    conclusion: Conclusion,
}

/// The updates from `from_seq`, or from the head, for one task or all, ending after an error.
fn updates_of(
    service: &Service,
    task_id: Option<ID>,
    from_seq: Option<u64>,
    kind: Option<&'static str>,
) -> impl Stream<Item = Result<Update, ServiceError>> + use<> {
    let start = from_seq.unwrap_or_else(|| service.ledger().head().size);
    let updates: Option<Updates> = Some(service.updates(start));
    stream::unfold(updates, move |updates| {
        let task_id = task_id.clone();
        async move {
            let mut updates = updates?;
            loop {
                match updates.next().await {
                    Ok(update) => {
                        let wanted = task_id.as_ref().is_none_or(|t| t.0 == update.task_id)
                            && kind.is_none_or(|k| k == update.kind);
                        if wanted {
                            return Some((Ok(update), Some(updates)));
                        }
                    }
                    // Nothing more can be delivered in order after a failed read: say so, stop.
                    Err(e) => return Some((Err(e), None)),
                }
            }
        }
    })
}

/// A slot of the connection's subscription limit (none outside a WebSocket).
fn subscription_slot(
    ctx: &Context<'_>,
) -> async_graphql::Result<Option<tokio::sync::OwnedSemaphorePermit>> {
    ctx.data_opt::<SubscriptionSlots>()
        .map(SubscriptionSlots::take)
        .transpose()
}

/// The root of every subscription.
#[derive(Debug, Clone, Copy, Default)]
pub struct Subscription;

/// The root of every subscription.
#[Subscription]
impl Subscription {
    /// Every event as it is appended, in ledger order: of one task, or of all when no task is
    /// named.
    async fn events(
        &self,
        ctx: &Context<'_>,
        task_id: Option<ID>,
        from_seq: Option<u64>,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<EventNotice>> + use<>> {
        let slot = subscription_slot(ctx)?;
        let service = context::service(ctx)?;
        let updates = updates_of(service, task_id, from_seq, None);
        Ok(async_graphql::futures_util::StreamExt::map(
            updates,
            move |update| {
                // Held for as long as the stream lives.
                let _slot = &slot;
                match update {
                    Ok(update) => Ok(EventNotice { update }),
                    Err(e) => Err(to_gql(e)),
                }
            },
        ))
    }

    /// Every conclusion as it is issued: of one task, or of all when no task is named.
    async fn conclusions(
        &self,
        ctx: &Context<'_>,
        task_id: Option<ID>,
        from_seq: Option<u64>,
    ) -> async_graphql::Result<impl Stream<Item = async_graphql::Result<ConclusionNotice>> + use<>>
    {
        let slot = subscription_slot(ctx)?;
        let service = context::service(ctx)?.clone();
        let updates = updates_of(&service, task_id, from_seq, Some("conclusion_issued"));
        Ok(async_graphql::futures_util::StreamExt::then(
            updates,
            move |update| {
                // Held for as long as the stream lives.
                let _slot = &slot;
                let service = service.clone();
                async move {
                    let update = update.map_err(to_gql)?;
                    conclusion_notice(service, update).await
                }
            },
        ))
    }
}

/// The conclusion an update announces, from the task as it stood right after it.
async fn conclusion_notice(
    service: Service,
    update: Update,
) -> async_graphql::Result<ConclusionNotice> {
    let task_id = update.task_id.clone();
    let version = update.session_version;
    let seq = update.seq;
    // Updates come once the read models have folded their event: the task is there to read.
    let state = blocking(move || service.state_at(&task_id, Some(version))).await?;
    let conclusion = state
        .current_conclusion()
        .map(|c| Conclusion::of(c, &state))
        .ok_or_else(|| {
            to_gql(ServiceError::Unavailable(format!(
                "event {seq} issued a conclusion the task does not hold"
            )))
        })?;
    Ok(ConclusionNotice {
        task_id: ID(update.task_id),
        session_version: version,
        conclusion,
    })
}
