//! No write of the memmap row backend follows a symbolic link inside a cache; reads do.
//!
//! The hostile review's case: a `.bin` field file that is a link was truncated and appended to
//! on resume.

#![cfg(unix)]

use stowage_conformance::symlinks::{
    Before, LinkOutcome, check_link_in_cache, check_linked_lock_is_refused,
    check_reads_follow_links,
};
use stowage_memmap::MemmapFactory;

fn factory() -> MemmapFactory {
    MemmapFactory::default()
}

#[test]
fn a_linked_lock_file_is_refused() {
    check_linked_lock_is_refused(&factory()).unwrap();
}

#[test]
fn a_linked_field_file_is_refused_on_resume() {
    let outcome = check_link_in_cache(&factory(), "x.bin", Before::Flushed).unwrap();
    assert_eq!(outcome, LinkOutcome::Refused);
}

#[test]
fn a_linked_manifest_and_checksum_file_are_refused_on_resume() {
    for file in ["manifest.jsonl", "stowage_checksums.bin"] {
        let outcome = check_link_in_cache(&factory(), file, Before::Flushed).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{file}");
    }
}

#[test]
fn files_finalize_renames_over_replace_the_link_never_its_target() {
    // Written whole at finalize under a temporary name and renamed over the link; a dangling
    // link's target is never created.
    for file in ["_COMPLETE", "index.parquet", "shapes.json", "fingerprint.json"] {
        let outcome = check_link_in_cache(&factory(), file, Before::Flushed).unwrap();
        assert_eq!(outcome, LinkOutcome::Replaced, "{file}");
    }
}

#[test]
fn reads_follow_links() {
    check_reads_follow_links(&factory()).unwrap();
}
