//! Atomic replace, writer lock and append-only log: behavior and damage recovery.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use stowage_core::Error;
use stowage_core::file_safety::{
    AppendLog, DamageKind, Recovered, WriterLock, atomic_write, atomic_write_with, fsync_dir,
};

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

// ---------------------------------------------------------------- atomic replace

#[test]
fn atomic_write_creates_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.json");
    atomic_write(&path, b"{}").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"{}");
    assert_eq!(entries(dir.path()), ["meta.json"]);
}

#[test]
fn atomic_write_replaces_content_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.json");
    fs::write(&path, b"old content that is longer than the new one").unwrap();
    atomic_write(&path, b"new").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"new");
    atomic_write(&path, b"").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"");
    assert_eq!(entries(dir.path()), ["meta.json"]);
}

#[test]
fn atomic_write_with_streams_large_content() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    let chunk: Vec<u8> = (0..=255u8).collect();
    atomic_write_with(&path, |out| {
        for _ in 0..4096 {
            out.write_all(&chunk)?;
        }
        Ok(())
    })
    .unwrap();
    let written = fs::read(&path).unwrap();
    assert_eq!(written.len(), 4096 * 256);
    assert!(written.chunks(256).all(|c| c == chunk.as_slice()));
    assert_eq!(entries(dir.path()), ["big.bin"]);
}

#[test]
fn atomic_write_with_failing_writer_keeps_old_file_and_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.json");
    fs::write(&path, b"old").unwrap();
    let err = atomic_write_with(&path, |out| {
        out.write_all(&[b'x'; 100_000])?; // past the buffer: some bytes reached the temp file
        Err(io::Error::other("serializer failed"))
    })
    .unwrap_err();
    match &err {
        Error::Io { path: p, source } => {
            assert_eq!(p, &path);
            assert_eq!(source.to_string(), "serializer failed");
        }
        other => panic!("expected Error::Io, got {other:?}"),
    }
    assert!(err.to_string().contains("meta.json"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), b"old");
    assert_eq!(entries(dir.path()), ["meta.json"]);
}

#[test]
fn atomic_write_with_panicking_writer_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.json");
    fs::write(&path, b"old").unwrap();
    let result = std::panic::catch_unwind(|| {
        atomic_write_with(&path, |out| {
            out.write_all(b"partial")?;
            panic!("writer panicked");
        })
    });
    assert!(result.is_err());
    assert_eq!(fs::read(&path).unwrap(), b"old");
    assert_eq!(entries(dir.path()), ["meta.json"]);
}

#[test]
fn atomic_write_into_missing_directory_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("meta.json");
    let err = atomic_write(&path, b"x").unwrap_err();
    assert!(matches!(&err, Error::Io { path: p, .. } if *p == path), "{err:?}");
}

#[test]
fn atomic_write_without_file_name_is_invalid_argument() {
    let err = atomic_write("..", b"x").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

#[test]
fn fsync_dir_syncs_and_names_a_missing_dir() {
    let dir = tempfile::tempdir().unwrap();
    fsync_dir(dir.path()).unwrap();
    let missing = dir.path().join("missing");
    let err = fsync_dir(&missing).unwrap_err();
    assert!(matches!(&err, Error::Io { path, .. } if *path == missing), "{err:?}");
}

// ---------------------------------------------------------------- writer lock

#[test]
fn second_acquire_in_the_same_process_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let lock = WriterLock::acquire(dir.path()).unwrap();
    assert_eq!(lock.cache_dir(), dir.path());
    assert_eq!(lock.lock_file(), dir.path().join(".stowage.lock"));
    match WriterLock::acquire(dir.path()) {
        Err(Error::Locked { cache, lock_file }) => {
            assert_eq!(cache, dir.path());
            assert_eq!(lock_file, dir.path().join(WriterLock::FILE_NAME));
        }
        other => panic!("expected Error::Locked, got {other:?}"),
    }
}

