//! The shared conformance suite, run against the NUMPY_10 backend with small collection files so
//! that rotation, corruption and crash cases touch several files.

use stowage_npy::{NpyFactory, NpyOptions};

fn factory() -> NpyFactory {
    NpyFactory { options: NpyOptions { collection_size: 16, ..NpyOptions::default() } }
}

stowage_conformance::backend_conformance!(factory());
