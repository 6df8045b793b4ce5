//! No write of the Arrow segment backend follows a symbolic link inside a cache; reads do.

#![cfg(unix)]

use stowage_arrow::{ArrowFactory, ArrowOptions};
use stowage_conformance::symlinks::{
    Before, LinkOutcome, check_link_in_cache, check_linked_directory_before_create,
    check_linked_lock_is_refused, check_reads_follow_links,
};

fn factory() -> ArrowFactory {
    ArrowFactory { options: ArrowOptions { flush_every: 2, ..ArrowOptions::default() } }
}

#[test]
fn a_linked_lock_file_is_refused() {
    check_linked_lock_is_refused(&factory()).unwrap();
}

#[test]
fn a_linked_commit_log_is_refused() {
    for before in [Before::Flushed, Before::Finalized] {
        let outcome = check_link_in_cache(&factory(), "stowage.log", before).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{before:?}");
    }
}

#[test]
fn a_linked_segments_directory_is_refused_for_writing() {
    for before in [Before::Flushed, Before::Finalized] {
        let outcome = check_link_in_cache(&factory(), "segments", before).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{before:?}");
    }
    let outcome = check_linked_directory_before_create(&factory(), "segments").unwrap();
    assert_eq!(outcome, LinkOutcome::Refused);
}

#[test]
fn the_marker_is_renamed_over_a_link_never_written_through() {
    for before in [Before::Flushed, Before::Finalized] {
        let outcome = check_link_in_cache(&factory(), "stowage.complete", before).unwrap();
        assert_eq!(outcome, LinkOutcome::Replaced, "{before:?}");
    }
    let outcome = check_link_in_cache(&factory(), "schema.json", Before::Flushed).unwrap();
    assert_eq!(outcome, LinkOutcome::Untouched, "only read");
}

#[test]
fn reads_follow_links() {
    check_reads_follow_links(&factory()).unwrap();
}
