//! `distlock status`: who holds a lock, a semaphore's permits or a read-write lock, as the
//! store sees it.

use distlock::{Error, LockClient, LockKind, LockName, LockState, Primitive, Result};
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
    match (args.semaphore, args.rw) {
        (true, _) => holders(&client, &name, Primitive::Semaphore, args.json).await,
        (false, true) => holders(&client, &name, Primitive::RwLock, args.json).await,
        (false, false) => mutex(&client, &name, args.json).await,
    }
}

/// The lock `name`: one line, `NAME: held by OWNER (fencing token T, 1.2s left)` or
/// `NAME: free (last fencing token T)`.
async fn mutex(client: &LockClient, name: &LockName, json: bool) -> Result<u8> {
    let state = client
        .backend()
        .inspect(name, Primitive::Mutex)
        .await?
        .into_lock();
    let status = Status {
        name: name.as_str(),
        held: state.is_held(),
        owner: state.owner.as_deref(),
        fencing_token: state.fencing.map(|t| t.get()),
        remaining_ms: state.remaining.map(|d| d.as_millis()),
    };
    if json {
        println!("{}", serde_json::to_string(&status).unwrap_or_default());
        return Ok(exit::OK);
    }
    match (&state.owner, state.fencing) {
        (Some(owner), _) => println!("{name}: held by {owner} ({})", details(&state).join(", ")),
        (None, Some(token)) => println!("{name}: free (last fencing token {token})"),
        (None, None) => println!("{name}: free"),
    }
    Ok(exit::OK)
}

#[derive(Serialize)]
struct Holders<'a> {
    name: &'a str,
    /// `"semaphore"` or `"rw-lock"`.
    primitive: &'static str,
    held: bool,
    /// A semaphore's number of permits, as its holders gave it.
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    holders: Vec<Hold<'a>>,
}

#[derive(Serialize)]
struct Hold<'a> {
    /// `"permit"`, `"read"`, `"upgradeable"` or `"write"`.
    kind: &'static str,
    /// How many permits a semaphore's hold took.
    #[serde(skip_serializing_if = "Option::is_none")]
    weight: Option<u32>,
    owner: Option<&'a str>,
    fencing_token: Option<u64>,
    remaining_ms: Option<u128>,
}

/// The live holders of the semaphore or read-write lock `name`: a summary line, then one line
/// per holder, oldest fencing token first.
async fn holders(client: &LockClient, name: &LockName, primitive: Primitive, json: bool) -> Result<u8> {
    if !client.capabilities().offers(primitive) {
        return Err(Error::NotSupported {
            backend: client.backend().backend(),
            what: match primitive {
                Primitive::Semaphore => "semaphores",
                _ => "read-write locks",
            },
        });
    }
    let mut states = client.backend().inspect(name, primitive).await?.holders;
    states.sort_by_key(|s| (s.fencing.is_none(), s.fencing, s.owner.clone()));
    let permits = states.iter().find_map(|s| match s.kind {
        LockKind::Permit { permits, .. } => Some(permits),
        _ => None,
    });
    if json {
        let report = Holders {
            name: name.as_str(),
            primitive: primitive.as_str(),
            held: !states.is_empty(),
            permits,
            holders: states
                .iter()
                .map(|s| Hold {
                    kind: kind_word(s.kind),
                    weight: matches!(s.kind, LockKind::Permit { .. }).then(|| s.kind.weight()),
                    owner: s.owner.as_deref(),
                    fencing_token: s.fencing.map(|t| t.get()),
                    remaining_ms: s.remaining.map(|d| d.as_millis()),
                })
                .collect(),
        };
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
        return Ok(exit::OK);
    }
    println!("{name} ({primitive}): {}", summary(&states, permits));
    for state in &states {
        let owner = state.owner.as_deref().unwrap_or("an unknown owner");
        let details = details(state);
        let details = if details.is_empty() {
            String::new()
        } else {
            format!(" ({})", details.join(", "))
        };
        println!("  {:<6} held by {owner}{details}", kind_word(state.kind));
    }
    Ok(exit::OK)
}

/// What the holders of a semaphore (of `permits`) or a read-write lock hold, in a few words.
/// A semaphore counts the permits its holders took (a hold may take several).
fn summary(states: &[LockState], permits: Option<u32>) -> String {
    let readers = states.iter().filter(|s| s.kind.is_read()).count();
    let upgradeable = states.iter().any(|s| s.kind == LockKind::UpgradeableRead);
    match (states.len(), permits) {
        (0, _) => "free".to_owned(),
        (_, Some(permits)) => {
            let taken: u32 = states.iter().map(|s| s.kind.weight()).sum();
            format!("{taken} of {permits} permits held")
        }
        (_, None) if readers == 1 && upgradeable => "held by 1 reader (upgradeable)".to_owned(),
        (_, None) if upgradeable => format!("held by {readers} readers (one upgradeable)"),
        (_, None) if readers > 0 => format!("held by {readers} reader{}", plural(readers)),
        (_, None) => "held by a writer".to_owned(),
    }
}

/// `3 permits` (a hold of several), `fencing token T` and `1.2s left`, those that are known.
fn details(state: &LockState) -> Vec<String> {
    let weight = match state.kind {
        LockKind::Permit { weight, .. } if weight > 1 => Some(format!("{weight} permits")),
        _ => None,
    };
    let token = state.fencing.map(|t| format!("fencing token {t}"));
    let left = state.remaining.map(|d| format!("{:.1}s left", d.as_secs_f64()));
    [weight, token, left].into_iter().flatten().collect()
}

fn kind_word(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Permit { .. } => "permit",
        LockKind::Read => "read",
        LockKind::UpgradeableRead => "upgradeable",
        LockKind::Write => "write",
        _ => "lock",
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(kind: LockKind) -> LockState {
        LockState::held("owner".to_owned(), None, None).with_kind(kind)
    }

    #[test]
    fn a_semaphore_counts_the_permits_its_holders_took_not_the_holders() {
        let states = [holder(LockKind::permits(4, 3)), holder(LockKind::permit(4))];
        assert_eq!(summary(&states, Some(4)), "4 of 4 permits held");
        assert_eq!(kind_word(LockKind::permits(4, 3)), "permit");
    }

    #[test]
    fn an_upgradeable_reader_is_a_reader_not_a_writer() {
        let states = [holder(LockKind::UpgradeableRead), holder(LockKind::Read)];
        assert_eq!(summary(&states, None), "held by 2 readers (one upgradeable)");
        assert_eq!(summary(&states[..1], None), "held by 1 reader (upgradeable)");
        assert_eq!(kind_word(LockKind::UpgradeableRead), "upgradeable");
    }
}
