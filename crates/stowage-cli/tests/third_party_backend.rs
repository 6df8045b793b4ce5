//! A third party's backend reaches every command by registering its factory: `stowage-example`'s
//! journal backend, registered beside the four built-in ones, is inspected, verified, listed, read
//! and converted (both ways) through [`stowage_cli::run`], with the output captured in-process.
//! The default registry, which does not know it, refuses it, listing the formats it knows.

mod common;

use std::ffi::{OsStr, OsString};

use common::{
    JOURNAL_KEYS as KEYS, Run, assert_holds_every_sample, build_journal, journal_key as key,
    mixed_sample,
};
use stowage_core::{BackendFactory, OpenMode, Reader, Registry, Value};
use stowage_example::JournalFactory;

/// The registry of a `stowage` built with the journal backend.
fn with_journal() -> Registry {
    stowage_cli::default_registry().with(JournalFactory)
}

/// Runs `stowage ARGS` on `registry`, capturing both outputs.
fn stowage(registry: &Registry, parts: &[&dyn AsRef<OsStr>]) -> Run {
    let mut argv = vec![OsString::from("stowage")];
    argv.extend(parts.iter().map(|p| p.as_ref().to_os_string()));
    common::stowage_in(registry, argv)
}

#[test]
fn inspect_reports_a_journal_cache_in_text_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_journal(dir.path());
    let registry = with_journal();
    let journal = stowage_example::JOURNAL;

    let run = stowage(&registry, &[&"inspect", &cache]);
    assert_eq!(run.code, 0, "{run:?}");
    let first = run.stdout.lines().next().unwrap();
    assert_eq!(first, format!("{}: {}", cache.display(), journal.description), "{run:?}");
    for line in [
        "state:       finalized".to_owned(),
        format!("keys:        {KEYS}"),
        "schema:      4 fields".to_owned(),
        "integrity:   clean".to_owned(),
    ] {
        assert!(run.stdout.lines().any(|l| l.starts_with(&line)), "no {line:?}: {run:?}");
    }
    assert!(run.stdout.contains("journal.log"), "the files are listed: {run:?}");
    assert!(run.stdout.contains("ragged (*, 2)"), "{run:?}");
    assert!(run.stdout.contains("supports:    variable shapes, ragged shapes"), "{run:?}");

    let run = stowage(&registry, &[&"inspect", &"--json", &cache]);
    assert_eq!(run.code, 0, "{run:?}");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["kind"], journal.id, "{report}");
    assert_eq!(report["description"], journal.description, "{report}");
    assert_eq!(report["finalized"], true, "{report}");
    assert_eq!(report["keys"], KEYS as u64, "{report}");
    let fields: Vec<&str> =
        report["schema"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(fields, ["x", "ragged", "raw", "meta"]);
    let files = report["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["name"] == "journal.log" && f["bytes"].as_u64() > Some(0)));
    assert!(report["integrity"].as_str().unwrap().starts_with("clean"), "{report}");

    // A directory holding it is walked: the journal cache is found below it.
    let run = stowage(&registry, &[&"inspect", &"--json", &dir.path()]);
    assert_eq!(run.code, 0, "{run:?}");
    let reports: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(reports.as_array().unwrap().len(), 1, "{reports}");
    assert_eq!(reports[0]["kind"], journal.id, "{reports}");
}

#[test]
fn verify_passes_a_journal_cache_and_names_the_damaged_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_journal(dir.path());
    let registry = with_journal();

    let run = stowage(&registry, &[&"verify", &cache]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.trim_end().ends_with(": clean"), "{run:?}");
    let run = stowage(&registry, &[&"verify", &cache, &"--sample", &"0.5", &"--seed", &"3"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(&format!("6 of {KEYS} samples (50.0%, seed 3)")), "{run:?}");

    // One byte flipped in the middle of the journal, inside a sample's record.
    let journal = cache.join("journal.log");
    let mut bytes = std::fs::read(&journal).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    std::fs::write(&journal, &bytes).unwrap();
    let run = stowage(&registry, &[&"verify", &cache]);
    assert_eq!(run.code, 1, "damage is a problem found, not an error: {run:?}");
    let journal = journal.to_str().unwrap();
    assert!(run.stdout.lines().next().unwrap().starts_with(journal), "{run:?}");
    assert!(run.stdout.contains(&format!("damaged files (1): {journal}")), "{run:?}");
    assert!(run.stdout.trim_end().ends_with(": 1 problem"), "{run:?}");
}

#[test]
fn keys_and_get_read_a_journal_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_journal(dir.path());
    let registry = with_journal();

    let run = stowage(&registry, &[&"keys", &cache]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), (0..KEYS).map(key).collect::<Vec<_>>());

    for i in [1, 3] {
        let out = dir.path().join(format!("get-{i}"));
        let run = stowage(&registry, &[&"get", &cache, &key(i), &"--out", &out]);
        assert_eq!(run.code, 0, "{run:?}");
        for (name, value) in mixed_sample(i).fields() {
            match value {
                Value::Tensor(t) => {
                    let npy = std::fs::read(out.join(format!("{name}.npy"))).unwrap();
                    assert!(npy.starts_with(b"\x93NUMPY"), "{name}");
                    assert!(npy.ends_with(t.bytes()), "{name}: the tensor's bytes end the file");
                    let shape = stowage_core::shape::display(t.shape());
                    let header = String::from_utf8_lossy(&npy[..npy.len() - t.bytes().len()]);
                    assert!(header.contains(&format!("'shape': {shape}")), "{name}: {header}");
                }
                Value::Bytes(b) => {
                    assert_eq!(std::fs::read(out.join(format!("{name}.bin"))).unwrap(), b.as_ref())
                }
                Value::Json(text) => {
                    let written =
                        std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap();
                    assert_eq!(&written, text)
                }
                Value::Null => {
                    assert!(run.stderr.contains(&format!("field \"{name}\" is null")), "{run:?}")
                }
            }
        }
    }
    let run = stowage(&registry, &[&"get", &cache, &"missing", &"--out", &dir.path().join("m")]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.starts_with("stowage: error: key \"missing\" not found"), "{run:?}");
}

