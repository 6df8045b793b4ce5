//! No write of the example journal backend follows a symbolic link inside a cache; reads do.

#![cfg(unix)]

use stowage_conformance::symlinks::{
    Before, LinkOutcome, check_link_in_cache, check_linked_lock_is_refused,
    check_reads_follow_links,
};
use stowage_example::JournalFactory;

#[test]
fn a_linked_lock_file_is_refused() {
    check_linked_lock_is_refused(&JournalFactory).unwrap();
}

#[test]
fn a_linked_journal_is_refused_on_resume() {
    let outcome = check_link_in_cache(&JournalFactory, "journal.log", Before::Flushed).unwrap();
    assert_eq!(outcome, LinkOutcome::Refused);
}

#[test]
fn the_marker_is_renamed_over_a_link_never_written_through() {
    let outcome =
        check_link_in_cache(&JournalFactory, "journal.complete", Before::Flushed).unwrap();
    assert_eq!(outcome, LinkOutcome::Replaced);
}

#[test]
fn reads_follow_links() {
    check_reads_follow_links(&JournalFactory).unwrap();
}
