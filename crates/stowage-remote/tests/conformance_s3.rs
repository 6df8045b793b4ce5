//! The shared conformance suite against caches on S3: moto's server on 127.0.0.1, one per test
//! process, which the suite's writer processes reach too ([`MotoServer::shared`]).

#[path = "common/storage.rs"]
mod storage;

use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use storage::StoreStorage;
use stowage_conformance::FaultInjector;
use stowage_remote::cache::StoreOpener;
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
use stowage_remote::{RemoteFactory, RemoteOptions};
use stowage_test_support::moto::MotoServer;

const BUCKET: &str = "conformance";

/// The process's server, with the bucket made.
///
/// # Panics
/// When moto cannot run: `cargo xtask test` installs it (`moto[server]`).
fn moto() -> &'static MotoServer {
    static BUCKET_MADE: OnceLock<()> = OnceLock::new();
    let moto = MotoServer::shared("conformance_s3").expect(
        "moto's S3 server is needed: pip install 'moto[server]==5.2.1' (cargo xtask test does)",
    );
    BUCKET_MADE.get_or_init(|| moto.create_bucket(BUCKET));
    moto
}

fn options() -> Vec<(String, String)> {
    moto().s3_options().into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Set in a failed-flush writer's environment ([`PutFaults`]): every put after this many fails.
const FAIL_PUTS_AFTER: &str = "STOWAGE_TEST_FAIL_PUTS_AFTER";

fn factory() -> RemoteFactory {
    let fail_after: Option<usize> =
        std::env::var(FAIL_PUTS_AFTER).ok().map(|n| n.parse().expect("a count"));
    let store_opener = fail_after.map(|after| {
        let open: StoreOpener = Arc::new(move |url: &str, options: &[(&str, &str)]| {
            let (store, faulty) = FaultyStore::wrap(url, options)?;
            faulty.inject(
                Rule::once(Operation::Put, "", Fault::Unavailable).after(after).times(usize::MAX),
            );
            Ok(store)
        });
        open
    });
    RemoteFactory::mapped(
        &format!("s3://{BUCKET}"),
        RemoteOptions {
            node_cache: Some(std::env::temp_dir().join("stowage-remote-conformance-node")),
            store_options: options(),
            store_opener,
            ..RemoteOptions::default()
        },
    )
}

/// Makes a writer's puts fail: S3 has no file syncs for the suite's built-in injector to fail,
/// so the failed-flush case gets 503s from the store instead (a store that went away, sticky).
struct PutFaults;

impl FaultInjector for PutFaults {
    fn name(&self) -> &str {
        "FaultyStore (503 on every put after the first n)"
    }

    fn fail_syncs(&self, _dir: &Path, after: u64, _stop: &Path) -> Vec<(OsString, OsString)> {
        vec![(FAIL_PUTS_AFTER.into(), after.to_string().into())]
    }
}

fn storage() -> StoreStorage {
    StoreStorage {
        base: format!("s3://{BUCKET}"),
        options: options(),
        name: "s3 (moto)",
        shared: true,
    }
}

stowage_conformance::backend_conformance!(factory(), faults = PutFaults, storage = storage());
