//! The PostgreSQL schema is versioned (`<table>_schema`, one row): a client that finds the
//! schema at its own version starts without touching the functions (no `CREATE OR REPLACE`
//! at every start, which let the last process to start decide the function bodies for a
//! mixed-version fleet); a client that finds a newer schema refuses to start, changing
//! nothing; and a client that may not create the schema refuses to start on one that is
//! missing, naming what to run.
#![cfg(feature = "postgres")]

use distlock_core::Error;
use distlock_sql::{SqlConfig, SqlLock};

use crate::postgres_support as support;

/// Rewrites the release function's body by hand, as another version of the backend would.
const MARK_RELEASE: &str = "DO $$ DECLARE d text; BEGIN \
     SELECT pg_get_functiondef('distlock_locks_release'::regproc) INTO d; \
     EXECUTE replace(d, E'\\nBEGIN\\n', E'\\nBEGIN\\n  -- another version\\n'); END $$";
const RELEASE_MARKED: &str =
    "SELECT count(*) FROM pg_proc WHERE proname = 'distlock_locks_release' AND prosrc LIKE '%another version%'";

async fn start(url: &str, create: bool) -> distlock_core::Result<SqlLock> {
    SqlConfig::from_url(url)?.with_create_table(create).build().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_leaves_the_functions_of_a_current_or_newer_schema_alone() {
    let server = support::own_server().await;
    let url = server.url();

    start(&url, true).await.expect("creates the schema").close().await;
    server.sql(MARK_RELEASE).expect("rewrites the function");
    start(&url, true).await.expect("starts").close().await;
    assert_eq!(
        server.sql(RELEASE_MARKED).expect("psql").trim(),
        "1",
        "a start at the schema's version replaced the release function"
    );

    // A newer version's schema: this client refuses, and replaces nothing.
    server
        .sql("UPDATE distlock_locks_schema SET version = version + 1")
        .expect("a newer schema");
    let refused = start(&url, true).await;
    assert!(
        matches!(&refused, Err(Error::InvalidConfig { reason }) if reason.contains("version")),
        "starting on a newer schema: {refused:?}"
    );
    assert_eq!(
        server.sql(RELEASE_MARKED).expect("psql").trim(),
        "1",
        "a client older than the schema replaced the release function"
    );

    // A DBA's client may not create anything: without the schema it says what to run.
    let refused = SqlConfig::from_url(&url)
        .expect("a URL")
        .with_table("other_locks")
        .expect("a table name")
        .with_create_table(false)
        .build()
        .await;
    match &refused {
        Err(Error::InvalidConfig { reason }) => assert!(reason.contains("distlock schema"), "{reason}"),
        other => panic!("starting without the schema: {other:?}"),
    }
}
