//! The shared conformance suite against caches on the in-memory store (`memory://`), through
//! the suite's object view of a cache. The store lives in one process, so the cases that need a
//! writer in a child process report SKIPPED with that reason.

#[path = "common/storage.rs"]
mod storage;

use storage::StoreStorage;
use stowage_remote::{RemoteFactory, RemoteOptions};

const BASE: &str = "memory://conformance";

fn factory() -> RemoteFactory {
    RemoteFactory::mapped(
        BASE,
        RemoteOptions {
            node_cache: Some(std::env::temp_dir().join("stowage-remote-conformance-node")),
            ..RemoteOptions::default()
        },
    )
}

fn storage() -> StoreStorage {
    StoreStorage { base: BASE.into(), options: Vec::new(), name: "memory://", shared: false }
}

stowage_conformance::backend_conformance!(factory(), storage = storage());
