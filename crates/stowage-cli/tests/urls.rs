//! Every command takes a URL wherever it takes a cache path, when a registered backend serves the
//! URL's scheme: here a test backend serving `mem-test://NAME`, which keeps each cache in a
//! directory of its own outside the working directory (stowage-example's journal backend
//! underneath). A URL is never looked at on the local file system: were one taken for the
//! relative path `mem-test:/NAME`, it would be missing there, or created there, and these tests
//! would see it. A URL no backend serves is refused by name.

mod common;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use common::{
    JOURNAL_KEYS as KEYS, Run, assert_holds_every_sample, build_journal, journal_key as key,
    mixed_sample, mixed_schema,
};
use stowage_core::{
    Backend, BackendFactory, Capabilities, DynBackend, Error, Format, OpenMode, Reader, Registry,
    Result, Schema,
};
use stowage_example::JournalFactory;

/// The format of a journal cache at a `mem-test://` URL.
const MEM_JOURNAL: Format = Format {
    id: "mem-test-journal",
    description: "journal cache at a mem-test:// URL",
    signature: "mem-test://NAME",
};

/// Serves `mem-test://NAME` as the journal cache in `root/NAME`; takes no local path.
struct MemJournal {
    root: PathBuf,
}

impl MemJournal {
    /// The directory behind `url`; an error for anything but a `mem-test://` URL, which a
    /// registry never gives this factory.
    fn dir(&self, url: &Path) -> Result<PathBuf> {
        let text = url.to_str().unwrap_or_default();
        match text.split_once("://") {
            Some((scheme, name)) if scheme.eq_ignore_ascii_case("mem-test") && !name.is_empty() => {
                Ok(self.root.join(name))
            }
            _ => Err(Error::unsupported("mem-journal", format!("{text} is not a mem-test:// URL"))),
        }
    }
}

impl BackendFactory for MemJournal {
    fn name(&self) -> &'static str {
        "mem-journal"
    }

    fn capabilities(&self) -> Capabilities {
        JournalFactory.capabilities()
    }

    fn formats(&self) -> &'static [Format] {
        std::slice::from_ref(&MEM_JOURNAL)
    }

    fn url_schemes(&self) -> &'static [&'static str] {
        &["mem-test"]
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        if stowage_core::location::url_scheme(path).is_none() {
            return Ok(None); // A local path is never one of its caches.
        }
        let found = JournalFactory.recognize(&self.dir(path)?)?;
        Ok(found.map(|_| &MEM_JOURNAL))
    }

    fn create(&self, url: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        JournalFactory.create(&self.dir(url)?, schema)
    }

    fn open(&self, url: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let dir = self.dir(url)?;
        if !dir.exists() {
            return Err(Error::NotFound { what: format!("no cache at {}", url.display()) });
        }
        JournalFactory.open(&dir, mode)
    }
}

/// A `stowage` built with the built-in backends, the journal backend, and [`MemJournal`] serving
/// `mem-test://` from `root`.
fn registry(root: &Path) -> Registry {
    stowage_cli::default_registry()
        .with(JournalFactory)
        .with(MemJournal { root: root.to_path_buf() })
}

/// Runs `stowage ARGS` on `registry`, capturing both outputs, and checks that nothing named like
/// a URL's scheme appeared in the working directory.
fn stowage(registry: &Registry, parts: &[&dyn AsRef<OsStr>]) -> Run {
    let mut argv = vec![OsString::from("stowage")];
    argv.extend(parts.iter().map(|p| p.as_ref().to_os_string()));
    let run = common::stowage_in(registry, argv.clone());
    for taken in ["mem-test:", "s3:", "gs:", "hdfs:"] {
        assert!(!Path::new(taken).exists(), "stowage {argv:?} created {taken} in the working dir");
    }
    run
}

/// `root` for a test's URLs and `work` for its local caches, both temporary.
fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
}

