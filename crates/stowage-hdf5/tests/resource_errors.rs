//! A resource error is never reported as corruption: opening a segment of the generic cache, or
//! an aenet dataset file, that the operating system refuses is `Error::Io` naming the file (its
//! errno kept), never `Error::Corrupted`.
//!
//! Each case runs in a child process (this test binary run again for that one test): they
//! exhaust the descriptor table, change user or need libhdf5's file locking on, which must not
//! touch the other tests of the binary.
//!
//! Not tested: ENOMEM and ENFILE (no way to provoke them here without disturbing the machine);
//! they take the same path as EMFILE (the errno of `open(2)`, `mmap(2)` or libhdf5's stack).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use stowage_core::{
    Backend, BackendFactory, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor,
    ValidationLevel,
};
use stowage_hdf5::{
    CacheSections, DescriptorCompat, Hdf5Backend, Hdf5Factory, Hdf5Options, StorageDtype,
    TorchCache, TorchCacheWriter,
};

/// Set in the child process that runs a case.
const CHILD: &str = "STOWAGE_HDF5_RESOURCE_CHILD";

/// Runs the test `name` of this binary in a child process (with libhdf5's file locking on) and
/// requires it to pass; returns `true` in that child, where the case itself runs.
fn in_child(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env_remove("HDF5_USE_FILE_LOCKING")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{name} in a child process: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    false
}

/// The error of the first read of `key` from the cache in `dir`, which opens (its key index run
/// is read at open, the segments on their first use).
fn first_read_error(dir: &Path, key: &str) -> Error {
    let cache = Hdf5Backend::open(dir, OpenMode::ReadOnly).unwrap();
    cache.get(key).map(drop).unwrap_err()
}

fn schema() -> Schema {
    Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]))
}

fn sample(i: u8) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[2], &[i, i.wrapping_mul(3)]).unwrap())
}

/// A finalized generic cache of `segments` segments of one sample each (`k0`, `k1`, ...).
fn generic_cache(dir: &Path, segments: u8) {
    let mut cache = Hdf5Backend::create(dir, &schema()).unwrap();
    for i in 0..segments {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        cache.flush().unwrap();
    }
    cache.finalize().unwrap();
}

fn segment(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("segments/segment_{id:06}.h5"))
}

/// An aenet dataset file with a torch cache of one entry.
fn aenet_file(path: &Path) {
    let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
    let mut writer =
        TorchCacheWriter::create(path, &compat, StorageDtype::Float64, CacheSections::default())
            .unwrap();
    writer.add_features(0, &Tensor::from_slice(&[3, 6], &[0.25f64; 18]).unwrap()).unwrap();
    writer.finish().unwrap();
}

/// `error` is `Error::Io` on `path` with OS error `errno`.
fn assert_io(error: &Error, path: &Path, errno: i32) {
    match error {
        Error::Io { path: at, source } => {
            assert_eq!(at, path, "{error}");
            assert_eq!(source.raw_os_error(), Some(errno), "{error}");
        }
        other => panic!("expected Error::Io (errno {errno}) on {}, got {other:?}", path.display()),
    }
}

/// Opens `/dev/null` until the process has no descriptor left.
fn exhaust_descriptors() -> Vec<File> {
    let mut held = Vec::new();
    loop {
        match File::open("/dev/null") {
            Ok(file) => held.push(file),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => return held,
            Err(e) => panic!("filling the descriptor table: {e}"),
        }
    }
}

/// Lowers this process's descriptor limit, so that exhausting it is quick.
fn limit_descriptors(limit: u64) {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit write and read one rlimit of ours.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut current), 0);
        current.rlim_cur = limit;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &raw const current), 0);
    }
}

#[test]
fn no_descriptor_left_is_an_io_error_never_corruption() {
    if !in_child("no_descriptor_left_is_an_io_error_never_corruption") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    generic_cache(&cache_dir, 3);
    let dataset = dir.path().join("dataset.h5");
    aenet_file(&dataset);
    limit_descriptors(128);
    // One segment open at a time: after open, segment 2 is the open one.
    let one = Hdf5Options { max_open_segments: 1, max_mapped_segments: 1 };
    let cache = Hdf5Backend::open_with(&cache_dir, OpenMode::ReadOnly, &one).unwrap();
    assert_eq!(cache.get("k2").unwrap(), Some(sample(2)));

    let mut held = exhaust_descriptors();
    // None free (segment 2, open, is detached from libhdf5 and holds none): the segment's own
    // `open(2)`, before libhdf5.
    assert_io(&cache.get("k0").unwrap_err(), &segment(&cache_dir, 0), libc::EMFILE);
    // One free: the segment's `open(2)` and then libhdf5's get it in turn, the map of the file
    // libhdf5 holds (a second descriptor) does not.
    drop(held.pop());
    assert_io(&cache.get("k0").unwrap_err(), &segment(&cache_dir, 0), libc::EMFILE);
    held.push(File::open("/dev/null").unwrap());
    // libhdf5's open alone: the errno found in its error stack.
    let error = stowage_hdf5::test_support::open_file::open_hdf5(&segment(&cache_dir, 0), "seg")
        .map(drop)
        .unwrap_err();
    assert_io(&error, &segment(&cache_dir, 0), libc::EMFILE);
    // An aenet dataset file.
    assert_io(&TorchCache::open(&dataset).map(drop).unwrap_err(), &dataset, libc::EMFILE);
    drop(held);

    // Nothing was poisoned or marked bad: with descriptors back, every key reads.
    for i in 0..3u8 {
        assert_eq!(cache.get(&format!("k{i}")).unwrap(), Some(sample(i)));
    }
    assert!(TorchCache::open(&dataset).unwrap().is_some());
}

