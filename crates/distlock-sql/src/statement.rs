//! A statement and its parameters, defined together: the SQL is written with named
//! placeholders (`:key`, `:owner`, `:ttl`, ...), and [`Statement::new`] turns them into the
//! dialect's own (`?` on MySQL, `$n` on PostgreSQL, `?n` on SQLite) while recording which
//! value each position takes. [`Statement::arguments`] then binds a [`Values`] by those
//! names, so no caller lists binds by position and two values cannot trade places. The arrays
//! of PostgreSQL's batch renewal (`:indexes`, `:keys`, ...) are named and bound the same way,
//! through [`BindArrays`], which only PostgreSQL's binding fills. This
//! module owns the placeholders and the binding; the statements are `sql.rs`'s and its
//! siblings', and nothing here runs them.
//!
//! PostgreSQL and SQLite number their parameters in the order of [`Param`] (not of
//! appearance), so a statement's numbers, and so its text, do not change when a clause moves.

use sqlx::{Arguments, Database, Encode, Type};

use crate::sql::Dialect;

/// A named parameter. The order of the variants is the order of PostgreSQL's and SQLite's
/// parameter numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Param {
    /// The object's primitive in the holds table (`semaphore`, `rw-lock`).
    Primitive,
    /// The lock key (`lock_key`).
    Key,
    /// The full name (`lock_name`).
    Name,
    /// The holder's owner token.
    Owner,
    /// A row's `holder` value other than an owner token (a waiting writer's record).
    Holder,
    /// The owner token a hand-over gives the lock to.
    Next,
    /// A hold's `kind` column.
    Kind,
    /// A permit's count (`NULL` for other kinds).
    Permits,
    /// A new hold's fencing token.
    Token,
    /// The TTL in the dialect's unit (µs; ms on SQLite).
    Ttl,
    /// The caller's clock in µs (SQLite's fencing tokens).
    Clock,
    /// A waiter's id in the mutex's queue of waiters; the `holder` value of a waiting
    /// writer's record as PostgreSQL's attempt function takes it.
    Waiter,
    /// How long a waiter's entry lives, in the dialect's unit.
    Stay,
    /// PostgreSQL's batch renewal: each mutex lease's index in the batch (`int4[]`).
    Indexes,
    /// Each mutex lease's key.
    Keys,
    /// Each mutex lease's owner token.
    Owners,
    /// Each mutex lease's TTL in µs (`int8[]`).
    Ttls,
    /// Each hold's index in the batch.
    HoldIndexes,
    /// Each hold's primitive.
    Primitives,
    /// Each hold's key.
    HoldKeys,
    /// Each hold's owner token (its `holder`).
    Holders,
    /// Each hold's `kind` column.
    Kinds,
    /// Each hold's TTL in µs.
    HoldTtls,
    /// The note a mutex holder leaves beside its hold.
    Note,
    /// How many permits a hold takes.
    Weight,
}

impl Param {
    const ALL: [Param; 25] = [
        Param::Primitive,
        Param::Key,
        Param::Name,
        Param::Owner,
        Param::Holder,
        Param::Next,
        Param::Kind,
        Param::Permits,
        Param::Token,
        Param::Ttl,
        Param::Clock,
        Param::Waiter,
        Param::Stay,
        Param::Indexes,
        Param::Keys,
        Param::Owners,
        Param::Ttls,
        Param::HoldIndexes,
        Param::Primitives,
        Param::HoldKeys,
        Param::Holders,
        Param::Kinds,
        Param::HoldTtls,
        Param::Note,
        Param::Weight,
    ];

