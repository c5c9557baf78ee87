//! The dialect's units and limits on [`SqlLock`]: TTLs and remaining times in µs (MySQL,
//! PostgreSQL) or ms (SQLite), the TTLs accepted, and which names a dialect can store.

use std::time::Duration;

use distlock_core::{Error, LockName, Result};

use super::{SqlLock, MAX_TTL};
use crate::sql::Dialect;

impl SqlLock {
    /// PostgreSQL's text cannot hold NUL, so a name with one cannot be stored (the key escapes
    /// it, but the readable `lock_name` column keeps the name as it is).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for such a name on PostgreSQL.
    pub(crate) fn storable(&self, name: &LockName) -> Result<()> {
        if self.dialect() == Dialect::Postgres && name.as_str().contains('\0') {
            return Err(Error::InvalidName {
                reason: "PostgreSQL text cannot hold NUL characters".to_owned(),
            });
        }
        Ok(())
    }

    /// A stored remaining time (µs on MySQL and PostgreSQL, ms on SQLite) as a duration,
    /// `None` if not positive.
    pub(super) fn remaining(&self, raw: Option<i64>) -> Option<Duration> {
        let raw = u64::try_from(raw?).ok().filter(|&v| v > 0)?;
        Some(match self.dialect() {
            Dialect::MySql | Dialect::Postgres => Duration::from_micros(raw),
            Dialect::Sqlite => Duration::from_millis(raw),
        })
    }

    /// A TTL in the unit the dialect stores (µs on MySQL and PostgreSQL, ms rounded up on
    /// SQLite).
    pub(super) fn ttl_units(&self, ttl: Duration) -> Result<i64> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(Error::invalid_options(format!(
                "a TTL of {ttl:?} is outside what the SQL backend accepts (1 ms to {MAX_TTL:?})"
            )));
        }
        let units = match self.dialect() {
            Dialect::MySql | Dialect::Postgres => ttl.as_micros().max(1),
            Dialect::Sqlite => ttl.as_micros().div_ceil(1000),
        };
        // At most 30 days in µs: far below i64::MAX.
        i64::try_from(units).map_err(|_| Error::invalid_options("TTL out of range"))
    }
}
