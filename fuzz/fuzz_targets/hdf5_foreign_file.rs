//! A whole foreign HDF5 file, read the way `stowage keys`, `stowage get` and `stowage verify` read
//! an aenet dataset file: `TorchCache::open` (libhdf5 parses the superblock, groups, attributes,
//! datasets and index tables; stowage bounds what it allocates from them), the entries, each
//! entry's features and derivatives, the structure and full checks (`TorchCache::validate`).
//! Both read paths: the direct reader (chunks and global heap decoded by stowage from the map)
//! and libhdf5's `H5Dread`, which stowage lets read a row only after checking the row's global
//! heap reference itself (`direct::libhdf5_guard`, exercised here in-process).
//!
//! Seeded with aenet's own files (the reference set, when `STOWAGE_REFERENCE_DIR` is set). The
//! input is written to a scratch file on `/dev/shm`, as libhdf5 reads from a path.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_core::ValidationLevel;
use stowage_hdf5::{ReadPath, TorchCache};

/// Entries read per input at most (a hostile index can list many).
const ENTRIES: usize = 32;

/// LeakSanitizer's suppressions: memory libhdf5 allocates and never frees on some of its error
/// paths through a damaged file (a few hundred bytes per failed open, in libhdf5, not stowage;
/// libhdf5 is not instrumented, so its stacks end at its first frame). Leaks in stowage's own
/// code are still reported.
#[unsafe(no_mangle)]
pub extern "C" fn __lsan_default_suppressions() -> *const std::ffi::c_char {
    c"leak:libhdf5\n".as_ptr()
}

fuzz_target!(|data: &[u8]| {
    let path = stowage_fuzz::write_scratch("foreign.h5", data);
    for read_path in [ReadPath::Direct, ReadPath::Libhdf5] {
        let Ok(Some(cache)) = TorchCache::open_with(&path, read_path) else { continue };
        let _ = cache.reads_directly();
        let _ = (cache.signature(), cache.unchecked_entries(), cache.derivative_layout());
        if let Some(&first) = cache.feature_entries().first() {
            let _ = cache.features(first);
        }
        let _ = cache.check(ValidationLevel::Structure);
        for entry in cache.entries().into_iter().take(ENTRIES) {
            let _ = cache.features(entry);
            if let (Ok(Some(d)), Some(layout)) =
                (cache.derivatives(entry), cache.derivative_layout())
            {
                let _ = d.check(layout.n_radial_features, layout.n_angular_features, layout.multi);
            }
        }
    }
    let _ = TorchCache::validate(&path, ValidationLevel::Full);
});
