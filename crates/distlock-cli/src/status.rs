//! `distlock status`: who holds a lock, as the store sees it.

use distlock::{LockName, Result};
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::exit;

#[derive(Serialize)]
struct Status<'a> {
    name: &'a str,
    held: bool,
    owner: Option<&'a str>,
    fencing_token: Option<u64>,
    remaining_ms: Option<u128>,
}

pub async fn run(url: &str, args: StatusArgs) -> Result<u8> {
    let name = LockName::new(&args.name)?;
    let client = distlock::connect(url).await?;
    let state = client.backend().inspect(&name).await?;
    let status = Status {
        name: name.as_str(),
        held: state.is_held(),
        owner: state.owner.as_deref(),
        fencing_token: state.fencing.map(|t| t.get()),
        remaining_ms: state.remaining.map(|d| d.as_millis()),
    };
    if args.json {
        println!("{}", serde_json::to_string(&status).unwrap_or_default());
        return Ok(exit::OK);
    }
    let token = state.fencing.map(|t| format!("fencing token {t}"));
    match (&state.owner, state.remaining) {
        (Some(owner), remaining) => {
            let left = remaining.map(|d| format!("{:.1}s left", d.as_secs_f64()));
            let details: Vec<String> = [token, left].into_iter().flatten().collect();
            println!("{}: held by {owner} ({})", name, details.join(", "));
        }
        (None, _) => match token {
            Some(token) => println!("{name}: free (last {token})"),
            None => println!("{name}: free"),
        },
    }
    Ok(exit::OK)
}
