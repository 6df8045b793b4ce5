//! The remote campaigns on S3 (moto's server on 127.0.0.1; skipped without python3's
//! `moto[server]` and boto3, required with `STOWAGE_REQUIRE_PYTHON=1`): eight writer processes
//! with `kill -9` on one `s3://` cache, then the network faults (lost answers, 503 and 409 on
//! every put, bodies cut short) on every kind of object.
//!
//! One test in a binary of its own: it forks.

use std::time::Duration;

use stowage_reliability::remote::faults::{self, Mode, Outcome, run_all, s3_store, totals};
use stowage_reliability::remote::writers::{Config, run};
use stowage_remote::faults::Fault;
use stowage_test_support::moto::MotoServer;

#[test]
fn on_s3_killed_writers_and_network_faults_lose_nothing_acknowledged() {
    let Some(moto) = MotoServer::start("remote campaigns on S3") else { return };
    moto.create_bucket("writers");
    moto.create_bucket("faults");
    let options: Vec<(String, String)> =
        moto.s3_options().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let work = tempfile::tempdir().unwrap();

    // Forks first, while this process has no runtime thread of its own.
    let config = Config {
        url: "s3://writers/cache".into(),
        store_options: options.clone(),
        writers: 8,
        rounds: 3,
        keys_per_round: 10,
        kills: 4,
        kill_gap: Duration::from_millis(300),
        pause: Duration::from_millis(30),
        seed: 18,
        work: work.path().join("writers"),
        timeout_secs: 300,
    };
    let started = std::time::Instant::now();
    let report = run(&config).unwrap();
    eprintln!("remote writers on s3: {report:?} in {:?}", started.elapsed());
    assert!(report.problems.is_empty(), "{}", report.problems.join("\n"));
    assert_eq!(report.keys, 8 * 3 * 10);

    // The quick form: each network fault once on every object kind, and an outage of 503s on
    // every object kind (the long form, `remote --s3`, runs the outages of every fault).
    let scenarios: Vec<_> = faults::network_subset()
        .into_iter()
        .filter(|s| s.mode == Mode::Once || s.fault == Fault::Unavailable)
        .collect();
    let started = std::time::Instant::now();
    let make = |i: usize| s3_store(&options, "faults", i);
    let outcomes = run_all(&scenarios, 0, &work.path().join("faults"), &make, &mut |_| {});
    eprintln!("remote faults on s3: {:?} in {:?}", totals(&outcomes), started.elapsed());
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.problems.is_empty()).collect();
    assert!(
        failed.is_empty(),
        "{}",
        failed
            .iter()
            .map(|o| format!("{}: {:?}", o.name, o.problems))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(outcomes.iter().all(|o| o.fired > 0), "every fault struck on S3");
}
