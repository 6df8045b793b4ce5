//! The quick form of the remote multi-writer campaign (issue 18): eight writer processes on one
//! `file://` cache, each its own rank, rounds of puts and a flush, with random `kill -9` and
//! restarts with the same rank: nothing acknowledged lost, no key twice, the merge's result
//! independent of timing, every flush's conditional puts bounded (see
//! `stowage_reliability::remote::writers`).
//!
//! One test in a binary of its own: it forks.

use std::time::Duration;

use stowage_reliability::remote::writers::{Config, MAX_PUTS_PER_FLUSH, file_url, run};

#[test]
fn eight_killed_and_restarted_writers_lose_nothing_acknowledged() {
    let work = tempfile::tempdir().unwrap();
    let config = Config {
        url: file_url(work.path()),
        store_options: Vec::new(),
        writers: 8,
        rounds: 10,
        keys_per_round: 20,
        kills: 12,
        kill_gap: Duration::from_millis(100),
        pause: Duration::from_millis(100),
        seed: 18,
        work: work.path().to_path_buf(),
        timeout_secs: 120,
    };
    let report = run(&config).unwrap();
    eprintln!("remote writers: {report:?}");
    assert!(report.problems.is_empty(), "{}", report.problems.join("\n"));
    assert!(report.kills >= 6, "most kills land mid-run: {report:?}");
    assert_eq!(report.keys, 8 * 10 * 20);
    assert!(report.acked_flushes >= 8 * 10 - report.kills, "{report:?}");
    assert!(report.max_puts_per_flush <= MAX_PUTS_PER_FLUSH, "{report:?}");
}