    /// The placeholder's name in a statement's text.
    fn name(self) -> &'static str {
        match self {
            Param::Primitive => "primitive",
            Param::Key => "key",
            Param::Name => "name",
            Param::Owner => "owner",
            Param::Holder => "holder",
            Param::Next => "next",
            Param::Kind => "kind",
            Param::Permits => "permits",
            Param::Token => "token",
            Param::Ttl => "ttl",
            Param::Clock => "clock",
            Param::Waiter => "waiter",
            Param::Stay => "stay",
            Param::Indexes => "indexes",
            Param::Keys => "keys",
            Param::Owners => "owners",
            Param::Ttls => "ttls",
            Param::HoldIndexes => "hold_indexes",
            Param::Primitives => "primitives",
            Param::HoldKeys => "hold_keys",
            Param::Holders => "holders",
            Param::Kinds => "kinds",
            Param::HoldTtls => "hold_ttls",
            Param::Note => "note",
            Param::Weight => "weight",
        }
    }

    fn named(name: &str) -> Option<Param> {
        Param::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The values of one run of a statement, by name; a statement binds those it names (an
/// unset one as `NULL`). The arrays are PostgreSQL's only (see [`BindArrays`]).
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))] // the arrays
pub(crate) struct Values<'a> {
    pub(crate) primitive: Option<&'a str>,
    pub(crate) key: Option<&'a str>,
    pub(crate) name: Option<&'a str>,
    pub(crate) owner: Option<&'a str>,
    pub(crate) holder: Option<&'a str>,
    pub(crate) next: Option<&'a str>,
    pub(crate) kind: Option<&'a str>,
    pub(crate) permits: Option<i32>,
    pub(crate) token: Option<i64>,
    pub(crate) ttl: Option<i64>,
    pub(crate) clock: Option<i64>,
    pub(crate) waiter: Option<&'a str>,
    pub(crate) stay: Option<i64>,
    pub(crate) indexes: Option<&'a [i32]>,
    pub(crate) keys: Option<&'a [String]>,
    pub(crate) owners: Option<&'a [String]>,
    pub(crate) ttls: Option<&'a [i64]>,
    pub(crate) hold_indexes: Option<&'a [i32]>,
    pub(crate) primitives: Option<&'a [String]>,
    pub(crate) hold_keys: Option<&'a [String]>,
    pub(crate) holders: Option<&'a [String]>,
    pub(crate) kinds: Option<&'a [String]>,
    pub(crate) hold_ttls: Option<&'a [i64]>,
    pub(crate) note: Option<&'a str>,
    pub(crate) weight: Option<i32>,
}

impl Values<'_> {
    /// Whether `param` has a value.
    #[cfg(test)]
    fn is_set(&self, param: Param) -> bool {
        match param {
            Param::Primitive => self.primitive.is_some(),
            Param::Key => self.key.is_some(),
            Param::Name => self.name.is_some(),
            Param::Owner => self.owner.is_some(),
            Param::Holder => self.holder.is_some(),
            Param::Next => self.next.is_some(),
            Param::Kind => self.kind.is_some(),
            Param::Permits => self.permits.is_some(),
            Param::Token => self.token.is_some(),
            Param::Ttl => self.ttl.is_some(),
            Param::Clock => self.clock.is_some(),
            Param::Waiter => self.waiter.is_some(),
            Param::Stay => self.stay.is_some(),
            Param::Indexes => self.indexes.is_some(),
            Param::Keys => self.keys.is_some(),
            Param::Owners => self.owners.is_some(),
            Param::Ttls => self.ttls.is_some(),
            Param::HoldIndexes => self.hold_indexes.is_some(),
            Param::Primitives => self.primitives.is_some(),
            Param::HoldKeys => self.hold_keys.is_some(),
            Param::Holders => self.holders.is_some(),
            Param::Kinds => self.kinds.is_some(),
            Param::HoldTtls => self.hold_ttls.is_some(),
            Param::Note => self.note.is_some(),
            Param::Weight => self.weight.is_some(),
        }
    }
}

/// A statement's text in its dialect, and the parameter each placeholder takes, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Statement {
    text: String,
    params: Vec<Param>,
}

impl Statement {
    /// `template` with its named placeholders (`:` and a name of [`Param`]) turned into
    /// `dialect`'s. A `::` (PostgreSQL's cast) and a `:` before anything but a letter (a time
    /// in a literal) are left as they are; so is an unknown name (and the database then
    /// refuses the statement).
    pub(crate) fn new(dialect: Dialect, template: &str) -> Self {
        let mut text = String::with_capacity(template.len());
        let mut order = Vec::new();
        let mut rest = template;
        while let Some(at) = rest.find(':') {
            text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(cast) = after.strip_prefix(':') {
                text.push_str("::");
                rest = cast;
                continue;
            }
            let len = after
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(after.len());
            match Param::named(&after[..len]) {
                Some(param) => {
                    order.push(param);
                    text.push('\u{0}');
                    rest = &after[len..];
                }
                None => {
                    text.push(':');
                    rest = after;
                }
            }
        }
        text.push_str(rest);
        // Each placeholder was marked with a NUL (which no statement holds); now the dialect's.
        let mut distinct: Vec<Param> = order.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let mut out = String::with_capacity(text.len() + order.len() * 2);
        let mut marks = order.iter();
        for piece in text.split('\u{0}').enumerate() {
            let (i, piece) = piece;
            if i > 0 {
                let param = marks.next().copied().unwrap_or(Param::Key);
                let number = distinct.iter().position(|&p| p == param).unwrap_or(0) + 1;
                match dialect {
                    Dialect::MySql => out.push('?'),
                    Dialect::Postgres => out.push_str(&format!("${number}")),
                    Dialect::Sqlite => out.push_str(&format!("?{number}")),
                }
            }
            out.push_str(piece);
        }
        let params = match dialect {
            Dialect::MySql => order,
            Dialect::Postgres | Dialect::Sqlite => distinct,
        };
        Self { text: out, params }
    }

