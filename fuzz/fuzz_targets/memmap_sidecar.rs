//! The memmap backend's JSON sidecars: a deduplicated JSON sidecar (`panels.json`,
//! `alleles.json`; `Sidecar::entries` and lookups) and `stowage.json` (`StowageMeta::read`, then
//! the row format of the schema it holds, as the backend resolves it on open). The first byte
//! chooses the file; the rest is its content.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_memmap::fuzzing::Sidecar;
use stowage_memmap::fuzzing::{RowFormat, StowageMeta};

fuzz_target!(|data: &[u8]| {
    let Some((&choice, content)) = data.split_first() else { return };
    if choice % 2 == 0 {
        let path = stowage_fuzz::write_scratch("panels.json", content);
        let sidecar = Sidecar::new(&path);
        if let Ok(entries) = sidecar.entries() {
            let keys: Vec<i32> = entries.keys().copied().take(16).collect();
            for key in keys {
                assert!(sidecar.lookup(key).is_ok(), "a listed key looks up");
            }
        }
        let _ = sidecar.lookup(i32::from(choice));
    } else {
        let path = stowage_fuzz::write_scratch("stowage.json", content);
        if let Ok(Some(meta)) = StowageMeta::read(&path) {
            let _ = RowFormat::new(&meta.schema, true);
        }
    }
});
