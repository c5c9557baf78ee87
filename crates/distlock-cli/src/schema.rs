//! `distlock schema`: prints the DDL that a DBA runs once for a SQL store (its tables, on
//! PostgreSQL its functions, and the schema's version) in the store's dialect. Connects to
//! nothing; the DDL itself comes from `distlock-sql`.

use clap::Args;
use distlock::sql::SqlConfig;

use crate::exit;

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The lock table (its companions are named after it); default `distlock_locks`.
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
}

pub fn run(url: &str, args: SchemaArgs) -> distlock::Result<u8> {
    let mut config = SqlConfig::from_url(url)?;
    if let Some(table) = &args.table {
        config = config.with_table(table)?;
    }
    print!("{}", config.ddl());
    Ok(exit::OK)
}
