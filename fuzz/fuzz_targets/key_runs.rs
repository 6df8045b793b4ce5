//! Key index runs (`stowage_core::key_runs`). Two inputs from each case:
//! - the bytes as a hostile run file: checked by `from_bytes` (every refusal an
//!   `Error::Corrupted`, never a panic), probed, verified, and merged when they verify;
//! - a run built from entries the bytes spell (9 bytes each: a hash from a small range, so that
//!   hashes collide, or from the top of the range, so that slots wrap to the front, and a
//!   payload), built again streamed into a file (the same bytes), every entry found again, then
//!   its slots damaged by the rest of the bytes and probed: a lookup returns only a payload its
//!   confirmation accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_core::Error;
use stowage_core::key_runs::{
    HEADER_LEN, KeyRun, RunSpec, VERSION, build_run, build_run_to, key_hash,
};

fuzz_target!(|data: &[u8]| {
    hostile_file(data);
    built_then_damaged(data);
});

fn hostile_file(data: &[u8]) {
    let run = match KeyRun::from_bytes("index/run.bin", data.to_vec()) {
        Ok(run) => run,
        Err(err) => {
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            return;
        }
    };
    let header = run.header();
    assert!(header.first <= header.through && header.new_keys <= header.keys);
    probe(&run);
    let slots = run.slots().count() as u64;
    match run.verify() {
        Ok(()) => {
            assert_eq!(slots, header.keys);
            let spec = RunSpec { first: header.first, through: header.through, stamp: 0 };
            let merged = build_run(&[&run], &[(1, 1)], spec, |a, b| a == b, |_, _| false)
                .expect("a verified run merges");
            let merged = KeyRun::from_bytes("merged.bin", merged).expect("a built run opens");
            merged.verify().expect("a built run verifies");
        }
        Err(err) => assert!(matches!(err, Error::Corrupted { .. }), "{err}"),
    }
}

fn probe(run: &KeyRun) {
    for i in 0..8u64 {
        let hash = key_hash(format!("sample-{i:06}").as_bytes());
        run.prefetch(hash);
        // A confirmed payload is exactly one `confirm` accepted; 0 (empty) is never offered.
        let found = run.find(hash, |payload| {
            assert_ne!(payload, 0);
            payload % 2 == i % 2
        });
        assert!(found.is_none_or(|p| p % 2 == i % 2));
    }
}

fn built_then_damaged(data: &[u8]) {
    let (entries, damage) = data.split_at(data.len().min(9 * 64) / 9 * 9);
    let fresh: Vec<(u64, u64)> = entries
        .chunks_exact(9)
        .map(|e| {
            let raw = u64::from_le_bytes(e[..8].try_into().unwrap());
            // Low hashes collide in the first slots; high ones wrap past the last slot.
            let hash = if raw & 1 == 0 { raw % 64 } else { u64::MAX - raw % 64 };
            (hash, u64::from(e[8]) + 1)
        })
        .collect();
    // Payloads name keys: equal payloads are the same key (an overwrite), as a backend confirms.
    let spec = RunSpec { first: 0, through: 0, stamp: 0 };
    let bytes = build_run(&[], &fresh, spec, |a, b| a == b, |_, _| false).expect("builds");
    let mut file = std::io::Cursor::new(Vec::new());
    build_run_to(&mut file, "f", &[], &fresh, spec, |a, b| a == b, |_, _| false).expect("streams");
    assert_eq!(file.get_ref(), &bytes, "streamed and in memory, the same bytes");
    let run = KeyRun::from_bytes("built.bin", bytes.clone()).expect("opens");
    run.verify().expect("verifies");
    assert_eq!(run.version(), VERSION);
    // Merged with its own entries again: each replaces its twin, no key is added.
    let merged = build_run(&[&run], &fresh, spec, |a, b| a == b, |_, _| false).expect("merges");
    let merged = KeyRun::from_bytes("merged.bin", merged).expect("opens");
    merged.verify().expect("verifies");
    assert_eq!(merged.keys(), run.keys());
    for &(hash, payload) in &fresh {
        assert_eq!(run.find(hash, |p| p == payload), Some(payload));
    }
    let mut bytes = bytes;
    for pair in damage.chunks_exact(2) {
        let at = HEADER_LEN
            + usize::from(u16::from_le_bytes([pair[0], pair[1]])) % (bytes.len() - HEADER_LEN);
        bytes[at] ^= pair[0] | 1;
    }
    let damaged = KeyRun::from_bytes("damaged.bin", bytes).expect("the header is intact");
    for &(hash, payload) in &fresh {
        if let Some(found) = damaged.find(hash, |p| p == payload) {
            assert_eq!(found, payload);
        }
    }
    probe(&damaged);
    let _ = damaged.verify();
}
