//! `distlock_sql::doctor` against real servers configured safely and unsafely: at start
//! (server options, a standby's signal file, a replica's source) and at runtime (`SET
//! GLOBAL`, `ALTER SYSTEM` with a reload, `ALTER DATABASE`); and against SQLite files.

use distlock_core::{Finding, Verdict};
use distlock_sql::{doctor, SqlConfig};

async fn check(url: &str) -> Vec<Finding> {
    doctor(&SqlConfig::from_url(url).expect("a valid URL"))
        .await
        .expect("doctor")
}

fn item<'a>(findings: &'a [Finding], name: &str) -> &'a Finding {
    findings
        .iter()
        .find(|f| f.item == name)
        .unwrap_or_else(|| panic!("no {name} finding in {findings:#?}"))
}

#[cfg(feature = "postgres")]
mod postgres {
    use distlock_testkit::{PostgresOptions, PostgresServer};

    use super::*;

    async fn start_with(options: PostgresOptions) -> PostgresServer {
        tokio::task::spawn_blocking(move || PostgresServer::start_with(options))
            .await
            .expect("the starter thread")
            .expect("postgres starts (run scripts/install-test-deps to install postgresql)")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_primary_is_safe_whatever_the_databases_default_isolation() {
        let server = start_with(PostgresOptions::default()).await;
        let findings = check(&server.url()).await;
        assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
        assert_eq!(item(&findings, "role").found, "primary");
        assert_eq!(item(&findings, "clock").verdict, Verdict::Ok, "{findings:#?}");

        server
            .sql(&format!(
                "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'",
                distlock_testkit::POSTGRES_DATABASE
            ))
            .expect("ALTER DATABASE");
        let findings = check(&server.url()).await;
        let isolation = item(&findings, "default_transaction_isolation");
        assert_eq!(isolation.verdict, Verdict::Ok, "{findings:#?}");
        assert_eq!(
            isolation.found, "read committed",
            "the session's own setting wins"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commits_off_at_start_warn_and_an_absent_synchronous_standby_warns_after_a_reload() {
        let server = start_with(PostgresOptions {
            extra_args: ["-c", "synchronous_commit=off"].map(String::from).to_vec(),
            ..PostgresOptions::default()
        })
        .await;
        let findings = check(&server.url()).await;
        let durability = item(&findings, "durability");
        assert_eq!(durability.verdict, Verdict::Warn, "{findings:#?}");
        assert!(
            durability.found.starts_with("synchronous_commit off"),
            "{durability:?}"
        );

        // A session setting: the database's default overrides the command line's.
        server
            .sql(&format!(
                "ALTER DATABASE {} SET synchronous_commit = on",
                distlock_testkit::POSTGRES_DATABASE
            ))
            .expect("ALTER DATABASE");
        let findings = check(&server.url()).await;
        assert_eq!(
            item(&findings, "durability").verdict,
            Verdict::Ok,
            "{findings:#?}"
        );

        server
            .sql("ALTER SYSTEM SET synchronous_standby_names = 'standby1'")
            .expect("ALTER SYSTEM");
        server.sql("SELECT pg_reload_conf()").expect("reload");
        let findings = check(&server.url()).await;
        let durability = item(&findings, "durability");
        assert_eq!(durability.verdict, Verdict::Warn, "{findings:#?}");
        assert!(durability.reason.contains("none is streaming"), "{durability:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_standby_is_unsafe() {
        let mut server = start_with(PostgresOptions::default()).await;
        server.process_mut().stop().expect("stops");
        // Without a primary to follow, a server with this file stays a hot standby.
        std::fs::write(server.dir().join("data").join("standby.signal"), "").expect("signal file");
        server.process_mut().restart().expect("starts as a standby");
        let findings = check(&server.url()).await;
        let role = item(&findings, "role");
        assert_eq!(role.verdict, Verdict::Unsafe, "{findings:#?}");
        assert!(role.fix.contains("primary"), "{role:?}");
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use distlock_testkit::{MariaDbOptions, MariaDbServer, MARIADB_DATABASE};

    use super::*;

    async fn start_with(options: MariaDbOptions) -> MariaDbServer {
        tokio::task::spawn_blocking(move || MariaDbServer::start_with(options))
            .await
            .expect("the starter thread")
            .expect("mariadbd starts (run scripts/install-test-deps to install mariadb-server)")
    }

    /// A user with what the backend needs, and what reading the replica status needs.
    fn app_url(server: &MariaDbServer) -> String {
        server
            .sql(&format!(
                "CREATE USER 'app'@'%' IDENTIFIED BY 'app'; \
                 GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON {MARIADB_DATABASE}.* TO 'app'@'%'; \
                 GRANT SLAVE MONITOR ON *.* TO 'app'@'%'"
            ))
            .expect("creates the application user");
        format!("mysql://app:app@127.0.0.1:{}/{MARIADB_DATABASE}", server.port())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_application_user_on_a_primary_is_safe_and_read_only_at_runtime_is_not() {
        let server = start_with(MariaDbOptions::default()).await;
        let url = app_url(&server);
        let findings = check(&url).await;
        assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
        for name in [
            "role",
            "privileges",
            "transaction isolation",
            "sql_mode",
            "binlog_format",
            "clock",
        ] {
            assert_eq!(item(&findings, name).verdict, Verdict::Ok, "{findings:#?}");
        }

        server
            .sql("SET GLOBAL sql_mode = 'SIMULTANEOUS_ASSIGNMENT'")
            .expect("sql_mode");
        let findings = check(&url).await;
        let mode = item(&findings, "sql_mode");
        assert_eq!(mode.verdict, Verdict::Ok, "{findings:#?}");
        assert!(mode.reason.contains("SIMULTANEOUS_ASSIGNMENT is on"), "{mode:?}");

        server.sql("SET GLOBAL read_only = 1").expect("read_only");
        let findings = check(&url).await;
        assert_eq!(item(&findings, "role").verdict, Verdict::Unsafe, "{findings:#?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_user_that_bypasses_read_only_warns() {
        let server = start_with(MariaDbOptions::default()).await;
        // The testkit's user has every privilege, SUPER and READ_ONLY ADMIN among them.
        let findings = check(&server.url()).await;
        let privileges = item(&findings, "privileges");
        assert_eq!(privileges.verdict, Verdict::Warn, "{findings:#?}");
        assert!(privileges.found.contains("ALL PRIVILEGES"), "{privileges:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statement_based_binlog_at_start_warns_and_row_at_runtime_does_not() {
        let server = start_with(MariaDbOptions {
            extra_args: ["--log-bin=binlog", "--binlog-format=STATEMENT", "--server-id=1"]
                .map(String::from)
                .to_vec(),
            ..MariaDbOptions::default()
        })
        .await;
        let url = app_url(&server);
        let findings = check(&url).await;
        let binlog = item(&findings, "binlog_format");
        assert_eq!(binlog.verdict, Verdict::Warn, "{findings:#?}");
        assert_eq!(binlog.found, "log_bin ON, STATEMENT");
        server
            .sql("SET GLOBAL binlog_format = 'ROW'")
            .expect("binlog_format");
        let findings = check(&url).await;
        assert_eq!(
            item(&findings, "binlog_format").verdict,
            Verdict::Ok,
            "{findings:#?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_is_unsafe() {
        let primary = start_with(MariaDbOptions::default()).await;
        let replica = start_with(MariaDbOptions::default()).await;
        let url = app_url(&replica);
        replica
            .sql(&format!(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
                 MASTER_USER = 'distlock', MASTER_PASSWORD = 'distlock'",
                primary.port()
            ))
            .expect("CHANGE MASTER");
        let findings = check(&url).await;
        let role = item(&findings, "role");
        assert_eq!(role.verdict, Verdict::Unsafe, "{findings:#?}");
        assert!(role.found.contains("a replica"), "{role:?}");
    }
}

/// What a primary's replication promises a failover: the `replication` finding.
#[cfg(feature = "mysql")]
mod mysql_replication {
    use std::time::{Duration, Instant};

    use distlock_testkit::{MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication};

    use super::*;

    async fn pair(replication: MariaDbReplication) -> MariaDbReplicated {
        let options = MariaDbReplicatedOptions {
            replication,
            ..MariaDbReplicatedOptions::default()
        };
        tokio::task::spawn_blocking(move || MariaDbReplicated::start_with(options))
            .await
            .expect("the starter thread")
            .expect("a MariaDB pair starts (run scripts/install-test-deps to install mariadb-server)")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_primary_with_an_asynchronous_replica_warns() {
        let pair = pair(MariaDbReplication::Asynchronous).await;
        let findings = check(&pair.url()).await;
        let replication = item(&findings, "replication");
        assert_eq!(replication.verdict, Verdict::Warn, "{findings:#?}");
        assert!(replication.found.contains("asynchronous"), "{replication:?}");
        assert!(!replication.fix.is_empty(), "{replication:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_semi_synchronous_primary_is_safe_until_its_replica_stops_acknowledging() {
        let pair = pair(MariaDbReplication::SemiSynchronous).await;
        let findings = check(&pair.url()).await;
        let replication = item(&findings, "replication");
        assert_eq!(replication.verdict, Verdict::Ok, "{findings:#?}");
        assert!(replication.found.contains("semi-synchronous"), "{replication:?}");
        assert!(replication.found.contains("AFTER_SYNC"), "{replication:?}");

        // The replica stops: with `rpl_semi_sync_master_wait_no_slave` OFF the primary goes
        // asynchronous at once, and says so.
        pair.replica()
            .expect("a replica")
            .sql("STOP SLAVE IO_THREAD")
            .expect("stops the replica's I/O thread");
        let started = Instant::now();
        loop {
            let findings = check(&pair.url()).await;
            let replication = item(&findings, "replication");
            if replication.verdict == Verdict::Warn {
                assert!(replication.found.contains("off now"), "{replication:?}");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "still judged safe 30 s after its only replica stopped: {findings:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use sqlx::Connection;

    use super::*;

    #[tokio::test]
    async fn a_new_file_is_not_created_and_a_wal_file_on_a_local_disk_is_safe() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("locks.db");
        let url = format!("sqlite://{}", path.display());
        let findings = check(&url).await;
        assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
        assert!(!path.exists(), "the doctor creates nothing");

        SqlConfig::from_url(&url)
            .expect("url")
            .build()
            .await
            .expect("opens");
        let findings = check(&url).await;
        assert_eq!(item(&findings, "journal mode").found, "wal", "{findings:#?}");
        assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
    }

    #[tokio::test]
    async fn a_rollback_journal_warns_and_a_file_that_is_not_sqlite_is_unsafe() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("plain.db");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Delete);
        let mut conn = sqlx::SqliteConnection::connect_with(&options)
            .await
            .expect("creates");
        sqlx::query("CREATE TABLE t (x)")
            .execute(&mut conn)
            .await
            .expect("a table");
        conn.close().await.expect("closes");
        let findings = check(&format!("sqlite://{}", path.display())).await;
        assert_eq!(
            item(&findings, "journal mode").verdict,
            Verdict::Warn,
            "{findings:#?}"
        );

        let other = dir.path().join("notes.txt");
        std::fs::write(
            &other,
            "not a database, and long enough to have a header of sorts",
        )
        .expect("write");
        let findings = check(&format!("sqlite://{}", other.display())).await;
        assert_eq!(
            item(&findings, "journal mode").verdict,
            Verdict::Unsafe,
            "{findings:#?}"
        );
    }
}
