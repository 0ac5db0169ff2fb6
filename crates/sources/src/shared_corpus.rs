//! The corpus's documents in the storage database, and each node's index rebuilt from them.
//!
//! With a storage database the documents are the shared record and a node's tantivy index
//! (the [`Corpus`] in its data directory) is derived from them. `corpus_documents` holds one
//! row per document id: the document as JSON, its fingerprint, and the corpus version at which
//! it last changed; `corpus_head` holds that version, raised by every put that changes a
//! document. A put locks the head row (`FOR UPDATE`), so puts from several nodes land one after
//! another and every changed row carries the version its put raised the head to.
//!
//! A node remembers the version its index was brought to. [`SharedCorpus::catch_up`] reads the
//! head (one query); when it moved, it reads the documents changed since (in one snapshot) and
//! adds them to the index as any ingest does — a document whose fingerprint the index holds
//! already is left alone. The service catches up before every use of the corpus, so a document
//! whose put returned on one node is searched by every node on its next search. The index's
//! state id depends only on the documents it holds (their ids and fingerprints; the index is
//! left as one segment without deletions), so nodes over one database show the same state and
//! answer the same query with the same hits.
//!
//! Every document read back is checked against the fingerprint stored beside it and its text
//! against its recorded hash: a row altered in the database is reported, never indexed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::corpus::{
    AddReport, Corpus, CorpusError, IngestProgress, IngestReport, Rejected, Similarity,
};
use crate::database::{
    Database, DatabaseError, Migration, db_error, is_undefined_table, migrate, schema_version,
};
use crate::document::{Defaults, Document, Field};
use crate::ingest::read_documents;
use crate::limits::CorpusLimits;

/// The component name of the corpus's tables in `shared_schema`.
const COMPONENT: &str = "corpus";

/// Every migration of the corpus's tables, in order. Never edit one that was released.
const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    description: "the corpus's documents and its version",
    sql: r"
        CREATE TABLE corpus_head (
            id      int    PRIMARY KEY CHECK (id = 1),
            version bigint NOT NULL CHECK (version >= 0)
        );
        INSERT INTO corpus_head VALUES (1, 0);
        CREATE TABLE corpus_documents (
            id          text   PRIMARY KEY,
            fingerprint text   NOT NULL,
            changed_at  bigint NOT NULL CHECK (changed_at >= 1),
            document    text   NOT NULL
        );
        CREATE INDEX corpus_documents_by_change ON corpus_documents (changed_at);
    ",
}];

/// Why the shared corpus could not be read, written or indexed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharedCorpusError {
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DatabaseError),
    /// The node's index failed.
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    /// A row does not read back as the document its fingerprint names: it was altered in the
    /// database. Ingest the document again to repair it.
    #[error("the corpus document {id} in the database is damaged: {detail}")]
    Damaged {
        /// The document's id.
        id: String,
        /// What was found.
        detail: String,
    },
    /// The store was opened read-only.
    #[error("the corpus in the database was opened read-only")]
    ReadOnly,
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutReport {
    /// New ids.
    pub added: u64,
    /// Ids whose fingerprint changed.
    pub replaced: u64,
    /// Ids stored exactly as given already.
    pub unchanged: u64,
    /// The corpus version after the put.
    pub version: u64,
}

/// The corpus's documents in the database. See the module documentation.
#[derive(Debug)]
pub struct PostgresDocuments {
    db: Database,
    read_only: bool,
}

fn count(n: usize) -> u64 {
    n as u64
}

impl PostgresDocuments {
    /// Connects to the database at `url` and applies the corpus's migrations.
    pub fn open(url: &str) -> Result<PostgresDocuments, DatabaseError> {
        let db = Database::open(url, "research-ledger corpus")?;
        let pool = db.pool();
        db.run(async move {
            let mut client = pool.alone().await?;
            migrate(&mut client, COMPONENT, MIGRATIONS).await
        })?;
        Ok(PostgresDocuments {
            db,
            read_only: false,
        })
    }

