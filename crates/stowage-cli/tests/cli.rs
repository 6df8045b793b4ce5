//! Runs the real `stowage` binary against caches built with `stowage_npy::NpyBackend` and
//! `stowage_memmap::MemmapBackend`, damaged copies of them, garbage paths and the
//! `hangar-numpy10` and `dnanet-memmap` reference sets, and checks its output and exit status.
//!
//! The reference tests print SKIPPED when the set is absent (they fail instead under
//! `STOWAGE_REQUIRE_REFERENCE=1`); the Python interop test prints SKIPPED without `python3` and
//! numpy (it fails instead under `STOWAGE_REQUIRE_PYTHON=1`).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use stowage_core::half::{bf16, f16};
use stowage_core::npy_header;
use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor, Value};
use stowage_npy::{NpyBackend, NpyOptions};

mod common;
use common::*;

fn schema() -> Schema {
    Schema::new()
        .tensor("x", DType::F32, ShapeRule::Fixed(vec![2, 3]))
        .tensor("label", DType::I64, ShapeRule::Fixed(vec![]))
        .tensor("mask", DType::Bool, ShapeRule::Fixed(vec![4]))
        .tensor("tokens", DType::U8, ShapeRule::Max(vec![5, 2]))
        .tensor("half", DType::F16, ShapeRule::Fixed(vec![3]))
        .tensor("brain", DType::BF16, ShapeRule::Fixed(vec![2]))
}

/// Sample number `i`: every value depends on `i`, so a mix-up shows.
fn sample(i: usize) -> Sample {
    let f = i as f32;
    let rows = i % 6;
    Sample::new()
        .with("x", Tensor::from_slice(&[2, 3], &[f, f + 0.5, -f, 1e-3 * f, f * f, -0.25]).unwrap())
        .with("label", Tensor::scalar(i as i64 * 1_000_000_007 - 3))
        .with(
            "mask",
            Tensor::from_bools(&[4], &[i.is_multiple_of(2), true, false, i.is_multiple_of(3)])
                .unwrap(),
        )
        .with(
            "tokens",
            Tensor::from_slice(
                &[rows, 2],
                &(0..rows * 2).map(|v| (v + i) as u8).collect::<Vec<_>>(),
            )
            .unwrap(),
        )
        .with(
            "half",
            Tensor::from_slice(&[3], &[f16::from_f32(f), f16::from_f32(-1.5), f16::MAX]).unwrap(),
        )
        .with(
            "brain",
            Tensor::from_slice(&[2], &[bf16::from_f32(f + 0.25), bf16::from_f32(-3.0)]).unwrap(),
        )
}

const KEYS: [&str; 3] = ["a", "b", "c"];

/// A cache of [`KEYS`] (sample 0, 1, 2) with 2 slots per data file, finalized or not.
fn build_cache(dir: &Path, finalize: bool) -> PathBuf {
    let path = dir.join("cache");
    let options = NpyOptions { collection_size: 2, ..NpyOptions::default() };
    let mut cache = NpyBackend::create(&path, &schema(), options).unwrap();
    for (i, key) in KEYS.iter().enumerate() {
        cache.put(key, &sample(i)).unwrap();
    }
    cache.flush().unwrap();
    if finalize {
        cache.finalize().unwrap();
    }
    path
}

#[test]
fn help_lists_every_command_with_examples_and_exit_codes() {
    let run = stowage(["--help"]);
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "inspect",
        "verify",
        "keys",
        "get",
        "convert",
        "explain",
        "Examples:",
        "Exit status:",
        "2  error",
        "3  cannot tell",
        "verify: no problem found, but",
    ] {
        assert!(run.stdout.contains(needle), "--help lacks {needle:?}: {run:?}");
    }
    for command in ["inspect", "verify", "keys", "get", "convert", "explain"] {
        let run = stowage([command, "--help"]);
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("Example"), "{command} --help has no example: {run:?}");
        assert!(run.stdout.contains("1  verify found problems"), "{command}: {run:?}");
    }
    assert!(stowage(["keys", "--help"]).stdout.contains("control character"));
    assert_eq!(stowage(["--version"]).code, 0);
}

#[test]
fn bad_arguments_are_one_line_errors() {
    assert_error_line(&stowage::<[&str; 0], &str>([]), &["no command given"]);
    assert_error_line(&stowage(["frobnicate"]), &["frobnicate"]);
    assert_error_line(&stowage(["inspect"]), &["<PATH>", "usage"]);
    assert_error_line(&stowage(["inspect", "a", "b"]), &["unexpected argument"]);
    assert_error_line(&stowage(["get", "cache", "key"]), &["--out"]);
    assert_error_line(&stowage(["get", "cache", "--out", "o"]), &["<KEY|--record <RECORD>>"]);
    assert_error_line(
        &stowage([
            "get",
            "cache",
            "key",
            "--record",
            "10:abcd1234:0000000000000000:0:",
            "--out",
            "o",
        ]),
        &["cannot be used with"],
    );
}

#[test]
fn a_url_is_never_taken_for_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    let cache = cache.to_str().unwrap();
    // Run where a `s3:` directory would appear if the URL were taken for a relative path.
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::BIN)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        common::Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    };
    // A scheme no backend serves is refused by name.
    for args in [
        &["convert", cache, "ftp://host/cache", "--to", "arrow"][..],
        &["convert", "hdfs://cluster/cache", "out", "--to", "arrow"],
        &["inspect", "ftp://host/cache"],
        &["verify", "sftp://host/cache"],
    ] {
        let got = run(args);
        assert_error_line(&got, &["is a URL", "no registered backend serves", "s3://"]);
    }
    // A served scheme given to a backend that writes local files is refused by name too.
    let got = run(&["convert", cache, "s3://bucket/cache", "--to", "arrow"]);
    assert_error_line(&got, &["s3://bucket/cache", "arrow"]);
    // A served URL holding no cache is not found, and nothing local is looked at or made.
    for args in [
        &["keys", "memory://cli-test/none"][..],
        &["get", "file:///nonexistent/cache", "key", "--out", "o"],
    ] {
        let got = run(args);
        assert_error_line(&got, &["no stowage cache at"]);
    }
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.ends_with(':') || n == "out"), "created {left:?}");
    // A path that only looks like one is given as ./ and is a path.
    let got = run(&["convert", cache, "./s3://x", "--to", "arrow"]);
    assert_eq!(got.code, 0, "{got:?}");
    assert!(dir.path().join("s3:/x").is_dir());
}

