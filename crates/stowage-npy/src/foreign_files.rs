//! Collection files another writer (hangar) added to a cache: found by `validate` and reported as
//! unchecked, never as a problem and never silently.
//!
//! A file is stowage's when `owned_files.log` claims it or a record of `records.log` points into
//! it ([`crate::ownership`]); every other `data/10/<uid>.npy` was written by someone else. stowage
//! reads such files only through the records that address them, which hangar keeps in its own
//! record database (LMDB), outside the cache.

use crate::NpyBackend;
use crate::backend::same_storage;
use crate::collection::CollectionFile;
use crate::layout::{CommitMarker, Layout};
use crate::ownership;
use crate::record::is_valid_uid;
use crate::validate::strip_path;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use stowage_core::{
    Error, FieldKind, IoResultExt, Reader, Result, ShapeRule, Unchecked, ValidationReport, shape,
};

/// Adds to `report` every collection file of the cache that stowage did not write, as
/// [`Unchecked`], and any damage of `owned_files.log` (or a `data/10` that cannot be listed) as a
/// problem.
pub(crate) fn report_unchecked(backend: &NpyBackend, report: &mut ValidationReport) {
    let layout = backend.layout();
    // Listed before the claims are read: a writer claims a uid before it creates the file, so
    // every file in this listing that a concurrent writer made is claimed in the read after it.
    let listed = match collection_uids(layout) {
        Ok(listed) => listed,
        Err(e) => {
            report.problem(Some(&layout.data_dir()), None, format!("cannot be listed: {e}"));
            return;
        }
    };
    let log = layout.owned_files_log();
    let claims = match ownership::read_claims(layout) {
        Ok(claims) => claims,
        Err(e) => {
            report.problem(Some(&log), None, strip_path(&e));
            ownership::Claims::default()
        }
    };
    if let Some(damage) = &claims.damage
        && (damage.is_mid_log() || backend.is_finalized())
    {
        report.problem(
            Some(&log),
            None,
            format!("{damage}: files claimed after it are reported as another writer's"),
        );
    }
    if backend.is_finalized()
        && let Ok(Some(marker)) = CommitMarker::read(&layout.complete_marker())
        && let Some(want) = marker.owned_files_records
        && claims.records != Some(want)
    {
        let found = claims.records.map_or("no log".to_owned(), |n| format!("{n} records"));
        report.problem(
            Some(&log),
            None,
            format!("{found}, _COMPLETE says the finalized cache's log holds {want}"),
        );
    }
    let index = backend.index();
    for uid in listed {
        if claims.uids.contains(&uid) || index.file_id(&uid).is_some() {
            continue;
        }
        report.unchecked.push(describe(backend, &uid));
    }
}

/// The uids of every `data/10/<uid>.npy` that is not a directory, sorted.
fn collection_uids(layout: &Layout) -> Result<BTreeSet<String>> {
    let dir = layout.data_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut uids = BTreeSet::new();
    for entry in entries {
        let entry = entry.at(&dir)?;
        let name = entry.file_name();
        let Some(uid) = name.to_str().and_then(|n| n.strip_suffix(".npy")) else { continue };
        if is_valid_uid(uid) && !entry.file_type().at(entry.path())?.is_dir() {
            uids.insert(uid.to_owned());
        }
    }
    Ok(uids)
}

/// How hangar sees a collection file: by its marker.
enum HangarState {
    Committed,
    Staged,
    Fetched,
    Unmarked,
}

impl HangarState {
    fn of(layout: &Layout, uid: &str) -> HangarState {
        let exists = |p: PathBuf| std::fs::symlink_metadata(p).is_ok();
        if exists(layout.store_marker(uid)) {
            HangarState::Committed
        } else if exists(layout.stage_marker(uid)) {
            HangarState::Staged
        } else if exists(layout.remote_dir().join(format!("{uid}.npy"))) {
            HangarState::Fetched
        } else {
            HangarState::Unmarked
        }
    }
}

fn describe(backend: &NpyBackend, uid: &str) -> Unchecked {
    let layout = backend.layout();
    let path = layout.data_file(uid);
    let state = HangarState::of(layout, uid);
    let (writer, seen_as) = match state {
        HangarState::Committed => ("hangar", "committed (a marker in store_data/10)"),
        HangarState::Staged => ("hangar", "staged (a marker in stage_data/10)"),
        HangarState::Fetched => ("hangar", "fetched from a remote (a marker in remote_data/10)"),
        HangarState::Unmarked => (
            "another writer",
            "absent: the file has no marker, so hangar 0.5.2 does not read it (it raises KeyError)",
        ),
    };
    let how = match state {
        HangarState::Unmarked => "`NpyBackend::read_record`".to_owned(),
        _ => format!(
            "`stowage get {} --record REC` or `NpyBackend::read_record`",
            layout.root().display()
        ),
    };
    let next_step = format!(
        "the records that address its samples are kept by their writer (hangar keeps them in \
         its LMDB record database), not in this cache. The file holds {}; hangar sees it as \
         {seen_as}. Read each sample through its record with {how}, which checks the xxh64 the \
         record carries. stowage never changes, moves or deletes this file or its markers",
        contents(backend, &path)
    );
    Unchecked { path, writer: writer.into(), samples: 0, next_step }
}

/// What the file's header says, and which field of the cache has that layout.
fn contents(backend: &NpyBackend, path: &Path) -> String {
    let file = match CollectionFile::open(path) {
        Ok(file) => file,
        Err(e) => return format!("a header stowage cannot read ({})", strip_path(&e)),
    };
    let header = file.header();
    let field = backend.schema().fields.iter().find(|f| match &f.kind {
        FieldKind::Tensor { dtype, shape: ShapeRule::Fixed(dims) | ShapeRule::Max(dims) } => {
            same_storage(&header.descr, *dtype) && file.slot_shape() == dims.as_slice()
        }
        _ => false,
    });
    let layout = match field {
        Some(field) => format!("the layout of field {:?}", field.name),
        None => "a layout no field of this cache has".to_owned(),
    };
    format!(
        "{} slots of {} {} ({layout})",
        file.rows(),
        header.descr,
        shape::display(file.slot_shape())
    )
}
