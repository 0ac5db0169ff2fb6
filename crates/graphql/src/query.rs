//! Queries: the task index, one task, the ledger, its verification, proofs and single events.
//! Nothing here writes.

use async_graphql::{Context, ID, Json, Object};
use serde_json::{Value, json};
use service::ServiceError;
use service::ledger::Digest;
use service::projections::TaskQuery;

use crate::context;
use crate::enums::{TaskStatus, Verdict};
use crate::error::{blocking, from_proof, from_read, invalid, to_gql, unsigned};
use crate::ledger::{ConsistencyProof, InclusionProof, LedgerEvent, LedgerInfo, Verification};
use crate::limits::{STORAGE_READ_POINTS, page_complexity, page_size};
use crate::task::{Task, TaskConnection};

/// The root of every query.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query;

/// The root of every query.
#[Object]
impl Query {
    /// Research tasks in the order they were opened, a page at a time; filtered by status, by
    /// the stance of the current conclusion, and by text in the question or constraints
    /// (ignoring case and runs of whitespace; Chinese matches as written).
    #[graphql(complexity = "page_complexity(first, child_complexity)")]
    async fn tasks(
        &self,
        ctx: &Context<'_>,
        status: Option<TaskStatus>,
        stance: Option<Verdict>,
        text: Option<String>,
        first: Option<i32>,
        after: Option<String>,
    ) -> async_graphql::Result<TaskConnection> {
        let limit = page_size(first, context::limits(ctx)?)?;
        let service = context::service(ctx)?;
        let query = TaskQuery {
            status: status.map(Into::into),
            stance: stance.map(Into::into),
            text,
            after: after.clone(),
            limit: Some(limit),
        };
        let page = service
            .projector()
            .tasks(&query)
            .map_err(|e| to_gql(e.into()))?;
        let mut listings = Vec::with_capacity(page.tasks.len());
        for listing in page.tasks {
            let state = service.state(&listing.task_id).map_err(to_gql)?;
            listings.push((listing, state));
        }
        Ok(TaskConnection::new(
            listings,
            page.next_cursor,
            after.is_some(),
        ))
    }

    /// One task at its head; `state(atVersion)` reads it as it stood earlier.
    async fn task(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Option<Task>> {
        let state = context::service(ctx)?.state(&id).map_err(to_gql)?;
        Ok(Some(Task::at_head(id.0, state)))
    }

    /// A pipeline job started by `runPipeline`, as `research_job_status` reports it: its status,
    /// the step it is at, the steps done and the pending actions when it waits for judgement.
    async fn job(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Json<Value>> {
        let service = context::service(ctx)?;
        let output = service
            .call_tool(
                &context::caller(ctx)?,
                service::research::Tool::ResearchJobStatus.name(),
                &json!({ "job_id": id.0 }),
            )
            .map_err(to_gql)?;
        Ok(Json(output.structured))
    }

    /// The ledger: its size, root, checkpoints and signing key.
    async fn ledger(&self) -> LedgerInfo {
        LedgerInfo
    }

    /// Verifies what was appended and checkpointed since the last verification (the chain, the
    /// tree against every signed checkpoint, every signature) and reports on the whole ledger.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn verify(&self, ctx: &Context<'_>) -> async_graphql::Result<Verification> {
        let service = context::service(ctx)?.clone();
        let report = blocking(move || Ok(service.ledger().verify())).await?;
        Ok(Verification::from(&report))
    }

    /// A proof that the event at `seq` is in the tree of a signed checkpoint: the one of
    /// `treeSize`, or the latest.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn inclusion_proof(
        &self,
        ctx: &Context<'_>,
        seq: i64,
        tree_size: Option<i64>,
    ) -> async_graphql::Result<InclusionProof> {
        let seq = unsigned("seq", seq)?;
        let tree_size = tree_size.map(|t| unsigned("treeSize", t)).transpose()?;
        let service = context::service(ctx)?.clone();
        let proof = blocking(move || {
            service
                .ledger()
                .inclusion_proof(seq, tree_size)
                .map_err(from_proof)
        })
        .await?;
        Ok(InclusionProof::from(proof))
    }

    /// A proof that the tree of the checkpoint of size `to` extends that of size `from`.
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn consistency_proof(
        &self,
        ctx: &Context<'_>,
        from: i64,
        to: i64,
    ) -> async_graphql::Result<ConsistencyProof> {
        let (from, to) = (unsigned("from", from)?, unsigned("to", to)?);
        let service = context::service(ctx)?.clone();
        let proof = blocking(move || {
            service
                .ledger()
                .consistency_proof(from, to)
                .map_err(from_proof)
        })
        .await?;
        Ok(ConsistencyProof::from(proof))
    }

    /// One event, by its seq or by its hash (give exactly one).
    #[graphql(complexity = "STORAGE_READ_POINTS + child_complexity")]
    async fn event(
        &self,
        ctx: &Context<'_>,
        seq: Option<i64>,
        hash: Option<String>,
    ) -> async_graphql::Result<Option<LedgerEvent>> {
        let seq = seq.map(|s| unsigned("seq", s)).transpose()?;
        let service = context::service(ctx)?.clone();
        let found = match (seq, hash) {
            (Some(seq), None) => {
                blocking(move || service.ledger().get(seq).map_err(from_read)).await?
            }
            (None, Some(hash)) => {
                let digest: Digest = hash
                    .parse()
                    .map_err(|e| invalid("hash", format!("not an event hash: {e}")))?;
                blocking(move || service.ledger().find_hash(&digest).map_err(from_read)).await?
            }
            _ => return Err(invalid("seq", "give exactly one of seq and hash")),
        };
        match found {
            Some(event) => Ok(Some(LedgerEvent::of_recorded(&event))),
            None => Err(to_gql(ServiceError::NotFound {
                resource: "event",
                id: match seq {
                    Some(seq) => format!("at seq {seq}"),
                    None => "with that hash".to_owned(),
                },
            })),
        }
    }
}