#[test]
fn inspect_describes_a_finalized_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    let expected = [
        "stowage NUMPY_10 cache",
        "format:      stowage-npy version 1",
        "state:       finalized",
        "keys:        3",
        "collection:  2 slots per data file",
        "schema:      6 fields",
        "records.log",
        "stowage.json",
        "_COMPLETE",
        "field \"x\", committed",
        "total",
        "integrity:   clean",
    ];
    for needle in expected {
        assert!(run.stdout.contains(needle), "inspect lacks {needle:?}: {run:?}");
    }
    let schema_lines = [
        "x float32 fixed (2, 3) stored as <f4",
        "label int64 fixed () stored as <i8",
        "mask bool fixed (4,) stored as |b1",
        "tokens uint8 max (5, 2) stored as |u1",
        "half float16 fixed (3,) stored as <f2",
        "brain bfloat16 fixed (2,) stored as <u2",
    ];
    let words: Vec<String> =
        run.stdout.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    for line in schema_lines {
        assert!(words.iter().any(|w| w == line), "inspect lacks the field line {line:?}: {run:?}");
    }
    // 6 fields x 2 files each (3 samples, 2 slots per file).
    assert_eq!(run.stdout.matches("data/10/").count(), 12, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
}

#[test]
fn inspect_shows_an_unfinished_cache_and_structure_problems() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), false);
    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("state:       not finalized"), "{run:?}");
    assert!(run.stdout.contains("staged"), "{run:?}");

    let reader = NpyBackend::open_read_only(&cache, NpyOptions::default()).unwrap();
    let uid = reader.record("c", "x").unwrap().uid.clone();
    drop(reader);
    let data = cache.join("data/10").join(format!("{uid}.npy"));
    std::fs::remove_file(&data).unwrap();
    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "inspect reports, verify judges: {run:?}");
    assert!(run.stdout.contains("integrity:   1 problem "), "{run:?}");
}

#[test]
fn verify_of_a_clean_cache_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
    assert!(run.stdout.starts_with("3 samples, "), "{run:?}");
    assert!(run.stdout.trim_end().ends_with("files checked: clean"), "{run:?}");
}

/// Flips one byte inside the stored bytes of `key`'s field `field`; returns the data file.
fn flip_sample_byte(cache: &Path, key: &str, field: &str) -> PathBuf {
    let reader = NpyBackend::open_read_only(cache, NpyOptions::default()).unwrap();
    let record = reader.record(key, field).unwrap().clone();
    drop(reader);
    let path = cache.join("data/10").join(format!("{}.npy", record.uid));
    let mut bytes = std::fs::read(&path).unwrap();
    let header = npy_header::parse(&bytes).unwrap();
    let slot_len = header.shape[1..].iter().product::<usize>() * header.dtype.item_size();
    let at = header.data_offset + record.collection_index as usize * slot_len + 1;
    bytes[at] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn verify_names_the_key_and_file_of_a_flipped_byte_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    let data_file = flip_sample_byte(&cache, "b", "x");
    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 1, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "one problem, the damaged key, the repair and the summary: {run:?}");
    assert_eq!(lines[1], "damaged keys (1): b", "{run:?}");
    assert!(lines[2].starts_with("to repair: put the damaged keys again"), "{run:?}");
    for needle in
        [data_file.to_str().unwrap(), "key \"b\"", "field \"x\"", "checksum", "!= recorded"]
    {
        assert!(lines[0].contains(needle), "problem line lacks {needle:?}: {run:?}");
    }
    assert!(lines[3].starts_with("3 samples, ") && lines[3].ends_with(": 1 problem"), "{run:?}");

    // get refuses the corrupted sample, naming the file and key, and serves the others.
    let out = dir.path().join("out");
    let run = stowage(args(&[&"get", &cache, &"b", &"--out", &out]));
    assert_error_line(&run, &["corrupted", data_file.to_str().unwrap(), "key \"b\""]);
    assert!(!out.join("x.npy").exists());
    let run = stowage(args(&[&"get", &cache, &"a", &"--out", &out]));
    assert_eq!(run.code, 0, "{run:?}");
}

#[test]
fn keys_are_one_per_line_escaped_only_when_needed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let schema = Schema::new().tensor("v", DType::U8, ShapeRule::Fixed(vec![]));
    let mut cache = NpyBackend::create(&path, &schema, NpyOptions::default()).unwrap();
    let keys =
        ["plain", "with space/and ünïcode", "new\nline", "tab\tx", "\"quoted\"", "back\\slash"];
    for (i, key) in keys.iter().enumerate() {
        cache.put(key, &Sample::new().with("v", Tensor::scalar(i as u8))).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    let run = stowage(args(&[&"keys", &path]));
    assert_eq!(run.code, 0, "{run:?}");
    let expected = [
        "plain",
        "with space/and ünïcode",
        "\"new\\nline\"",
        "\"tab\\tx\"",
        "\"\\\"quoted\\\"\"",
        "back\\slash",
    ];
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), expected, "{run:?}");
}

