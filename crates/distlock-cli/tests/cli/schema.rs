//! `distlock schema` prints the DDL of the store's dialect (here SQLite's, which the `sqlite3`
//! shell's engine runs as is) with the schema's version, and refuses a store that is not SQL.

use crate::support::{distlock, run, text};

#[test]
fn prints_the_ddl_of_the_store_and_refuses_other_stores() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let out = run(&mut distlock(&url, &["schema", "--table", "app_locks"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ddl = text(&out.stdout);
    for table in ["\"app_locks\"", "\"app_locks_holds\"", "\"app_locks_schema\""] {
        assert!(
            ddl.contains(&format!("CREATE TABLE IF NOT EXISTS {table}")),
            "{ddl}"
        );
    }
    assert!(
        !dir.path().join("locks.db").exists(),
        "schema connects to nothing"
    );

    let pg = run(&mut distlock("postgres://app@db.example/locks", &["schema"]));
    assert!(pg.status.success(), "{}", text(&pg.stderr));
    assert!(text(&pg.stdout).contains("FUNCTION \"distlock_locks_release\""));

    let redis = run(&mut distlock("redis://127.0.0.1:6379", &["schema"]));
    assert_eq!(redis.status.code(), Some(78), "{}", text(&redis.stderr));
}

/// The guide's DDL (`docs/src/ddl/*.sql`, which its SQL schema page includes) is what
/// `distlock schema` prints for each dialect with the default table name, so what a DBA
/// copies from the guide is what the library would create.
#[test]
fn the_guides_ddl_is_what_schema_prints() {
    let ddl_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/ddl");
    for (file, url) in [
        ("mysql.sql", "mysql://app@db.example/locks"),
        ("postgres.sql", "postgres://app@db.example/locks"),
        ("sqlite.sql", "sqlite:///var/lib/app/locks.db"),
    ] {
        let out = run(&mut distlock(url, &["schema"]));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let path = ddl_dir.join(file);
        let guide =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        assert!(
            guide == text(&out.stdout),
            "{} differs from what `distlock schema` prints; regenerate it: \
             distlock schema --url {url} > docs/src/ddl/{file}",
            path.display()
        );
    }
}
