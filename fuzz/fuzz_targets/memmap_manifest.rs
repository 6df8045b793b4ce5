//! `manifest.jsonl` of an unfinished memmap cache, through the memmap backend's own open: the
//! input is the manifest of a cache without `stowage.json` (a DNANet cache, whose row format is
//! taken from the manifest's first line) opened read-only, every key then read; and the same
//! lines parsed directly (`Manifest::parse`) against the row format of a stowage schema with a
//! nullable tensor and plain and deduplicated JSON fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use stowage_core::{BackendFactory, DType, OpenMode, Schema, ShapeRule};
use stowage_memmap::fuzzing::Manifest;
use stowage_memmap::fuzzing::RowFormat;

fn stowage_format() -> &'static RowFormat {
    static FORMAT: OnceLock<RowFormat> = OnceLock::new();
    FORMAT.get_or_init(|| {
        let schema = Schema::new()
            .tensor("image", DType::F32, ShapeRule::Fixed(vec![4, 3]))
            .nullable_tensor("mask", DType::F64, ShapeRule::Fixed(vec![2]))
            .json("meta", true)
            .json("note", false);
        RowFormat::new(&schema, true).expect("a schema the memmap backend stores")
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::parse(data, "manifest.jsonl".as_ref(), stowage_format());

    let dir = stowage_fuzz::scratch_path("memmap-cache");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating the cache directory");
    std::fs::write(dir.join("manifest.jsonl"), data).expect("writing the manifest");
    let factory = stowage_memmap::MemmapFactory::default();
    let Ok(cache) = factory.open(&dir, OpenMode::ReadOnly) else { return };
    if let Ok(keys) = cache.keys() {
        for key in keys.iter().take(16) {
            let _ = cache.get(key);
        }
    }
    let _ = cache.validate(stowage_core::ValidationLevel::Full);
});
