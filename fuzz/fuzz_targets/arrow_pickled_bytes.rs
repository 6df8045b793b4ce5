//! A bytes field's value in a torchcachex-readable Arrow cache: the pickle of a Python `bytes`
//! object or of `None` (`stowage_arrow::fuzzing::blob_encoding`), as torchcachex or another pickler may
//! have written it into a `<name>_blob` column. Every input is unpickled and checked; one that
//! unpickles to bytes must survive a round trip through stowage's own pickler unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_arrow::fuzzing::blob_encoding::{check_pickle, pickle_bytes, unpickle_bytes};

fuzz_target!(|data: &[u8]| {
    let _ = check_pickle(data);
    if let Ok(Some(value)) = unpickle_bytes(data) {
        let again = pickle_bytes(value);
        assert_eq!(unpickle_bytes(&again), Ok(Some(value)), "round trip of {} bytes", value.len());
    }
});
