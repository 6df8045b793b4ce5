//! `shapes.json` of a finished memmap cache (`Shapes::parse`), then the row format the backend
//! derives from it for a cache without `stowage.json` (`RowFormat::with_layouts` over the
//! DNANet-style schema of its fields), and DNANet's own reading of the shapes from the first
//! manifest line (`Manifest::dnanet_shapes`) on the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_memmap::fuzzing::Manifest;
use stowage_memmap::fuzzing::RowFormat;
use stowage_memmap::fuzzing::Shapes;
use stowage_memmap::fuzzing::schema_for;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("shapes.json");
    if let Ok(shapes) = Shapes::parse(data, path) {
        for field in &shapes.fields {
            // What the backend sizes each field's file by.
            let _ = field.row_bytes.checked_mul(shapes.rows);
        }
        let _ = RowFormat::with_layouts(schema_for(&shapes.fields), shapes.fields.clone(), false);
    }
    let _ = Manifest::dnanet_shapes(data, path);
});
