//! No write of the HDF5 backends follows a symbolic link inside a cache; reads do.
//!
//! libhdf5 creates files by path, following links: stowage builds each file under a temporary
//! name it created itself (`O_EXCL`, `O_NOFOLLOW`), checks that name right before libhdf5
//! creates it, and renames the result into place, which replaces a link rather than following it.

#![cfg(unix)]

mod common;

use common::{compat, features, write_plain_dataset};
use stowage_conformance::symlinks::{
    Before, LinkOutcome, check_link_in_cache, check_linked_directory_before_create,
    check_linked_lock_is_refused, check_reads_follow_links,
};
use stowage_hdf5::{CacheSections, Hdf5Factory, StorageDtype, TorchCache, TorchCacheWriter};

#[test]
fn a_linked_lock_file_is_refused() {
    check_linked_lock_is_refused(&Hdf5Factory).unwrap();
}

#[test]
fn a_linked_commit_log_is_refused() {
    for before in [Before::Flushed, Before::Finalized] {
        let outcome = check_link_in_cache(&Hdf5Factory, "stowage.log", before).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{before:?}");
    }
}

#[test]
fn a_linked_segments_directory_is_refused_for_writing() {
    for before in [Before::Flushed, Before::Finalized] {
        let outcome = check_link_in_cache(&Hdf5Factory, "segments", before).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{before:?}");
    }
    let outcome = check_linked_directory_before_create(&Hdf5Factory, "segments").unwrap();
    assert_eq!(outcome, LinkOutcome::Refused);
}

#[test]
fn the_marker_is_renamed_over_a_link_never_written_through() {
    for before in [Before::Flushed, Before::Finalized] {
        let outcome = check_link_in_cache(&Hdf5Factory, "stowage.complete", before).unwrap();
        assert_eq!(outcome, LinkOutcome::Replaced, "{before:?}");
    }
}

#[test]
fn reads_follow_links() {
    check_reads_follow_links(&Hdf5Factory).unwrap();
}

/// An aenet dataset file that is a link: the cache is built beside it and renamed over the link
/// (the link is replaced by the new file); the file it pointed to is never written.
#[test]
fn a_linked_dataset_file_is_replaced_never_written_through() {
    let (dir, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let real = elsewhere.path().join("dataset.h5");
    write_plain_dataset(&real);
    let before = std::fs::read(&real).unwrap();
    let link = dir.path().join("dataset.h5");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    let mut writer =
        TorchCacheWriter::create(&link, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    writer.add_features(0, &features(0)).unwrap();
    writer.finish().unwrap();

    assert_eq!(std::fs::read(&real).unwrap(), before, "the linked file is unchanged");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_file(), "the link was replaced");
    let cache = TorchCache::open(&link).unwrap().expect("a cache");
    assert_eq!(cache.features_as(0, StorageDtype::Float64).unwrap().unwrap(), features(0));
}
