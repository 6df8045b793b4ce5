//! The copies a killed writer leaves beside a file it was rebuilding (`.<name>.tmp-<pid>-<n>`):
//! removed by the next writer of that file, never while their builder lives, and no other file
//! ever. The generic backend's temporaries likewise, by its next writer.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{compat, features, write_plain_dataset};
use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_hdf5::{CacheSections, Hdf5Backend, StorageDtype, TorchCache, TorchCacheWriter};

/// Set in the child: the dataset file it starts rebuilding, and never finishes.
const BUILD_CHILD_ENV: &str = "STOWAGE_HDF5_TEST_BUILD_CHILD";
/// What the child prints once its writer is building.
const READY: &str = "stowage-test-child: building";
const TEST: &str = "a_killed_writers_copy_is_removed_by_the_next_writer_and_a_live_ones_is_not";

/// Kills and reaps the child however the test ends, so no process outlives a failed assertion.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The names in `dir` that start with `prefix`, sorted.
fn names_starting(dir: &Path, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// Child side: writes entry 9 into `path` (a whole write, published), then starts another
/// writer, adds a row, says so, and waits to be killed.
fn build_until_killed(path: &Path) {
    write_one(path, 9);
    let mut writer =
        TorchCacheWriter::create(path, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    writer.add_features(7, &features(7)).unwrap();
    // On a line of its own: libtest has printed the test's name without a newline.
    println!("\n{READY}");
    std::thread::sleep(Duration::from_secs(60));
    unreachable!("the parent kills this process");
}

/// A writer rebuilding `path` in a child process, until killed; with `HDF5_USE_FILE_LOCKING`
/// set to `forced_locks` when given.
fn spawn_builder(path: &Path, forced_locks: Option<&str>) -> KillOnDrop {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(BUILD_CHILD_ENV, path)
        .env_remove("HDF5_USE_FILE_LOCKING")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(value) = forced_locks {
        command.env("HDF5_USE_FILE_LOCKING", value);
    }
    let mut child = KillOnDrop(command.spawn().unwrap());
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let ready = lines.find(|line| line.as_ref().is_ok_and(|l| l == READY));
    assert!(ready.is_some(), "the child never started building");
    child
}

fn write_one(path: &Path, entry: i64) {
    let only_features = CacheSections { features: true, derivatives: false };
    let mut writer =
        TorchCacheWriter::create(path, &compat(), StorageDtype::Float64, only_features).unwrap();
    writer.add_features(entry, &features(entry)).unwrap();
    writer.finish().unwrap();
}

#[test]
fn a_killed_writers_copy_is_removed_by_the_next_writer_and_a_live_ones_is_not() {
    if let Some(path) = std::env::var_os(BUILD_CHILD_ENV) {
        build_until_killed(Path::new(&path));
        return;
    }
    // The child inherits libhdf5's descriptors (not close-on-exec) of files open at its start.
    let _serial = common::one_at_a_time();
    // libhdf5 told to lock every file locks the child's copy itself, which stowage's lock would
    // refuse: the child then lets its own go while libhdf5 has the copy open.
    for forced_locks in [None, Some("TRUE")] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dataset.h5");
        write_plain_dataset(&path);
        // Files that are not stowage's temporaries of this file, whatever their names suggest.
        let others = [
            ".dataset.h5.tmp",
            "dataset.h5.tmp-1-1",
            ".dataset.h5.tmp-1-x",
            ".dataset.h5.tmp-1",
            ".other.h5.tmp-1-1",
            ".dataset.h5.bak",
        ];
        for name in others {
            std::fs::write(dir.path().join(name), b"not stowage's").unwrap();
        }

        let mut child = spawn_builder(&path, forced_locks);
        let copy = format!(".dataset.h5.tmp-{}-", child.0.id());
        let building = names_starting(dir.path(), &copy);
        assert_eq!(building.len(), 1, "{forced_locks:?}: the child builds one copy: {building:?}");
        let building = dir.path().join(&building[0]);

        // Its builder is alive: another writer of the file leaves its copy (and publishes its
        // own).
        write_one(&path, 0);
        assert!(building.exists(), "{forced_locks:?}: a live writer's copy was removed");
        assert_eq!(TorchCache::open(&path).unwrap().unwrap().feature_entries(), [0, 9]);

        // Killed: its copy stays beside the file (and so does one of a build as a dead process
        // left it, nobody holding its lock; no process has a pid above 2^22), until the next
        // writer of the file.
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        assert!(building.exists());
        let dead = dir.path().join(".dataset.h5.tmp-4194305-3");
        std::fs::write(&dead, b"a partial copy").unwrap();
        write_one(&path, 1);
        assert!(!building.exists(), "{forced_locks:?}: the killed writer's copy is left");
        assert!(!dead.exists(), "the dead writer's copy is left");
        for name in others {
            assert!(dir.path().join(name).exists(), "{name} was removed");
        }
        let left = names_starting(dir.path(), ".dataset.h5.tmp-");
        assert!(left.iter().all(|n| others.contains(&n.as_str())), "{left:?}");
        assert_eq!(TorchCache::open(&path).unwrap().unwrap().feature_entries(), [0, 1, 9]);
    }
}

/// A writable copy of `aenet-torch-cache/<file>` as `dataset.h5` in `dir`, or `None` when the
/// reference set is absent (printed as SKIPPED; a failure in CI).
fn reference_copy(file: &str, dir: &Path) -> Option<PathBuf> {
    let set = stowage_test_support::reference::reference_set("aenet-torch-cache")?;
    let path = dir.join("dataset.h5");
    common::writable_copy(&set.join(file), &path);
    Some(path)
}

#[test]
fn adopt_removes_the_copies_killed_writers_left() {
    let dir = tempfile::tempdir().unwrap();
    // A legacy v1 cache: every row unchecked, so adopting rebuilds the file.
    let Some(path) = reference_copy("v1_legacy.h5", dir.path()) else { return };
    let dead = dir.path().join(".dataset.h5.tmp-4194305-0");
    std::fs::write(&dead, b"a partial copy").unwrap();
    let other = dir.path().join(".dataset.h5.tmp");
    std::fs::write(&other, b"not stowage's").unwrap();
    assert_eq!(TorchCacheWriter::adopt(&path).unwrap().samples, 2);
    assert!(!dead.exists());
    assert!(other.exists());
}

fn sample(value: f64) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[1, 2], &[value, value]).unwrap())
}