    /// The statement's text in its dialect.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// The parameters in the order they are bound.
    #[cfg(test)]
    pub(crate) fn params(&self) -> &[Param] {
        &self.params
    }

    /// The parameters this statement names that `values` leaves unset (each binds `NULL`).
    #[cfg(test)]
    pub(crate) fn unset(&self, values: &Values<'_>) -> Vec<Param> {
        self.params
            .iter()
            .copied()
            .filter(|&p| !values.is_set(p))
            .collect()
    }

    /// The statement's arguments: each parameter it names, from `values`, in its order.
    ///
    /// # Errors
    /// Only what encoding a value to the database's format can fail with.
    pub(crate) fn arguments<'q, DB>(&self, values: &Values<'q>) -> Result<DB::Arguments<'q>, sqlx::Error>
    where
        DB: BindArrays,
        Option<&'q str>: Encode<'q, DB> + Type<DB>,
        Option<i32>: Encode<'q, DB> + Type<DB>,
        Option<i64>: Encode<'q, DB> + Type<DB>,
    {
        let mut args = DB::Arguments::<'q>::default();
        for param in &self.params {
            let added = match param {
                Param::Primitive => args.add(values.primitive),
                Param::Key => args.add(values.key),
                Param::Name => args.add(values.name),
                Param::Owner => args.add(values.owner),
                Param::Holder => args.add(values.holder),
                Param::Next => args.add(values.next),
                Param::Kind => args.add(values.kind),
                Param::Permits => args.add(values.permits),
                Param::Token => args.add(values.token),
                Param::Ttl => args.add(values.ttl),
                Param::Clock => args.add(values.clock),
                Param::Waiter => args.add(values.waiter),
                Param::Stay => args.add(values.stay),
                Param::Note => args.add(values.note),
                Param::Weight => args.add(values.weight),
                Param::Indexes
                | Param::Keys
                | Param::Owners
                | Param::Ttls
                | Param::HoldIndexes
                | Param::Primitives
                | Param::HoldKeys
                | Param::Holders
                | Param::Kinds
                | Param::HoldTtls => DB::add_array(&mut args, *param, values),
            };
            added.map_err(sqlx::Error::Encode)?;
        }
        Ok(args)
    }
}

/// A database's binding of [`Values`]' arrays: PostgreSQL's `int4[]`, `text[]` and `int8[]`;
/// the other dialects have no arrays, and a statement of theirs that named one fails to bind.
pub(crate) trait BindArrays: Database {
    /// Adds the array `param` (one of the batch's) from `values` to `args`.
    fn add_array<'q>(
        args: &mut Self::Arguments<'q>,
        param: Param,
        values: &Values<'q>,
    ) -> Result<(), sqlx::error::BoxDynError>;
}

#[cfg(feature = "postgres")]
impl BindArrays for sqlx::Postgres {
    fn add_array<'q>(
        args: &mut sqlx::postgres::PgArguments,
        param: Param,
        values: &Values<'q>,
    ) -> Result<(), sqlx::error::BoxDynError> {
        match param {
            Param::Indexes => args.add(values.indexes),
            Param::Keys => args.add(values.keys),
            Param::Owners => args.add(values.owners),
            Param::Ttls => args.add(values.ttls),
            Param::HoldIndexes => args.add(values.hold_indexes),
            Param::Primitives => args.add(values.primitives),
            Param::HoldKeys => args.add(values.hold_keys),
            Param::Holders => args.add(values.holders),
            Param::Kinds => args.add(values.kinds),
            Param::HoldTtls => args.add(values.hold_ttls),
            scalar => Err(format!("{scalar:?} is not an array").into()),
        }
    }
}