#[test]
fn get_writes_each_field_as_npy_with_its_own_shape() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    let out = dir.path().join("made/by/get");
    let run = stowage(args(&[&"get", &cache, &"c", &"--out", &out]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().count(), 6, "one line per file: {run:?}");
    let want = sample(2);
    for (name, value) in want.fields() {
        let tensor = value.as_tensor().unwrap();
        let file = out.join(format!("{name}.npy"));
        assert!(run.stdout.contains(file.to_str().unwrap()), "{run:?}");
        let (dtype, shape, descr, bytes) = read_npy(&file);
        let stored = if tensor.dtype() == DType::BF16 { DType::U16 } else { tensor.dtype() };
        assert_eq!((dtype, shape.as_slice()), (stored, tensor.shape()), "{name}");
        assert_eq!(bytes, tensor.bytes(), "{name}");
        if name == "brain" {
            assert_eq!(descr, "<u2");
        }
    }
    // tokens of sample 2 has shape (2, 2), not the slot's (5, 2).
    assert_eq!(read_npy(&out.join("tokens.npy")).1, [2, 2]);
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    assert!(run.stderr.starts_with("stowage: note: field \"brain\" is bfloat16"), "{run:?}");
    assert!(run.stderr.contains("<u2"), "{run:?}");

    // Again into the same directory: files are replaced.
    let run = stowage(args(&[&"get", &cache, &"a", &"--out", &out]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(read_npy(&out.join("label.npy")).3, (-3i64).to_le_bytes());
}

#[test]
fn get_of_a_missing_key_or_on_a_keyless_directory_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    let out = dir.path().join("out");
    let run = stowage(args(&[&"get", &cache, &"nope", &"--out", &out]));
    assert_error_line(&run, &[&format!("key \"nope\" not found in {}", cache.display())]);
    assert!(!out.exists(), "nothing is created for a missing key");
    let run = stowage(args(&[&"get", &cache, &"line\nbreak", &"--out", &out]));
    assert_error_line(&run, &["key \"line\\nbreak\" not found"]);

    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let run = stowage(args(&[&"get", &cache, &"a", &"--out", &file]));
    assert_error_line(&run, &[file.to_str().unwrap()]);

    let hangar = dir.path().join("hangar");
    std::fs::create_dir_all(hangar.join("data/10")).unwrap();
    let mut npy = npy_header::write_header(DType::U8, &[2, 3]);
    npy.extend_from_slice(&[0; 6]);
    std::fs::write(hangar.join("data/10/abcd1234.npy"), &npy).unwrap();
    for command in [&["keys"][..], &["get", "KEY", "--out", "o"][..]] {
        let mut argv = vec![OsString::from(command[0]), hangar.clone().into_os_string()];
        argv.extend(command[1..].iter().map(OsString::from));
        let run = stowage(argv);
        assert_error_line(&run, &["hangar NUMPY_10 data directory", "holds no keys", "--record"]);
    }
}

/// Runs every command on `path` and checks each is an exit-2 one-line error naming `needle`.
fn assert_every_command_fails(path: &Path, needle: &str) {
    let out = path.with_extension("get-out");
    let runs = [
        stowage(args(&[&"inspect", &path])),
        stowage(args(&[&"verify", &path])),
        stowage(args(&[&"keys", &path])),
        stowage(args(&[&"get", &path, &"a", &"--out", &out])),
    ];
    for run in &runs {
        assert_error_line(run, &[needle]);
    }
}

#[test]
fn garbage_paths_are_one_line_errors_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();

    let missing = root.join("does-not-exist");
    assert_every_command_fails(&missing, "no such file or directory");

    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_every_command_fails(&empty, "is not a cache: found neither stowage.json");
    assert_every_command_fails(&empty, "data/10/*.npy");

    let file = root.join("regular-file");
    std::fs::write(&file, b"hello").unwrap();
    assert_every_command_fails(&file, "is a file, not a cache directory");

    let random = root.join("random-json");
    std::fs::create_dir(&random).unwrap();
    std::fs::write(random.join("stowage.json"), random_bytes(4096, 1)).unwrap();
    assert_every_command_fails(&random, "stowage.json: does not parse as JSON");

    let other = root.join("other-format");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("stowage.json"), br#"{"format": "stowage-arrow"}"#).unwrap();
    assert_every_command_fails(&other, "format \"stowage-arrow\" is not one this command reads");

    let no_format = root.join("no-format");
    std::fs::create_dir(&no_format).unwrap();
    std::fs::write(no_format.join("stowage.json"), b"[1, 2]").unwrap();
    assert_every_command_fails(&no_format, "has no \"format\" string");

    let right_format_bad_body = root.join("bad-body");
    std::fs::create_dir(&right_format_bad_body).unwrap();
    std::fs::write(right_format_bad_body.join("stowage.json"), br#"{"format": "stowage-npy"}"#)
        .unwrap();
    assert_every_command_fails(&right_format_bad_body, "stowage.json");
}

#[test]
fn truncated_files_are_errors_or_problems_never_panics() {
    let dir = tempfile::tempdir().unwrap();

    // A truncated stowage.json.
    let cache = build_cache(&dir.path().join("meta"), true);
    let meta = cache.join("stowage.json");
    let text = std::fs::read(&meta).unwrap();
    std::fs::write(&meta, &text[..text.len() / 2]).unwrap();
    assert_every_command_fails(&cache, "stowage.json");

    // A truncated record log of a finalized cache: _COMPLETE no longer matches it.
    let cache = build_cache(&dir.path().join("log"), true);
    let log = cache.join("records.log");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 7]).unwrap();
    assert_every_command_fails(&cache, "records.log");

    // A record log cut to nothing.
    let cache = build_cache(&dir.path().join("empty-log"), true);
    std::fs::write(cache.join("records.log"), b"").unwrap();
    assert_every_command_fails(&cache, "records.log");

    // A truncated data file: the cache opens; verify reports it, get refuses it.
    let cache = build_cache(&dir.path().join("data"), true);
    let reader = NpyBackend::open_read_only(&cache, NpyOptions::default()).unwrap();
    let uid = reader.record("a", "x").unwrap().uid.clone();
    drop(reader);
    let data = cache.join("data/10").join(format!("{uid}.npy"));
    let bytes = std::fs::read(&data).unwrap();
    for len in [bytes.len() - 1, 100, 9, 0] {
        std::fs::write(&data, &bytes[..len]).unwrap();
        let run = stowage(args(&[&"verify", &cache]));
        assert_eq!(run.code, 1, "len {len}: {run:?}");
        assert!(run.stdout.contains(data.to_str().unwrap()), "len {len}: {run:?}");
        assert!(run.stdout.contains("key \"a\""), "len {len}: {run:?}");
        let run = stowage(args(&[&"inspect", &cache]));
        assert_eq!(run.code, 0, "len {len}: {run:?}");
        assert!(run.stdout.contains("integrity:   2 problems"), "x of a and b, len {len}: {run:?}");
        let out = dir.path().join("out");
        let run = stowage(args(&[&"get", &cache, &"a", &"--out", &out]));
        assert_error_line(&run, &[data.to_str().unwrap()]);
        assert_eq!(stowage(args(&[&"keys", &cache])).stdout, "a\nb\nc\n");
    }

    // A truncated collection file in a bare hangar directory.
    let hangar = dir.path().join("hangar");
    std::fs::create_dir_all(hangar.join("data/10")).unwrap();
    std::fs::create_dir_all(hangar.join("store_data/10")).unwrap();
    let mut npy = npy_header::write_header(DType::F32, &[10, 4]);
    npy.extend_from_slice(&[0; 160]);
    std::fs::write(hangar.join("data/10/good0000.npy"), &npy).unwrap();
    std::fs::write(hangar.join("data/10/short000.npy"), &npy[..npy.len() - 3]).unwrap();
    std::fs::write(hangar.join("data/10/garbage0.npy"), random_bytes(300, 2)).unwrap();
    std::fs::write(hangar.join("store_data/10/good0000.npy"), b"").unwrap();
    std::fs::write(hangar.join("store_data/10/gone0000.npy"), b"").unwrap();
    let run = stowage(args(&[&"inspect", &hangar]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("integrity:   3 problems"), "{run:?}");
    let run = stowage(args(&[&"verify", &hangar]));
    assert_eq!(run.code, 1, "{run:?}");
    for needle in [
        "short000.npy: file is 285 bytes, 3 bytes too short",
        "garbage0.npy: invalid .npy header",
        "gone0000.npy: marker without a data file",
    ] {
        assert!(run.stdout.contains(needle), "verify lacks {needle:?}: {run:?}");
    }
    assert!(run.stdout.ends_with("0 samples, 3 files checked: 3 problems (a bare hangar data directory has no records: headers and sizes only)\n"), "{run:?}");
}

