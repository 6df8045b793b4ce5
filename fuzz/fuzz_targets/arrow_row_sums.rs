//! A segment's row checksums (`segments/segment_N.sums`, `stowage_arrow::fuzzing::row_sums::RowSums`): a
//! hostile file mapped and checked by `open`, verified, and read row by row (past the end too).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_arrow::fuzzing::row_sums::RowSums;

fuzz_target!(|data: &[u8]| {
    let path = stowage_fuzz::write_scratch("segment_000000.sums", data);
    let Ok(sums) = RowSums::open(&path) else { return };
    let _ = sums.verify();
    for row in 0..sums.rows().min(256) + 2 {
        sums.prefetch(row);
        assert_eq!(sums.get(row).is_some(), row < sums.rows());
    }
    let _ = sums.get(usize::MAX);
});
