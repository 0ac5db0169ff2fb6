//! What `research-ledger migrate` reads from and writes to a storage database besides the
//! ledger and the content store: the tokens, the registered tools' contracts and the pipeline
//! jobs, each as the same text a data directory keeps (`tokens.json`, a contract's file, a job
//! file), so a move either way carries them unchanged.

use std::collections::BTreeMap;

use serde_json::Value;
use sources::database::{Database, DatabaseError, db_error, is_undefined_table};

use crate::shared_contracts::{ContractsDocument, DOCUMENT as CONTRACTS};

/// The document that holds the tokens (as `tokens.json` holds them).
const TOKENS: &str = "tokens";

/// What a deployment shares besides the ledger, the content and the corpus.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedParts {
    /// The token file's text, when there are tokens.
    pub tokens: Option<String>,
    /// Each registered tool's contract text, by name.
    pub contracts: BTreeMap<String, String>,
    /// The tag dictionary's text (`contracts/semantic-tags.yaml`), when there is one.
    pub tags: Option<String>,
    /// The fallback map's text (`contracts/fallbacks.yaml`), when there is one.
    pub fallbacks: Option<String>,
    /// Each job file's text (its JSON), by job id.
    pub jobs: BTreeMap<String, String>,
}

/// The tables a non-empty database holds rows in, and what they are.
const HOLDERS: &[(&str, &str, &str)] = &[
    ("ledger_events", "events", ""),
    ("ledger_checkpoints", "checkpoint log entries", ""),
    ("content_blobs", "content blobs", ""),
    (
        "shared_documents",
        "tokens or contracts",
        " WHERE body IS NOT NULL",
    ),
    ("pipeline_jobs", "pipeline jobs", ""),
    ("corpus_documents", "corpus documents", ""),
];

fn open(url: &str) -> Result<Database, DatabaseError> {
    Database::open(url, "research-ledger migrate")
}

/// What the database at `url` holds already, in words (empty when it holds nothing a
/// migration would write).
pub fn database_contents(url: &str) -> Result<Vec<String>, DatabaseError> {
    let db = open(url)?;
    let pool = db.pool();
    db.run(async move {
        let client = pool.shared().await?;
        let mut found = Vec::new();
        for (table, what, filter) in HOLDERS {
            let row = client
                .query_one(
                    &format!("SELECT EXISTS (SELECT 1 FROM {table}{filter})"),
                    &[],
                )
                .await;
            match row {
                Ok(row) if row.get::<_, bool>(0) => found.push(format!("{what} ({table})")),
                Ok(_) => {}
                Err(e) if is_undefined_table(&e) => {}
                Err(e) => return Err(db_error("look at the database", &e)),
            }
        }
        Ok(found)
    })
}

/// The tokens, contracts and jobs the database at `url` holds; it is only read (a database
/// without the tables holds none).
pub fn read_shared_parts(url: &str) -> Result<SharedParts, DatabaseError> {
    let db = open(url)?;
    let pool = db.pool();
    let (documents, jobs) = db.run(async move {
        let client = pool.shared().await?;
        let documents = match client
            .query(
                "SELECT name, body FROM shared_documents WHERE body IS NOT NULL",
                &[],
            )
            .await
        {
            Ok(rows) => rows
                .iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                .collect(),
            Err(e) if is_undefined_table(&e) => BTreeMap::new(),
            Err(e) => return Err(db_error("read the shared documents", &e)),
        };
        let jobs = match client
            .query("SELECT job_id, body FROM pipeline_jobs", &[])
            .await
        {
            Ok(rows) => rows
                .iter()
                .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                .collect(),
            Err(e) if is_undefined_table(&e) => BTreeMap::new(),
            Err(e) => return Err(db_error("read the jobs", &e)),
        };
        Ok((documents, jobs))
    })?;
    let contracts = match documents.get(CONTRACTS) {
        None => ContractsDocument::default(),
        Some(text) => serde_json::from_str::<ContractsDocument>(text)
            .map_err(|e| DatabaseError::new("read the contracts", e.to_string()))?,
    };
    Ok(SharedParts {
        tokens: documents.get(TOKENS).cloned(),
        contracts: contracts.tools,
        tags: contracts.tags,
        fallbacks: contracts.fallbacks,
        jobs,
    })
}

/// The fields of a job file's text that its row is found by.
fn job_columns(text: &str) -> Result<(String, String, String, Option<String>), DatabaseError> {
    let bad =
        |what: &str| DatabaseError::new("read a job file", format!("a job file without {what}"));
    let value: Value = serde_json::from_str(text)
        .map_err(|e| DatabaseError::new("read a job file", e.to_string()))?;
    let field = |v: &Value| v.as_str().map(str::to_owned);
    Ok((
        field(&value["job"]["job_id"]).ok_or_else(|| bad("job_id"))?,
        field(&value["job"]["task_id"]).ok_or_else(|| bad("task_id"))?,
        field(&value["job"]["status"]).ok_or_else(|| bad("status"))?,
        field(&value["idempotency"]["key"]),
    ))
}

/// Writes the tokens, contracts and jobs into the database at `url` (its service tables are
/// created first), in one transaction.
pub fn write_shared_parts(url: &str, parts: &SharedParts) -> Result<(), DatabaseError> {
    let db = crate::shared::open_database(url, "research-ledger migrate")?;
    let mut documents: Vec<(String, String)> = Vec::new();
    if let Some(tokens) = &parts.tokens {
        documents.push((TOKENS.to_owned(), tokens.clone()));
    }
    if !parts.contracts.is_empty() || parts.tags.is_some() || parts.fallbacks.is_some() {
        let body = serde_json::to_string(&ContractsDocument {
            tools: parts.contracts.clone(),
            tags: parts.tags.clone(),
            fallbacks: parts.fallbacks.clone(),
        })
        .map_err(|e| DatabaseError::new("write the contracts", e.to_string()))?;
        documents.push((CONTRACTS.to_owned(), body));
    }
    let mut jobs = Vec::new();
    for text in parts.jobs.values() {
        jobs.push((job_columns(text)?, text.clone()));
    }
    let pool = db.pool();
    db.run(async move {
        let mut client = pool.alone().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error("begin", &e))?;
        for (name, body) in &documents {
            tx.execute(
                "INSERT INTO shared_documents (name, version, body) VALUES ($1, 1, $2)",
                &[name, body],
            )
            .await
            .map_err(|e| db_error("write a shared document", &e))?;
        }
        for ((id, task, status, key), body) in &jobs {
            tx.execute(
                "INSERT INTO pipeline_jobs (job_id, task_id, status, idempotency_key, updated_at, body) \
                 VALUES ($1, $2, $3, $4, now(), $5)",
                &[id, task, status, key, body],
            )
            .await
            .map_err(|e| db_error("write a job", &e))?;
        }
        tx.commit().await.map_err(|e| db_error("commit", &e))
    })
}