#[test]
fn a_closed_output_pipe_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let schema = Schema::new().tensor("v", DType::U8, ShapeRule::Fixed(vec![]));
    let mut cache = NpyBackend::create(&path, &schema, NpyOptions::default()).unwrap();
    for i in 0..3000u32 {
        let key = format!("{i:06}-{}", "k".repeat(100));
        cache.put(&key, &Sample::new().with("v", Tensor::scalar(i as u8))).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    let mut child = Command::new(BIN)
        .arg("keys")
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is dropped here: the rest of ~300 KB of keys cannot be written.
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(&first[..7], b"000000-");
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(status.code(), Some(0));
}

/// One entry of the reference set's records.json.
struct ReferenceRecord {
    key: String,
    record: String,
    values_file: PathBuf,
}

fn reference_records(set: &Path) -> Vec<ReferenceRecord> {
    let text = std::fs::read_to_string(set.join("records.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let field = |r: &serde_json::Value, name: &str| r[name].as_str().unwrap().to_owned();
    json.as_array()
        .unwrap()
        .iter()
        .map(|r| ReferenceRecord {
            key: format!("{}/{}", field(r, "column"), field(r, "sample_key")),
            record: field(r, "record"),
            values_file: set.join(field(r, "values_file")),
        })
        .collect()
}

#[test]
fn get_record_reproduces_every_reference_sample() {
    let Some(set) = stowage_test_support::reference::reference_set("hangar-numpy10") else {
        return;
    };
    let records = reference_records(&set);
    assert_eq!(records.len(), 45);
    let dir = tempfile::tempdir().unwrap();
    for (i, r) in records.iter().enumerate() {
        let out = dir.path().join(format!("{i}.npy"));
        let run =
            stowage(args(&[&"get", &set.join("repo"), &"--record", &r.record, &"--out", &out]));
        assert_eq!(run.code, 0, "{}: {run:?}", r.key);
        let (dtype, shape, descr, bytes) = read_npy(&out);
        let (want_dtype, want_shape, want_descr, want_bytes) = read_npy(&r.values_file);
        assert_eq!((dtype, &shape, &descr), (want_dtype, &want_shape, &want_descr), "{}", r.key);
        assert_eq!(bytes, want_bytes, "{}", r.key);
    }
}

/// Copies a directory tree into writable files.
fn copy_tree(from: &Path, to: &Path) {
    stowage_conformance::corrupt::copy_tree(from, to).unwrap();
}

#[test]
fn get_record_of_the_corrupted_reference_sample_names_both_digests() {
    let Some(set) = stowage_test_support::reference::reference_set("hangar-numpy10") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    copy_tree(&set.join("repo"), &repo);
    let data_file = repo.join("data/10/4ujrcb35.npy");
    std::fs::write(
        &data_file,
        std::fs::read(set.join("corrupted/data_byte/4ujrcb35.npy")).unwrap(),
    )
    .unwrap();
    let fx013 = reference_records(&set).into_iter().find(|r| r.key == "fx/fx013").unwrap();
    let out = dir.path().join("fx013.npy");
    let run = stowage(args(&[&"get", &repo, &"--record", &fx013.record, &"--out", &out]));
    assert_error_line(
        &run,
        &[data_file.to_str().unwrap(), &fx013.record, "cac95c71f42d7232", "fd40def8890c87db"],
    );
    assert!(!out.exists(), "nothing is written for a corrupted sample");

    // Its neighbours in the same file are intact.
    let fx012 = reference_records(&set).into_iter().find(|r| r.key == "fx/fx012").unwrap();
    let run = stowage(args(&[&"get", &repo, &"--record", &fx012.record, &"--out", &out]));
    assert_eq!(run.code, 0, "{run:?}");

    // A record that does not parse, and one whose file has no marker.
    let run = stowage(args(&[
        &"get",
        &repo,
        &"--record",
        &"10:../../etc:0000000000000000:0:",
        &"--out",
        &out,
    ]));
    assert_error_line(&run, &["uid"]);
    std::fs::remove_file(repo.join("store_data/10/4ujrcb35.npy")).unwrap();
    let run = stowage(args(&[&"get", &repo, &"--record", &fx012.record, &"--out", &out]));
    assert_error_line(&run, &["4ujrcb35.npy", "marker"]);
}

#[test]
fn inspect_and_verify_describe_the_reference_directory() {
    let Some(set) = stowage_test_support::reference::reference_set("hangar-numpy10") else {
        return;
    };
    let repo = set.join("repo");
    let run = stowage(args(&[&"inspect", &repo]));
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "hangar NUMPY_10 data directory",
        "10 collection files",
        "data/10/4ujrcb35.npy ",
        "4128 B (4.0 KiB), ",
        "<f4 (10, 10, 10): 10 slots of (10, 10), committed",
        "|u1 (10, 20, 2, 3): 10 slots of (20, 2, 3), committed",
        "<i8 (10,): 10 slots of (), committed",
        "<f2 (10, 6): 10 slots of (6,), staged",
        "store_data/, stage_data/",
        "10 empty marker files",
        "checksums:   none here: hangar keeps each sample's xxh64 in its LMDB records",
        "integrity:   clean",
    ] {
        assert!(run.stdout.contains(needle), "inspect lacks {needle:?}: {run:?}");
    }
    // No records here, so no sample's checksum can be checked: never "clean".
    let run = stowage(args(&[&"verify", &repo]));
    assert_eq!(run.code, 3, "{run:?}");
    assert_eq!(run.stdout.matches("unchecked: ").count(), 10, "one line per file: {run:?}");
    assert!(
        run.stdout.contains(
            "written by hangar (how many, the cache does not record), not covered by stowage's \
             checksums"
        ),
        "{run:?}"
    );
    assert!(
        run.stdout.contains("0 samples, 10 files checked: no problem, 10 files unchecked"),
        "{run:?}"
    );
    assert!(run.stdout.contains(&format!("`stowage get {} --record REC`", repo.display())));
}

#[test]
fn numpy_loads_every_file_get_wrote() {
    let Some(python) =
        stowage_test_support::python::python_with("numpy_loads_every_file_get_wrote", &["numpy"])
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = build_cache(dir.path(), true);
    // Expected values as numpy would print them: (file, dtype name, shape, flat values).
    let mut cases: Vec<serde_json::Value> = Vec::new();
    for (i, key) in KEYS.iter().enumerate() {
        let out = dir.path().join(format!("out-{key}"));
        let run = stowage(args(&[&"get", &cache, key, &"--out", &out]));
        assert_eq!(run.code, 0, "{run:?}");
        for (name, value) in sample(i).fields() {
            let t = value.as_tensor().unwrap();
            let values: Vec<serde_json::Value> = match t.dtype() {
                DType::F32 => {
                    t.to_vec::<f32>().unwrap().into_iter().map(|v| f64::from(v).into()).collect()
                }
                DType::I64 => t.to_vec::<i64>().unwrap().into_iter().map(Into::into).collect(),
                DType::Bool => t.to_bools().unwrap().into_iter().map(Into::into).collect(),
                DType::U8 => t.to_vec::<u8>().unwrap().into_iter().map(Into::into).collect(),
                DType::F16 => t
                    .to_vec::<f16>()
                    .unwrap()
                    .into_iter()
                    .map(|v| f64::from(v.to_f32()).into())
                    .collect(),
                // numpy sees bfloat16 as its raw uint16 patterns.
                DType::BF16 => {
                    t.to_vec::<bf16>().unwrap().into_iter().map(|v| v.to_bits().into()).collect()
                }
                other => panic!("no case for {other}"),
            };
            let dtype = if t.dtype() == DType::BF16 { "uint16" } else { t.dtype().name() };
            cases.push(serde_json::json!({
                "file": out.join(format!("{name}.npy")),
                "dtype": dtype,
                "shape": t.shape(),
                "values": values,
            }));
        }
    }
    if let Some(set) = stowage_test_support::reference::reference_set("hangar-numpy10") {
        for r in reference_records(&set) {
            let out = dir.path().join(format!("{}.npy", r.key.replace('/', "-")));
            let run =
                stowage(args(&[&"get", &set.join("repo"), &"--record", &r.record, &"--out", &out]));
            assert_eq!(run.code, 0, "{run:?}");
            cases.push(serde_json::json!({"file": out, "expected_file": r.values_file}));
        }
    }
    const SCRIPT: &str = r#"
import json, sys
import numpy as np
checked = 0
for case in json.load(sys.stdin):
    a = np.load(case["file"])
    if "expected_file" in case:
        want = np.load(case["expected_file"])
        assert a.dtype == want.dtype, (case, a.dtype, want.dtype)
        assert a.shape == want.shape, (case, a.shape, want.shape)
        assert np.array_equal(a, want, equal_nan=a.dtype.kind == "f"), case
    else:
        assert a.dtype == np.dtype(case["dtype"]), (case["file"], a.dtype)
        assert a.shape == tuple(case["shape"]), (case["file"], a.shape)
        assert a.flags["C_CONTIGUOUS"], case["file"]
        want = np.array(case["values"], dtype=a.dtype).reshape(a.shape)
        assert np.array_equal(a, want), (case["file"], a.tolist(), want.tolist())
    checked += 1
print(checked)
"#;
    let stdin = serde_json::to_vec(&cases).unwrap();
    let out = stowage_test_support::python::run_script(python, SCRIPT, &[], &stdin, "numpy");
    assert_eq!(out, cases.len().to_string());
}

// ---------------------------------------------------------------------------------------------
// Memmap row caches: DNANet's reference caches (set `dnanet-memmap`) and caches stowage writes.

/// The `dnanet-memmap` reference set's manifest.
fn dnanet_manifest(set: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(set.join("manifest.json")).unwrap()).unwrap()
}

