//! No file-safety helper writes through a symbolic link inside a cache: each is pointed at a link
//! to a file outside, which must stay byte for byte as it was.

#![cfg(unix)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use stowage_core::Error;
use stowage_core::file_safety::{
    AppendLog, StagedFiles, WriterLock, atomic_write, create_dir_within, is_refused_symlink,
};

const OUTSIDE: &[u8] = b"a file outside the cache that must not change\n";

/// A cache directory and, elsewhere, a file with known content.
struct Planted {
    cache: tempfile::TempDir,
    _elsewhere: tempfile::TempDir,
    outside: PathBuf,
}

impl Planted {
    fn new() -> Planted {
        let cache = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().join("outside.txt");
        fs::write(&outside, OUTSIDE).unwrap();
        Planted { cache, _elsewhere: elsewhere, outside }
    }

    /// Makes `<cache>/<name>` a link to the outside file; returns the link.
    fn link(&self, name: &str) -> PathBuf {
        let link = self.cache.path().join(name);
        symlink(&self.outside, &link).unwrap();
        link
    }

    fn assert_outside_unchanged(&self) {
        assert_eq!(fs::read(&self.outside).unwrap(), OUTSIDE, "the outside file was written");
    }
}

fn assert_refused(err: &Error, link: &Path) {
    assert!(is_refused_symlink(err), "not a refused link: {err}");
    let text = err.to_string();
    assert!(text.contains(&link.display().to_string()), "the error does not name the link: {text}");
    assert!(text.contains("symbolic link"), "{text}");
}

#[test]
fn the_writer_lock_never_follows_a_link() {
    let planted = Planted::new();
    let link = planted.link(WriterLock::FILE_NAME);
    let err = WriterLock::acquire(planted.cache.path()).unwrap_err();
    assert_refused(&err, &link);
    planted.assert_outside_unchanged();
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays");
}

#[test]
fn an_append_log_never_follows_a_link() {
    for create in [false, true] {
        let planted = Planted::new();
        let link = planted.link("journal.log");
        let err = AppendLog::open(&link, create).unwrap_err();
        assert_refused(&err, &link);
        planted.assert_outside_unchanged();
    }
}

#[test]
fn a_link_to_a_valid_log_is_read_but_not_recovered_through() {
    let planted = Planted::new();
    let real = planted._elsewhere.path().join("real.log");
    let (mut log, _) = AppendLog::open(&real, true).unwrap();
    log.append(b"record").unwrap();
    log.sync().unwrap();
    drop(log);
    fs::OpenOptions::new().append(true).open(&real).unwrap().write_all(b"torn").unwrap();
    let before = fs::read(&real).unwrap();
    let link = planted.cache.path().join("journal.log");
    symlink(&real, &link).unwrap();

    let recovered = AppendLog::read_all(&link).unwrap();
    assert_eq!(recovered.records, vec![b"record".to_vec()], "reads follow links");
    assert_refused(&AppendLog::open(&link, false).unwrap_err(), &link);
    assert_eq!(fs::read(&real).unwrap(), before, "the torn tail was not cut through the link");
}

#[test]
fn creating_a_log_over_a_planted_staging_link_replaces_only_the_link() {
    let planted = Planted::new();
    planted.link(".journal.log.new");
    let path = planted.cache.path().join("journal.log");
    AppendLog::create_new(&path, b"header").unwrap();
    planted.assert_outside_unchanged();
    assert_eq!(AppendLog::read_all(&path).unwrap().records, vec![b"header".to_vec()]);
}

#[test]
fn atomic_write_and_staged_files_replace_a_link_never_its_target() {
    let planted = Planted::new();
    let marker = planted.link("COMPLETE");
    atomic_write(&marker, b"done").unwrap();
    let sidecar = planted.link("part.sums");
    let mut staged = StagedFiles::new(true);
    staged.stage(&sidecar, |out| out.write_all(b"sums")).unwrap();
    staged.publish().unwrap();

    planted.assert_outside_unchanged();
    for (path, content) in [(&marker, &b"done"[..]), (&sidecar, b"sums")] {
        assert!(fs::symlink_metadata(path).unwrap().is_file(), "the link itself was replaced");
        assert_eq!(fs::read(path).unwrap(), content);
    }
}

#[test]
fn a_linked_directory_inside_a_cache_is_refused_for_writing() {
    let planted = Planted::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let segments = planted.cache.path().join("segments");
    symlink(elsewhere.path(), &segments).unwrap();
    let err = create_dir_within(planted.cache.path(), &segments).unwrap_err();
    assert_refused(&err, &segments);
    assert!(fs::read_dir(elsewhere.path()).unwrap().next().is_none());
}

#[test]
fn a_cache_directory_that_is_a_link_is_written_normally() {
    let elsewhere = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    symlink(elsewhere.path(), &cache).unwrap();
    let _lock = WriterLock::acquire(&cache).unwrap();
    let (mut log, _) = AppendLog::open(cache.join("journal.log"), true).unwrap();
    log.append(b"x").unwrap();
    log.sync().unwrap();
    create_dir_within(&cache, &cache.join("segments")).unwrap();
    atomic_write(cache.join("segments/a"), b"a").unwrap();
    assert_eq!(fs::read(elsewhere.path().join("segments/a")).unwrap(), b"a");
    assert!(elsewhere.path().join(WriterLock::FILE_NAME).is_file());
}