    /// Connects to read only: nothing is created; a database without the tables reads as an
    /// empty corpus.
    pub fn open_read_only(url: &str) -> Result<PostgresDocuments, DatabaseError> {
        let db = Database::open(url, "research-ledger corpus")?;
        let pool = db.pool();
        db.run(async move {
            let client = pool.shared().await?;
            let found = schema_version(&client, COMPONENT).await?;
            let latest = MIGRATIONS.last().map_or(0, |m| m.version);
            if found > latest {
                return Err(DatabaseError::new(
                    "check the schema version",
                    format!("the database's corpus schema is at version {found}, newer than this program's {latest}"),
                ));
            }
            Ok(())
        })?;
        Ok(PostgresDocuments {
            db,
            read_only: true,
        })
    }

    /// The corpus version: 0 until the first document.
    pub fn version(&self) -> Result<u64, DatabaseError> {
        let pool = self.db.pool();
        self.db.run(async move {
            pool.read(|client| async move {
                match client
                    .query_one("SELECT version FROM corpus_head WHERE id = 1", &[])
                    .await
                {
                    Ok(row) => Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0)),
                    Err(e) if is_undefined_table(&e) => Ok(0),
                    Err(e) => Err(db_error("read the corpus version", &e)),
                }
            })
            .await
        })
    }

    /// The corpus version and every document changed after `version`, in id order, read in
    /// one snapshot.
    pub fn changes_since(&self, version: u64) -> Result<(u64, Vec<Document>), SharedCorpusError> {
        let pool = self.db.pool();
        let after = i64::try_from(version).unwrap_or(i64::MAX);
        let rows = self.db.run(async move {
            let mut client = pool.alone().await?;
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(|e| db_error("begin a read", &e))?;
            let head = match tx
                .query_one("SELECT version FROM corpus_head WHERE id = 1", &[])
                .await
            {
                Ok(row) => row.get::<_, i64>(0),
                Err(e) if is_undefined_table(&e) => return Ok((0, Vec::new())),
                Err(e) => return Err(db_error("read the corpus version", &e)),
            };
            let rows = tx
                .query(
                    "SELECT id, fingerprint, document FROM corpus_documents \
                     WHERE changed_at > $1 ORDER BY id",
                    &[&after],
                )
                .await
                .map_err(|e| db_error("read the corpus documents", &e))?;
            let rows: Vec<(String, String, String)> = rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
            Ok((u64::try_from(head).unwrap_or(0), rows))
        })?;
        let (head, rows) = rows;
        let mut documents = Vec::with_capacity(rows.len());
        for (id, fingerprint, text) in rows {
            let document: Document =
                serde_json::from_str(&text).map_err(|e| SharedCorpusError::Damaged {
                    id: id.clone(),
                    detail: format!("not a document: {e}"),
                })?;
            if document.id != id || document.fingerprint() != fingerprint {
                return Err(SharedCorpusError::Damaged {
                    id,
                    detail: "the document does not have the fingerprint stored with it".into(),
                });
            }
            if crate::blobs::content_hash(document.content.as_bytes()) != document.content_hash {
                return Err(SharedCorpusError::Damaged {
                    id,
                    detail: "the text does not have the hash recorded with it".into(),
                });
            }
            documents.push(document);
        }
        Ok((head, documents))
    }

    /// Every document, in id order.
    pub fn all(&self) -> Result<Vec<Document>, SharedCorpusError> {
        Ok(self.changes_since(0)?.1)
    }

    /// Stores `documents` (checked by the caller, one per id): new ids are added, changed ones
    /// replaced, the rest left alone, in one transaction that raises the corpus version when
    /// anything changed.
    pub fn put(&self, documents: &[Document]) -> Result<PutReport, SharedCorpusError> {
        if self.read_only {
            return Err(SharedCorpusError::ReadOnly);
        }
        let mut given: BTreeMap<String, (String, String)> = BTreeMap::new();
        for document in documents {
            let text = serde_json::to_string(document).map_err(|e| SharedCorpusError::Damaged {
                id: document.id.clone(),
                detail: e.to_string(),
            })?;
            given.insert(document.id.clone(), (document.fingerprint(), text));
        }
        let pool = self.db.pool();
        Ok(self.db.run(async move { put_rows(&pool, given).await })?)
    }
}