/// `(key, inspect_stdout)` of every reference cache the original tool inspected (the complete
/// ones).
fn original_reports(set: &Path) -> Vec<(String, String)> {
    let manifest = dnanet_manifest(set);
    let reports: Vec<(String, String)> = manifest["caches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            let stdout = c["inspect_stdout"].as_str()?;
            Some((c["key"].as_str().unwrap().to_owned(), stdout.to_owned()))
        })
        .collect();
    assert_eq!(reports.len(), 2, "two complete reference caches");
    reports
}

const UNFINALIZED_KEY: &str = "d3c3787192a40966";

#[test]
fn inspect_prints_the_original_report_for_each_dnanet_reference_cache() {
    let Some(set) = stowage_test_support::reference::reference_set("dnanet-memmap") else {
        return;
    };
    for (key, original) in original_reports(&set) {
        let run = stowage(args(&[&"inspect", &set.join("cache_root").join(&key)]));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stderr.is_empty(), "{run:?}");
        // The original's block comes first, byte for byte; stowage's lines follow it.
        assert!(
            run.stdout.starts_with(&original),
            "{key}: the original printed\n{original}\nstowage printed\n{}",
            run.stdout
        );
        let extra: Vec<&str> = run.stdout[original.len()..].lines().collect();
        assert_eq!(extra[0], "  written by:       DNANet (no stowage.json)", "{run:?}");
        assert!(extra.iter().any(|l| l.starts_with("  stowage realize:  ")), "{run:?}");
        // DNANet wrote no checksums: the structure has no problem, and the rows are listed as
        // unchecked, never called clean.
        let integrity = extra.iter().position(|l| l.starts_with("  integrity:")).unwrap();
        assert_eq!(
            extra[integrity],
            "  integrity:        no problem in the structure, 1 file holding data another writer \
             added that stowage's checksums do not cover (listed below)",
            "{run:?}"
        );
        assert!(extra[integrity + 1].contains("6 samples written by DNANet"), "{run:?}");
    }
}

