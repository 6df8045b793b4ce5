//! Generates the committed known-answer fixture `fixtures/numpy10/`:
//!
//! ```text
//! cargo run -p stowage-npy --example numpy10_fixture -- fixtures/numpy10
//! ```
//!
//! The samples are defined by formula in `tests/common/fixture.rs`. Collection-file uids are random
//! (as hangar's are), so a regenerated fixture has other file names but the same keys, values,
//! checksums, slots and shapes.

#[path = "../tests/common/fixture.rs"]
mod fixture;

use stowage_core::Backend;
use stowage_npy::{NpyBackend, NpyOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).ok_or("usage: numpy10_fixture OUT_DIR")?;
    let out = std::path::Path::new(&out);
    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    let options = NpyOptions { collection_size: fixture::COLLECTION_SIZE, ..NpyOptions::default() };
    let mut cache = NpyBackend::create(out, &fixture::schema(), options)?;
    for i in 0..fixture::SAMPLES {
        cache.put(&fixture::key(i), &fixture::sample(i))?;
    }
    cache.finalize()?;
    drop(cache);
    // The writer lock holds no data; keep the committed fixture free of it.
    std::fs::remove_file(out.join(".stowage.lock"))?;
    println!("wrote {} samples to {}", fixture::SAMPLES, out.display());
    Ok(())
}