#[test]
fn lock_is_released_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let lock = WriterLock::acquire(dir.path()).unwrap();
    assert!(matches!(WriterLock::acquire(dir.path()), Err(Error::Locked { .. })));
    drop(lock);
    let again = WriterLock::acquire(dir.path()).unwrap();
    drop(again);
    WriterLock::acquire(dir.path()).unwrap();
}

#[test]
fn two_file_handles_in_one_process_conflict() {
    // flock belongs to the open file, not the process: a second handle of ours is refused too.
    let dir = tempfile::tempdir().unwrap();
    let _lock = WriterLock::acquire(dir.path()).unwrap();
    let other = File::open(dir.path().join(WriterLock::FILE_NAME)).unwrap();
    assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
    assert!(matches!(other.try_lock_shared(), Err(TryLockError::WouldBlock)));
}

#[test]
fn readers_are_not_affected_by_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.bin");
    fs::write(&data, b"samples").unwrap();
    let _lock = WriterLock::acquire(dir.path()).unwrap();
    assert_eq!(fs::read(&data).unwrap(), b"samples");
    let mut text = String::new();
    File::open(dir.path().join(WriterLock::FILE_NAME)).unwrap().read_to_string(&mut text).unwrap();
    assert_eq!(text.trim(), std::process::id().to_string());
    assert_eq!(WriterLock::holder_pid(dir.path()), Some(std::process::id()));
}

#[test]
fn locks_of_different_caches_are_independent() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let _la = WriterLock::acquire(a.path()).unwrap();
    let _lb = WriterLock::acquire(b.path()).unwrap();
}

#[test]
fn stale_lock_file_does_not_block() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(WriterLock::FILE_NAME), b"999999999\n").unwrap();
    let _lock = WriterLock::acquire(dir.path()).unwrap();
    assert_eq!(WriterLock::holder_pid(dir.path()), Some(std::process::id()));
}

#[test]
fn acquire_in_missing_dir_names_the_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let err = WriterLock::acquire(&missing).unwrap_err();
    assert!(
        matches!(&err, Error::Io { path, .. } if *path == missing.join(".stowage.lock")),
        "{err:?}"
    );
    assert_eq!(WriterLock::holder_pid(&missing), None);
}

// ---------------------------------------------------------------- append-only log

const HDR: usize = AppendLog::RECORD_HEADER_LEN;
const MAGIC_LEN: usize = AppendLog::MAGIC.len();

fn payload(index: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + index * 7 + 1) as u8).collect()
}

/// Writes a log of `lens.len()` records and returns its path and the offset of each record.
fn write_log(dir: &Path, lens: &[usize]) -> (PathBuf, Vec<usize>) {
    let path = dir.join("journal.log");
    let (mut log, recovered) = AppendLog::open(&path, true).unwrap();
    assert!(recovered.records.is_empty());
    let mut offsets = Vec::new();
    let mut offset = MAGIC_LEN;
    for (i, &len) in lens.iter().enumerate() {
        log.append(&payload(i, len)).unwrap();
        offsets.push(offset);
        offset += HDR + len;
    }
    log.sync().unwrap();
    assert_eq!(log.byte_len(), offset as u64);
    (path, offsets)
}

fn expected(lens: &[usize]) -> Vec<Vec<u8>> {
    lens.iter().enumerate().map(|(i, &len)| payload(i, len)).collect()
}

#[test]
fn append_log_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [0, 1, 17, 300, 70_000, 5, 200_000, 0];
    let (path, _) = write_log(dir.path(), &lens);

    let read = AppendLog::read_all(&path).unwrap();
    assert_eq!(read.records, expected(&lens));
    assert!(read.is_clean());
    assert_eq!(read.dropped_tail_bytes, 0);
    assert_eq!(read.valid_len, fs::metadata(&path).unwrap().len());

    let (log, reopened) = AppendLog::open(&path, false).unwrap();
    assert_eq!(reopened, read);
    assert_eq!(log.len(), lens.len() as u64);
    assert!(!log.is_empty());
    assert_eq!(log.path(), path);
    assert_eq!(&fs::read(&path).unwrap()[..MAGIC_LEN], b"STWLOG01");
}

