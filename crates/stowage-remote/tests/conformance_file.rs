//! The shared conformance suite against caches in local directories, written through
//! `file://`: the suite's file-level cases (corruption, stray files, crashes, power loss, I/O
//! errors) act on the cache's objects as files.

use stowage_remote::{RemoteFactory, RemoteOptions};

/// The factory under test: caches at the suite's paths, row tables in a node cache shared by the
/// test processes.
fn factory() -> RemoteFactory {
    RemoteFactory::new(RemoteOptions {
        node_cache: Some(std::env::temp_dir().join("stowage-remote-conformance-node")),
        ..RemoteOptions::default()
    })
}

stowage_conformance::backend_conformance!(factory());