#[test]
fn the_generic_backends_next_writer_removes_a_killed_writers_temporaries() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::F64, ShapeRule::RaggedLeading(vec![2]));
    let mut cache = Hdf5Backend::create(dir.path(), &schema).unwrap();
    cache.put("a", &sample(1.0)).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    // As a writer killed inside a flush and inside a finalize leaves them.
    let segments = dir.path().join("segments");
    let leftovers = [
        segments.join(".segment_000001.h5.tmp-4194305-0"),
        dir.path().join(".stowage.complete.tmp-4194305-1"),
    ];
    let others = [segments.join(".notes.h5.tmp-1-1"), dir.path().join(".stowage.log.tmp-1-1")];
    for path in leftovers.iter().chain(&others) {
        std::fs::write(path, b"partial").unwrap();
    }
    // A reader changes nothing.
    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert!(leftovers.iter().all(|p| p.exists()));
    drop(reader);
    let mut cache = Hdf5Backend::open(dir.path(), OpenMode::Append).unwrap();
    for path in &leftovers {
        assert!(!path.exists(), "{} is left", path.display());
    }
    for path in &others {
        assert!(path.exists(), "{} was removed", path.display());
    }
    cache.put("b", &sample(2.0)).unwrap();
    cache.finalize().unwrap();
    assert_eq!(cache.get("a").unwrap().unwrap(), sample(1.0));
}