#[test]
fn append_log_records_left_unsynced_reach_the_os_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.log");
    let (mut log, _) = AppendLog::open(&path, true).unwrap();
    log.append(b"a").unwrap();
    log.append(b"b").unwrap();
    drop(log);
    assert_eq!(AppendLog::read_all(&path).unwrap().records, [b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn append_log_missing_file_without_create_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.log");
    let err = AppendLog::open(&path, false).unwrap_err();
    assert!(matches!(&err, Error::NotFound { what } if what.contains("missing.log")), "{err:?}");
    let err = AppendLog::read_all(&path).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(!path.exists());
}

#[test]
fn append_log_empty_file_is_an_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.log");
    File::create(&path).unwrap();

    let read = AppendLog::read_all(&path).unwrap();
    assert_eq!(
        read,
        Recovered { records: vec![], valid_len: 0, dropped_tail_bytes: 0, damage: None }
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), 0, "read_all must not write");

    let (mut log, recovered) = AppendLog::open(&path, false).unwrap();
    assert!(recovered.records.is_empty());
    assert!(log.is_empty());
    log.append(b"first").unwrap();
    log.sync().unwrap();
    drop(log);
    assert_eq!(AppendLog::read_all(&path).unwrap().records, [b"first".to_vec()]);
}

#[test]
fn append_log_interrupted_creation_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.log");
    fs::write(&path, b"STWL").unwrap();

    let read = AppendLog::read_all(&path).unwrap();
    assert!(read.records.is_empty());
    assert_eq!(read.dropped_tail_bytes, 4);
    assert_eq!(read.damage.as_ref().map(|d| d.kind), Some(DamageKind::TornTail));

    let (mut log, _) = AppendLog::open(&path, false).unwrap();
    log.append(b"x").unwrap();
    log.sync().unwrap();
    drop(log);
    let read = AppendLog::read_all(&path).unwrap();
    assert_eq!(read.records, [b"x".to_vec()]);
    assert!(read.is_clean());
}

#[test]
fn append_log_wrong_magic_is_corrupted_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    for content in [&b"NOTALOG!and more"[..], b"{}", &b"STWLOG01"[..7], b"\0"] {
        let path = dir.path().join("j.log");
        fs::write(&path, content).unwrap();
        if b"STWLOG01".starts_with(content) {
            // A prefix of the header is an interrupted creation, not garbage.
            AppendLog::open(&path, true).unwrap();
            assert_eq!(fs::read(&path).unwrap(), b"STWLOG01");
            continue;
        }
        let err = AppendLog::open(&path, true).unwrap_err();
        assert!(matches!(&err, Error::Corrupted { path: p, .. } if *p == path), "{err:?}");
        assert!(err.to_string().contains("byte offset 0"), "{err}");
        assert!(matches!(AppendLog::read_all(&path), Err(Error::Corrupted { .. })));
        assert_eq!(fs::read(&path).unwrap(), content, "a foreign file must not be changed");
    }
}

#[test]
fn append_log_other_version_is_incompatible() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.log");
    fs::write(&path, b"STWLOG02").unwrap();
    let err = AppendLog::open(&path, false).unwrap_err();
    assert!(matches!(&err, Error::Incompatible { path: p, .. } if *p == path), "{err:?}");
    assert!(err.to_string().contains("STWLOG02"), "{err}");
}

#[test]
fn append_log_oversized_record_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.log");
    let (mut log, _) = AppendLog::open(&path, true).unwrap();
    let huge = vec![0u8; AppendLog::MAX_RECORD_LEN + 1];
    assert!(matches!(log.append(&huge), Err(Error::InvalidArgument { .. })));
    log.append(b"fine").unwrap();
    log.sync().unwrap();
    assert_eq!(log.len(), 1);
}