#[test]
fn convert_goes_from_journal_to_arrow_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_journal(dir.path());
    let registry = with_journal();

    let arrow = dir.path().join("as-arrow");
    let run = stowage(&registry, &[&"convert", &cache, &arrow, &"--to", &"arrow", &"--verify"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(&format!("converted {KEYS} samples")), "{run:?}");
    assert!(run.stdout.contains(&format!("verified {KEYS} samples")), "{run:?}");
    let arrow_factory = stowage_arrow::ArrowFactory::default();
    assert_holds_every_sample(&arrow_factory, &arrow);

    let back = dir.path().join("back");
    let to = JournalFactory.name();
    let run = stowage(&registry, &[&"convert", &arrow, &back, &"--to", &to, &"--verify"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(stowage_example::JOURNAL.description), "{run:?}");
    assert_holds_every_sample(&JournalFactory, &back);
    let reopened = JournalFactory.open(&back, OpenMode::ReadOnly).unwrap();
    assert!(reopened.is_finalized());

    // Run again: nothing left to copy, the same cache.
    let run = stowage(&registry, &[&"convert", &arrow, &back, &"--to", &to]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("converted 0 samples"), "{run:?}");
    assert!(run.stdout.contains(&format!("{KEYS} keys already in the target skipped")), "{run:?}");

    // --to takes the registered names only, and lists them.
    let run = stowage(&registry, &[&"convert", &cache, &dir.path().join("x"), &"--to", &"tape"]);
    assert_eq!(run.code, 2, "{run:?}");
    for name in ["npy", "memmap", "arrow", "hdf5", to] {
        assert!(run.stderr.contains(name), "{name}: {run:?}");
    }
}

#[test]
fn the_default_registry_refuses_a_journal_cache_listing_the_formats_it_knows() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_journal(dir.path());
    let registry = stowage_cli::default_registry();
    let journal = stowage_example::JOURNAL;
    for command in [&["keys"][..], &["inspect"], &["verify"], &["get", "k00", "--out", "o"]] {
        let mut parts: Vec<&dyn AsRef<OsStr>> = vec![&command[0], &cache];
        parts.extend(command[1..].iter().map(|p| p as &dyn AsRef<OsStr>));
        let run = stowage(&registry, &parts);
        assert_eq!(run.code, 2, "{command:?}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{command:?}: {run:?}");
        assert!(run.stderr.starts_with("stowage: error: "), "{run:?}");
        assert!(run.stderr.contains(cache.to_str().unwrap()), "{run:?}");
        for format in registry.formats() {
            assert!(run.stderr.contains(format.signature), "{}: {run:?}", format.id);
            assert!(run.stderr.contains(format.description), "{}: {run:?}", format.id);
        }
        assert!(!run.stderr.contains(journal.description), "{run:?}");
    }
    // Nor can it write one.
    let run = stowage(
        &registry,
        &[&"convert", &cache, &dir.path().join("x"), &"--to", &"example-journal"],
    );
    assert_eq!(run.code, 2, "{run:?}");
}
