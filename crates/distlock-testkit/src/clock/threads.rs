//! A server's threads all read the clock a [`StoreClock`] set: libfaketime's single-threaded
//! build, re-reading its offset file at every call, sometimes answers a thread with the true
//! time while another thread parses the file (Debian's 0.9.10: about one reading in a
//! thousand with eight threads at once). A server whose clock stood an hour back then timed
//! one statement an hour ahead: under MariaDB, an acquisition that found a lock granted a
//! millisecond before already expired.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use super::StoreClock;

/// Set in the child process that reads the clock.
const PROBE: &str = "DISTLOCK_TESTKIT_CLOCK_PROBE";
/// This test's name, as the child is asked to run it.
const NAME: &str = "clock::threads::threads_reading_a_stepped_clock_at_once_all_read_it_stepped";
/// How many threads read at once, and for how long.
const THREADS: usize = 8;
const READING: Duration = Duration::from_secs(3);

#[test]
fn threads_reading_a_stepped_clock_at_once_all_read_it_stepped() {
    if std::env::var_os(PROBE).is_some() {
        probe();
        return;
    }
    let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
    clock.jump(-3600).expect("an hour back");
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .envs(clock.env())
        .env(PROBE, "1")
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the probe failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts: Vec<u64> = stdout
        .lines()
        .find_map(|line| line.split_once("PROBE ").map(|(_, counts)| counts))
        .expect("the probe reports")
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
        .split(' ')
        .map(|n| n.parse().expect("a count"))
        .collect();
    let [readings, unstepped] = counts[..] else {
        panic!("the probe's report: {stdout}");
    };
    assert!(readings > 0, "the probe read the clock");
    assert_eq!(
        unstepped, 0,
        "of {readings} readings of a clock set an hour back, {unstepped} read the true time"
    );
}

/// In the child, under the clock: [`THREADS`] threads read the wall clock for [`READING`];
/// prints how many readings there were and how many were not an hour back (the monotonic
/// clock, which the clock does not move, times the reading).
fn probe() {
    let stepped = SystemTime::now();
    let limit = stepped + Duration::from_secs(1800);
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            thread::spawn(move || {
                let until = Instant::now() + READING;
                let (mut readings, mut unstepped) = (0u64, 0u64);
                while Instant::now() < until {
                    readings += 1;
                    unstepped += u64::from(SystemTime::now() > limit);
                }
                (readings, unstepped)
            })
        })
        .collect();
    let (readings, unstepped) = threads
        .into_iter()
        .map(|t| t.join().expect("a reader thread"))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    println!("PROBE {readings} {unstepped}");
}
