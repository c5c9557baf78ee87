//! PostgreSQL's attempt: one call of the attempt's function (see `holds_sql.rs`).

use super::{Census, CensusRow, Outcome};

/// The call's one row: won, the fencing token, then the census.
pub(super) type AttemptRow = (
    bool,
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
);

/// The outcome the call's row reports.
pub(super) fn outcome(row: AttemptRow) -> Outcome {
    let (won, token, holds, readers, writers, waiting, stored, mine, first_permit, last_reader, writer) = row;
    match (won, token) {
        (true, Some(token)) => Outcome::Won(token),
        _ => {
            // The function reports no upgradeable readers: the rule was applied there, and
            // the census only times the wake-up (and tells a mismatch) here.
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
                0,
                None,
            );
            Outcome::Lost(Census::from(census))
        }
    }
}