#[test]
fn inspect_walks_the_reference_cache_root() {
    let Some(set) = stowage_test_support::reference::reference_set("dnanet-memmap") else {
        return;
    };
    let root = set.join("cache_root");
    let run = stowage(args(&[&"inspect", &root]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    let headers: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("=== ")).collect();
    assert_eq!(
        headers,
        ["=== aed9b48500e9acfd ===", "=== d3c3787192a40966 ===", "=== ff9cde909fae61f6 ==="],
        "every key directory, sorted: {run:?}"
    );
    for (key, original) in original_reports(&set) {
        assert!(run.stdout.contains(&original), "{key}'s report is not in {run:?}");
    }
    // The unfinalized cache: 4 committed rows (the manifest's 4 lines), and data.bin holds 96
    // bytes of the row being written when the writer stopped.
    let start = run.stdout.find("=== d3c3787192a40966 ===").unwrap();
    let end = run.stdout.find("=== ff9cde909fae61f6 ===").unwrap();
    let block: Vec<&str> = run.stdout[start..end].lines().collect();
    for line in [
        "  complete marker:  False",
        "  rows (n):         4",
        "    data.bin                  0.00 MB",
        "    index.parquet             0.00 MB",
        "    TOTAL                     0.00 MB",
        "  memmap realize:     0.00 GB if load_in_memory=True (416 B/sample)",
        "  also on disk:",
        "    manifest.jsonl            0.01 MB",
        "  unfinished:       no _COMPLETE; manifest.jsonl commits 4 rows; a writer resumes after \
         them; a resume drops the torn tail: 96 bytes at the end of data.bin",
        "  integrity:        no problem in the structure, 1 file holding data another writer \
         added that stowage's checksums do not cover (listed below)",
    ] {
        assert!(block.contains(&line), "no line {line:?} in {block:#?}");
    }
    assert!(!block.iter().any(|l| l.contains("index columns")), "no index yet: {block:#?}");

    // The other commands read one cache and say so.
    for command in ["verify", "keys"] {
        let run = stowage(args(&[&command, &root]));
        assert_error_line(
            &run,
            &["directory of caches", "aed9b48500e9acfd, d3c3787192a40966, ff9cde909fae61f6"],
        );
    }
}

/// `(path, has_annotation, panel, allele, meta, expected .npy files)` of every row of reference
/// cache `key`.
fn reference_rows(set: &Path, key: &str) -> Vec<serde_json::Value> {
    let manifest = dnanet_manifest(set);
    let cache = manifest["caches"].as_array().unwrap().iter().find(|c| c["key"] == key).unwrap();
    cache["rows"].as_array().unwrap().clone()
}

#[test]
fn verify_keys_and_get_read_every_dnanet_reference_cache() {
    let Some(set) = stowage_test_support::reference::reference_set("dnanet-memmap") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for key in ["aed9b48500e9acfd", "ff9cde909fae61f6", UNFINALIZED_KEY] {
        let cache = set.join("cache_root").join(key);
        let rows = reference_rows(&set, key);
        // DNANet writes no checksums: every row is read, none is called clean.
        let run = stowage(args(&[&"verify", &cache]));
        assert_eq!(run.code, 3, "{run:?}");
        let unchecked = format!("{} written by DNANet", count(rows.len() as u64, "sample"));
        assert!(run.stdout.contains(&unchecked), "{run:?}");
        let summary = format!("no problem, {} unchecked\n", count(rows.len() as u64, "sample"));
        assert!(run.stdout.starts_with(&format!("unchecked: {}", cache.display())), "{run:?}");
        assert!(run.stdout.ends_with(&summary), "{run:?}");

        let run = stowage(args(&[&"keys", &cache]));
        assert_eq!(run.code, 0, "{run:?}");
        let paths: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
        assert_eq!(run.stdout.lines().collect::<Vec<_>>(), paths, "{key}");

        for (i, row) in rows.iter().enumerate() {
            let out = dir.path().join(format!("{key}-{i}"));
            let run = stowage(args(&[&"get", &cache, &paths[i], &"--out", &out]));
            assert_eq!(run.code, 0, "{run:?}");
            let annotated = row["has_annotation"].as_bool().unwrap();
            let mut tensors = vec!["data", "scaler"];
            if annotated {
                tensors.push("annotation");
            } else {
                assert!(!out.join("annotation.npy").exists(), "{key} row {i}: null, not zeros");
                assert!(run.stderr.contains("field \"annotation\" is null"), "{run:?}");
            }
            for field in tensors {
                let got = read_npy(&out.join(format!("{field}.npy")));
                let want = read_npy(&set.join(row["expected"][field].as_str().unwrap()));
                assert_eq!(got, want, "{key} row {i} {field}");
            }
            for (field, column) in [
                ("panel", "adjusted_panel_json"),
                ("allele", "allele_annotation_json"),
                ("meta_json", "meta_json"),
            ] {
                let file = out.join(format!("{field}.json"));
                match row[column].as_str() {
                    Some(text) => assert_eq!(std::fs::read_to_string(&file).unwrap(), text),
                    None => assert!(!file.exists(), "{key} row {i}: {field} is null"),
                }
            }
        }
    }
}

/// A writable copy of the reference set's cache root.
fn copy_of_cache_root(set: &Path, dir: &Path) -> PathBuf {
    let root = dir.join("cache_root");
    copy_tree(&set.join("cache_root"), &root);
    root
}

#[test]
fn damaged_dnanet_caches_are_reported_and_fail_with_one_line() {
    let Some(set) = stowage_test_support::reference::reference_set("dnanet-memmap") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = copy_of_cache_root(&set, dir.path());
    let (original_key, original) = original_reports(&set).remove(0);

    // index.parquet without shapes.json: the original crashes; stowage reports everything else.
    let no_shapes = root.join(&original_key);
    let shapes = no_shapes.join("shapes.json");
    std::fs::remove_file(&shapes).unwrap();
    let run = stowage(args(&[&"inspect", &no_shapes]));
    assert_error_line(
        &run,
        &[shapes.to_str().unwrap(), "file is missing, but _COMPLETE and index.parquet are there"],
    );
    for line in original.lines().filter(|l| !l.contains("rows (n)") && !l.contains("realize")) {
        let line = if line.starts_with("    shapes.json") {
            "    shapes.json               0.00 MB"
        } else {
            line
        };
        assert!(run.stdout.lines().any(|l| l == line), "no line {line:?}: {run:?}");
    }
    assert!(!run.stdout.contains("rows (n)"), "{run:?}");
    assert!(
        run.stdout.contains(
            "  memmap realize:   unknown: no readable shapes.json, so the row shapes are not recorded\n"
        ),
        "{run:?}"
    );
    assert!(run.stdout.contains("  integrity:        cannot be opened: "), "{run:?}");
    for command in ["verify", "keys"] {
        assert_error_line(&stowage(args(&[&command, &no_shapes])), &[shapes.to_str().unwrap()]);
    }

    // A truncated .bin: the report is made, the cache cannot be opened.
    let truncated = root.join("ff9cde909fae61f6");
    let data = truncated.join("data.bin");
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..1000]).unwrap();
    let run = stowage(args(&[&"inspect", &truncated]));
    assert_error_line(&run, &[data.to_str().unwrap(), "file is 1000 bytes, expected 1152"]);
    assert!(run.stdout.contains("  rows (n):         6\n"), "{run:?}");
    assert!(
        run.stdout
            .contains("  memmap realize:     0.00 GB if load_in_memory=True (416 B/sample)\n"),
        "{run:?}"
    );
    let out = dir.path().join("out");
    let paths = reference_rows(&set, "ff9cde909fae61f6");
    let first = paths[0]["path"].as_str().unwrap();
    for run in [
        stowage(args(&[&"verify", &truncated])),
        stowage(args(&[&"keys", &truncated])),
        stowage(args(&[&"get", &truncated, &first, &"--out", &out])),
    ] {
        assert_error_line(&run, &[data.to_str().unwrap(), "expected 1152"]);
    }

    // A garbage index.parquet in the unfinalized cache's copy, completed by hand.
    let garbage = root.join(UNFINALIZED_KEY);
    let index = garbage.join("index.parquet");
    std::fs::write(&index, random_bytes(2000, 7)).unwrap();
    let run = stowage(args(&[&"inspect", &garbage]));
    assert_error_line(&run, &[index.to_str().unwrap(), "not a readable parquet index"]);
    assert!(run.stdout.contains("  rows (n):         4\n"), "the manifest still tells: {run:?}");

    // The walk reports every cache and then fails, naming the first problem.
    let run = stowage(args(&[&"inspect", &root]));
    assert_error_line(&run, &["3 of 3 caches", root.to_str().unwrap(), shapes.to_str().unwrap()]);
    assert_eq!(run.stdout.matches("\n=== ").count(), 3, "{run:?}");
    assert_eq!(run.stdout.matches("  integrity:        ").count(), 3, "{run:?}");
}

