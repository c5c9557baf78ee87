//! A store whose server runs on a clock the harness steps (libfaketime): starting it, and
//! the steps.

use std::time::Duration;

use distlock_testkit::{
    HarnessError, MariaDbOptions, MariaDbServer, MemcachedOptions, MemcachedServer, PostgresOptions,
    PostgresServer, RedisOptions, RedisServer, StoreClock,
};

use super::{Backend, Store};
use crate::history::{now, Nanos};

impl Store {
    /// Starts `backend`'s server as [`start`](Self::start) does, on a clock the harness steps by
    /// `clock_step` (see [`jump_clock`](Self::jump_clock)) when given and the backend has one
    /// (see [`Backend::clock_jumps`]).
    pub fn start_on(backend: Backend, clock_step: Option<Duration>) -> Result<Self, HarnessError> {
        let Some(step) = clock_step.filter(|_| backend.clock_jumps()) else {
            return Self::start(backend);
        };
        let clock = StoreClock::new()?;
        let on_clock = || RedisOptions {
            clock: Some(clock.clone()),
            ..RedisOptions::default()
        };
        let store = match backend {
            Backend::Redis => Store::Redis(RedisServer::start_with(RedisOptions {
                persistence: true,
                ..on_clock()
            })?),
            Backend::RedisVolatile => Store::Redis(RedisServer::start_with(on_clock())?),
            // Master 1 only: master 0 is the one killed, master 2 the one paused.
            _ if backend.is_redlock() => Store::Redlock(vec![
                RedisServer::start()?,
                RedisServer::start_with(on_clock())?,
                RedisServer::start()?,
            ]),
            Backend::Mariadb => Store::Mariadb(MariaDbServer::start_with(MariaDbOptions {
                clock: Some(clock.clone()),
                ..MariaDbOptions::default()
            })?),
            Backend::Postgres => Store::Postgres(PostgresServer::start_with(PostgresOptions {
                clock: Some(clock.clone()),
                ..PostgresOptions::default()
            })?),
            Backend::Memcached => Store::Memcached(MemcachedServer::start_with(MemcachedOptions {
                clock: Some(clock.clone()),
                ..MemcachedOptions::default()
            })?),
            _ => return Self::start(backend),
        };
        Ok(Store::Clocked(Box::new(store), clock, step))
    }

    /// Whether its server runs on a clock the harness steps.
    pub fn has_clock(&self) -> bool {
        matches!(self, Store::Clocked(..))
    }

    /// Steps the server's clock by its step (ahead, or back with `back`), holds it there for
    /// `duration`, then steps it to the true time again (blocking). Returns what it stepped and
    /// the instants the two steps began (the jump, the restore): no time call of the server
    /// read a stepped clock before them. `None` without a clock.
    pub fn jump_clock(
        &self,
        back: bool,
        duration: Duration,
    ) -> Result<(String, Option<[Nanos; 2]>), HarnessError> {
        let Store::Clocked(store, clock, step) = self else {
            return Ok(("nothing".into(), None));
        };
        let step = i64::try_from(step.as_secs().max(1)).unwrap_or(i64::MAX);
        let step = if back { -step } else { step };
        let jumped = now();
        clock.jump(step)?;
        std::thread::sleep(duration);
        let restored = now();
        clock.jump(0)?;
        let whose = match **store {
            Store::Redlock(_) => "master 1",
            _ => "the server",
        };
        Ok((format!("{whose} ({step:+} s)"), Some([jumped, restored])))
    }
}
