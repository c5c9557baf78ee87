//! The note a mutex holder leaves beside its hold on [`SqlLock`]
//! ([`DistributedLock::set_note`](distlock_core::DistributedLock::set_note)), and whether the
//! notes table is there at all. This module owns the meaning of the statement's answer; the
//! table and its statements are `notes_sql.rs`'s, reading a note back is `inspect.rs`'s.
//!
//! Round trips, every dialect: a note **1** (one `INSERT ... SELECT` upsert, owner-checked
//! against the live hold); reading it **0** more (inspect joins the notes table in its one
//! round trip). So leader election costs a campaign that wins 2 (the acquisition, then the
//! note), a read of the leader 1, a resignation 1 (the release).

use std::sync::atomic::Ordering;

use distlock_core::{Error, Lease, LockKind, Result};

use super::{lock_key, reusable, Checkout, Pool, SqlLock};
use crate::notes_sql::MAX_NOTE_BYTES;
use crate::statement::{DialectPool, Values};

impl SqlLock {
    /// Whether this client stores notes: the notes table was created or found at start.
    pub(super) fn has_notes(&self) -> bool {
        self.inner.notes.load(Ordering::Relaxed)
    }

    /// After the schema was prepared: with the tables created by this client the notes table is
    /// there; else (a DBA's schema) looks for it (**1 round trip**, at start only).
    pub(super) async fn find_notes(&self, created: bool) -> Result<()> {
        let found = created || {
            let probe = self.inner.sql.notes.probe.as_str();
            each_pool!(self, pool => {
                self.run(
                    pool,
                    "looking for the notes table",
                    on_conn!(c => match sqlx::query(probe).execute(c.conn()?).await {
                        Ok(_) => Ok(true),
                        // Missing (the database refused the statement): no notes.
                        Err(sqlx::Error::Database(_)) => Ok(false),
                        Err(e) => Err(e),
                    }),
                )
                .await?
            })
        };
        if !found {
            tracing::info!(
                table = %self.inner.config.table,
                "distlock-sql: no notes table beside the lock table; notes and leader election are off \
                 until the DDL of this version runs (`SqlConfig::ddl()`)"
            );
        }
        self.inner.notes.store(found, Ordering::Relaxed);
        Ok(())
    }

    /// Stores `note` beside the live mutex hold of `lease`'s owner. **1 round trip.**
    /// `Ok(false)` where the owner no longer holds (or for a lease of another kind).
    pub(super) async fn set_mutex_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        if !self.has_notes() {
            return Err(Error::NotSupported {
                backend: distlock_core::DistributedLock::backend(self),
                what: "notes beside a hold without the notes table (run the DDL of this version)",
            });
        }
        if note.len() > MAX_NOTE_BYTES {
            return Err(Error::invalid_options(format!(
                "a note of {} bytes is longer than the {MAX_NOTE_BYTES} allowed",
                note.len()
            )));
        }
        if self.dialect() == crate::sql::Dialect::Postgres && note.contains('\0') {
            return Err(Error::invalid_options(
                "PostgreSQL text cannot hold NUL characters, nor can a note there",
            ));
        }
        if lease.kind() != LockKind::Exclusive {
            return Ok(false);
        }
        self.storable(lease.name())?;
        let key = lock_key(lease.name());
        let owner = lease.owner().to_string();
        let values = note_values(&key, &owner, note);
        let statement = &self.inner.sql.notes.set;
        let sql = statement.as_str();
        let affected = each_pool!(self, pool => {
            self.run(
                pool,
                "setting a note",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_with(sql, args).execute(c.conn()?).await
                }),
            )
            .await?
            .rows_affected()
        });
        Ok(affected > 0)
    }
}

/// The note's values: the row's key, the owner it must still have, and the note.
pub(super) fn note_values<'a>(key: &'a str, owner: &'a str, note: &'a str) -> Values<'a> {
    Values {
        key: Some(key),
        owner: Some(owner),
        note: Some(note),
        ..Values::default()
    }
}
