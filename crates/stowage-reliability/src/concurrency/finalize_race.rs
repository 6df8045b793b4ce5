//! Readers opening while the writer finalizes: every read-only open in that window must show the
//! unfinished cache or the finished one, with every flushed sample intact, never an error.
//!
//! The live trial finalizes once per backend, so its readers rarely open at that moment; this
//! trial aims at it: two reader threads open the cache in a loop from just before `finalize` is
//! called until it has returned. (It found a reader that compared a commit log read before the
//! finalize with a completion marker read after it, in stowage-example and stowage-npy.)

use crate::backends::Subject;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use stowage_conformance::cases::put_generated;
use stowage_conformance::generate::{basic_schema, compare, key, sample_for};
use stowage_core::OpenMode;

/// Samples flushed before the finalize: enough that reading the commit record takes a while.
const SAMPLES: usize = 300;
/// Reader threads.
const READERS: usize = 2;

/// One round on a fresh cache under `work`; returns how many opens the readers made.
///
/// Errors: the first failed open or check, naming the backend, the round and what the reader
/// saw.
pub fn round(subject: &Subject, work: &Path, round: u32) -> Result<u64, String> {
    let factory = &*subject.factory;
    let label = format!("{} reader during finalize, round {round}", subject.name);
    let path = work.join(format!("finalize-{round}"));
    let schema = basic_schema(&factory.capabilities());
    let mut cache = factory.create(&path, &schema).map_err(|e| format!("{label}: create: {e}"))?;
    put_generated(&mut *cache, &schema, 0..SAMPLES).map_err(|e| format!("{label}: {e}"))?;
    cache.flush().map_err(|e| format!("{label}: flush: {e}"))?;
    let finished = AtomicBool::new(false);
    let read = |reader: usize| -> Result<u64, String> {
        let mut opens = 0;
        // At least one open after the finalize returned, so both states are seen.
        while !finished.load(Ordering::Acquire) || opens == 0 {
            let handle = factory.open(&path, OpenMode::ReadOnly).map_err(|e| {
                format!("{label}: reader {reader}: open read-only after {opens} opens: {e}")
            })?;
            opens += 1;
            if handle.len() != SAMPLES {
                return Err(format!(
                    "{label}: reader {reader}: {} keys, {SAMPLES} flushed",
                    handle.len()
                ));
            }
            for i in [0, SAMPLES / 2, SAMPLES - 1] {
                let got = handle
                    .get(&key(i))
                    .map_err(|e| format!("{label}: reader {reader}: get: {e}"))?;
                compare(&key(i), &sample_for(&schema, i as u64), got.as_ref())
                    .map_err(|e| format!("{label}: reader {reader}: {e}"))?;
            }
        }
        Ok(opens)
    };
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..READERS).map(|r| scope.spawn(move || read(r))).collect();
        // Let the readers get going, so that the finalize lands among their opens.
        std::thread::sleep(Duration::from_millis(2));
        let finalized = cache.finalize().map_err(|e| format!("{label}: finalize: {e}"));
        finished.store(true, Ordering::Release);
        let mut opens = 0;
        for reader in readers {
            opens +=
                reader.join().unwrap_or_else(|_| Err(format!("{label}: a reader panicked")))?;
        }
        finalized.map(|()| opens)
    })
}
