//! A merged key-index run (`stowage_index_F_T.bin`, `stowage_arrow::fuzzing::merged_index::MergedIndex`):
//! a hostile file mapped and checked by `open`, verified, and probed for keys as a lookup does.
//! A candidate `find` offers or returns lies in the run's segment range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_arrow::fuzzing::merged_index::MergedIndex;

fuzz_target!(|data: &[u8]| {
    let path = stowage_fuzz::write_scratch("stowage_index_000000_000002.bin", data);
    let Ok(run) = MergedIndex::open(&path) else { return };
    let _ = run.verify();
    let _ = (run.entry(), run.keys(), run.new_keys());
    for i in 0..8 {
        let key = format!("sample-{i:06}");
        run.prefetch(&key);
        let _ = run.first_candidate(&key);
        let found = run.find(&key, |segment, _| {
            assert!((run.first()..=run.through()).contains(&segment));
            i % 2 == 0
        });
        if let Some((segment, _)) = found {
            assert!((run.first()..=run.through()).contains(&segment));
        }
    }
});