#[test]
fn a_missing_segment_is_an_io_error_naming_it_and_a_validate_problem() {
    let dir = tempfile::tempdir().unwrap();
    generic_cache(dir.path(), 2);
    let gone = segment(dir.path(), 1);
    std::fs::remove_file(&gone).unwrap();
    assert_io(&first_read_error(dir.path(), "k1"), &gone, libc::ENOENT);
    let report = Hdf5Backend::validate_dir(dir.path(), ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert_eq!(report.problems[0].path.as_deref(), Some(gone.as_path()));
}

/// Holds an exclusive `flock` on `path`, as libhdf5 does for a process that has the file open
/// for writing (h5py or PyTables in mode `'a'`).
fn hold_write_lock(path: &Path) -> File {
    let file = File::options().read(true).write(true).open(path).unwrap();
    // SAFETY: flock on our own open descriptor.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0, "locking {}", path.display());
    file
}

/// `error` is `Error::Io` of kind `WouldBlock` on `path`, saying it is libhdf5's lock.
fn assert_locked(error: &Error, path: &Path) {
    match error {
        Error::Io { path: at, source } => {
            assert_eq!(at, path, "{error}");
            assert_eq!(source.kind(), std::io::ErrorKind::WouldBlock, "{error}");
            assert!(error.to_string().contains("lock"), "{error}");
        }
        other => panic!("expected a lock's Error::Io on {}, got {other:?}", path.display()),
    }
}

#[test]
fn a_file_locked_by_a_writer_is_an_io_error_never_corruption() {
    if !in_child("a_file_locked_by_a_writer_is_an_io_error_never_corruption") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    generic_cache(&cache_dir, 2);
    let locked = segment(&cache_dir, 1);
    let lock = hold_write_lock(&locked);
    assert_locked(&first_read_error(&cache_dir, "k1"), &locked);
    let error = Hdf5Backend::validate_dir(&cache_dir, ValidationLevel::Full).unwrap_err();
    assert_locked(&error, &locked);
    drop(lock);
    let cache = Hdf5Backend::open(&cache_dir, OpenMode::ReadOnly).unwrap();
    assert_eq!(cache.get("k1").unwrap(), Some(sample(1)));

    let dataset = dir.path().join("dataset.h5");
    aenet_file(&dataset);
    let lock = hold_write_lock(&dataset);
    assert_locked(&TorchCache::open(&dataset).map(drop).unwrap_err(), &dataset);
    // The writer waits for the other writer as before: `Error::Locked`.
    let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
    let writer = TorchCacheWriter::create(
        &dataset,
        &compat,
        StorageDtype::Float64,
        CacheSections::default(),
    );
    assert!(matches!(writer, Err(Error::Locked { .. })), "{:?}", writer.err());
    drop(lock);
    assert!(TorchCache::open(&dataset).unwrap().is_some());
}

#[test]
fn a_file_the_user_may_not_read_is_an_io_error_never_corruption() {
    if !in_child("a_file_the_user_may_not_read_is_an_io_error_never_corruption") {
        return;
    }
    // Tests run as root, whom permissions do not stop: the files are made by root, then this
    // child process becomes `nobody` before it opens them.
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this case needs root to switch to nobody");
    let dir = tempfile::tempdir().unwrap();
    let cache_dir = dir.path().join("cache");
    generic_cache(&cache_dir, 2);
    let dataset = dir.path().join("dataset.h5");
    aenet_file(&dataset);
    use std::os::unix::fs::PermissionsExt;
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    for path in [dir.path(), &cache_dir, &cache_dir.join("segments")] {
        mode(path, 0o755);
    }
    let refused = segment(&cache_dir, 0);
    mode(&refused, 0o600);
    mode(&dataset, 0o600);
    // SAFETY: setuid has no memory preconditions; the process stays `nobody` until it exits.
    assert_eq!(unsafe { libc::setuid(65534) }, 0);

    assert_io(&first_read_error(&cache_dir, "k0"), &refused, libc::EACCES);
    assert_io(&TorchCache::open(&dataset).map(drop).unwrap_err(), &dataset, libc::EACCES);
    // Checking them is refused too, not a report of damage.
    let error = Hdf5Factory.validate_path(&cache_dir, ValidationLevel::Full).unwrap_err();
    assert_io(&error, &refused, libc::EACCES);
    let error = Hdf5Factory.validate_path(&dataset, ValidationLevel::Full).unwrap_err();
    assert_io(&error, &dataset, libc::EACCES);
}