#[cfg(feature = "mysql")]
impl BindArrays for sqlx::MySql {
    fn add_array<'q>(
        _: &mut sqlx::mysql::MySqlArguments,
        param: Param,
        _: &Values<'q>,
    ) -> Result<(), sqlx::error::BoxDynError> {
        Err(format!("{param:?}: MySQL binds no arrays").into())
    }
}

#[cfg(feature = "sqlite")]
impl BindArrays for sqlx::Sqlite {
    fn add_array<'q>(
        _: &mut sqlx::sqlite::SqliteArguments<'q>,
        param: Param,
        _: &Values<'q>,
    ) -> Result<(), sqlx::error::BoxDynError> {
        Err(format!("{param:?}: SQLite binds no arrays").into())
    }
}

/// A connection pool of one dialect: the database it reaches, so that a statement's values
/// bind for it ([`Statement::arguments`]) in code written once for every dialect.
pub(crate) trait DialectPool {
    /// The sqlx database.
    type Db: Database;

    /// `statement`'s arguments from `values`, for this pool's database.
    fn arguments<'q>(
        &self,
        statement: &Statement,
        values: &Values<'q>,
    ) -> Result<<Self::Db as Database>::Arguments<'q>, sqlx::Error>;
}

#[cfg(feature = "mysql")]
impl DialectPool for crate::mysql_pool::MySqlConnections {
    type Db = sqlx::MySql;

    fn arguments<'q>(
        &self,
        statement: &Statement,
        values: &Values<'q>,
    ) -> Result<sqlx::mysql::MySqlArguments, sqlx::Error> {
        statement.arguments::<sqlx::MySql>(values)
    }
}

#[cfg(feature = "postgres")]
impl DialectPool for crate::pg_pool::PgConnections {
    type Db = sqlx::Postgres;

    fn arguments<'q>(
        &self,
        statement: &Statement,
        values: &Values<'q>,
    ) -> Result<sqlx::postgres::PgArguments, sqlx::Error> {
        statement.arguments::<sqlx::Postgres>(values)
    }
}

#[cfg(feature = "sqlite")]
impl DialectPool for sqlx::SqlitePool {
    type Db = sqlx::Sqlite;

    fn arguments<'q>(
        &self,
        statement: &Statement,
        values: &Values<'q>,
    ) -> Result<sqlx::sqlite::SqliteArguments<'q>, sqlx::Error> {
        statement.arguments::<sqlx::Sqlite>(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_binds_every_use_in_order() {
        let s = Statement::new(
            Dialect::MySql,
            "INSERT INTO t VALUES (:key, :owner, '00:00:00') ON DUPLICATE KEY UPDATE owner = IF(owner <=> :owner, :owner, owner), ttl = :ttl",
        );
        assert_eq!(
            s.as_str(),
            "INSERT INTO t VALUES (?, ?, '00:00:00') ON DUPLICATE KEY UPDATE owner = IF(owner <=> ?, ?, owner), ttl = ?"
        );
        assert_eq!(
            s.params(),
            [Param::Key, Param::Owner, Param::Owner, Param::Owner, Param::Ttl]
        );
    }

    #[test]
    fn postgres_and_sqlite_number_by_parameter_not_by_appearance() {
        let template = "UPDATE t SET e = now() + (:ttl::int8 * interval '1 microsecond') WHERE k = :key AND o = :owner AND e > :ttl";
        let pg = Statement::new(Dialect::Postgres, template);
        assert_eq!(
            pg.as_str(),
            "UPDATE t SET e = now() + ($3::int8 * interval '1 microsecond') WHERE k = $1 AND o = $2 AND e > $3"
        );
        assert_eq!(pg.params(), [Param::Key, Param::Owner, Param::Ttl]);
        let lite = Statement::new(Dialect::Sqlite, template);
        assert!(
            lite.as_str().contains("k = ?1 AND o = ?2 AND e > ?3"),
            "{}",
            lite.as_str()
        );
    }

    #[test]
    fn plain_colons_stay() {
        let s = Statement::new(Dialect::Postgres, "SELECT 'a:b', x::text, :unknown, v := 1");
        assert_eq!(s.as_str(), "SELECT 'a:b', x::text, :unknown, v := 1");
        assert!(s.params().is_empty());
    }
}
