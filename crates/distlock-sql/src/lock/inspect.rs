//! Reading the mutex's row on [`SqlLock`] (its owner, fencing token and remaining time) and
//! the ping. This module owns the meaning of the row read; the statement is `sql.rs`'s.

use distlock_core::{FencingToken, LockName, LockState, Result};

use super::{lock_key, reusable, Checkout, Pool, SqlLock};
use crate::statement::{DialectPool, Values};

/// The mutex row as inspect reads it: owner, version, remaining time, the holder's note.
type MutexRow = (Option<String>, i64, Option<i64>, Option<String>);

impl SqlLock {
    /// The mutex's state: held (owner, token, remaining time, and the holder's note if it
    /// left one) or free (its last token, if the row exists). **1 round trip.** Without the
    /// notes table (a DBA's schema from before it), the row alone.
    pub(super) async fn inspect_mutex(&self, name: &LockName) -> Result<LockState> {
        let key = lock_key(name);
        let values = inspect_values(&key);
        let noted = self.has_notes();
        let statement = match noted {
            true => &self.inner.sql.notes.inspect,
            false => &self.inner.sql.inspect,
        };
        let sql = statement.as_str();
        let row: Option<MutexRow> = each_pool!(self, pool => {
            self.run(
                pool,
                "inspecting",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    match noted {
                        true => sqlx::query_as_with(sql, args).fetch_optional(c.conn()?).await,
                        false => sqlx::query_as_with(sql, args)
                            .fetch_optional(c.conn()?)
                            .await
                            .map(|row| row.map(|(o, v, l)| (o, v, l, None))),
                    }
                }),
            )
            .await?
        });
        let Some((owner, version, left, note)) = row else {
            return Ok(LockState::free(None));
        };
        let fencing = u64::try_from(version).ok().map(FencingToken::new);
        Ok(match (owner, self.remaining(left)) {
            (Some(owner), Some(left)) => LockState::held(owner, fencing, Some(left)).with_note(note),
            _ => LockState::free(fencing),
        })
    }

    /// `SELECT 1` on a pooled connection. **1 round trip.**
    pub(super) async fn ping_pool(&self) -> Result<()> {
        each_pool!(self, pool => {
            self.run(
                pool,
                "ping",
                on_conn!(c => sqlx::query("SELECT 1").execute(c.conn()?).await),
            )
            .await?;
        });
        Ok(())
    }
}

/// The inspect's values: the row's key.
pub(super) fn inspect_values(key: &str) -> Values<'_> {
    Values {
        key: Some(key),
        ..Values::default()
    }
}
