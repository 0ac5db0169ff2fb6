//! The shared tables' database handle on a real PostgreSQL cluster: what every session it opens
//! is set to, whatever the database or the operator's URL would make it.

use sources::database::{Database, DatabaseError};
use test_support::postgres::database_or_skip;
use tokio_postgres::Client;

/// `SHOW setting` on the shared read session and on a session of the caller's own.
fn shown(db: &Database, setting: &'static str) -> (String, String) {
    let pool = db.pool();
    db.run(async move {
        let show = format!("SHOW {setting}");
        let shared = value_of(&*pool.shared().await?, &show).await?;
        let alone = value_of(&pool.alone().await?, &show).await?;
        Ok((shared, alone))
    })
    .unwrap()
}

/// The one value `query` answers on `client`.
async fn value_of(client: &Client, query: &str) -> Result<String, DatabaseError> {
    let row = client
        .query_one(query, &[])
        .await
        .map_err(|e| DatabaseError::new("show a setting", e.to_string()))?;
    Ok(row.get(0))
}

/// A commit of a token, a contract or a job returns once it is flushed: every session sets
/// `synchronous_commit` on, though the database's own default is off and the operator's URL
/// asks for off too; the URL's other options are kept.
#[test]
fn every_session_commits_durably_whatever_the_database_and_the_url_say() {
    let Some((cluster, url)) = database_or_skip("every_session_commits_durably") else {
        return;
    };
    let name = url.rsplit('/').next().unwrap().to_owned();
    cluster
        .psql(
            "postgres",
            &format!("ALTER DATABASE {name} SET synchronous_commit = off"),
        )
        .unwrap();
    let db = Database::open(&url, "research-ledger test").unwrap();
    assert_eq!(
        shown(&db, "synchronous_commit"),
        ("on".to_owned(), "on".to_owned())
    );
    let asking =
        format!("{url}?options=-c%20synchronous_commit%3Doff%20-c%20statement_timeout%3D4321");
    let db = Database::open(&asking, "research-ledger test").unwrap();
    assert_eq!(
        shown(&db, "synchronous_commit"),
        ("on".to_owned(), "on".to_owned())
    );
    assert_eq!(
        shown(&db, "statement_timeout"),
        ("4321ms".to_owned(), "4321ms".to_owned())
    );
}
