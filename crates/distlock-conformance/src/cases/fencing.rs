//! Fencing tokens strictly increase per name, over clients and over expiry.

use distlock_core::{AcquireOptions, Fencing};

use super::{take, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 8: Fencing tokens strictly increase over successive acquisitions by different clients,
/// including one that follows an expiry.
pub async fn c08_fencing_tokens_increase(ctx: Ctx) -> Outcome {
    if ctx.caps().fencing == Fencing::None {
        return ctx.skip(Reason::Fencing, "the backend issues no fencing tokens");
    }
    let clients = [ctx.client().await, ctx.client().await, ctx.client().await];
    let name = ctx.name("fence");
    let mut last = None;
    for round in 0..12 {
        let guard = clients[round % 3]
            .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
            .await
            .expect("acquired");
        let token = guard.fencing_token().expect("the backend issues fencing tokens");
        assert!(
            last < Some(token),
            "round {round}: token {token} is not above {last:?}"
        );
        last = Some(token);
        assert!(guard.release().await.expect("works"));
    }
    // After an expiry (TTL backends) the next holder's token is still higher.
    if ctx.caps().expiry == distlock_core::Expiry::Ttl {
        let raw = ctx.backend().await;
        let lease = take(&*raw, &name, ctx.short_ttl()).await;
        let expired = lease.fencing_token().expect("token");
        assert!(last < Some(expired));
        let guard = clients[0]
            .acquire_with(
                &name,
                &AcquireOptions::new().ttl(LONG_TTL).wait_for(ctx.short_ttl() * 10),
            )
            .await
            .expect("acquired after the expiry");
        assert!(
            guard.fencing_token() > Some(expired),
            "a token after an expiry went back"
        );
        assert!(guard.release().await.expect("works"));
    }
    // Different names do not share a sequence that could go back either.
    let other = ctx.name("fence-other");
    let guard = clients[1]
        .acquire_with(&other, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");
    assert!(guard.fencing_token().is_some());
    assert!(guard.release().await.expect("works"));
    Outcome::Passed
}
