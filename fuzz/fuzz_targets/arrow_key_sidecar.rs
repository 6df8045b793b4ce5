//! A segment's key sidecar (`segments/segment_N.keys`, `stowage_arrow::fuzzing::key_sidecar::KeySidecar`):
//! a hostile file mapped and checked by `open`, verified, and probed for keys, every candidate
//! row confirmed or not, as a lookup does. A row `find` returns is below `rows()`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_arrow::fuzzing::key_sidecar::KeySidecar;

fuzz_target!(|data: &[u8]| {
    let path = stowage_fuzz::write_scratch("segment_000000.keys", data);
    let Ok(sidecar) = KeySidecar::open(&path) else { return };
    let _ = sidecar.verify();
    for i in 0..8 {
        let key = format!("sample-{i:06}");
        for confirm in [true, false] {
            if let Some(row) = sidecar.find(&key, |_| confirm) {
                assert!(row < sidecar.rows(), "row {row} of {} rows", sidecar.rows());
            }
        }
    }
});