#[test]
fn inspect_verify_keys_and_get_read_a_cache_at_a_url() {
    let (root, work) = dirs();
    let registry = registry(root.path());
    let cache = build_journal(work.path());
    let url = "mem-test://copy";
    let run = stowage(&registry, &[&"convert", &cache, &url, &"--to", &"mem-journal"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(root.path().join("copy/journal.log").is_file(), "the backend wrote it: {run:?}");

    let run = stowage(&registry, &[&"inspect", &url]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout.lines().next(),
        Some(format!("{url}: {}", MEM_JOURNAL.description)).as_deref()
    );
    for line in [format!("keys:        {KEYS}"), "integrity:   clean".to_owned()] {
        assert!(run.stdout.lines().any(|l| l.starts_with(&line)), "no {line:?}: {run:?}");
    }
    assert!(run.stdout.contains("files:       not listed (a cache at a URL"), "{run:?}");
    let run = stowage(&registry, &[&"inspect", &"--json", &url]);
    assert_eq!(run.code, 0, "{run:?}");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!((&report["path"], &report["kind"]), (&url.into(), &MEM_JOURNAL.id.into()));
    assert_eq!(report["files"], serde_json::json!([]), "{report}");

    let run = stowage(&registry, &[&"verify", &url]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.trim_end().ends_with(": clean"), "{run:?}");

    let run = stowage(&registry, &[&"keys", &url]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), (0..KEYS).map(key).collect::<Vec<_>>());

    let out = work.path().join("k01");
    let run = stowage(&registry, &[&"get", &url, &key(1), &"--out", &out]);
    assert_eq!(run.code, 0, "{run:?}");
    let x = std::fs::read(out.join("x.npy")).unwrap();
    let stowage_core::Value::Tensor(want) = mixed_sample(1).get("x").unwrap().clone() else {
        panic!("x is a tensor")
    };
    assert!(x.ends_with(want.bytes()), "{run:?}");

    // Where the backend finds no cache: not found, naming the URL.
    let run = stowage(&registry, &[&"keys", &"mem-test://missing"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("no stowage cache at mem-test://missing"), "{run:?}");
    assert!(run.stderr.contains("mem-journal"), "{run:?}");
}

#[test]
fn convert_goes_from_a_path_to_a_url_and_back_and_resumes_at_the_url() {
    let (root, work) = dirs();
    let registry = registry(root.path());
    let cache = build_journal(work.path());
    let url = "mem-test://copy";
    let run = stowage(&registry, &[&"convert", &cache, &url, &"--to", &"mem-journal", &"--verify"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(&format!("converted {KEYS} samples")), "{run:?}");
    assert!(
        run.stdout.contains(&format!("verified {KEYS} samples read back from {url}: identical"))
    );
    let mem = MemJournal { root: root.path().to_path_buf() };
    assert_holds_every_sample(&mem, Path::new(url));

    // Back from the URL into a local cache of another backend, and into the journal again.
    for (to, name) in [("arrow", "as-arrow"), ("example-journal", "back")] {
        let back = work.path().join(name);
        let run = stowage(&registry, &[&"convert", &url, &back, &"--to", &to, &"--verify"]);
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains(&format!("from {url} ({})", MEM_JOURNAL.description)));
        match to {
            "arrow" => assert_holds_every_sample(&stowage_arrow::ArrowFactory::default(), &back),
            _ => assert_holds_every_sample(&JournalFactory, &back),
        }
        // The local target records the URL as its source, so a rerun resumes it.
        let run = stowage(&registry, &[&"convert", &url, &back, &"--to", &to]);
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("converted 0 samples"), "{run:?}");
    }

    // Run again into the URL: nothing left to copy.
    let run = stowage(&registry, &[&"convert", &cache, &url, &"--to", &"mem-journal"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("converted 0 samples"), "{run:?}");
    assert!(run.stdout.contains(&format!("{KEYS} keys already in the target skipped")), "{run:?}");

    // An interrupted conversion at a URL (4 keys flushed, never finalized) is resumed through the
    // backend's append-open.
    let partial = "mem-test://partial";
    let mut target = mem.create(Path::new(partial), &mixed_schema()).unwrap();
    for i in 0..4 {
        target.put(&key(i), &mixed_sample(i)).unwrap();
    }
    target.flush().unwrap();
    drop(target);
    let run = stowage(&registry, &[&"convert", &cache, &partial, &"--to", &"mem-journal"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains(&format!("converted {} samples", KEYS - 4)), "{run:?}");
    assert!(run.stdout.contains("(4 keys already in the target skipped)"), "{run:?}");
    assert!(run.stderr.contains("keeps no record of its source"), "{run:?}");
    assert_holds_every_sample(&mem, Path::new(partial));
    assert!(mem.open(Path::new(partial), OpenMode::ReadOnly).unwrap().is_finalized());
}

#[test]
fn a_url_no_backend_serves_is_refused_by_name_and_nothing_is_created() {
    let (root, work) = dirs();
    let registry = registry(root.path());
    let cache = build_journal(work.path());

    // No registered backend serves hdfs://: refused, naming the schemes that are served.
    let hdfs = "hdfs://bucket/cache";
    for parts in [
        &[&"convert" as &dyn AsRef<OsStr>, &cache, &hdfs, &"--to", &"mem-journal"][..],
        &[&"convert", &hdfs, &work.path().join("out"), &"--to", &"arrow"],
        &[&"inspect", &hdfs],
        &[&"verify", &hdfs],
        &[&"keys", &hdfs],
        &[&"get", &hdfs, &"k00", &"--out", &work.path().join("o")],
        &[&"explain", &hdfs, &"--config", &work.path().join("config.json")],
    ] {
        let run = stowage(&registry, parts);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("hdfs://bucket/cache is a URL (hdfs://)"), "{run:?}");
        assert!(run.stderr.contains("they serve s3://") && run.stderr.contains("mem-test://"));
    }
    assert!(!work.path().join("out").exists() && !work.path().join("o").exists());

    // A backend that does not serve the scheme is not handed the URL: the error names it, the
    // URL and what it serves, and nothing is created anywhere.
    for to in ["arrow", "example-journal"] {
        let run = stowage(&registry, &[&"convert", &cache, &"mem-test://never", &"--to", &to]);
        assert_eq!(run.code, 2, "{run:?}");
        let named =
            format!("a cache at mem-test://never (mem-test://): the {to} backend serves no URLs");
        assert!(run.stderr.contains(&named), "{run:?}");
    }
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "nothing at any URL");

    // A registry of local backends alone serves no URL at all.
    let local_only = Registry::new().with(JournalFactory);
    let run = stowage(&local_only, &[&"keys", &"mem-test://copy"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("no registered backend serves URLs"), "{run:?}");
}

#[test]
fn the_commands_of_local_files_refuse_a_url_naming_it() {
    let (root, work) = dirs();
    let registry = registry(root.path());
    let url = "mem-test://copy";
    let run = stowage(
        &registry,
        &[&"convert", &build_journal(work.path()), &url, &"--to", &"mem-journal"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    for (parts, needle) in [
        (&[&"adopt" as &dyn AsRef<OsStr>, &url][..], "`stowage adopt` checksums"),
        (&[&"compact", &url], "`stowage compact` rewrites"),
        (&[&"get", &url, &"--record", &"10:abcd:0:0:1", &"--out", &"o.npy"], "--record reads"),
    ] {
        let run = stowage(&registry, parts);
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains(&format!("{url} is a URL (mem-test://)")), "{run:?}");
        assert!(run.stderr.contains(needle) && run.stderr.contains("local path only"), "{run:?}");
    }
    // Output paths are local files: a URL there would become a directory `s3:`.
    let run = stowage(&registry, &[&"get", &url, &"k00", &"--out", &"s3://bucket/out"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("s3://bucket/out is a URL (s3://): this writes local files"));
    let run = stowage(&registry, &[&"bench", &"--dir", &"gs://bucket/bench"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("gs://bucket/bench is a URL (gs://)"), "{run:?}");
}

#[test]
fn the_help_says_which_urls_a_cache_argument_takes() {
    let (root, _work) = dirs();
    let run = stowage(&registry(root.path()), &[&"--help"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("Caches at URLs"), "{run:?}");
    assert!(run.stdout.contains("  mem-journal: mem-test://"), "{run:?}");
    let run = stowage(&Registry::new().with(JournalFactory), &[&"--help"]);
    assert!(run.stdout.contains("Caches at URLs: none"), "{run:?}");
    let run = stowage(&registry(root.path()), &[&"keys", &"--help"]);
    assert!(run.stdout.contains("path or URL"), "{run:?}");
}
