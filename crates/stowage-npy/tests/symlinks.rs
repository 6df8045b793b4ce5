//! No write of the NUMPY_10 backend follows a symbolic link inside a cache; reads do.

#![cfg(unix)]

use stowage_conformance::symlinks::{
    Before, LinkOutcome, check_link_in_cache, check_link_in_cache_at, check_linked_lock_is_refused,
    check_reads_follow_links,
};
use stowage_npy::{NpyFactory, NpyOptions};

fn factory() -> NpyFactory {
    NpyFactory { options: NpyOptions { collection_size: 2, ..NpyOptions::default() } }
}

/// The uid of a collection file the cache's records point into.
fn first_uid(cache: &std::path::Path) -> Result<String, String> {
    let mut names: Vec<String> = std::fs::read_dir(cache.join("data/10"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let name = names.first().ok_or("no collection file")?;
    Ok(name.trim_end_matches(".npy").to_owned())
}

#[test]
fn a_linked_lock_file_is_refused() {
    check_linked_lock_is_refused(&factory()).unwrap();
}

#[test]
fn linked_logs_are_refused_on_resume() {
    for log in ["records.log", "owned_files.log"] {
        let outcome = check_link_in_cache(&factory(), log, Before::Flushed).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{log}");
    }
}

#[test]
fn linked_directories_are_refused() {
    for dir in ["data", "data/10", "stage_data/10", "store_data", "store_data/10"] {
        let outcome = check_link_in_cache(&factory(), dir, Before::Flushed).unwrap();
        assert_eq!(outcome, LinkOutcome::Refused, "{dir}");
    }
}

#[test]
fn a_linked_store_marker_is_refused_at_finalize() {
    let outcome = check_link_in_cache_at(&factory(), Before::Flushed, |cache| {
        Ok(format!("store_data/10/{}.npy", first_uid(cache)?))
    })
    .unwrap();
    assert_eq!(outcome, LinkOutcome::Refused);
}

#[test]
fn files_replaced_by_rename_or_only_read_never_change_the_outside_file() {
    // `_COMPLETE` is renamed over (the link itself is replaced); `stowage.json` and the data
    // files of earlier sessions are only read.
    assert_eq!(
        check_link_in_cache(&factory(), "_COMPLETE", Before::Flushed).unwrap(),
        LinkOutcome::Replaced
    );
    assert_eq!(
        check_link_in_cache(&factory(), "stowage.json", Before::Flushed).unwrap(),
        LinkOutcome::Untouched
    );
    check_link_in_cache_at(&factory(), Before::Flushed, |cache| {
        Ok(format!("data/10/{}.npy", first_uid(cache)?))
    })
    .unwrap();
}

#[test]
fn reads_follow_links() {
    check_reads_follow_links(&factory()).unwrap();
}
