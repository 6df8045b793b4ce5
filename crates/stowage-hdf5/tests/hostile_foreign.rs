//! Hostile foreign files (issue 15, item 5): aenet's reference files with a few bytes changed,
//! read the way `stowage keys`, `stowage get` and `stowage verify` read an aenet cache (open, the
//! entries, the first feature matrix for the schema, every entry's features and derivatives, the
//! structure and full checks), through both read paths. Every one must end in a value or an
//! error; a damaged file is `Error::Corrupted` naming the file, never a panic, an abort or a
//! segfault.
//!
//! Each damaged file is read in a child process (this test binary again, running only
//! [`hostile_child`]), so that a crash is reported as a failed case with its signal instead of
//! taking the whole test binary down.
//!
//! The offsets are found in the reference files by pattern, not hard-coded: the dataspace
//! message of each 2-row dataset (the row count the readers size tables from), the datatype
//! message of `features/values`, the global heap collection.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stowage_core::{Error, ValidationLevel};
use stowage_hdf5::{ReadPath, TorchCache};

/// The damaged file a child reads; set only in children.
const CHILD_FILE: &str = "STOWAGE_HOSTILE_FILE";
/// The read path a child takes (`direct` or `libhdf5`).
const CHILD_PATH: &str = "STOWAGE_HOSTILE_READ_PATH";

/// What `stowage keys`, `get` and `verify` do with an aenet cache, in order; the first error
/// stops it. Returns the number of entries read.
fn read_like_the_cli(path: &Path, read_path: ReadPath) -> stowage_core::Result<usize> {
    let Some(cache) = TorchCache::open_with(path, read_path)? else { return Ok(0) };
    let entries = cache.entries();
    if let Some(&first) = cache.feature_entries().first() {
        cache.features(first)?;
    }
    let structure = cache.check(ValidationLevel::Structure);
    if let Some(problem) = structure.problems.first() {
        return Err(Error::corrupted(path, problem.detail.clone()));
    }
    for &entry in &entries {
        cache.features(entry)?;
        if let (Some(d), Some(layout)) = (cache.derivatives(entry)?, cache.derivative_layout()) {
            d.check(layout.n_radial_features, layout.n_angular_features, layout.multi)
                .map_err(|e| Error::corrupted(path, e.to_string()))?;
        }
    }
    let full = TorchCache::validate(path, ValidationLevel::Full)?;
    if let Some(problem) = full.problems.first() {
        return Err(Error::corrupted(path, problem.detail.clone()));
    }
    Ok(entries.len())
}

/// Runs in a child only: reads the file `CHILD_FILE` names and prints the outcome.
#[test]
fn hostile_child() {
    let Some(file) = std::env::var_os(CHILD_FILE) else { return };
    let read_path = match std::env::var(CHILD_PATH).as_deref() {
        Ok("libhdf5") => ReadPath::Libhdf5,
        _ => ReadPath::Direct,
    };
    let outcome = match read_like_the_cli(Path::new(&file), read_path) {
        Ok(entries) => format!("ok: {entries} entries"),
        Err(e @ Error::Corrupted { .. }) => format!("corrupted: {e}"),
        Err(e) => format!("error: {e}"),
    };
    println!("OUTCOME {outcome}");
}

/// How long a child may read one file: libhdf5 loops forever on some damage.
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

