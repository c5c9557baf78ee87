//! SQLite's attempt: the census and the writes as statements of one `BEGIN IMMEDIATE`
//! transaction, the rule applied in between.

use distlock_core::LockKind;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Sqlite, SqliteConnection};

use super::{Census, CensusRow, Outcome, Verdict};
use crate::holds_sql::SqliteAttempt;
use crate::statement::{Statement, Values};

/// The statements and values of one attempt.
pub(super) struct Attempt<'a> {
    pub(super) steps: &'a SqliteAttempt,
    /// The holds table's `withdraw` statement.
    pub(super) withdraw: &'a Statement,
    pub(super) kind: LockKind,
    /// The attempt's values: primitive, key, name, owner, kind, permits, weight and TTL (ms); a
    /// waiting writer's `holder` value and stay (ms) if it leaves a record.
    pub(super) values: Values<'a>,
}

/// `statement`'s text and its arguments from `values`.
fn run<'q>(
    statement: &'q Statement,
    values: Values<'q>,
) -> Result<(&'q str, SqliteArguments<'q>), sqlx::Error> {
    let args = statement.arguments::<Sqlite>(&values)?;
    Ok((statement.as_str(), args))
}

/// Runs one attempt in its own transaction, committed before it returns. On an error the
/// transaction is still open: the caller closes the connection (`in_transaction!`).
pub(super) async fn attempt(conn: &mut SqliteConnection, a: &Attempt<'_>) -> Result<Outcome, sqlx::Error> {
    let s = a.steps;
    // Takes the database's write lock now (waiting for it up to the busy timeout), so the
    // census below stays true until the commit.
    sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
    let (sql, args) = run(&s.purge, a.values)?;
    sqlx::query_with(sql, args).execute(&mut *conn).await?;
    let (sql, args) = run(&s.census, a.values)?;
    let census: CensusRow = sqlx::query_as_with(sql, args).fetch_one(&mut *conn).await?;
    let census = Census::from(census);
    let outcome = match census.verdict(a.kind) {
        Verdict::Renew(token) => {
            let (sql, args) = run(&s.renew, a.values)?;
            sqlx::query_with(sql, args).execute(&mut *conn).await?;
            Outcome::Won(token)
        }
        verdict @ (Verdict::Admit | Verdict::Upgrade) => {
            let clock = Values {
                clock: Some(crate::lock::clock_micros()),
                ..a.values
            };
            let (sql, args) = run(&s.bump, clock)?;
            let token: i64 = sqlx::query_scalar_with(sql, args).fetch_one(&mut *conn).await?;
            let hold = Values {
                token: Some(token),
                ..a.values
            };
            // An upgrade turns the owner's upgradeable read into this write hold.
            let step = match verdict {
                Verdict::Upgrade => &s.upgrade,
                _ => &s.insert,
            };
            let (sql, args) = run(step, hold)?;
            sqlx::query_with(sql, args).execute(&mut *conn).await?;
            if a.kind.weight() > 1 {
                let (sql, args) = run(&s.weigh, hold)?;
                sqlx::query_with(sql, args).execute(&mut *conn).await?;
            }
            Outcome::Won(token)
        }
        Verdict::Mismatch(_) | Verdict::Refuse => Outcome::Lost(census),
    };
    if a.values.holder.is_some() {
        let step = match outcome {
            Outcome::Won(_) => a.withdraw,
            Outcome::Lost(_) => &s.record_waiter,
        };
        let (sql, args) = run(step, a.values)?;
        sqlx::query_with(sql, args).execute(&mut *conn).await?;
    }
    sqlx::query("COMMIT").execute(&mut *conn).await?;
    Ok(outcome)
}
