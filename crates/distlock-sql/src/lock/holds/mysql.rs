//! MySQL's attempt: one text query (see `holds_sql::mysql_attempt`).

use sqlx::mysql::MySqlConnection;
use sqlx::{Executor, FromRow};

use super::{Census, CensusRow, Outcome};

/// The query's one row: won, the fencing token, then the census.
type AttemptRow = (
    i64,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
    Option<i64>,
);

/// Runs the attempt's query (its transaction commits within it) and reads its outcome.
pub(super) async fn attempt(conn: &mut MySqlConnection, query: &str) -> Result<Outcome, sqlx::Error> {
    // A bare string runs as a text query (`COM_QUERY`), the protocol that carries several
    // statements in one round trip.
    let rows = conn.fetch_all(query).await?;
    let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
    let (
        won,
        token,
        holds,
        readers,
        writers,
        waiting,
        stored,
        mine,
        first_permit,
        last_reader,
        writer,
        upgraders,
        my_upgradeable,
    ) = AttemptRow::from_row(row)?;
    let census: CensusRow = (
        holds,
        readers,
        writers,
        waiting,
        stored,
        mine,
        first_permit,
        last_reader,
        writer,
        upgraders,
        my_upgradeable,
    );
    Ok(match (won, token) {
        (1, Some(token)) => Outcome::Won(token),
        _ => Outcome::Lost(Census::from(census)),
    })
}
