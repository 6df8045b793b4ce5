//! The core's append-log framing (`stowage_core::file_safety::AppendLog`): a hostile file read
//! by `read_all` (what read-only openers and validators do), then recovered by `open` (what a
//! writer does: the damaged tail is cut off), after which the log must read clean with the same
//! records, and accept one more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_core::file_safety::AppendLog;

fuzz_target!(|data: &[u8]| {
    let path = stowage_fuzz::write_scratch("records.log", data);
    let Ok(found) = AppendLog::read_all(&path) else { return };
    assert!(found.valid_len <= data.len() as u64);
    assert_eq!(found.valid_len + found.dropped_tail_bytes, data.len() as u64);
    let Ok((mut log, recovered)) = AppendLog::open(&path, false) else { return };
    assert_eq!(recovered.records, found.records, "open and read_all agree on the records");
    log.append(b"one more").expect("appending after recovery");
    log.sync().expect("syncing after recovery");
    drop(log);
    let after = AppendLog::read_all(&path).expect("the recovered log reads");
    assert!(after.is_clean(), "after recovery: {:?}", after.damage);
    assert_eq!(after.records.len(), found.records.len() + 1);
    assert_eq!(after.records[..found.records.len()], found.records[..]);
});
