//! Leader election: three replicas of a service campaign to run its scheduler. One leads at a
//! time: it publishes its address, works under its term (pass the term with every write, so a
//! store of record can refuse a deposed leader's), stops the moment its leadership is lost,
//! and resigns when done, so the next replica takes over at once. A client that never
//! campaigns follows who leads.
//!
//! `cargo run --example leader_election [-- --url URL]` (default: the memory store; any store
//! whose capabilities include notes, `Capabilities::notes`).

use std::time::Duration;

use distlock::{Error, FencingToken, Result};
use futures::StreamExt;

/// How long each leader works before it steps down.
const TENURE: Duration = Duration::from_millis(400);
/// The replicas.
const REPLICAS: usize = 3;

#[tokio::main]
async fn main() -> Result<()> {
    run(&url_arg()).await.map(drop)
}

/// Runs the replicas against the store at `url`; returns the leaders the observer saw, in
/// order, with their terms.
pub async fn run(url: &str) -> Result<Vec<(String, Option<FencingToken>)>> {
    let name = format!("scheduler-{}", std::process::id());
    // Anyone may ask who leads; an election on a store without notes is NotSupported.
    let observer = distlock::connect(url).await?.election(name.as_str())?;
    let mut changes = observer.observe();
    let mut replicas = Vec::new();
    for replica in 0..REPLICAS {
        let client = distlock::connect(url).await?;
        let name = name.clone();
        replicas.push(tokio::spawn(async move {
            let election = client.election(name.as_str())?;
            let leadership = election.campaign(format!("10.0.0.{replica}:8080")).await?;
            println!("replica {replica} leads, term {}", term(leadership.term()));
            tokio::select! {
                () = tokio::time::sleep(TENURE) => {}
                reason = leadership.lost() => {
                    println!("replica {replica} lost the leadership ({reason}): stopped at once");
                    return Ok(());
                }
            }
            leadership.resign().await.map(drop)
        }));
    }
    let mut seen = Vec::new();
    while seen.len() < REPLICAS {
        let Some(change) = changes.next().await else { break };
        let leader = change?;
        println!("observer: {} leads (term {})", leader.value, term(leader.term));
        seen.push((leader.value, leader.term));
    }
    for replica in replicas {
        replica.await.map_err(|e| Error::backend("example", e))??;
    }
    Ok(seen)
}

/// A term as a word: stores that do not fence have none.
fn term(term: Option<FencingToken>) -> String {
    term.map_or_else(|| "none".to_owned(), |t| t.to_string())
}

fn url_arg() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "memory://leader-election-example".to_owned())
}