const MEMMAP_D: usize = 2;
/// Long enough rows that the report's MB columns are not all 0.00.
const MEMMAP_L: usize = 20_000;

/// DNANet row `i` for a cache stowage writes: row 1 has no annotation and no allele.
fn memmap_row(i: usize) -> Sample {
    let (d, l) = (MEMMAP_D, MEMMAP_L);
    let data: Vec<i16> = (0..d * l).map(|j| ((i * 100 + j) % 30_000) as i16 - 7).collect();
    let annotation: Vec<i8> = (0..d * l).map(|j| ((i + j) % 5) as i8 - 2).collect();
    let scaler: Vec<f32> = (0..l).map(|j| i as f32 + j as f32 / 4.0).collect();
    let mut row = Sample::new()
        .with("data", Tensor::from_slice(&[d, l], &data).unwrap())
        .with("scaler", Tensor::from_slice(&[l], &scaler).unwrap())
        .with("panel", Value::Json(format!("{{\"panel\": {}}}", i % 2)))
        .with("meta_json", Value::Json(memmap_meta(i)));
    if i == 1 {
        row.insert("annotation", Value::Null);
        row.insert("allele", Value::Null);
    } else {
        row.insert("annotation", Tensor::from_slice(&[d, l], &annotation).unwrap());
        row.insert("allele", Value::Json("[\"a\"]".into()));
    }
    row
}

/// Row `i`'s meta_json: 5035 characters, 10036 bytes of UTF-8.
fn memmap_meta(i: usize) -> String {
    format!("{{\"i\": {i}, \"name\": \"Zoë\", \"note\": \"{}\"}}", "é".repeat(5000))
}

const MEMMAP_KEYS: [&str; 3] = ["/runs/é/a.hid", "/runs/é/b.hid", "/runs/é/c.hid"];

/// A memmap row cache written by stowage with DNANet's schema, finalized or only flushed.
fn build_memmap_cache(dir: &Path, finalize: bool) -> PathBuf {
    let path = dir.join("memmap-cache");
    let schema = stowage_memmap::dnanet(MEMMAP_D, MEMMAP_L);
    let options = stowage_memmap::MemmapOptions::default();
    let mut cache = stowage_memmap::MemmapBackend::create(&path, &schema, options).unwrap();
    for (i, key) in MEMMAP_KEYS.iter().enumerate() {
        cache.put(key, &memmap_row(i)).unwrap();
    }
    cache.flush().unwrap();
    if finalize {
        cache.finalize().unwrap();
    }
    path
}

