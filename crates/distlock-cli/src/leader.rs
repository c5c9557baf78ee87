//! `distlock leader`: run a command while leading an election, or show or follow its leader.
//!
//! A campaign waits for the leadership (as `exec` waits for its lock), publishes `--value`,
//! and runs the command under the leadership exactly as `exec` runs one under a lock
//! ([`crate::exec::run_under`]): renewed while it runs, stopped if the leadership is lost,
//! resigned when it exits, the same exit codes. `--show` reads the leader once and
//! `--observe` prints each change; neither campaigns.

use std::fmt;

use distlock::{AcquireOptions, Election, Error, Leader, LockName, Result, MAX_LEADER_VALUE_BYTES};
use futures::StreamExt;

use crate::cli::LeaderArgs;
use crate::exec::{self, Hold, Run};
use crate::exit;

pub async fn run(url: &str, args: LeaderArgs) -> Result<u8> {
    // Bad arguments are reported before the store is contacted.
    LockName::new(args.name.as_str())?;
    if let Some(value) = &args.value {
        if value.len() > MAX_LEADER_VALUE_BYTES {
            return Err(Error::invalid_options(format!(
                "--value is {} bytes long; a leader's value may have {MAX_LEADER_VALUE_BYTES}",
                value.len()
            )));
        }
    }
    let client = distlock::connect(url).await?;
    let election = client.election(args.name.as_str())?;
    if args.show {
        return show(&election, args.json).await;
    }
    if args.observe {
        return observe(&election, args.json).await;
    }
    let value = args.value.clone().unwrap_or_default();
    let opts = AcquireOptions::new()
        .ttl(args.ttl)
        .wait(exec::wait(args.no_wait, args.wait));
    let leadership = election.campaign_with(value, &opts).await?;
    let command = Run {
        name: &args.name,
        command: &args.command,
        token_env: args
            .term_env
            .as_deref()
            .map(|v| (v, "fencing tokens (--term-env)")),
        ttl: args.ttl,
        grace: args.grace,
    };
    let held = Leadership(&args.name);
    exec::run_under(&client, Hold::leadership(leadership), &held, &command).await
}

/// What a leader holds, in messages.
struct Leadership<'a>(&'a str);

impl fmt::Display for Leadership<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the leadership of {:?}", self.0)
    }
}

/// Prints the leader (or that no one leads). Round trips: one read.
async fn show(election: &Election, json: bool) -> Result<u8> {
    let leader = election.leader().await?;
    println!("{}", line(election, leader.as_ref(), json));
    Ok(exit::OK)
}

/// Prints each change of leader until SIGINT or SIGTERM; a read that fails is reported on
/// stderr and the watch goes on.
async fn observe(election: &Election, json: bool) -> Result<u8> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| Error::backend("signals", e))?;
    let mut changes = election.observe();
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(leader)) => println!("{}", line(election, Some(&leader), json)),
                Some(Err(error)) => eprintln!("distlock: reading the leader failed ({error}); still watching"),
                None => return Ok(exit::OK),
            },
            _ = tokio::signal::ctrl_c() => return Ok(exit::OK),
            _ = terminate.recv() => return Ok(exit::OK),
        }
    }
}

/// One line about `leader` of `election`: a sentence, or a JSON object.
fn line(election: &Election, leader: Option<&Leader>, json: bool) -> String {
    let name = election.name().as_str();
    if json {
        let leader = leader.map(|l| {
            serde_json::json!({
                "value": l.value,
                "term": l.term.map(|t| t.get()),
                "owner": l.owner,
            })
        });
        return serde_json::json!({ "name": name, "leader": leader }).to_string();
    }
    match leader {
        Some(Leader {
            value,
            term: Some(term),
            ..
        }) => format!("{name}: led by {value} (term {term})"),
        Some(Leader { value, .. }) => format!("{name}: led by {value} (no term: the store does not fence)"),
        None => format!("{name}: no leader"),
    }
}