#[test]
fn append_log_torn_tail_at_every_length_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [10, 0, 40];
    let (path, offsets) = write_log(dir.path(), &lens);
    let full = fs::read(&path).unwrap();
    let last = offsets[2];
    let torn_path = dir.path().join("torn.log");

    for cut in last..full.len() {
        fs::write(&torn_path, &full[..cut]).unwrap();
        let read = AppendLog::read_all(&torn_path).unwrap();
        assert_eq!(read.records, expected(&lens[..2]), "cut at {cut}");
        assert_eq!(read.valid_len, last as u64, "cut at {cut}");
        assert_eq!(read.dropped_tail_bytes, (cut - last) as u64, "cut at {cut}");
        if cut == last {
            assert!(read.is_clean(), "cut at a record boundary is clean");
        } else {
            let damage = read.damage.as_ref().unwrap();
            assert_eq!(damage.kind, DamageKind::TornTail, "cut at {cut}: {damage}");
            assert_eq!((damage.offset, damage.record_index), (last as u64, 2));
            assert!(damage.to_string().contains(&format!("byte offset {last}")), "{damage}");
        }
        assert_eq!(fs::metadata(&torn_path).unwrap().len(), cut as u64, "read_all must not write");

        // A writer cuts the tail off and appends cleanly after the last good record.
        let (mut log, recovered) = AppendLog::open(&torn_path, false).unwrap();
        assert_eq!(recovered, read);
        assert_eq!(fs::metadata(&torn_path).unwrap().len(), last as u64, "cut at {cut}");
        assert_eq!(log.len(), 2);
        log.append(b"after recovery").unwrap();
        log.sync().unwrap();
        drop(log);
        let read = AppendLog::read_all(&torn_path).unwrap();
        assert!(read.is_clean(), "cut at {cut}: {:?}", read.damage);
        let mut want = expected(&lens[..2]);
        want.push(b"after recovery".to_vec());
        assert_eq!(read.records, want, "cut at {cut}");
    }
}

#[test]
fn append_log_flipped_byte_in_last_record_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [10, 20, 30];
    let (path, offsets) = write_log(dir.path(), &lens);
    let full = fs::read(&path).unwrap();
    let last = offsets[2];
    let bad_path = dir.path().join("bad.log");

    for pos in last..full.len() {
        for mask in [0x01, 0x80, 0xff] {
            let mut bytes = full.clone();
            bytes[pos] ^= mask;
            fs::write(&bad_path, &bytes).unwrap();
            let read = AppendLog::read_all(&bad_path).unwrap();
            let at = format!("byte {pos} ^ {mask:#x}");
            assert_eq!(read.records, expected(&lens[..2]), "{at}");
            assert_eq!(read.dropped_tail_bytes, (full.len() - last) as u64, "{at}");
            let damage = read.damage.unwrap();
            assert_eq!(damage.offset, last as u64, "{at}");
            assert!(!damage.is_mid_log(), "{at}: {damage}");
            if pos >= last + 4 {
                // Length intact: a complete record with a bad checksum.
                assert_eq!(damage.kind, DamageKind::CorruptTail, "{at}");
                assert!(damage.detail.contains("checksum"), "{at}: {damage}");
            }
        }
    }
}

