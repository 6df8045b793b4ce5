//! An Arrow IPC segment (`segments/segment_N.arrow`, `stowage_arrow::fuzzing::segment::Segment`): a hostile
//! file mapped and decoded by `open`, then every row's key, and every row decoded as a sample
//! under each output structure the file's columns fit (`decode::column_groups`, `decode_row`),
//! as a read does. Then the same file opened row by row (`MappedSegment::by_rows`: only its
//! footer and batch metadata parsed, each row built and checked when read), every row and key
//! read that way.
//!
//! `Segment::open` catches a panic of the Arrow IPC decoder and reports the file as corrupted,
//! so this target replaces libFuzzer's abort-on-any-panic hook with one that prints the first few
//! panics and counts the rest: a panic stowage catches is not a crash, one that escapes still is
//! (libFuzzer aborts on it, and replaying the saved input prints its message).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU64, Ordering};
use stowage_arrow::OutputStructure;
use stowage_arrow::fuzzing::decode::{column_groups, decode_row};
use stowage_arrow::fuzzing::segment::{MappedSegment, Segment};

fuzz_target!(
    init: {
        static PANICS: AtomicU64 = AtomicU64::new(0);
        std::panic::set_hook(Box::new(|info| {
            if PANICS.fetch_add(1, Ordering::Relaxed) < 3 {
                let trace = std::backtrace::Backtrace::capture();
                eprintln!("panic (caught or not; later ones not shown): {info}\n{trace}");
            }
        }));
    },
    |data: &[u8]| {
    let path = stowage_fuzz::write_scratch("segment_000000.arrow", data);
    if let Ok(by_rows) = MappedSegment::open(0, &path).and_then(MappedSegment::by_rows) {
        for row in 0..by_rows.rows().min(256) + 1 {
            let _ = by_rows.key(row);
            let _ = by_rows.row(row);
        }
    }
    let Ok(segment) = Segment::open(0, &path) else { return };
    let rows = segment.rows().min(256);
    let _ = segment.keys();
    for row in 0..rows + 1 {
        let _ = segment.key(row);
        segment.prefetch_key(row, row % 2 == 0);
    }
    for structure in [
        OutputStructure::Tensor,
        OutputStructure::Blob,
        OutputStructure::Dict,
        OutputStructure::Tuple,
        OutputStructure::List,
    ] {
        let Ok(groups) = column_groups(segment.schema(), structure) else { continue };
        for row in 0..rows {
            let Some((batch, at)) = segment.locate(row) else { continue };
            let _ = decode_row(batch, at, &groups);
        }
    }
});