/// The outcome line of reading `file` in a child process, or the signal or status it died of,
/// or that it hung.
fn read_in_child(file: &Path, read_path: &str) -> Result<String, String> {
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "hostile_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_FILE, file)
        .env(CHILD_PATH, read_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the child");
    let started = Instant::now();
    while child.try_wait().expect("waiting for the child").is_none() {
        if started.elapsed() > CHILD_TIMEOUT {
            child.kill().expect("killing the child");
            child.wait().expect("reaping the child");
            return Err(format!("still reading after {CHILD_TIMEOUT:?}: hung"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output().expect("the child's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let outcome = stdout.lines().find_map(|line| line.split_once("OUTCOME ").map(|(_, o)| o));
    match (output.status.signal(), outcome) {
        (None, Some(outcome)) if output.status.success() => Ok(outcome.to_owned()),
        (Some(signal), _) => Err(format!("killed by signal {signal}; stderr: {stderr}")),
        _ => Err(format!("exited with {}; stdout: {stdout}; stderr: {stderr}", output.status)),
    }
}

/// One damaged copy of a reference file.
struct Damage {
    what: String,
    file: &'static str,
    changes: Vec<(usize, u8)>,
    /// Whether the damage must be found (`Error::Corrupted`), not only survived.
    found: bool,
}

/// Every offset of `pattern` in `bytes`.
fn find_all(bytes: &[u8], pattern: &[u8]) -> Vec<usize> {
    bytes
        .windows(pattern.len())
        .enumerate()
        .filter(|(_, w)| *w == pattern)
        .map(|(i, _)| i)
        .collect()
}

/// A version-1 dataspace message of rank 1 with maximum dimensions: `rows`, unlimited.
fn dataspace(rows: u64) -> Vec<u8> {
    let mut bytes = vec![1, 1, 1, 0, 0, 0, 0, 0];
    bytes.extend_from_slice(&rows.to_le_bytes());
    bytes.extend_from_slice(&[0xFF; 8]);
    bytes
}

/// The datatype message of `VLEN<float64 little-endian>` (class 9 over class 1).
const VLEN_F64: [u8; 12] = [0x19, 0, 0, 0, 0x10, 0, 0, 0, 0x11, 0x20, 0x3F, 0];

fn damages(set: &Path) -> Vec<Damage> {
    let mut damages = Vec::new();
    // The review's first finding: one byte of a row count makes a reader size a table from it.
    let v1 = std::fs::read(set.join("v1_legacy.h5")).unwrap();
    let spaces = find_all(&v1, &dataspace(2));
    assert_eq!(spaces.len(), 12, "the index and 11 arrays of /force_derivatives");
    for (i, at) in spaces.into_iter().enumerate() {
        for (byte, value) in [(6, 0x14), (7, 0x7F), (4, 0x01)] {
            damages.push(Damage {
                what: format!("v1 dataspace {i}: row count byte {byte} = {value:#x}"),
                file: "v1_legacy.h5",
                changes: vec![(at + 8 + byte, value)],
                found: false,
            });
        }
    }
    // The second: the element type made big-endian (so libhdf5 reads the rows, not stowage's
    // direct reader), then the global heap collection damaged under it.
    let v2 = std::fs::read(set.join("v2_both_f64.h5")).unwrap();
    let types = find_all(&v2, &VLEN_F64);
    let heaps = find_all(&v2, b"GCOL");
    assert!(!types.is_empty() && heaps.len() == 1, "{types:?} {heaps:?}");
    let heap = heaps[0];
    let big_endian = (types[0] + 9, 0x21);
    let objects = heap_objects(&v2, heap);
    let next = |index: u16| objects.iter().find(|&&(i, _)| i == index).expect("an object").1;
    // The first two made libhdf5 walk the collection forever before stowage checked it.
    let heap_damage: [(&str, usize, u8); 7] = [
        ("object 1's size low byte", next(1) + 8, 0x41),
        ("object 3's index", next(3), 0x00),
        ("object 2's size high byte", next(2) + 8 + 5, 0x10),
        ("object 1's size low byte", next(1) + 8, 0xF0),
        ("object 2's index", next(2), 0x7F),
        ("the collection's size", heap + 8 + 1, 0x00),
        ("the collection's size high byte", heap + 8 + 6, 0x01),
    ];
    for (what, at, value) in heap_damage {
        damages.push(Damage {
            what: format!("v2 features/values big-endian, heap {what}"),
            file: "v2_both_f64.h5",
            changes: vec![big_endian, (at, value)],
            found: true,
        });
        damages.push(Damage {
            what: format!("v2 heap {what}"),
            file: "v2_both_f64.h5",
            changes: vec![(at, value)],
            found: true,
        });
    }
    // Every byte of the header of the object holding features row 0 (the first object
    // `features/values` points to), with the rows read by libhdf5.
    let features_row0 = heap_objects(&v2, heap).into_iter().find(|&(index, _)| index == 2);
    let (_, header) = features_row0.expect("object 2 of the collection");
    for byte in 0..16 {
        for value in [0x00, 0xFF, 0x41] {
            if v2[header + byte] != value {
                damages.push(Damage {
                    what: format!(
                        "v2 features/values big-endian, heap object 2 byte {byte} = {value:#x}"
                    ),
                    file: "v2_both_f64.h5",
                    changes: vec![big_endian, (header + byte, value)],
                    found: false,
                });
            }
        }
    }
    // Inputs the `hdf5_foreign_file` fuzz target found, as changes to the file they grew from.
    // 1: a use after free in libhdf5 (`H5O__msg_iterate_real` under `H5Aexists`), reading
    // /torch_cache's attributes: contained by the trial open in a child process.
    let mut changes: Vec<(usize, u8)> =
        b"neighbor_typ".iter().enumerate().map(|(i, &b)| (7996 + i, b)).collect();
    changes.push((40560, 0x33));
    damages.push(Damage {
        what: "fuzz crash 1 (libhdf5 use after free in H5Aexists)".into(),
        file: "v2_deriv_f64.h5",
        changes,
        found: false,
    });
    // 2: a heap buffer overflow in libhdf5's compound conversion (`H5T__conv_struct_opt`) reading
    // features/index, whose stored member lies past the element: refused by stowage's check of
    // the member layout before the read.
    let mut changes: Vec<(usize, u8)> = vec![(10050, 0x10)];
    for at in [6470, 23520] {
        changes.extend(b"ds_i".iter().enumerate().map(|(i, &b)| (at + i, b)));
    }
    damages.push(Damage {
        what: "fuzz crash 2 (libhdf5 heap overflow in H5T__conv_struct_opt)".into(),
        file: "v2_feat_f32.h5",
        changes,
        found: true,
    });
    damages
}

/// `(index, offset of its header)` of each object of the collection at `at`.
fn heap_objects(file: &[u8], at: usize) -> Vec<(u16, usize)> {
    let size = u64::from_le_bytes(file[at + 8..at + 16].try_into().unwrap()) as usize;
    let mut objects = Vec::new();
    let mut p = at + 16;
    while p + 16 <= at + size {
        let index = u16::from_le_bytes([file[p], file[p + 1]]);
        let len = u64::from_le_bytes(file[p + 8..p + 16].try_into().unwrap()) as usize;
        if index == 0 {
            break;
        }
        objects.push((index, p));
        p += 16 + len.next_multiple_of(8);
    }
    objects
}

#[test]
fn damaged_reference_files_are_corrupted_never_a_crash() {
    if std::env::var_os(CHILD_FILE).is_some() {
        return;
    }
    let Some(set) = stowage_test_support::reference::reference_set("aenet-torch-cache") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (n, damage) in damages(&set).into_iter().enumerate() {
        let mut bytes = std::fs::read(set.join(damage.file)).unwrap();
        for &(at, value) in &damage.changes {
            bytes[at] = value;
        }
        let path: PathBuf = dir.path().join(format!("case{n}-{}", damage.file));
        std::fs::write(&path, &bytes).unwrap();
        for read_path in ["direct", "libhdf5"] {
            match read_in_child(&path, read_path) {
                Ok(outcome) if outcome.starts_with("ok") && damage.found => {
                    failures.push(format!("{} ({read_path}): not found: {outcome}", damage.what));
                }
                Ok(outcome) if outcome.starts_with("corrupted") || outcome.starts_with("ok") => {
                    if outcome.starts_with("corrupted") {
                        assert!(outcome.contains(&path.display().to_string()), "{outcome}");
                    }
                    eprintln!("{} ({read_path}): {outcome}", damage.what);
                }
                Ok(outcome) => failures.push(format!("{} ({read_path}): {outcome}", damage.what)),
                Err(crash) => failures.push(format!("{} ({read_path}): {crash}", damage.what)),
            }
        }
    }
    assert!(failures.is_empty(), "{} cases failed:\n{}", failures.len(), failures.join("\n"));
}