#[test]
fn append_log_flipped_byte_in_middle_record_is_reported_as_mid_log() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [10, 20, 30, 5];
    let (path, offsets) = write_log(dir.path(), &lens);
    let full = fs::read(&path).unwrap();
    let (middle, next) = (offsets[1], offsets[2]);
    let bad_path = dir.path().join("bad.log");

    for pos in middle..next {
        for mask in [0x01, 0x80, 0xff] {
            let mut bytes = full.clone();
            bytes[pos] ^= mask;
            fs::write(&bad_path, &bytes).unwrap();
            let at = format!("byte {pos} ^ {mask:#x}");
            let read = AppendLog::read_all(&bad_path).unwrap();
            assert_eq!(read.records, expected(&lens[..1]), "{at}");
            assert_eq!(read.valid_len, middle as u64, "{at}");
            assert_eq!(read.dropped_tail_bytes, (full.len() - middle) as u64, "{at}");
            let damage = read.damage.clone().unwrap();
            assert_eq!(damage.kind, DamageKind::MidLog { next_valid_offset: next as u64 }, "{at}");
            assert_eq!(damage.record_index, 1);
            let text = damage.to_string();
            assert!(text.contains("middle of the log"), "{text}");
            assert!(text.contains(&format!("byte offset {middle}")), "{text}");
        }
    }

    // The writer's choice: everything from the damaged record on is dropped.
    let mut bytes = full.clone();
    bytes[next - 1] ^= 0xff;
    fs::write(&bad_path, &bytes).unwrap();
    let (log, recovered) = AppendLog::open(&bad_path, false).unwrap();
    assert!(recovered.damage.unwrap().is_mid_log());
    assert_eq!(log.len(), 1);
    assert_eq!(fs::metadata(&bad_path).unwrap().len(), middle as u64);
}

#[test]
fn append_log_zero_filled_tail_is_a_corrupt_tail_not_mid_log() {
    // What a power loss can leave: the size grew but the blocks read back as zeros.
    let dir = tempfile::tempdir().unwrap();
    let lens = [10, 20];
    let (path, _) = write_log(dir.path(), &lens);
    let good_len = fs::metadata(&path).unwrap().len();
    OpenOptions::new().append(true).open(&path).unwrap().write_all(&[0u8; 4096]).unwrap();

    let read = AppendLog::read_all(&path).unwrap();
    assert_eq!(read.records, expected(&lens));
    assert_eq!(read.dropped_tail_bytes, 4096);
    assert_eq!(read.damage.unwrap().kind, DamageKind::CorruptTail);

    let (mut log, _) = AppendLog::open(&path, false).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), good_len);
    log.append(b"next").unwrap();
    log.sync().unwrap();
    assert_eq!(AppendLog::read_all(&path).unwrap().records.len(), 3);
}

#[test]
fn append_log_absurd_length_is_damage_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_log(dir.path(), &[3]);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&u32::MAX.to_le_bytes()).unwrap();
    file.write_all(&[0xab; 8]).unwrap();
    drop(file);

    let damage = AppendLog::read_all(&path).unwrap().damage.unwrap();
    assert_eq!(damage.kind, DamageKind::CorruptTail);
    assert!(damage.detail.contains("exceeds the maximum"), "{damage}");
}

#[test]
fn append_log_reopen_and_append_repeatedly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.log");
    let mut want = Vec::new();
    for round in 0..5 {
        let (mut log, recovered) = AppendLog::open(&path, true).unwrap();
        assert_eq!(recovered.records, want);
        assert!(recovered.is_clean());
        for i in 0..round + 1 {
            let record = payload(round * 10 + i, round * 1000 + i);
            log.append(&record).unwrap();
            want.push(record);
        }
        log.sync().unwrap();
        assert_eq!(log.len(), want.len() as u64);
    }
}

#[test]
fn append_log_create_new_puts_the_first_record_in_place_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.log");
    // What a crash during an earlier create left: a staging file without the first record.
    fs::write(dir.path().join(".cache.log.new"), AppendLog::MAGIC).unwrap();
    let mut log = AppendLog::create_new(&path, b"header").unwrap();
    assert_eq!(entries(dir.path()), ["cache.log"]);
    log.append(b"next").unwrap();
    log.sync().unwrap();
    assert_eq!(log.path(), path);
    let records = AppendLog::read_all(&path).unwrap().records;
    assert_eq!(records, [b"header".to_vec(), b"next".to_vec()]);
}
