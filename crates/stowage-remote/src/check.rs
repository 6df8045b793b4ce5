//! The checks `validate` makes of a cache's versions, beyond its parts: every version's
//! manifest there and sound, and the advisory `latest` pointer readable.
//!
//! Readers depend on neither older manifests nor the pointer, but damage to them is damage to the
//! cache's history that `verify` must not call clean.

use std::path::Path;

use stowage_core::{Error, Result, ValidationLevel, ValidationReport};

use crate::identity::Identity;
use crate::manifest::Manifest;
use crate::versions::{self, LATEST};
use crate::view::View;

/// Checks the identity object, the version manifests (at `Full`, every one of them; at
/// `Structure`, that versions 1 to the newest are all listed) and the `latest` pointer, adding
/// what is wrong to `report`.
///
/// Errors: the store's, when it cannot be listed at all.
pub fn check_versions(
    view: &View,
    level: ValidationLevel,
    report: &mut ValidationReport,
) -> Result<()> {
    let store = &view.store;
    let url = |name: &str| store.url().object_url(name);
    report.files_checked += 1;
    match Identity::read(store) {
        Ok(Some(identity)) if identity.schema == view.schema => {}
        Ok(Some(_)) => report.problem(
            Some(Path::new(&url(crate::identity::IDENTITY))),
            None,
            "the identity's schema changed since the cache was opened",
        ),
        Ok(None) => report.problem(
            Some(Path::new(&url(crate::identity::IDENTITY))),
            None,
            "the identity object is missing",
        ),
        Err(e) => {
            report.problem(Some(Path::new(&url(crate::identity::IDENTITY))), None, e.to_string())
        }
    }
    // A version newer than this handle's (a writer merged or finalized since it opened) may fold
    // commits this handle does not see: they are visible to any handle opened now.
    let since = match versions::newest(store) {
        Ok(newer) => newer.filter(|m| m.version > view.manifest.as_ref().map_or(0, |v| v.version)),
        Err(e) => {
            report.problem(Some(Path::new(&url("versions"))), None, e.to_string());
            None
        }
    };
    for commit in crate::merge::pending(store, since.as_ref().or(view.manifest.as_ref()))? {
        let name = &commit.reference.name;
        report.problem(
            Some(Path::new(&url(name))),
            None,
            "a commit no version folds in: its samples are durable but not visible; open the \
             cache for writing (or merge) to fold it",
        );
    }
    let Some(newest) = &view.manifest else { return Ok(()) };
    let listed: Vec<u64> = store
        .list("versions")?
        .iter()
        .filter_map(|object| Manifest::version_of(&object.name))
        .collect();
    for version in 1..=newest.version {
        let name = Manifest::name_of(version);
        if !listed.contains(&version) {
            report.problem(
                Some(Path::new(&url(&name))),
                None,
                "this version's manifest is missing",
            );
            continue;
        }
        if level == ValidationLevel::Full && version != newest.version {
            report.files_checked += 1;
            if let Err(e) = versions::read(store, version) {
                report.problem(Some(Path::new(&url(&name))), None, e.to_string());
            }
        }
    }
    report.files_checked += 1;
    let pointer = match store.get_at_most(LATEST, 64) {
        Ok(bytes) => pointer_problem(&bytes, &listed),
        Err(Error::NotFound { .. }) => Some("the advisory pointer is missing".to_owned()),
        Err(e) => Some(e.to_string()),
    };
    if let Some(detail) = pointer {
        let detail = format!(
            "{detail} (readers do not depend on it; the next version a writer creates rewrites it)"
        );
        report.problem(Some(Path::new(&url(LATEST))), None, detail);
    }
    Ok(())
}

/// What is wrong with the `latest` pointer's `bytes`, given the versions listed: it must be a
/// version number and a newline, naming a version that exists.
fn pointer_problem(bytes: &[u8], listed: &[u64]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok();
    let version = text
        .and_then(|t| t.strip_suffix('\n'))
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse::<u64>().ok());
    match version {
        None => Some(format!(
            "the advisory pointer holds {:?}, not a version number",
            String::from_utf8_lossy(bytes)
        )),
        Some(v) if !listed.contains(&v) => {
            Some(format!("the advisory pointer names version {v}, which does not exist"))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pointer_must_name_an_existing_version() {
        assert_eq!(pointer_problem(b"2\n", &[1, 2]), None);
        for bad in [&b"2"[..], b"", b"\n", b"x\n", b"3\n", b"2\n\n"] {
            assert!(pointer_problem(bad, &[1, 2]).is_some(), "{bad:?}");
        }
    }
}
