//! The by-name guarantee of the mutex's release, hand-over, extend, inspect and note, and of
//! PostgreSQL's batch renewal: each
//! statement is bound from the [`Values`] its call site builds, by the names the statement's
//! text uses, so what remains to check is that the call site gives a value for every name
//! (an unset one would bind `NULL`). Where each value lands in the row is
//! `tests/sql/statement_binds.rs`'s to check, on real databases.

use super::hand_over::hand_over_values;
use super::inspect::inspect_values;
use super::notes::note_values;
use super::release::release_values;
use super::renew::extend_values;
use crate::sql::{Dialect, Statements};
use crate::statement::Values;

#[test]
fn mutex_statements_get_every_value_they_name() {
    for dialect in [Dialect::MySql, Dialect::Postgres, Dialect::Sqlite] {
        let s = Statements::new(dialect, "t");
        let hand_over = hand_over_values("k", "o", "n", 1);
        // SQLite's hand-over also names the caller's clock, which each attempt sets anew.
        let hand_over = match dialect {
            Dialect::Sqlite => Values {
                clock: Some(1),
                ..hand_over
            },
            Dialect::MySql | Dialect::Postgres => hand_over,
        };
        for (what, statement, values) in [
            ("release", &s.release, release_values("k", "o")),
            ("hand-over", &s.hand_over, hand_over),
            ("extend", &s.extend, extend_values("k", "o", 1)),
            ("inspect", &s.inspect, inspect_values("k")),
            ("inspect with the note", &s.notes.inspect, inspect_values("k")),
            ("note", &s.notes.set, note_values("k", "o", "n")),
        ] {
            assert!(
                !statement.params().is_empty(),
                "{dialect:?} {what}: names nothing"
            );
            assert_eq!(
                statement.unset(&values),
                [],
                "{dialect:?} {what}: named but not given"
            );
        }
    }
}

#[cfg(feature = "postgres")]
#[test]
fn the_batch_renewal_gets_every_array_it_names() {
    let s = Statements::new(Dialect::Postgres, "t");
    let batch = super::renew_many::Batch::default();
    assert_eq!(s.extend_many.params().len(), 10, "{}", s.extend_many.as_str());
    assert_eq!(s.extend_many.unset(&batch.values()), []);
}