async fn put_rows(
    pool: &crate::database::Pool,
    given: BTreeMap<String, (String, String)>,
) -> Result<PutReport, DatabaseError> {
    let mut client = pool.alone().await?;
    let tx = client
        .transaction()
        .await
        .map_err(|e| db_error("begin a put", &e))?;
    let head: i64 = tx
        .query_one(
            "SELECT version FROM corpus_head WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await
        .map_err(|e| db_error("lock the corpus version", &e))?
        .get(0);
    let ids: Vec<&str> = given.keys().map(String::as_str).collect();
    let stored: HashMap<String, String> = tx
        .query(
            "SELECT id, fingerprint FROM corpus_documents WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .map_err(|e| db_error("read the corpus documents", &e))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut report = PutReport::default();
    let (mut ids, mut prints, mut texts) = (Vec::new(), Vec::new(), Vec::new());
    for (id, (fingerprint, text)) in &given {
        match stored.get(id) {
            Some(old) if old == fingerprint => report.unchanged += 1,
            found => {
                if found.is_some() {
                    report.replaced += 1;
                } else {
                    report.added += 1;
                }
                ids.push(id.as_str());
                prints.push(fingerprint.as_str());
                texts.push(text.as_str());
            }
        }
    }
    let version = if ids.is_empty() { head } else { head + 1 };
    if !ids.is_empty() {
        tx.execute(
            "INSERT INTO corpus_documents (id, fingerprint, changed_at, document) \
             SELECT id, fingerprint, $4, document \
             FROM unnest($1::text[], $2::text[], $3::text[]) AS g(id, fingerprint, document) \
             ON CONFLICT (id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, \
             changed_at = EXCLUDED.changed_at, document = EXCLUDED.document",
            &[&ids, &prints, &texts, &version],
        )
        .await
        .map_err(|e| db_error("write the corpus documents", &e))?;
        tx.execute(
            "UPDATE corpus_head SET version = $1 WHERE id = 1",
            &[&version],
        )
        .await
        .map_err(|e| db_error("raise the corpus version", &e))?;
    }
    tx.commit()
        .await
        .map_err(|e| db_error("commit a put", &e))?;
    report.version = u64::try_from(version).unwrap_or(0);
    Ok(report)
}

/// A node's index over the documents of the database. See the module documentation.
#[derive(Debug)]
pub struct SharedCorpus {
    store: PostgresDocuments,
    /// The corpus version the index was last brought to.
    synced: Mutex<u64>,
}

impl SharedCorpus {
    /// Opens the index in `dir` over `store` and brings it up to date. An index holding a
    /// document the database does not (written before the database held the corpus, or by
    /// another deployment) is removed and rebuilt from the database: it is derived.
    pub fn open(
        dir: &Path,
        limits: CorpusLimits,
        store: PostgresDocuments,
        similarity: Option<Arc<Similarity>>,
    ) -> Result<(SharedCorpus, Corpus), SharedCorpusError> {
        let shared = SharedCorpus {
            store,
            synced: Mutex::new(0),
        };
        let (head, documents) = shared.store.changes_since(0)?;
        let corpus = Corpus::open_with(dir, limits.clone(), similarity.clone())?;
        shared.index(&corpus, &documents)?;
        if corpus.len() == count(documents.len()) {
            *shared.synced.lock().unwrap_or_else(PoisonError::into_inner) = head;
            return Ok((shared, corpus));
        }
        tracing::warn!(
            dir = %dir.display(),
            indexed = corpus.len(),
            stored = documents.len(),
            "the corpus index holds documents the database does not; rebuilding it from the database"
        );
        drop(corpus);
        std::fs::remove_dir_all(dir).map_err(|e| CorpusError::Index {
            dir: dir.to_path_buf(),
            detail: format!("cannot remove the index to rebuild it: {e}"),
        })?;
        let corpus = Corpus::open_with(dir, limits, similarity)?;
        shared.index(&corpus, &documents)?;
        *shared.synced.lock().unwrap_or_else(PoisonError::into_inner) = head;
        Ok((shared, corpus))
    }

    /// The database's documents.
    pub fn store(&self) -> &PostgresDocuments {
        &self.store
    }

    fn index(&self, corpus: &Corpus, documents: &[Document]) -> Result<(), SharedCorpusError> {
        if documents.is_empty() {
            return Ok(());
        }
        let report = corpus.add_documents(documents)?;
        for rejected in &report.rejected {
            tracing::warn!(
                document = %rejected.document_id,
                problem = %rejected.problem,
                "a document of the database is outside this node's corpus limits and is not indexed"
            );
        }
        Ok(())
    }

    /// Brings `corpus` up to the database's version; true when it moved.
    pub fn catch_up(&self, corpus: &Corpus) -> Result<bool, SharedCorpusError> {
        let mut synced = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        if self.store.version()? == *synced {
            return Ok(false);
        }
        // What another process committed to this index (an `ingest` beside the server) is
        // seen first, so nothing it added is added twice.
        corpus.refresh()?;
        let (head, documents) = self.store.changes_since(*synced)?;
        self.index(corpus, &documents)?;
        *synced = head;
        Ok(true)
    }

    /// Adds documents a client read and checked, as [`Corpus::add_documents`] does, through
    /// the database: each is checked against `corpus`'s limits, the valid ones are stored, and
    /// the index catches up.
    pub fn add_documents(
        &self,
        corpus: &Corpus,
        documents: &[Document],
    ) -> Result<AddReport, SharedCorpusError> {
        let mut rejected = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut valid = Vec::new();
        for (index, document) in documents.iter().enumerate() {
            if let Err(problems) = document.check(corpus.limits()) {
                rejected.extend(problems.into_iter().map(|p| Rejected {
                    index,
                    document_id: document.id.clone(),
                    field: Some(p.field),
                    problem: p.problem,
                }));
                continue;
            }
            if let Some(first) = seen.get(document.id.as_str()) {
                rejected.push(Rejected {
                    index,
                    document_id: document.id.clone(),
                    field: Some(Field::Id),
                    problem: format!("id already used by document #{first} of this request"),
                });
                continue;
            }
            seen.insert(&document.id, index);
            valid.push(document.clone());
        }
        let put = self.store.put(&valid)?;
        self.catch_up(corpus)?;
        Ok(AddReport {
            added: put.added,
            replaced: put.replaced,
            unchanged: put.unchanged,
            rejected,
            index_state: corpus.index_state(),
        })
    }

    /// Reads every document under `paths`, as [`Corpus::ingest`] does, stores them in the
    /// database, and brings `corpus` up to date.
    pub fn ingest(
        &self,
        corpus: &Corpus,
        paths: &[PathBuf],
        defaults: &Defaults,
        progress: &mut dyn FnMut(IngestProgress<'_>),
    ) -> Result<IngestReport, SharedCorpusError> {
        let mut documents = Vec::new();
        let read = read_documents::<SharedCorpusError>(
            paths,
            defaults,
            corpus.limits(),
            progress,
            &mut |_, document| {
                documents.push(document);
                Ok(())
            },
        )?;
        progress(IngestProgress::Committing);
        let put = self.store.put(&documents)?;
        self.catch_up(corpus)?;
        Ok(IngestReport {
            files: read.files,
            documents: read.documents,
            added: put.added,
            replaced: put.replaced,
            unchanged: put.unchanged + read.repeated,
            failed: read.failed,
            errors: read.errors,
            warnings: read.warnings,
            index_state: corpus.index_state(),
        })
    }
}