#[test]
fn a_memmap_cache_stowage_wrote_goes_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_memmap_cache(dir.path(), true);

    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.is_empty(), "{run:?}");
    // data (2, 20000) <i2 80000 B + annotation |i1 40000 B + scaler (20000,) <f4 80000 B per
    // row, 3 rows. Index strings: three 13-character paths (39) and three 5035-character
    // meta_json texts (15105; they are 30108 bytes of UTF-8, but the original counts Python
    // characters).
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(
        &lines[..4],
        ["", "=== memmap-cache ===", "  complete marker:  True", "  rows (n):         3"]
    );
    assert_eq!(
        &lines[4..8],
        [
            "  on-disk:",
            "    data.bin                  0.24 MB",
            "    annotation.bin            0.12 MB",
            "    scaler.bin                0.24 MB",
        ]
    );
    let on_disk =
        ["index.parquet", "panels.json", "alleles.json", "shapes.json", "fingerprint.json"];
    let mut total = 600_000;
    for (line, name) in lines[8..13].iter().zip(on_disk) {
        let bytes = std::fs::metadata(cache.join(name)).unwrap().len();
        total += bytes;
        assert_eq!(line, &format!("    {name:<20}  {:>8.2} MB", bytes as f64 / 1e6));
    }
    assert_eq!(lines[13], format!("    TOTAL                 {:>8.2} MB", total as f64 / 1e6));
    for line in [
        "  index columns:    ['row', 'path', 'has_annotation', 'panel_key', 'allele_key', 'meta_json']",
        "  panels.json:      2 unique (avg=12 B, max=12 B)",
        "  alleles.json:     1 unique (avg=5 B, max=5 B)",
        "  index in-RAM (string columns, approx):",
        "    path                      0.00 MB",
        "    meta_json                 0.02 MB",
        "    STRING TOTAL              0.02 MB",
        "  memmap realize:     0.00 GB if load_in_memory=True (200000 B/sample)",
        "  also on disk:",
        "  written by:       stowage (stowage.json)",
    ] {
        assert!(lines.contains(&line), "no line {line:?}: {run:?}");
    }
    assert!(lines.iter().any(|l| l.starts_with("    stowage.json ")), "{run:?}");
    assert!(lines.iter().any(|l| l.starts_with("    stowage_checksums.bin ")), "{run:?}");
    assert!(
        lines.last().unwrap().starts_with("  integrity:        clean (structure of 7 files"),
        "{run:?}"
    );

    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("3 samples, ") && run.stdout.ends_with(": clean\n"), "{run:?}");

    let run = stowage(args(&[&"keys", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), MEMMAP_KEYS);

    for (i, key) in MEMMAP_KEYS.iter().enumerate() {
        let out = dir.path().join(format!("get-{i}"));
        let run = stowage(args(&[&"get", &cache, key, &"--out", &out]));
        assert_eq!(run.code, 0, "{run:?}");
        let want = memmap_row(i);
        for (name, value) in want.fields() {
            match value {
                Value::Tensor(tensor) => {
                    let (dtype, shape, _, bytes) = read_npy(&out.join(format!("{name}.npy")));
                    assert_eq!((dtype, shape.as_slice()), (tensor.dtype(), tensor.shape()));
                    assert_eq!(bytes, tensor.bytes(), "{key} {name}");
                }
                Value::Json(text) => {
                    let got = std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap();
                    assert_eq!(&got, text, "{key} {name}");
                }
                Value::Null => {
                    assert!(!out.join(format!("{name}.npy")).exists());
                    assert!(!out.join(format!("{name}.json")).exists());
                    assert!(run.stderr.contains(&format!("field \"{name}\" is null")), "{run:?}");
                }
                Value::Bytes(_) => unreachable!("no bytes fields"),
            }
        }
        let written = if i == 1 { 4 } else { 6 };
        assert_eq!(run.stdout.lines().count(), written, "{run:?}");
    }

    // A flipped byte in row 2's data: verify names the file and the key (stowage's checksums).
    let data = cache.join("data.bin");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[2 * 80_000 + 3] ^= 0x10;
    std::fs::write(&data, bytes).unwrap();
    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.contains(data.to_str().unwrap()), "{run:?}");
    assert!(run.stdout.contains("/runs/é/c.hid"), "{run:?}");
    assert!(run.stdout.ends_with(": 1 problem\n"), "{run:?}");
    let run = stowage(args(&[&"get", &cache, &MEMMAP_KEYS[2], &"--out", &dir.path().join("bad")]));
    assert_error_line(&run, &[data.to_str().unwrap(), "/runs/é/c.hid"]);
}

#[test]
fn an_unfinished_memmap_cache_stowage_wrote_shows_its_committed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_memmap_cache(dir.path(), false);
    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "  complete marker:  False\n  rows (n):         3\n",
        "  memmap realize:     0.00 GB if load_in_memory=True (200000 B/sample)\n",
        "    manifest.jsonl ",
        "  unfinished:       no _COMPLETE; manifest.jsonl commits 3 rows; a writer resumes after them; no torn tail\n",
        "  integrity:        clean",
    ] {
        assert!(run.stdout.contains(needle), "no {needle:?}: {run:?}");
    }
    assert_eq!(stowage(args(&[&"keys", &cache])).stdout.lines().collect::<Vec<_>>(), MEMMAP_KEYS);
    assert_eq!(stowage(args(&[&"verify", &cache])).code, 0);
}

#[test]
fn garbage_memmap_files_are_one_line_errors_never_panics() {
    let dir = tempfile::tempdir().unwrap();

    // A garbage index.parquet in a finalized stowage cache: the index is read lazily, so the
    // cache opens; inspect and the readers fail naming the file, verify lists it.
    let cache = build_memmap_cache(dir.path(), true);
    let index = cache.join("index.parquet");
    std::fs::write(&index, random_bytes(3000, 3)).unwrap();
    let run = stowage(args(&[&"inspect", &cache]));
    assert_error_line(&run, &[index.to_str().unwrap(), "not a readable parquet index"]);
    assert!(run.stdout.contains("  rows (n):         3\n"), "{run:?}");
    assert!(run.stdout.contains("  integrity:        1 problem "), "{run:?}");
    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stdout.contains(index.to_str().unwrap()), "{run:?}");
    for run in [
        stowage(args(&[&"keys", &cache])),
        stowage(args(&[&"get", &cache, &MEMMAP_KEYS[0], &"--out", &dir.path().join("o")])),
    ] {
        assert_error_line(&run, &[index.to_str().unwrap()]);
    }

    // stowage.json naming the memmap format but holding nothing else.
    let bare = dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::write(bare.join("stowage.json"), br#"{"format": "dnanet-memmap-row"}"#).unwrap();
    assert_every_command_fails(&bare, "stowage.json");

    // A DNANet-looking directory whose only file is garbage.
    for (file, len) in [("manifest.jsonl", 500), ("shapes.json", 100), ("index.parquet", 800)] {
        let junk = dir.path().join(format!("junk-{file}"));
        std::fs::create_dir(&junk).unwrap();
        let mut bytes = random_bytes(len, 11);
        bytes.insert(1, b'\n');
        std::fs::write(junk.join(file), bytes).unwrap();
        assert_every_command_fails(&junk, junk.to_str().unwrap());
        let run = stowage(args(&[&"inspect", &junk]));
        assert!(run.stderr.contains(file), "inspect names {file}: {run:?}");
    }
}
